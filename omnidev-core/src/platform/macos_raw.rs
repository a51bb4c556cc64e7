//! The platform-independent half of the macOS side: how the raw answers of
//! `sysctl(KERN_PROC)`, `KERN_PROCARGS2` and `proc_pidfdinfo` become
//! omnidev's values. Compiled on macOS, and for the tests everywhere, so
//! that the decisions the macOS code feeds are checked on Linux too.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// `p_stat` of a zombie (`SZOMB` in `<sys/proc.h>`).
const SZOMB: i8 = 5;

/// A `p_stat` value as the state letter Linux would show: `I` (being
/// created, `SIDL`), `R` (`SRUN`), `S` (`SSLEEP`), `T` (`SSTOP`), `Z`
/// (`SZOMB`), `?` for anything else.
pub(super) fn state_letter(p_stat: i8) -> char {
    match p_stat {
        1 => 'I',
        2 => 'R',
        3 => 'S',
        4 => 'T',
        SZOMB => 'Z',
        _ => '?',
    }
}

/// A start time (`p_starttime`: seconds and microseconds since the
/// epoch) as one number of microseconds; `None` for a negative time.
pub(super) fn start_time(seconds: i64, micros: i32) -> Option<u64> {
    let seconds = u64::try_from(seconds).ok()?;
    let micros = u64::try_from(micros).ok()?;
    seconds.checked_mul(1_000_000)?.checked_add(micros)
}

/// What `KERN_PROCARGS2` returns for a process: its arguments and its
/// environment as they were at `exec`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ProcArgs<'a> {
    /// `argv`, `argv[0]` first.
    pub(super) args: Vec<&'a [u8]>,
    /// `NAME=value` strings.
    pub(super) env: Vec<&'a [u8]>,
}

/// Parses a `KERN_PROCARGS2` buffer: `argc` as a native-endian 32-bit
/// integer, the executable's path and the NUL padding after it, `argc`
/// NUL-terminated arguments, then the NUL-terminated environment up to an
/// empty string or the end (after which the kernel may put the `apple`
/// strings, which are not the environment and are not read). `None` when
/// the buffer is shorter than it says.
pub(super) fn parse_procargs(buffer: &[u8]) -> Option<ProcArgs<'_>> {
    let argc = i32::from_ne_bytes(buffer.get(..4)?.try_into().ok()?);
    let argc = usize::try_from(argc).ok()?;
    let rest = buffer.get(4..)?;
    // The executable path, then NULs up to the first argument.
    let path_end = rest.iter().position(|&b| b == 0)?;
    let mut rest = &rest[path_end..];
    let first = rest.iter().position(|&b| b != 0).unwrap_or(rest.len());
    rest = &rest[first..];
    let mut strings = rest.split(|&b| b == 0);
    let mut args = Vec::with_capacity(argc.min(4096));
    for _ in 0..argc {
        args.push(strings.next()?);
    }
    let env = strings.take_while(|s| !s.is_empty()).collect();
    Some(ProcArgs { args, env })
}

impl ProcArgs<'_> {
    /// The value of variable `name`, lossy UTF-8.
    pub(super) fn var(&self, name: &str) -> Option<String> {
        self.env.iter().find_map(|var| {
            var.strip_prefix(name.as_bytes())?
                .strip_prefix(b"=")
                .map(|value| String::from_utf8_lossy(value).into_owned())
        })
    }

    /// The arguments joined by spaces, lossy UTF-8.
    pub(super) fn command_line(&self) -> String {
        let joined: Vec<u8> = self.args.join(&b' ');
        String::from_utf8_lossy(&joined).trim().to_owned()
    }
}

/// `insi_vflag` bits: the socket has an IPv4 or an IPv6 address.
const INI_IPV4: u8 = 0x1;
const INI_IPV6: u8 = 0x2;

/// A socket's local address from `in_sockinfo`: `vflag`, the IPv4 address
/// as stored (network byte order in a `u32`), and the IPv6 one. An IPv6
/// socket (dual-stack ones included) has its IPv6 address.
pub(super) fn socket_address(vflag: u8, v4_network_order: u32, v6: [u8; 16]) -> Option<IpAddr> {
    if vflag & INI_IPV6 != 0 {
        Some(IpAddr::V6(Ipv6Addr::from(v6)))
    } else if vflag & INI_IPV4 != 0 {
        Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(v4_network_order))))
    } else {
        None
    }
}

/// A port as `in_sockinfo` stores it: network byte order in the low 16
/// bits of an `int`.
pub(super) fn socket_port(network_order: i32) -> u16 {
    u16::from_be((network_order & 0xffff) as u16)
}

/// Whether a `tcpsi_state` is that of a listening socket (`TSI_S_LISTEN`,
/// 1; 4 is an established connection).
pub(super) fn is_listening(tcpsi_state: i32) -> bool {
    tcpsi_state == 1
}

/// Mach time units (what `proc_taskinfo` counts CPU time in on Apple
/// silicon) as nanoseconds, with the timebase `numer / denom`.
pub(super) fn mach_to_nanos(units: u64, numer: u32, denom: u32) -> u64 {
    if denom == 0 {
        return units;
    }
    let nanos = u128::from(units) * u128::from(numer) / u128::from(denom);
    u64::try_from(nanos).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `KERN_PROCARGS2` buffer as the kernel lays it out.
    fn procargs(path: &str, args: &[&str], env: &[&str], trailer: &[&str]) -> Vec<u8> {
        let mut buffer = i32::try_from(args.len()).expect("argc").to_ne_bytes().to_vec();
        buffer.extend_from_slice(path.as_bytes());
        // The path is padded with NULs to a word boundary.
        buffer.extend_from_slice(&[0; 5]);
        for s in args.iter().chain(env) {
            buffer.extend_from_slice(s.as_bytes());
            buffer.push(0);
        }
        buffer.push(0);
        for s in trailer {
            buffer.extend_from_slice(s.as_bytes());
            buffer.push(0);
        }
        buffer
    }

    #[test]
    fn procargs_give_arguments_and_environment() {
        let buffer = procargs(
            "/usr/bin/python3",
            &["python3", "-m", "http.server"],
            &["PATH=/usr/bin", "OMNIDEV_SERVICE_ID=9.1.0.2", "EMPTY="],
            &["executable_path=/usr/bin/python3", "ptr_munge="],
        );
        let parsed = parse_procargs(&buffer).expect("parses");
        assert_eq!(parsed.command_line(), "python3 -m http.server");
        assert_eq!(parsed.var("OMNIDEV_SERVICE_ID").as_deref(), Some("9.1.0.2"));
        assert_eq!(parsed.var("EMPTY").as_deref(), Some(""));
        assert_eq!(parsed.var("PATH").as_deref(), Some("/usr/bin"));
        assert_eq!(parsed.var("PAT"), None, "a prefix of a name is not it");
        assert_eq!(
            parsed.var("executable_path"),
            None,
            "the apple strings after the environment are not variables"
        );
    }

    #[test]
    fn truncated_or_empty_procargs() {
        let buffer = procargs("/bin/sh", &["sh", "-c", "x"], &[], &[]);
        assert!(parse_procargs(&buffer[..3]).is_none(), "no argc");
        // Cut inside the arguments: fewer than argc of them.
        let cut = buffer.len() - 8;
        assert!(parse_procargs(&buffer[..cut]).is_none());
        let parsed = parse_procargs(&buffer).expect("parses");
        assert!(parsed.env.is_empty());
        assert_eq!(parsed.args.len(), 3);
        // A negative argc is nonsense.
        let mut bad = buffer.clone();
        bad[..4].copy_from_slice(&(-1i32).to_ne_bytes());
        assert!(parse_procargs(&bad).is_none());
    }

    #[test]
    fn states_and_start_times() {
        assert_eq!(state_letter(5), 'Z');
        assert_eq!(state_letter(2), 'R');
        assert_eq!(state_letter(3), 'S');
        assert_eq!(state_letter(9), '?');
        assert_eq!(start_time(1_700_000_000, 250_000), Some(1_700_000_000_250_000));
        assert!(start_time(1, 2) < start_time(1, 3), "microseconds count");
        assert_eq!(start_time(-1, 0), None);
    }

    #[test]
    fn socket_addresses_and_ports_in_network_order() {
        // 127.0.0.1 as the kernel stores it: the bytes 7f 00 00 01 in memory.
        let loopback = u32::from_ne_bytes([127, 0, 0, 1]);
        assert_eq!(
            socket_address(INI_IPV4, loopback, [0; 16]),
            Some(IpAddr::V4(Ipv4Addr::LOCALHOST))
        );
        assert_eq!(
            socket_address(INI_IPV6, 0, Ipv6Addr::LOCALHOST.octets()),
            Some(IpAddr::V6(Ipv6Addr::LOCALHOST))
        );
        assert_eq!(
            socket_address(INI_IPV4 | INI_IPV6, 0, [0; 16]),
            Some(IpAddr::V6(Ipv6Addr::UNSPECIFIED)),
            "a dual-stack wildcard"
        );
        assert_eq!(socket_address(0, loopback, [0; 16]), None);
        // Port 6767 (0x1A6F) in network order in the low half of an int.
        let stored = i32::from(u16::from_ne_bytes([0x1A, 0x6F]));
        assert_eq!(socket_port(stored), 6767);
        assert!(is_listening(1));
        assert!(!is_listening(4), "established");
        assert!(!is_listening(0), "closed");
    }

    #[test]
    fn mach_time_scales_by_the_timebase() {
        // Apple silicon: 125/3 ns per unit; Intel: 1/1.
        assert_eq!(mach_to_nanos(24_000_000, 125, 3), 1_000_000_000);
        assert_eq!(mach_to_nanos(7, 1, 1), 7);
        assert_eq!(mach_to_nanos(7, 1, 0), 7, "no timebase: as given");
        assert_eq!(mach_to_nanos(u64::MAX, 125, 3), u64::MAX);
    }
}

//! TCP listeners from `/proc/net/tcp` and `/proc/net/tcp6`, and the
//! sockets a process holds (`/proc/<pid>/fd`): enough to tell whose process
//! listens on a port.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The kernel's state number of a listening TCP socket.
const LISTEN: u8 = 0x0A;

/// At most this many sockets are read from one table (a bound on an
/// external value; a busy machine has a few thousand).
const MAX_SOCKETS: usize = 1 << 20;

/// One row of `/proc/net/tcp{,6}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpSocket {
    /// The local address.
    pub address: IpAddr,
    /// The local port.
    pub port: u16,
    /// The kernel's state number (`0x0A` = listening).
    pub state: u8,
    /// The owner's uid.
    pub uid: u32,
    /// The socket's inode: `/proc/<pid>/fd/*` links read `socket:[inode]`.
    pub inode: u64,
}

impl TcpSocket {
    /// Whether it is a listening socket.
    pub fn is_listening(&self) -> bool {
        self.state == LISTEN
    }
}

/// Parses the text of `/proc/net/tcp` or `/proc/net/tcp6` (the header line
/// is skipped, malformed lines too). Addresses are hex in the kernel's
/// byte order: each 32-bit word as the host stores it (little-endian on
/// the machines omnidev runs on).
///
/// ```
/// let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
///    0: 0100007F:1A6F 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 424242 1 0000000000000000 100 0 0 10 0\n";
/// let sockets = omnidev_core::proc::net::parse_tcp(text);
/// assert_eq!(sockets[0].address.to_string(), "127.0.0.1");
/// assert_eq!((sockets[0].port, sockets[0].uid, sockets[0].inode), (6767, 1000, 424_242));
/// assert!(sockets[0].is_listening());
/// ```
pub fn parse_tcp(text: &str) -> Vec<TcpSocket> {
    text.lines()
        .skip(1)
        .take(MAX_SOCKETS)
        .filter_map(parse_line)
        .collect()
}

fn parse_line(line: &str) -> Option<TcpSocket> {
    let fields: Vec<&str> = line.split_ascii_whitespace().collect();
    let (address, port) = fields.get(1)?.split_once(':')?;
    Some(TcpSocket {
        address: parse_address(address)?,
        port: u16::from_str_radix(port, 16).ok()?,
        state: u8::from_str_radix(fields.get(3)?, 16).ok()?,
        uid: fields.get(7)?.parse().ok()?,
        inode: fields.get(9)?.parse().ok()?,
    })
}

/// An address as the kernel prints it: 8 hex digits (IPv4) or 32 (IPv6),
/// each group of 8 one 32-bit word in host byte order.
fn parse_address(hex: &str) -> Option<IpAddr> {
    let word = |i: usize| -> Option<[u8; 4]> {
        let value = u32::from_str_radix(hex.get(i * 8..i * 8 + 8)?, 16).ok()?;
        Some(value.to_ne_bytes())
    };
    match hex.len() {
        8 => Some(IpAddr::V4(Ipv4Addr::from(word(0)?))),
        32 => {
            let mut bytes = [0u8; 16];
            for i in 0..4 {
                bytes[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            Some(IpAddr::V6(Ipv6Addr::from(bytes)))
        }
        _ => None,
    }
}

/// The listening sockets on `port` (IPv4 and IPv6), or `None` when neither
/// table can be read (not Linux, or `/proc` hidden).
pub fn listeners(port: u16) -> Option<Vec<TcpSocket>> {
    let mut found = None;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        found.get_or_insert_with(Vec::new).extend(
            parse_tcp(&text)
                .into_iter()
                .filter(|s| s.port == port && s.is_listening()),
        );
    }
    found
}

/// The socket inodes process `pid` holds open (empty when its descriptors
/// cannot be read: gone, or another user's).
pub fn socket_inodes(pid: u32) -> BTreeSet<u64> {
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return BTreeSet::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| std::fs::read_link(entry.path()).ok())
        .filter_map(|target| {
            let text = target.to_str()?;
            text.strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect()
}

/// The processes holding socket `inode` open, among every process whose
/// descriptors can be read.
pub fn holders(inode: u64) -> Vec<u32> {
    super::processes()
        .map(|(pid, _)| pid)
        .filter(|&pid| socket_inodes(pid).contains(&inode))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TCP6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 555 1 0000000000000000 100 0 0 10 0\n\
   1: 00000000000000000000000000000000:0050 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 556 1 0000000000000000 100 0 0 10 0\n\
   2: 0000000000000000FFFF00000100007F:1F90 0000000000000000FFFF00000100007F:D431 01 00000000:00000000 00:00000000 00000000  1000        0 557 1 0000000000000000 20 4 30 10 -1\n\
   garbage line\n";

    #[test]
    fn ipv6_rows_parse_with_their_addresses() {
        let sockets = parse_tcp(TCP6);
        assert_eq!(sockets.len(), 3);
        assert_eq!(sockets[0].address, IpAddr::V6(Ipv6Addr::LOCALHOST));
        assert_eq!(
            (sockets[0].port, sockets[0].uid, sockets[0].inode),
            (8080, 1000, 555)
        );
        assert_eq!(sockets[1].address, IpAddr::V6(Ipv6Addr::UNSPECIFIED));
        assert_eq!((sockets[1].port, sockets[1].uid), (80, 0));
        assert_eq!(
            sockets[2].address.to_string(),
            "::ffff:127.0.0.1",
            "an IPv4-mapped address"
        );
        assert!(!sockets[2].is_listening(), "an established connection");
    }

    #[test]
    fn ipv4_wildcard_and_malformed_rows() {
        let text = "header\n\
   0: 00000000:1A6F 00000000:0000 0A 00000000:00000000 00:00000000 00000000   0 0 99 1\n\
   1: 0100007F:XYZ 00000000:0000 0A\n\
   2: 0100007F 00000000:0000 0A\n";
        let sockets = parse_tcp(text);
        assert_eq!(sockets.len(), 1, "{sockets:?}");
        assert_eq!(sockets[0].address, IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        assert_eq!(sockets[0].port, 6767);
    }

    #[test]
    fn a_real_listener_is_found_and_owned_by_this_process() {
        for address in ["127.0.0.1:0", "[::1]:0"] {
            let Ok(listener) = std::net::TcpListener::bind(address) else {
                continue; // no IPv6 on this machine
            };
            let port = listener.local_addr().expect("addr").port();
            let found = listeners(port).expect("/proc/net/tcp is readable on Linux");
            assert_eq!(found.len(), 1, "{address}: {found:?}");
            let mine = socket_inodes(std::process::id());
            assert!(mine.contains(&found[0].inode), "{address}");
            assert!(holders(found[0].inode).contains(&std::process::id()));
            drop(listener);
            assert!(listeners(port).expect("readable").is_empty());
        }
    }
}

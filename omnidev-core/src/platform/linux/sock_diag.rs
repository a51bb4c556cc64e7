//! Listening TCP sockets from the kernel's socket-diagnostics netlink
//! interface (`NETLINK_SOCK_DIAG`, `inet_diag`), asked for listeners only.
//!
//! Reading `/proc/net/tcp` makes the kernel walk its whole established-
//! connections hash (262,144 buckets on the machine this was measured
//! on): 13 ms of CPU for both tables (release build, 2 busy cores), twice
//! per reload (the readiness probe's first look and the look at its
//! answer), taken from the server booting beside it. A dump restricted to
//! the LISTEN state walks only the listening hash: 0.02 ms for both.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::platform::net::TcpSocket;

/// `SOCK_DIAG_BY_FAMILY` from `<linux/sock_diag.h>`.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `NLMSG_ERROR` and `NLMSG_DONE` from `<linux/netlink.h>`.
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
/// The kernel's state number of a listening TCP socket.
const TCP_LISTEN: u32 = 10;
/// Sizes of `struct nlmsghdr`, `struct inet_diag_req_v2` and
/// `struct inet_diag_msg`.
const HEADER: usize = 16;
const REQUEST: usize = 56;
const MESSAGE: usize = 72;
/// At most this many sockets are taken from one dump (a bound on an
/// external value, as for `/proc/net/tcp`).
const MAX_SOCKETS: usize = 1 << 20;

/// The listening TCP sockets (IPv4 and IPv6) on `port`; `None` when the
/// kernel does not answer (no `inet_diag`, a sandbox), so the caller falls
/// back to `/proc/net/tcp`.
pub(super) fn listeners(port: u16) -> Option<Vec<TcpSocket>> {
    let socket = open().ok()?;
    let mut found = Vec::new();
    for family in [libc::AF_INET, libc::AF_INET6] {
        found.extend(dump(&socket, family).ok()?.into_iter().filter(|s| s.port == port));
    }
    Some(found)
}

fn open() -> io::Result<OwnedFd> {
    // SAFETY: socket(2) with constant arguments; the descriptor it returns
    // is owned here.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The request: a dump of `family`'s TCP sockets in the LISTEN state.
fn request(family: libc::c_int) -> [u8; HEADER + REQUEST] {
    let mut bytes = [0u8; HEADER + REQUEST];
    bytes[0..4].copy_from_slice(&((HEADER + REQUEST) as u32).to_ne_bytes());
    bytes[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    let flags = (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16;
    bytes[6..8].copy_from_slice(&flags.to_ne_bytes());
    bytes[8..12].copy_from_slice(&1u32.to_ne_bytes());
    // inet_diag_req_v2: family, protocol, extensions, pad, states, id.
    bytes[HEADER] = family as u8;
    bytes[HEADER + 1] = libc::IPPROTO_TCP as u8;
    bytes[HEADER + 4..HEADER + 8].copy_from_slice(&(1u32 << TCP_LISTEN).to_ne_bytes());
    bytes
}

fn dump(socket: &OwnedFd, family: libc::c_int) -> io::Result<Vec<TcpSocket>> {
    let request = request(family);
    // SAFETY: send(2) of a buffer that lives across the call (a netlink
    // socket needs no address: the kernel is the peer).
    let sent = unsafe { libc::send(socket.as_raw_fd(), request.as_ptr().cast(), request.len(), 0) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut sockets = Vec::new();
    let mut buffer = vec![0u8; 32 * 1024];
    loop {
        // SAFETY: recv(2) into a buffer of the given length.
        let got =
            unsafe { libc::recv(socket.as_raw_fd(), buffer.as_mut_ptr().cast(), buffer.len(), 0) };
        if got < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if got == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "netlink closed"));
        }
        if parse(&buffer[..got as usize], &mut sockets)? || sockets.len() >= MAX_SOCKETS {
            return Ok(sockets);
        }
    }
}

/// Adds the sockets of one datagram of the dump to `sockets`; true at the
/// dump's end.
fn parse(mut datagram: &[u8], sockets: &mut Vec<TcpSocket>) -> io::Result<bool> {
    let invalid = || io::Error::new(io::ErrorKind::InvalidData, "malformed sock_diag answer");
    while datagram.len() >= HEADER {
        let length = u32::from_ne_bytes(datagram[0..4].try_into().map_err(|_| invalid())?) as usize;
        let kind = u16::from_ne_bytes(datagram[4..6].try_into().map_err(|_| invalid())?);
        if length < HEADER || length > datagram.len() {
            return Err(invalid());
        }
        let body = &datagram[HEADER..length];
        match kind {
            NLMSG_DONE => return Ok(true),
            NLMSG_ERROR => {
                let errno =
                    body.get(0..4).and_then(|b| b.try_into().ok()).map_or(0, i32::from_ne_bytes);
                return Err(io::Error::from_raw_os_error(-errno));
            }
            SOCK_DIAG_BY_FAMILY if body.len() >= MESSAGE => {
                if let Some(socket) = message(body) {
                    sockets.push(socket);
                }
            }
            _ => {}
        }
        // Messages are aligned to 4 bytes.
        let next = length.div_ceil(4) * 4;
        datagram = datagram.get(next..).unwrap_or_default();
    }
    Ok(false)
}

/// One `struct inet_diag_msg`.
fn message(body: &[u8]) -> Option<TcpSocket> {
    let family = i32::from(body[0]);
    let port = u16::from_be_bytes(body[4..6].try_into().ok()?);
    let source: [u8; 16] = body[8..24].try_into().ok()?;
    let address = match family {
        libc::AF_INET => IpAddr::V4(Ipv4Addr::new(source[0], source[1], source[2], source[3])),
        libc::AF_INET6 => IpAddr::V6(Ipv6Addr::from(source)),
        _ => return None,
    };
    Some(TcpSocket {
        address,
        port,
        listening: u32::from(body[1]) == TCP_LISTEN,
        uid: u32::from_ne_bytes(body[64..68].try_into().ok()?),
        id: u64::from(u32::from_ne_bytes(body[68..72].try_into().ok()?)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_is_found_with_its_address_uid_and_inode() {
        let v4 = std::net::TcpListener::bind("127.0.0.1:0").expect("bind v4");
        let port = v4.local_addr().expect("addr").port();
        let found = listeners(port).expect("this kernel answers sock_diag");
        let from_proc = super::super::listeners_from_proc(port).expect("/proc/net/tcp");
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found, from_proc, "the same as /proc/net/tcp says");
        assert_eq!(found[0].address, IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert!(found[0].listening);
        assert_eq!(found[0].uid, nix::unistd::getuid().as_raw());
        let ids = super::super::socket_ids(std::process::id());
        assert!(ids.contains(&found[0].id), "the inode of our descriptor");
        drop(v4);
        assert!(listeners(port).expect("answers").is_empty(), "gone once closed");
    }

    #[test]
    fn ipv6_listeners_and_connected_sockets() {
        let v6 = std::net::TcpListener::bind("[::1]:0").expect("an IPv6 loopback");
        let port = v6.local_addr().expect("addr").port();
        // A connection to it: established sockets on the port are not
        // listeners and are not returned.
        let _client = std::net::TcpStream::connect(("::1", port)).expect("connect");
        let found = listeners(port).expect("answers");
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].address, IpAddr::V6(Ipv6Addr::LOCALHOST));
        assert_eq!(found, super::super::listeners_from_proc(port).expect("proc"));
    }

    #[test]
    fn malformed_answers_are_errors_not_panics() {
        let mut sockets = Vec::new();
        assert!(parse(&[0u8; 3], &mut sockets).is_ok_and(|done| !done));
        let mut short = [0u8; HEADER];
        short[0..4].copy_from_slice(&4u32.to_ne_bytes());
        assert!(parse(&short, &mut sockets).is_err(), "a length below the header");
        let mut long = [0u8; HEADER];
        long[0..4].copy_from_slice(&100u32.to_ne_bytes());
        assert!(parse(&long, &mut sockets).is_err(), "a length past the datagram");
        let mut error = [0u8; HEADER + 4];
        error[0..4].copy_from_slice(&((HEADER + 4) as u32).to_ne_bytes());
        error[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        error[HEADER..].copy_from_slice(&(-libc::EPERM).to_ne_bytes());
        let e = parse(&error, &mut sockets).expect_err("an error message");
        assert_eq!(e.raw_os_error(), Some(libc::EPERM));
        assert!(sockets.is_empty());
    }
}

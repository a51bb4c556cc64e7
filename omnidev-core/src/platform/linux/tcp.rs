//! The rows of `/proc/net/tcp` and `/proc/net/tcp6`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::platform::net::TcpSocket;

/// The kernel's state number of a listening TCP socket.
const LISTEN: u8 = 0x0A;

/// At most this many sockets are read from one table (a bound on an
/// external value; a busy machine has a few thousand).
const MAX_SOCKETS: usize = 1 << 20;

/// Parses the text of `/proc/net/tcp` or `/proc/net/tcp6` (the header line
/// is skipped, malformed lines too). Addresses are hex in the kernel's
/// byte order: each 32-bit word as the host stores it (little-endian on
/// the machines omnidev runs on).
pub(super) fn parse(text: &str) -> Vec<TcpSocket> {
    text.lines().skip(1).take(MAX_SOCKETS).filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<TcpSocket> {
    let fields: Vec<&str> = line.split_ascii_whitespace().collect();
    let (address, port) = fields.get(1)?.split_once(':')?;
    Some(TcpSocket {
        address: parse_address(address)?,
        port: u16::from_str_radix(port, 16).ok()?,
        listening: u8::from_str_radix(fields.get(3)?, 16).ok()? == LISTEN,
        uid: fields.get(7)?.parse().ok()?,
        id: fields.get(9)?.parse().ok()?,
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
        let sockets = parse(TCP6);
        assert_eq!(sockets.len(), 3);
        assert_eq!(sockets[0].address, IpAddr::V6(Ipv6Addr::LOCALHOST));
        assert_eq!((sockets[0].port, sockets[0].uid, sockets[0].id), (8080, 1000, 555));
        assert_eq!(sockets[1].address, IpAddr::V6(Ipv6Addr::UNSPECIFIED));
        assert_eq!((sockets[1].port, sockets[1].uid), (80, 0));
        assert_eq!(sockets[2].address.to_string(), "::ffff:127.0.0.1", "an IPv4-mapped address");
        assert!(!sockets[2].listening, "an established connection");
    }

    #[test]
    fn an_ipv4_listener_parses() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1A6F 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 424242 1 0000000000000000 100 0 0 10 0\n";
        let sockets = parse(text);
        assert_eq!(sockets[0].address.to_string(), "127.0.0.1");
        assert_eq!((sockets[0].port, sockets[0].uid, sockets[0].id), (6767, 1000, 424_242));
        assert!(sockets[0].listening);
    }

    #[test]
    fn ipv4_wildcard_and_malformed_rows() {
        let text = "header\n\
   0: 00000000:1A6F 00000000:0000 0A 00000000:00000000 00:00000000 00000000   0 0 99 1\n\
   1: 0100007F:XYZ 00000000:0000 0A\n\
   2: 0100007F 00000000:0000 0A\n";
        let sockets = parse(text);
        assert_eq!(sockets.len(), 1, "{sockets:?}");
        assert_eq!(sockets[0].address, IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        assert_eq!(sockets[0].port, 6767);
    }
}

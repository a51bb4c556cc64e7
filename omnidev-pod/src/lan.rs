//! LAN origins: this machine's private IPv4 addresses as trusted web origins.

use std::net::{IpAddr, Ipv4Addr};

/// Whether `ip` is a LAN address worth trusting: private (RFC 1918:
/// 10/8, 172.16/12, 192.168/16) or link-local (169.254/16). Loopback,
/// unspecified, broadcast, multicast and public addresses are not.
///
/// ```
/// use omnidev_pod::lan::is_lan_ipv4;
/// assert!(is_lan_ipv4("192.168.1.20".parse().unwrap()));
/// assert!(!is_lan_ipv4("127.0.0.1".parse().unwrap()));
/// assert!(!is_lan_ipv4("8.8.8.8".parse().unwrap()));
/// ```
pub fn is_lan_ipv4(ip: Ipv4Addr) -> bool {
    let excluded =
        ip.is_loopback() || ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast();
    !excluded && (ip.is_private() || ip.is_link_local())
}

/// `http://<ip>:<port>` for every LAN address in `addresses`, sorted and
/// de-duplicated. IPv6 addresses are ignored.
///
/// ```
/// let addrs = ["10.0.0.2".parse().unwrap(), "127.0.0.1".parse().unwrap()];
/// assert_eq!(omnidev_pod::lan::lan_origins_from(addrs, 5173), ["http://10.0.0.2:5173"]);
/// ```
pub fn lan_origins_from(addresses: impl IntoIterator<Item = IpAddr>, port: u16) -> Vec<String> {
    let mut ips: Vec<Ipv4Addr> = addresses
        .into_iter()
        .filter_map(|ip| match ip {
            IpAddr::V4(v4) if is_lan_ipv4(v4) => Some(v4),
            _ => None,
        })
        .collect();
    ips.sort_unstable();
    ips.dedup();
    ips.into_iter().map(|ip| format!("http://{ip}:{port}")).collect()
}

/// The LAN origins of this machine's interfaces for `port`. An empty list
/// (nothing found, or the interfaces could not be listed) is for the caller
/// to report as a notice; it is not an error.
pub fn lan_origins(port: u16) -> Vec<String> {
    let addresses = if_addrs::get_if_addrs()
        .map(|ifs| ifs.into_iter().map(|i| i.ip()).collect::<Vec<_>>())
        .unwrap_or_default();
    lan_origins_from(addresses, port)
}

/// Merges an inherited comma-separated origin list with `extra` origins:
/// inherited entries first, then the extra ones; entries trimmed, empty ones
/// dropped, duplicates removed keeping the first occurrence.
///
/// ```
/// let merged = omnidev_pod::lan::merge_origins(Some(" http://a , http://b,"), &["http://b".into(), "http://c".into()]);
/// assert_eq!(merged, "http://a,http://b,http://c");
/// ```
pub fn merge_origins(inherited: Option<&str>, extra: &[String]) -> String {
    let mut seen = std::collections::HashSet::new();
    inherited
        .unwrap_or_default()
        .split(',')
        .chain(extra.iter().map(String::as_str))
        .map(str::trim)
        .filter(|o| !o.is_empty() && seen.insert(o.to_owned()))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_on_fixed_inputs() {
        let addrs: Vec<IpAddr> = [
            "192.168.1.9",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.254",
            "172.32.0.1",
            "169.254.3.4",
            "127.0.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "8.8.8.8",
            "10.1.2.3",
            "::1",
            "fe80::1",
        ]
        .iter()
        .map(|s| s.parse().expect("ip"))
        .collect();
        assert_eq!(
            lan_origins_from(addrs, 5173),
            [
                "http://10.1.2.3:5173",
                "http://169.254.3.4:5173",
                "http://172.16.0.1:5173",
                "http://172.31.255.254:5173",
                "http://192.168.1.9:5173",
            ]
        );
    }

    #[test]
    fn enumerating_real_interfaces_yields_only_lan_origins() {
        for origin in lan_origins(5173) {
            let host = origin
                .strip_prefix("http://")
                .and_then(|s| s.strip_suffix(":5173"))
                .expect("shape");
            assert!(is_lan_ipv4(host.parse().expect("ipv4")), "{origin}");
        }
    }

    #[test]
    fn merge_keeps_inherited_first_and_dedups() {
        assert_eq!(merge_origins(None, &["http://x:1".into()]), "http://x:1");
        assert_eq!(
            merge_origins(
                Some("http://x:1,https://app"),
                &["http://x:1".into(), "http://y:1".into()]
            ),
            "http://x:1,https://app,http://y:1"
        );
    }
}

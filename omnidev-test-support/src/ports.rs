//! Free TCP ports for tests, instead of fixed numbers that collide when
//! two test runs (or two tests) overlap.

use std::net::TcpListener;

/// A port no one listens on right now (the kernel's pick on 127.0.0.1).
pub fn free_port() -> u16 {
    free_ports(1)[0]
}

/// `n` distinct ports no one listens on right now: all bound at once
/// before any is let go, so none is handed out twice.
pub fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> =
        (0..n).map(|_| TcpListener::bind("127.0.0.1:0").expect("bind a free port")).collect();
    listeners.iter().map(|l| l.local_addr().expect("local address").port()).collect()
}

/// `n` consecutive ports no one listens on right now, below the kernel's
/// range of ephemeral ports (32768 and up on Linux), so that no socket the
/// kernel picks for another test (a client's, a [`free_port`]) can take
/// one of them meanwhile. For tests whose ports must stay free: an
/// allocator's next port, a pod keeping its own. The search starts at a
/// place of this process's own, so two runs seldom look at the same ports.
pub fn quiet_ports(n: usize) -> Vec<u16> {
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    let n16 = u16::try_from(n).expect("a few ports");
    let seed = std::process::id().wrapping_mul(2_654_435_761)
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
    for step in 0..SPAN {
        let first =
            u16::try_from(LOW + (seed.wrapping_add(step * 7)) % (SPAN - 64)).expect("below 32768");
        let held: Vec<TcpListener> = (first..first + n16)
            .map_while(|port| TcpListener::bind(("127.0.0.1", port)).ok())
            .collect();
        if held.len() == n {
            return (first..first + n16).collect();
        }
    }
    panic!("no {n} consecutive free ports between {LOW} and {}", LOW + SPAN);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_and_bindable() {
        let ports = free_ports(5);
        let mut sorted = ports.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 5, "{ports:?}");
        for port in ports {
            TcpListener::bind(("127.0.0.1", port)).expect("bindable");
        }
    }

    #[test]
    fn quiet_ports_are_consecutive_bindable_and_not_ephemeral() {
        let ports = quiet_ports(3);
        assert_eq!(ports.len(), 3);
        assert_eq!(ports[1], ports[0] + 1);
        assert_eq!(ports[2], ports[0] + 2);
        assert!(ports[2] < 32_768, "{ports:?}");
        for port in ports {
            TcpListener::bind(("127.0.0.1", port)).expect("bindable");
        }
    }
}

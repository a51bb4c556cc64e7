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
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind a free port"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("local address").port())
        .collect()
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
}

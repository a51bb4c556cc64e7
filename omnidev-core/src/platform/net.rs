//! Listening TCP sockets and the processes holding them: enough to tell
//! whose process listens on a port. Linux reads the kernel's socket tables
//! and each process's descriptors; macOS asks `proc_pidfdinfo` for the
//! socket descriptors of every process it may look at (the user's own).

use std::net::IpAddr;

pub use super::os::{SEES_OTHER_USERS, listeners, socket_ids};

/// One TCP socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpSocket {
    /// The local address.
    pub address: IpAddr,
    /// The local port.
    pub port: u16,
    /// Whether it listens.
    pub listening: bool,
    /// The owner's uid.
    pub uid: u32,
    /// What identifies the socket among every process's descriptors: its
    /// inode on Linux, the kernel's address of it on macOS.
    pub id: u64,
}

/// The processes holding socket `id` open, among every process whose
/// descriptors can be read.
pub fn holders(id: u64) -> Vec<u32> {
    super::pids().into_iter().filter(|&pid| socket_ids(pid).contains(&id)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_real_listener_is_found_and_owned_by_this_process() {
        for address in ["127.0.0.1:0", "[::1]:0"] {
            let Ok(listener) = std::net::TcpListener::bind(address) else {
                continue; // no IPv6 on this machine
            };
            let port = listener.local_addr().expect("addr").port();
            let found = listeners(port).expect("listeners are readable");
            assert_eq!(found.len(), 1, "{address}: {found:?}");
            assert_eq!(found[0].port, port);
            let mine = socket_ids(std::process::id());
            assert!(mine.contains(&found[0].id), "{address}");
            assert!(holders(found[0].id).contains(&std::process::id()));
            drop(listener);
            assert!(listeners(port).expect("readable").is_empty());
        }
    }
}

//! Listening TCP sockets and the processes holding them: enough to tell
//! whose process listens on a port. Linux reads the kernel's socket tables
//! and each process's descriptors; macOS asks `proc_pidfdinfo` for the
//! socket descriptors of every process it may look at (the user's own).

use std::collections::BTreeSet;
use std::net::IpAddr;

use super::os;

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

impl TcpSocket {
    /// Whether it is a listening socket.
    pub fn is_listening(&self) -> bool {
        self.listening
    }
}

/// Whether listeners of other users can be seen ([`listeners`] lists
/// every listener of the machine on Linux, only those of processes this
/// one may inspect on macOS).
pub const SEES_OTHER_USERS: bool = os::SEES_OTHER_USERS;

/// The listening sockets on `port` (IPv4 and IPv6), or `None` when the
/// system does not say.
pub fn listeners(port: u16) -> Option<Vec<TcpSocket>> {
    os::listeners(port)
}

/// The [`TcpSocket::id`]s of the sockets process `pid` holds open (empty
/// when its descriptors cannot be read: gone, or another user's).
pub fn socket_ids(pid: u32) -> BTreeSet<u64> {
    os::socket_ids(pid)
}

/// The processes holding socket `id` open, among every process whose
/// descriptors can be read.
pub fn holders(id: u64) -> Vec<u32> {
    super::pids()
        .into_iter()
        .filter(|&pid| socket_ids(pid).contains(&id))
        .collect()
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

//! Whose process listens on a port: the check that makes a readiness probe
//! on a pod port count only the service's own listener, never another
//! process that took the port (another user's pod, a test, anything).
//!
//! The listening sockets of the port and who holds them come from
//! [`crate::platform::net`] (on Linux the kernel's socket diagnostics,
//! or `/proc/net/tcp{,6}`, and each
//! process's descriptors; on macOS `proc_pidfdinfo` of every process of
//! the user's), and a socket belongs to the service when one of its
//! processes (its cgroup, or its session, group and descendants; see
//! [`crate::containment`]) holds it. An answer is
//! judged at the address the probe reached ([`owner_at`]): only the
//! listeners that take a connection there count, so a service listening
//! on `[::1]:P` is not made ready by another process on `127.0.0.1:P`.
//! Where the system does not say (`/proc/net` hidden), or on macOS where
//! no listener of the user's is seen (another user's cannot be), the
//! owner is [`Owner::Unknown`] and the probe alone decides.

use std::collections::BTreeSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::platform::net::{self, TcpSocket};

/// Who listens on a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// A process of the service.
    Service,
    /// Some other process, and none of the service's.
    Other(Holder),
    /// Nobody listens.
    Nobody,
    /// This machine does not say (listeners cannot be read, or only the
    /// user's own can and none of them listens).
    Unknown,
}

/// A process found listening on a port that is not the service's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// Its pid, when its descriptors can be read (one of the user's own
    /// processes).
    pub pid: Option<u32>,
    /// Its command line, shortened, when known.
    pub command: Option<String>,
    /// The socket owner's uid.
    pub uid: u32,
}

/// The longest command line shown for a holder, in characters.
const COMMAND_SHOWN: usize = 60;

/// `pid 4242 (python3 -m http.server 6767)`, or `a process of uid 1001`
/// when its pid cannot be seen (another user's).
impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.pid, &self.command) {
            (Some(pid), Some(command)) => write!(f, "pid {pid} ({command})"),
            (Some(pid), None) => write!(f, "pid {pid}"),
            (None, _) => write!(f, "a process of uid {} omnidev cannot see", self.uid),
        }
    }
}

/// Who listens on `port` at all, given the pids of the service's
/// processes: a listener of the service wins over any other on the same
/// port (it may listen on `127.0.0.1` while another listens on `::1`).
/// For naming a holder while a probe fails, and after a crash; an answer
/// is judged by [`owner_at`].
pub fn owner(port: u16, members: &[u32]) -> Owner {
    let Some(listeners) = net::listeners(port) else {
        return Owner::Unknown;
    };
    if listeners.is_empty() {
        return nobody_seen();
    }
    let held = held_by(members);
    if listeners.iter().any(|s| held.contains(&s.id)) {
        return Owner::Service;
    }
    Owner::Other(holder(&listeners[0]))
}

/// Who answered a connection to `address`: the listeners the kernel
/// hands such a connection to ([`answering`]), which must all be the
/// service's. A service listening only on `[::1]:P` does not own what
/// answers at `127.0.0.1:P`, nor does one of several listeners sharing
/// the address (`SO_REUSEPORT`) make the others its own.
pub fn owner_at(address: SocketAddr, members: &[u32]) -> Owner {
    let Some(listeners) = net::listeners(address.port()) else {
        return Owner::Unknown;
    };
    let answering = answering(&listeners, address.ip());
    if answering.is_empty() {
        return nobody_seen();
    }
    let held = held_by(members);
    match answering.iter().find(|s| !held.contains(&s.id)) {
        None => Owner::Service,
        Some(other) => Owner::Other(holder(other)),
    }
}

/// No listener is seen: nobody listens where every listener of the machine
/// is seen; elsewhere another user's may, and that is unknown.
fn nobody_seen() -> Owner {
    if net::SEES_OTHER_USERS { Owner::Nobody } else { Owner::Unknown }
}

/// The listening sockets (of one port) that take a connection to `to`, as
/// Linux picks them: those bound to `to` itself (an IPv4 socket before an
/// IPv6 one bound to the mapped address), else those bound to the
/// wildcard (for IPv4, `0.0.0.0` before a dual-stack `[::]`; for IPv6,
/// `[::]`).
pub fn answering(listeners: &[TcpSocket], to: IpAddr) -> Vec<TcpSocket> {
    let to = to.to_canonical();
    let mapped = |s: &TcpSocket| match s.address {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4),
        IpAddr::V4(_) => None,
    };
    let levels: [&dyn Fn(&TcpSocket) -> bool; 4] = [
        &|s| s.address == to,
        &|s| mapped(s) == Some(to),
        &|s| to.is_ipv4() && s.address == IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        &|s| s.address == IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    ];
    levels
        .iter()
        .map(|level| listeners.iter().copied().filter(|s| level(s)).collect::<Vec<_>>())
        .find(|found| !found.is_empty())
        .unwrap_or_default()
}

/// Every socket the processes `members` hold.
fn held_by(members: &[u32]) -> BTreeSet<u64> {
    members.iter().flat_map(|&pid| net::socket_ids(pid)).collect()
}

/// Who holds `socket`, as far as this user can see.
fn holder(socket: &TcpSocket) -> Holder {
    let pid = net::holders(socket.id).into_iter().min();
    let command = pid.map(crate::platform::cmdline).filter(|c| !c.is_empty()).map(|c| {
        if c.chars().count() > COMMAND_SHOWN {
            let cut: String = c.chars().take(COMMAND_SHOWN).collect();
            format!("{cut}…")
        } else {
            c
        }
    });
    Holder { pid, command, uid: socket.uid }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_of_this_process_is_the_service_or_another_one() {
        // It owns listeners: a sibling test's fork would hold them too.
        if !omnidev_test_support::in_own_process(
            module_path!(),
            "a_listener_of_this_process_is_the_service_or_another_one",
        ) {
            return;
        }
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let me = std::process::id();
        assert_eq!(owner(port, &[me]), Owner::Service);
        match owner(port, &[]) {
            Owner::Other(holder) => {
                assert_eq!(holder.pid, Some(me));
                let text = holder.to_string();
                assert!(text.starts_with(&format!("pid {me} (")), "{text}");
            }
            other => panic!("expected another holder, got {other:?}"),
        }
        drop(listener);
        assert_eq!(owner(port, &[me]), Owner::Nobody);
    }

    #[test]
    fn each_address_has_its_own_listener_on_a_shared_port() {
        // It owns listeners: a sibling test's fork would hold them too.
        if !omnidev_test_support::in_own_process(
            module_path!(),
            "each_address_has_its_own_listener_on_a_shared_port",
        ) {
            return;
        }
        let Ok(ours) = std::net::TcpListener::bind("[::1]:0") else {
            return; // no IPv6 here: nothing to share a port with
        };
        let port = ours.local_addr().expect("addr").port();
        let mut theirs = std::process::Command::new("python3")
            .args([
                "-c",
                &format!(
                    "import socket,time;s=socket.socket();s.bind(('127.0.0.1',{port}));\
                     s.listen();print('up',flush=True);time.sleep(60)"
                ),
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(theirs.stdout.take().expect("stdout")),
            &mut line,
        )
        .expect("read");
        assert_eq!(line.trim(), "up");
        let me = std::process::id();
        assert_eq!(owner(port, &[me]), Owner::Service);
        // What answers at each address decides an answer.
        let at = |ip: &str| SocketAddr::new(ip.parse().expect("ip"), port);
        assert_eq!(owner_at(at("::1"), &[me]), Owner::Service);
        assert!(
            matches!(owner_at(at("127.0.0.1"), &[me]), Owner::Other(h) if h.pid == Some(theirs.id())),
            "python answers at 127.0.0.1"
        );
        assert_eq!(owner_at(at("127.0.0.1"), &[me, theirs.id()]), Owner::Service);
        drop(ours);
        assert_eq!(owner_at(at("::1"), &[me]), Owner::Nobody);
        match owner(port, &[std::process::id()]) {
            Owner::Other(holder) => {
                assert_eq!(holder.pid, Some(theirs.id()));
                assert!(
                    holder
                        .command
                        .as_deref()
                        .is_some_and(|c| c.contains("python3") && c.contains(" -c ")),
                    "{holder}"
                );
            }
            other => panic!("expected python to hold it, got {other:?}"),
        }
        let _ = theirs.kill();
        let _ = theirs.wait();
    }

    fn socket(address: &str, id: u64) -> TcpSocket {
        TcpSocket { address: address.parse().expect("ip"), port: 80, listening: true, uid: 0, id }
    }

    #[test]
    fn the_kernels_choice_of_listener_by_address() {
        let inodes = |listeners: &[TcpSocket], to: &str| -> Vec<u64> {
            answering(listeners, to.parse().expect("ip")).iter().map(|s| s.id).collect()
        };
        let all = [
            socket("127.0.0.1", 1),
            socket("::1", 2),
            socket("0.0.0.0", 3),
            socket("::", 4),
            socket("::ffff:127.0.0.2", 5),
            socket("127.0.0.1", 6),
        ];
        // The address itself first (every socket bound to it: a
        // connection may reach either).
        assert_eq!(inodes(&all, "127.0.0.1"), [1, 6]);
        assert_eq!(inodes(&all, "::ffff:127.0.0.1"), [1, 6]);
        assert_eq!(inodes(&all, "::1"), [2]);
        assert_eq!(inodes(&all, "127.0.0.2"), [5]);
        // Then the wildcard: IPv4 before a dual-stack IPv6 one.
        assert_eq!(inodes(&all, "10.0.0.1"), [3]);
        assert_eq!(inodes(&all[3..4], "10.0.0.1"), [4]);
        assert_eq!(inodes(&all, "fe80::1"), [4]);
        // An IPv4 wildcard never answers IPv6, nor an IPv6 address IPv4.
        assert!(inodes(&all[..3], "fe80::1").is_empty());
        assert!(inodes(&all[1..2], "127.0.0.1").is_empty());
    }

    #[test]
    fn a_holder_without_a_visible_pid_names_its_uid() {
        let holder = Holder { pid: None, command: None, uid: 1001 };
        assert_eq!(holder.to_string(), "a process of uid 1001 omnidev cannot see");
    }
}

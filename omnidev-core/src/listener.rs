//! Whose process listens on a port: the check that makes a readiness probe
//! on a pod port count only the service's own listener, never another
//! process that took the port (another user's pod, a test, anything).
//!
//! On Linux the listening sockets of the port come from `/proc/net/tcp`
//! and `/proc/net/tcp6`, and a socket belongs to the service when one of
//! its processes (its cgroup, or its session, group and descendants; see
//! [`crate::containment`]) holds it in `/proc/<pid>/fd`. Elsewhere (macOS),
//! or where `/proc/net` cannot be read, the owner is
//! [`Owner::Unknown`] and the probe alone decides.

use std::fmt;

use crate::proc::net;

/// Who listens on a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// A process of the service.
    Service,
    /// Some other process, and none of the service's.
    Other(Holder),
    /// Nobody listens.
    Nobody,
    /// This machine does not say (no `/proc/net`).
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

/// Who listens on `port`, given the pids of the service's processes.
/// A listener of the service wins over any other on the same port (it
/// may listen on `127.0.0.1` while another listens on `::1`).
pub fn owner(port: u16, members: &[u32]) -> Owner {
    let Some(listeners) = net::listeners(port) else {
        return Owner::Unknown;
    };
    let Some(first) = listeners.first() else {
        return Owner::Nobody;
    };
    let held = |pid: &u32| {
        let inodes = net::socket_inodes(*pid);
        listeners.iter().any(|s| inodes.contains(&s.inode))
    };
    if members.iter().any(held) {
        return Owner::Service;
    }
    let pid = net::holders(first.inode).into_iter().min();
    let command = pid
        .map(crate::proc::cmdline)
        .filter(|c| !c.is_empty())
        .map(|c| {
            if c.chars().count() > COMMAND_SHOWN {
                let cut: String = c.chars().take(COMMAND_SHOWN).collect();
                format!("{cut}…")
            } else {
                c
            }
        });
    Owner::Other(Holder {
        pid,
        command,
        uid: first.uid,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_of_this_process_is_the_service_or_another_one() {
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
    fn the_service_wins_when_another_process_listens_on_the_same_port() {
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
        assert_eq!(owner(port, &[std::process::id()]), Owner::Service);
        drop(ours);
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

    #[test]
    fn a_holder_without_a_visible_pid_names_its_uid() {
        let holder = Holder {
            pid: None,
            command: None,
            uid: 1001,
        };
        assert_eq!(
            holder.to_string(),
            "a process of uid 1001 omnidev cannot see"
        );
    }
}

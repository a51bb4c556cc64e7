//! The one reader of Linux's `/proc` for every omnidev crate (and xtask):
//! a process's state, parent, group, session, start time and CPU time from
//! `/proc/<pid>/stat`, one variable of its environment, its command line,
//! and the table of every process; and, in [`net`], TCP listeners and the
//! sockets a process holds. Elsewhere every function answers `None` or
//! nothing.

pub mod net;

use std::path::PathBuf;

/// The fields of `/proc/<pid>/stat` omnidev uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessStat {
    /// The process id.
    pub pid: u32,
    /// The state letter (`R`, `S`, `D`, `Z` for a zombie, …).
    pub state: char,
    /// The parent's pid.
    pub ppid: u32,
    /// The process group.
    pub pgid: i32,
    /// The session.
    pub sid: i32,
    /// User plus system CPU time, in clock ticks.
    pub cpu_ticks: u64,
    /// When it started, in clock ticks since boot; with the pid, it
    /// identifies a process across pid reuse.
    pub start_time: u64,
}

impl ProcessStat {
    /// Whether it has exited and waits to be reaped.
    pub fn is_zombie(&self) -> bool {
        self.state == 'Z'
    }
}

/// The stat of process `pid`, or `None` when it does not exist (or this is
/// not Linux).
pub fn stat(pid: u32) -> Option<ProcessStat> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// Parses the text of `/proc/<pid>/stat`. The command name (field 2) may
/// contain spaces and parentheses, so fields are counted after the last `)`.
///
/// ```
/// let line = "42 (a (b) c) S 1 42 40 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
/// let stat = omnidev_core::proc::parse_stat(line).unwrap();
/// assert_eq!((stat.pid, stat.state, stat.ppid), (42, 'S', 1));
/// assert_eq!((stat.pgid, stat.sid), (42, 40));
/// assert_eq!((stat.cpu_ticks, stat.start_time), (3, 987_654));
/// ```
pub fn parse_stat(text: &str) -> Option<ProcessStat> {
    let name_end = text.rfind(')')?;
    let pid = text.split_once(" (")?.0.trim().parse().ok()?;
    let fields: Vec<&str> = text[name_end + 1..].split_ascii_whitespace().collect();
    // fields[0] is field 3 of the file.
    let field = |n: usize| fields.get(n - 3).copied();
    Some(ProcessStat {
        pid,
        state: field(3)?.chars().next()?,
        ppid: field(4)?.parse().ok()?,
        pgid: field(5)?.parse().ok()?,
        sid: field(6)?.parse().ok()?,
        cpu_ticks: field(14)?.parse::<u64>().ok()? + field(15)?.parse::<u64>().ok()?,
        start_time: field(22)?.parse().ok()?,
    })
}

/// Every process: its pid and its `/proc/<pid>` directory.
pub fn processes() -> impl Iterator<Item = (u32, PathBuf)> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse().ok()?;
            Some((pid, entry.path()))
        })
}

/// The stat of every process (empty where there is no `/proc`).
pub fn table() -> Vec<ProcessStat> {
    processes().filter_map(|(pid, _)| stat(pid)).collect()
}

/// The value of variable `name` in process `pid`'s environment as it was
/// at `exec` (lossy UTF-8), when it is set and readable.
pub fn env_var(pid: u32, name: &str) -> Option<String> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    environ.split(|b| *b == 0).find_map(|var| {
        var.strip_prefix(name.as_bytes())?
            .strip_prefix(b"=")
            .map(|value| String::from_utf8_lossy(value).into_owned())
    })
}

/// Process `pid`'s command line, arguments joined by spaces (empty when
/// unreadable).
pub fn cmdline(pid: u32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    String::from_utf8_lossy(&raw)
        .replace('\0', " ")
        .trim()
        .to_owned()
}

/// Programs that start the real service as their one child and wait for
/// it: `uv run` and `uvx` (Python's own pid is the one its log prints).
pub const WRAPPERS: [&str; 2] = ["uv", "uvx"];

/// The process people mean by a service's pid: `pid` itself, or, while it
/// is one of the [`WRAPPERS`] with exactly one child, that child (followed
/// at most three levels). Where `/proc` cannot tell, `pid`.
pub fn main_process(pid: u32) -> u32 {
    let mut current = pid;
    for _ in 0..3 {
        if !is_wrapper(current) {
            break;
        }
        match children(current).as_slice() {
            [only] => current = *only,
            _ => break,
        }
    }
    current
}

/// Whether process `pid` runs one of the [`WRAPPERS`].
pub fn is_wrapper(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .is_ok_and(|comm| WRAPPERS.contains(&comm.trim_end()))
}

/// The children of `pid`: from each of its threads'
/// `/proc/<pid>/task/<tid>/children` (a child belongs to the thread that
/// forked it, and `uv` forks from a worker thread), or from the process
/// table where the kernel does not have those files.
pub fn children(pid: u32) -> Vec<u32> {
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        let mut children = Vec::new();
        let mut readable = false;
        for task in tasks.flatten() {
            if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
                readable = true;
                children.extend(
                    text.split_ascii_whitespace()
                        .filter_map(|c| c.parse::<u32>().ok()),
                );
            }
        }
        if readable {
            return children;
        }
    }
    table()
        .into_iter()
        .filter(|stat| stat.ppid == pid)
        .map(|stat| stat.pid)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrapper_is_seen_through_to_its_one_child() {
        // A real `uv run` would need a project; a program named `uv` that
        // starts one child and waits shows the same shape.
        let dir = tempfile::tempdir().expect("tempdir");
        let uv = dir.path().join("uv");
        std::fs::write(&uv, "#!/bin/sh\nsleep 30 &\nwait\n").expect("write");
        std::fs::set_permissions(&uv, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        let mut wrapper = std::process::Command::new(&uv).spawn().expect("spawn");
        let pid = wrapper.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let mut main = pid;
        while main == pid && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
            main = main_process(pid);
        }
        let child_comm = std::fs::read_to_string(format!("/proc/{main}/comm")).unwrap_or_default();
        let _ = std::process::Command::new("kill")
            .arg(main.to_string())
            .status();
        let _ = wrapper.kill();
        let _ = wrapper.wait();
        assert_ne!(main, pid, "the wrapper's child is the main process");
        assert_eq!(child_comm.trim_end(), "sleep");
        // Not a wrapper: the pid itself.
        assert_eq!(main_process(std::process::id()), std::process::id());
    }

    #[test]
    fn own_process_is_read_consistently() {
        let me = std::process::id();
        let a = stat(me).expect("own stat");
        let b = stat(me).expect("own stat");
        assert_eq!(a.pid, me);
        assert_eq!(a.start_time, b.start_time);
        assert!(a.start_time > 0);
        assert!(!a.is_zombie());
        assert!(table().iter().any(|p| p.pid == me && p.ppid == a.ppid));
        assert!(env_var(me, "PATH").is_some());
        assert!(env_var(me, "OMNIDEV_PROC_TEST_SURELY_UNSET").is_none());
        assert!(!cmdline(me).is_empty());
    }
}

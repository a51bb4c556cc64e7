//! Linux: everything is read from `/proc` (this module and [`tcp`] are the
//! only code of omnidev that names it), and the subreaper is
//! `PR_SET_CHILD_SUBREAPER`.

mod sock_diag;
mod tcp;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use super::ProcessStat;
use super::net::TcpSocket;

/// Whether [`become_subreaper`] can take effect here: true on Linux,
/// false on macOS (which has no subreaper; orphans go to launchd).
pub const HAS_SUBREAPER: bool = true;

/// The stat of process `pid`, or `None` when it does not exist or cannot
/// be read.
pub fn stat(pid: u32) -> Option<ProcessStat> {
    Some(stat_and_ticks(pid)?.0)
}

/// The stat of `pid` and its CPU time in clock ticks.
fn stat_and_ticks(pid: u32) -> Option<(ProcessStat, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// Parses the text of `/proc/<pid>/stat`, with the user plus system CPU
/// time in clock ticks. The command name (field 2) may contain spaces and
/// parentheses, so fields are counted after the last `)`.
fn parse_stat(text: &str) -> Option<(ProcessStat, u64)> {
    let name_end = text.rfind(')')?;
    let pid = text.split_once(" (")?.0.trim().parse().ok()?;
    let fields: Vec<&str> = text[name_end + 1..].split_ascii_whitespace().collect();
    // fields[0] is field 3 of the file.
    let field = |n: usize| fields.get(n - 3).copied();
    let stat = ProcessStat {
        pid,
        state: field(3)?.chars().next()?,
        ppid: field(4)?.parse().ok()?,
        pgid: field(5)?.parse().ok()?,
        sid: field(6)?.parse().ok()?,
        start_time: field(22)?.parse().ok()?,
    };
    let ticks = field(14)?.parse::<u64>().ok()? + field(15)?.parse::<u64>().ok()?;
    Some((stat, ticks))
}

/// The pid of every process (empty where the system does not list them).
pub fn pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .collect()
}

/// The value of variable `name` in process `pid`'s environment as it was
/// at `exec` (lossy UTF-8), when it is set and readable (a process of
/// another user usually is not).
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
    String::from_utf8_lossy(&raw).replace('\0', " ").trim().to_owned()
}

/// The name of the program process `pid` runs (at most 15 bytes on
/// Linux, 16 on macOS), when readable.
pub fn name(pid: u32) -> Option<String> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(comm.trim_end_matches('\n').to_owned())
}

/// The children of `pid` (empty when it has none or they cannot be
/// listed).
///
/// From each of its threads' `/proc/<pid>/task/<tid>/children` (a child
/// belongs to the thread that forked it, and `uv` forks from a worker
/// thread), or from the process table where the kernel does not have
/// those files.
pub fn children(pid: u32) -> Vec<u32> {
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        let mut children = Vec::new();
        let mut readable = false;
        for task in tasks.flatten() {
            if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
                readable = true;
                children
                    .extend(text.split_ascii_whitespace().filter_map(|c| c.parse::<u32>().ok()));
            }
        }
        if readable {
            return children;
        }
    }
    super::table().into_iter().filter(|stat| stat.ppid == pid).map(|stat| stat.pid).collect()
}

/// Makes this process a reaper of orphans among its descendants, so that
/// a daemon that double-forked away from a service is re-parented to it
/// (and can still be found by parentage) instead of to init. Returns
/// whether it took effect: Linux has `PR_SET_CHILD_SUBREAPER`; macOS has
/// no such thing, and the answer is false.
pub fn become_subreaper() -> bool {
    nix::sys::prctl::set_child_subreaper(true).is_ok()
}

/// `ioprio_set`/`ioprio_get`'s "who" for a process and a process group,
/// and the class bits of a priority.
const IOPRIO_WHO_PROCESS: libc::c_int = 1;
const IOPRIO_WHO_PGRP: libc::c_int = 2;
const IOPRIO_CLASS_IDLE: libc::c_int = 3;
const IOPRIO_CLASS_SHIFT: libc::c_int = 13;

/// Puts a run in the background, or back in the foreground: the run led
/// by `leader`, which leads its own session and process group (every
/// service run and prepare step omnidev starts does). Returns whether the
/// system took all of it.
///
/// On Linux, the session's scheduling group (its autogroup, through
/// which the scheduler shares the CPU between sessions) gets nice 19, and
/// the process group's I/O the idle class; back in the foreground, nice 0
/// and the default class, which an unprivileged user may both set again.
/// (Where autogroups are turned off, the CPU half has no effect: a
/// process's own nice, once raised, cannot be lowered without privilege,
/// so it is left alone.) On macOS the leader enters the Darwin background
/// band (`PRIO_DARWIN_BG`: lowest CPU priority and throttled I/O) and
/// leaves it again.
pub fn set_background(leader: u32, on: bool) -> bool {
    let cpu =
        std::fs::write(format!("/proc/{leader}/autogroup"), if on { "19" } else { "0" }).is_ok();
    let class = if on { IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT } else { 0 };
    // SAFETY: ioprio_set takes three integers and reads no memory of ours.
    let io = unsafe { libc::syscall(libc::SYS_ioprio_set, IOPRIO_WHO_PGRP, leader, class) } == 0;
    cpu && io
}

/// Whether process `pid` runs in the background as [`set_background`]
/// puts it there (on Linux, both halves), when readable.
pub fn in_background(pid: u32) -> Option<bool> {
    // "/autogroup-123 nice 19"
    let group = std::fs::read_to_string(format!("/proc/{pid}/autogroup")).ok()?;
    let nice: i32 = group.split_whitespace().last()?.parse().ok()?;
    // SAFETY: ioprio_get takes two integers and reads no memory of ours.
    let prio = unsafe { libc::syscall(libc::SYS_ioprio_get, IOPRIO_WHO_PROCESS, pid) };
    let class = libc::c_int::try_from(prio).ok().filter(|p| *p >= 0)? >> IOPRIO_CLASS_SHIFT;
    Some(nice == 19 && class == IOPRIO_CLASS_IDLE)
}

/// The CPU time (user plus system) process `pid` has used, when readable.
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let (_, ticks) = stat_and_ticks(pid)?;
    // SAFETY: sysconf has no preconditions.
    let per_second = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok()?.max(1);
    Some(Duration::from_millis(ticks * 1000 / per_second))
}

/// How many descriptors process `pid` has open, when readable.
pub fn open_fds(pid: u32) -> Option<usize> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count())
}

/// The paths process `pid`'s descriptors refer to (files, terminals),
/// when readable; for diagnostics.
pub fn open_paths(pid: u32) -> Option<Vec<PathBuf>> {
    let entries = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    Some(entries.flatten().filter_map(|fd| std::fs::read_link(fd.path()).ok()).collect())
}

/// The resident memory of process `pid` now, in KiB, when readable.
pub fn rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmRSS")
}

/// The peak resident memory of process `pid` so far, in KiB, when the
/// system tracks it per process image.
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmHWM")
}

/// A field of `/proc/<pid>/status` given in kB (`VmRSS`, `VmHWM`).
fn status_kib(pid: u32, field: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// One line per thread of process `pid` (its id, name, state and what it
/// waits in), when the system shows them; for diagnostics of a hang.
pub fn threads(pid: u32) -> Option<Vec<String>> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    Some(
        tasks
            .flatten()
            .map(|task| {
                let read = |name: &str| {
                    std::fs::read_to_string(task.path().join(name)).unwrap_or_default()
                };
                let state = parse_stat(&read("stat")).map_or('?', |(s, _)| s.state);
                format!(
                    "task {} {} state {state} wchan {}",
                    task.file_name().display(),
                    read("comm").trim(),
                    read("wchan")
                )
            })
            .collect(),
    )
}

/// How many directories one user may watch for file changes, where the
/// system has such a limit (on Linux the lower of
/// `fs.inotify.max_user_watches` and the user namespace's
/// `user.max_inotify_watches`; macOS's FSEvents watches a tree with one
/// stream and has none).
pub fn watch_limit() -> Option<usize> {
    ["/proc/sys/fs/inotify/max_user_watches", "/proc/sys/user/max_inotify_watches"]
        .iter()
        .filter_map(|path| std::fs::read_to_string(path).ok()?.trim().parse().ok())
        .min()
}

/// How many of those watches this process holds now, where the system
/// counts them (Linux: the `inotify wd:` lines of its descriptors'
/// fdinfo).
pub fn watches_held() -> Option<usize> {
    let fds = std::fs::read_dir("/proc/self/fdinfo").ok()?;
    Some(
        fds.filter_map(Result::ok)
            .filter_map(|fd| std::fs::read_to_string(fd.path()).ok())
            .map(|info| info.lines().filter(|l| l.starts_with("inotify wd:")).count())
            .sum(),
    )
}

pub(crate) fn own_cgroup_files() -> Result<(String, String), String> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
    let cgroup = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
    Ok((mountinfo, cgroup))
}

/// Whether listeners of other users can be seen ([`listeners`] lists
/// every listener of the machine on Linux, only those of processes this
/// one may inspect on macOS).
///
/// Every listener of the machine is in the socket diagnostics (and in
/// `/proc/net/tcp{,6}`).
pub const SEES_OTHER_USERS: bool = true;

/// The listening sockets on `port` (IPv4 and IPv6), or `None` when the
/// system does not say.
///
/// From the kernel's socket diagnostics (a dump of listeners only), else
/// from `/proc/net/tcp` and `/proc/net/tcp6`; `None` when neither answers.
pub fn listeners(port: u16) -> Option<Vec<TcpSocket>> {
    sock_diag::listeners(port).or_else(|| listeners_from_proc(port))
}

/// From `/proc/net/tcp` and `/proc/net/tcp6` (each read walks every
/// bucket of the kernel's TCP hash tables); `None` when neither can be
/// read (`/proc` hidden).
fn listeners_from_proc(port: u16) -> Option<Vec<TcpSocket>> {
    let mut found = None;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        found
            .get_or_insert_with(Vec::new)
            .extend(tcp::parse(&text).into_iter().filter(|s| s.port == port && s.listening));
    }
    found
}

/// The [`TcpSocket::id`]s of the sockets process `pid` holds open (empty
/// when its descriptors cannot be read: gone, or another user's).
///
/// The socket inodes of `/proc/<pid>/fd` (links read `socket:[inode]`).
pub fn socket_ids(pid: u32) -> BTreeSet<u64> {
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return BTreeSet::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| std::fs::read_link(entry.path()).ok())
        .filter_map(|target| {
            let text = target.to_str()?;
            text.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_last_parenthesis() {
        let line = "42 (a (b) c) S 1 42 40 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        let (stat, ticks) = parse_stat(line).expect("parses");
        assert_eq!((stat.pid, stat.state, stat.ppid), (42, 'S', 1));
        assert_eq!((stat.pgid, stat.sid), (42, 40));
        assert_eq!((ticks, stat.start_time), (3, 987_654));
        assert!(parse_stat("42 (x) S 1").is_none(), "too few fields");
    }

    #[test]
    fn the_watch_limit_is_read() {
        // Every kernel with inotify has the file (containers included).
        assert!(watch_limit().is_some_and(|n| n > 0));
    }
}

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

pub(super) const HAS_SUBREAPER: bool = true;

pub(super) fn stat(pid: u32) -> Option<ProcessStat> {
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

pub(super) fn pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .collect()
}

pub(super) fn env_var(pid: u32, name: &str) -> Option<String> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    environ.split(|b| *b == 0).find_map(|var| {
        var.strip_prefix(name.as_bytes())?
            .strip_prefix(b"=")
            .map(|value| String::from_utf8_lossy(value).into_owned())
    })
}

pub(super) fn cmdline(pid: u32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    String::from_utf8_lossy(&raw)
        .replace('\0', " ")
        .trim()
        .to_owned()
}

pub(super) fn name(pid: u32) -> Option<String> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(comm.trim_end_matches('\n').to_owned())
}

/// From each of its threads' `/proc/<pid>/task/<tid>/children` (a child
/// belongs to the thread that forked it, and `uv` forks from a worker
/// thread), or from the process table where the kernel does not have
/// those files.
pub(super) fn children(pid: u32) -> Vec<u32> {
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
    super::table()
        .into_iter()
        .filter(|stat| stat.ppid == pid)
        .map(|stat| stat.pid)
        .collect()
}

pub(super) fn become_subreaper() -> bool {
    nix::sys::prctl::set_child_subreaper(true).is_ok()
}

/// `ioprio_set`/`ioprio_get`'s "who" for a process and a process group,
/// and the class bits of a priority.
const IOPRIO_WHO_PROCESS: libc::c_int = 1;
const IOPRIO_WHO_PGRP: libc::c_int = 2;
const IOPRIO_CLASS_IDLE: libc::c_int = 3;
const IOPRIO_CLASS_SHIFT: libc::c_int = 13;

pub(super) fn set_background(leader: u32, on: bool) -> bool {
    let cpu = std::fs::write(
        format!("/proc/{leader}/autogroup"),
        if on { "19" } else { "0" },
    )
    .is_ok();
    let class = if on {
        IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT
    } else {
        0
    };
    // SAFETY: ioprio_set takes three integers and reads no memory of ours.
    let io = unsafe { libc::syscall(libc::SYS_ioprio_set, IOPRIO_WHO_PGRP, leader, class) } == 0;
    cpu && io
}

pub(super) fn in_background(pid: u32) -> Option<bool> {
    // "/autogroup-123 nice 19"
    let group = std::fs::read_to_string(format!("/proc/{pid}/autogroup")).ok()?;
    let nice: i32 = group.split_whitespace().last()?.parse().ok()?;
    // SAFETY: ioprio_get takes two integers and reads no memory of ours.
    let prio = unsafe { libc::syscall(libc::SYS_ioprio_get, IOPRIO_WHO_PROCESS, pid) };
    let class = libc::c_int::try_from(prio).ok().filter(|p| *p >= 0)? >> IOPRIO_CLASS_SHIFT;
    Some(nice == 19 && class == IOPRIO_CLASS_IDLE)
}

pub(super) fn cpu_time(pid: u32) -> Option<Duration> {
    let (_, ticks) = stat_and_ticks(pid)?;
    // SAFETY: sysconf has no preconditions.
    let per_second = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })
        .ok()?
        .max(1);
    Some(Duration::from_millis(ticks * 1000 / per_second))
}

pub(super) fn open_fds(pid: u32) -> Option<usize> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count())
}

pub(super) fn open_paths(pid: u32) -> Option<Vec<PathBuf>> {
    let entries = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    Some(
        entries
            .flatten()
            .filter_map(|fd| std::fs::read_link(fd.path()).ok())
            .collect(),
    )
}

pub(super) fn rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmRSS")
}

pub(super) fn peak_rss_kib(pid: u32) -> Option<u64> {
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

pub(super) fn threads(pid: u32) -> Option<Vec<String>> {
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

pub(super) fn watch_limit() -> Option<usize> {
    [
        "/proc/sys/fs/inotify/max_user_watches",
        "/proc/sys/user/max_inotify_watches",
    ]
    .iter()
    .filter_map(|path| std::fs::read_to_string(path).ok()?.trim().parse().ok())
    .min()
}

pub(super) fn watches_held() -> Option<usize> {
    let fds = std::fs::read_dir("/proc/self/fdinfo").ok()?;
    Some(
        fds.filter_map(Result::ok)
            .filter_map(|fd| std::fs::read_to_string(fd.path()).ok())
            .map(|info| {
                info.lines()
                    .filter(|l| l.starts_with("inotify wd:"))
                    .count()
            })
            .sum(),
    )
}

pub(super) fn own_cgroup_files() -> Result<(String, String), String> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
    let cgroup = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
    Ok((mountinfo, cgroup))
}

/// Every listener of the machine is in the socket diagnostics (and in
/// `/proc/net/tcp{,6}`).
pub(super) const SEES_OTHER_USERS: bool = true;

/// From the kernel's socket diagnostics (a dump of listeners only), else
/// from `/proc/net/tcp` and `/proc/net/tcp6`; `None` when neither answers.
pub(super) fn listeners(port: u16) -> Option<Vec<TcpSocket>> {
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
        found.get_or_insert_with(Vec::new).extend(
            tcp::parse(&text)
                .into_iter()
                .filter(|s| s.port == port && s.is_listening()),
        );
    }
    found
}

/// The socket inodes of `/proc/<pid>/fd` (links read `socket:[inode]`).
pub(super) fn socket_ids(pid: u32) -> BTreeSet<u64> {
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return BTreeSet::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| std::fs::read_link(entry.path()).ok())
        .filter_map(|target| {
            let text = target.to_str()?;
            text.strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
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

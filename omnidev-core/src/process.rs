//! Process groups: spawning a service in its own session, signalling and
//! emptying its group, and identifying processes by pid and start time.

use std::io;
use std::process::Stdio;
use std::time::Duration;

use crate::spec::CommandSpec;

/// Spawns `command` as the leader of a new session and process group.
///
/// All process-group setup lives here: `setsid` in the child before `exec`
/// (so the group id equals the child's pid and signals to `-pgid` reach
/// every descendant that does not leave the group), stdin from `/dev/null`,
/// stdout and stderr piped, and on Linux `PR_SET_PDEATHSIG(SIGKILL)` so the
/// leader dies with the thread that spawned it (the orphan guard covers the
/// rest of the group).
pub(crate) fn spawn_group(command: &CommandSpec) -> io::Result<tokio::process::Child> {
    let mut cmd = tokio::process::Command::new(&command.program);
    cmd.args(&command.args)
        .envs(&command.env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if !command.cwd.as_os_str().is_empty() {
        cmd.current_dir(&command.cwd);
    }
    #[cfg(target_os = "linux")]
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs between fork and exec and calls only
    // async-signal-safe functions (setsid, prctl, getppid).
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() == -1 {
                return Err(io::Error::last_os_error());
            }
            #[cfg(target_os = "linux")]
            {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
                // The parent may have died before prctl took effect.
                if libc::getppid() != parent {
                    libc::_exit(137);
                }
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// Sends `signal` to every process of group `pgid`. A group that no longer
/// exists is not an error.
pub(crate) fn signal_group(pgid: i32, signal: i32) {
    if pgid <= 1 {
        return;
    }
    // SAFETY: kill has no memory-safety preconditions; a negative pid
    // addresses a process group.
    unsafe {
        libc::kill(-pgid, signal);
    }
}

/// Whether any live (non-zombie) process is left in group `pgid`.
pub fn group_alive(pgid: i32) -> bool {
    if pgid <= 1 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence and permission.
    let rc = unsafe { libc::kill(-pgid, 0) };
    if rc == -1 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return false;
    }
    // Zombies count as members for kill(2); an orphaned grandchild whose
    // reaper (pid 1 in some containers) never reaps it is gone for our
    // purposes, so on Linux look for a member that is not a zombie.
    #[cfg(target_os = "linux")]
    {
        linux::group_has_live_member(pgid).unwrap_or(true)
    }
    #[cfg(not(target_os = "linux"))]
    {
        true
    }
}

/// Whether process `pid` exists and is not a zombie.
pub fn pid_alive(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    #[cfg(target_os = "linux")]
    {
        linux::stat(pid).is_some_and(|s| s.state != 'Z')
    }
    #[cfg(not(target_os = "linux"))]
    {
        // SAFETY: signal 0 only checks for existence.
        unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
    }
}

/// The start time of process `pid`, used with the pid to recognise a
/// process after a restart of the supervisor: on Linux, field 22 of
/// `/proc/<pid>/stat` (clock ticks since boot). `None` when the process does
/// not exist or the platform offers no cheap way to tell.
pub fn process_start_time(pid: u32) -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        linux::stat(pid).map(|s| s.start_time)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = pid;
        None
    }
}

/// Signals group `pgid` with `signal`, waits up to `grace` for it to empty,
/// then SIGKILLs it and waits until no process of it is left. The caller is
/// responsible for reaping the leader if it is its child.
pub(crate) async fn stop_group(pgid: i32, signal: i32, grace: Duration) {
    signal_group(pgid, signal);
    if wait_group_empty(pgid, grace).await {
        return;
    }
    signal_group(pgid, libc::SIGKILL);
    loop {
        if wait_group_empty(pgid, Duration::from_secs(1)).await {
            return;
        }
        // Members created between the kill and now (a fork in flight).
        signal_group(pgid, libc::SIGKILL);
    }
}

/// Polls until group `pgid` is empty or `limit` has passed; true if empty.
pub(crate) async fn wait_group_empty(pgid: i32, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if !group_alive(pgid) {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
}

#[cfg(target_os = "linux")]
mod linux {
    //! `/proc` parsing.

    pub(super) struct Stat {
        pub(super) state: char,
        pub(super) pgid: i32,
        pub(super) start_time: u64,
    }

    pub(super) fn stat(pid: u32) -> Option<Stat> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        parse_stat(&text)
    }

    /// Parses `/proc/<pid>/stat`; the command name (field 2) may contain
    /// spaces and parentheses, so fields are counted after the last `)`.
    pub(super) fn parse_stat(text: &str) -> Option<Stat> {
        let rest = &text[text.rfind(')')? + 1..];
        let mut fields = rest.split_ascii_whitespace();
        // Field 3 is the first after the name.
        let state = fields.next()?.chars().next()?;
        let _ppid = fields.next()?;
        let pgid = fields.next()?.parse().ok()?;
        // Fields 6..=21 are skipped; field 22 is the start time.
        let start_time = fields.nth(16)?.parse().ok()?;
        Some(Stat {
            state,
            pgid,
            start_time,
        })
    }

    pub(super) fn group_has_live_member(pgid: i32) -> Option<bool> {
        for entry in std::fs::read_dir("/proc").ok()?.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            if let Some(s) = stat(pid)
                && s.pgid == pgid
                && s.state != 'Z'
            {
                return Some(true);
            }
        }
        Some(false)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn parses_names_with_spaces_and_parens() {
            let line =
                "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
            let s = parse_stat(line).expect("parse");
            assert_eq!(s.state, 'S');
            assert_eq!(s.pgid, 42);
            assert_eq!(s.start_time, 987_654);
        }

        #[test]
        fn own_start_time_is_stable() {
            let me = std::process::id();
            let a = stat(me).expect("own stat").start_time;
            let b = stat(me).expect("own stat").start_time;
            assert_eq!(a, b);
            assert!(a > 0);
        }
    }
}

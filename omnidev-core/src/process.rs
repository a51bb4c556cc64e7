//! Process groups: spawning a service in its own session, signalling and
//! emptying its group, and identifying processes by pid and start time.

#[cfg(target_os = "linux")]
mod into_cgroup;

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::Stdio;

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

use crate::spec::CommandSpec;
use crate::sync::Locked;

/// A process identified by pid and start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ProcessRecord {
    /// Process id.
    pub pid: u32,
    /// Start time as the OS reports it, if known.
    pub start_time: Option<u64>,
}

impl ProcessRecord {
    /// The record of a running process, with its current start time.
    pub fn of(pid: u32) -> Self {
        Self { pid, start_time: process_start_time(pid) }
    }

    /// Whether the recorded process still runs: the pid exists and its start
    /// time is the recorded one (both must be known).
    pub fn is_alive(&self) -> bool {
        match self.start_time {
            Some(recorded) => process_start_time(self.pid) == Some(recorded) && pid_alive(self.pid),
            None => false,
        }
    }
}

/// A pid as nix takes it (pids fit in `pid_t`; one that does not names
/// no process).
fn pid_of(pid: u32) -> Pid {
    Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX))
}

/// Where [`spawn_group_in`] starts a process.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Placement<'a> {
    /// Where omnidev is.
    Here,
    /// In the cgroup v2 at this directory (which exists), from before
    /// `exec`, so nothing the process starts is ever outside it.
    Cgroup(&'a std::path::Path),
}

/// A process started by [`spawn_group_in`]: its pid, its output pipes
/// (taken by whoever reads them) and its exit.
#[derive(Debug)]
pub(crate) struct GroupChild {
    /// Its pid and start time, as recorded among [`own_children`].
    record: ProcessRecord,
    /// The read end of its standard output.
    pub(crate) stdout: Option<OwnedFd>,
    /// The read end of its standard error.
    pub(crate) stderr: Option<OwnedFd>,
    exit: Exit,
}

#[derive(Debug)]
enum Exit {
    /// Spawned by tokio, which reaps it.
    Tokio(tokio::process::Child),
    /// Cloned into its cgroup; awaited on its pidfd.
    #[cfg(target_os = "linux")]
    Pidfd(Option<OwnedFd>),
}

impl GroupChild {
    /// Its process id (also its session's and group's).
    pub(crate) fn id(&self) -> u32 {
        self.record.pid
    }

    /// Waits for it to exit and reaps it.
    pub(crate) async fn wait(mut self) -> io::Result<std::process::ExitStatus> {
        match &mut self.exit {
            Exit::Tokio(child) => child.wait().await,
            #[cfg(target_os = "linux")]
            Exit::Pidfd(pidfd) => {
                use std::os::fd::AsFd as _;
                let fd = pidfd.as_ref().ok_or_else(|| io::Error::other("already waited"))?;
                // SAFETY: the pidfd is borrowed from `self`, which this
                // future owns, and is closed only after the AsyncFd is gone.
                let exited = unsafe {
                    tokio::io::unix::AsyncFd::register_with_interest(
                        fd.as_fd(),
                        tokio::io::Interest::READABLE,
                    )
                }?;
                // A pidfd turns readable once its process has exited. Only
                // once it is reaped is the pidfd let go: a wait given up
                // before then leaves the child to `Drop`.
                let _ = exited.readable().await?;
                drop(exited);
                let status = wait_blocking(self.record.pid);
                *pidfd = None;
                forget_own_child(self.record);
                status
            }
        }
    }
}

impl Drop for GroupChild {
    fn drop(&mut self) {
        // Not waited for, or the wait given up before the exit: left to
        // the reaper of adopted processes, which reaps a zombie of another
        // session once it is not recorded ours (and tokio reaps its own).
        #[cfg(target_os = "linux")]
        if let Exit::Pidfd(Some(_)) = self.exit {
            forget_own_child(self.record);
            let _ = waitpid(pid_of(self.record.pid), Some(WaitPidFlag::WNOHANG));
        }
    }
}

/// `waitpid` of an exited child, as an exit status.
#[cfg(target_os = "linux")]
fn wait_blocking(pid: u32) -> io::Result<std::process::ExitStatus> {
    use std::os::unix::process::ExitStatusExt;
    let mut status = 0;
    loop {
        // SAFETY: waitpid writes the status to a local.
        let reaped = unsafe { libc::waitpid(pid as libc::pid_t, &raw mut status, 0) };
        if reaped >= 0 {
            return Ok(std::process::ExitStatus::from_raw(status));
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Whether `clone3(CLONE_INTO_CGROUP)` is refused here (found out by the
/// first spawn into a cgroup; from then on the fallback is used).
#[cfg(target_os = "linux")]
static NO_CLONE_INTO_CGROUP: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Spawns `command` as the leader of a new session and process group, and
/// with [`Placement::Cgroup`] in that cgroup before `exec` (so nothing it
/// starts is ever outside it).
///
/// All process-group setup lives here: `setsid` in the child before `exec`
/// (so the group id equals the child's pid and signals to `-pgid` reach
/// every descendant that does not leave the group), stdin from `/dev/null`,
/// stdout and stderr piped, and on Linux `PR_SET_PDEATHSIG(SIGKILL)` so the
/// leader dies with the thread that spawned it (the orphan guard covers the
/// rest of the group).
///
/// On Linux 5.7 and later the child is cloned straight into the cgroup
/// (`clone3` with `CLONE_INTO_CGROUP`, see `process/into_cgroup.rs`);
/// where the kernel refuses that, found out once, it moves itself in
/// between fork and exec by writing `cgroup.procs`.
///
/// The child's pid is recorded as one of ours until it has been reaped, so
/// the reaper of adopted orphans ([`reap_adopted`]) never takes it.
pub(crate) fn spawn_group_in(
    command: &CommandSpec,
    placement: Placement<'_>,
) -> io::Result<GroupChild> {
    #[cfg(target_os = "linux")]
    let clone3 = !NO_CLONE_INTO_CGROUP.load(std::sync::atomic::Ordering::Relaxed);
    #[cfg(not(target_os = "linux"))]
    let clone3 = false;
    spawn_placed(command, placement, clone3)
}

/// [`spawn_group_in`], trying `clone3` into the cgroup only with `clone3`
/// (tests take the fallback on purpose).
pub(crate) fn spawn_placed(
    command: &CommandSpec,
    placement: Placement<'_>,
    clone3: bool,
) -> io::Result<GroupChild> {
    #[cfg(not(target_os = "linux"))]
    let _ = clone3;
    let mut own = own_children();
    // Forget children that have been reaped (their pid is gone or reused).
    own.retain(|r| r.start_time.is_some() && process_start_time(r.pid) == r.start_time);
    #[cfg(target_os = "linux")]
    if let Placement::Cgroup(dir) = placement
        && clone3
    {
        use std::os::fd::AsFd as _;
        let cgroup = std::fs::File::open(dir)
            .map_err(|e| io::Error::new(e.kind(), format!("cgroup {}: {e}", dir.display())))?;
        match into_cgroup::spawn(command, cgroup.as_fd()) {
            into_cgroup::Attempt::Started(started) => {
                let record = ProcessRecord::of(started.pid);
                own.push(record);
                return Ok(GroupChild {
                    record,
                    stdout: Some(started.stdout),
                    stderr: Some(started.stderr),
                    exit: Exit::Pidfd(Some(started.pidfd)),
                });
            }
            into_cgroup::Attempt::Failed(e) => return Err(e),
            into_cgroup::Attempt::Unsupported => {
                NO_CLONE_INTO_CGROUP.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            into_cgroup::Attempt::CloneFailed => {}
        }
    }
    let procs = match placement {
        Placement::Here => None,
        Placement::Cgroup(dir) => {
            let path = dir.join("cgroup.procs");
            // std opens files close-on-exec, so no service inherits it.
            Some(
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?,
            )
        }
    };
    let mut child = spawn_tokio(command, procs.as_ref().map(AsRawFd::as_raw_fd))?;
    let record = ProcessRecord::of(child.id().unwrap_or_default());
    own.push(record);
    drop(own);
    let stdout = child.stdout.take().map(tokio::process::ChildStdout::into_owned_fd).transpose()?;
    let stderr = child.stderr.take().map(tokio::process::ChildStderr::into_owned_fd).transpose()?;
    Ok(GroupChild { record, stdout, stderr, exit: Exit::Tokio(child) })
}

/// What every service process does to itself before `exec`, however it was
/// started (async-signal-safe calls only): a new session and group, on Linux death with the thread
/// that spawned it (`parent` is omnidev's pid, to catch a parent that died
/// before `prctl` took effect), and every descriptor but its standard
/// streams close-on-exec.
pub(crate) fn child_setup(parent: Pid) -> io::Result<()> {
    nix::unistd::setsid()?;
    #[cfg(target_os = "linux")]
    {
        let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
        // The parent may have died before prctl took effect.
        if nix::unistd::getppid() != parent {
            // SAFETY: _exit is async-signal-safe.
            unsafe { libc::_exit(137) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = parent;
    // omnidev opens everything close-on-exec, but what it inherited without
    // the flag (a pipe or lock of whatever started it) would go on to the
    // service and be held open as long as the service runs.
    cloexec_above_stdio();
    Ok(())
}

/// Marks every descriptor above 2 close-on-exec (async-signal-safe): one
/// `close_range(CLOSE_RANGE_CLOEXEC)` on Linux 5.11 and later, else each
/// number below 4,096 (the bound the guard's own closing uses).
fn cloexec_above_stdio() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: close_range has no memory-safety preconditions.
        let rc = unsafe {
            libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC)
        };
        if rc == 0 {
            return;
        }
    }
    for fd in 3..4096 {
        // SAFETY: fcntl on a number that is no descriptor fails (EBADF)
        // and changes nothing.
        unsafe {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
}

/// The standard library's spawn (through tokio) with the set-up of
/// [`child_setup`], after moving into the cgroup of `cgroup_procs` (an
/// open, close-on-exec `cgroup.procs`) when given.
fn spawn_tokio(
    command: &CommandSpec,
    cgroup_procs: Option<std::os::fd::RawFd>,
) -> io::Result<tokio::process::Child> {
    let mut cmd = tokio::process::Command::new(&command.program);
    cmd.args(&command.args)
        .envs(&command.env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if !command.cwd.as_os_str().is_empty() {
        cmd.current_dir(&command.cwd);
    }
    let parent = nix::unistd::getpid();
    // SAFETY: the closure runs between fork and exec and calls only
    // async-signal-safe functions (write, then those of child_setup).
    unsafe {
        cmd.pre_exec(move || {
            if let Some(fd) = cgroup_procs {
                // "0" moves the writing process.
                if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(io::Error::last_os_error());
                }
            }
            child_setup(parent)
        });
    }
    cmd.spawn()
}

/// Children this process spawned through [`spawn_group_in`]; their exit
/// status belongs to whoever waits on them, never to [`reap_adopted`].
/// Held locked across a spawn so the reaper cannot see a child before it is
/// recorded.
static OWN_CHILDREN: std::sync::Mutex<Vec<ProcessRecord>> = std::sync::Mutex::new(Vec::new());

fn own_children() -> std::sync::MutexGuard<'static, Vec<ProcessRecord>> {
    OWN_CHILDREN.locked()
}

/// Records `pid` (a child just forked) as one of ours, so that
/// [`reap_adopted`] leaves its exit status to whoever waits for it.
pub(crate) fn record_own_child(pid: u32) {
    own_children().push(ProcessRecord::of(pid));
}

/// Forgets `record` as one of ours (reaped by us, or left to
/// [`reap_adopted`]).
#[cfg(target_os = "linux")]
fn forget_own_child(record: ProcessRecord) {
    own_children().retain(|r| *r != record);
}

/// Reaps zombie children that this process did not spawn itself: orphans
/// adopted as a subreaper. A zombie is only reaped when it was not spawned
/// through `spawn_group_in` and is not in this process's own session (a
/// child spawned directly by the embedding program stays in it, so its
/// exit status is left to its owner).
///
/// Internal: the supervisor calls it on each child's exit. Public only for
/// omnidev's own tests (`tests/reaping.rs`); not part of the API, and it
/// may change or go in any release.
#[doc(hidden)]
pub fn reap_adopted() {
    let me = std::process::id();
    let my_session = nix::unistd::getsid(None).map_or(-1, Pid::as_raw);
    let adopted_zombie = |process: &crate::platform::ProcessStat| {
        process.ppid == me && process.is_zombie() && process.sid != my_session
    };
    // Looked for among this process's children, before the lock is
    // taken: a spawn waits for the lock, and a walk of every process
    // of the machine under it (each child's exit started one) held up
    // the respawn of a reload by about 8 ms.
    let candidates: Vec<u32> = crate::platform::children(me)
        .into_iter()
        .filter(|&pid| crate::platform::stat(pid).is_some_and(|p| adopted_zombie(&p)))
        .collect();
    if candidates.is_empty() {
        return;
    }
    let own = own_children();
    for pid in candidates {
        // Read again under the lock: a child spawned meanwhile is
        // recorded by now.
        let Some(process) = crate::platform::stat(pid).filter(|p| adopted_zombie(p)) else {
            continue;
        };
        if own.iter().any(|r| r.pid == process.pid && r.start_time == Some(process.start_time)) {
            continue;
        }
        let _ = waitpid(pid_of(process.pid), Some(WaitPidFlag::WNOHANG));
    }
}

/// Sends `signal` to process `pid`; a process that is gone is not an error.
pub(crate) fn signal_pid(pid: u32, signal: i32) {
    if pid <= 1 {
        return;
    }
    if let Ok(signal) = Signal::try_from(signal) {
        let _ = kill(pid_of(pid), signal);
    }
}

/// Sends `signal` to every process of group `pgid`. A group that no longer
/// exists is not an error.
pub(crate) fn signal_group(pgid: i32, signal: i32) {
    if pgid <= 1 {
        return;
    }
    if let Ok(signal) = Signal::try_from(signal) {
        let _ = killpg(Pid::from_raw(pgid), signal);
    }
}

/// Whether any live (non-zombie) process is left in group `pgid`.
pub fn group_alive(pgid: i32) -> bool {
    if pgid <= 1 {
        return false;
    }
    // No signal only checks for existence and permission.
    if killpg(Pid::from_raw(pgid), None) == Err(Errno::ESRCH) {
        return false;
    }
    // Zombies count as members for kill(2); an orphaned grandchild whose
    // reaper (pid 1 in some containers) never reaps it is gone for our
    // purposes, so look for a member that is not a zombie.
    let pids = crate::platform::pids();
    // Where processes cannot be listed, kill(2) is all there is to go by.
    pids.is_empty()
        || pids
            .into_iter()
            .filter_map(crate::platform::stat)
            .any(|s| s.pgid == pgid && !s.is_zombie())
}

/// Whether process `pid` exists and is not a zombie.
pub fn pid_alive(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    match crate::platform::stat(pid) {
        Some(stat) => !stat.is_zombie(),
        // Unreadable (or gone): kill(2) tells whether it exists.
        None => kill(pid_of(pid), None).is_ok(),
    }
}

/// The start time of process `pid`, used with the pid to recognise a
/// process after a restart of the supervisor
/// ([`crate::platform::ProcessStat::start_time`]). `None` when the process
/// does not exist or cannot be read.
pub fn process_start_time(pid: u32) -> Option<u64> {
    crate::platform::stat(pid).map(|s| s.start_time)
}

#[cfg(test)]
impl GroupChild {
    /// Whether it was cloned straight into its cgroup (see
    /// [`spawn_group_in`]).
    pub(crate) fn cloned_into_cgroup(&self) -> bool {
        !matches!(self.exit, Exit::Tokio(_))
    }
}

//! The orphan guard: a small process per supervisor that SIGKILLs every
//! registered process group when the supervisor disappears, even by SIGKILL.
//!
//! # How it works
//!
//! At start the supervisor creates a close-on-exec pipe and forks. The child
//! (the guard) keeps only the read end; the supervisor keeps the write end
//! and writes one 4-byte record per event: a positive process-group id when
//! a group is spawned, its negation when the group has been emptied. When the
//! supervisor exits for any reason the kernel closes the write end, the guard
//! reads end-of-file, SIGKILLs every group it still knows, and exits.
//!
//! # The guard is guarded
//!
//! A second pipe runs the other way: the guard holds its only write end and
//! never writes, so the supervisor's read end becomes readable (end-of-file)
//! the moment the guard exits, however it ends. The supervisor waits on that
//! readiness (`Guard::ended`: no polling), reaps the guard, forks a new
//! one and tells it every group still registered (the supervisor keeps the
//! table too) and the pod cgroup (`Guard::replace`); the engine says so
//! and records the new pid in `state.json`. A stopped guard (SIGSTOP)
//! would kill nothing, yet its pipe stays open: its stop sends the
//! supervisor a SIGCHLD, on which `Guard::ended` looks (`waitpid` with
//! `WUNTRACED`), kills it and so replaces it too. When no new guard can be
//! started, the engine stops the pod: nothing would stop its processes if
//! omnidev died.
//!
//! # Why fork without exec is safe here
//!
//! The supervisor is a library running inside a multi-threaded tokio
//! process, and after `fork` only async-signal-safe calls are allowed in the
//! child. The guard's code after `fork` therefore uses only `setsid`,
//! `prctl`, `signal`, `fcntl`, `open`, `openat`, `dup2`, `close`,
//! `close_range` and `getdents64` (raw syscalls), `read`, `write`, `kill`,
//! `rmdir`, `unlinkat`, `nanosleep` and `_exit`, on memory that lives on its
//! own stack (a fixed table of 1,024 groups, read and directory buffers) or
//! was prepared before the fork (the cgroup paths); it never allocates,
//! locks or touches Rust's runtime. Re-executing a helper binary was the
//! alternative; it would need a binary on disk that library users do not
//! have.
//!
//! With cgroups (see [`crate::containment`]) the guard is also given the
//! pod cgroup, whose `cgroup.kill` it writes at end-of-file: that kills
//! every process of the pod, wherever it moved in the process tree. It then
//! removes the pod cgroup and every cgroup below it (the services', the
//! prepare steps', any a service made), deepest first, as they empty. The
//! guard calls itself `omnidev-guard` (its `comm`), so `killall omnidev`
//! kills the supervisor and leaves the guard to clean up.
//!
//! The guard calls `setsid` so terminal signals (Ctrl-C, closing the tab)
//! that reach the supervisor's foreground group do not kill it, ignores
//! SIGINT/SIGHUP/SIGQUIT/SIGPIPE, and closes every inherited descriptor
//! except its two pipes (so it never holds a lock file or a socket open).
//! Because the pipes are close-on-exec, services never inherit them.

use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::fmt;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use nix::unistd::Pid;

use crate::sync::Locked;

/// Groups the guard can track at once; more are not protected.
const SLOTS: usize = 1024;

/// The supervisor's side of the orphan guard.
#[derive(Debug)]
pub(crate) struct Guard {
    /// The pod cgroup's `cgroup.kill` and directory, built before any fork
    /// (the guard process may not allocate).
    cgroup: Option<(CString, CString)>,
    live: Mutex<Live>,
}

/// The guard process now, and what it must know.
#[derive(Debug)]
struct Live {
    pid: Pid,
    /// The pipe the guard reads; `None` once [`Guard::close`] was called.
    writer: Option<File>,
    /// The read end of a pipe whose only write end the guard holds: it
    /// reads end-of-file the moment the guard exits.
    death: OwnedFd,
    /// Every group registered and not yet unregistered (with how many
    /// times), told again to a replacement guard.
    groups: BTreeMap<i32, u32>,
    /// How the guard ended, when [`Guard::ended`] already reaped it or
    /// killed it for being stopped.
    ended: Option<String>,
}

impl Live {
    fn send(&mut self, record: i32) {
        if let Some(file) = self.writer.as_mut() {
            // A 4-byte write to a pipe is atomic. A guard that died gets
            // EPIPE (SIGPIPE is ignored): its replacement is told
            // everything in `groups` anyway.
            let _ = file.write_all(&record.to_ne_bytes());
        }
    }
}

impl Guard {
    /// Forks the guard process. With `cgroup` (the pod cgroup), the guard
    /// also kills every process of it (through its `cgroup.kill`) when the
    /// supervisor disappears, then removes it and every cgroup below it
    /// once they are empty.
    pub(crate) fn start(cgroup: Option<&Path>) -> io::Result<Guard> {
        let c_path = |path: PathBuf| {
            CString::new(path.into_os_string().into_encoded_bytes())
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
        };
        let cgroup = match cgroup {
            Some(pod) => Some((c_path(pod.join("cgroup.kill"))?, c_path(pod.to_path_buf())?)),
            None => None,
        };
        let live = fork_guard(cgroup.as_ref())?;
        Ok(Guard { cgroup, live: Mutex::new(live) })
    }

    fn lock(&self) -> MutexGuard<'_, Live> {
        self.live.locked()
    }

    /// The guard's process id (the current guard's, after a replacement).
    pub(crate) fn pid(&self) -> u32 {
        self.lock().pid.as_raw() as u32
    }

    /// Tells the guard about a new process group.
    pub(crate) fn register(&self, pgid: i32) {
        if pgid <= 0 {
            return;
        }
        let mut live = self.lock();
        *live.groups.entry(pgid).or_default() += 1;
        live.send(pgid);
    }

    /// Tells the guard a group is empty and must not be killed any more.
    pub(crate) fn unregister(&self, pgid: i32) {
        let mut live = self.lock();
        let Some(count) = live.groups.get_mut(&pgid) else {
            return;
        };
        *count -= 1;
        if *count == 0 {
            live.groups.remove(&pgid);
        }
        live.send(-pgid);
    }

    /// Closes the pipe (the guard kills what is still registered, normally
    /// nothing) and reaps the guard.
    pub(crate) fn close(&self) {
        let (writer, pid) = {
            let mut live = self.lock();
            (live.writer.take(), live.pid)
        };
        if writer.is_none() {
            return;
        }
        drop(writer);
        // The guard exits right after end-of-file.
        let _ = nix::sys::wait::waitpid(pid, None);
    }

    /// Resolves as soon as the guard process has ended (at once if it
    /// already has): readiness of the pipe only the guard writes to, so
    /// nothing polls. Also resolves after [`Guard::close`].
    ///
    /// # Errors
    ///
    /// When the pipe cannot be watched (no tokio reactor, no descriptor).
    /// A guard that is stopped (SIGSTOP, SIGTSTP: it could kill nothing)
    /// counts as ended: it is noticed at the SIGCHLD its stop sends, killed,
    /// and so replaced like a dead one.
    pub(crate) async fn ended(&self) -> io::Result<()> {
        let mut child_signals =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())?;
        let death = self.lock().death.try_clone()?;
        // The duplicate shares the open file; nothing else reads it.
        let flags = nix::fcntl::fcntl(&death, nix::fcntl::FcntlArg::F_GETFL)?;
        let flags = nix::fcntl::OFlag::from_bits_truncate(flags) | nix::fcntl::OFlag::O_NONBLOCK;
        nix::fcntl::fcntl(&death, nix::fcntl::FcntlArg::F_SETFL(flags))?;
        // SAFETY: the descriptor is owned by `death`, which the AsyncFd
        // owns until it is dropped at the end of this function.
        let watched = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(death, tokio::io::Interest::READABLE)
        }
        .map_err(|e| e.into_parts().1)?;
        loop {
            self.kill_if_stopped();
            tokio::select! {
                ready = watched.readable() => return ready.map(drop),
                _ = child_signals.recv() => {}
            }
        }
    }

    /// Kills the guard when it is stopped (it ends, and [`Guard::ended`]
    /// sees its pipe close); keeps how it ended when it was reaped here.
    fn kill_if_stopped(&self) {
        use nix::sys::wait::{WaitPidFlag, WaitStatus};
        let mut live = self.lock();
        if live.writer.is_none() || live.ended.is_some() {
            return;
        }
        match nix::sys::wait::waitpid(live.pid, Some(WaitPidFlag::WUNTRACED | WaitPidFlag::WNOHANG))
        {
            Ok(WaitStatus::Stopped(pid, signal)) => {
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                live.ended = Some(format!("stopped by {signal}, so killed"));
            }
            Ok(status @ (WaitStatus::Exited(..) | WaitStatus::Signaled(..))) => {
                live.ended = Some(describe(status));
            }
            _ => {}
        }
    }

    /// After [`Guard::ended`]: reaps the guard that ended and forks a new
    /// one, which is told every registered group before anything else can
    /// register (and is given the pod cgroup). `None` after
    /// [`Guard::close`] (the end was asked for).
    pub(crate) fn replace(&self) -> Option<Replaced> {
        let mut live = self.lock();
        live.writer.as_ref()?;
        let old = live.pid;
        let reaped = loop {
            match nix::sys::wait::waitpid(old, None) {
                Err(nix::errno::Errno::EINTR) => {}
                Ok(status) => break describe(status),
                Err(e) => break format!("it could not be reaped: {e}"),
            }
        };
        // Already reaped (ECHILD here) or killed for being stopped: what
        // was seen then.
        let ended = live.ended.take().unwrap_or(reaped);
        let groups = live.groups.clone();
        let outcome = fork_guard(self.cgroup.as_ref()).map(|new| {
            let Live { pid, writer, death, .. } = new;
            live.pid = pid;
            live.writer = writer;
            live.death = death;
            for (&pgid, &count) in &groups {
                for _ in 0..count {
                    live.send(pgid);
                }
            }
            pid.as_raw() as u32
        });
        if outcome.is_err() {
            // Nothing guards the pod; the caller stops it.
            live.writer = None;
        }
        Some(Replaced {
            old: old.as_raw() as u32,
            ended,
            new: outcome.map_err(|e| e.to_string()),
            groups: groups.len(),
            cgroup: self.cgroup.is_some(),
        })
    }
}

/// How a guard ended, in words.
fn describe(status: nix::sys::wait::WaitStatus) -> String {
    match status {
        nix::sys::wait::WaitStatus::Signaled(_, signal, _) => format!("killed by {signal}"),
        nix::sys::wait::WaitStatus::Exited(_, code) => format!("exited with code {code}"),
        other => format!("{other:?}"),
    }
}

/// A guard that ended while its supervisor ran, and its replacement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Replaced {
    /// The guard that ended.
    old: u32,
    /// How it ended: `killed by SIGKILL`.
    ended: String,
    /// The new guard's pid, or why none could be started.
    new: Result<u32, String>,
    /// How many process groups the new guard was told.
    groups: usize,
    /// Whether it guards a pod cgroup too.
    cgroup: bool,
}

impl Replaced {
    /// Whether no new guard runs: the pod must stop, as nothing would stop
    /// its processes if omnidev died.
    pub(crate) fn lost(&self) -> bool {
        self.new.is_err()
    }
}

impl fmt::Display for Replaced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the orphan guard (pid {}) ended ({}); ", self.old, self.ended)?;
        let what = if self.cgroup {
            format!("the pod cgroup and {} process group(s)", self.groups)
        } else {
            format!("{} process group(s)", self.groups)
        };
        match &self.new {
            Ok(pid) => write!(f, "a new one (pid {pid}) guards {what}"),
            Err(e) => write!(
                f,
                "a new one could not be started ({e}): stopping the pod, since nothing would stop \
                 its processes if omnidev died"
            ),
        }
    }
}

/// Forks a guard process (told nothing yet), given the pod cgroup's
/// `cgroup.kill` and directory.
fn fork_guard(cgroup: Option<&(CString, CString)>) -> io::Result<Live> {
    let (read, write) = cloexec_pipe()?;
    let (death, death_write) = cloexec_pipe()?;
    let (read_fd, death_fd) = (read.as_raw_fd(), death_write.as_raw_fd());
    // SAFETY: the child branch calls only async-signal-safe functions
    // (see the module docs) and never returns.
    let pid = unsafe { libc::fork() };
    if pid == -1 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: we are the freshly forked child.
        unsafe { guard_main(read_fd, death_fd, cgroup) }
    }
    crate::process::record_own_child(pid as u32);
    // The read end and the death pipe's write end are the guard's alone.
    drop(read);
    drop(death_write);
    Ok(Live {
        pid: Pid::from_raw(pid),
        writer: Some(File::from(write)),
        death,
        groups: BTreeMap::new(),
        ended: None,
    })
}

/// Runs `command` to its end in a process group of its own, tied to this
/// process: an orphan guard of its own kills the whole group if this
/// process dies first (Ctrl-C, a closed terminal, even `kill -9`), so
/// nothing it started is left running and printing into the terminal.
/// Its stdio is left as the caller set it. For one-off commands outside a
/// supervisor, such as `uv tool install`.
pub fn run_tied(command: &mut std::process::Command) -> io::Result<std::process::ExitStatus> {
    use std::os::unix::process::CommandExt as _;
    command.process_group(0);
    #[cfg(target_os = "linux")]
    // SAFETY: prctl is async-signal-safe. It covers the instant between
    // the spawn and the guard learning the group.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let guard = Guard::start(None)?;
    let mut child = command.spawn()?;
    let group = i32::try_from(child.id()).map_err(io::Error::other)?;
    guard.register(group);
    let status = child.wait();
    // Ended: nothing of the group is the guard's business any more.
    guard.unregister(group);
    guard.close();
    status
}

/// A pipe whose both ends are close-on-exec: (read, write).
fn cloexec_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    #[cfg(target_os = "linux")]
    {
        Ok(nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?)
    }
    #[cfg(not(target_os = "linux"))]
    {
        use nix::fcntl::{FcntlArg, FdFlag, fcntl};
        let (read, write) = nix::unistd::pipe()?;
        for end in [&read, &write] {
            fcntl(end, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))?;
        }
        Ok((read, write))
    }
}

/// The guard process. Async-signal-safe calls only; never returns.
unsafe fn guard_main(
    read_fd: libc::c_int,
    death_fd: libc::c_int,
    cgroup: Option<&(CString, CString)>,
) -> ! {
    const PIPE: libc::c_int = 3;
    // Held open, never written: the supervisor sees end-of-file on its
    // read end when this process exits, however it ends.
    const DEATH: libc::c_int = 4;
    // SAFETY: every call below is async-signal-safe and works on stack
    // memory or static C strings.
    unsafe {
        libc::setsid();
        // Not named like the supervisor, so `killall omnidev` leaves the
        // guard to clean up after it.
        #[cfg(target_os = "linux")]
        libc::prctl(libc::PR_SET_NAME, c"omnidev-guard".as_ptr(), 0, 0, 0);
        for sig in [
            libc::SIGINT,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGPIPE,
            libc::SIGTSTP,
            libc::SIGTTIN,
            libc::SIGTTOU,
        ] {
            libc::signal(sig, libc::SIG_IGN);
        }
        libc::signal(libc::SIGTERM, libc::SIG_DFL);
        // Out of the way first, so neither lands on the other's number.
        let read_high = libc::fcntl(read_fd, libc::F_DUPFD, 10);
        let death_high = libc::fcntl(death_fd, libc::F_DUPFD, 10);
        libc::dup2(read_high, PIPE);
        libc::dup2(death_high, DEATH);
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
            if null > DEATH {
                libc::close(null);
            }
        }
        close_from(DEATH + 1);

        let mut slots = [0i32; SLOTS];
        let mut buf = [0u8; 4096];
        let mut carry = [0u8; 4];
        let mut carried = 0usize;
        loop {
            let n = libc::read(PIPE, buf.as_mut_ptr().cast(), buf.len());
            if n == 0 {
                break;
            }
            if n < 0 {
                if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                break;
            }
            for &byte in &buf[..n as usize] {
                carry[carried] = byte;
                carried += 1;
                if carried == 4 {
                    carried = 0;
                    apply(&mut slots, i32::from_ne_bytes(carry));
                }
            }
        }
        for &pgid in &slots {
            if pgid > 1 {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
        if let Some((kill_file, pod)) = cgroup {
            kill_cgroup(kill_file, pod);
        }
        libc::_exit(0)
    }
}

/// Writes `cgroup.kill`, then removes the pod cgroup and every cgroup
/// below it (deepest first: the services' and the prepare steps', and any
/// a service made) as they empty, for up to about 5 s. Async-signal-safe.
unsafe fn kill_cgroup(kill_file: &CStr, pod: &CStr) {
    // SAFETY: open/write/close/rmdir/nanosleep on C strings prepared before
    // the fork; no allocation.
    unsafe {
        let fd = libc::open(kill_file.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd >= 0 {
            libc::write(fd, b"1".as_ptr().cast(), 1);
            libc::close(fd);
        }
        let pause = libc::timespec { tv_sec: 0, tv_nsec: 10_000_000 };
        for _ in 0..500 {
            remove_below(pod);
            libc::rmdir(pod.as_ptr());
            if libc::access(pod.as_ptr(), libc::F_OK) != 0 {
                return;
            }
            libc::nanosleep(&raw const pause, std::ptr::null_mut());
        }
    }
}

/// Removes every directory below `dir`, deepest first (those that will
/// go: an empty cgroup, an empty directory). Async-signal-safe: the
/// entries are read with the raw `getdents64` into stack buffers.
#[cfg(target_os = "linux")]
unsafe fn remove_below(dir: &CStr) {
    // SAFETY: open/close on a C string prepared before the fork.
    unsafe {
        let fd = libc::open(
            dir.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        );
        if fd >= 0 {
            remove_below_fd(fd, 0);
            libc::close(fd);
        }
    }
}

/// Cgroups are not nested deeper than this below a pod (the service's
/// own, and what a service made inside it).
#[cfg(target_os = "linux")]
const MAX_DEPTH: u32 = 16;

#[cfg(target_os = "linux")]
unsafe fn remove_below_fd(fd: libc::c_int, depth: u32) {
    // `struct linux_dirent64`: inode (8 bytes), offset (8), record length
    // (2), type (1), then the NUL-terminated name.
    const RECLEN: usize = 16;
    const TYPE: usize = 18;
    const NAME: usize = 19;
    if depth > MAX_DEPTH {
        return;
    }
    // u64s: the kernel writes 8-byte-aligned records.
    let mut buf = [0u64; 512];
    loop {
        // SAFETY: getdents64 writes at most the buffer's size into it.
        let n = unsafe {
            libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), std::mem::size_of_val(&buf))
        };
        let Ok(n) = usize::try_from(n) else { return };
        if n == 0 {
            return;
        }
        let bytes = buf.as_ptr().cast::<u8>();
        let mut at = 0usize;
        while at + NAME < n {
            // SAFETY: `at` is the start of a record the kernel wrote within
            // the first `n` bytes; the name is NUL-terminated inside it.
            unsafe {
                let len =
                    usize::from(std::ptr::read_unaligned(bytes.add(at + RECLEN).cast::<u16>()));
                let kind = *bytes.add(at + TYPE);
                let name = bytes.add(at + NAME).cast::<libc::c_char>();
                if len == 0 {
                    return;
                }
                let dot = *name == b'.' as libc::c_char
                    && (*name.add(1) == 0
                        || (*name.add(1) == b'.' as libc::c_char && *name.add(2) == 0));
                if kind == libc::DT_DIR && !dot {
                    let sub = libc::openat(
                        fd,
                        name,
                        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                    );
                    if sub >= 0 {
                        remove_below_fd(sub, depth + 1);
                        libc::close(sub);
                    }
                    libc::unlinkat(fd, name, libc::AT_REMOVEDIR);
                }
                at += len;
            }
        }
    }
}

/// Cgroups exist only on Linux.
#[cfg(not(target_os = "linux"))]
unsafe fn remove_below(_dir: &CStr) {}

fn apply(slots: &mut [i32; SLOTS], record: i32) {
    if record > 0 {
        if let Some(slot) = slots.iter_mut().find(|s| **s == 0) {
            *slot = record;
        }
    } else if let Some(slot) = slots.iter_mut().find(|s| **s == -record) {
        *slot = 0;
    }
}

/// Closes every descriptor from `first` up.
unsafe fn close_from(first: libc::c_int) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: close_range has no memory-safety preconditions.
        let rc = unsafe { libc::syscall(libc::SYS_close_range, first as u32, u32::MAX, 0u32) };
        if rc == 0 {
            return;
        }
    }
    for fd in first..4096 {
        // SAFETY: closing an unused number is harmless (EBADF).
        unsafe {
            libc::close(fd);
        }
    }
}

#[cfg(test)]
mod tests {
    impl super::Replaced {
        /// A guard `old` that ended when no new one could be started (`why`).
        pub(crate) fn none_started(old: u32, why: &str) -> Self {
            Self {
                old,
                ended: "killed by SIGKILL".to_owned(),
                new: Err(why.to_owned()),
                groups: 0,
                cgroup: false,
            }
        }
    }

    use super::*;

    #[test]
    fn a_tied_command_runs_and_reports_its_status() {
        let status =
            run_tied(std::process::Command::new("sh").args(["-c", "exit 3"])).expect("run");
        assert_eq!(status.code(), Some(3));
        let status = run_tied(&mut std::process::Command::new("true")).expect("run");
        assert!(status.success());
    }

    #[test]
    fn table_registers_and_forgets_groups() {
        let mut slots = [0i32; SLOTS];
        apply(&mut slots, 10);
        apply(&mut slots, 11);
        apply(&mut slots, -10);
        assert_eq!(slots.iter().filter(|s| **s != 0).count(), 1);
        assert!(slots.contains(&11));
        apply(&mut slots, -99);
        assert!(slots.contains(&11));
    }

    #[tokio::test]
    async fn a_killed_guard_is_replaced_by_one_that_knows_every_group() {
        use std::os::unix::process::CommandExt as _;
        let guard = Guard::start(None).expect("start guard");
        let mut sleeper = std::process::Command::new("sleep")
            .arg("1000")
            .process_group(0)
            .spawn()
            .expect("sleep");
        let group = sleeper.id() as i32;
        guard.register(group);
        let (other, old) = (4_000_000, guard.pid());
        guard.register(other);
        guard.unregister(other);
        nix::sys::signal::kill(Pid::from_raw(old as i32), nix::sys::signal::Signal::SIGKILL)
            .expect("kill the guard");
        tokio::time::timeout(std::time::Duration::from_secs(30), guard.ended())
            .await
            .expect("noticed within the deadline")
            .expect("watched");
        let replaced = guard.replace().expect("not closed");
        assert!(!replaced.lost(), "{replaced}");
        let new = guard.pid();
        assert_ne!(new, old);
        assert_eq!(
            replaced.to_string(),
            format!(
                "the orphan guard (pid {old}) ended (killed by SIGKILL); a new one (pid {new}) \
                 guards 1 process group(s)"
            )
        );
        assert!(crate::platform::stat(old).is_none(), "the old guard is reaped");
        // The new guard kills the group it was told about at end-of-file.
        guard.close();
        let status = sleeper.wait().expect("wait");
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGKILL));
        assert!(guard.replace().is_none(), "closed: nothing to replace");
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_stopped_guard_is_killed_and_replaced() {
        let guard = Guard::start(None).expect("start guard");
        let old = guard.pid();
        nix::sys::signal::kill(Pid::from_raw(old as i32), nix::sys::signal::Signal::SIGSTOP)
            .expect("stop the guard");
        tokio::time::timeout(std::time::Duration::from_secs(30), guard.ended())
            .await
            .expect("noticed within the deadline")
            .expect("watched");
        let replaced = guard.replace().expect("not closed");
        assert!(
            replaced.to_string().contains("ended (stopped by SIGSTOP, so killed)"),
            "{replaced}"
        );
        assert!(crate::platform::stat(old).is_none(), "reaped");
        guard.close();
    }

    #[test]
    fn the_cgroup_tree_is_removed_deepest_first_sparing_what_is_not_empty() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pod = dir.path().join("pod");
        for leaf in ["0-web/inner/deeper", "0-web.prepare-0", "1-host", "2-busy"] {
            std::fs::create_dir_all(pod.join(leaf)).expect("mkdir");
        }
        std::fs::write(pod.join("2-busy/file"), "x").expect("write");
        let c = |p: PathBuf| CString::new(p.into_os_string().into_encoded_bytes()).expect("c");
        // SAFETY: plain syscalls on paths made here.
        unsafe { remove_below(&c(pod.clone())) };
        let mut left: Vec<String> = std::fs::read_dir(&pod)
            .expect("pod stays: it is not empty")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["2-busy"]);
        std::fs::remove_file(pod.join("2-busy/file")).expect("rm");
        // SAFETY: as above; no cgroup.kill there, so only the removal runs.
        unsafe { kill_cgroup(&c(pod.join("cgroup.kill")), &c(pod.clone())) };
        assert!(!pod.exists());
    }

    #[test]
    fn guard_starts_and_exits_when_closed() {
        let guard = Guard::start(None).expect("start guard");
        let pid = guard.pid();
        assert!(crate::process::pid_alive(pid));
        guard.close();
        assert!(!crate::process::pid_alive(pid));
    }
}

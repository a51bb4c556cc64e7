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
//! # Why fork without exec is safe here
//!
//! The supervisor is a library running inside a multi-threaded tokio
//! process, and after `fork` only async-signal-safe calls are allowed in the
//! child. The guard's code after `fork` therefore uses only `setsid`,
//! `prctl`, `signal`, `open`, `dup2`, `close`, `close_range` (a raw
//! syscall), `read`, `write`, `kill` and `_exit`, on memory that lives on
//! its own stack (a fixed table of 1,024 groups and a read buffer) or was
//! prepared before the fork (the `cgroup.kill` path); it never allocates, locks or touches
//! Rust's runtime. Re-executing a helper binary was the alternative; it
//! would need a binary on disk that library users do not have.
//!
//! With cgroups (see [`crate::containment`]) the guard is also given the
//! pod cgroup's `cgroup.kill`, which it writes at end-of-file: that kills
//! every process of the pod, wherever it moved in the process tree. The
//! guard calls itself `omnidev-guard` (its `comm`), so `killall omnidev`
//! kills the supervisor and leaves the guard to clean up.
//!
//! The guard calls `setsid` so terminal signals (Ctrl-C, closing the tab)
//! that reach the supervisor's foreground group do not kill it, ignores
//! SIGINT/SIGHUP/SIGQUIT/SIGPIPE, and closes every inherited descriptor
//! except the pipe (so it never holds a lock file or a socket open).
//! Because the pipe is close-on-exec, services never inherit its write end.

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nix::unistd::Pid;

/// Groups the guard can track at once; more are not protected.
const SLOTS: usize = 1024;

/// The supervisor's side of the orphan guard.
#[derive(Debug)]
pub(crate) struct Guard {
    pid: Pid,
    writer: Mutex<Option<File>>,
}

impl Guard {
    /// Forks the guard process. With `cgroup` (the pod cgroup and the
    /// cgroups below it), the guard also kills every process of the pod
    /// cgroup (through its `cgroup.kill`) when the supervisor disappears,
    /// then removes those cgroups once they are empty.
    pub(crate) fn start(cgroup: Option<(&Path, Vec<PathBuf>)>) -> io::Result<Guard> {
        // Built before the fork: the child may not allocate.
        let c_path = |path: PathBuf| {
            CString::new(path.into_os_string().into_encoded_bytes())
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
        };
        let cgroup = match cgroup {
            Some((pod, leaves)) => {
                let mut dirs = leaves
                    .into_iter()
                    .map(c_path)
                    .collect::<io::Result<Vec<_>>>()?;
                dirs.push(c_path(pod.to_path_buf())?);
                Some((c_path(pod.join("cgroup.kill"))?, dirs))
            }
            None => None,
        };
        let (read, write) = cloexec_pipe()?;
        let read_fd = read.as_raw_fd();
        // SAFETY: the child branch calls only async-signal-safe functions
        // (see the module docs) and never returns.
        let pid = unsafe { libc::fork() };
        if pid == -1 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: we are the freshly forked child.
            unsafe { guard_main(read_fd, cgroup.as_ref()) }
        }
        crate::process::record_own_child(pid as u32);
        // The read end is the guard's alone.
        drop(read);
        Ok(Guard {
            pid: Pid::from_raw(pid),
            writer: Mutex::new(Some(File::from(write))),
        })
    }

    /// The guard's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.pid.as_raw() as u32
    }

    /// Tells the guard about a new process group.
    pub(crate) fn register(&self, pgid: i32) {
        self.send(pgid);
    }

    /// Tells the guard a group is empty and must not be killed any more.
    pub(crate) fn unregister(&self, pgid: i32) {
        self.send(-pgid);
    }

    fn send(&self, record: i32) {
        if record == 0 {
            return;
        }
        let mut writer = self
            .writer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(file) = writer.as_mut() {
            // A 4-byte write to a pipe is atomic. If the guard died, there
            // is nothing better to do than carry on unprotected.
            let _ = file.write_all(&record.to_ne_bytes());
        }
    }

    /// Closes the pipe (the guard kills what is still registered, normally
    /// nothing) and reaps the guard.
    pub(crate) fn close(&self) {
        let writer = self
            .writer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if writer.is_none() {
            return;
        }
        drop(writer);
        // The guard exits right after end-of-file.
        let _ = nix::sys::wait::waitpid(self.pid, None);
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.close();
    }
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
unsafe fn guard_main(read_fd: libc::c_int, cgroup: Option<&(CString, Vec<CString>)>) -> ! {
    const PIPE: libc::c_int = 3;
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
        if read_fd != PIPE {
            libc::dup2(read_fd, PIPE);
            libc::close(read_fd);
        }
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
            if null > PIPE {
                libc::close(null);
            }
        }
        close_from(PIPE + 1);

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
        if let Some((kill_file, dirs)) = cgroup {
            kill_cgroup(kill_file, dirs);
        }
        libc::_exit(0)
    }
}

/// Writes `cgroup.kill`, then removes the cgroups (deepest first, the pod
/// last) as they empty, for up to about 5 s. Async-signal-safe.
unsafe fn kill_cgroup(kill_file: &CString, dirs: &[CString]) {
    // SAFETY: open/write/close/rmdir/nanosleep on C strings prepared before
    // the fork; no allocation.
    unsafe {
        let fd = libc::open(kill_file.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd >= 0 {
            libc::write(fd, b"1".as_ptr().cast(), 1);
            libc::close(fd);
        }
        let pause = libc::timespec {
            tv_sec: 0,
            tv_nsec: 10_000_000,
        };
        for _ in 0..500 {
            for dir in dirs {
                libc::rmdir(dir.as_ptr());
            }
            if let Some(pod) = dirs.last()
                && libc::access(pod.as_ptr(), libc::F_OK) != 0
            {
                return;
            }
            libc::nanosleep(&raw const pause, std::ptr::null_mut());
        }
    }
}

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

    #[test]
    fn guard_starts_and_exits_when_closed() {
        let guard = Guard::start(None).expect("start guard");
        let pid = guard.pid();
        assert!(crate::process::pid_alive(pid));
        guard.close();
        assert!(!crate::process::pid_alive(pid));
    }
}

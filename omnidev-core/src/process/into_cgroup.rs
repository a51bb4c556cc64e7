//! Linux: starting a process straight inside a cgroup v2 with
//! `clone3(CLONE_INTO_CGROUP | CLONE_PIDFD)` (Linux 5.7+), so the child is
//! a member from its first instruction and never moves.
//!
//! The other way, the child writing its own pid to `cgroup.procs` between
//! fork and exec, makes the kernel migrate a running process: that takes
//! the write side of the cgroup subsystem's thread-group lock, which waits
//! for an RCU grace period, and a reload waited that long (4.8 ms median,
//! up to 22 ms on a busy machine) for the new server's `exec`. A process
//! forked into its cgroup takes only the read side, as every fork does.
//!
//! The child does what the standard library's spawn does with the closure
//! of [`super::spawn_group_in`]: `/dev/null` and two pipes as its standard
//! streams, an empty signal mask and SIGPIPE at its default, then
//! [`super::child_setup`], the working directory, and `execvp` with the
//! service's environment (so `PATH` is searched as `std` searches it). A
//! failure before `exec` comes back through a close-on-exec pipe, as in
//! `std`. The exit is awaited on the pidfd.

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use crate::spec::CommandSpec;

/// `CLONE_INTO_CGROUP` from `<linux/sched.h>` (not in the libc crate).
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// `struct clone_args` up to `cgroup` (`CLONE_ARGS_SIZE_VER2`, 88 bytes).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// A child started in its cgroup.
pub(super) struct ChildStarted {
    pub(super) pid: u32,
    pub(super) pidfd: OwnedFd,
    pub(super) stdout: OwnedFd,
    pub(super) stderr: OwnedFd,
}

/// What became of an attempt.
pub(super) enum Attempt {
    Started(ChildStarted),
    /// The kernel (or a seccomp filter) refuses `clone3` or one of its
    /// flags: the fallback is used from now on.
    Unsupported,
    /// `clone3` failed for another reason (out of processes, a cgroup that
    /// takes no processes): the fallback is tried for this spawn.
    CloneFailed,
    /// The child could not set itself up or `exec` (no such program, say),
    /// or the parent could not prepare it: the spawn's error.
    Failed(io::Error),
}

/// Errors of `clone3` that mean "not here": no such call (before 5.3, or a
/// container's seccomp profile, which answers ENOSYS or EPERM), an argument
/// structure too large (before 5.7) or a flag unknown (EINVAL).
fn unsupported(errno: i32) -> bool {
    matches!(errno, libc::ENOSYS | libc::E2BIG | libc::EINVAL | libc::EPERM)
}

/// A `pipe2(O_CLOEXEC)`: (read end, write end).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from)
}

fn c_string(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "`{}` holds a NUL byte (a program, argument, variable or directory cannot)",
                String::from_utf8_lossy(bytes)
            ),
        )
    })
}

/// A NULL-terminated array of pointers into `strings`.
fn pointers(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings.iter().map(|s| s.as_ptr()).chain(std::iter::once(std::ptr::null())).collect()
}

/// Everything the child needs, built before the clone: between clone and
/// exec, a child of a multi-threaded process may not allocate.
struct Prepared {
    program: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    cwd: Option<CString>,
}

fn prepare(command: &CommandSpec) -> io::Result<Prepared> {
    let program = c_string(command.program.as_bytes())?;
    let mut argv = vec![program.clone()];
    for arg in &command.args {
        argv.push(c_string(arg.as_bytes())?);
    }
    // The inherited environment with the command's variables on top, as
    // `Command::envs` has it.
    let mut vars: std::collections::BTreeMap<OsString, OsString> = std::env::vars_os().collect();
    for (key, value) in &command.env {
        vars.insert(OsString::from(key), OsString::from(value));
    }
    let mut envp = Vec::with_capacity(vars.len());
    for (key, value) in vars {
        let mut entry = key.into_vec();
        entry.push(b'=');
        entry.extend_from_slice(value.as_bytes());
        envp.push(c_string(&entry)?);
    }
    let cwd = if command.cwd.as_os_str().is_empty() {
        None
    } else {
        Some(c_string(command.cwd.as_os_str().as_bytes())?)
    };
    Ok(Prepared { program, argv, envp, cwd })
}

/// Starts `command` inside the cgroup whose directory `cgroup` is open, as
/// the leader of a new session.
pub(super) fn spawn(command: &CommandSpec, cgroup: BorrowedFd<'_>) -> Attempt {
    let prepared = match prepare(command) {
        Ok(prepared) => prepared,
        Err(e) => return Attempt::Failed(e),
    };
    let fds = (|| -> io::Result<_> {
        let null = std::fs::File::open("/dev/null")?;
        Ok((OwnedFd::from(null), pipe()?, pipe()?, pipe()?))
    })();
    let (null, (out_r, out_w), (err_r, err_w), (report_r, report_w)) = match fds {
        Ok(fds) => fds,
        Err(e) => return Attempt::Failed(e),
    };
    let argv = pointers(&prepared.argv);
    let envp = pointers(&prepared.envp);
    let parent = nix::unistd::getpid();
    let mut pidfd: libc::c_int = -1;
    let args = CloneArgs {
        flags: CLONE_INTO_CGROUP | libc::CLONE_PIDFD as u64,
        pidfd: std::ptr::addr_of_mut!(pidfd) as u64,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: cgroup.as_raw_fd() as u64,
        ..CloneArgs::default()
    };
    // SAFETY: clone3 without CLONE_VM and without a stack is a fork: the
    // child gets a copy of this address space and returns here with 0. It
    // runs only `child`, which makes async-signal-safe calls on memory
    // prepared above and ends in exec or _exit.
    let pid = unsafe {
        libc::syscall(libc::SYS_clone3, std::ptr::addr_of!(args), std::mem::size_of::<CloneArgs>())
    };
    if pid == 0 {
        // SAFETY: in the child, see above.
        unsafe {
            child(&Child {
                null: null.as_raw_fd(),
                out: out_w.as_raw_fd(),
                err: err_w.as_raw_fd(),
                report: report_w.as_raw_fd(),
                program: prepared.program.as_ptr(),
                argv: argv.as_ptr(),
                envp: envp.as_ptr(),
                cwd: prepared.cwd.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
                parent,
            })
        }
    }
    if pid < 0 {
        return if io::Error::last_os_error().raw_os_error().is_some_and(unsupported) {
            Attempt::Unsupported
        } else {
            Attempt::CloneFailed
        };
    }
    // SAFETY: clone3 with CLONE_PIDFD stored a new descriptor we own.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    drop((null, out_w, err_w, report_w));
    let pid = pid as u32;
    match exec_report(&report_r) {
        None => Attempt::Started(ChildStarted { pid, pidfd, stdout: out_r, stderr: err_r }),
        Some(e) => {
            // It has _exited (or is about to): reap it.
            let _ = nix::sys::wait::waitpid(super::pid_of(pid), None);
            Attempt::Failed(e)
        }
    }
}

/// What the child reported before `exec`: nothing (the pipe closed by a
/// successful exec), or the errno of the step that failed.
fn exec_report(report: &OwnedFd) -> Option<io::Error> {
    let mut bytes = [0u8; 4];
    let mut read = 0;
    while read < bytes.len() {
        match nix::unistd::read(report, &mut bytes[read..]) {
            Ok(0) => break,
            Ok(n) => read += n,
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Some(io::Error::from(e)),
        }
    }
    (read == bytes.len()).then(|| io::Error::from_raw_os_error(i32::from_ne_bytes(bytes)))
}

/// What the child works with: raw descriptors and pointers into memory
/// the parent prepared.
struct Child {
    null: libc::c_int,
    out: libc::c_int,
    err: libc::c_int,
    report: libc::c_int,
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    parent: nix::unistd::Pid,
}

unsafe extern "C" {
    static mut environ: *const *const libc::c_char;
}

/// The child between clone and exec: sets itself up and execs, or writes
/// the errno of what failed to the report pipe and exits 127.
///
/// # Safety
///
/// Only in the child of [`spawn`]'s clone, with `child`'s pointers valid.
unsafe fn child(child: &Child) -> ! {
    // SAFETY: each call below is async-signal-safe and gets valid
    // descriptors and NUL-terminated strings from the parent.
    let errno = unsafe {
        (|| -> Result<(), i32> {
            let check = |result: libc::c_int| {
                if result < 0 { Err(*libc::__errno_location()) } else { Ok(()) }
            };
            for (from, to) in [(child.null, 0), (child.out, 1), (child.err, 2)] {
                if from == to {
                    // dup2 to itself keeps close-on-exec: clear it.
                    check(libc::fcntl(from, libc::F_SETFD, 0))?;
                } else {
                    check(libc::dup2(from, to))?;
                }
            }
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&raw mut empty);
            check(libc::sigprocmask(libc::SIG_SETMASK, &raw const empty, std::ptr::null_mut()))?;
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            super::child_setup(child.parent)
                .map_err(|e| e.raw_os_error().unwrap_or(libc::EINVAL))?;
            if !child.cwd.is_null() {
                check(libc::chdir(child.cwd))?;
            }
            // execvp searches the PATH of the environment it runs in.
            environ = child.envp;
            libc::execvp(child.program, child.argv);
            Err(*libc::__errno_location())
        })()
    };
    let errno = errno.err().unwrap_or(libc::EINVAL).to_ne_bytes();
    // SAFETY: write and _exit are async-signal-safe.
    unsafe {
        libc::write(child.report, errno.as_ptr().cast(), errno.len());
        libc::_exit(127)
    }
}

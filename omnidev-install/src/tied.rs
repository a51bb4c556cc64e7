//! Running a child that dies with omnidev: it leads a process group of its
//! own, and a small guard process kills that whole group if omnidev goes
//! away first (Ctrl-C, a closed terminal, even `kill -9`). An interrupted
//! install then leaves no `uv` (and none of its builds) running, finishing
//! later and printing into the terminal.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus};

/// Runs `command` to its end, tied to this process (see the module docs).
/// Its stdio is left as the caller set it.
pub fn run_tied(command: &mut Command) -> io::Result<ExitStatus> {
    command.process_group(0);
    #[cfg(target_os = "linux")]
    // SAFETY: prctl is async-signal-safe. It covers the instant before the
    // guard exists.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    // Close-on-exec, so the child never holds the pipe.
    let (read_end, write_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let mut child = command.spawn()?;
    let group = i32::try_from(child.id()).map_err(io::Error::other)?;
    let guard = spawn_guard(&read_end, &write_end, group);
    drop(read_end);
    let status = child.wait();
    // The child is done: one byte tells the guard to leave without killing.
    let _ = nix::unistd::write(&write_end, b"x");
    drop(write_end);
    if let Some(guard) = guard {
        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(guard), None);
    }
    status
}

/// Forks the guard: it waits on the pipe and, at end-of-file without the
/// all-clear byte (this process has died), SIGKILLs the process group
/// `group`. `None` when it cannot be forked (the child then only has its
/// parent-death signal).
fn spawn_guard(read_end: &OwnedFd, write_end: &OwnedFd, group: i32) -> Option<libc::pid_t> {
    let (read_fd, write_fd) = (read_end.as_raw_fd(), write_end.as_raw_fd());
    // SAFETY: after fork the child calls only async-signal-safe functions
    // (close, setpgid, read, kill, _exit) and never returns.
    match unsafe { libc::fork() } {
        -1 => None,
        0 => unsafe {
            libc::close(write_fd);
            // Out of the terminal's foreground group: the Ctrl-C that ends
            // omnidev must not end the guard before it has acted.
            libc::setpgid(0, 0);
            let mut byte = 0u8;
            let read = loop {
                let n = libc::read(read_fd, (&raw mut byte).cast(), 1);
                if n == -1 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                break n;
            };
            if read != 1 {
                libc::kill(-group, libc::SIGKILL);
            }
            libc::_exit(0)
        },
        guard => Some(guard),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_the_command_and_reports_its_status() {
        let status = run_tied(Command::new("sh").args(["-c", "exit 3"])).expect("run");
        assert_eq!(status.code(), Some(3));
        let status = run_tied(&mut Command::new("true")).expect("run");
        assert!(status.success());
    }
}

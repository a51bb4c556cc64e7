//! Processes in tests, on `nix` (no `unsafe`): signal one, tell whether it
//! still runs, and end and reap a child, also when a test fails.

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

pub use nix::sys::signal::Signal;
use nix::unistd::Pid;

fn pid(raw: u32) -> Pid {
    Pid::from_raw(i32::try_from(raw).expect("a pid fits an i32"))
}

/// Sends `signal` to the process `pid`, which must exist (and be ours to
/// signal).
pub fn signal(pid_: u32, signal: Signal) {
    nix::sys::signal::kill(pid(pid_), signal)
        .unwrap_or_else(|e| panic!("sending {signal} to pid {pid_}: {e}"));
}

/// Sends `signal` to `pid` if it still exists; whether it was sent.
pub fn try_signal(pid_: u32, signal: Signal) -> bool {
    nix::sys::signal::kill(pid(pid_), signal).is_ok()
}

/// Whether the process `pid` runs: it exists and is not a zombie (one
/// that exited and was not reaped yet).
pub fn is_alive(pid_: u32) -> bool {
    if nix::sys::signal::kill(pid(pid_), None).is_err() {
        return false;
    }
    !is_zombie(pid_)
}

#[cfg(target_os = "linux")]
fn is_zombie(pid: u32) -> bool {
    // The state is the first field after the command name's `)`.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let after = &stat[stat.rfind(')')? + 1..];
            after.split_whitespace().next().map(|state| state == "Z")
        })
        .unwrap_or(false)
}

#[cfg(not(target_os = "linux"))]
fn is_zombie(pid: u32) -> bool {
    std::process::Command::new("ps")
        .args(["-o", "stat=", "-p", &pid.to_string()])
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim_start().starts_with('Z'))
}

/// Waits for `child` to exit within `deadline`; kills and reaps it and
/// panics naming `what` when it does not.
pub fn wait_exit(child: &mut Child, what: &str, deadline: Duration) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            return status;
        }
        if start.elapsed() > deadline {
            kill_and_reap(child);
            panic!("{what} did not exit within {deadline:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Kills `child` (SIGKILL) and reaps it; nothing when it already ended.
pub fn kill_and_reap(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// A child that is sent SIGTERM, given `grace` to exit, then killed and
/// reaped when dropped: a failing test leaves no process behind.
#[derive(Debug)]
pub struct Reaped {
    /// The child.
    pub child: Child,
    /// How long it may take to exit after SIGTERM.
    pub grace: Duration,
}

impl Reaped {
    /// `child`, ended when dropped (10 s of grace after SIGTERM).
    pub fn new(child: Child) -> Self {
        Self { child, grace: Duration::from_secs(10) }
    }

    /// Its pid.
    pub fn id(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        try_signal(self.child.id(), Signal::SIGTERM);
        let start = Instant::now();
        while start.elapsed() < self.grace {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        kill_and_reap(&mut self.child);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signalled_child_is_reaped_and_no_longer_alive() {
        let mut child =
            std::process::Command::new("sleep").arg("300").spawn().expect("spawn sleep");
        let id = child.id();
        assert!(is_alive(id));
        signal(id, Signal::SIGTERM);
        // Not reaped yet: a zombie, which does not count as alive.
        crate::poll_until("sleep to exit", Duration::from_secs(10), || !is_alive(id));
        let status = wait_exit(&mut child, "sleep", Duration::from_secs(10));
        assert!(!status.success());
        assert!(!try_signal(id, Signal::SIGTERM) || !is_alive(id));
    }

    #[test]
    fn a_dropped_guard_ends_its_child() {
        let child = std::process::Command::new("sleep").arg("300").spawn().expect("spawn sleep");
        let id = child.id();
        drop(Reaped::new(child));
        assert!(!is_alive(id));
    }
}

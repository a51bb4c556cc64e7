//! The seam between the engine's logic and the operating system: how a
//! service's (or a prepare step's) process is started, ended and forgotten.
//!
//! [`ProcessSpawner`] is the real thing: a new session and process group
//! per command (see [`crate::process`]), inside the service's cgroup where
//! there are cgroups ([`crate::containment`]), the group registered with
//! the orphan guard, stdout and stderr captured into the log store. Tests of
//! the engine's decisions (reloads, backoff, dependency order) put a fake
//! [`Spawner`] here and drive its children by hand, without processes or
//! sleeps.

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use crate::containment::{Confined, Containment};
use crate::event::{ExitStatus, Stream};
use crate::guard::Guard;
use crate::logs::{self, LogStore};
use crate::process;
use crate::spec::CommandSpec;
use crate::sync::Locked;

/// How long a run's output readers may take to finish once its group is
/// empty. A reader kept open by a process outside the group is left
/// running, its unfinished line recorded as a line then.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// Resolves with the leader's exit status once it has been reaped.
pub(crate) type ExitFuture = Pin<Box<dyn Future<Output = ExitStatus> + Send>>;

/// Starts processes for the engine.
pub(crate) trait Spawner: Send + Sync + fmt::Debug {
    /// Starts `command` as the leader of a new process group, its output
    /// recorded as `service`'s.
    fn spawn(&self, command: &CommandSpec, service: &str) -> io::Result<Spawned>;

    /// Starts a prepare step of `service` like [`Spawner::spawn`] (the real
    /// spawner contains it apart from the service's own processes).
    fn spawn_step(&self, command: &CommandSpec, service: &str) -> io::Result<Spawned> {
        self.spawn(command, service)
    }
}

/// A process just started.
pub(crate) struct Spawned {
    /// The leader's process id (which is also the group's id).
    pub(crate) pid: u32,
    /// The leader's start time, recorded with the pid in `state.json`.
    pub(crate) start_time: Option<u64>,
    /// The leader's exit.
    pub(crate) exit: ExitFuture,
    /// The leader's process group.
    pub(crate) group: Arc<dyn ProcessGroup>,
}

/// The process group of one run, and the readers of its output.
#[async_trait]
pub(crate) trait ProcessGroup: Send + Sync + fmt::Debug {
    /// Sends `signal` to every member, waits up to `grace` for the group to
    /// empty, then kills what is left; returns once no member is left and
    /// the run's output has been read to its end (or [`DRAIN_LIMIT`] passed).
    /// True when members were left after the grace and were killed with
    /// SIGKILL (`signal` was not SIGKILL already).
    async fn stop(&self, signal: i32, grace: Duration) -> bool;

    /// The group is empty: the orphan guard must no longer kill it.
    fn release(&self);

    /// The pids of its live processes (for the listener-owner check).
    fn members(&self) -> Vec<u32> {
        Vec::new()
    }

    /// Puts the run in the background (lowest CPU and I/O priority) or
    /// back in the foreground; best effort.
    fn set_background(&self, _on: bool) {}
}

/// Real processes: [`Containment::spawn`], the orphan guard, log capture.
#[derive(Debug)]
pub(crate) struct ProcessSpawner {
    pub(crate) logs: Arc<LogStore>,
    pub(crate) guard: Arc<Guard>,
    pub(crate) containment: Arc<Containment>,
}

impl Spawner for ProcessSpawner {
    fn spawn(&self, command: &CommandSpec, service: &str) -> io::Result<Spawned> {
        self.start(command, service, false)
    }

    fn spawn_step(&self, command: &CommandSpec, service: &str) -> io::Result<Spawned> {
        self.start(command, service, true)
    }
}

impl ProcessSpawner {
    /// Starts a reader for each of `child`'s output pipes.
    fn capture_output(
        &self,
        child: &mut process::GroupChild,
        service: &str,
    ) -> io::Result<Vec<logs::Capture>> {
        [(child.stdout.take(), Stream::Stdout), (child.stderr.take(), Stream::Stderr)]
            .into_iter()
            .filter_map(|(fd, stream)| {
                Some(logs::spawn_capture(fd?, self.logs.clone(), service, stream))
            })
            .collect()
    }

    fn start(&self, command: &CommandSpec, service: &str, step: bool) -> io::Result<Spawned> {
        let slot = self.containment.slot(service).ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, format!("no service `{service}`"))
        })?;
        let (mut child, target) = self.containment.spawn(slot, command, step)?;
        let pid = child.id();
        let pgid = pid as i32;
        self.guard.register(pgid);
        let captures = self.capture_output(&mut child, service).inspect_err(|_| {
            // No reader, no run: a child whose output nobody drains would
            // block on a full pipe, so it is not left running.
            process::signal_group(pgid, libc::SIGKILL);
            self.guard.unregister(pgid);
        })?;
        let exit = Box::pin(async move {
            match child.wait().await {
                Ok(status) => exit_status(status),
                Err(_) => ExitStatus::Code(-1),
            }
        });
        Ok(Spawned {
            pid,
            start_time: process::process_start_time(pid),
            exit,
            group: Arc::new(Group {
                pgid,
                target,
                containment: self.containment.clone(),
                guard: self.guard.clone(),
                captures: Mutex::new(captures),
            }),
        })
    }
}

/// A real process group (with cgroups: the run's cgroup).
#[derive(Debug)]
struct Group {
    pgid: i32,
    target: Confined,
    containment: Arc<Containment>,
    guard: Arc<Guard>,
    /// The run's output readers.
    captures: Mutex<Vec<logs::Capture>>,
}

#[async_trait]
impl ProcessGroup for Group {
    async fn stop(&self, signal: i32, grace: Duration) -> bool {
        let killed = self.containment.stop(&self.target, signal, grace).await;
        let mut captures = std::mem::take(&mut *self.captures.locked());
        // So a run is reported ended only after its last line is recorded.
        let deadline = tokio::time::Instant::now() + DRAIN_LIMIT;
        for capture in &mut captures {
            if tokio::time::timeout_at(deadline, &mut capture.done).await.is_err() {
                // A process outside the group holds the pipe: its reader
                // goes on, and the line it has not finished is recorded
                // now, before the run's end is.
                capture.finish_unfinished();
            }
        }
        killed
    }

    fn release(&self) {
        self.guard.unregister(self.pgid);
    }

    fn members(&self) -> Vec<u32> {
        crate::containment::members(&self.target)
    }

    fn set_background(&self, on: bool) {
        // The leader leads its session and group. Once it has exited its
        // pid may be reaped and reused, so it is asked about only while it
        // is still a member of the run.
        #[expect(clippy::cast_sign_loss, reason = "a pgid from a spawn is positive")]
        let leader = self.pgid as u32;
        if self.members().contains(&leader) {
            crate::platform::set_background(leader, on);
        }
    }
}

fn exit_status(status: std::process::ExitStatus) -> ExitStatus {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitStatus::Code(code),
        (None, Some(signal)) => ExitStatus::Signal(signal),
        (None, None) => ExitStatus::Code(-1),
    }
}

//! One service as the engine sees it: a phase that carries the data only
//! that phase has (a process exists only while running or stopping, a
//! backoff only while waiting one out), what is meant to happen to it next,
//! and the status and state-file record it reports.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::prepare::StepSlot;
use super::spawn::ProcessGroup;
use crate::event::{ExitStatus, ServiceState, ServiceStatus};
use crate::state::ServiceRecord;

/// What a service is doing.
#[derive(Debug, Default)]
pub(super) enum Phase {
    /// Not started: waiting for its dependencies (or held, see [`Intent`]).
    #[default]
    Waiting,
    /// Its prepare steps run in `task`; `step` holds the running step's
    /// group so a stop can kill it.
    Preparing { task: JoinHandle<()>, step: Arc<StepSlot> },
    /// Its process runs (or has just exited and its group is being emptied).
    Running(LiveProcess),
    /// Its process is being stopped on request; `then` says what follows.
    Stopping { process: LiveProcess, then: AfterStop },
    /// It crashed and waits out a backoff before starting again; `port`
    /// is what it learns about its port meanwhile.
    Backoff {
        after: Duration,
        attempt: u32,
        port: PortRecovery,
        /// It was killed for going over a memory limit.
        over: Option<Over>,
    },
    /// It ended on its own and will not be restarted.
    Exited { status: ExitStatus },
    /// It was stopped on request; no process is left.
    Stopped,
    /// It could not start (a prepare step failed, or it is unavailable
    /// here); `retry` watches the failed step's inputs, when it has any.
    Failed {
        reason: String,
        #[expect(dead_code, reason = "held for its Drop, which ends the watch")]
        retry: Option<AbortOnDrop>,
    },
}

/// A memory limit a run went over, for which it was killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Over {
    /// What it held, in bytes.
    pub(super) used: u64,
    /// The limit, in bytes.
    pub(super) limit: u64,
    /// The pod's limit, not the service's own.
    pub(super) pod: bool,
}

/// A crashed service's port during its backoff: whether another process
/// took it is being looked at (and, if so, the port mover asked), and
/// the restart waits for that as well as for the backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PortRecovery {
    /// Nothing to look at (no listener port, or the look is over): the
    /// backoff alone decides.
    Settled,
    /// `port` is being looked at while the backoff runs: whichever ends
    /// first leaves the other to decide.
    Looking { port: u16 },
    /// The backoff is over; the restart waits for the look at `port`.
    Overdue { port: u16 },
}

/// A helper task that ends with the phase holding it.
#[derive(Debug)]
pub(super) struct AbortOnDrop(pub(super) JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What follows a requested stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AfterStop {
    /// Stay stopped.
    Rest,
    /// Wait for the dependencies, then start again (a restart).
    Start,
}

/// What is meant to happen to a service besides what its phase does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Intent {
    /// Run it whenever its dependencies allow.
    #[default]
    Keep,
    /// Leave it as it is: stopped or exited, not to be started by
    /// reconciliation until a start or restart request.
    Hold,
    /// A dependency is restarting: restart it once the dependencies meet its
    /// conditions again (or forget it if it has no process by then).
    RestartPending,
    /// Stopped ahead of a reload that is coming (its watcher saw a change
    /// and waits out the debounce): not started by reconciliation until
    /// that reload, or a restart or start request, asks.
    AwaitReload,
}

/// A running process of a service, from spawn until its group is empty.
#[derive(Debug)]
pub(super) struct LiveProcess {
    pub(super) pid: u32,
    pub(super) start_time: Option<u64>,
    pub(super) spawned_at: Instant,
    pub(super) group: Arc<dyn ProcessGroup>,
    pub(super) readiness: ProbeState,
    /// The leader's exit, once reaped; the run ends when the group is
    /// empty too.
    pub(super) exit: Option<ExitStatus>,
    pub(super) group_empty: bool,
    /// Its main process, once looked up ([`crate::platform::main_process`]).
    pub(super) main_pid: Option<u32>,
}

/// Whether a process counts as ready.
#[derive(Debug)]
pub(super) enum ProbeState {
    /// Its probe is polling; `timed_out` once it has not passed within
    /// the readiness timeout (polling goes on).
    Probing { task: JoinHandle<()>, timed_out: bool },
    /// Its probe was stopped (exit or stop) before it passed.
    Abandoned,
    /// Its probe passed.
    Probed,
    /// It has no probe: its dependents may rely on it once it runs.
    Assumed,
    /// It has no probe and has kept running for [`STABLE`]: it counts as
    /// ready (one that fails at once, a bad flag or a missing file, is
    /// then seen failing, never ready).
    Stable,
}

/// How long a service without a readiness probe must keep running before
/// it counts as ready ([`ServiceStatus::ready`]).
pub const STABLE: Duration = Duration::from_secs(1);

impl LiveProcess {
    /// Whether its dependents may count it as ready.
    pub(super) fn is_ready(&self) -> bool {
        matches!(self.readiness, ProbeState::Probed | ProbeState::Assumed | ProbeState::Stable)
    }

    /// Stops polling its probe (the process is ending).
    pub(super) fn abandon_probe(&mut self) {
        if let ProbeState::Probing { task, .. } = &self.readiness {
            task.abort();
            self.readiness = ProbeState::Abandoned;
        }
    }

    /// The leader runs and no stop was asked for.
    pub(super) fn is_alive(&self) -> bool {
        self.exit.is_none()
    }
}

/// One service's runtime data; a new one waits.
#[derive(Debug, Default)]
pub(super) struct Supervised {
    pub(super) phase: Phase,
    pub(super) intent: Intent,
    /// The state last published; events are sent when it changes.
    pub(super) published: ServiceState,
    /// Bumped whenever a run (or a wait) is replaced, so reports about an
    /// older one are ignored.
    pub(super) generation: u64,
    /// The crash-restart attempt (resets after a long enough run).
    pub(super) attempt: u32,
    /// Restarts after a crash so far.
    pub(super) restarts: u32,
    /// Starts so far (prepare begun or program spawned).
    pub(super) starts: u32,
    /// `stop_service` callers waiting for the group to be empty.
    pub(super) stop_waiters: Vec<oneshot::Sender<()>>,
    /// Its last prepare run failed: the next one runs every step.
    pub(super) prepare_failed: bool,
    /// How its last run ended.
    pub(super) last_exit: Option<ExitStatus>,
    /// What keeps it from being ready (another process on its port).
    pub(super) note: Option<String>,
    /// Its runs and prepare steps are in the background now (it yields
    /// while others start).
    pub(super) background: bool,
    /// Its run is being killed for going over a memory limit.
    pub(super) over: Option<Over>,
    /// The kernel's count of kills for its cgroup's memory limit, as last
    /// read: a run that ends with the count above it was one of them.
    pub(super) oom_kills: u64,
    /// A link's watch ([`crate::spec::ServiceSpec::link`]) said its
    /// service is down in the linked pod, why; until it is ready again.
    pub(super) link_down: Option<String>,
}

impl Supervised {
    /// Whether it is on its way to ready: preparing, or running with its
    /// probe neither passed nor timed out.
    pub(super) fn getting_ready(&self) -> bool {
        match &self.phase {
            Phase::Preparing { .. } => true,
            Phase::Running(process) => {
                matches!(process.readiness, ProbeState::Probing { timed_out: false, .. })
            }
            _ => false,
        }
    }

    /// Puts what it runs now (a prepare step or its process) in the
    /// background or back in the foreground, and what it starts next too.
    pub(super) fn set_background(&mut self, on: bool) {
        self.background = on;
        match &self.phase {
            Phase::Preparing { step, .. } => step.set_background(on),
            Phase::Running(process) | Phase::Stopping { process, .. } => {
                process.group.set_background(on);
            }
            _ => {}
        }
    }

    /// Its process, while one exists (running or being stopped).
    pub(super) fn process(&self) -> Option<&LiveProcess> {
        match &self.phase {
            Phase::Running(process) | Phase::Stopping { process, .. } => Some(process),
            _ => None,
        }
    }

    /// Its process, while one exists.
    pub(super) fn process_mut(&mut self) -> Option<&mut LiveProcess> {
        match &mut self.phase {
            Phase::Running(process) | Phase::Stopping { process, .. } => Some(process),
            _ => None,
        }
    }

    /// A process of this service exists (or is being emptied).
    pub(super) fn has_process(&self) -> bool {
        self.process().is_some()
    }

    /// It runs and no stop was asked for: what a dependent may rely on.
    pub(super) fn is_up(&self) -> bool {
        matches!(&self.phase, Phase::Running(process) if process.is_alive())
    }

    /// Its dependents may count it as ready.
    pub(super) fn is_ready(&self) -> bool {
        self.process().is_some_and(LiveProcess::is_ready)
    }

    /// It counts as ready to the world ([`ServiceStatus::ready`]): its
    /// probe passed, it has no probe and ran for [`STABLE`], or it is a
    /// one-shot that exited 0. A stopped service never is.
    pub(super) fn ready(&self) -> bool {
        self.serves() || self.completed()
    }

    /// It exited 0 and will not be restarted: a finished one-shot, which
    /// meets every dependency condition.
    pub(super) fn completed(&self) -> bool {
        matches!(&self.phase, Phase::Exited { status } if status.success())
    }

    /// It has ended and nothing will start it by itself (a failed one
    /// comes back only when its inputs change or on request).
    pub(super) fn is_terminal(&self) -> bool {
        matches!(self.phase, Phase::Exited { .. } | Phase::Stopped | Phase::Failed { .. })
    }

    /// It is down after a crash: waiting out a backoff, crashed for good
    /// (`restart = never`/`on-failure`), or failed to start. A change to
    /// its files restarts it at once.
    pub(super) fn is_down_after_crash(&self) -> bool {
        match &self.phase {
            Phase::Backoff { .. } | Phase::Failed { .. } => true,
            Phase::Exited { status } => !status.success(),
            _ => false,
        }
    }

    /// A dependency restarts: restart this one too once it can (a held
    /// service stays held).
    pub(super) fn mark_restart_pending(&mut self) {
        if self.intent != Intent::Hold {
            self.intent = Intent::RestartPending;
        }
    }

    /// The state its phase shows to the world.
    pub(super) fn state(&self) -> ServiceState {
        match &self.phase {
            Phase::Waiting => ServiceState::Waiting,
            Phase::Preparing { .. } => ServiceState::Preparing,
            Phase::Running(process) => match process.readiness {
                ProbeState::Probed => ServiceState::Ready { pid: process.pid },
                ProbeState::Assumed | ProbeState::Stable => {
                    ServiceState::Running { pid: process.pid }
                }
                ProbeState::Probing { .. } | ProbeState::Abandoned => {
                    ServiceState::Starting { pid: process.pid }
                }
            },
            Phase::Stopping { process, .. } => ServiceState::Stopping { pid: process.pid },
            Phase::Backoff { after, attempt, over: Some(over), .. } => ServiceState::OverLimit {
                limit: over.limit,
                pod: over.pod,
                after: *after,
                attempt: *attempt,
            },
            Phase::Backoff { after, attempt, .. } => {
                ServiceState::Restarting { after: *after, attempt: *attempt }
            }
            Phase::Exited { status } => ServiceState::Exited { status: *status },
            Phase::Stopped => ServiceState::Stopped,
            Phase::Failed { reason, .. } => ServiceState::Failed { reason: reason.clone() },
        }
    }

    /// Whether it runs ready: its process serves what it was started for,
    /// and the URLs it serves are shown.
    pub(super) fn serves(&self) -> bool {
        matches!(&self.phase, Phase::Running(p) if matches!(p.readiness, ProbeState::Probed | ProbeState::Stable))
    }

    /// Its status in a snapshot, under `name` of the spec that serves
    /// `urls`.
    pub(super) fn status(&self, name: &str, urls: &[crate::NamedUrl]) -> ServiceStatus {
        ServiceStatus {
            name: name.to_owned(),
            state: self.published.clone(),
            restarts: self.restarts,
            ready: self.ready(),
            last_exit: self.last_exit,
            note: self.note.clone(),
            starts: self.starts,
            probe_timed_out: self.process().is_some_and(|p| {
                matches!(p.readiness, ProbeState::Probing { timed_out: true, .. })
            }),
            urls: if self.serves() { urls.to_vec() } else { Vec::new() },
            main_pid: self.process().and_then(|p| p.main_pid),
        }
    }

    /// Its record in `state.json`: the process group and its identity, so
    /// the next supervisor can stop leftovers.
    pub(super) fn record(&self) -> ServiceRecord {
        let process = self.process();
        ServiceRecord {
            pid: process.map(|p| p.pid),
            pgid: process.map(|p| p.pid as i32),
            start_time: process.and_then(|p| p.start_time),
            state: self.published.clone(),
            restarts: self.restarts,
            ready: self.ready(),
            // Filled in by the engine, which knows the containment.
            cgroup: None,
            service_id: None,
        }
    }
}

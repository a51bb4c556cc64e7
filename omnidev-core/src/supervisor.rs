//! The [`Supervisor`] handle: a cheap, cloneable front to one background task
//! that owns every service's state and process.
//!
//! ```no_run
//! # async fn demo() -> omnidev_core::Result<()> {
//! use omnidev_core::{ServiceSpec, Supervisor, SupervisorConfig};
//! let builder = Supervisor::builder(SupervisorConfig {
//!     services: vec![ServiceSpec::new("web", "python3", ["-m", "http.server"], ".")],
//!     ..Default::default()
//! })?;
//! let mut events = builder.subscribe();
//! let supervisor = builder.run().await?;
//! // … render events, then:
//! supervisor.shutdown().await?;
//! # Ok(()) }
//! ```

mod builder;
mod engine;
mod graph;
mod own_listener;
mod prepare;
mod service;
mod spawn;
#[cfg(test)]
mod tests;
mod wait;

pub use builder::Builder;
pub use graph::{depth_first, start_order};
pub use service::STABLE;
pub use wait::{Until, Waited};

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};

use crate::backoff::BackoffPolicy;
use crate::containment::{Containment, ContainmentChoice, Mechanism};
use crate::error::{Error, Result};
use crate::event::{Changes, Event, EventKind, LogLine, ServiceStatus};
use crate::guard::Guard;
use crate::history::{Follower, History};
use crate::logs::LogStore;
use crate::spec::{LogConfig, ServiceSpec};
use crate::sync::Locked;

/// Everything a supervisor is started from.
#[derive(Debug, Clone, Default)]
pub struct SupervisorConfig {
    /// The services, in any order (they start in dependency order).
    pub services: Vec<ServiceSpec>,
    /// Log capture settings.
    pub log: LogConfig,
    /// Where to keep `state.json` (see [`crate::state`]); `None` for none.
    pub state_file: Option<PathBuf>,
    /// Crash-restart backoff (default 1, 2, 4, 8, 16, 30 s; reset after 20 s).
    pub backoff: BackoffPolicy,
    /// How services are contained ([`crate::containment`]): cgroup v2
    /// where possible (the default), or forced to the fallback.
    pub containment: ContainmentChoice,
    /// Publish [`EventKind::Debug`] events: each readiness attempt.
    pub debug: bool,
    /// Moves a service's port when another process took it before the
    /// service could bind it (see [`PortMover`]); `None`: the crash is
    /// reported and the service restarts with its backoff as usual.
    pub port_mover: Option<Arc<dyn PortMover>>,
    /// What the pod's services may use together (a memory limit over
    /// their sum; see [`crate::spec::Limits`]).
    pub pod_limits: crate::spec::Limits,
}

/// What moves a port lost to another process: the pod layer, which owns
/// port allocation and rendering.
///
/// When a service whose readiness names a [`listener`](crate::spec::Readiness::listener)
/// port exits on its own while another process listens on that port, the
/// supervisor reports it ([`EventKind::PortHeld`]), asks the mover (on a
/// blocking thread, while the service waits out its backoff), and then
/// either restarts the service on the new port — with every other service
/// whose spec changed restarted too (dependents, a proxy pointing at it) —
/// or, when the mover refuses (a port the user forced), leaves the service
/// `failed` with the mover's reason.
pub trait PortMover: Send + Sync + std::fmt::Debug {
    /// `service`'s port `port` is held by `holder` (as people read it):
    /// choose a new port, persist it, and return every service's spec
    /// rendered with it (the same services, in the same order, as the
    /// supervisor was started with); or say why the port cannot move.
    ///
    /// # Errors
    ///
    /// Why the port stays where it is, in one line (shown to people).
    fn move_port(&self, service: &str, port: u16, holder: &str) -> Result<Moved, String>;
}

/// A port moved by a [`PortMover`].
#[derive(Debug, Clone)]
pub struct Moved {
    /// The new port.
    pub port: u16,
    /// Every service's spec, rendered with the new port.
    pub services: Vec<ServiceSpec>,
}

/// The outcome once every service has ended and none will restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    /// True when every service exited with code 0 or was stopped on request.
    pub success: bool,
    /// Services that exited with a failure, or can never start because a
    /// dependency ended first.
    pub failed: Vec<String>,
}

/// Where reloads stand, as the engine last published it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Reloads {
    /// A reload runs or is queued.
    pub(crate) active: bool,
    /// When the last reload began.
    pub(crate) began: Option<std::time::SystemTime>,
    /// Every service's start count when it began.
    pub(crate) starts: Vec<u32>,
}

/// What applying a changed set of specs did ([`Supervisor::apply`]).
#[derive(
    Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub struct Applied {
    /// Services restarted because their spec changed (their dependents
    /// follow, as after a restart).
    pub restarted: Vec<String>,
    /// Services started because they are new (or back).
    pub started: Vec<String>,
    /// Services stopped because the new set no longer has them.
    pub stopped: Vec<String>,
    /// Services whose spec changed while they were stopped on request:
    /// they stay stopped, and run the new spec when started.
    #[serde(default)]
    pub kept_stopped: Vec<String>,
}

impl Applied {
    /// The services that run anew and are waited for: those restarted,
    /// then those started.
    pub fn coming_up(&self) -> Vec<String> {
        self.restarted.iter().chain(&self.started).cloned().collect()
    }
}

/// The services' names by index, and which were removed from the pod (a
/// removed service keeps its index, stopped, so no index ever moves).
#[derive(Debug, Clone, Default)]
pub(crate) struct Names {
    pub(crate) all: Vec<String>,
    pub(crate) removed: Vec<bool>,
}

impl Names {
    fn of(all: Vec<String>) -> Self {
        let removed = vec![false; all.len()];
        Self { all, removed }
    }

    /// The names of the services the pod has now, in order.
    fn current(&self) -> Vec<String> {
        self.all
            .iter()
            .zip(&self.removed)
            .filter(|(_, removed)| !**removed)
            .map(|(name, _)| name.clone())
            .collect()
    }
}

/// Answered with every service's start count (see
/// [`ServiceStatus::starts`]) before the request is acted on.
pub(crate) type StartsAck = Option<oneshot::Sender<Vec<u32>>>;

/// Requests from handles to the task.
#[derive(Debug)]
pub(crate) enum Order {
    /// A restart, of the service's dependents too when the flag is set
    /// (else they keep running).
    Restart(usize, bool, StartsAck),
    Reload(Vec<usize>, Changes, StartsAck),
    /// A watcher saw the first change of a burst that will reload these
    /// services: stop them now, start them with the reload.
    ReloadComing(Vec<usize>),
    Stop(usize, oneshot::Sender<()>),
    /// Answered (when asked) with the start counts before it acts, that of
    /// a service left running one lower (its current run counts).
    Start(usize, StartsAck),
    Shutdown(Option<oneshot::Sender<()>>),
    /// Apply a changed set of specs (validated); answered with what was
    /// done, the names then and every service's start count before.
    Apply(Vec<ServiceSpec>, oneshot::Sender<(Applied, Names, Vec<u32>)>),
    /// The orphan guard ended and was replaced (or could not be); or, as
    /// the error, why its end cannot be watched.
    GuardReplaced(std::result::Result<crate::guard::Replaced, String>),
}

/// A handle to a running supervisor. Clones share the same supervisor.
#[derive(Debug, Clone)]
pub struct Supervisor {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    requests: mpsc::UnboundedSender<Order>,
    events: Arc<History>,
    logs: Arc<LogStore>,
    status: watch::Receiver<Vec<ServiceStatus>>,
    settled: watch::Receiver<Option<Settled>>,
    finished: watch::Receiver<bool>,
    reloading: watch::Receiver<Reloads>,
    /// When a front-end's watcher last saw a source change it will reload
    /// for ([`Supervisor::saw_change`]).
    change_seen: watch::Sender<Option<std::time::SystemTime>>,
    names: std::sync::Mutex<Names>,
    guard: Option<Arc<Guard>>,
    containment: Arc<Containment>,
    /// When it started.
    started: std::time::SystemTime,
}

// Request methods are async although queuing is instant today, so callers
// need no change if queuing ever applies back-pressure.
#[allow(clippy::unused_async)]
impl Supervisor {
    fn names(&self) -> std::sync::MutexGuard<'_, Names> {
        self.inner.names.locked()
    }

    /// How many services the supervisor has ever had (those removed by
    /// [`Supervisor::apply`] included: statuses have one each).
    pub(crate) fn slots(&self) -> usize {
        self.names().all.len()
    }

    fn index(&self, name: &str) -> Result<usize> {
        let names = self.names();
        names
            .all
            .iter()
            .zip(&names.removed)
            .position(|(n, removed)| n == name && !removed)
            .ok_or_else(|| Error::UnknownService { name: name.to_owned(), known: names.current() })
    }

    fn send(&self, request: Order) -> Result<()> {
        self.inner.requests.send(request).map_err(|_| Error::ShutDown)
    }

    /// A follower of every event from now on, read from the history. Any
    /// number may exist; one that falls behind what the history keeps is
    /// told how much it missed instead of slowing anything down.
    pub fn subscribe(&self) -> Follower {
        self.inner.events.follow()
    }

    /// Publishes a message for people (a front-end's own, such as "stopping
    /// the pod") to the history, in order with the services' output.
    pub fn notice(&self, message: impl Into<String>) {
        self.publish_message(EventKind::Notice { message: message.into() });
    }

    /// Publishes [`EventKind::Ended`]: how each service ended. For the
    /// front-end to call once, after [`Supervisor::shutdown`] (the last
    /// event of the pod's run).
    pub fn announce_end(&self) {
        let services = self.snapshot().iter().map(ServiceStatus::end).collect();
        self.publish_message(EventKind::Ended { services });
        self.inner.events.close();
    }

    /// The lines and events kept for readers with a cursor (see
    /// [`crate::history`]).
    pub fn history(&self) -> &Arc<History> {
        &self.inner.events
    }

    /// Publishes an event of the pod's own (a front-end's, such as
    /// [`EventKind::ProfileChanged`]) like [`Supervisor::notice`]: to the
    /// history.
    pub fn publish(&self, kind: EventKind) {
        self.publish_message(kind);
    }

    fn publish_message(&self, kind: EventKind) {
        self.inner.events.push_event(&Event::pod(kind));
    }

    /// The names of the services, in the order they were given (those
    /// added by [`Supervisor::apply`] last; those it removed left out).
    pub fn service_names(&self) -> Vec<String> {
        self.names().current()
    }

    /// Applies a changed set of services (a reloaded profile): each service
    /// whose spec differs from the one it runs restarts with the new spec,
    /// as [`Supervisor::restart`] does (its dependents follow once it meets
    /// their condition again); a new one starts once its dependencies
    /// allow; one the set no longer has is stopped and stays, stopped, in
    /// statuses (its name is no longer known to requests). A service
    /// stopped on request stays stopped with its new spec. Returns once
    /// the changes are under way, with what was done.
    ///
    /// # Errors
    ///
    /// The new set's own graph errors (duplicate names, unknown
    /// dependencies, cycles), with nothing changed; [`Error::ShutDown`].
    pub async fn apply(&self, services: Vec<ServiceSpec>) -> Result<Applied> {
        Ok(self.apply_counting(services).await?.0)
    }

    /// [`Supervisor::apply`], with every service's start count before it
    /// acted (a run counted higher began after it).
    async fn apply_counting(&self, services: Vec<ServiceSpec>) -> Result<(Applied, Vec<u32>)> {
        graph::start_order(&services)?;
        let (tx, rx) = oneshot::channel();
        self.send(Order::Apply(services, tx))?;
        let (applied, names, starts) = rx.await.map_err(|_| Error::ShutDown)?;
        *self.inner.names.locked() = names;
        Ok((applied, starts))
    }

    /// The current status of every service, in start order (each dependency
    /// before its dependents, otherwise as given).
    pub fn snapshot(&self) -> Vec<ServiceStatus> {
        self.inner.status.borrow().clone()
    }

    /// A watch of every service's status ([`Supervisor::snapshot`]),
    /// changed whenever a state, a readiness or a note changes; it closes
    /// once the supervisor has finished. Every service is `waiting` until
    /// the supervisor's task has published its first status.
    pub fn watch_status(&self) -> watch::Receiver<Vec<ServiceStatus>> {
        self.inner.status.clone()
    }

    /// The lines of a service (of every service for `None`) the history
    /// keeps, oldest first.
    pub fn logs(&self, service: Option<&str>) -> Result<Vec<LogLine>> {
        if let Some(name) = service {
            self.index(name)?;
        }
        let history = self.history();
        let mut cursor = history.cursor(false, false);
        let mut lines = Vec::new();
        loop {
            let read = history.read(&mut cursor, usize::MAX, false, |kept| {
                matches!(kept, crate::history::Kept::Line(line) if service.is_none_or(|s| *line.service == *s))
            });
            lines.extend(read.kept.into_iter().filter_map(|kept| match kept {
                crate::history::Kept::Line(line) => Some(LogLine::clone(&line)),
                _ => None,
            }));
            if read.done {
                return Ok(lines);
            }
        }
    }

    /// The path of a service's log file, when logs go to files.
    pub fn log_file(&self, service: &str) -> Result<Option<PathBuf>> {
        self.index(service)?;
        Ok(self.inner.logs.file_path(service))
    }

    /// The orphan guard's process id (a guard that ended is replaced at
    /// once; this is the current one's). None where a test's spawner
    /// starts no process.
    pub fn guard_pid(&self) -> Option<u32> {
        self.inner.guard.as_ref().map(|g| g.pid())
    }

    /// How this supervisor contains its services (see [`crate::containment`]).
    pub fn containment(&self) -> &Mechanism {
        self.inner.containment.mechanism()
    }

    /// When it started (its pod is up since then).
    pub fn started_at(&self) -> std::time::SystemTime {
        self.inner.started
    }

    /// What the processes of the service `status` describes hold now,
    /// while it has a process: with cgroups every process of its cgroup
    /// (its memory as the kernel charges it, where the memory controller
    /// is on), else its process and every process below it. Read from
    /// the system when asked: nothing samples while nobody looks.
    pub fn usage(&self, status: &ServiceStatus) -> Option<crate::platform::Usage> {
        let pid = status.state.pid()?;
        let containment = &self.inner.containment;
        Some(match containment.slot(&status.name) {
            Some(slot) => containment.usage(slot, pid),
            None => crate::platform::tree_usage(pid),
        })
    }

    /// Skips what is left of every grace period: processes that are being
    /// stopped are SIGKILLed now, and so is every service stopped later
    /// (for a second Ctrl-C during a shutdown). Does not start a shutdown.
    pub fn kill_now(&self) {
        self.inner.containment.hurry();
    }

    /// Restarts a service: stops it (stop signal, grace, SIGKILL) and starts
    /// it again; services depending on it (transitively) are restarted once
    /// it meets their condition again. Resets its crash backoff. Returns once
    /// the request is queued.
    pub async fn restart(&self, name: &str) -> Result<()> {
        let index = self.index(name)?;
        self.send(Order::Restart(index, true, None))
    }

    /// Starts a service that was stopped or has exited (a no-op for one that
    /// runs or is about to).
    pub async fn start_service(&self, name: &str) -> Result<()> {
        let index = self.index(name)?;
        self.send(Order::Start(index, None))
    }

    /// Restarts a set of services (and their dependents) as one reload.
    /// Coalesced: requests arriving while a reload runs are merged into at
    /// most one further reload that starts when the current one is done
    /// (every service involved is ready, running without a probe, or has
    /// ended). A service that waits out a crash backoff, or sits crashed
    /// or failed, is not queued: it starts again at once (its backoff is
    /// cancelled, its attempt count kept), and its dependents follow once
    /// it is ready.
    pub async fn reload(&self, names: &[&str]) -> Result<()> {
        self.reload_changed(names, Changes::default()).await
    }

    /// [`Supervisor::reload`] for changed files: the `reloading` event
    /// names them (`reloading server: omnigent/a.py (+2 more)`).
    pub async fn reload_changed(&self, names: &[&str], changes: Changes) -> Result<()> {
        let indexes = names.iter().map(|n| self.index(n)).collect::<Result<Vec<_>>>()?;
        self.send(Order::Reload(indexes, changes, None))
    }

    /// Stops `names` ahead of a reload that is coming: a front-end's
    /// watcher has seen the first change of a burst and waits out its
    /// debounce before it calls [`Supervisor::reload_changed`] with the
    /// same services. The old runs are stopped meanwhile, so the reload
    /// only has to start them (a server that takes its time to shut down
    /// does it inside the debounce, not after it). Acts only on services
    /// that run, when no reload runs or waits; the reload log mark is
    /// taken before the first stop. A service stopped this way stays down
    /// until that reload (or a restart or start request) comes, so a
    /// caller must follow with `reload_changed`.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownService`] for a name the supervisor does not run;
    /// [`Error::ShutDown`] when it has finished.
    pub fn reload_coming(&self, names: &[&str]) -> Result<()> {
        let indexes = names.iter().map(|n| self.index(n)).collect::<Result<Vec<_>>>()?;
        self.send(Order::ReloadComing(indexes))
    }

    /// Publishes a [`EventKind::Debug`] message (a front-end's own
    /// diagnostics, such as a watcher's decisions) like
    /// [`Supervisor::notice`].
    pub fn debug(&self, message: impl Into<String>) {
        self.publish_message(EventKind::Debug { message: message.into() });
    }

    /// Stops a service and returns once its process group is empty. It stays
    /// stopped (no restart) until [`Supervisor::restart`] or
    /// [`Supervisor::start_service`]; its dependents keep running.
    pub async fn stop_service(&self, name: &str) -> Result<()> {
        let index = self.index(name)?;
        let (tx, rx) = oneshot::channel();
        self.send(Order::Stop(index, tx))?;
        rx.await.map_err(|_| Error::ShutDown)
    }

    /// Stops every service, dependents before their dependencies, and
    /// returns once every process group is empty and the supervisor's task
    /// has ended. Calling it again (or from a clone) is fine.
    pub async fn shutdown(&self) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        if self.send(Order::Shutdown(Some(tx))).is_ok() {
            let _ = rx.await;
        }
        let mut finished = self.inner.finished.clone();
        let _ = finished.wait_for(|done| *done).await;
        Ok(())
    }

    /// Resolves once every service has exited or been stopped and none
    /// will restart (or can never start because a dependency ended). The
    /// headless exit rule: exit 0 when [`Settled::success`].
    pub async fn wait_settled(&self) -> Settled {
        let mut settled = self.inner.settled.clone();
        loop {
            if let Some(s) = settled.borrow_and_update().clone() {
                return s;
            }
            if settled.changed().await.is_err() {
                return settled
                    .borrow()
                    .clone()
                    .unwrap_or(Settled { success: true, failed: Vec::new() });
            }
        }
    }

    /// Records that a front-end's file watcher has just seen a source
    /// change that it will reload for (once its debounce has passed): a
    /// [`Supervisor::wait_healthy_after_reload`] then judges only a reload
    /// that began after it, however close the previous one was.
    pub fn saw_change(&self) {
        self.inner.change_seen.send_replace(Some(std::time::SystemTime::now()));
    }

    /// Whether a reload is running or queued.
    pub fn is_reloading(&self) -> bool {
        self.inner.reloading.borrow().active
    }

    /// Whether the supervisor's task has ended (after a shutdown).
    pub fn is_finished(&self) -> bool {
        *self.inner.finished.borrow()
    }
}

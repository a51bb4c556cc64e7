//! The supervisor's background task: owns every service's state, reacts to
//! requests, process exits, probe results and timers, and never blocks on
//! any of them (waits run in small tasks that report back over a channel).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, oneshot, watch};

mod apply;
mod exits;
mod limits;
mod ports;
mod reconcile;
mod requests;
mod start;
mod state_file;

use super::prepare;
use super::service::{AfterStop, Intent, Phase, PortRecovery, ProbeState, Supervised};
use super::spawn::Spawner;
use super::{Moved, Order, PortMover, Reloads, Settled};
use crate::backoff::BackoffPolicy;
use crate::containment::Containment;
use crate::event::{Changes, Event, EventKind, ExitStatus, ServiceStatus};
use crate::guard::Guard;
use crate::history::History;
use crate::logs::LogStore;
use crate::spec::{Condition, ServiceSpec};
use crate::state::ProcessRecord;

/// Exit status reported when a service's program could not be spawned.
const SPAWN_FAILED: ExitStatus = ExitStatus::Code(127);
/// How often a failed service's prepare inputs are checked for a change.
const RETRY_POLL: Duration = Duration::from_millis(500);

/// What the engine is wired to: the stores it writes, the channels it
/// publishes on, the spawner, containment and guard it acts through.
pub(super) struct Parts {
    pub(super) logs: Arc<LogStore>,
    pub(super) events: Arc<History>,
    /// The orphan guard (none with a test's spawner).
    pub(super) guard: Option<Arc<Guard>>,
    /// Where `state.json` goes (none: it is not written).
    pub(super) state_file: Option<PathBuf>,
    pub(super) backoff: BackoffPolicy,
    pub(super) status: watch::Sender<Vec<ServiceStatus>>,
    pub(super) settled: watch::Sender<Option<Settled>>,
    pub(super) reloading: watch::Sender<Reloads>,
    pub(super) supervisor: ProcessRecord,
    pub(super) spawner: Arc<dyn Spawner>,
    pub(super) containment: Arc<Containment>,
    /// Publish each readiness attempt as a debug event.
    pub(super) debug: bool,
    /// Moves a port lost to another process (the pod layer).
    pub(super) port_mover: Option<Arc<dyn PortMover>>,
    /// What the pod's services may use together.
    pub(super) pod_limits: crate::spec::Limits,
}

/// Messages from the engine's helper tasks.
#[derive(Debug)]
enum Internal {
    /// A report about run `generation` of service `index`: ignored once
    /// that run is replaced (a report about a replaced run is stale).
    Run {
        index: usize,
        generation: u64,
        report: RunReport,
    },
    Emit {
        index: usize,
        kind: EventKind,
    },
    /// What the memory watch measured.
    Measured(limits::Measured),
    /// How a write of `state.json` or the reload mark went.
    Written {
        file: state_file::WrittenFile,
        result: Result<(), String>,
    },
}

impl Internal {
    /// [`Internal::Run`].
    fn run(index: usize, generation: u64, report: RunReport) -> Self {
        Self::Run { index, generation, report }
    }
}

/// What a helper task reports about one run of a service.
#[derive(Debug)]
enum RunReport {
    Prepared(Result<(), Box<prepare::Failure>>),
    InputsChanged,
    Exited(ExitStatus),
    GroupEmpty,
    /// A probe-less run has kept running for [`super::STABLE`].
    Stable,
    Ready,
    /// The readiness probe found another process listening on the port.
    PortHeld {
        port: u16,
        holder: String,
    },
    /// Who listened on the port once the service had crashed.
    CheckedAfterExit {
        port: u16,
        holder: Option<String>,
    },
    /// The port mover's answer.
    PortMoved {
        port: u16,
        outcome: Result<Moved, String>,
    },
    /// The readiness probe has not passed within this timeout.
    ProbeTimedOut(Duration),
    BackoffElapsed,
    /// The run's main process ([`crate::platform::main_process`]).
    MainProcess(u32),
}

/// Whether the engine supervises on or shuts down.
#[derive(Debug)]
enum Life {
    Running,
    /// Stopping every service, dependents first; `waiters` are answered
    /// once every group is empty and the task ends.
    ShuttingDown {
        waiters: Vec<oneshot::Sender<()>>,
    },
}

/// Reloads: the services one is waiting for, and at most one more.
#[derive(Debug, Default)]
struct ReloadState {
    /// The services the running reload restarts (with their dependents);
    /// it is done when each is ready or has ended.
    active: Option<BTreeSet<usize>>,
    /// Requested while one ran: the services and the changes behind them.
    queued: Option<(BTreeSet<usize>, Changes)>,
    /// When the last reload began.
    began: Option<SystemTime>,
    /// Every service's start count then (a run counted higher began
    /// after it).
    began_starts: Vec<u32>,
    /// The log mark taken when services were stopped ahead of the coming
    /// reload: that reload writes it, naming its files, instead of taking
    /// a new one (the old runs' last lines stay after it).
    marked_ahead: Option<crate::logs::TakenMark>,
}

/// How the writes of `state.json` stand.
#[derive(Debug)]
struct StateWrites {
    /// The last write failed and said so.
    error_reported: bool,
    /// The file is behind; written at the end of the turn.
    dirty: bool,
}

pub(super) struct Engine {
    parts: Parts,
    specs: Vec<ServiceSpec>,
    order: Vec<usize>,
    /// Direct dependencies of each service, with their conditions.
    dependencies: Vec<Vec<(usize, Condition)>>,
    /// Direct dependents of each service.
    dependents: Vec<Vec<usize>>,
    services: Vec<Supervised>,
    /// Services a changed set of specs no longer has (see
    /// [`Engine::apply`]): stopped, kept so no index moves.
    removed: Vec<bool>,
    state: StateWrites,
    /// Writes `state.json` and the reload mark off the engine's turns.
    writer: crate::fs::BackgroundWriter,
    internal_tx: mpsc::UnboundedSender<Internal>,
    internal_rx: Option<mpsc::UnboundedReceiver<Internal>>,
    life: Life,
    reload: ReloadState,
    /// Prepare steps killed mid-run, until their groups are empty: shutdown
    /// waits for them, so it never returns while one is still dying.
    dying_prepares: Vec<tokio::task::JoinHandle<()>>,
    /// A service was stopped on request: from then on the pod never
    /// settles on its own, only a shutdown ends it.
    stop_requested: bool,
    /// The memory watch's measurement is under way.
    measuring: bool,
}

/// A service's direct dependencies, with their conditions.
type Dependencies = Vec<(usize, Condition)>;

/// What a stop that ran out of its grace says: `still running 5s after
/// SIGTERM (grace-ms): killed with SIGKILL`.
fn killed_after_grace(stop: crate::spec::StopSpec) -> String {
    let signal = nix::sys::signal::Signal::try_from(stop.signal)
        .map_or_else(|_| format!("signal {}", stop.signal), |s| s.as_str().to_owned());
    format!(
        "still running {} after {signal} (its grace-ms): killed with SIGKILL",
        crate::event::format_duration(stop.grace)
    )
}

/// The direct dependencies of each service (with their conditions) and
/// its direct dependents. The graph was validated: a dependency that names
/// no service is left out.
fn graph_of(specs: &[ServiceSpec]) -> (Vec<Dependencies>, Vec<Vec<usize>>) {
    let dependencies: Vec<Dependencies> = specs
        .iter()
        .map(|spec| {
            spec.depends_on
                .iter()
                .filter_map(|dep| {
                    let j = specs.iter().position(|s| s.name == dep.service)?;
                    Some((j, dep.condition))
                })
                .collect()
        })
        .collect();
    let mut dependents = vec![Vec::new(); specs.len()];
    for (i, deps) in dependencies.iter().enumerate() {
        for &(j, _) in deps {
            dependents[j].push(i);
        }
    }
    (dependencies, dependents)
}

impl Engine {
    pub(super) fn new(specs: Vec<ServiceSpec>, order: Vec<usize>, parts: Parts) -> Self {
        let (dependencies, dependents) = graph_of(&specs);
        let (internal_tx, internal_rx) = mpsc::unbounded_channel();
        Self {
            services: specs.iter().map(|_| Supervised::default()).collect(),
            removed: vec![false; specs.len()],
            specs,
            order,
            dependencies,
            dependents,
            state: StateWrites { error_reported: false, dirty: false },
            writer: crate::fs::BackgroundWriter::new(),
            internal_tx,
            internal_rx: Some(internal_rx),
            life: Life::Running,
            reload: ReloadState::default(),
            stop_requested: false,
            measuring: false,
            dying_prepares: Vec::new(),
            parts,
        }
    }

    pub(super) async fn run(
        mut self,
        mut requests: mpsc::UnboundedReceiver<Order>,
        notices: Vec<String>,
        finished: watch::Sender<bool>,
    ) {
        let Some(mut internal) = self.internal_rx.take() else {
            return;
        };
        let limits = self.set_up_limits();
        for message in notices.into_iter().chain(limits) {
            self.parts.events.push_event(&Event::pod(EventKind::Notice { message }));
        }
        self.publish_status();
        self.write_state();
        self.reconcile();
        self.update_background();
        self.flush_state();
        let mut requests_open = true;
        let mut watch = tokio::time::interval(limits::WATCH_EVERY);
        watch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            if self.shutting_down() && self.all_down() {
                break;
            }
            tokio::select! {
                request = requests.recv(), if requests_open => {
                    if let Some(request) = request {
                        self.on_request(request);
                    } else {
                        // Every handle is gone: nobody can stop us later.
                        requests_open = false;
                        self.on_request(Order::Shutdown(None));
                    }
                }
                Some(message) = internal.recv() => self.on_internal(message),
                _ = watch.tick(), if self.watches_memory() => self.measure(),
            }
            self.reconcile();
            self.update_background();
            self.flush_state();
        }
        for dying in self.dying_prepares.drain(..) {
            let _ = dying.await;
        }
        let grace = self.specs.iter().map(|s| s.stop.grace).max();
        self.parts.containment.sweep(grace.unwrap_or_default()).await;
        self.parts.containment.close();
        self.parts.logs.flush();
        self.write_state_now();
        if let Some(guard) = &self.parts.guard {
            guard.close();
        }
        if let Life::ShuttingDown { waiters } = &mut self.life {
            for waiter in waiters.drain(..) {
                let _ = waiter.send(());
            }
        }
        let _ = finished.send(true);
        // Requests that raced with the end are answered by dropping them.
        requests.close();
        while let Ok(request) = requests.try_recv() {
            if let Order::Shutdown(Some(waiter)) = request {
                let _ = waiter.send(());
            }
        }
    }

    // ----- events and status -------------------------------------------

    fn shutting_down(&self) -> bool {
        matches!(self.life, Life::ShuttingDown { .. })
    }

    fn name(&self, index: usize) -> &str {
        &self.specs[index].name
    }

    fn emit(&self, index: Option<usize>, kind: EventKind) {
        let event = Event::now(index.map(|i| self.name(i)), kind);
        self.parts.events.push_event(&event);
    }

    /// Puts the services that yield ([`crate::spec::ServiceSpec::yields`])
    /// in the background while another service that does not yield is on
    /// its way to ready, and back in the foreground once none is.
    fn update_background(&mut self) {
        let others_starting = self
            .services
            .iter()
            .zip(&self.specs)
            .any(|(service, spec)| !spec.yields && service.getting_ready());
        for (service, spec) in self.services.iter_mut().zip(&self.specs) {
            let wanted = spec.yields && others_starting;
            if service.background != wanted {
                service.set_background(wanted);
            }
        }
    }

    /// Moves a service to `phase` and publishes its state.
    fn enter(&mut self, index: usize, phase: Phase) {
        // A removed service at rest never runs again unless it is added
        // back: what its log holds is let go of.
        if self.removed[index] && matches!(phase, Phase::Stopped) {
            self.parts.logs.release(self.name(index));
        }
        self.services[index].phase = phase;
        self.publish(index);
    }

    /// Publishes a service's state if its phase (or, for a waiting one,
    /// whether a dependency blocks it) changed it.
    fn publish(&mut self, index: usize) {
        if let Some(state) = self.refresh_published(index) {
            // The status first: whoever reads the event and then asks for
            // the status (`omnidev attach` for its URLs) finds it as new.
            self.publish_status();
            self.emit(Some(index), EventKind::State { state });
        }
    }

    /// Sets the state a service's status shows from its phase (and
    /// whether a dependency blocks it); the new state when it changed. A
    /// status is only published after this, so its state and its
    /// readiness always say the same.
    fn refresh_published(&mut self, index: usize) -> Option<crate::event::ServiceState> {
        let s = &self.services[index];
        let state = match (self.block_reason(index, 0), &s.link_down) {
            (Some(reason), _) => crate::event::ServiceState::Blocked { reason },
            (None, Some(reason)) if !s.is_terminal() => {
                crate::event::ServiceState::Blocked { reason: reason.clone() }
            }
            (None, _) => s.state(),
        };
        if self.services[index].published == state {
            return None;
        }
        self.services[index].published = state.clone();
        Some(state)
    }

    /// Publishes every service's status, in start order (each dependency
    /// before its dependents), which `status` shows.
    fn publish_status(&self) {
        let snapshot = self
            .order
            .iter()
            .map(|&i| self.services[i].status(self.name(i), &self.specs[i].urls))
            .collect();
        self.parts.status.send_replace(snapshot);
    }

    fn transitive_dependents(&self, index: usize) -> BTreeSet<usize> {
        let mut out = BTreeSet::new();
        let mut todo = vec![index];
        while let Some(i) = todo.pop() {
            for &d in &self.dependents[i] {
                if out.insert(d) {
                    todo.push(d);
                }
            }
        }
        out
    }

    /// Restarts a service, its dependents once it is ready again. A
    /// restart asked for by a person resets the crash backoff; a reload
    /// keeps the attempt count (the restart itself is at once either way).
    /// Dependents waiting out a backoff of their own (they crashed with
    /// it) wait for it instead.
    fn restart(&mut self, index: usize, reset_attempt: bool) {
        for d in self.transitive_dependents(index) {
            if matches!(self.services[d].phase, Phase::Backoff { .. }) {
                self.services[d].generation += 1;
                self.enter(d, Phase::Waiting);
            }
            self.services[d].mark_restart_pending();
        }
        self.restart_alone(index, reset_attempt);
    }

    /// Restarts a service and nothing else: its dependents keep running.
    fn restart_alone(&mut self, index: usize, reset_attempt: bool) {
        let s = &mut self.services[index];
        s.intent = Intent::Keep;
        if reset_attempt {
            s.attempt = 0;
        }
        self.stop(index, AfterStop::Start);
    }

    fn start_reload(&mut self, set: &BTreeSet<usize>, changes: Changes) {
        let services = set.iter().map(|&i| self.name(i).to_owned()).collect();
        self.reload.began = Some(SystemTime::now());
        self.reload.began_starts = self.starts();
        // Taken before any service is stopped, so its last lines are after
        // the mark: here, unless the stops ahead of this reload took it.
        let taken = self.reload.marked_ahead.take();
        if let Some(mut taken) = taken.or_else(|| self.parts.logs.mark_now()) {
            taken.mark.name(Some(&changes));
            self.write_mark(taken);
        }
        self.emit(None, EventKind::Reloading { services, changes });
        let mut involved = set.clone();
        for &i in set {
            involved.extend(self.transitive_dependents(i));
        }
        for &i in set {
            self.restart(i, false);
        }
        self.reload.active.get_or_insert_with(BTreeSet::new).extend(involved);
    }

    /// Writes a reload log mark on the background writer.
    fn write_mark(&self, taken: crate::logs::TakenMark) {
        let tx = self.internal_tx.clone();
        let file = taken.path.clone();
        self.writer.submit(taken.path, taken.mark.encode(), move |result| {
            let _ = tx.send(Internal::Written {
                file: state_file::WrittenFile::Mark(file),
                result: result.map_err(|e| e.to_string()),
            });
        });
    }

    /// Stops the running services of `set` ahead of the reload a watcher
    /// will ask for once its debounce is over ([`Intent::AwaitReload`]):
    /// the old runs end while the burst settles. Nothing is done while a
    /// reload runs or waits (that one decides when the next restart is),
    /// nor to a service that is not running or is already on its way down.
    fn stop_ahead_of_reload(&mut self, set: &BTreeSet<usize>) {
        if self.shutting_down() || self.reload.active.is_some() || self.reload.queued.is_some() {
            return;
        }
        let stop: Vec<usize> = set
            .iter()
            .copied()
            .filter(|&i| {
                let s = &self.services[i];
                !self.removed[i]
                    && s.intent == Intent::Keep
                    && matches!(&s.phase, Phase::Running(process) if process.is_alive())
            })
            .collect();
        if stop.is_empty() {
            return;
        }
        if self.reload.marked_ahead.is_none() {
            self.reload.marked_ahead = self.parts.logs.mark_now();
        }
        for i in stop {
            self.services[i].intent = Intent::AwaitReload;
            self.stop(i, AfterStop::Start);
        }
    }

    /// Stops a service in whatever phase it is; `then` says whether it goes
    /// back to waiting (a restart) or rests once stopped.
    fn stop(&mut self, index: usize, then: AfterStop) {
        let rest = match then {
            AfterStop::Start => Phase::Waiting,
            AfterStop::Rest => Phase::Stopped,
        };
        let generation = self.services[index].generation;
        let spec = self.specs[index].stop;
        let s = &mut self.services[index];
        match std::mem::replace(&mut s.phase, Phase::Waiting) {
            Phase::Stopping { process, then: current } => {
                // Already on its way down: a restart asked meanwhile wins.
                let then = if then == AfterStop::Start { then } else { current };
                s.phase = Phase::Stopping { process, then };
            }
            Phase::Running(mut process) => {
                process.abandon_probe();
                let group = process.group.clone();
                let tx = self.internal_tx.clone();
                tokio::spawn(async move {
                    if group.stop(spec.signal, spec.grace).await {
                        let _ = tx.send(Internal::Emit {
                            index,
                            kind: EventKind::Notice { message: killed_after_grace(spec) },
                        });
                    }
                    let _ = tx.send(Internal::run(index, generation, RunReport::GroupEmpty));
                });
                self.enter(index, Phase::Stopping { process, then });
            }
            Phase::Preparing { task, step } => {
                task.abort();
                if let Some(group) = step.take() {
                    // The prepare step is killed outright; it is not a
                    // service. The guard keeps it until the group is empty.
                    self.dying_prepares.retain(|task| !task.is_finished());
                    self.dying_prepares.push(tokio::spawn(async move {
                        group.stop(libc::SIGKILL, Duration::ZERO).await;
                        group.release();
                    }));
                }
                s.generation += 1;
                self.enter(index, rest);
                self.write_state();
            }
            Phase::Backoff { .. } => {
                s.generation += 1;
                self.enter(index, rest);
                self.write_state();
            }
            exited @ Phase::Exited { .. } => {
                s.phase = exited;
                if then == AfterStop::Start {
                    self.enter(index, rest);
                }
                self.write_state();
            }
            Phase::Waiting | Phase::Stopped | Phase::Failed { .. } => {
                self.enter(index, rest);
                self.write_state();
            }
        }
    }

    // ----- reports from helper tasks ------------------------------------

    fn current(&self, index: usize, generation: u64) -> bool {
        self.services[index].generation == generation
    }

    fn on_internal(&mut self, message: Internal) {
        match message {
            Internal::Emit { index, kind } => self.emit(Some(index), kind),
            Internal::Measured(measured) => self.measured(&measured),
            Internal::Written { file, result } => self.written(file, result),
            Internal::Run { index, generation, report } if self.current(index, generation) => {
                self.on_run(index, generation, report);
            }
            Internal::Run { .. } => {}
        }
    }

    /// A report about the current run of `index`.
    fn on_run(&mut self, index: usize, generation: u64, report: RunReport) {
        let phase = &mut self.services[index].phase;
        match report {
            RunReport::Prepared(outcome) if matches!(phase, Phase::Preparing { .. }) => {
                match outcome {
                    _ if self.shutting_down() => self.enter(index, Phase::Stopped),
                    Ok(()) => self.spawn(index),
                    Err(failure) => self.prepare_failed(index, generation, &failure),
                }
            }
            RunReport::InputsChanged if matches!(phase, Phase::Failed { .. }) => {
                let message = "its inputs changed; trying again".to_owned();
                self.emit(Some(index), EventKind::Notice { message });
                self.enter(index, Phase::Waiting);
            }
            RunReport::Exited(status) => {
                let s = &mut self.services[index];
                let stopping = matches!(s.phase, Phase::Stopping { .. });
                let Some(process) = s.process_mut() else {
                    return;
                };
                process.exit = Some(status);
                process.abandon_probe();
                if !stopping {
                    // The leader is gone; nothing of its group may linger
                    // (a port held by a grandchild would break the restart).
                    let group = process.group.clone();
                    let tx = self.internal_tx.clone();
                    tokio::spawn(async move {
                        group.stop(libc::SIGKILL, Duration::ZERO).await;
                        let _ = tx.send(Internal::run(index, generation, RunReport::GroupEmpty));
                    });
                }
                self.try_finish(index);
            }
            RunReport::GroupEmpty => {
                if let Some(process) = self.services[index].process_mut() {
                    process.group_empty = true;
                    self.try_finish(index);
                }
            }
            RunReport::Ready => {
                if let Phase::Running(process) = phase
                    && process.is_alive()
                {
                    process.readiness = ProbeState::Probed;
                    self.services[index].note = None;
                    // The state and the readiness in one status, published
                    // first: whoever reads the event (or wakes on the
                    // status) and then asks finds both new, with the URLs.
                    let back = self.services[index].link_down.take().is_some();
                    let changed = self.refresh_published(index);
                    self.publish_status();
                    self.emit_ready(index);
                    if back {
                        self.emit(Some(index), EventKind::LinkUp);
                    }
                    if let Some(state) = changed {
                        self.emit(Some(index), EventKind::State { state });
                    }
                    self.write_state();
                }
            }
            RunReport::Stable => self.stable(index),
            RunReport::ProbeTimedOut(after) => self.probe_timed_out(index, after),
            RunReport::BackoffElapsed => {
                if let Phase::Backoff { port, .. } = phase {
                    match *port {
                        // Its port is being looked at or moved: start after.
                        PortRecovery::Looking { port: p } => {
                            *port = PortRecovery::Overdue { port: p }
                        }
                        PortRecovery::Overdue { .. } => {}
                        PortRecovery::Settled => self.enter(index, Phase::Waiting),
                    }
                }
            }
            RunReport::PortHeld { port, holder } if matches!(phase, Phase::Running(_)) => {
                self.port_held(index, port, holder);
            }
            RunReport::CheckedAfterExit { port, holder } => {
                self.checked_after_exit(index, generation, port, holder);
            }
            RunReport::PortMoved { port, outcome } => self.port_moved(index, port, outcome),
            RunReport::MainProcess(main) => {
                // The look again once ready mostly finds the same process:
                // only a new one is worth a status to every reader.
                if let Some(process) = self.services[index].process_mut()
                    && process.main_pid != Some(main)
                {
                    process.main_pid = Some(main);
                    self.publish_status();
                }
            }
            RunReport::Prepared(_) | RunReport::InputsChanged | RunReport::PortHeld { .. } => {}
        }
    }

    /// A probe-less run has kept running for [`super::STABLE`]: it counts
    /// as ready now, and says so as a passed probe does.
    fn stable(&mut self, index: usize) {
        if let Phase::Running(process) = &mut self.services[index].phase
            && matches!(process.readiness, ProbeState::Assumed)
            && process.is_alive()
        {
            process.readiness = ProbeState::Stable;
            self.publish_status();
            self.emit_ready(index);
            self.write_state();
        }
    }

    /// Says the service counts as ready now, with the URLs it shows, and
    /// looks for its main process again: a wrapper starting (`uv run`
    /// resolving, probing interpreters) may have had a passing child.
    fn emit_ready(&self, index: usize) {
        let urls = self.specs[index].urls.clone();
        self.emit(Some(index), EventKind::Ready { urls });
        if let Some(process) = self.services[index].process() {
            self.look_for_main(index, process.pid);
        }
    }

    /// A run's probe has not passed within `after`: say so, and show it in
    /// its status (waiting for it ends there; polling goes on).
    fn probe_timed_out(&mut self, index: usize, after: Duration) {
        if let Some(process) = self.services[index].process_mut()
            && let ProbeState::Probing { timed_out, .. } = &mut process.readiness
        {
            *timed_out = true;
            self.publish_status();
            self.emit(Some(index), EventKind::ProbeTimedOut { after });
        }
    }
}

//! The supervisor's background task: owns every service's state, reacts to
//! requests, process exits, probe results and timers, and never blocks on
//! any of them (waits run in small tasks that report back over a channel).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, oneshot, watch};

use super::prepare::{self, Prepare, StepSlot};
use super::service::{AbortOnDrop, AfterStop, Intent, Phase, Process, Readiness, Service};
use super::spawn::{Spawned, Spawner};
use super::{Moved, PortMover, Reloads, Request, Settled};
use crate::backoff::BackoffPolicy;
use crate::containment::Containment;
use crate::event::{Changes, Event, EventKind, ExitStatus, ServiceStatus};
use crate::feed::Bus;
use crate::guard::Guard;
use crate::logs::LogStore;
use crate::probe;
use crate::spec::{Condition, RestartPolicy, ServiceSpec};
use crate::state::{ProcessRecord, STATE_VERSION, ServiceRecord, StateFile};

/// Exit status reported when a service's program could not be spawned.
const SPAWN_FAILED: ExitStatus = ExitStatus::Code(127);
/// How often a failed service's prepare inputs are checked for a change.
const RETRY_POLL: Duration = Duration::from_millis(500);

/// What the engine is built from.
pub(super) struct Parts {
    pub(super) specs: Vec<ServiceSpec>,
    pub(super) order: Vec<usize>,
    pub(super) logs: Arc<LogStore>,
    pub(super) events: Arc<Bus>,
    pub(super) guard: Arc<Guard>,
    pub(super) state_file: Option<PathBuf>,
    pub(super) backoff: BackoffPolicy,
    pub(super) status: watch::Sender<Vec<ServiceStatus>>,
    pub(super) settled: watch::Sender<Option<Settled>>,
    pub(super) reloading: watch::Sender<Reloads>,
    pub(super) supervisor: ProcessRecord,
    pub(super) spawner: Arc<dyn Spawner>,
    pub(super) containment: Arc<Containment>,
    pub(super) debug: bool,
    pub(super) port_mover: Option<Arc<dyn PortMover>>,
}

/// Messages from the engine's helper tasks, tagged with the generation of
/// the service they concern so reports about a replaced run are ignored.
#[derive(Debug)]
enum Internal {
    Prepared {
        index: usize,
        generation: u64,
        outcome: Result<(), Box<prepare::Failure>>,
    },
    InputsChanged {
        index: usize,
        generation: u64,
    },
    Exited {
        index: usize,
        generation: u64,
        status: ExitStatus,
    },
    GroupEmpty {
        index: usize,
        generation: u64,
    },
    Ready {
        index: usize,
        generation: u64,
    },
    /// The readiness probe found another process listening on the port.
    PortHeld {
        index: usize,
        generation: u64,
        port: u16,
        holder: String,
    },
    /// Who listened on the port once the service had crashed.
    CheckedAfterExit {
        index: usize,
        generation: u64,
        port: u16,
        holder: Option<String>,
    },
    /// The port mover's answer.
    PortMoved {
        index: usize,
        generation: u64,
        port: u16,
        outcome: Result<Moved, String>,
    },
    ProbeTimedOut {
        index: usize,
        generation: u64,
        after: Duration,
    },
    BackoffElapsed {
        index: usize,
        generation: u64,
    },
    Emit {
        index: usize,
        kind: EventKind,
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
}

/// Where `state.json` goes and how its writes stand.
#[derive(Debug)]
struct StateWrites {
    path: Option<PathBuf>,
    /// The last write failed and said so.
    error_reported: bool,
    /// The file is behind; written at the end of the turn.
    dirty: bool,
}

pub(super) struct Engine {
    specs: Vec<ServiceSpec>,
    order: Vec<usize>,
    /// Direct dependencies of each service, with their conditions.
    dependencies: Vec<Vec<(usize, Condition)>>,
    /// Direct dependents of each service.
    dependents: Vec<Vec<usize>>,
    services: Vec<Service>,
    logs: Arc<LogStore>,
    events: Arc<Bus>,
    guard: Arc<Guard>,
    spawner: Arc<dyn Spawner>,
    containment: Arc<Containment>,
    state: StateWrites,
    backoff: BackoffPolicy,
    status: watch::Sender<Vec<ServiceStatus>>,
    settled: watch::Sender<Option<Settled>>,
    reloading: watch::Sender<Reloads>,
    supervisor: ProcessRecord,
    internal_tx: mpsc::UnboundedSender<Internal>,
    internal_rx: Option<mpsc::UnboundedReceiver<Internal>>,
    shutting_down: bool,
    shutdown_waiters: Vec<oneshot::Sender<()>>,
    reload: ReloadState,
    /// Prepare steps killed mid-run, until their groups are empty: shutdown
    /// waits for them, so it never returns while one is still dying.
    dying_prepares: Vec<tokio::task::JoinHandle<()>>,
    /// Publish each readiness attempt as a debug event.
    debug: bool,
    /// Moves a port lost to another process (the pod layer).
    port_mover: Option<Arc<dyn PortMover>>,
}

impl Engine {
    pub(super) fn new(parts: Parts) -> Self {
        // The graph was validated: every dependency names a service.
        let dependencies: Vec<Vec<(usize, Condition)>> = parts
            .specs
            .iter()
            .map(|spec| {
                spec.depends_on
                    .iter()
                    .filter_map(|dep| {
                        let j = parts.specs.iter().position(|s| s.name == dep.service)?;
                        Some((j, dep.condition))
                    })
                    .collect()
            })
            .collect();
        let mut dependents = vec![Vec::new(); parts.specs.len()];
        for (i, deps) in dependencies.iter().enumerate() {
            for &(j, _) in deps {
                dependents[j].push(i);
            }
        }
        let (internal_tx, internal_rx) = mpsc::unbounded_channel();
        Self {
            services: parts.specs.iter().map(|_| Service::new()).collect(),
            specs: parts.specs,
            order: parts.order,
            dependencies,
            dependents,
            logs: parts.logs,
            events: parts.events,
            guard: parts.guard,
            spawner: parts.spawner,
            containment: parts.containment,
            state: StateWrites {
                path: parts.state_file,
                error_reported: false,
                dirty: false,
            },
            backoff: parts.backoff,
            status: parts.status,
            settled: parts.settled,
            reloading: parts.reloading,
            supervisor: parts.supervisor,
            internal_tx,
            internal_rx: Some(internal_rx),
            shutting_down: false,
            shutdown_waiters: Vec::new(),
            reload: ReloadState::default(),
            dying_prepares: Vec::new(),
            debug: parts.debug,
            port_mover: parts.port_mover,
        }
    }

    pub(super) async fn run(
        mut self,
        mut requests: mpsc::UnboundedReceiver<Request>,
        notices: Vec<String>,
        finished: watch::Sender<bool>,
    ) {
        let Some(mut internal) = self.internal_rx.take() else {
            return;
        };
        for message in notices {
            self.events.send(Event {
                at: SystemTime::now(),
                service: None,
                kind: EventKind::Notice { message },
            });
        }
        self.publish_status();
        self.write_state();
        self.reconcile();
        self.flush_state();
        let mut requests_open = true;
        loop {
            if self.shutting_down && self.all_down() {
                break;
            }
            tokio::select! {
                request = requests.recv(), if requests_open => {
                    if let Some(request) = request {
                        self.on_request(request);
                    } else {
                        // Every handle is gone: nobody can stop us later.
                        requests_open = false;
                        self.on_request(Request::Shutdown(None));
                    }
                }
                Some(message) = internal.recv() => self.on_internal(message),
            }
            self.reconcile();
            self.flush_state();
        }
        for dying in self.dying_prepares.drain(..) {
            let _ = dying.await;
        }
        let grace = self.specs.iter().map(|s| s.stop.grace).max();
        self.containment.sweep(grace.unwrap_or_default()).await;
        self.containment.close();
        self.logs.flush();
        self.write_state_now();
        self.guard.close();
        for waiter in self.shutdown_waiters.drain(..) {
            let _ = waiter.send(());
        }
        let _ = finished.send(true);
        // Requests that raced with the end are answered by dropping them.
        requests.close();
        while let Ok(request) = requests.try_recv() {
            if let Request::Shutdown(Some(waiter)) = request {
                let _ = waiter.send(());
            }
        }
    }

    // ----- events and status -------------------------------------------

    fn name(&self, index: usize) -> &str {
        &self.specs[index].name
    }

    fn emit(&self, index: Option<usize>, kind: EventKind) {
        let event = Event {
            at: SystemTime::now(),
            service: index.map(|i| self.name(i).to_owned()),
            kind,
        };
        // The combined ring holds the same lines the front-ends print, so a
        // front-end that catches up from it shows one wording.
        if event.is_shown() {
            self.logs.push_supervisor(event.to_string());
        }
        self.events.send(event);
    }

    /// Moves a service to `phase` and publishes its state.
    fn enter(&mut self, index: usize, phase: Phase) {
        self.services[index].phase = phase;
        self.publish(index);
    }

    /// Publishes a service's state if its phase changed it.
    fn publish(&mut self, index: usize) {
        let state = self.services[index].state();
        if self.services[index].published == state {
            return;
        }
        self.services[index].published = state.clone();
        self.emit(Some(index), EventKind::State { state });
        self.publish_status();
    }

    fn publish_status(&self) {
        let snapshot = self
            .services
            .iter()
            .enumerate()
            .map(|(i, s)| s.status(self.name(i)))
            .collect();
        self.status.send_replace(snapshot);
    }

    /// Notes that `state.json` is out of date; [`Engine::flush_state`]
    /// writes it once the current turn has been reconciled. A write syncs
    /// the file and its directory (a few milliseconds, far more while the
    /// disk is busy), so it must not sit between a service's exit and its
    /// respawn: the run's new pid is written right after the spawn, in the
    /// same turn, and several changes of one turn are one write.
    fn write_state(&mut self) {
        self.state.dirty = true;
    }

    /// Writes `state.json` if a change of this turn asked for it.
    fn flush_state(&mut self) {
        if std::mem::take(&mut self.state.dirty) {
            self.write_state_now();
        }
    }

    fn write_state_now(&mut self) {
        let Some(path) = self.state.path.clone() else {
            return;
        };
        let state = StateFile {
            version: STATE_VERSION,
            supervisor: self.supervisor,
            guard_pid: Some(self.guard.pid()),
            containment: Some(self.containment.mechanism().clone()),
            services: self
                .services
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let record = ServiceRecord {
                        cgroup: self.containment.leaf(i),
                        service_id: Some(self.containment.service_id(i)),
                        ..s.record()
                    };
                    (self.name(i).to_owned(), record)
                })
                .collect(),
        };
        // Said once per failure, with its cause, and again when it works.
        match crate::state::write_state(&path, &state) {
            Err(e) if !self.state.error_reported => {
                self.state.error_reported = true;
                let cause = std::error::Error::source(&e)
                    .map_or_else(|| e.to_string(), ToString::to_string);
                self.emit(
                    None,
                    EventKind::Notice {
                        message: format!(
                            "could not write {}: {cause}; supervising goes on, and writing is \
                             tried again at each change",
                            path.display()
                        ),
                    },
                );
            }
            Ok(()) if self.state.error_reported => {
                self.state.error_reported = false;
                self.emit(
                    None,
                    EventKind::Notice {
                        message: format!("{} is written again", path.display()),
                    },
                );
            }
            Ok(()) | Err(_) => {}
        }
    }

    // ----- requests ----------------------------------------------------

    fn on_request(&mut self, request: Request) {
        match request {
            Request::Restart(index, ack) => {
                self.answer_starts(ack);
                if !self.shutting_down {
                    self.restart(index, true);
                }
            }
            Request::Start(index) => {
                if !self.shutting_down {
                    let s = &mut self.services[index];
                    if s.intent == Intent::Hold {
                        s.intent = Intent::Keep;
                    }
                    if s.is_terminal() {
                        s.attempt = 0;
                        self.enter(index, Phase::Waiting);
                    }
                }
            }
            Request::Reload(indexes, changes, ack) => {
                self.answer_starts(ack);
                if self.shutting_down {
                    return;
                }
                let set: BTreeSet<usize> = indexes.into_iter().collect();
                if self.reload.active.is_some() {
                    // Crashed services leave the queue at once, in
                    // `check_reload`.
                    let (queued, queued_changes) = self
                        .reload
                        .queued
                        .get_or_insert_with(|| (BTreeSet::new(), Changes::default()));
                    queued.extend(set);
                    queued_changes.merge(changes);
                } else {
                    self.start_reload(&set, changes);
                }
            }
            Request::Stop(index, waiter) => {
                self.services[index].intent = Intent::Hold;
                self.stop(index, AfterStop::Rest);
                if self.services[index].has_process() {
                    self.services[index].stop_waiters.push(waiter);
                } else {
                    let _ = waiter.send(());
                }
            }
            Request::Shutdown(waiter) => {
                if let Some(waiter) = waiter {
                    self.shutdown_waiters.push(waiter);
                }
                if !self.shutting_down {
                    self.shutting_down = true;
                    self.emit(
                        None,
                        EventKind::Notice {
                            message: "shutting down".to_owned(),
                        },
                    );
                    for index in 0..self.services.len() {
                        if !self.services[index].has_process() {
                            self.stop(index, AfterStop::Rest);
                        }
                    }
                }
            }
        }
    }

    /// Tells a caller how many times each service has started, before its
    /// request is acted on (a run counted higher began after it).
    fn answer_starts(&self, ack: Option<oneshot::Sender<Vec<u32>>>) {
        if let Some(ack) = ack {
            let _ = ack.send(self.services.iter().map(|s| s.starts).collect());
        }
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
        // Before any service is stopped: its last lines are after the mark.
        let unmarked = self.logs.mark(Some(&changes));
        self.emit(None, EventKind::Reloading { services, changes });
        if let Some(message) = unmarked {
            self.emit(None, EventKind::Notice { message });
        }
        let mut involved = set.clone();
        for &i in set {
            involved.extend(self.transitive_dependents(i));
        }
        for &i in set {
            self.restart(i, false);
        }
        self.reload
            .active
            .get_or_insert_with(BTreeSet::new)
            .extend(involved);
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
            Phase::Stopping {
                process,
                then: current,
            } => {
                // Already on its way down: a restart asked meanwhile wins.
                let then = if then == AfterStop::Start {
                    then
                } else {
                    current
                };
                s.phase = Phase::Stopping { process, then };
            }
            Phase::Running(mut process) => {
                process.abandon_probe();
                let group = process.group.clone();
                let tx = self.internal_tx.clone();
                tokio::spawn(async move {
                    group.stop(spec.signal, spec.grace).await;
                    let _ = tx.send(Internal::GroupEmpty { index, generation });
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

    // ----- starting ----------------------------------------------------

    fn begin_start(&mut self, index: usize) {
        let s = &mut self.services[index];
        s.generation += 1;
        s.starts += 1;
        let generation = s.generation;
        let force = std::mem::take(&mut s.prepare_failed);
        if let Some(reason) = self.specs[index].unavailable.clone() {
            let retry = None;
            self.enter(index, Phase::Failed { reason, retry });
            return;
        }
        let steps = self.specs[index].prepare.clone();
        if steps.is_empty() {
            self.spawn(index);
            return;
        }
        let tx = self.internal_tx.clone();
        let logs = self.logs.clone();
        let spawner = self.spawner.clone();
        let step = Arc::new(StepSlot::default());
        let slot = step.clone();
        let name = self.specs[index].name.clone();
        let task = tokio::spawn(async move {
            let prepare = Prepare {
                service: &name,
                steps: &steps,
                spawner: spawner.as_ref(),
                logs: &logs,
                slot: &slot,
                force,
            };
            let outcome = prepare::run(prepare, |kind| {
                let _ = tx.send(Internal::Emit { index, kind });
            })
            .await
            .map_err(Box::new);
            let _ = tx.send(Internal::Prepared {
                index,
                generation,
                outcome,
            });
        });
        self.enter(index, Phase::Preparing { task, step });
    }

    fn spawn(&mut self, index: usize) {
        let spec = &self.specs[index];
        let generation = self.services[index].generation;
        // Watching starts before the process does, so its first line counts.
        let watch = match spec.readiness.as_ref().map(|r| &r.probe) {
            Some(crate::spec::ProbeSpec::Log { pattern }) => {
                Some(Arc::new(probe::LineWatch::new(pattern)))
            }
            _ => None,
        };
        self.logs.watch_lines(&spec.name, watch.clone());
        let Spawned {
            pid,
            start_time,
            exit,
            group,
        } = match self.spawner.spawn(&spec.command, &spec.name) {
            Ok(spawned) => spawned,
            Err(e) => {
                let message = format!(
                    "could not start `{}` in {}: {e}",
                    spec.command.program,
                    spec.command.cwd.display()
                );
                self.emit(Some(index), EventKind::Notice { message });
                self.finish(index, SPAWN_FAILED, Duration::ZERO, None);
                return;
            }
        };
        let tx = self.internal_tx.clone();
        tokio::spawn(async move {
            let status = exit.await;
            let _ = tx.send(Internal::Exited {
                index,
                generation,
                status,
            });
        });
        let readiness = match spec.readiness.clone() {
            Some(readiness) => self.probe_task(index, generation, readiness, watch, group.clone()),
            None => Readiness::Assumed,
        };
        self.services[index].note = None;
        self.services[index].port_check = None;
        let process = Process {
            pid,
            start_time,
            spawned_at: std::time::Instant::now(),
            group,
            readiness,
            exit: None,
            group_empty: false,
        };
        self.enter(index, Phase::Running(process));
        self.write_state();
    }

    /// The task polling a run's readiness probe (behind the listener-owner
    /// check when the readiness names a port), reporting to the engine.
    fn probe_task(
        &self,
        index: usize,
        generation: u64,
        readiness: crate::spec::Readiness,
        watch: Option<Arc<probe::LineWatch>>,
        group: Arc<dyn super::spawn::ProcessGroup>,
    ) -> Readiness {
        let tx = self.internal_tx.clone();
        let guard = self.guard.clone();
        let listener_group = group;
        let debug = self.debug;
        let task = tokio::spawn(async move {
            let mut probe: Box<dyn probe::Probe> = match watch {
                Some(watch) => Box::new(probe::LogProbe::new(watch)),
                None => probe::probe_with_guard(&readiness.probe, Some(guard)),
            };
            if let Some(port) = readiness.listener {
                let tx = tx.clone();
                probe = Box::new(OwnListener {
                    inner: probe,
                    port,
                    group: listener_group,
                    last: std::sync::Mutex::new(None),
                    looked: std::sync::Mutex::new(None),
                    report: Box::new(move |holder| {
                        let _ = tx.send(Internal::PortHeld {
                            index,
                            generation,
                            port,
                            holder,
                        });
                    }),
                });
            }
            probe::poll_until_ready(probe.as_ref(), &readiness, |outcome| {
                let message = match outcome {
                    probe::ProbeOutcome::NotYet {
                        attempt,
                        error,
                        next,
                    } => {
                        if !debug {
                            return;
                        }
                        let message = format!(
                            "readiness attempt {attempt}: {error}; next in {}",
                            crate::event::format_duration(next)
                        );
                        Internal::Emit {
                            index,
                            kind: EventKind::Debug { message },
                        }
                    }
                    probe::ProbeOutcome::Ready => Internal::Ready { index, generation },
                    probe::ProbeOutcome::TimedOut => Internal::ProbeTimedOut {
                        index,
                        generation,
                        after: readiness.timeout,
                    },
                };
                let _ = tx.send(message);
            })
            .await;
        });
        Readiness::Probing {
            task,
            timed_out: false,
        }
    }

    // ----- reports from helper tasks ------------------------------------

    fn current(&self, index: usize, generation: u64) -> bool {
        self.services[index].generation == generation
    }

    fn on_internal(&mut self, message: Internal) {
        match message {
            Internal::Emit { index, kind } => self.emit(Some(index), kind),
            Internal::Prepared {
                index,
                generation,
                outcome,
            } => {
                if self.current(index, generation)
                    && matches!(self.services[index].phase, Phase::Preparing { .. })
                {
                    match outcome {
                        _ if self.shutting_down => self.enter(index, Phase::Stopped),
                        Ok(()) => self.spawn(index),
                        Err(failure) => self.prepare_failed(index, generation, &failure),
                    }
                }
            }
            Internal::InputsChanged { index, generation } => {
                if self.current(index, generation)
                    && matches!(self.services[index].phase, Phase::Failed { .. })
                {
                    let message = "its inputs changed; trying again".to_owned();
                    self.emit(Some(index), EventKind::Notice { message });
                    self.enter(index, Phase::Waiting);
                }
            }
            Internal::Exited {
                index,
                generation,
                status,
            } => {
                if !self.current(index, generation) {
                    return;
                }
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
                        let _ = tx.send(Internal::GroupEmpty { index, generation });
                    });
                }
                self.try_finish(index);
            }
            Internal::GroupEmpty { index, generation } => {
                if self.current(index, generation)
                    && let Some(process) = self.services[index].process_mut()
                {
                    process.group_empty = true;
                    self.try_finish(index);
                }
            }
            Internal::Ready { index, generation } => {
                let current = self.current(index, generation);
                if current
                    && let Phase::Running(process) = &mut self.services[index].phase
                    && process.is_alive()
                {
                    process.readiness = Readiness::Probed;
                    self.services[index].note = None;
                    self.emit(Some(index), EventKind::Ready);
                    self.publish(index);
                    self.write_state();
                }
            }
            Internal::ProbeTimedOut {
                index,
                generation,
                after,
            } => self.probe_timed_out(index, generation, after),
            Internal::BackoffElapsed { index, generation } => {
                if self.current(index, generation)
                    && matches!(self.services[index].phase, Phase::Backoff { .. })
                {
                    let s = &mut self.services[index];
                    if s.port_check == Some(generation) {
                        // Its port is being looked at or moved: start after.
                        s.backoff_over = true;
                    } else {
                        self.enter(index, Phase::Waiting);
                    }
                }
            }
            message @ (Internal::PortHeld { .. }
            | Internal::CheckedAfterExit { .. }
            | Internal::PortMoved { .. }) => self.on_port_report(message),
        }
    }

    /// A run's probe has not passed within `after`: say so, and show it in
    /// its status (waiting for it ends there; polling goes on).
    fn probe_timed_out(&mut self, index: usize, generation: u64, after: Duration) {
        if self.current(index, generation)
            && let Some(process) = self.services[index].process_mut()
            && let Readiness::Probing { timed_out, .. } = &mut process.readiness
        {
            *timed_out = true;
            self.emit(Some(index), EventKind::ProbeTimedOut { after });
            self.publish_status();
        }
    }

    /// Reports about a service's port: another process on it while the
    /// probe runs, after a crash, and the mover's answer.
    fn on_port_report(&mut self, message: Internal) {
        match message {
            Internal::PortHeld {
                index,
                generation,
                port,
                holder,
            } if self.current(index, generation)
                && matches!(self.services[index].phase, Phase::Running(_)) =>
            {
                self.port_held(index, port, holder);
            }
            Internal::CheckedAfterExit {
                index,
                generation,
                port,
                holder,
            } if self.current(index, generation) => {
                self.checked_after_exit(index, generation, port, holder);
            }
            Internal::PortMoved {
                index,
                generation,
                port,
                outcome,
            } if self.current(index, generation) => {
                self.port_moved(index, port, outcome);
            }
            _ => {}
        }
    }

    /// Who listened on a crashed service's port: another process means
    /// the service lost its port; the mover (if any) is asked to move it.
    fn checked_after_exit(
        &mut self,
        index: usize,
        generation: u64,
        port: u16,
        holder: Option<String>,
    ) {
        match (holder, self.port_mover.clone()) {
            (Some(holder), Some(mover)) => {
                self.port_held(index, port, holder.clone());
                let name = self.name(index).to_owned();
                let tx = self.internal_tx.clone();
                tokio::task::spawn_blocking(move || {
                    let outcome = mover.move_port(&name, port, &holder);
                    let _ = tx.send(Internal::PortMoved {
                        index,
                        generation,
                        port,
                        outcome,
                    });
                });
            }
            (holder, _) => {
                if let Some(holder) = holder {
                    self.port_held(index, port, holder);
                }
                self.port_checked(index);
            }
        }
    }

    /// Another process listens on `index`'s port: say so, once per holder,
    /// and show it in the service's status.
    fn port_held(&mut self, index: usize, port: u16, holder: String) {
        let event = Event {
            at: SystemTime::now(),
            service: Some(self.name(index).to_owned()),
            kind: EventKind::PortHeld { port, holder },
        };
        let note = event.to_string();
        if self.services[index].note.as_ref() == Some(&note) {
            return;
        }
        self.services[index].note = Some(note);
        self.emit(Some(index), event.kind);
        self.publish_status();
    }

    /// The look at a crashed service's port is over: the backoff decides.
    fn port_checked(&mut self, index: usize) {
        let s = &mut self.services[index];
        s.port_check = None;
        if std::mem::take(&mut s.backoff_over) && matches!(s.phase, Phase::Backoff { .. }) {
            self.enter(index, Phase::Waiting);
        }
    }

    /// The mover answered: start the service on its new port at once (and
    /// restart every other service whose spec changed), or leave it failed
    /// with the reason its port cannot move.
    fn port_moved(&mut self, index: usize, port: u16, outcome: Result<Moved, String>) {
        let same_services = |moved: &Moved| {
            moved.services.len() == self.specs.len()
                && moved
                    .services
                    .iter()
                    .zip(&self.specs)
                    .all(|(a, b)| a.name == b.name && a.depends_on == b.depends_on)
        };
        let outcome = outcome.and_then(|moved| {
            if same_services(&moved) {
                Ok(moved)
            } else {
                Err("the port mover returned other services than the pod runs".to_owned())
            }
        });
        let s = &mut self.services[index];
        s.port_check = None;
        s.backoff_over = false;
        if !matches!(s.phase, Phase::Backoff { .. }) {
            return;
        }
        s.generation += 1;
        match outcome {
            Ok(moved) => {
                let changed: Vec<usize> = (0..self.specs.len())
                    .filter(|&j| j != index && self.specs[j] != moved.services[j])
                    .collect();
                self.specs = moved.services;
                let message = format!(
                    "moved {} from port {port} to port {}",
                    self.name(index),
                    moved.port
                );
                self.emit(Some(index), EventKind::Notice { message });
                self.enter(index, Phase::Waiting);
                for j in changed {
                    if self.services[j].has_process() {
                        self.restart(j, false);
                    }
                }
            }
            Err(reason) => {
                self.services[index].intent = Intent::Hold;
                self.enter(
                    index,
                    Phase::Failed {
                        reason,
                        retry: None,
                    },
                );
                self.write_state();
            }
        }
    }

    /// A prepare step failed: report it once, do not start the service, and
    /// wait for the step's inputs to change (or a restart) to try again.
    fn prepare_failed(&mut self, index: usize, generation: u64, failure: &prepare::Failure) {
        for message in failure.report() {
            self.emit(Some(index), EventKind::Notice { message });
        }
        self.services[index].prepare_failed = true;
        let retry = (!failure.inputs.is_empty()).then(|| {
            let inputs = failure.inputs.clone();
            let tx = self.internal_tx.clone();
            AbortOnDrop(tokio::spawn(async move {
                prepare::wait_for_change(inputs, RETRY_POLL).await;
                let _ = tx.send(Internal::InputsChanged { index, generation });
            }))
        });
        let reason = failure.reason(self.name(index));
        self.enter(index, Phase::Failed { reason, retry });
        self.write_state();
    }

    /// Ends the run once the leader has been reaped and the group is empty.
    fn try_finish(&mut self, index: usize) {
        let s = &mut self.services[index];
        let done = s
            .process()
            .is_some_and(|p| p.exit.is_some() && p.group_empty);
        if !done {
            return;
        }
        let (process, then) = match std::mem::replace(&mut s.phase, Phase::Waiting) {
            Phase::Running(process) => (process, None),
            Phase::Stopping { process, then } => (process, Some(then)),
            _ => unreachable!("a service with a process is running or stopping"),
        };
        process.group.release();
        let status = process.exit.unwrap_or(SPAWN_FAILED);
        self.finish(index, status, process.spawned_at.elapsed(), then);
    }

    /// A run ended with `status` after `ran_for`; `then` is set when it was
    /// stopped on request. Decides what comes next: rest, wait, back off and
    /// restart, or stay exited.
    fn finish(
        &mut self,
        index: usize,
        status: ExitStatus,
        ran_for: Duration,
        then: Option<AfterStop>,
    ) {
        let s = &mut self.services[index];
        s.last_exit = Some(status);
        for waiter in s.stop_waiters.drain(..) {
            let _ = waiter.send(());
        }
        if let Some(then) = then {
            let again = then == AfterStop::Start && !self.shutting_down;
            let phase = if again {
                Phase::Waiting
            } else {
                Phase::Stopped
            };
            self.enter(index, phase);
            self.write_state();
            return;
        }
        let restart = !self.shutting_down
            && match self.specs[index].restart {
                RestartPolicy::Always => true,
                RestartPolicy::OnFailure => !status.success(),
                RestartPolicy::Never => false,
            };
        if restart {
            s.attempt = self.backoff.next_attempt(s.attempt, ran_for);
            s.restarts += 1;
            let attempt = s.attempt;
            let after = self.backoff.delay(attempt);
            s.generation += 1;
            let generation = s.generation;
            let tx = self.internal_tx.clone();
            tokio::spawn(async move {
                tokio::time::sleep(after).await;
                let _ = tx.send(Internal::BackoffElapsed { index, generation });
            });
            for d in self.transitive_dependents(index) {
                if self.services[d].has_process() {
                    self.services[d].mark_restart_pending();
                }
            }
            self.emit(
                Some(index),
                EventKind::Crashed {
                    status,
                    attempt,
                    backoff: after,
                },
            );
            self.enter(index, Phase::Backoff { after, attempt });
            if let Some(port) = self.specs[index]
                .readiness
                .as_ref()
                .and_then(|r| r.listener)
            {
                // Nothing of the service is left: any listener is another's.
                let s = &mut self.services[index];
                s.port_check = Some(generation);
                s.backoff_over = false;
                let tx = self.internal_tx.clone();
                tokio::task::spawn_blocking(move || {
                    let holder = match crate::listener::owner(port, &[]) {
                        crate::listener::Owner::Other(holder) => Some(holder.to_string()),
                        _ => None,
                    };
                    let _ = tx.send(Internal::CheckedAfterExit {
                        index,
                        generation,
                        port,
                        holder,
                    });
                });
            }
        } else {
            // A clean exit that is not restarted is a finished one-shot, not
            // a crash; its `Exited` state says all there is to say.
            if !self.shutting_down && !status.success() {
                self.emit(
                    Some(index),
                    EventKind::Crashed {
                        status,
                        attempt: 0,
                        backoff: Duration::ZERO,
                    },
                );
            }
            self.services[index].intent = Intent::Hold;
            self.enter(index, Phase::Exited { status });
        }
        self.write_state();
    }

    // ----- reconciliation ----------------------------------------------

    /// Whether `index`'s dependencies meet their conditions now.
    fn dependencies_met(&self, index: usize) -> bool {
        self.dependencies[index].iter().all(|&(j, condition)| {
            let d = &self.services[j];
            d.intent != Intent::RestartPending
                && d.is_up()
                && match condition {
                    Condition::Started => true,
                    Condition::Ready => d.is_ready(),
                }
        })
    }

    /// Waiting on a dependency that has ended and will not come back.
    fn blocked(&self, index: usize, depth: usize) -> bool {
        if depth > self.specs.len() || !matches!(self.services[index].phase, Phase::Waiting) {
            return false;
        }
        self.dependencies[index]
            .iter()
            .any(|&(j, _)| self.services[j].is_terminal() || self.blocked(j, depth + 1))
    }

    fn all_down(&self) -> bool {
        self.services.iter().all(|s| {
            !matches!(
                s.phase,
                Phase::Running(_) | Phase::Stopping { .. } | Phase::Preparing { .. }
            )
        })
    }

    fn reconcile(&mut self) {
        if self.shutting_down {
            self.shutdown_step();
        } else {
            self.start_what_can_start();
            // A reload started here stops and restarts services: start
            // what that made startable.
            while self.check_reload() {
                self.start_what_can_start();
            }
        }
        let reloads = Reloads {
            active: self.reload.active.is_some() || self.reload.queued.is_some(),
            began: self.reload.began,
        };
        self.reloading.send_if_modified(|current| {
            let changed = *current != reloads;
            *current = reloads;
            changed
        });
        self.check_settled();
    }

    /// Starts every waiting service whose dependencies are met, and
    /// restarts those whose dependency restarted, in dependency order.
    fn start_what_can_start(&mut self) {
        let mut changed = true;
        while changed {
            changed = false;
            for position in 0..self.order.len() {
                let index = self.order[position];
                let s = &self.services[index];
                let pending = s.intent == Intent::RestartPending;
                if matches!(s.phase, Phase::Waiting)
                    && s.intent != Intent::Hold
                    && self.dependencies_met(index)
                {
                    self.services[index].intent = Intent::Keep;
                    self.begin_start(index);
                    changed = true;
                } else if pending
                    && matches!(s.phase, Phase::Running(_))
                    && self.dependencies_met(index)
                {
                    self.services[index].intent = Intent::Keep;
                    self.stop(index, AfterStop::Start);
                    changed = true;
                } else if pending && !s.has_process() {
                    self.services[index].intent = Intent::Keep;
                }
            }
        }
    }

    fn shutdown_step(&mut self) {
        for index in 0..self.services.len() {
            if !matches!(self.services[index].phase, Phase::Running(_)) {
                continue;
            }
            let dependents_down = self
                .transitive_dependents(index)
                .iter()
                .all(|&d| !self.services[d].has_process());
            if dependents_down {
                self.stop(index, AfterStop::Rest);
            }
        }
    }

    /// Whether service `i` is past the restart a reload gave it: ready (or
    /// running without a probe), or ended; not preparing, stopping or about
    /// to start, and not waiting to follow a dependency.
    fn settled_for_reload(&self, i: usize) -> bool {
        let s = &self.services[i];
        s.intent != Intent::RestartPending
            && match s.phase {
                Phase::Running(_) => s.is_ready(),
                Phase::Exited { .. }
                | Phase::Stopped
                | Phase::Backoff { .. }
                | Phase::Failed { .. } => true,
                Phase::Waiting => self.blocked(i, 0) || s.intent == Intent::Hold,
                Phase::Preparing { .. } | Phase::Stopping { .. } => false,
            }
    }

    /// Starts what is queued for each service as soon as that service is
    /// settled (see [`Engine::settled_for_reload`]) or down after a crash:
    /// a change waits for the restart of the service it reloads, not for
    /// that restart's dependents (they restart after it again anyway), and
    /// a crashed service does not wait at all — the developer is waiting
    /// for exactly this restart. True when it started a reload.
    fn check_reload(&mut self) -> bool {
        let mut started = false;
        let now: BTreeSet<usize> = match &self.reload.queued {
            Some((queued, _)) => queued
                .iter()
                .copied()
                .filter(|&i| self.services[i].is_down_after_crash() || self.settled_for_reload(i))
                .collect(),
            None => BTreeSet::new(),
        };
        if !now.is_empty()
            && let Some((queued, changes)) = &mut self.reload.queued
        {
            queued.retain(|i| !now.contains(i));
            let changes = if queued.is_empty() {
                self.reload
                    .queued
                    .take()
                    .map(|(_, c)| c)
                    .unwrap_or_default()
            } else {
                changes.clone()
            };
            self.start_reload(&now, changes);
            started = true;
        }
        if let Some(active) = &self.reload.active
            && active.iter().all(|&i| self.settled_for_reload(i))
        {
            self.reload.active = None;
        }
        started
    }

    fn check_settled(&mut self) {
        let mut failed = Vec::new();
        let mut settled = true;
        for (i, s) in self.services.iter().enumerate() {
            match &s.phase {
                Phase::Exited { status } => {
                    if !status.success() {
                        failed.push(self.name(i).to_owned());
                    }
                }
                Phase::Stopped => {}
                // It waits for a fix, but nothing runs it meanwhile: for
                // the headless exit rule it has failed.
                Phase::Failed { .. } => failed.push(self.name(i).to_owned()),
                Phase::Waiting
                    if self.blocked(i, 0) || (s.intent == Intent::Hold && !self.shutting_down) =>
                {
                    failed.push(self.name(i).to_owned());
                }
                _ => settled = false,
            }
        }
        let value = settled.then_some(Settled {
            success: failed.is_empty(),
            failed,
        });
        self.settled.send_if_modified(|current| {
            if *current == value {
                false
            } else {
                *current = value;
                true
            }
        });
    }
}

/// A readiness probe that passes only while the port's listener is a
/// process of the service; another process's listener is reported (once
/// per holder) and keeps the service from being ready, whatever that
/// process answers.
///
/// Looking costs a read of `/proc/net/tcp{,6}`, in which the kernel walks
/// its whole table of TCP connections: about 3 ms of CPU on a host with a
/// large table (262,144 buckets here), which an attempt every 20 ms took
/// from the very service that was booting. So the owner is looked at
/// before an answer counts, and while the probe fails only at the first
/// attempt and then at most every [`OWNER_LOOK_INTERVAL`] (to name a
/// holder that answers with an error, or listens where the probe does not
/// reach).
struct OwnListener {
    inner: Box<dyn probe::Probe>,
    port: u16,
    group: Arc<dyn super::spawn::ProcessGroup>,
    last: std::sync::Mutex<Option<String>>,
    report: Box<dyn Fn(String) + Send + Sync>,
    /// When the owner was last looked at.
    looked: std::sync::Mutex<Option<tokio::time::Instant>>,
}

/// The longest a failing probe goes without a look at the port's owner.
const OWNER_LOOK_INTERVAL: Duration = Duration::from_secs(1);

impl OwnListener {
    /// Whether this attempt looks at the owner: always when the probe
    /// passed, else when the last look is [`OWNER_LOOK_INTERVAL`] old.
    fn looks(&self, answered: bool) -> bool {
        let mut looked = self
            .looked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = tokio::time::Instant::now();
        let due = answered || looked.is_none_or(|at| now - at >= OWNER_LOOK_INTERVAL);
        if due {
            *looked = Some(now);
        }
        due
    }
}

impl std::fmt::Debug for OwnListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnListener")
            .field("inner", &self.inner)
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl probe::Probe for OwnListener {
    async fn check(&self) -> Result<(), String> {
        // The probe first, then the owner: a listener that appears between
        // the two is looked at before the answer counts.
        let answered = self.inner.reach().await;
        if !self.looks(answered.is_ok()) {
            return answered.map(drop);
        }
        let members = self.group.members();
        // An answer counts only when the listener that gave it, at the
        // address the probe reached, is the service's; a failing probe
        // names whoever listens on the port at all.
        let owner = match &answered {
            Ok(Some(at)) => crate::listener::owner_at(*at, &members),
            _ => crate::listener::owner(self.port, &members),
        };
        match owner {
            crate::listener::Owner::Other(holder) => {
                let holder = holder.to_string();
                let mut last = self
                    .last
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if last.as_ref() != Some(&holder) {
                    (self.report)(holder.clone());
                    *last = Some(holder.clone());
                }
                Err(format!("port {} is held by {holder}", self.port))
            }
            // No listener to be seen (another network namespace, say): the
            // probe alone decides, as where there is no /proc.
            _ => answered.map(drop),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct NoGroup;

    #[async_trait::async_trait]
    impl super::super::spawn::ProcessGroup for NoGroup {
        async fn stop(&self, _signal: i32, _grace: Duration) {}
        fn release(&self) {}
    }

    #[derive(Debug)]
    struct Refused;

    #[async_trait::async_trait]
    impl probe::Probe for Refused {
        async fn check(&self) -> Result<(), String> {
            Err("connection refused".to_owned())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_owner_is_looked_at_for_every_answer_and_once_a_second_otherwise() {
        let listener = OwnListener {
            inner: Box::new(Refused),
            port: 1,
            group: Arc::new(NoGroup),
            last: std::sync::Mutex::new(None),
            report: Box::new(|_| {}),
            looked: std::sync::Mutex::new(None),
        };
        assert!(listener.looks(false), "the first attempt looks");
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!listener.looks(false), "20 ms later a failing one does not");
        assert!(listener.looks(true), "an answer is always looked at");
        tokio::time::sleep(Duration::from_millis(980)).await;
        assert!(
            !listener.looks(false),
            "not yet a second since the last look"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(listener.looks(false), "a second after the last look");
    }
}

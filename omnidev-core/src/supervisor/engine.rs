//! The supervisor's background task: owns every service's state, reacts to
//! requests, process exits, probe results and timers, and never blocks on
//! any of them (waits run in small tasks that report back over a channel).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use super::{Request, Settled};
use crate::backoff::BackoffPolicy;
use crate::event::{Event, EventKind, ExitStatus, ServiceState, ServiceStatus, Stream};
use crate::guard::Guard;
use crate::logs::{self, LogStore};
use crate::probe;
use crate::process;
use crate::spec::{Condition, PrepareStep, PrepareWhen, RestartPolicy, ServiceSpec};
use crate::state::{ProcessRecord, STATE_VERSION, ServiceRecord, StateFile};

/// Exit status reported when a service's program could not be spawned.
const SPAWN_FAILED: ExitStatus = ExitStatus::Code(127);

/// What the engine is built from.
pub(super) struct Parts {
    pub(super) specs: Vec<ServiceSpec>,
    pub(super) order: Vec<usize>,
    pub(super) logs: Arc<LogStore>,
    pub(super) events: broadcast::Sender<Event>,
    pub(super) guard: Arc<Guard>,
    pub(super) state_file: Option<PathBuf>,
    pub(super) backoff: BackoffPolicy,
    pub(super) status: watch::Sender<Vec<ServiceStatus>>,
    pub(super) settled: watch::Sender<Option<Settled>>,
    pub(super) reloading: watch::Sender<bool>,
    pub(super) supervisor: ProcessRecord,
}

/// Messages from the engine's helper tasks, tagged with the generation of
/// the service they concern so reports about a replaced run are ignored.
#[derive(Debug)]
enum Internal {
    Prepared {
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

/// Runtime data of one service beside its state.
// The flags are independent facts about a run, not a hidden state machine.
#[allow(clippy::struct_excessive_bools)]
#[derive(Debug)]
struct Service {
    state: ServiceState,
    generation: u64,
    pid: Option<u32>,
    pgid: i32,
    start_time: Option<u64>,
    spawned_at: Instant,
    ready: bool,
    attempt: u32,
    restarts: u32,
    /// Restart once its dependencies meet their conditions again.
    restart_pending: bool,
    stop_requested: bool,
    /// When the requested stop completes, start again instead of resting.
    start_after_stop: bool,
    /// Stopped or exited and not to be started by reconciliation.
    held: bool,
    exit: Option<ExitStatus>,
    group_empty: bool,
    probe: Option<JoinHandle<()>>,
    prepare: Option<JoinHandle<()>>,
    prepare_pgid: Arc<AtomicI32>,
    /// The tasks reading the current run's stdout and stderr.
    captures: Vec<JoinHandle<()>>,
    stop_waiters: Vec<oneshot::Sender<()>>,
}

impl Service {
    fn new() -> Self {
        Self {
            state: ServiceState::Waiting,
            generation: 0,
            pid: None,
            pgid: 0,
            start_time: None,
            spawned_at: Instant::now(),
            ready: false,
            attempt: 0,
            restarts: 0,
            restart_pending: false,
            stop_requested: false,
            start_after_stop: false,
            held: false,
            exit: None,
            group_empty: false,
            probe: None,
            prepare: None,
            prepare_pgid: Arc::new(AtomicI32::new(0)),
            captures: Vec::new(),
            stop_waiters: Vec::new(),
        }
    }

    /// A process of this service exists (or is being emptied).
    fn has_process(&self) -> bool {
        self.pid.is_some()
    }

    fn is_terminal(&self) -> bool {
        matches!(
            self.state,
            ServiceState::Exited { .. } | ServiceState::Stopped
        )
    }
}

#[derive(Debug, Default)]
struct ReloadState {
    active: Option<BTreeSet<usize>>,
    queued: Option<BTreeSet<usize>>,
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
    events: broadcast::Sender<Event>,
    guard: Arc<Guard>,
    state_file: Option<PathBuf>,
    state_error_reported: bool,
    backoff: BackoffPolicy,
    status: watch::Sender<Vec<ServiceStatus>>,
    settled: watch::Sender<Option<Settled>>,
    reloading: watch::Sender<bool>,
    supervisor: ProcessRecord,
    internal_tx: mpsc::UnboundedSender<Internal>,
    internal_rx: Option<mpsc::UnboundedReceiver<Internal>>,
    shutting_down: bool,
    shutdown_waiters: Vec<oneshot::Sender<()>>,
    reload: ReloadState,
    /// Prepare steps killed mid-run, until their groups are empty: shutdown
    /// waits for them, so it never returns while one is still dying.
    dying_prepares: Vec<tokio::task::JoinHandle<()>>,
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
            state_file: parts.state_file,
            state_error_reported: false,
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
            let _ = self.events.send(Event {
                at: SystemTime::now(),
                service: None,
                kind: EventKind::Notice { message },
            });
        }
        self.publish_status();
        self.write_state();
        self.reconcile();
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
        }
        for dying in self.dying_prepares.drain(..) {
            let _ = dying.await;
        }
        self.logs.flush();
        self.write_state();
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
        let service = index.map(|i| self.name(i).to_owned());
        if let Some(text) = describe(service.as_deref(), &kind) {
            self.logs.push_supervisor(text);
        }
        let _ = self.events.send(Event {
            at: SystemTime::now(),
            service,
            kind,
        });
    }

    fn set_state(&mut self, index: usize, state: ServiceState) {
        if self.services[index].state == state {
            return;
        }
        self.services[index].state = state.clone();
        self.emit(Some(index), EventKind::State { state });
        self.publish_status();
    }

    fn publish_status(&self) {
        let snapshot = self
            .services
            .iter()
            .enumerate()
            .map(|(i, s)| ServiceStatus {
                name: self.name(i).to_owned(),
                state: s.state.clone(),
                restarts: s.restarts,
                pid: s.pid,
                ready: s.ready,
            })
            .collect();
        self.status.send_replace(snapshot);
    }

    fn write_state(&mut self) {
        let Some(path) = self.state_file.clone() else {
            return;
        };
        let state = StateFile {
            version: STATE_VERSION,
            supervisor: self.supervisor,
            guard_pid: Some(self.guard.pid()),
            services: self
                .services
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let record = ServiceRecord {
                        pid: s.pid,
                        pgid: s.pid.map(|_| s.pgid),
                        start_time: s.pid.and(s.start_time),
                        state: s.state.clone(),
                        restarts: s.restarts,
                        ready: s.ready,
                    };
                    (self.name(i).to_owned(), record)
                })
                .collect(),
        };
        if let Err(e) = crate::state::write_state(&path, &state)
            && !self.state_error_reported
        {
            self.state_error_reported = true;
            self.emit(
                None,
                EventKind::Notice {
                    message: format!("could not write {}: {e}", path.display()),
                },
            );
        }
    }

    // ----- requests ----------------------------------------------------

    fn on_request(&mut self, request: Request) {
        match request {
            Request::Restart(index) => {
                if !self.shutting_down {
                    self.restart(index);
                }
            }
            Request::Start(index) => {
                if !self.shutting_down {
                    let s = &mut self.services[index];
                    s.held = false;
                    if s.is_terminal() {
                        s.attempt = 0;
                        self.set_state(index, ServiceState::Waiting);
                    }
                }
            }
            Request::Reload(indexes) => {
                if self.shutting_down {
                    return;
                }
                let set: BTreeSet<usize> = indexes.into_iter().collect();
                if self.reload.active.is_some() {
                    self.reload
                        .queued
                        .get_or_insert_with(BTreeSet::new)
                        .extend(set);
                } else {
                    self.start_reload(&set);
                }
            }
            Request::Stop(index, waiter) => {
                self.services[index].held = true;
                self.services[index].restart_pending = false;
                self.stop(index, false);
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
                            self.stop(index, false);
                        }
                    }
                }
            }
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

    fn restart(&mut self, index: usize) {
        for d in self.transitive_dependents(index) {
            if self.services[d].has_process() || !self.services[d].held {
                self.services[d].restart_pending = true;
            }
        }
        let s = &mut self.services[index];
        s.restart_pending = false;
        s.held = false;
        s.attempt = 0;
        self.stop(index, true);
    }

    fn start_reload(&mut self, set: &BTreeSet<usize>) {
        let names: Vec<&str> = set.iter().map(|&i| self.name(i)).collect();
        let message = format!("reloading {}", names.join(", "));
        self.emit(None, EventKind::Reloading);
        self.emit(None, EventKind::Notice { message });
        let mut involved = set.clone();
        for &i in set {
            involved.extend(self.transitive_dependents(i));
        }
        for &i in set {
            self.restart(i);
        }
        self.reload.active = Some(involved);
    }

    /// Stops a service in whatever state it is. With `then_start`, it goes
    /// back to `Waiting` once stopped.
    fn stop(&mut self, index: usize, then_start: bool) {
        let rest = if then_start {
            ServiceState::Waiting
        } else {
            ServiceState::Stopped
        };
        let s = &mut self.services[index];
        if s.has_process() {
            s.start_after_stop = if s.stop_requested {
                s.start_after_stop || then_start
            } else {
                then_start
            };
            if s.stop_requested {
                return;
            }
            s.stop_requested = true;
            if let Some(probe) = s.probe.take() {
                probe.abort();
            }
            let pid = s.pid.unwrap_or_default();
            let pgid = s.pgid;
            let generation = s.generation;
            let spec = self.specs[index].stop;
            let tx = self.internal_tx.clone();
            let captures = std::mem::take(&mut s.captures);
            tokio::spawn(async move {
                process::stop_group(pgid, spec.signal, spec.grace).await;
                drain(captures).await;
                let _ = tx.send(Internal::GroupEmpty { index, generation });
            });
            self.set_state(index, ServiceState::Stopping { pid });
            return;
        }
        match s.state {
            ServiceState::Preparing => {
                if let Some(task) = s.prepare.take() {
                    task.abort();
                }
                let pgid = s.prepare_pgid.swap(0, Ordering::SeqCst);
                if pgid > 0 {
                    // The prepare step is killed outright; it is not a
                    // service. The guard keeps it until the group is empty.
                    let guard = self.guard.clone();
                    self.dying_prepares.retain(|task| !task.is_finished());
                    self.dying_prepares.push(tokio::spawn(async move {
                        process::stop_group(pgid, libc::SIGKILL, Duration::ZERO).await;
                        guard.unregister(pgid);
                    }));
                }
                s.generation += 1;
                self.set_state(index, rest);
            }
            ServiceState::Restarting { .. } => {
                s.generation += 1;
                self.set_state(index, rest);
            }
            ServiceState::Waiting | ServiceState::Exited { .. } | ServiceState::Stopped => {
                if then_start || !matches!(s.state, ServiceState::Exited { .. }) {
                    self.set_state(index, rest);
                }
            }
            // Covered by has_process().
            ServiceState::Running { .. }
            | ServiceState::Ready { .. }
            | ServiceState::Stopping { .. } => {}
        }
        self.write_state();
    }

    // ----- starting ----------------------------------------------------

    fn begin_start(&mut self, index: usize) {
        let s = &mut self.services[index];
        s.generation += 1;
        let generation = s.generation;
        let steps = self.specs[index].prepare.clone();
        if steps.is_empty() {
            self.spawn(index);
            return;
        }
        let tx = self.internal_tx.clone();
        let logs = self.logs.clone();
        let guard = self.guard.clone();
        let pgid_slot = s.prepare_pgid.clone();
        let name = self.specs[index].name.clone();
        s.prepare = Some(tokio::spawn(async move {
            run_prepare(index, &name, &steps, &tx, &logs, &guard, &pgid_slot).await;
            let _ = tx.send(Internal::Prepared { index, generation });
        }));
        self.set_state(index, ServiceState::Preparing);
    }

    fn spawn(&mut self, index: usize) {
        let spec = &self.specs[index];
        let s = &mut self.services[index];
        s.exit = None;
        s.group_empty = false;
        s.ready = false;
        s.stop_requested = false;
        s.start_after_stop = false;
        s.spawned_at = Instant::now();
        let generation = s.generation;
        let mut child = match process::spawn_group(&spec.command) {
            Ok(child) => child,
            Err(e) => {
                let message = format!(
                    "could not start `{}` in {}: {e}",
                    spec.command.program,
                    spec.command.cwd.display()
                );
                self.emit(Some(index), EventKind::Notice { message });
                let s = &mut self.services[index];
                s.exit = Some(SPAWN_FAILED);
                s.group_empty = true;
                self.finish(index);
                return;
            }
        };
        let pid = child.id().unwrap_or_default();
        let pgid = pid as i32;
        self.guard.register(pgid);
        s.pid = Some(pid);
        s.pgid = pgid;
        s.start_time = process::process_start_time(pid);
        let name = spec.name.clone();
        s.captures.clear();
        if let Some(out) = child.stdout.take() {
            let task = logs::capture(out, self.logs.clone(), name.clone(), Stream::Stdout);
            s.captures.push(tokio::spawn(task));
        }
        if let Some(err) = child.stderr.take() {
            let task = logs::capture(err, self.logs.clone(), name, Stream::Stderr);
            s.captures.push(tokio::spawn(task));
        }
        let tx = self.internal_tx.clone();
        tokio::spawn(async move {
            let status = match child.wait().await {
                Ok(status) => exit_status(status),
                Err(_) => ExitStatus::Code(-1),
            };
            let _ = tx.send(Internal::Exited {
                index,
                generation,
                status,
            });
        });
        match spec.readiness.clone() {
            Some(readiness) => {
                let tx = self.internal_tx.clone();
                let guard = self.guard.clone();
                s.probe = Some(tokio::spawn(async move {
                    let probe = probe::probe_with_guard(&readiness.probe, Some(guard));
                    probe::poll_until_ready(probe.as_ref(), &readiness, |outcome| {
                        let message = match outcome {
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
                }));
            }
            None => s.ready = true,
        }
        self.set_state(index, ServiceState::Running { pid });
        self.write_state();
    }

    // ----- reports from helper tasks ------------------------------------

    fn current(&self, index: usize, generation: u64) -> bool {
        self.services[index].generation == generation
    }

    fn on_internal(&mut self, message: Internal) {
        match message {
            Internal::Emit { index, kind } => self.emit(Some(index), kind),
            Internal::Prepared { index, generation } => {
                if self.current(index, generation)
                    && self.services[index].state == ServiceState::Preparing
                {
                    self.services[index].prepare = None;
                    if self.shutting_down {
                        self.set_state(index, ServiceState::Stopped);
                    } else {
                        self.spawn(index);
                    }
                }
            }
            Internal::Exited {
                index,
                generation,
                status,
            } => {
                if !self.current(index, generation) || !self.services[index].has_process() {
                    return;
                }
                let s = &mut self.services[index];
                s.exit = Some(status);
                if let Some(probe) = s.probe.take() {
                    probe.abort();
                }
                if !s.stop_requested {
                    // The leader is gone; nothing of its group may linger
                    // (a port held by a grandchild would break the restart).
                    let pgid = s.pgid;
                    let tx = self.internal_tx.clone();
                    let captures = std::mem::take(&mut s.captures);
                    tokio::spawn(async move {
                        process::stop_group(pgid, libc::SIGKILL, Duration::ZERO).await;
                        drain(captures).await;
                        let _ = tx.send(Internal::GroupEmpty { index, generation });
                    });
                }
                self.try_finish(index);
            }
            Internal::GroupEmpty { index, generation } => {
                if self.current(index, generation) && self.services[index].has_process() {
                    self.services[index].group_empty = true;
                    self.try_finish(index);
                }
            }
            Internal::Ready { index, generation } => {
                let current = self.current(index, generation);
                let s = &mut self.services[index];
                if current
                    && !s.stop_requested
                    && s.exit.is_none()
                    && let Some(pid) = s.pid
                {
                    s.ready = true;
                    s.probe = None;
                    self.emit(Some(index), EventKind::Ready);
                    self.set_state(index, ServiceState::Ready { pid });
                    self.write_state();
                }
            }
            Internal::ProbeTimedOut {
                index,
                generation,
                after,
            } => {
                if self.current(index, generation) {
                    self.emit(Some(index), EventKind::ProbeTimedOut { after });
                }
            }
            Internal::BackoffElapsed { index, generation } => {
                if self.current(index, generation)
                    && matches!(self.services[index].state, ServiceState::Restarting { .. })
                {
                    self.set_state(index, ServiceState::Waiting);
                }
            }
        }
    }

    fn try_finish(&mut self, index: usize) {
        let s = &self.services[index];
        if s.exit.is_some() && s.group_empty {
            self.finish(index);
        }
    }

    /// The leader has been reaped and the group is empty.
    fn finish(&mut self, index: usize) {
        let s = &mut self.services[index];
        let status = s.exit.take().unwrap_or(SPAWN_FAILED);
        if s.pgid > 0 && s.pid.is_some() {
            self.guard.unregister(s.pgid);
        }
        s.pid = None;
        s.start_time = None;
        s.ready = false;
        s.probe = None;
        for waiter in s.stop_waiters.drain(..) {
            let _ = waiter.send(());
        }
        if s.stop_requested {
            s.stop_requested = false;
            let again = s.start_after_stop && !self.shutting_down;
            s.start_after_stop = false;
            let state = if again {
                ServiceState::Waiting
            } else {
                ServiceState::Stopped
            };
            self.set_state(index, state);
            self.write_state();
            return;
        }
        let ran_for = s.spawned_at.elapsed();
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
                    self.services[d].restart_pending = true;
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
            self.set_state(index, ServiceState::Restarting { after, attempt });
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
            self.services[index].held = true;
            self.set_state(index, ServiceState::Exited { status });
        }
        self.write_state();
    }

    // ----- reconciliation ----------------------------------------------

    /// Whether `index`'s dependencies meet their conditions now.
    fn dependencies_met(&self, index: usize) -> bool {
        self.dependencies[index].iter().all(|&(j, condition)| {
            let d = &self.services[j];
            let alive = d.has_process() && !d.stop_requested && d.exit.is_none();
            !d.restart_pending
                && alive
                && match condition {
                    Condition::Started => true,
                    Condition::Ready => d.ready,
                }
        })
    }

    /// Waiting on a dependency that has ended and will not come back.
    fn blocked(&self, index: usize, depth: usize) -> bool {
        if depth > self.specs.len() || self.services[index].state != ServiceState::Waiting {
            return false;
        }
        self.dependencies[index]
            .iter()
            .any(|&(j, _)| self.services[j].is_terminal() || self.blocked(j, depth + 1))
    }

    fn all_down(&self) -> bool {
        self.services
            .iter()
            .all(|s| !s.has_process() && s.prepare.is_none())
    }

    fn reconcile(&mut self) {
        if self.shutting_down {
            self.shutdown_step();
        } else {
            let mut changed = true;
            while changed {
                changed = false;
                for position in 0..self.order.len() {
                    let index = self.order[position];
                    let s = &self.services[index];
                    if s.state == ServiceState::Waiting && !s.held && self.dependencies_met(index) {
                        self.services[index].restart_pending = false;
                        self.begin_start(index);
                        changed = true;
                    } else if s.restart_pending
                        && s.has_process()
                        && !s.stop_requested
                        && self.dependencies_met(index)
                    {
                        self.services[index].restart_pending = false;
                        self.stop(index, true);
                        changed = true;
                    } else if s.restart_pending && !s.has_process() {
                        self.services[index].restart_pending = false;
                    }
                }
            }
            self.check_reload();
        }
        let reloading = self.reload.active.is_some() || self.reload.queued.is_some();
        self.reloading.send_if_modified(|current| {
            let changed = *current != reloading;
            *current = reloading;
            changed
        });
        self.check_settled();
    }

    fn shutdown_step(&mut self) {
        for index in 0..self.services.len() {
            let s = &self.services[index];
            if !s.has_process() || s.stop_requested {
                continue;
            }
            let dependents_down = self
                .transitive_dependents(index)
                .iter()
                .all(|&d| !self.services[d].has_process());
            if dependents_down {
                self.stop(index, false);
            }
        }
    }

    fn check_reload(&mut self) {
        let Some(active) = &self.reload.active else {
            return;
        };
        let done = active.iter().all(|&i| {
            let s = &self.services[i];
            !s.restart_pending
                && !s.stop_requested
                && match s.state {
                    ServiceState::Running { .. } | ServiceState::Ready { .. } => s.ready,
                    ServiceState::Exited { .. }
                    | ServiceState::Stopped
                    | ServiceState::Restarting { .. } => true,
                    ServiceState::Waiting => self.blocked(i, 0) || s.held,
                    ServiceState::Preparing | ServiceState::Stopping { .. } => false,
                }
        });
        if done {
            self.reload.active = None;
            if let Some(next) = self.reload.queued.take() {
                self.start_reload(&next);
            }
        }
    }

    fn check_settled(&mut self) {
        let mut failed = Vec::new();
        let mut settled = true;
        for (i, s) in self.services.iter().enumerate() {
            match &s.state {
                ServiceState::Exited { status } => {
                    if !status.success() {
                        failed.push(self.name(i).to_owned());
                    }
                }
                ServiceState::Stopped if !s.has_process() => {}
                ServiceState::Waiting if self.blocked(i, 0) || (s.held && !self.shutting_down) => {
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

/// Waits (briefly) for a run's output readers, so a service is reported
/// ended only after its last line is recorded. A reader kept open by a
/// process outside the group is left running.
async fn drain(captures: Vec<JoinHandle<()>>) {
    let all = async {
        for capture in captures {
            let _ = capture.await;
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), all).await;
}

fn exit_status(status: std::process::ExitStatus) -> ExitStatus {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitStatus::Code(code),
        (None, Some(signal)) => ExitStatus::Signal(signal),
        (None, None) => ExitStatus::Code(-1),
    }
}

/// A line for the combined buffer describing an event, or `None` for log
/// lines (which are already there).
fn describe(service: Option<&str>, kind: &EventKind) -> Option<String> {
    let prefix = service.map(|s| format!("{s}: ")).unwrap_or_default();
    let text = match kind {
        EventKind::Log { .. } | EventKind::Ready | EventKind::Reloading => return None,
        EventKind::State { state } => match state {
            ServiceState::Waiting => "waiting".to_owned(),
            ServiceState::Preparing => "preparing".to_owned(),
            ServiceState::Running { pid } => format!("running (pid {pid})"),
            ServiceState::Ready { pid } => format!("ready (pid {pid})"),
            ServiceState::Restarting { after, attempt } => {
                format!(
                    "restarting in {} s (attempt {attempt})",
                    after.as_secs_f32()
                )
            }
            ServiceState::Stopping { pid } => format!("stopping (pid {pid})"),
            ServiceState::Exited { status } => format!("exited ({status})"),
            ServiceState::Stopped => "stopped".to_owned(),
        },
        EventKind::ProbeTimedOut { after } => {
            format!("not ready after {} s; still waiting", after.as_secs_f32())
        }
        EventKind::Crashed {
            status,
            attempt,
            backoff,
        } => {
            if *attempt == 0 {
                format!("ended ({status})")
            } else {
                format!(
                    "crashed ({status}); restart {attempt} in {} s",
                    backoff.as_secs_f32()
                )
            }
        }
        EventKind::PrepareStarted { step } => format!("{step}…"),
        EventKind::PrepareFinished { step, success } => {
            format!("{step} {}", if *success { "done" } else { "failed" })
        }
        EventKind::Notice { message } => message.clone(),
    };
    Some(format!("{prefix}{text}"))
}

/// Whether a prepare step must run now.
fn prepare_needed(when: &PrepareWhen) -> bool {
    match when {
        PrepareWhen::Always => true,
        PrepareWhen::Stale { target, sources } => {
            let modified = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
            let Some(target_time) = modified(target) else {
                return true;
            };
            sources.iter().filter_map(modified).any(|t| t > target_time)
        }
    }
}

/// Runs a service's prepare steps in order; output goes to its log, with a
/// heartbeat line while a step is silent. Failures are reported and the
/// next step (and the service) still runs.
async fn run_prepare(
    index: usize,
    name: &str,
    steps: &[PrepareStep],
    tx: &mpsc::UnboundedSender<Internal>,
    logs: &Arc<LogStore>,
    guard: &Guard,
    pgid_slot: &AtomicI32,
) {
    for step in steps {
        if !prepare_needed(&step.when) {
            continue;
        }
        let _ = tx.send(Internal::Emit {
            index,
            kind: EventKind::PrepareStarted {
                step: step.name.clone(),
            },
        });
        let success = match process::spawn_group(&step.command) {
            Ok(mut child) => {
                let pgid = child.id().unwrap_or_default() as i32;
                guard.register(pgid);
                pgid_slot.store(pgid, Ordering::SeqCst);
                let mut readers = Vec::new();
                if let Some(out) = child.stdout.take() {
                    readers.push(tokio::spawn(logs::capture(
                        out,
                        logs.clone(),
                        name.to_owned(),
                        Stream::Stdout,
                    )));
                }
                if let Some(err) = child.stderr.take() {
                    readers.push(tokio::spawn(logs::capture(
                        err,
                        logs.clone(),
                        name.to_owned(),
                        Stream::Stderr,
                    )));
                }
                let started = Instant::now();
                let mut seen = logs.line_count(name);
                let heartbeat = step.heartbeat.max(Duration::from_millis(100));
                let status = loop {
                    tokio::select! {
                        status = child.wait() => break status,
                        () = tokio::time::sleep(heartbeat) => {
                            let now = logs.line_count(name);
                            if now == seen {
                                let text = format!(
                                    "{} still running ({} s)",
                                    step.name,
                                    started.elapsed().as_secs()
                                );
                                logs.push_batch(name, Stream::Supervisor, &mut vec![text]);
                            }
                            seen = logs.line_count(name);
                        }
                    }
                };
                // Leftovers of the step must not outlive it.
                process::stop_group(pgid, libc::SIGKILL, Duration::ZERO).await;
                pgid_slot.store(0, Ordering::SeqCst);
                guard.unregister(pgid);
                for reader in readers {
                    let _ = reader.await;
                }
                status.is_ok_and(|s| s.success())
            }
            Err(e) => {
                let text = format!("could not run {}: {e}", step.name);
                logs.push_batch(name, Stream::Supervisor, &mut vec![text]);
                false
            }
        };
        if success {
            mark_fresh(&step.when);
        }
        let _ = tx.send(Internal::Emit {
            index,
            kind: EventKind::PrepareFinished {
                step: step.name.clone(),
                success,
            },
        });
    }
}

/// After a successful stale-only step, stamps its target with the current
/// time. Installers may leave `node_modules/` older than the lockfile they
/// rewrite at the end, which would otherwise make every start reinstall.
fn mark_fresh(when: &PrepareWhen) {
    if let PrepareWhen::Stale { target, .. } = when
        && let Ok(file) = std::fs::File::open(target)
    {
        let _ = file.set_modified(std::time::SystemTime::now());
    }
}

//! The one way to start a supervisor: [`Supervisor::builder`] validates
//! the services, subscriptions and history readers are made on the
//! [`Builder`] before anything is published, and [`Builder::run`] starts
//! it.
//!
//! Everything that touches the machine — leftovers stopped, containment
//! (cgroups), the orphan guard's fork, becoming a child subreaper — is
//! done by `run` for the real spawner only: the engine's tests give their
//! fake [`Spawner`] and start no process at all.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use super::spawn::{self, Spawner};
use super::{Inner, Order, Reloads, Supervisor, SupervisorConfig, engine, graph};
use crate::containment::{Containment, ContainmentChoice};
use crate::error::{Error, Result};
use crate::guard::Guard;
use crate::history::{Follower, History};
use crate::logs::LogStore;
use crate::state::{self, ProcessRecord};

/// A supervisor not started yet: its services are validated and its
/// event bus exists, so whatever subscribes or reads the history here
/// sees every event from the very first.
///
/// ```no_run
/// # async fn demo() -> omnidev_core::Result<()> {
/// use omnidev_core::{ServiceSpec, Supervisor, SupervisorConfig};
/// let builder = Supervisor::builder(SupervisorConfig {
///     services: vec![ServiceSpec::new("web", "python3", ["-m", "http.server"], ".")],
///     ..Default::default()
/// })?;
/// let mut events = builder.subscribe();
/// let every_line = builder.history().lossless(std::env::temp_dir());
/// let supervisor = builder.run().await?;
/// # drop((events, every_line)); supervisor.shutdown().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "nothing runs until `run`"]
pub struct Builder {
    config: SupervisorConfig,
    order: Vec<usize>,
    events: Arc<History>,
    /// A test's spawner, in place of real processes and everything around
    /// them.
    spawner: Option<Arc<dyn Spawner>>,
}

impl Supervisor {
    /// The one way to start a supervisor: validates the dependency graph
    /// (duplicate names, unknown dependencies, cycles) and returns a
    /// [`Builder`] to subscribe to and read the history of before
    /// [`Builder::run`].
    ///
    /// # Errors
    ///
    /// The graph's first problem.
    pub fn builder(config: SupervisorConfig) -> Result<Builder> {
        let order = graph::start_order(&config.services)?;
        Ok(Builder { config, order, events: Arc::default(), spawner: None })
    }
}

impl Builder {
    /// A follower of every event from the first one (see
    /// [`Supervisor::subscribe`]).
    pub fn subscribe(&self) -> Follower {
        self.events.follow()
    }

    /// The history the supervisor will keep (see
    /// [`Supervisor::history`]): a [`crate::history::Lossless`] reader
    /// made here gets every line and event from the first one.
    pub fn history(&self) -> &Arc<History> {
        &self.events
    }

    /// Runs the services with `spawner` instead of real processes: no
    /// cgroup, no orphan guard, no subreaper.
    #[cfg_attr(not(test), expect(dead_code, reason = "the engine's tests' seam"))]
    pub(crate) fn spawner(mut self, spawner: Arc<dyn Spawner>) -> Self {
        self.spawner = Some(spawner);
        self
    }

    /// Stops leftovers recorded in `state_file` (pid **and** start time
    /// must match), opens the log files, sets up containment and the
    /// orphan guard, and starts the services in dependency order in a
    /// background task on the current tokio runtime.
    ///
    /// # Errors
    ///
    /// Another supervisor runs on the same state file; the state file, a
    /// log file or the guard cannot be set up.
    pub async fn run(self) -> Result<Supervisor> {
        let Builder { config, order, events, spawner } = self;
        if config.services.iter().any(|s| {
            matches!(
                s.readiness.as_ref().map(|r| &r.probe),
                Some(crate::spec::ProbeSpec::Http { .. })
            )
        }) {
            crate::probe::warm_http();
        }
        let names: Vec<String> = config.services.iter().map(|s| s.name.clone()).collect();
        let logs = Arc::new(LogStore::new(
            config.log.clone(),
            names.iter().map(String::as_str),
            events.clone(),
        ));

        let mut notices = stop_leftovers(&config).await?;

        logs.open_files().map_err(|(path, source)| Error::Write { path, source })?;
        // `logs --since-reload` before any reload: this run's lines.
        if let Some(notice) = logs.mark() {
            notices.push(notice);
        }
        let me = ProcessRecord::of(std::process::id());
        let (finished_tx, finished) = watch::channel(false);
        let (spawner, containment, guard) = if let Some(fake) = spawner {
            // Data only: process groups make no cgroup.
            let (containment, _) = Containment::new(&ContainmentChoice::ProcessGroups, &names, me);
            (fake, Arc::new(containment), None)
        } else {
            let (containment, guard) = contain(&config.containment, &names, me, &mut notices)?;
            // Orphans of services come to this process, to be found and
            // reaped.
            if crate::platform::become_subreaper() {
                tokio::spawn(reap_adopted_until(finished.clone()));
            }
            let spawner: Arc<dyn Spawner> = Arc::new(spawn::ProcessSpawner {
                logs: logs.clone(),
                guard: guard.clone(),
                containment: containment.clone(),
            });
            (spawner, containment, Some(guard))
        };

        let (requests, requests_rx) = mpsc::unbounded_channel();
        // Every service waits until the engine's first turn says more.
        let waiting = order.iter().map(|&i| {
            crate::ServiceStatus::new(&config.services[i].name, crate::ServiceState::Waiting)
        });
        let (status_tx, status) = watch::channel(waiting.collect());
        let (settled_tx, settled) = watch::channel(None);
        let (reloading_tx, reloading) = watch::channel(Reloads::default());
        let engine = engine::Engine::new(
            config.services,
            order,
            engine::Parts {
                logs: logs.clone(),
                events: events.clone(),
                guard: guard.clone(),
                state_file: config.state_file,
                backoff: config.backoff,
                status: status_tx,
                settled: settled_tx,
                reloading: reloading_tx,
                supervisor: me,
                spawner,
                containment: containment.clone(),
                debug: config.debug,
                port_mover: config.port_mover,
                pod_limits: config.pod_limits,
            },
        );
        tokio::spawn(engine.run(requests_rx, notices, finished_tx));
        if let Some(guard) = &guard {
            tokio::spawn(watch_guard(guard.clone(), requests.downgrade()));
        }

        Ok(Supervisor {
            inner: Arc::new(Inner {
                requests,
                events,
                logs,
                status,
                settled,
                finished,
                reloading,
                change_seen: watch::Sender::new(None),
                names: std::sync::Mutex::new(super::Names::of(names)),
                guard,
                containment,
                started: std::time::SystemTime::now(),
            }),
        })
    }
}

/// Stops what a previous supervisor recorded in `config`'s state file
/// and left running; says what it stopped.
async fn stop_leftovers(config: &SupervisorConfig) -> Result<Vec<String>> {
    let Some(path) = &config.state_file else {
        return Ok(Vec::new());
    };
    let Some(previous) = state::read_state(path)? else {
        return Ok(Vec::new());
    };
    if previous.supervisor_alive() && previous.supervisor.pid != std::process::id() {
        return Err(Error::AlreadyRunning { path: path.clone(), pid: previous.supervisor.pid });
    }
    let grace =
        config.services.iter().map(|s| s.stop.grace).max().unwrap_or(Duration::from_secs(5));
    Ok(crate::containment::stop_leftovers(&previous, grace).await)
}

/// Sets up the containment of services `names` (a notice says why when
/// cgroups were wanted but are unavailable) and forks the orphan guard.
fn contain(
    choice: &ContainmentChoice,
    names: &[String],
    me: ProcessRecord,
    notices: &mut Vec<String>,
) -> Result<(Arc<Containment>, Arc<Guard>)> {
    let (containment, why_not) = Containment::new(choice, names, me);
    if let Some(notice) = why_not {
        notices.push(notice);
    }
    match Guard::start(containment.pod_cgroup()) {
        Ok(guard) => Ok((Arc::new(containment), Arc::new(guard))),
        Err(source) => {
            containment.close();
            Err(Error::Guard { source })
        }
    }
}

/// Watches the orphan guard while the supervisor runs: the moment it ends
/// (killed on its own, say), it is reaped and replaced by a new one told
/// every live group and the pod cgroup, and the engine is told, to say so
/// and record the new pid (or, when no new guard could be started, to stop
/// the pod). Holds no strong handle, so the supervisor still ends when
/// every handle is dropped; ends after the guard is closed.
async fn watch_guard(guard: Arc<Guard>, requests: mpsc::WeakUnboundedSender<Order>) {
    loop {
        if let Err(e) = guard.ended().await {
            if let Some(requests) = requests.upgrade() {
                let message = format!(
                    "the orphan guard (pid {}) cannot be watched ({e}): were it to end, omnidev \
                     would not notice",
                    guard.pid()
                );
                let _ = requests.send(Order::GuardReplaced(Err(message)));
            }
            return;
        }
        let replacing = guard.clone();
        let Ok(Some(replaced)) = tokio::task::spawn_blocking(move || replacing.replace()).await
        else {
            return;
        };
        let lost = replaced.lost();
        let Some(requests) = requests.upgrade() else {
            return;
        };
        let _ = requests.send(Order::GuardReplaced(Ok(replaced)));
        if lost {
            return;
        }
    }
}

/// Reaps orphans adopted by this process (a child subreaper) whenever a
/// child changes state, until the supervisor has finished; a last pass
/// runs then, as the shutdown's own kills may have left zombies.
async fn reap_adopted_until(mut finished: watch::Receiver<bool>) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut children = signal(SignalKind::child()).ok();
    loop {
        crate::process::reap_adopted();
        let child = async {
            match children.as_mut() {
                Some(stream) => {
                    stream.recv().await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = child => {}
            // SIGCHLDs coalesce; a slow poll catches what they hide.
            () = tokio::time::sleep(Duration::from_secs(2)) => {}
            changed = finished.wait_for(|done| *done) => {
                let _ = changed;
                crate::process::reap_adopted();
                return;
            }
        }
    }
}

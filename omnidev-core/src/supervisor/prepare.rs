//! A service's prepare steps (e.g. `npm install` when the lockfile is
//! newer than `node_modules`), run in order before its process starts.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use super::spawn::{ProcessGroup, Spawner};
use crate::event::{EventKind, Stream};
use crate::logs::LogStore;
use crate::spec::{PrepareStep, PrepareWhen};

/// The group of the step running now, so that stopping the service can kill
/// it outright (a prepare step is not a service: no stop signal, no grace).
#[derive(Debug, Default)]
pub(super) struct StepSlot(Mutex<Option<Arc<dyn ProcessGroup>>>);

impl StepSlot {
    fn set(&self, group: Option<Arc<dyn ProcessGroup>>) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = group;
    }

    /// The running step's group, taken out of the slot.
    pub(super) fn take(&self) -> Option<Arc<dyn ProcessGroup>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}

/// What the steps run with.
pub(super) struct Prepare<'a> {
    pub(super) service: &'a str,
    pub(super) steps: &'a [PrepareStep],
    pub(super) spawner: &'a dyn Spawner,
    pub(super) logs: &'a LogStore,
    pub(super) slot: &'a StepSlot,
}

/// Runs the steps that are needed, in order; output goes to the service's
/// log, with a heartbeat line while a step is silent. A failed step is
/// reported (through `emit`) and the next step, and the service, still run.
pub(super) async fn run(prepare: Prepare<'_>, emit: impl Fn(EventKind)) {
    let Prepare {
        service,
        steps,
        spawner,
        logs,
        slot,
    } = prepare;
    for step in steps {
        if !needed(&step.when) {
            continue;
        }
        emit(EventKind::PrepareStarted {
            step: step.name.clone(),
        });
        let success = match spawner.spawn_step(&step.command, service) {
            Ok(spawned) => {
                slot.set(Some(spawned.group.clone()));
                let mut exit = spawned.exit;
                let started = Instant::now();
                let mut seen = logs.line_count(service);
                let heartbeat = step.heartbeat.max(Duration::from_millis(100));
                let status = loop {
                    tokio::select! {
                        status = &mut exit => break status,
                        () = tokio::time::sleep(heartbeat) => {
                            let now = logs.line_count(service);
                            if now == seen {
                                let text = format!(
                                    "{} still running ({} s)",
                                    step.name,
                                    started.elapsed().as_secs()
                                );
                                logs.push_batch(service, Stream::Supervisor, &mut vec![text]);
                            }
                            seen = logs.line_count(service);
                        }
                    }
                };
                // Leftovers of the step must not outlive it.
                spawned.group.stop(libc::SIGKILL, Duration::ZERO).await;
                spawned.group.release();
                slot.set(None);
                status.success()
            }
            Err(e) => {
                let text = format!("could not run {}: {e}", step.name);
                logs.push_batch(service, Stream::Supervisor, &mut vec![text]);
                false
            }
        };
        if success {
            mark_fresh(&step.when);
        }
        emit(EventKind::PrepareFinished {
            step: step.name.clone(),
            success,
        });
    }
}

/// Whether a prepare step must run now.
fn needed(when: &PrepareWhen) -> bool {
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

/// After a successful stale-only step, stamps its target with the current
/// time. Installers may leave `node_modules/` older than the lockfile they
/// rewrite at the end, which would otherwise make every start reinstall.
fn mark_fresh(when: &PrepareWhen) {
    if let PrepareWhen::Stale { target, .. } = when
        && let Ok(file) = std::fs::File::open(target)
    {
        let _ = file.set_modified(SystemTime::now());
    }
}

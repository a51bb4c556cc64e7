//! Starting a service: its prepare steps, its spawn, and the task
//! polling its readiness probe.

use std::sync::Arc;

use super::{Engine, Internal, RETRY_POLL, RunReport, SPAWN_FAILED};
use crate::event::EventKind;
use crate::probe;
use crate::supervisor::own_listener::OwnListener;
use crate::supervisor::prepare::{self, Prepare, StepSlot};
use crate::supervisor::service::{AbortOnDrop, LiveProcess, Phase, ProbeState, STABLE};
use crate::supervisor::spawn::{ProcessGroup, Spawned};

/// How often a wrapper that has not started its child yet is looked at
/// again (a first `uv run` may sync the environment for many seconds).
const MAIN_LOOK_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

impl Engine {
    pub(super) fn begin_start(&mut self, index: usize) {
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
        let logs = self.parts.logs.clone();
        let spawner = self.parts.spawner.clone();
        let step = Arc::new(StepSlot::new(self.services[index].background));
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
            let _ = tx.send(Internal::run(index, generation, RunReport::Prepared(outcome)));
        });
        self.enter(index, Phase::Preparing { task, step });
    }

    pub(super) fn spawn(&mut self, index: usize) {
        let spec = &self.specs[index];
        let generation = self.services[index].generation;
        // Watching starts before the process does, so its first line counts
        // (for a log probe) and its output brings attempts forward.
        let watch = spec.readiness.as_ref().map(|r| {
            Arc::new(match &r.probe {
                crate::spec::ProbeSpec::Log { pattern } => probe::LineWatch::new(pattern),
                _ => probe::LineWatch::output_only(),
            })
        });
        self.parts.logs.watch_lines(&spec.name, watch.clone());
        self.limit_run(index);
        self.services[index].over = None;
        let spec = &self.specs[index];
        // A link's watch started while its service is down is told why, so
        // it waits quietly until that changes.
        let command = match &self.services[index].link_down {
            Some(reason) if spec.link => {
                let mut command = spec.command.clone();
                let key = crate::spec::LINK_DOWN_ENV.to_owned();
                command.env.insert(key, reason.clone());
                std::borrow::Cow::Owned(command)
            }
            _ => std::borrow::Cow::Borrowed(&spec.command),
        };
        let Spawned { pid, start_time, exit, group } =
            match self.parts.spawner.spawn(&command, &spec.name) {
                Ok(spawned) => spawned,
                Err(e) => {
                    // Starting it again would fail the same way: no restart
                    // loop, it waits to be started (or restarted) by hand.
                    let reason = format!(
                        "could not start `{}` in {}: {e}; {}",
                        spec.command.program,
                        spec.command.cwd.display(),
                        super::exits::NOT_STARTABLE_HINT
                    );
                    self.services[index].last_exit = Some(SPAWN_FAILED);
                    self.fail(index, reason);
                    return;
                }
            };
        if self.services[index].background {
            group.set_background(true);
        }
        let tx = self.internal_tx.clone();
        tokio::spawn(async move {
            let status = exit.await;
            let _ = tx.send(Internal::run(index, generation, RunReport::Exited(status)));
        });
        let readiness = if let Some(readiness) = spec.readiness.clone() {
            self.probe_task(index, generation, readiness, watch, group.clone())
        } else {
            let tx = self.internal_tx.clone();
            tokio::spawn(async move {
                tokio::time::sleep(STABLE).await;
                let _ = tx.send(Internal::run(index, generation, RunReport::Stable));
            });
            ProbeState::Assumed
        };
        self.services[index].note = None;
        let process = LiveProcess {
            pid,
            start_time,
            spawned_at: std::time::Instant::now(),
            group,
            readiness,
            exit: None,
            group_empty: false,
            main_pid: None,
        };
        self.enter(index, Phase::Running(process));
        self.write_state();
        self.look_for_main(index, pid);
    }

    /// Looks for the main process of `pid`, the current run of `index`,
    /// until it is known (while a wrapper has not started its child yet,
    /// every [`MAIN_LOOK_EVERY`]; at once otherwise), and reports it.
    pub(super) fn look_for_main(&self, index: usize, pid: u32) {
        let generation = self.services[index].generation;
        let tx = self.internal_tx.clone();
        tokio::spawn(async move {
            let main = loop {
                if let Some(main) = crate::platform::main_process(pid) {
                    break main;
                }
                tokio::time::sleep(MAIN_LOOK_EVERY).await;
            };
            let _ = tx.send(Internal::run(index, generation, RunReport::MainProcess(main)));
        });
    }

    /// The task polling a run's readiness probe (behind the listener-owner
    /// check when the readiness names a port), reporting to the engine.
    pub(super) fn probe_task(
        &self,
        index: usize,
        generation: u64,
        readiness: crate::spec::Readiness,
        watch: Option<Arc<probe::LineWatch>>,
        group: Arc<dyn ProcessGroup>,
    ) -> ProbeState {
        let tx = self.internal_tx.clone();
        let guard = self.parts.guard.clone();
        let cgroup = self.parts.containment.pod_cgroup().map(std::path::Path::to_path_buf);
        let listener_group = group;
        let debug = self.parts.debug;
        let task = tokio::spawn(async move {
            let mut probe: Box<dyn probe::Probe> = match (&readiness.probe, &watch) {
                (crate::spec::ProbeSpec::Log { .. }, Some(watch)) => {
                    Box::new(probe::LogProbe::new(watch.clone()))
                }
                _ => probe::probe_with_guard(&readiness.probe, guard, cgroup),
            };
            if let Some(port) = readiness.listener {
                let tx = tx.clone();
                probe = Box::new(OwnListener::new(
                    probe,
                    port,
                    listener_group,
                    Box::new(move |holder| {
                        let report = RunReport::PortHeld { port, holder };
                        let _ = tx.send(Internal::run(index, generation, report));
                    }),
                ));
            }
            let output = watch.as_deref().map(probe::LineWatch::output);
            probe::poll_until_ready(probe.as_ref(), &readiness, output, |outcome| {
                let message = match outcome {
                    probe::ProbeOutcome::NotYet { attempt, error, next, after_output } => {
                        if !debug {
                            return;
                        }
                        let message = format!(
                            "readiness attempt {attempt}{}: {error}; next in {}",
                            if after_output { " (after output)" } else { "" },
                            crate::event::format_duration(next)
                        );
                        Internal::Emit { index, kind: EventKind::Debug { message } }
                    }
                    probe::ProbeOutcome::Ready => {
                        Internal::run(index, generation, RunReport::Ready)
                    }
                    probe::ProbeOutcome::TimedOut => {
                        let report = RunReport::ProbeTimedOut(readiness.timeout);
                        Internal::run(index, generation, report)
                    }
                };
                let _ = tx.send(message);
            })
            .await;
        });
        ProbeState::Probing { task, timed_out: false }
    }

    /// A prepare step failed: report it once, do not start the service, and
    /// wait for the step's inputs to change (or a restart) to try again.
    pub(super) fn prepare_failed(
        &mut self,
        index: usize,
        generation: u64,
        failure: &prepare::Failure,
    ) {
        for message in failure.report() {
            self.emit(Some(index), EventKind::Notice { message });
        }
        self.services[index].prepare_failed = true;
        let retry = (!failure.inputs.is_empty()).then(|| {
            let inputs = failure.inputs.clone();
            let tx = self.internal_tx.clone();
            AbortOnDrop(tokio::spawn(async move {
                prepare::wait_for_change(inputs, RETRY_POLL).await;
                let _ = tx.send(Internal::run(index, generation, RunReport::InputsChanged));
            }))
        });
        let reason = failure.reason(self.name(index));
        self.enter(index, Phase::Failed { reason, retry });
        self.write_state();
    }
}

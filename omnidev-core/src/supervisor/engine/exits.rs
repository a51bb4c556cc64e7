//! The end of a run: rest, wait, back off and restart, or stay exited.

use std::time::Duration;

use super::{Engine, Internal, RunReport, SPAWN_FAILED};
use crate::event::{EventKind, ExitStatus};
use crate::spec::RestartPolicy;
use crate::supervisor::service::{AfterStop, Intent, Over, Phase, PortRecovery};

impl Engine {
    /// Fails `index` for good: it waits, failed, to be started again by
    /// hand (`start`, `restart`), its dependents blocked.
    pub(super) fn fail(&mut self, index: usize, reason: String) {
        self.enter(index, Phase::Failed { reason, retry: None });
        self.write_state();
    }

    /// Ends the run once the leader has been reaped and the group is empty.
    pub(super) fn try_finish(&mut self, index: usize) {
        let s = &mut self.services[index];
        let done = s.process().is_some_and(|p| p.exit.is_some() && p.group_empty);
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
    pub(super) fn finish(
        &mut self,
        index: usize,
        status: ExitStatus,
        ran_for: Duration,
        then: Option<AfterStop>,
    ) {
        let shutting_down = self.shutting_down();
        let over = self.over_limit(index, status);
        let s = &mut self.services[index];
        s.last_exit = Some(status);
        for waiter in s.stop_waiters.drain(..) {
            let _ = waiter.send(());
        }
        if let Some(then) = then {
            let again = then == AfterStop::Start && !shutting_down;
            let phase = if again { Phase::Waiting } else { Phase::Stopped };
            self.enter(index, phase);
            self.write_state();
            return;
        }
        if !shutting_down
            && self.specs[index].link
            && status == ExitStatus::Code(crate::spec::LINK_DOWN)
        {
            self.link_went_down(index);
            self.write_state();
            return;
        }
        if let (false, Some(why)) = (shutting_down, not_startable(status)) {
            // The shell could not find or run what it was told to: starting
            // it again would fail the same way, so it is failed at once.
            self.fail(index, format!("{status}: {why}; {NOT_STARTABLE_HINT}"));
            return;
        }
        let restart = !shutting_down
            && match self.specs[index].restart {
                RestartPolicy::Always => true,
                RestartPolicy::OnFailure => !status.success(),
                RestartPolicy::Never => false,
            };
        if restart {
            s.attempt = self.parts.backoff.next_attempt(s.attempt, ran_for);
            s.restarts += 1;
            let attempt = s.attempt;
            let after = self.parts.backoff.delay(attempt);
            for d in self.transitive_dependents(index) {
                if self.services[d].has_process() {
                    self.services[d].mark_restart_pending();
                }
            }
            self.emit(Some(index), crash(status, over, attempt, after));
            let listener = self.specs[index].readiness.as_ref().and_then(|r| r.listener);
            let port = match listener {
                Some(port) => PortRecovery::Looking { port },
                None => PortRecovery::Settled,
            };
            let generation = self.back_off(index, after, attempt, port, over);
            if let Some(port) = listener {
                // Nothing of the service is left: any listener is another's.
                let tx = self.internal_tx.clone();
                tokio::task::spawn_blocking(move || {
                    let holder = match crate::listener::owner(port, &[]) {
                        crate::listener::Owner::Other(holder) => Some(holder.to_string()),
                        _ => None,
                    };
                    let report = RunReport::CheckedAfterExit { port, holder };
                    let _ = tx.send(Internal::run(index, generation, report));
                });
            }
        } else {
            // A clean exit that is not restarted is a finished one-shot, not
            // a crash; its `Exited` state says all there is to say.
            if !shutting_down && !status.success() {
                self.emit(Some(index), crash(status, over, 0, Duration::ZERO));
            }
            self.services[index].intent = Intent::Hold;
            self.enter(index, Phase::Exited { status });
        }
        self.write_state();
    }
}

impl Engine {
    /// The memory limit the run of `index` that ended with `status` was
    /// killed for: by the supervisor's own watch, or (a SIGKILL while its
    /// cgroup's count of such kills rose) by the kernel.
    fn over_limit(&mut self, index: usize, status: ExitStatus) -> Option<Over> {
        let slot = self.parts.containment.slot(self.name(index));
        let kills = slot.map_or(0, |slot| self.parts.containment.oom_kills(slot));
        let s = &mut self.services[index];
        let watched = s.over.take();
        let by_kernel = kills > s.oom_kills && status == ExitStatus::Signal(libc::SIGKILL);
        s.oom_kills = kills;
        let limit = self.specs[index].limits.memory_max;
        watched.or(match (by_kernel, limit) {
            (true, Some(limit)) => Some(Over { used: limit, limit, pod: false }),
            _ => None,
        })
    }
}

impl Engine {
    /// Puts `index` in [`Phase::Backoff`] and runs it again once `after`
    /// has passed, unless something else ran or stopped it meanwhile (a
    /// new generation): the one timer of a crash's restart and of a down
    /// link's next look. Returns the generation the timer is for.
    fn back_off(
        &mut self,
        index: usize,
        after: Duration,
        attempt: u32,
        port: PortRecovery,
        over: Option<Over>,
    ) -> u64 {
        let s = &mut self.services[index];
        s.generation += 1;
        let generation = s.generation;
        let tx = self.internal_tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            let _ = tx.send(Internal::run(index, generation, RunReport::BackoffElapsed));
        });
        self.enter(index, Phase::Backoff { after, attempt, port, over });
        generation
    }
}

/// The event of a run that ended on its own with `status`: over a memory
/// limit, or a crash.
fn crash(status: ExitStatus, over: Option<Over>, attempt: u32, backoff: Duration) -> EventKind {
    match over {
        Some(Over { used, limit, pod }) => {
            EventKind::OverLimit { used, limit, pod, attempt, backoff }
        }
        None => EventKind::Crashed { status, attempt, backoff },
    }
}

impl Engine {
    /// A link's watch said its service is not ready in the linked pod:
    /// told once a reason, the watch blocked on it and run again after
    /// [`crate::spec::LINK_RETRY`], its dependents that run stopped to
    /// wait, blocked on it, until it is back.
    fn link_went_down(&mut self, index: usize) {
        // Outside words (another pod's), shown and handed to the next run
        // in its environment: plain text only (no control, no NUL).
        let said = self.parts.logs.history().last_line(self.name(index));
        let reason = said.map_or_else(
            || "not ready in its pod".to_owned(),
            |line| crate::text::plain(line.text.strip_prefix("down: ").unwrap_or(&line.text)),
        );
        let told = self.services[index].link_down.replace(reason.clone());
        if told.as_ref() != Some(&reason) {
            self.emit(Some(index), EventKind::LinkDown { reason });
        }
        self.back_off(index, crate::spec::LINK_RETRY, 0, PortRecovery::Settled, None);
        for d in self.transitive_dependents(index) {
            let s = &self.services[d];
            let busy = matches!(
                s.phase,
                Phase::Running(_) | Phase::Preparing { .. } | Phase::Backoff { .. }
            );
            if busy && s.intent != Intent::Hold {
                self.services[d].intent = Intent::Keep;
                self.stop(d, AfterStop::Start);
            }
        }
    }
}

/// What a service that could not be started is told to do.
pub(super) const NOT_STARTABLE_HINT: &str = "install it, or add a `prepare` step that does, or \
     check the PATH the service gets (`omnidev run -- sh -c 'echo $PATH'`); \
     `omnidev start` tries again";

/// Why an exit status means the command could not be run at all, as
/// shells report it (126: found but not executable; 127: not found).
fn not_startable(status: ExitStatus) -> Option<&'static str> {
    match status {
        ExitStatus::Code(126) => {
            Some("a command it runs could not be executed (its log says which)")
        }
        ExitStatus::Code(127) => Some("a command it runs was not found (its log says which)"),
        _ => None,
    }
}

//! Reconciliation after every turn: start what can start, follow a
//! reload, shut down in order, and say when everything has settled.

use std::collections::BTreeSet;

use super::Engine;
use crate::spec::Condition;
use crate::supervisor::service::{AfterStop, Intent, Phase};
use crate::supervisor::{Reloads, Settled};

impl Engine {
    /// Whether `index`'s dependencies meet their conditions now. A
    /// dependency that exited 0 and is not restarted meets every condition.
    pub(super) fn dependencies_met(&self, index: usize) -> bool {
        self.dependencies[index].iter().all(|&(j, condition)| {
            let d = &self.services[j];
            d.intent != Intent::RestartPending
                && (d.completed()
                    || match condition {
                        Condition::Started => d.is_up(),
                        Condition::Ready => d.is_up() && d.is_ready(),
                        Condition::Completed => false,
                    })
        })
    }

    /// Waiting on a dependency that has ended and will not come back.
    pub(super) fn blocked(&self, index: usize, depth: usize) -> bool {
        self.block_reason(index, depth).is_some()
    }

    /// Why `index` waits for good: the first dependency that ended (other
    /// than by exiting 0) and will not come back, or is blocked itself.
    pub(super) fn block_reason(&self, index: usize, depth: usize) -> Option<String> {
        if depth > self.specs.len() || !matches!(self.services[index].phase, Phase::Waiting) {
            return None;
        }
        self.dependencies[index].iter().find_map(|&(j, _)| {
            let d = &self.services[j];
            let how = match &d.phase {
                Phase::Exited { status } if !status.success() => format!("exited with {status}"),
                Phase::Stopped => "was stopped".to_owned(),
                Phase::Failed { .. } => "failed to start".to_owned(),
                _ if d.link_down.is_some() => {
                    let why = d.link_down.as_deref().unwrap_or_default();
                    return Some(format!("waiting for {}: {why}", self.name(j)));
                }
                _ => {
                    return self.block_reason(j, depth + 1).map(|_| "is blocked itself".to_owned());
                }
            };
            Some(format!("waiting for {}, which {how}", self.name(j)))
        })
    }

    pub(super) fn all_down(&self) -> bool {
        self.services.iter().all(|s| {
            !matches!(s.phase, Phase::Running(_) | Phase::Stopping { .. } | Phase::Preparing { .. })
        })
    }

    pub(super) fn reconcile(&mut self) {
        if self.shutting_down() {
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
            starts: self.reload.began_starts.clone(),
        };
        // A dependency's end can block (or free) services whose own phase
        // did not change: publish what that makes of them.
        for index in 0..self.services.len() {
            if matches!(self.services[index].phase, Phase::Waiting) {
                self.publish(index);
            }
        }
        self.parts.reloading.send_if_modified(|current| {
            let changed = *current != reloads;
            *current = reloads;
            changed
        });
        self.check_settled();
    }

    /// Starts every waiting service whose dependencies are met, and
    /// restarts those whose dependency restarted, in dependency order.
    pub(super) fn start_what_can_start(&mut self) {
        let mut changed = true;
        while changed {
            changed = false;
            for position in 0..self.order.len() {
                let index = self.order[position];
                let s = &self.services[index];
                let pending = s.intent == Intent::RestartPending;
                if matches!(s.phase, Phase::Waiting)
                    && !matches!(s.intent, Intent::Hold | Intent::AwaitReload)
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

    pub(super) fn shutdown_step(&mut self) {
        for index in 0..self.services.len() {
            if !matches!(self.services[index].phase, Phase::Running(_)) {
                continue;
            }
            let dependents_down =
                self.transitive_dependents(index).iter().all(|&d| !self.services[d].has_process());
            if dependents_down {
                self.stop(index, AfterStop::Rest);
            }
        }
    }

    /// Whether service `i` is past the restart a reload gave it: ready (or
    /// running without a probe), or ended; not preparing, stopping or about
    /// to start, and not waiting to follow a dependency.
    pub(super) fn settled_for_reload(&self, i: usize) -> bool {
        let s = &self.services[i];
        s.intent != Intent::RestartPending
            && match s.phase {
                Phase::Running(_) => s.is_ready(),
                Phase::Exited { .. }
                | Phase::Stopped
                | Phase::Backoff { .. }
                | Phase::Failed { .. } => true,
                // Stopped ahead of its own reload: it waits for exactly
                // that one, so it is not what keeps a queue back.
                Phase::Waiting => {
                    self.blocked(i, 0) || matches!(s.intent, Intent::Hold | Intent::AwaitReload)
                }
                Phase::Preparing { .. } | Phase::Stopping { .. } => false,
            }
    }

    /// Starts what is queued for each service as soon as that service is
    /// settled (see [`Engine::settled_for_reload`]) or down after a crash:
    /// a change waits for the restart of the service it reloads, not for
    /// that restart's dependents (they restart after it again anyway), and
    /// a crashed service does not wait at all — the developer is waiting
    /// for exactly this restart. True when it started a reload.
    pub(super) fn check_reload(&mut self) -> bool {
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
                self.reload.queued.take().map(|(_, c)| c).unwrap_or_default()
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

    pub(super) fn check_settled(&mut self) {
        let mut failed = Vec::new();
        // Stopped on request, a pod waits to be started again or stopped.
        let mut settled = !self.stop_requested || self.shutting_down();
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
                    if self.blocked(i, 0)
                        || (s.intent == Intent::Hold && !self.shutting_down()) =>
                {
                    failed.push(self.name(i).to_owned());
                }
                _ => settled = false,
            }
        }
        let value = settled.then_some(Settled { success: failed.is_empty(), failed });
        self.parts.settled.send_if_modified(|current| {
            if *current == value {
                false
            } else {
                *current = value;
                true
            }
        });
    }
}

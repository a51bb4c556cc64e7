//! Requests from the supervisor's handle (restart, start, stop, reload,
//! apply, shutdown) and the guard's replacement, each turned into the
//! phase changes the rest of the engine carries out.

use std::collections::BTreeSet;

use tokio::sync::oneshot;

use super::{Engine, Life};
use crate::event::{Changes, EventKind};
use crate::supervisor::Order;
use crate::supervisor::service::{AfterStop, Intent, Phase};

impl Engine {
    pub(super) fn on_request(&mut self, request: Order) {
        match request {
            Order::Restart(index, dependents, ack) => {
                let starts = self.starts();
                if !self.shutting_down() && !self.removed[index] {
                    if dependents {
                        self.restart(index, true);
                    } else {
                        self.restart_alone(index, true);
                    }
                }
                answer(ack, starts);
            }
            Order::Apply(specs, answer) => {
                if !self.shutting_down() {
                    let starts = self.starts();
                    let applied = self.apply(specs);
                    let _ = answer.send((applied, self.names(), starts));
                }
            }
            Order::Start(index, ack) => {
                let mut starts = self.starts();
                if matches!(self.services[index].phase, Phase::Running(_)) {
                    // Left as it is: its current run is the one waited for.
                    starts[index] = starts[index].saturating_sub(1);
                }
                if !self.shutting_down() && !self.removed[index] {
                    let s = &mut self.services[index];
                    if matches!(s.intent, Intent::Hold | Intent::AwaitReload) {
                        s.intent = Intent::Keep;
                    }
                    if s.is_terminal() {
                        s.attempt = 0;
                        self.enter(index, Phase::Waiting);
                    }
                }
                answer(ack, starts);
            }
            Order::Reload(indexes, changes, ack) => {
                let starts = self.starts();
                if self.shutting_down() {
                    answer(ack, starts);
                    return;
                }
                let set: BTreeSet<usize> =
                    indexes.into_iter().filter(|&i| !self.removed[i]).collect();
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
                answer(ack, starts);
            }
            Order::ReloadComing(indexes) => {
                self.stop_ahead_of_reload(&indexes.into_iter().collect());
            }
            Order::Stop(index, waiter) => {
                self.stop_requested = true;
                self.services[index].intent = Intent::Hold;
                self.stop(index, AfterStop::Rest);
                if self.services[index].has_process() {
                    self.services[index].stop_waiters.push(waiter);
                } else {
                    let _ = waiter.send(());
                }
            }
            Order::Shutdown(waiter) => {
                if let Life::ShuttingDown { waiters } = &mut self.life {
                    waiters.extend(waiter);
                } else {
                    self.life = Life::ShuttingDown { waiters: waiter.into_iter().collect() };
                    self.emit(None, EventKind::Notice { message: "shutting down".to_owned() });
                    for index in 0..self.services.len() {
                        if !self.services[index].has_process() {
                            self.stop(index, AfterStop::Rest);
                        }
                    }
                }
            }
            Order::GuardReplaced(replaced) => self.guard_replaced(replaced),
        }
    }

    /// Says that the orphan guard ended and what replaced it, and records
    /// the new guard's pid; stops the pod when no new guard runs.
    fn guard_replaced(&mut self, replaced: Result<crate::guard::Replaced, String>) {
        let lost = replaced.as_ref().is_ok_and(crate::guard::Replaced::lost);
        let message = match replaced {
            Ok(replaced) => replaced.to_string(),
            Err(message) => message,
        };
        self.emit(None, EventKind::Notice { message });
        self.write_state();
        if lost {
            self.on_request(Order::Shutdown(None));
        }
    }

    /// How many times each service has started, by index.
    pub(super) fn starts(&self) -> Vec<u32> {
        self.services.iter().map(|s| s.starts).collect()
    }
}

/// Tells a request's sender each service's start count as the request
/// found it. Sent once the request has acted, so that what the sender
/// reads of the status next is the request's doing (a stopped service
/// it starts is no longer shown stopped).
fn answer(ack: Option<oneshot::Sender<Vec<u32>>>, starts: Vec<u32>) {
    if let Some(ack) = ack {
        let _ = ack.send(starts);
    }
}

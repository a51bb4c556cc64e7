//! Waiting for the services' states: ready, ended, healthy after a
//! reload, restarted until ready. The one rule every front-end (the
//! control socket, `up --detach`, an agent) asks, judged on the status
//! watch as it changes, never by polling.

use std::collections::HashMap;
use std::time::SystemTime;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::{Applied, Order, Supervisor};
use crate::error::{Error, Result};
use crate::event::{Changes, ServiceState, ServiceStatus};
use crate::spec::ServiceSpec;

/// What a wait waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// Each service is ready ([`ServiceStatus::ready`]). Fails as soon as
    /// one crashed, exited non-zero, waits out a backoff, failed to start,
    /// is stopped, or its readiness probe timed out.
    Ready,
    /// Each service has ended (exited or stopped). Fails as soon as one
    /// crashed or failed.
    Exited,
}

/// How a wait ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Waited {
    /// The condition holds for every service waited on.
    Met,
    /// These services failed (see [`Until`]); the wait ended at once.
    Failed(Vec<String>),
    /// The deadline passed; these services were still pending.
    TimedOut(Vec<String>),
    /// [`Supervisor::wait_healthy_after_reload`]: no reload began by the
    /// deadline.
    NoReload,
    /// The supervisor finished first; these services were still pending.
    ShutDown(Vec<String>),
}

/// The judgement of one status snapshot.
enum WaitVerdict {
    Met,
    Failed(Vec<String>),
    Pending(Vec<String>),
}

/// The rule of one wait.
struct Judge {
    /// The services waited on.
    names: Vec<String>,
    until: Until,
    /// Only runs started after these counts count (a restart's wait), by
    /// service name: the status lists services in start order, not in the
    /// engine's.
    after: Option<HashMap<String, u32>>,
}

impl Judge {
    fn verdict(&self, snapshot: &[ServiceStatus], total: usize) -> WaitVerdict {
        if snapshot.len() < total {
            // Not every service is in the status: the ones it lists must
            // not meet a wait on their own.
            return WaitVerdict::Pending(self.names.clone());
        }
        let mut failed = Vec::new();
        let mut pending = Vec::new();
        for s in snapshot {
            if !self.names.contains(&s.name) {
                continue;
            }
            if let Some(after) = &self.after
                && after.get(&s.name).is_some_and(|&before| s.starts <= before)
            {
                // Not started since the request. Stopped (a stop overtook
                // it) or blocked (a dependency will not come back), it
                // never will be.
                if matches!(s.state, ServiceState::Stopped | ServiceState::Blocked { .. }) {
                    failed.push(s.name.clone());
                } else {
                    pending.push(s.name.clone());
                }
                continue;
            }
            let (failure, done) = match self.until {
                Until::Ready => {
                    (failure(s) || s.state == ServiceState::Stopped || s.probe_timed_out, s.ready)
                }
                Until::Exited => (failure(s), ended(s)),
            };
            if failure && !done {
                failed.push(s.name.clone());
            } else if !done {
                pending.push(s.name.clone());
            }
        }
        if !failed.is_empty() {
            WaitVerdict::Failed(failed)
        } else if pending.is_empty() {
            WaitVerdict::Met
        } else {
            WaitVerdict::Pending(pending)
        }
    }
}

/// Down for a reason that ends a wait: crashed (exited non-zero, or
/// waiting out a backoff) or failed to start.
fn failure(status: &ServiceStatus) -> bool {
    match &status.state {
        ServiceState::Exited { status } => !status.success(),
        ServiceState::Restarting { .. }
        | ServiceState::Failed { .. }
        | ServiceState::Blocked { .. } => true,
        _ => false,
    }
}

/// The services of `names` (every one when empty) that failed in a run
/// started after their start counts were `starts` (by name).
fn failed_since(
    snapshot: &[ServiceStatus],
    names: &[String],
    starts: &HashMap<String, u32>,
) -> Vec<String> {
    snapshot
        .iter()
        .filter(|s| names.is_empty() || names.contains(&s.name))
        .filter(|s| starts.get(&s.name).is_some_and(|&before| s.starts > before) && failure(s))
        .map(|s| s.name.clone())
        .collect()
}

/// Resolves once `seen` records a change later than `bar` (never, once
/// nothing can record one).
async fn changed_after(
    seen: &mut tokio::sync::watch::Receiver<Option<SystemTime>>,
    bar: SystemTime,
) {
    while seen.changed().await.is_ok() {
        if seen.borrow().is_some_and(|at| at > bar) {
            return;
        }
    }
    std::future::pending::<()>().await;
}

fn ended(status: &ServiceStatus) -> bool {
    matches!(status.state, ServiceState::Exited { .. } | ServiceState::Stopped)
}

impl Supervisor {
    /// Waits until `services` (every service when empty) meet `until`, one
    /// of them fails, or `deadline` passes. Judged each time the status
    /// changes.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownService`] for a name the supervisor does not run.
    pub async fn wait(
        &self,
        services: &[String],
        until: Until,
        deadline: Instant,
    ) -> Result<Waited> {
        self.check_names(services)?;
        Ok(self.judge_until(services, until, None, deadline).await)
    }

    /// [`Supervisor::wait`] for [`Until::Ready`].
    ///
    /// # Errors
    ///
    /// [`Error::UnknownService`] for a name the supervisor does not run.
    pub async fn wait_ready(&self, services: &[String], deadline: Instant) -> Result<Waited> {
        self.wait(services, Until::Ready, deadline).await
    }

    /// Waits for a reload that began at `after` or later, and after the
    /// latest source change seen ([`Supervisor::saw_change`]), to be over
    /// (no reload running or queued: every service it restarted has
    /// started again), then for `services` to be ready as with
    /// [`Supervisor::wait_ready`]. A change seen while waiting moves the
    /// bar: its reload is the one judged. [`Waited::NoReload`] when none
    /// began by the deadline. Fails as soon as one of `services` fails in
    /// a run started after the reload began (a crash loop keeps the reload
    /// from being over: the wait ends at its first crash).
    ///
    /// # Errors
    ///
    /// [`Error::UnknownService`] for a name the supervisor does not run.
    pub async fn wait_healthy_after_reload(
        &self,
        services: &[String],
        after: SystemTime,
        deadline: Instant,
    ) -> Result<Waited> {
        self.check_names(services)?;
        let mut reloads = self.inner.reloading.clone();
        let mut status = self.inner.status.clone();
        let mut seen = self.inner.change_seen.subscribe();
        loop {
            // A change seen but not reloaded yet (the watcher's debounce
            // runs) is waited for: only a reload begun after it covers it.
            let bar = seen.borrow_and_update().map_or(after, |at| at.max(after));
            let reload = reloads.borrow_and_update().clone();
            let began = reload.began.is_some_and(|at| at >= bar);
            if began {
                if !reload.active {
                    tokio::select! {
                        waited = self.wait_ready(services, deadline) => return waited,
                        () = changed_after(&mut seen, bar) => continue,
                    }
                }
                let starts = self.by_name(&reload.starts);
                let failed = failed_since(&status.borrow_and_update(), services, &starts);
                if !failed.is_empty() {
                    return Ok(Waited::Failed(failed));
                }
            }
            if Instant::now() >= deadline {
                return Ok(if began {
                    Waited::TimedOut(self.waited_on(services))
                } else {
                    Waited::NoReload
                });
            }
            let gone = tokio::select! {
                changed = reloads.changed() => changed.is_err(),
                changed = status.changed() => changed.is_err(),
                () = changed_after(&mut seen, bar) => false,
                () = tokio::time::sleep_until(deadline) => false,
            };
            if gone {
                return Ok(Waited::ShutDown(self.waited_on(services)));
            }
        }
    }

    /// Restarts `services` and waits until each runs again (a run started
    /// after this request) and is ready, or one failed, as with
    /// [`Supervisor::wait_ready`]. One service restarts as
    /// [`Supervisor::restart`] does (its crash backoff reset), several as
    /// one [`Supervisor::reload`]; dependents restart after them on their
    /// own, unwaited, unless `dependents` is false (`restart --no-deps`,
    /// of one service).
    ///
    /// # Errors
    ///
    /// [`Error::UnknownService`] for a name the supervisor does not run;
    /// [`Error::ShutDown`] when it has finished.
    pub async fn restart_until_ready(
        &self,
        services: &[String],
        dependents: bool,
        deadline: Instant,
    ) -> Result<Waited> {
        let indexes = services.iter().map(|n| self.index(n)).collect::<Result<Vec<_>>>()?;
        let (ack, starts) = oneshot::channel();
        match indexes.as_slice() {
            [one] => self.send(Order::Restart(*one, dependents, Some(ack)))?,
            many => self.send(Order::Reload(many.to_vec(), Changes::default(), Some(ack)))?,
        }
        let after = starts.await.map_err(|_| Error::ShutDown)?;
        Ok(self.judge_until(services, Until::Ready, Some(after), deadline).await)
    }

    /// Starts `services` (those stopped or ended; one that runs is left as
    /// it is) and waits until each is ready in a run started after this
    /// request (the running one's current run counts), or one failed, as
    /// with [`Supervisor::wait_ready`]: a service still stopped when the
    /// wait begins is waited for, not taken for ended.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownService`] for a name the supervisor does not run;
    /// [`Error::ShutDown`] when it has finished.
    pub async fn start_until_ready(
        &self,
        services: &[String],
        deadline: Instant,
    ) -> Result<Waited> {
        let mut after: Option<Vec<u32>> = None;
        for name in services {
            let index = self.index(name)?;
            let (ack, starts) = oneshot::channel();
            self.send(Order::Start(index, Some(ack)))?;
            let starts = starts.await.map_err(|_| Error::ShutDown)?;
            // Each service as its own request found it.
            after = Some(match after {
                None => starts,
                Some(mut after) => {
                    after[index] = starts[index];
                    after
                }
            });
        }
        Ok(self.judge_until(services, Until::Ready, after, deadline).await)
    }

    /// [`Supervisor::apply`], then waits for every service it restarted
    /// or started to run again (a run begun after it) and be ready, as
    /// [`Supervisor::restart_until_ready`] does, or for one to fail.
    ///
    /// # Errors
    ///
    /// As [`Supervisor::apply`].
    pub async fn apply_until_ready(
        &self,
        services: Vec<ServiceSpec>,
        deadline: Instant,
    ) -> Result<(Applied, Waited)> {
        let (applied, starts) = self.apply_counting(services).await?;
        let waited_on = applied.coming_up();
        if waited_on.is_empty() {
            return Ok((applied, Waited::Met));
        }
        let waited = self.judge_until(&waited_on, Until::Ready, Some(starts), deadline).await;
        Ok((applied, waited))
    }

    /// Start counts in the engine's order (a request's answer: one per
    /// slot, removed services' included) keyed by service name.
    fn by_name(&self, starts: &[u32]) -> HashMap<String, u32> {
        self.names().all.iter().cloned().zip(starts.iter().copied()).collect()
    }

    async fn judge_until(
        &self,
        services: &[String],
        until: Until,
        after: Option<Vec<u32>>,
        deadline: Instant,
    ) -> Waited {
        let judge = Judge {
            names: self.waited_on(services),
            until,
            after: after.map(|starts| self.by_name(&starts)),
        };
        let total = self.slots();
        let mut status = self.inner.status.clone();
        let mut gone = false;
        loop {
            match judge.verdict(&status.borrow_and_update(), total) {
                WaitVerdict::Met => return Waited::Met,
                WaitVerdict::Failed(failed) => return Waited::Failed(failed),
                // The supervisor has stopped: its last status is final.
                WaitVerdict::Pending(pending) if gone => return Waited::ShutDown(pending),
                WaitVerdict::Pending(pending) if Instant::now() >= deadline => {
                    return Waited::TimedOut(pending);
                }
                WaitVerdict::Pending(_) => {}
            }
            tokio::select! {
                changed = status.changed() => gone = changed.is_err(),
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    fn check_names(&self, services: &[String]) -> Result<()> {
        services.iter().try_for_each(|n| self.index(n).map(|_| ()))
    }

    /// The services a wait is on: `services`, or every one when empty.
    fn waited_on(&self, services: &[String]) -> Vec<String> {
        if services.is_empty() { self.service_names() } else { services.to_vec() }
    }
}

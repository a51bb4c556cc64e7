//! Bursts: the events of a rule coalesced into one change once they pause
//! for the debounce (or after the longest burst), and each change handed
//! to the supervisor as a reload.

use std::collections::BTreeSet;
use std::sync::mpsc;
use std::time::Duration;

use omnidev_core::{Changes, Supervisor};

use super::classify::{Burst, Tracker};
use super::{Change, Message};

/// The longest a burst lasts: 20 debounce periods, at least 2 s.
pub fn max_burst(debounce: Duration) -> Duration {
    (debounce * 20).max(Duration::from_secs(2))
}

/// The quiet that ends a settled burst (see [`Burst::settled`]): a fifth
/// of the debounce. The debounce waits for writes that may still follow;
/// once the kernel has said every file is whole, the quiet only has to
/// gather the rest of a burst already under way (a formatter, a checkout).
pub fn settle(debounce: Duration) -> Duration {
    debounce / 5
}

/// Turns messages into one [`Change`] per burst, until the notify watcher
/// (holding the sender) is dropped.
pub(super) fn run_bursts(
    rx: &mpsc::Receiver<Message>,
    mut tracker: Tracker,
    debounce: Duration,
    mut renew_watches: impl FnMut(bool),
    mut on_change: impl FnMut(Change),
) {
    while let Ok(first) = rx.recv() {
        let mut burst = Burst::default();
        if !tracker.take(first, &mut burst) {
            // Nothing that counts: no burst begins.
            continue;
        }
        // The debounce (or the settle, once every change is whole) runs
        // from the last message that counted, up to the burst's cap.
        let quiet = |burst: &Burst| if burst.settled() { settle(debounce) } else { debounce };
        let began = std::time::Instant::now();
        let cap = began + max_burst(debounce);
        let mut until = (began + quiet(&burst)).min(cap);
        loop {
            let left = until.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(more) => {
                    if tracker.take(more, &mut burst) {
                        until = (std::time::Instant::now() + quiet(&burst)).min(cap);
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => break,
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
        }
        tracker.scan_appeared(&mut burst);
        if burst.gave_up.is_some() {
            // Once: the watches are removed and this thread ends.
            renew_watches(true);
            // A loss seen before the limit still asks for its reload (and
            // may have stopped the service ahead of it).
            on_change(Change {
                paths: burst.changed.into_iter().collect(),
                lost: burst.lost,
                gave_up: burst.gave_up,
            });
            return;
        }
        if burst.lost.is_some() {
            renew_watches(false);
            tracker.reread();
        }
        if !burst.changed.is_empty() || burst.lost.is_some() {
            on_change(Change {
                paths: burst.changed.into_iter().collect(),
                lost: burst.lost,
                gave_up: None,
            });
        }
    }
}

/// Reloads the services whose watchers fired, rules firing together in
/// one reload; says once why events were lost or a watcher stopped.
pub(super) fn spawn_reloads(
    supervisor: Supervisor,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Fired>,
) {
    tokio::spawn(async move {
        // Each reason for lost events is told once; the reload happens
        // every time.
        let mut told: BTreeSet<String> = BTreeSet::new();
        while let Some(first) = rx.recv().await {
            let mut services: Vec<String> = Vec::new();
            let mut changes = Changes::default();
            let mut next = Some(first);
            // Rules firing together are one reload.
            while let Some(Fired { service, changes: more, lost, gave_up }) =
                next.take().or_else(|| rx.try_recv().ok())
            {
                if let Some(why) = gave_up {
                    supervisor.notice(format!(
                        "warning: {service} is no longer reloaded on changes: {why}; raise \
                         fs.inotify.max_user_watches or narrow its `watch` globs"
                    ));
                    if more.total == 0 && lost.is_none() {
                        continue;
                    }
                }
                changes.merge(more);
                if let Some(why) = lost.filter(|why| told.insert(why.clone())) {
                    supervisor.notice(format!(
                        "file events for {service} may have been lost ({why}); reloading it \
                         and watching again"
                    ));
                }
                if !services.contains(&service) {
                    services.push(service);
                }
            }
            let names: Vec<&str> = services.iter().map(String::as_str).collect();
            // Fails only once the supervisor has shut down.
            if supervisor.reload_changed(&names, changes).await.is_err() {
                return;
            }
        }
    });
}

/// What a watcher of a rule reports.
pub(super) struct Fired {
    pub(super) service: String,
    pub(super) changes: Changes,
    /// Why events were lost.
    pub(super) lost: Option<String>,
    /// Why it stopped watching.
    pub(super) gave_up: Option<String>,
}

//! The TUI's feed for `omnidev up`: the supervisor of this process.

use std::sync::Arc;

use crate::control::protocol::UrlReport;
use omnidev_core::sync::Locked;
use omnidev_core::{Follower, ServiceStatus, Supervisor};

use super::{Feed, Update};
use crate::live_profile::{ApplyError, LiveProfile};
use crate::tui::app::Action;

/// The pod of this process: `omnidev up`'s supervisor, whose history it
/// follows from the first event it kept, and whose status it hands on at
/// each change, as the control socket does for `omnidev attach`. `q`
/// stops it.
pub struct PodSource {
    supervisor: Supervisor,
    /// Where it is in the supervisor's history.
    follower: Follower,
    /// The pod's current ports and URLs (a port lost before its service
    /// bound it moves): the header follows them.
    addresses: crate::session::SharedAddresses,
    /// The profile the pod runs, which `P` applies anew (none in tests
    /// of a bare supervisor).
    live: Option<Arc<LiveProfile>>,
    /// Every service's status as core publishes it (the URLs it shows).
    statuses: tokio::sync::watch::Receiver<Vec<ServiceStatus>>,
    /// When the header's usage is measured next.
    usage_every: tokio::time::Interval,
}

/// How long `P` waits for the services it restarted to be ready (the UI
/// goes on meanwhile; only the task applying it waits).
const PROFILE_APPLY_WAIT: std::time::Duration = std::time::Duration::from_secs(300);

impl PodSource {
    /// The source of `supervisor`, from the first line and event it kept.
    pub fn new(
        supervisor: Supervisor,
        addresses: crate::session::SharedAddresses,
        live: Option<Arc<LiveProfile>>,
    ) -> Self {
        let history = supervisor.history();
        Self {
            follower: history.follow_from(history.cursor(false, true)),
            statuses: supervisor.watch_status(),
            supervisor,
            addresses,
            live,
            usage_every: tokio::time::interval(crate::output::LIVE_USAGE_EVERY),
        }
    }

    /// What the services hold together now.
    /// Measured on a blocking thread, off the UI's loop (it reads
    /// `/proc` or cgroup files for every process of the pod). A `next`
    /// dropped meanwhile loses only this measurement: the next comes at
    /// the next tick.
    async fn usage(&self) -> Update {
        let supervisor = self.supervisor.clone();
        let statuses = self.statuses.borrow().clone();
        let measured = tokio::task::spawn_blocking(move || {
            let mut total = omnidev_core::platform::Usage::default();
            for status in &statuses {
                total.add(supervisor.usage(status).unwrap_or_default());
            }
            total
        });
        Update::Usage(measured.await.unwrap_or_default())
    }

    /// Core's status as it is now, with the URLs it shows.
    fn status(&mut self) -> Update {
        let statuses = self.statuses.borrow_and_update().clone();
        let urls = UrlReport::shown(&self.addresses.locked().urls, &statuses);
        Update::Status { statuses, urls }
    }
}

impl Feed for PodSource {
    async fn next(&mut self) -> Update {
        tokio::select! {
            Ok(()) = self.statuses.changed() => self.status(),
            event = self.follower.recv() => event.map_or(Update::Closed, Update::Event),
            _ = self.usage_every.tick() => self.usage().await,
        }
    }

    fn try_next(&mut self) -> Option<Update> {
        if self.statuses.has_changed().unwrap_or(false) {
            return Some(self.status());
        }
        self.follower.try_recv().map(Update::Event)
    }

    fn act(&mut self, action: Action) {
        let supervisor = self.supervisor.clone();
        let live = self.live.clone();
        tokio::spawn(async move {
            // Errors here only mean the supervisor is shutting down.
            let _ = match action {
                Action::Restart(name) => supervisor.restart(&name).await,
                Action::Reload(names) => {
                    // Those of the profile applied last (`P` may have
                    // changed them).
                    let names = live.as_ref().map_or(names, |live| live.watched());
                    let names: Vec<&str> = names.iter().map(String::as_str).collect();
                    supervisor.reload(&names).await
                }
                Action::Stop(name) => supervisor.stop_service(&name).await,
                Action::Start(name) => supervisor.start_service(&name).await,
                Action::ReloadProfile => {
                    // What was done is the `profile-applied` event; a file
                    // that cannot be applied is said here.
                    let deadline = tokio::time::Instant::now() + PROFILE_APPLY_WAIT;
                    let applied = match &live {
                        Some(live) => live.apply(&supervisor, deadline).await.err(),
                        None => None,
                    };
                    if let Some(ApplyError::Invalid(error)) = applied {
                        supervisor.notice(format!(
                            "P: {error}; the pod runs on with the profile it loaded"
                        ));
                    }
                    Ok(())
                }
                Action::Quit | Action::Suspend => Ok(()),
            };
        });
    }
}

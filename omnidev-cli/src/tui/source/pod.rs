//! The TUI's feed for `omnidev up`: the supervisor of this process.

use std::sync::Arc;

use crate::control::protocol::UrlReport;
use omnidev_core::sync::Locked;
use omnidev_core::{Event, EventKind, Follower, ServiceStatus, Supervisor};

use super::{Feed, Update};
use crate::live_profile::{ApplyError, LiveProfile};
use crate::tui::app::Action;

/// The pod of this process: `omnidev up`'s supervisor, whose history it
/// follows from the first event it kept. `q` stops it.
pub struct PodSource {
    supervisor: Supervisor,
    /// Where it is in the supervisor's history.
    follower: Follower,
    /// The status to take after a gap, not yet handed out.
    after_gap: Option<Update>,
    /// The pod's current ports and URLs (a port lost before its service
    /// bound it moves): the header follows them.
    addresses: crate::session::SharedAddresses,
    /// The profile the pod runs, which `P` applies anew (none in tests
    /// of a bare supervisor).
    live: Option<Arc<LiveProfile>>,
    /// Every service's status as core publishes it (the URLs it shows).
    statuses: tokio::sync::watch::Receiver<Vec<ServiceStatus>>,
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
            after_gap: None,
            statuses: supervisor.watch_status(),
            supervisor,
            addresses,
            live,
        }
    }

    /// The update of `event`, the next one read. A gap (the UI fell
    /// behind what is kept) is a line where it is, and the header is then
    /// taken anew from core's status.
    fn update(&mut self, event: Event) -> Update {
        if matches!(event.kind, EventKind::Lost { .. }) {
            let statuses = self.supervisor.snapshot();
            let urls = self.urls().unwrap_or_default();
            self.after_gap = Some(Update::Status { statuses, urls });
        }
        Update::Event(event)
    }
}

impl Feed for PodSource {
    async fn next(&mut self) -> Update {
        if let Some(update) = self.after_gap.take() {
            return update;
        }
        match self.follower.recv().await {
            Some(event) => self.update(event),
            None => Update::Closed,
        }
    }

    fn try_next(&mut self) -> Option<Update> {
        if let Some(update) = self.after_gap.take() {
            return Some(update);
        }
        let event = self.follower.try_recv()?;
        Some(self.update(event))
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

    fn urls(&self) -> Option<Vec<UrlReport>> {
        let addresses = self.addresses.locked();
        // Read in place, not copied: this runs before every redraw.
        Some(UrlReport::shown(&addresses.urls, &self.statuses.borrow()))
    }
}

//! Where the TUI's state comes from and where its actions go: one
//! [`Source`] the loop reads [`Update`]s from and hands [`Action`]s to.
//! `omnidev up` reads the supervisor in its own process ([`PodSource`]);
//! `omnidev attach` reads a running pod over its control socket
//! ([`ControlSource`](super::attached::ControlSource)). The app, the view and the loop are
//! the same for both.

use std::future::Future;
use std::sync::Arc;

use crate::control::protocol::UrlReport;
use omnidev_core::{Event, ServiceStatus, Supervisor};
use tokio::sync::broadcast;

use super::app::{Action, CatchUp};
use crate::live_profile::{ApplyError, LiveProfile};

/// One thing a [`Source`] tells the TUI.
#[derive(Debug)]
pub enum Update {
    /// Something happened in the pod.
    Event(Event),
    /// Something that happened whose line is shown; the header (states,
    /// restarts) does not take it in: [`Update::Status`] brings those
    /// (`omnidev attach`).
    Shown(Event),
    /// Events were lost (`skipped` of them); the state now.
    Lagged {
        /// How many.
        skipped: u64,
        /// Statuses and buffered lines to fill the gap from.
        catch_up: CatchUp,
    },
    /// The UI fell too far behind to fill the gap: the panes start over
    /// from what the pod kept, which follows.
    Refill {
        /// Why, for the footer.
        why: String,
    },
    /// Every service's status as core has it now, and the URLs the pod
    /// shows.
    Status {
        /// Every service.
        statuses: Vec<ServiceStatus>,
        /// The URLs.
        urls: Vec<UrlReport>,
    },
    /// A line for the footer: how an action went.
    Message(String),
    /// The pod has stopped: what to say; the UI leaves.
    Ended(String),
    /// The source is gone without a word (the supervisor's channel closed):
    /// the UI leaves.
    Closed,
}

/// A pod as the TUI sees it.
pub trait Source {
    /// The next update. Cancel-safe: a call dropped before it finished
    /// loses nothing (the loop waits on it beside key presses).
    fn next(&mut self) -> impl Future<Output = Update>;

    /// An update that is already waiting, without waiting.
    fn try_next(&mut self) -> Option<Update>;

    /// Carries out `action` ([`Action::Quit`] and [`Action::Suspend`] are
    /// the loop's own).
    fn act(&mut self, action: Action);

    /// The URLs the pod shows now, when they may have changed without an
    /// update (a service became ready, a port moved in this process);
    /// `None` when they come as [`Update::Status`].
    fn urls(&self) -> Option<Vec<UrlReport>> {
        None
    }
}

/// The pod of this process: `omnidev up`'s supervisor. `q` stops it.
pub struct PodSource {
    supervisor: Supervisor,
    /// Every event, subscribed before the services started.
    events: broadcast::Receiver<Event>,
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
    /// The source of `supervisor`, whose events `events` receives.
    pub fn new(
        supervisor: Supervisor,
        events: broadcast::Receiver<Event>,
        addresses: crate::session::SharedAddresses,
        live: Option<Arc<LiveProfile>>,
    ) -> Self {
        Self {
            statuses: supervisor.watch_status(),
            supervisor,
            events,
            addresses,
            live,
        }
    }

    fn catch_up(&self) -> CatchUp {
        CatchUp {
            statuses: self.supervisor.snapshot(),
            logs: self.supervisor.logs(None).unwrap_or_default(),
        }
    }

    fn update(&self, received: Result<Event, broadcast::error::RecvError>) -> Update {
        match received {
            Ok(event) => Update::Event(event),
            Err(broadcast::error::RecvError::Lagged(skipped)) => Update::Lagged {
                skipped,
                catch_up: self.catch_up(),
            },
            Err(broadcast::error::RecvError::Closed) => Update::Closed,
        }
    }
}

impl Source for PodSource {
    async fn next(&mut self) -> Update {
        let received = self.events.recv().await;
        self.update(received)
    }

    fn try_next(&mut self) -> Option<Update> {
        match self.events.try_recv() {
            Ok(event) => Some(Update::Event(event)),
            Err(broadcast::error::TryRecvError::Lagged(skipped)) => {
                Some(self.update(Err(broadcast::error::RecvError::Lagged(skipped))))
            }
            Err(broadcast::error::TryRecvError::Empty) => None,
            Err(broadcast::error::TryRecvError::Closed) => Some(Update::Closed),
        }
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
                Action::ClearLogs(name) => supervisor.clear_logs(name.as_deref()),
                Action::Quit | Action::Suspend => Ok(()),
            };
        });
    }

    fn urls(&self) -> Option<Vec<UrlReport>> {
        let addresses = self
            .addresses
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Read in place, not copied: this runs before every redraw.
        Some(UrlReport::shown(&addresses.urls, &self.statuses.borrow()))
    }
}

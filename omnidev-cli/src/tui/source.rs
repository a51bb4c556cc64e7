//! Where the TUI's state comes from and where its actions go: one
//! [`Feed`] the loop reads [`Update`]s from and hands [`Action`]s to.
//! `omnidev up` reads the supervisor in its own process ([`PodSource`],
//! `source/pod.rs`); `omnidev attach` reads a running pod over its
//! control socket ([`ControlSource`](control::ControlSource), `source/control.rs`). The app, the
//! view and the loop are the same for both.

pub mod control;
mod pod;

use std::future::Future;

use crate::control::protocol::UrlReport;
use omnidev_core::{Event, ServiceStatus};

use super::app::Action;

pub use pod::PodSource;

/// One thing a [`Feed`] tells the TUI.
#[derive(Debug)]
pub enum Update {
    /// Something happened in the pod: its line is shown. The header
    /// (states, restarts, URLs) does not take it in: [`Update::Status`]
    /// brings those, from both sources.
    Event(Event),
    /// The UI fell too far behind to fill the gap: the panes start over
    /// from what the pod kept, which follows.
    Refill {
        /// Why, for the footer.
        why: String,
    },
    /// Every service's status as core has it now (sent at each change),
    /// and the URLs the pod shows.
    Status {
        /// Every service.
        statuses: Vec<ServiceStatus>,
        /// The URLs.
        urls: Vec<UrlReport>,
    },
    /// What the pod's services hold together now (every
    /// [`crate::output::LIVE_USAGE_EVERY`]).
    Usage(omnidev_core::platform::Usage),
    /// A line for the footer: how an action went.
    Message(String),
    /// The pod has stopped: what to say; the UI leaves.
    Ended(String),
    /// The source is gone without a word (the supervisor's channel closed):
    /// the UI leaves.
    Closed,
}

/// A pod as the TUI sees it.
pub trait Feed {
    /// The next update. Cancel-safe: a call dropped before it finished
    /// loses nothing (the loop waits on it beside key presses).
    fn next(&mut self) -> impl Future<Output = Update>;

    /// An update that is already waiting, without waiting.
    fn try_next(&mut self) -> Option<Update>;

    /// Carries out `action` ([`Action::Quit`] and [`Action::Suspend`] are
    /// the loop's own).
    fn act(&mut self, action: Action);
}

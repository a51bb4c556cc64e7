//! Where a supervisor publishes ([`Bus`]): the history every cursor reads
//! and the lossy broadcast channels of
//! [`Supervisor::subscribe`](crate::Supervisor::subscribe), from one place
//! so they see the same order.

use std::sync::Arc;

use tokio::sync::broadcast;

use crate::event::{Event, LogLine};
use crate::history::History;

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Bus {
    /// Every event, lines included.
    events: broadcast::Sender<Event>,
    /// Every event but lines: for watchers of states, which would otherwise
    /// wake (and cost the capture a clone) for every line of a burst.
    changes: broadcast::Sender<Event>,
    /// What is kept for readers with a cursor.
    pub(crate) history: Arc<History>,
}

impl Bus {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            events: broadcast::channel(capacity).0,
            changes: broadcast::channel(capacity).0,
            history: Arc::default(),
        }
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }

    pub(crate) fn subscribe_changes(&self) -> broadcast::Receiver<Event> {
        self.changes.subscribe()
    }

    /// Publishes an event to the history and every subscriber.
    pub(crate) fn send(&self, event: Event) {
        self.history.push_event(&event);
        if self.changes.receiver_count() > 0 {
            let _ = self.changes.send(event.clone());
        }
        let _ = self.events.send(event);
    }

    /// Publishes an unfinished line to the history and the broadcast
    /// subscribers (the files get the line once it is finished).
    pub(crate) fn send_partial(&self, line: LogLine) {
        let line = Arc::new(line);
        self.history.push_partial(line.clone());
        if self.events.receiver_count() > 0 {
            let _ = self.events.send(Event::partial(LogLine::clone(&line)));
        }
    }

    /// Publishes lines already numbered in order.
    pub(crate) fn send_lines(&self, lines: &[Arc<LogLine>]) {
        self.history.push_lines(lines);
        if self.events.receiver_count() > 0 {
            for line in lines {
                let _ = self.events.send(Event::log(LogLine::clone(line)));
            }
        }
    }
}

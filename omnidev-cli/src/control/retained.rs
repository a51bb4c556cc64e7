//! The recent events a running pod keeps for `omnidev events` and `wait`,
//! bounded, and the live tail that followers subscribe to.
//!
//! A thread reads the supervisor's lossless feed (attached before any
//! service started), turns each entry into a [`Record`], keeps it, and
//! hands it to followers through a broadcast channel: a follower more than
//! [`FOLLOW_BACKLOG`] records behind is told it lagged and is dropped,
//! never slowing the pod.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use omnidev_core::{Feed, FeedCloser, Recv};
use tokio::sync::broadcast;

use super::events::{Body, Encoder, Record};
use crate::headless::encode;

/// Records other than log lines kept (the oldest go first).
pub const KEPT_EVENTS: usize = 4096;
/// Log lines kept.
pub const KEPT_LINES: usize = 10_000;
/// Bytes of encoded log lines kept.
pub const KEPT_LINE_BYTES: usize = 4 * 1024 * 1024;
/// How far a follower may fall behind the live tail before it is dropped.
pub const FOLLOW_BACKLOG: usize = 1024;

/// One kept record.
#[derive(Debug)]
pub struct Item {
    /// Order among every kept record.
    pub seq: u64,
    /// When it happened.
    pub at: SystemTime,
    /// The record.
    pub record: Record,
    /// Its line of JSON, made when first sent (most lines never are).
    line: std::sync::OnceLock<String>,
}

impl Item {
    /// The record as a line of JSON, newline included.
    pub fn line(&self) -> &str {
        self.line.get_or_init(|| encode(&self.record))
    }

    /// Bytes counted against [`KEPT_LINE_BYTES`].
    fn cost(&self) -> usize {
        match &self.record.body {
            Body::Log { line, .. } => line.len() + 128,
            _ => 512,
        }
    }

    fn is_log(&self) -> bool {
        self.record.body.kind() == "log"
    }
}

/// Which records a reader wants.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only these services' records (and the pod's own); all when empty.
    pub services: Vec<String>,
    /// Log lines too.
    pub logs: bool,
    /// Only records at or after this time.
    pub since: Option<SystemTime>,
    /// Only records from the last reload on (all when none happened).
    pub since_reload: bool,
}

impl Filter {
    /// Whether `item` passes (the replay's starting point aside).
    pub fn matches(&self, item: &Item) -> bool {
        (self.logs || !item.is_log())
            && self.since.is_none_or(|since| item.at >= since)
            && (self.services.is_empty()
                || item
                    .record
                    .service
                    .as_ref()
                    .is_none_or(|s| self.services.contains(s)))
    }
}

/// The kept records.
#[derive(Debug)]
pub struct Retained {
    events: VecDeque<Arc<Item>>,
    lines: VecDeque<Arc<Item>>,
    line_bytes: usize,
    next: u64,
    /// The last `reload` record.
    last_reload: Option<Arc<Item>>,
    /// Per service, the seq of its last start or end (a `state` other
    /// than stopping, waiting, preparing or stopped; `ready`, `exited`,
    /// `crashed`).
    changed: HashMap<String, u64>,
    tail: broadcast::Sender<Arc<Item>>,
}

impl Default for Retained {
    fn default() -> Self {
        Self {
            events: VecDeque::new(),
            lines: VecDeque::new(),
            line_bytes: 0,
            next: 0,
            last_reload: None,
            changed: HashMap::new(),
            tail: broadcast::channel(FOLLOW_BACKLOG).0,
        }
    }
}

impl Retained {
    /// Keeps `record` (dropping the oldest beyond the bounds) and sends it
    /// to the followers.
    pub fn push(&mut self, at: SystemTime, record: Record) {
        let item = Arc::new(Item {
            seq: self.next,
            at,
            record,
            line: std::sync::OnceLock::new(),
        });
        self.next += 1;
        match &item.record.body {
            Body::Log { .. } => {
                self.line_bytes += item.cost();
                self.lines.push_back(item.clone());
                while self.lines.len() > KEPT_LINES || self.line_bytes > KEPT_LINE_BYTES {
                    let Some(old) = self.lines.pop_front() else {
                        break;
                    };
                    self.line_bytes -= old.cost();
                }
            }
            body => {
                if matches!(body, Body::Reload { .. }) {
                    self.last_reload = Some(item.clone());
                }
                // A service was started again (or ended for good) after a
                // reload once it says so; being stopped is not it.
                let settled = match body {
                    Body::State { state, .. } => !matches!(
                        state.as_str(),
                        "stopping" | "waiting" | "preparing" | "stopped"
                    ),
                    Body::Ready | Body::Exited { .. } | Body::Crashed { .. } => true,
                    _ => false,
                };
                if settled && let Some(service) = &item.record.service {
                    self.changed.insert(service.clone(), item.seq);
                }
                self.events.push_back(item.clone());
                if self.events.len() > KEPT_EVENTS {
                    self.events.pop_front();
                }
            }
        }
        // No follower is fine.
        let _ = self.tail.send(item);
    }

    /// The kept records `filter` wants, oldest first, and a subscription to
    /// every later one (none missed in between: both are taken under the
    /// same lock as [`Retained::push`]).
    pub fn replay(&self, filter: &Filter) -> (Vec<Arc<Item>>, broadcast::Receiver<Arc<Item>>) {
        let from = match (&self.last_reload, filter.since_reload) {
            (Some(reload), true) => reload.seq,
            _ => 0,
        };
        let mut items: Vec<Arc<Item>> = self
            .events
            .iter()
            .chain(&self.lines)
            .filter(|item| item.seq >= from && filter.matches(item))
            .cloned()
            .collect();
        items.sort_by_key(|item| item.seq);
        (items, self.tail.subscribe())
    }

    /// The last reload, when one began at or after `after`.
    pub fn reload_since(&self, after: SystemTime) -> Option<Arc<Item>> {
        self.last_reload.clone().filter(|item| item.at >= after)
    }

    /// Whether `service` started again (or ended) after the record numbered
    /// `seq`.
    pub fn changed_after(&self, service: &str, seq: u64) -> bool {
        self.changed.get(service).is_some_and(|&at| at > seq)
    }
}

/// The kept records, shared between the reading thread and the server.
pub type Store = Arc<Mutex<Retained>>;

/// Locks the store (a panic elsewhere leaves the records usable).
pub fn lock(store: &Store) -> MutexGuard<'_, Retained> {
    store
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Reads `feed` into `store` on a thread of its own until the returned
/// closer closes the feed.
pub fn spawn_reader(
    mut feed: Feed,
    encoder: Encoder,
    store: Store,
) -> std::io::Result<(FeedCloser, std::thread::JoinHandle<()>)> {
    let closer = feed.closer();
    let thread = std::thread::Builder::new()
        .name("omnidev-events".into())
        .spawn(move || {
            let mut batch = Vec::new();
            loop {
                batch.clear();
                match feed.recv_batch(&mut batch, Duration::from_secs(3600)) {
                    Recv::Entries => {
                        let now = SystemTime::now();
                        let mut store = lock(&store);
                        for entry in &batch {
                            let record = encoder.entry(entry, now);
                            let at = match entry {
                                omnidev_core::Entry::Event(event) => event.at,
                                _ => now,
                            };
                            store.push(at, record);
                        }
                    }
                    Recv::Empty => {}
                    Recv::Closed => break,
                }
            }
        })?;
    Ok((closer, thread))
}

//! The dashboard's connections, counted in two kinds so that strangers
//! cannot starve the owner: a connection is a stranger until a request on
//! it carries the secret, then it is let in.
//!
//! - At most [`STRANGERS`] strangers are kept: one more closes the oldest
//!   (a local process that holds idle connections only ever holds the
//!   newest few, and the owner's next connection gets in).
//! - At most [`MEMBERS`] connections are let in (only holders of the
//!   secret get there: a page holds one for each pod it shows).
//! - When the system has no descriptor left for a new connection, the
//!   oldest stranger is closed too.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio_util::sync::CancellationToken;

/// Strangers kept at once.
pub const STRANGERS: usize = 32;

/// Connections let in at once.
pub const MEMBERS: usize = 256;

/// Every open connection of the dashboard.
#[derive(Debug, Default)]
pub struct Door {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Oldest first: each one's id and what closes it.
    strangers: VecDeque<(u64, CancellationToken)>,
    members: usize,
    next: u64,
}

/// One open connection: closed when [`Visit::closed`] fires.
#[derive(Debug)]
pub struct Visit {
    door: Arc<Door>,
    id: u64,
    close: CancellationToken,
    member: AtomicBool,
}

impl Door {
    /// A new connection, a stranger (the oldest one goes when there are
    /// too many).
    pub fn enter(self: &Arc<Self>) -> Arc<Visit> {
        let close = CancellationToken::new();
        let mut inner = self.lock();
        let id = inner.next;
        inner.next += 1;
        inner.strangers.push_back((id, close.clone()));
        if inner.strangers.len() > STRANGERS
            && let Some((_, oldest)) = inner.strangers.pop_front()
        {
            oldest.cancel();
        }
        Arc::new(Visit { door: self.clone(), id, close, member: AtomicBool::new(false) })
    }

    /// Closes the oldest stranger (descriptors ran out).
    pub fn close_oldest_stranger(&self) {
        if let Some((_, oldest)) = self.lock().strangers.pop_front() {
            oldest.cancel();
        }
    }

    /// Connections open: strangers, and those let in.
    #[cfg(test)]
    fn counts(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.strangers.len(), inner.members)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Visit {
    /// Lets this connection in (it carried the secret); `false` when as
    /// many are in as are served.
    pub fn let_in(&self) -> bool {
        if self.member.load(Ordering::Acquire) {
            return true;
        }
        let mut inner = self.door.lock();
        if inner.members >= MEMBERS {
            return false;
        }
        inner.strangers.retain(|(id, _)| *id != self.id);
        inner.members += 1;
        self.member.store(true, Ordering::Release);
        true
    }

    /// Fires when this connection is to be closed.
    pub async fn closed(&self) {
        self.close.cancelled().await;
    }
}

impl Drop for Visit {
    fn drop(&mut self) {
        let mut inner = self.door.lock();
        if self.member.load(Ordering::Acquire) {
            inner.members -= 1;
        } else {
            inner.strangers.retain(|(id, _)| *id != self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strangers_make_room_and_members_are_counted_apart() {
        let door = Arc::new(Door::default());
        let first = door.enter();
        let rest: Vec<_> = (0..STRANGERS).map(|_| door.enter()).collect();
        assert!(first.close.is_cancelled(), "the oldest stranger closed");
        assert!(!rest.iter().any(|v| v.close.is_cancelled()));
        assert_eq!(door.counts(), (STRANGERS, 0));
        assert!(rest[0].let_in() && rest[0].let_in());
        assert_eq!(door.counts(), (STRANGERS - 1, 1));
        // A member is never closed as a stranger.
        let more: Vec<_> = (0..STRANGERS).map(|_| door.enter()).collect();
        assert!(!rest[0].close.is_cancelled());
        assert!(rest[1..].iter().all(|v| v.close.is_cancelled()));
        assert!(!more[0].close.is_cancelled());
        door.close_oldest_stranger();
        assert!(more[0].close.is_cancelled() && !more[1].close.is_cancelled());
        drop((first, rest, more));
        assert_eq!(door.counts(), (0, 0));
    }

    #[test]
    fn members_are_bounded() {
        let door = Arc::new(Door::default());
        let visits: Vec<_> = (0..=MEMBERS).map(|_| door.enter()).collect();
        let admitted = visits.iter().filter(|v| v.let_in()).count();
        assert_eq!(admitted, MEMBERS);
        assert_eq!(door.counts().1, MEMBERS);
    }
}

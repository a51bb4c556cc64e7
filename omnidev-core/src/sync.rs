//! What a lock does when a thread panicked while holding it: the next
//! holder goes on with the data as it stands. Every value omnidev keeps
//! behind a lock stays whole between two statements (a queue, a slot, a
//! set of names), and a front-end that stopped over one panicked thread
//! would leave the pod's services unsupervised.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// [`Mutex::lock`], going on past a panicked holder.
pub trait Locked<T> {
    /// The guard, poisoned or not.
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T> Locked<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

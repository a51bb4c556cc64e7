//! Small files replaced on a thread of their own, so that whoever changes
//! them never waits for the disk.
//!
//! The supervisor's engine rewrites `state.json` on every turn that
//! changes a service and the reload mark before every reload's stop. Each
//! write creates a file and renames it over the old one, and while other
//! processes keep the disk busy (a build, a second pod's install) the
//! filesystem's journal can hold such a create or rename for tens of
//! milliseconds: a reload's stop signal and its respawn waited behind it.
//! Here the caller hands over the bytes and goes on; one thread writes
//! them in order, and of several writes of one path still waiting only the
//! newest is made.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use crate::sync::Locked;

/// What is told how a write went.
type Done = Box<dyn FnOnce(io::Result<()>) + Send>;

/// The writing thread and what waits for it.
pub(crate) struct BackgroundWriter {
    shared: Arc<Pending>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct Pending {
    queue: Mutex<Queue>,
    changed: Condvar,
}

#[derive(Default)]
struct Queue {
    /// Each path's newest contents not yet written.
    pending: BTreeMap<PathBuf, (Vec<u8>, Done)>,
    /// A write is under way.
    writing: bool,
    /// No more writes are coming: write what is pending, then end.
    closed: bool,
}

impl fmt::Debug for BackgroundWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackgroundWriter")
            .field("pending", &self.lock().pending.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl BackgroundWriter {
    /// Starts the thread; where no thread can be started, every write is
    /// made by the caller at once.
    pub(crate) fn new() -> Self {
        let shared = Arc::new(Pending::default());
        let worker = shared.clone();
        let thread = std::thread::Builder::new()
            .name("omnidev-writer".into())
            .spawn(move || run(&worker))
            .ok();
        Self { shared, thread }
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.shared.queue.locked()
    }

    /// Replaces `path` with `contents` (atomically for every reader, not
    /// flushed to the disk: [`super::write_atomic_unsynced`]), then calls
    /// `done` with the outcome, on the writing thread. A write of the same
    /// path still waiting is dropped, `done` and all: the newest is what
    /// counts.
    pub(crate) fn submit(
        &self,
        path: PathBuf,
        contents: Vec<u8>,
        done: impl FnOnce(io::Result<()>) + Send + 'static,
    ) {
        if self.thread.is_none() {
            done(super::write_atomic_unsynced(&path, &contents));
            return;
        }
        self.lock().pending.insert(path, (contents, Box::new(done)));
        self.shared.changed.notify_all();
    }

    /// Returns once every write submitted before it has been made.
    pub(crate) fn flush(&self) {
        let mut queue = self.lock();
        while self.thread.is_some() && (queue.writing || !queue.pending.is_empty()) {
            queue = self.shared.changed.wait(queue).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

impl Drop for BackgroundWriter {
    /// Writes what is pending, then ends the thread.
    fn drop(&mut self) {
        self.lock().closed = true;
        self.shared.changed.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The writing thread: the oldest path first, until closed and drained.
fn run(shared: &Pending) {
    let lock = || shared.queue.locked();
    loop {
        let (path, (contents, done)) = {
            let mut queue = lock();
            loop {
                if let Some(next) = queue.pending.pop_first() {
                    queue.writing = true;
                    break next;
                }
                if queue.closed {
                    return;
                }
                queue = shared.changed.wait(queue).unwrap_or_else(PoisonError::into_inner);
            }
        };
        done(super::write_atomic_unsynced(&path, &contents));
        lock().writing = false;
        shared.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    #[test]
    fn writes_in_the_background_and_flush_waits_for_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let writer = BackgroundWriter::new();
        let (tx, rx) = mpsc::channel();
        for n in 0..50 {
            let path = dir.path().join(format!("f{}", n % 5));
            let tx = tx.clone();
            writer.submit(path, format!("{n}").into_bytes(), move |r| {
                tx.send(r.is_ok()).expect("send");
            });
        }
        writer.flush();
        // Each path has the newest of its writes.
        for k in 0..5 {
            let text = std::fs::read_to_string(dir.path().join(format!("f{k}"))).expect("read");
            assert_eq!(text, format!("{}", 45 + k));
        }
        drop(tx);
        let told: Vec<bool> = rx.iter().collect();
        assert!(told.iter().all(|ok| *ok), "{told:?}");
        assert!((5..=50).contains(&told.len()), "each write made was told: {}", told.len());
    }

    #[test]
    fn a_failed_write_is_told_and_a_link_is_replaced_not_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("target");
        std::fs::write(&target, "keep").expect("target");
        let link = dir.path().join("state.json");
        std::os::unix::fs::symlink(&target, &link).expect("link");
        let writer = BackgroundWriter::new();
        let (tx, rx) = mpsc::channel();
        let told = tx.clone();
        writer.submit(link.clone(), b"new".to_vec(), move |r| {
            told.send(r.map_err(|e| e.to_string())).expect("send");
        });
        writer.submit(dir.path().join("missing/state.json"), b"x".to_vec(), move |r| {
            tx.send(r.map_err(|e| e.to_string())).expect("send");
        });
        drop(writer);
        let results: Vec<_> = rx.iter().collect();
        assert_eq!(results.len(), 2, "{results:?}");
        assert!(results.iter().any(Result::is_ok), "{results:?}");
        assert!(results.iter().any(Result::is_err), "{results:?}");
        assert_eq!(std::fs::read_to_string(&target).expect("target"), "keep");
        assert_eq!(std::fs::read_to_string(&link).expect("replaced"), "new");
        assert!(!link.is_symlink(), "the link itself was replaced");
    }

    #[test]
    fn dropping_the_writer_makes_what_is_pending() {
        let dir = tempfile::tempdir().expect("tempdir");
        let writer = BackgroundWriter::new();
        for n in 0..20 {
            writer.submit(dir.path().join(format!("f{n}")), b"x".to_vec(), |_| {});
        }
        drop(writer);
        for n in 0..20 {
            assert!(dir.path().join(format!("f{n}")).exists(), "f{n}");
        }
    }
}

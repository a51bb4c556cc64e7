//! Writing `state.json`: once per engine turn, and said once when it
//! fails (and again when it works).

use std::path::PathBuf;

use super::{Engine, Internal};
use crate::event::EventKind;
use crate::state::{STATE_VERSION, ServiceRecord, StateFile};

impl Engine {
    /// Notes that `state.json` is out of date; [`Engine::flush_state`]
    /// writes it once the current turn has been reconciled: the run's new
    /// pid right after the spawn, in the same turn, and several changes of
    /// one turn in one write. The write is atomic but not flushed to the
    /// disk ([`crate::state::write_state`]), so the engine never waits for
    /// the disk.
    pub(super) fn write_state(&mut self) {
        self.state.dirty = true;
    }

    /// Writes `state.json` if a change of this turn asked for it, on the
    /// background writer: the engine goes on at once, and hears how the
    /// write went as [`Internal::Written`].
    pub(super) fn flush_state(&mut self) {
        if !std::mem::take(&mut self.state.dirty) {
            return;
        }
        let Some((path, text)) = self.state_contents() else {
            return;
        };
        let tx = self.internal_tx.clone();
        self.writer.submit(path, text, move |result| {
            let _ = tx.send(Internal::Written {
                file: WrittenFile::State,
                result: result.map_err(|e| e.to_string()),
            });
        });
    }

    /// The last write, at the end: made here, after every write handed to
    /// the background writer.
    pub(super) fn write_state_now(&mut self) {
        self.writer.flush();
        if let Some((path, text)) = self.state_contents() {
            let result = crate::fs::write_atomic_unsynced(&path, &text).map_err(|e| e.to_string());
            self.written(WrittenFile::State, result);
        }
    }

    /// Where `state.json` goes and what it says now.
    fn state_contents(&self) -> Option<(PathBuf, Vec<u8>)> {
        let path = self.parts.state_file.clone()?;
        let state = StateFile {
            version: STATE_VERSION,
            supervisor: self.parts.supervisor,
            guard_pid: self.parts.guard.as_ref().map(|g| g.pid()),
            containment: Some(self.parts.containment.mechanism().clone()),
            services: self
                .services
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let record = ServiceRecord {
                        cgroup: self.parts.containment.leaf(i),
                        service_id: Some(self.parts.containment.service_id(i)),
                        ..s.record()
                    };
                    (self.name(i).to_owned(), record)
                })
                .collect(),
        };
        // A state holds strings and numbers only: encoding cannot fail.
        let text = crate::state::encode_state(&path, &state).ok()?;
        Some((path, text))
    }

    /// How a write of a pod file went. For `state.json`: said once per
    /// failure, with its cause, and again when it works; for the reload
    /// mark: each failure.
    pub(super) fn written(&mut self, file: WrittenFile, result: Result<(), String>) {
        match file {
            WrittenFile::Mark(path) => {
                if let Err(cause) = result {
                    let message = crate::logs::mark_failed(&path, &cause);
                    self.emit(None, EventKind::Notice { message });
                }
            }
            WrittenFile::State => {
                let path = self.parts.state_file.clone().unwrap_or_default();
                match result {
                    Err(cause) if !self.state.error_reported => {
                        self.state.error_reported = true;
                        self.emit(
                            None,
                            EventKind::Notice {
                                message: format!(
                                    "could not write {}: {cause}; supervising goes on, and \
                                     writing is tried again at each change",
                                    path.display()
                                ),
                            },
                        );
                    }
                    Ok(()) if self.state.error_reported => {
                        self.state.error_reported = false;
                        self.emit(
                            None,
                            EventKind::Notice {
                                message: format!("{} is written again", path.display()),
                            },
                        );
                    }
                    Ok(()) | Err(_) => {}
                }
            }
        }
    }
}

/// Which pod file a write was of.
#[derive(Debug)]
pub(super) enum WrittenFile {
    State,
    /// The reload mark, at this path.
    Mark(PathBuf),
}

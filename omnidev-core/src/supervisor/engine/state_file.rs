//! Writing `state.json`: once per engine turn, and said once when it
//! fails (and again when it works).

use super::Engine;
use crate::event::EventKind;
use crate::state::{STATE_VERSION, ServiceRecord, StateFile};

impl Engine {
    /// Notes that `state.json` is out of date; [`Engine::flush_state`]
    /// writes it once the current turn has been reconciled. A write syncs
    /// the file and its directory (a few milliseconds, far more while the
    /// disk is busy), so it must not sit between a service's exit and its
    /// respawn: the run's new pid is written right after the spawn, in the
    /// same turn, and several changes of one turn are one write.
    pub(super) fn write_state(&mut self) {
        self.state.dirty = true;
    }

    /// Writes `state.json` if a change of this turn asked for it.
    pub(super) fn flush_state(&mut self) {
        if std::mem::take(&mut self.state.dirty) {
            self.write_state_now();
        }
    }

    pub(super) fn write_state_now(&mut self) {
        let Some(path) = self.state.path.clone() else {
            return;
        };
        let state = StateFile {
            version: STATE_VERSION,
            supervisor: self.supervisor,
            guard_pid: self.guard.as_ref().map(|g| g.pid()),
            containment: Some(self.containment.mechanism().clone()),
            services: self
                .services
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let record = ServiceRecord {
                        cgroup: self.containment.leaf(i),
                        service_id: Some(self.containment.service_id(i)),
                        ..s.record()
                    };
                    (self.name(i).to_owned(), record)
                })
                .collect(),
        };
        // Said once per failure, with its cause, and again when it works.
        match crate::state::write_state(&path, &state) {
            Err(e) if !self.state.error_reported => {
                self.state.error_reported = true;
                let cause = std::error::Error::source(&e)
                    .map_or_else(|| e.to_string(), ToString::to_string);
                self.emit(
                    None,
                    EventKind::Notice {
                        message: format!(
                            "could not write {}: {cause}; supervising goes on, and writing is \
                             tried again at each change",
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

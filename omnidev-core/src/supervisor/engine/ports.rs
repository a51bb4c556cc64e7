//! Port recovery: another process on a service's port while its probe
//! runs, who holds it after a crash, and the port mover's answer.

use super::{Engine, Internal, RunReport};
use crate::event::{Event, EventKind};
use crate::spec::ServiceSpec;
use crate::supervisor::Moved;
use crate::supervisor::service::{Intent, Phase, PortRecovery};

impl Engine {
    /// Who listened on a crashed service's port: another process means
    /// the service lost its port; the mover (if any) is asked to move it.
    pub(super) fn checked_after_exit(
        &mut self,
        index: usize,
        generation: u64,
        port: u16,
        holder: Option<String>,
    ) {
        match (holder, self.parts.port_mover.clone()) {
            (Some(holder), Some(mover)) => {
                self.port_held(index, port, holder.clone());
                let name = self.name(index).to_owned();
                let tx = self.internal_tx.clone();
                tokio::task::spawn_blocking(move || {
                    let outcome = mover.move_port(&name, port, &holder);
                    let report = RunReport::PortMoved { port, outcome };
                    let _ = tx.send(Internal::run(index, generation, report));
                });
            }
            (holder, _) => {
                if let Some(holder) = holder {
                    self.port_held(index, port, holder);
                }
                self.port_checked(index);
            }
        }
    }

    /// Another process listens on `index`'s port: say so, once per holder,
    /// and show it in the service's status.
    pub(super) fn port_held(&mut self, index: usize, port: u16, holder: String) {
        let event = Event::now(Some(self.name(index)), EventKind::PortHeld { port, holder });
        let note = event.to_string();
        if self.services[index].note.as_ref() == Some(&note) {
            return;
        }
        self.services[index].note = Some(note);
        self.emit(Some(index), event.kind);
        self.publish_status();
    }

    /// The look at a crashed service's port is over: the backoff decides
    /// (or, when it is over already, the service starts now).
    pub(super) fn port_checked(&mut self, index: usize) {
        if let Phase::Backoff { port, .. } = &mut self.services[index].phase {
            match *port {
                PortRecovery::Overdue { .. } => self.enter(index, Phase::Waiting),
                PortRecovery::Looking { .. } | PortRecovery::Settled => {
                    *port = PortRecovery::Settled;
                }
            }
        }
    }

    /// The mover answered: start the service on its new port at once (and
    /// restart every other service whose spec changed), or leave it failed
    /// with the reason its port cannot move.
    pub(super) fn port_moved(&mut self, index: usize, port: u16, outcome: Result<Moved, String>) {
        // Each service's new spec, matched by name (a service removed from
        // the pod has none and keeps its own); the graph must not change.
        let matched = |moved: Moved| -> Result<(u16, Vec<Option<ServiceSpec>>), String> {
            let mismatch = || "the port mover returned other services than the pod runs".to_owned();
            let specs = self
                .specs
                .iter()
                .zip(&self.removed)
                .map(|(current, removed)| {
                    let new = moved.services.iter().find(|s| s.name == current.name);
                    match (new, removed) {
                        (_, true) => Ok(None),
                        (Some(new), false) if new.depends_on == current.depends_on => {
                            Ok(Some(new.clone()))
                        }
                        _ => Err(mismatch()),
                    }
                })
                .collect::<Result<Vec<_>, String>>()?;
            if moved.services.len() == self.removed.iter().filter(|r| !**r).count() {
                Ok((moved.port, specs))
            } else {
                Err(mismatch())
            }
        };
        let outcome = outcome.and_then(matched);
        let s = &mut self.services[index];
        if !matches!(s.phase, Phase::Backoff { .. }) {
            return;
        }
        s.generation += 1;
        match outcome {
            Ok((moved_to, specs)) => {
                let mut changed = Vec::new();
                for (j, spec) in specs.into_iter().enumerate() {
                    if let Some(spec) = spec {
                        if j != index && !spec.runs_as(&self.specs[j]) {
                            changed.push(j);
                        }
                        self.specs[j] = spec;
                    }
                }
                let message =
                    format!("moved {} from port {port} to port {moved_to}", self.name(index));
                self.emit(Some(index), EventKind::Notice { message });
                self.enter(index, Phase::Waiting);
                for j in changed {
                    if self.services[j].has_process() {
                        self.restart(j, false);
                    }
                }
            }
            Err(reason) => {
                self.services[index].intent = Intent::Hold;
                self.fail(index, reason);
            }
        }
    }
}

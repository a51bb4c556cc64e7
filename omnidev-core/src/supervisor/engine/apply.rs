//! Applying a changed set of specs to the running services (a reloaded
//! profile): a service whose spec changed restarts as a restart does, a
//! new one is added and starts, one the set no longer has is stopped and
//! kept (stopped) so that no index moves.

use std::collections::BTreeSet;

use super::{Engine, graph_of};
use crate::event::EventKind;
use crate::spec::ServiceSpec;
use crate::supervisor::service::{AfterStop, Intent, Phase, Supervised};
use crate::supervisor::{Applied, Names};

/// The note a removed service carries in its status.
const REMOVED_NOTE: &str = "removed from the profile";

impl Engine {
    /// The services' names, and which were removed.
    pub(super) fn names(&self) -> Names {
        Names {
            all: self.specs.iter().map(|s| s.name.clone()).collect(),
            removed: self.removed.clone(),
        }
    }

    /// Applies `specs` (a validated set: unique names, known dependencies,
    /// no cycle) to the running services; what was done.
    pub(super) fn apply(&mut self, specs: Vec<ServiceSpec>) -> Applied {
        let mut applied = Applied::default();
        let mut changed = Vec::new();
        let wanted: BTreeSet<String> = specs.iter().map(|s| s.name.clone()).collect();
        for spec in specs {
            let name = spec.name.clone();
            match self.specs.iter().position(|s| s.name == spec.name) {
                Some(i) if self.removed[i] => {
                    // Back in the set: it starts again with the new spec.
                    self.specs[i] = spec;
                    self.removed[i] = false;
                    self.open_log(i);
                    let s = &mut self.services[i];
                    s.intent = Intent::Keep;
                    s.attempt = 0;
                    s.note = None;
                    if s.is_terminal() {
                        self.enter(i, Phase::Waiting);
                    }
                    applied.started.push(name);
                }
                Some(i) => {
                    if !self.specs[i].runs_as(&spec) {
                        changed.push(i);
                    }
                    self.specs[i] = spec;
                }
                None => {
                    self.add(spec);
                    applied.started.push(name);
                }
            }
        }
        for i in 0..self.specs.len() {
            if self.removed[i] || wanted.contains(&self.specs[i].name) {
                continue;
            }
            self.removed[i] = true;
            // Nothing of the new set waits for it (the set was validated),
            // and it waits for nothing: it never starts again.
            self.specs[i].depends_on.clear();
            self.services[i].intent = Intent::Hold;
            self.services[i].note = Some(REMOVED_NOTE.to_owned());
            self.stop(i, AfterStop::Rest);
            applied.stopped.push(self.name(i).to_owned());
        }
        self.rebuild_graph();
        for i in changed {
            let s = &self.services[i];
            if s.intent == Intent::Hold && matches!(s.phase, Phase::Stopped) {
                applied.kept_stopped.push(self.name(i).to_owned());
            } else {
                self.restart(i, true);
                applied.restarted.push(self.name(i).to_owned());
            }
        }
        self.publish_status();
        self.write_state();
        applied
    }

    /// Adds a service at the next index: its log, its containment slot
    /// (the same index) and its state; it starts once its dependencies
    /// allow.
    fn add(&mut self, spec: ServiceSpec) {
        self.parts.containment.add(&spec.name);
        self.specs.push(spec);
        self.services.push(Supervised::default());
        self.removed.push(false);
        self.open_log(self.specs.len() - 1);
        self.publish_status();
    }

    /// Gives service `index` its log (again), a file that cannot be
    /// opened said in a notice.
    fn open_log(&mut self, index: usize) {
        if let Err((path, error)) = self.parts.logs.add_service(self.name(index)) {
            let message = format!(
                "could not open {}: {error}; its lines are kept in memory only",
                path.display()
            );
            self.emit(Some(index), EventKind::Notice { message });
        }
    }

    /// The dependency graph and start order of the specs as they are now.
    fn rebuild_graph(&mut self) {
        let (dependencies, dependents) = graph_of(&self.specs);
        self.dependencies = dependencies;
        self.dependents = dependents;
        // The set was validated and removed services depend on nothing, so
        // the order exists; keeping the old one (new services last) is
        // the fallback all the same.
        self.order = crate::supervisor::graph::start_order(&self.specs).unwrap_or_else(|_| {
            let mut order = self.order.clone();
            order.extend(self.order.len()..self.specs.len());
            order
        });
    }
}

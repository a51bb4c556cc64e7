//! Memory and CPU limits ([`crate::spec::Limits`]): written into the
//! cgroups where the kernel enforces them; elsewhere a memory limit is
//! watched here, twice a second and only while one is set, and a service
//! over it is killed and restarted like a crash.

use std::time::Duration;

use super::{Engine, Internal};
use crate::supervisor::service::{Over, Phase};

/// How often a watched memory limit is checked.
pub(super) const WATCH_EVERY: Duration = Duration::from_millis(500);

/// What one measurement found: each running service's index, the run's
/// generation, and the bytes it holds.
pub(super) type Measured = Vec<(usize, u64, u64)>;

impl Engine {
    /// At start: the pod's limits into its cgroup, and what to say of the
    /// limits the kernel does not enforce here (once, as notices).
    pub(super) fn set_up_limits(&self) -> Vec<String> {
        let containment = &self.parts.containment;
        containment.set_pod_limits(self.parts.pod_limits);
        let (service, pod) = containment.enforced();
        let mut kernel = Vec::new();
        let mut watched = Vec::new();
        let mut loose = Vec::new();
        let limited = (self.specs.iter())
            .map(|spec| (spec.name.as_str(), spec.limits, service))
            .chain([("the pod", self.parts.pod_limits, pod)]);
        for (name, limits, has) in limited {
            if limits.memory_max.is_some() {
                let by = if has.memory { &mut kernel } else { &mut watched };
                by.push(name.to_owned());
            }
            if limits.cpu_max.is_some() && !has.cpu {
                loose.push(name.to_owned());
            }
        }
        let mut notices = Vec::new();
        if !kernel.is_empty() {
            notices.push(format!(
                "memory-max of {}: enforced by the kernel (cgroup v2); over it, a \
                 service is killed and restarted",
                kernel.join(", ")
            ));
        }
        if !watched.is_empty() {
            notices.push(format!(
                "memory-max of {}: watched by omnidev every {}ms (no cgroup v2 memory \
                 controller is delegated to it here); over it, a service is killed and \
                 restarted",
                watched.join(", "),
                WATCH_EVERY.as_millis()
            ));
        }
        if !loose.is_empty() {
            notices.push(format!(
                "cpu-max of {}: not enforced (no cgroup v2 cpu controller is delegated to \
                 omnidev here; a systemd user session with `Delegate=yes` has one)",
                loose.join(", ")
            ));
        }
        notices
    }

    /// Whether the memory watch runs: a memory limit is set that the
    /// kernel does not enforce.
    pub(super) fn watches_memory(&self) -> bool {
        let (service, pod) = self.parts.containment.enforced();
        (!service.memory && (self.specs.iter()).any(|s| s.limits.memory_max.is_some()))
            || (!pod.memory && self.parts.pod_limits.memory_max.is_some())
    }

    /// Writes the limits of `index` into its cgroup before it starts.
    pub(super) fn limit_run(&self, index: usize) {
        let containment = &self.parts.containment;
        if let Some(slot) = containment.slot(self.name(index)) {
            containment.set_limits(slot, self.specs[index].limits);
        }
    }

    /// A tick of the watch: the running services measured off the
    /// engine's turn (one measurement at a time).
    pub(super) fn measure(&mut self) {
        if self.measuring {
            return;
        }
        let whole_pod = self.parts.pod_limits.memory_max.is_some();
        let runs: Vec<(usize, u64, Option<usize>, u32)> = (self.services.iter().enumerate())
            .filter(|(i, _)| whole_pod || self.specs[*i].limits.memory_max.is_some())
            .filter_map(|(i, s)| match &s.phase {
                Phase::Running(process) if process.is_alive() && s.over.is_none() => {
                    Some((i, s.generation, self.parts.containment.slot(self.name(i)), process.pid))
                }
                _ => None,
            })
            .collect();
        if runs.is_empty() {
            return;
        }
        self.measuring = true;
        let containment = self.parts.containment.clone();
        let tx = self.internal_tx.clone();
        tokio::task::spawn_blocking(move || {
            let measured = (runs.into_iter())
                .map(|(index, generation, slot, pid)| {
                    let usage = match slot {
                        Some(slot) => containment.usage(slot, pid),
                        None => crate::platform::tree_usage(pid),
                    };
                    (index, generation, usage.rss_bytes)
                })
                .collect();
            let _ = tx.send(Internal::Measured(measured));
        });
    }

    /// What a measurement found: a run over its own limit is killed; over
    /// the pod's, the run that holds the most.
    pub(super) fn measured(&mut self, measured: &Measured) {
        self.measuring = false;
        let (service, pod) = self.parts.containment.enforced();
        let current: Vec<(usize, u64)> = (measured.iter())
            .filter(|(index, generation, _)| self.current(*index, *generation))
            .map(|&(index, _, used)| (index, used))
            .collect();
        if !service.memory {
            for &(index, used) in &current {
                if let Some(limit) = self.specs[index].limits.memory_max
                    && used > limit
                {
                    self.kill_over(index, Over { used, limit, pod: false });
                }
            }
        }
        if let (Some(limit), false) = (self.parts.pod_limits.memory_max, pod.memory) {
            let total: u64 = current.iter().map(|(_, used)| used).sum();
            let biggest = (current.iter())
                .filter(|(index, _)| self.services[*index].over.is_none())
                .max_by_key(|(_, used)| *used);
            if total > limit
                && let Some(&(index, _)) = biggest
            {
                let over = Over { used: total, limit, pod: true };
                self.kill_over(index, over);
            }
        }
    }

    /// Kills the run of `index` for going over a limit: its end is told as
    /// that, not as a crash ([`crate::event::EventKind::OverLimit`]).
    fn kill_over(&mut self, index: usize, over: Over) {
        let s = &mut self.services[index];
        let Phase::Running(process) = &s.phase else {
            return;
        };
        if s.over.is_some() || !process.is_alive() {
            return;
        }
        s.over = Some(over);
        let group = process.group.clone();
        tokio::spawn(async move {
            group.stop(libc::SIGKILL, Duration::ZERO).await;
        });
    }
}

//! What changed between two renderings of a pod's profile: the services
//! whose rendered spec differs (and in which of the profile's keys), the
//! services added and removed, and the pod-wide settings that changed.

use std::fmt;

use omnidev_core::ServiceSpec;

use super::render::RenderedPod;

/// The differences between the profile a pod runs and a new rendering of
/// it, named in the profile's own words.
///
/// ```
/// use omnidev_core::ServiceSpec;
/// use omnidev_pod::profile::changes::ProfileChanges;
/// let old = vec![ServiceSpec::new("api", "python3", ["api.py"], ".")];
/// let mut new = vec![ServiceSpec::new("api", "python3", ["api.py", "-v"], ".")];
/// new.push(ServiceSpec::new("worker", "python3", ["worker.py"], "."));
/// let changes = ProfileChanges::of_services(&old, &new);
/// assert_eq!(changes.to_string(), "api (command), new service worker");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProfileChanges {
    /// Services in both whose rendered spec differs, in the new profile's
    /// order, each with the keys that differ (`command`, `env`, …).
    pub changed: Vec<(String, Vec<&'static str>)>,
    /// Services only the new profile has, in its order.
    pub added: Vec<String>,
    /// Services only the running profile has, in its order.
    pub removed: Vec<String>,
    /// Pod-wide settings that differ and are not applied to a running pod
    /// until it starts again (`watch rules`, `debounce-ms`).
    pub not_applied: Vec<&'static str>,
    /// The URLs shown to people differ.
    pub urls: bool,
}

impl ProfileChanges {
    /// The differences between the running rendering `old` and `new`.
    pub fn between(old: &RenderedPod, new: &RenderedPod) -> Self {
        let mut changes = Self::of_services(&old.services, &new.services);
        if old.watch != new.watch {
            changes.not_applied.push("watch rules");
        }
        if old.debounce != new.debounce {
            changes.not_applied.push("debounce-ms");
        }
        // A service's URLs are its own; one added or removed says so itself.
        let service_urls_differ = new
            .services
            .iter()
            .any(|n| old.services.iter().any(|o| o.name == n.name && o.urls != n.urls));
        changes.urls = old.urls != new.urls || service_urls_differ;
        changes
    }

    /// The differences between two sets of rendered services.
    pub fn of_services(old: &[ServiceSpec], new: &[ServiceSpec]) -> Self {
        let find = |specs: &'_ [ServiceSpec], name: &str| -> Option<usize> {
            specs.iter().position(|s| s.name == name)
        };
        let mut changes = Self::default();
        for spec in new {
            match find(old, &spec.name) {
                None => changes.added.push(spec.name.clone()),
                Some(i) => {
                    let keys = old[i].differences(spec);
                    if !keys.is_empty() {
                        changes.changed.push((spec.name.clone(), keys));
                    }
                }
            }
        }
        changes.removed =
            old.iter().filter(|s| find(new, &s.name).is_none()).map(|s| s.name.clone()).collect();
        changes
    }

    /// Nothing that applying would act on changed (no service changed,
    /// none added or removed, the URLs are the same).
    pub fn nothing_to_apply(&self) -> bool {
        self.changed.is_empty() && self.added.is_empty() && self.removed.is_empty() && !self.urls
    }

    /// What applying would change, in short (`api +worker -old URLs`: the
    /// changed services, `+` the new, `-` the removed), for a front-end's
    /// key hint; `None` when applying would change nothing.
    pub fn to_apply(&self) -> Option<String> {
        if self.nothing_to_apply() {
            return None;
        }
        let mut what: Vec<String> = self.changed.iter().map(|(n, _)| n.clone()).collect();
        what.extend(self.added.iter().map(|n| format!("+{n}")));
        what.extend(self.removed.iter().map(|n| format!("-{n}")));
        if self.urls {
            what.push("URLs".to_owned());
        }
        Some(what.join(" "))
    }

    /// Nothing changed at all.
    pub fn is_empty(&self) -> bool {
        self.nothing_to_apply() && self.not_applied.is_empty()
    }
}

/// `api (command, env), new service worker, removed service old, URLs,
/// watch rules (not applied to a running pod)`; `nothing` when empty.
impl fmt::Display for ProfileChanges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = self
            .changed
            .iter()
            .map(|(name, keys)| format!("{name} ({})", keys.join(", ")))
            .collect();
        parts.extend(self.added.iter().map(|name| format!("new service {name}")));
        parts.extend(self.removed.iter().map(|name| format!("removed service {name}")));
        if self.urls {
            parts.push("URLs".to_owned());
        }
        if !self.not_applied.is_empty() {
            parts.push(format!(
                "{} (applied when the pod starts again)",
                self.not_applied.join(", ")
            ));
        }
        if parts.is_empty() {
            return f.write_str("nothing");
        }
        f.write_str(&parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, arg: &str) -> ServiceSpec {
        ServiceSpec::new(name, "python3", [arg], "/repo")
    }

    #[test]
    fn each_key_is_named_once_in_profile_order() {
        let old = spec("api", "a.py");
        let mut new = spec("api", "b.py");
        new.command.env.insert("X".into(), "1".into());
        new.restart = omnidev_core::RestartPolicy::Never;
        new.command.cwd = "/repo/api".into();
        assert_eq!(old.differences(&new), ["command", "cwd", "env", "restart"]);
        assert!(old.differences(&old.clone()).is_empty());
    }

    #[test]
    fn a_spec_different_everywhere_differs_in_every_key() {
        let old = spec("api", "a.py");
        let mut new = spec("api", "b.py");
        new.command.cwd = "/repo/api".into();
        new.command.env.insert("X".into(), "1".into());
        new.depends_on.push(omnidev_core::Dependency {
            service: "db".into(),
            condition: omnidev_core::Condition::Ready,
        });
        new.readiness = Some(omnidev_core::Readiness {
            probe: omnidev_core::ProbeSpec::Tcp { address: "127.0.0.1:1".into() },
            interval: std::time::Duration::from_secs(1),
            timeout: std::time::Duration::from_secs(1),
            listener: None,
        });
        new.restart = omnidev_core::RestartPolicy::Never;
        new.stop.grace = std::time::Duration::from_secs(1);
        new.prepare.push(omnidev_core::PrepareStep {
            name: "install".into(),
            command: old.command.clone(),
            when: omnidev_core::PrepareWhen::Always,
            heartbeat: std::time::Duration::from_secs(5),
        });
        new.unavailable = Some("no uv".into());
        new.yields = true;
        assert_eq!(
            old.differences(&new),
            [
                "command",
                "cwd",
                "env",
                "depends-on",
                "ready",
                "restart",
                "stop",
                "prepare",
                "availability",
                "yield"
            ]
        );
    }

    #[test]
    fn added_removed_and_changed_services_in_order() {
        let old = [spec("web", "w"), spec("api", "a"), spec("old", "o")];
        let new = [spec("api", "a2"), spec("worker", "k"), spec("web", "w")];
        let changes = ProfileChanges::of_services(&old, &new);
        assert_eq!(changes.changed, [("api".to_owned(), vec!["command"])]);
        assert_eq!(changes.added, ["worker"]);
        assert_eq!(changes.removed, ["old"]);
        assert!(!changes.nothing_to_apply());
        assert_eq!(changes.to_string(), "api (command), new service worker, removed service old");
        let same = ProfileChanges::of_services(&old, &old);
        assert!(same.is_empty());
        assert_eq!(same.to_string(), "nothing");
    }
}

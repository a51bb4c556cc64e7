//! `<pod>/pod.toml`, the pod's record: its identity's id, its checkout and
//! its ports; written by port allocation ([`crate::ports`]), read by every
//! command that looks at a pod.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Named ports of a pod, e.g. `server = 6767`, `vite = 5173`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Ports(pub BTreeMap<String, u16>);

impl Ports {
    /// The ports as replica `index` of `service` sees them: from replica
    /// 2 on, `service`'s port is its own (`service.INDEX`, see
    /// [`crate::Profile::port_bases`]) when the pod has one.
    #[must_use]
    pub fn for_replica(&self, service: &str, index: u32) -> Ports {
        let mut ports = self.clone();
        if index > 1
            && let Some(own) = self.0.get(&crate::names::replica(service, index))
        {
            ports.0.insert(service.to_owned(), *own);
        }
        ports
    }

    /// The port called `name`, if any.
    ///
    /// ```
    /// let mut ports = omnidev_pod::Ports::default();
    /// ports.0.insert("server".into(), 6767);
    /// assert_eq!(ports.get("server"), Some(6767));
    /// assert_eq!(ports.get("vite"), None);
    /// ```
    pub fn get(&self, name: &str) -> Option<u16> {
        self.0.get(name).copied()
    }

    /// Every `(name, port)` pair, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u16)> {
        self.0.iter().map(|(n, p)| (n.as_str(), *p))
    }
}

/// The contents of `<pod>/pod.toml`.
///
/// ```toml
/// repo = "/home/ada/src/omnigent"
///
/// [ports]
/// server = 6767
/// vite = 5173
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct PodRecord {
    /// The id of the pod's identity ([`crate::pod::Marker`]), the same as
    /// in its `.omnidev-pod`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_id: Option<String>,
    /// The checkout this pod belongs to (for `omnidev ls`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<PathBuf>,
    /// The allocated ports.
    #[serde(default)]
    pub ports: Ports,
}

//! Port allocation: stable per pod, distinct across pods, persisted in `pod.toml`.
//!
//! Allocation (read the sibling pods' claims → probe → persist) runs under a
//! machine-wide lock file, `<cache root>/ports.lock`, so pods started at the
//! same instant never receive the same port. A port is *free* when a TCP
//! listener can bind it on `127.0.0.1` and on the wildcard address (IPv4, and
//! IPv6 where the machine has it — portpicker's check).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, Ipv6Addr, TcpListener};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::layout::{ALLOCATION_LOCK, POD_TOML};

/// Named ports of a pod, e.g. `server = 6767`, `vite = 5173`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Ports(pub BTreeMap<String, u16>);

impl Ports {
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
    /// The checkout this pod belongs to (for `omnidev ls`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<PathBuf>,
    /// The allocated ports.
    #[serde(default)]
    pub ports: Ports,
}

/// What [`allocate_ports`] needs.
#[derive(Debug, Clone)]
pub struct PortRequest<'a> {
    /// The cache root holding every pod (and the allocation lock).
    pub cache_root: &'a Path,
    /// This pod's directory (may lie outside `cache_root` with `--pod-dir`).
    pub pod_dir: &'a Path,
    /// The checkout, recorded in `pod.toml`.
    pub repo: &'a Path,
    /// Port names with their preferred bases, in profile order.
    pub bases: &'a [(String, u16)],
    /// Ports forced by the user (`--server-port`, `--port NAME=N`), honoured
    /// verbatim; a busy one is an error.
    pub overrides: &'a BTreeMap<String, u16>,
}

/// Whether `port` is free: a TCP listener can bind it on `127.0.0.1` and on
/// the wildcard address.
///
/// ```
/// let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
/// assert!(!omnidev_pod::ports::is_port_free(held.local_addr().unwrap().port()));
/// ```
pub fn is_port_free(port: u16) -> bool {
    if port == 0 || TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_err() {
        return false;
    }
    if ipv6_available() {
        portpicker::is_free_tcp(port)
    } else {
        TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)).is_ok()
    }
}

fn ipv6_available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| TcpListener::bind((Ipv6Addr::LOCALHOST, 0)).is_ok())
}

/// Reads the pod's persisted record without allocating or writing anything
/// (for `omnidev exec`, `status`, `ls`). A missing `pod.toml` is
/// [`Error::NoPorts`]; a corrupt one is [`Error::CorruptState`].
pub fn read_ports(pod_dir: &Path) -> Result<PodRecord> {
    crate::state::read_toml(&pod_dir.join(POD_TOML))?.ok_or_else(|| Error::NoPorts {
        pod_dir: pod_dir.to_path_buf(),
    })
}

/// Allocates the pod's ports and persists them in `<pod>/pod.toml`.
///
/// For each name, in order: an override is used verbatim (error if busy);
/// else the persisted port is reused when still free and not claimed by
/// another pod; else ports are probed upward from the base, skipping busy
/// ports, ports claimed in another pod's `pod.toml` under the cache root, and
/// ports already given to another name of this pod. Another pod's unreadable
/// `pod.toml` is skipped (it is not this pod's to judge); this pod's corrupt
/// `pod.toml` is an error and is left untouched.
///
/// ```
/// let tmp = tempfile::tempdir().unwrap();
/// let cache = tmp.path().join("cache");
/// let pod = cache.join("app-0000");
/// let bases = [("web".to_owned(), 20000)];
/// let request = omnidev_pod::PortRequest {
///     cache_root: &cache, pod_dir: &pod, repo: tmp.path(), bases: &bases,
///     overrides: &Default::default(),
/// };
/// let ports = omnidev_pod::allocate_ports(&request).unwrap();
/// assert!(ports.get("web").unwrap() >= 20000);
/// assert_eq!(omnidev_pod::read_ports(&pod).unwrap().ports, ports);
/// ```
pub fn allocate_ports(request: &PortRequest<'_>) -> Result<Ports> {
    for name in request.overrides.keys() {
        if !request.bases.iter().any(|(n, _)| n == name) {
            return Err(Error::UnknownPort {
                name: name.clone(),
                known: request.bases.iter().map(|(n, _)| n.clone()).collect(),
            });
        }
    }
    crate::pod::create_private_dir(request.cache_root)?;
    crate::pod::ensure_dir(request.pod_dir)?;
    let _guard = AllocationLock::acquire(request.cache_root)?;

    let own_path = request.pod_dir.join(POD_TOML);
    let own: Option<PodRecord> = crate::state::read_toml(&own_path)?;
    let claimed = sibling_claims(request.cache_root, request.pod_dir);

    let mut taken: BTreeSet<u16> = request.overrides.values().copied().collect();
    let mut ports = BTreeMap::new();
    for (name, &port) in request.overrides {
        if !is_port_free(port) {
            return Err(Error::PortBusy {
                name: name.clone(),
                port,
            });
        }
        ports.insert(name.clone(), port);
    }
    for (name, base) in request.bases {
        if ports.contains_key(name) {
            continue;
        }
        let usable = |p: u16, taken: &BTreeSet<u16>| {
            !claimed.contains(&p) && !taken.contains(&p) && is_port_free(p)
        };
        let persisted = own.as_ref().and_then(|r| r.ports.get(name));
        let port = match persisted {
            Some(p) if usable(p, &taken) => p,
            _ => (*base..=u16::MAX)
                .find(|&p| usable(p, &taken))
                .ok_or_else(|| Error::NoFreePort {
                    name: name.clone(),
                    base: *base,
                })?,
        };
        taken.insert(port);
        ports.insert(name.clone(), port);
    }

    let record = PodRecord {
        repo: Some(request.repo.to_path_buf()),
        ports: Ports(ports),
    };
    if own.as_ref() != Some(&record) {
        crate::state::write_toml(&own_path, &record)?;
    }
    Ok(record.ports)
}

/// Every port recorded in another pod's `pod.toml` under `cache_root`.
fn sibling_claims(cache_root: &Path, own_dir: &Path) -> BTreeSet<u16> {
    let own = own_dir
        .canonicalize()
        .unwrap_or_else(|_| own_dir.to_path_buf());
    let Ok(entries) = std::fs::read_dir(cache_root) else {
        return BTreeSet::new();
    };
    entries
        .filter_map(std::result::Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .filter(|p| p.canonicalize().unwrap_or_else(|_| p.clone()) != own)
        .filter_map(|p| {
            crate::state::read_toml::<PodRecord>(&p.join(POD_TOML))
                .ok()
                .flatten()
        })
        .flat_map(|r| r.ports.0.into_values())
        .collect()
}

/// The machine-wide allocation lock, held for the duration of one allocation.
#[derive(Debug)]
struct AllocationLock {
    file: std::fs::File,
}

impl AllocationLock {
    fn acquire(cache_root: &Path) -> Result<Self> {
        let path = cache_root.join(ALLOCATION_LOCK);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(Error::io("open the port allocation lock", &path))?;
        file.lock().map_err(Error::io("lock", &path))?;
        Ok(Self { file })
    }
}

impl Drop for AllocationLock {
    fn drop(&mut self) {
        let _ = self.file.unlock();
    }
}

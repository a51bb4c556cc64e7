//! Port allocation: stable per pod, distinct across pods, persisted in `pod.toml`.
//!
//! Allocation (read the other pods' claims → probe → persist) runs under
//! one per-user lock, `<runtime dir>/ports.lock` (see [`crate::runtime`]),
//! which does not depend on the cache root: pods of every `XDG_CACHE_HOME`
//! started at the same instant never receive the same port. Beside the lock,
//! `<runtime dir>/pods.toml` lists the pod directories that hold ports; a
//! pod's claim is whatever its own `pod.toml` says, so the registry never
//! disagrees with a pod (a listed pod whose `pod.toml` is gone is dropped).
//! Pods under the same cache root are also read directly, so a pod made
//! before the registry existed is still seen. A port is *free* when a TCP
//! listener can bind it on `127.0.0.1` and on the wildcard address (IPv4, and
//! IPv6 where the machine has it — portpicker's check).
//!
//! Across users: each user has their own lock and registry, so two users'
//! pods may be given the same free port at the same instant. The loser's
//! service then fails to bind; the supervisor sees that the port's
//! listener is not its service's, and the pod moves an unforced port to a
//! new one ([`relocate_port`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, Ipv6Addr, TcpListener};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::layout::{ALLOCATION_LOCK, POD_TOML, REGISTRY};
pub use crate::record::{PodRecord, Ports};

/// What [`allocate_ports`] needs.
#[derive(Debug, Clone)]
pub struct PortRequest<'a> {
    /// The cache root holding every pod of this `XDG_CACHE_HOME`.
    pub cache_root: &'a Path,
    /// The per-user runtime directory holding the allocation lock and the
    /// registry ([`crate::runtime::runtime_dir`]), shared by every cache root.
    pub runtime_dir: &'a Path,
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

/// The registry file's contents (`<runtime dir>/pods.toml`).
///
/// ```toml
/// pods = ["/home/ada/.cache/omnidev/omnigent-e3e2c4da"]
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Registry {
    /// Pod directories that hold ports (absolute paths).
    #[serde(default)]
    pub pods: BTreeSet<PathBuf>,
}

impl Registry {
    /// Parses a registry's text: an error (the parser's message) for
    /// anything that is not a registry omnidev would write — another
    /// format, an unknown key, a relative path.
    ///
    /// ```
    /// use omnidev_pod::ports::Registry;
    /// assert_eq!(Registry::parse("pods = [\"/p\"]\n").unwrap().pods.len(), 1);
    /// assert!(Registry::parse("pods = [\"relative\"]\n").is_err());
    /// assert!(Registry::parse("pods = [").is_err());
    /// ```
    pub fn parse(text: &str) -> std::result::Result<Self, String> {
        let registry: Self = toml::from_str(text).map_err(|e| e.to_string().trim().to_owned())?;
        if let Some(bad) = registry.pods.iter().find(|p| !p.is_absolute()) {
            return Err(format!("{} is not an absolute path", bad.display()));
        }
        Ok(registry)
    }

    /// Reads the registry at `path`: empty when missing;
    /// [`Error::CorruptRegistry`] when it does not parse (the file is left
    /// as it is, so no pod's claim is lost); any other error reading it is
    /// an error too, never taken for an empty registry.
    pub fn read(path: &Path) -> Result<Self> {
        let bytes = omnidev_core::fs::read_file(path, crate::state::MAX_STATE_BYTES)
            .map_err(Error::io("read the pod registry", path))?;
        let Some(bytes) = bytes else {
            return Ok(Self::default());
        };
        let corrupt =
            |message: String| Error::CorruptRegistry { path: path.to_path_buf(), message };
        let text =
            String::from_utf8(bytes).map_err(|_| corrupt("it is not UTF-8 text".to_owned()))?;
        Self::parse(&text).map_err(corrupt)
    }
}

/// Checks the forced ports given on the command line, in the order given
/// (`--server-port`, `--vite-port`, then each `--port NAME=N`): each names a
/// port of the profile, lies in 1–65535, is given once, and no two names
/// share a number.
///
/// ```
/// use omnidev_pod::ports::check_overrides;
/// let bases = [("a".to_owned(), 7000), ("b".to_owned(), 7100)];
/// let ok = check_overrides(&[("a".into(), 7711)], &bases).unwrap();
/// assert_eq!(ok["a"], 7711);
/// let clash = [("a".into(), 7711), ("b".into(), 7711)];
/// assert!(check_overrides(&clash, &bases).unwrap_err().to_string().contains("both"));
/// ```
pub fn check_overrides(
    given: &[(String, u16)],
    bases: &[(String, u16)],
) -> Result<BTreeMap<String, u16>> {
    let mut out: BTreeMap<String, u16> = BTreeMap::new();
    for (name, port) in given {
        if !bases.iter().any(|(n, _)| n == name) {
            return Err(Error::UnknownPort {
                name: name.clone(),
                known: bases.iter().map(|(n, _)| n.clone()).collect(),
            });
        }
        if *port == 0 {
            return Err(Error::PortConflict {
                message: format!("port 0 given for `{name}` is not a port (1-65535)"),
            });
        }
        if let Some(previous) = out.get(name)
            && previous != port
        {
            return Err(Error::PortConflict {
                message: format!("`{name}` is forced twice, to {previous} and to {port}"),
            });
        }
        if let Some((other, _)) = out.iter().find(|(n, p)| *n != name && *p == port) {
            return Err(Error::PortConflict {
                message: format!("`{other}` and `{name}` are both forced to port {port}"),
            });
        }
        out.insert(name.clone(), *port);
    }
    Ok(out)
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
/// (for `omnidev run`, `status`, `ls`). A missing `pod.toml` is
/// [`Error::NoPorts`]; a corrupt one is [`Error::CorruptState`].
pub fn read_ports(pod_dir: &Path) -> Result<PodRecord> {
    crate::state::read_toml(&pod_dir.join(POD_TOML))?
        .ok_or_else(|| Error::NoPorts { pod_dir: pod_dir.to_path_buf() })
}

/// Allocates the pod's ports and persists them in `<pod>/pod.toml`.
///
/// For each name, in order: an override is used verbatim (error if busy);
/// else the persisted port is reused when still free and not claimed by
/// another pod; else ports are probed upward from the base, skipping busy
/// ports, ports claimed by another pod (listed in the registry, or under the
/// same cache root), and ports already given to another name of this pod.
/// Another pod's unreadable `pod.toml` is skipped (it is not this pod's to
/// judge); this pod's corrupt `pod.toml` is an error and is left untouched.
/// The pod is then listed in the registry.
///
/// ```
/// let tmp = tempfile::tempdir().unwrap();
/// let cache = tmp.path().join("cache");
/// let pod = cache.join("app-0000");
/// let bases = [("web".to_owned(), 20000)];
/// let request = omnidev_pod::PortRequest {
///     cache_root: &cache, runtime_dir: &tmp.path().join("run"), pod_dir: &pod,
///     repo: tmp.path(), bases: &bases, overrides: &Default::default(),
/// };
/// let ports = omnidev_pod::allocate_ports(&request).unwrap();
/// assert!(ports.get("web").unwrap() >= 20000);
/// assert_eq!(omnidev_pod::read_ports(&pod).unwrap().ports, ports);
/// ```
pub fn allocate_ports(request: &PortRequest<'_>) -> Result<Ports> {
    let given: Vec<(String, u16)> =
        request.overrides.iter().map(|(n, p)| (n.clone(), *p)).collect();
    check_overrides(&given, request.bases)?;
    check_bases(request.bases)?;
    let allocation = Allocation::begin(request)?;
    let mut ports = BTreeMap::new();
    for (name, &port) in request.overrides {
        if !is_port_free(port) {
            // Named as at run time (a port held by another process).
            let holder = match omnidev_core::listener::owner(port, &[]) {
                omnidev_core::listener::Owner::Other(holder) => Some(holder.to_string()),
                _ => None,
            };
            return Err(Error::PortBusy { name: name.clone(), port, holder });
        }
        ports.insert(name.clone(), port);
    }
    // A persisted port is kept while it is still usable.
    let recorded = allocation.recorded();
    for (name, _) in request.bases {
        if ports.contains_key(name) {
            continue;
        }
        let taken = ports.values().copied().collect();
        if let Some(port) = recorded.get(name).filter(|p| allocation.usable(*p, &taken)) {
            ports.insert(name.clone(), port);
        }
    }
    allocation.fill(ports, BTreeSet::new())
}

/// The pod's ports for a command run beside it (`omnidev run`): those
/// recorded in `pod.toml`, exactly as recorded; or, for a pod that has none
/// yet, ports allocated as [`allocate_ports`] would (no overrides) and
/// persisted. A port the profile names but `pod.toml` lacks is allocated
/// and added; a recorded port is never changed, and `pod.toml` is not
/// rewritten when it already has every port. Runs under the allocation
/// lock, so an `omnidev up` starting at the same instant sees the same
/// ports.
///
/// ```
/// let tmp = tempfile::tempdir().unwrap();
/// let pod = tmp.path().join("pod");
/// let bases = [("web".to_owned(), 20000)];
/// let request = omnidev_pod::PortRequest {
///     cache_root: tmp.path(), runtime_dir: &tmp.path().join("run"), pod_dir: &pod,
///     repo: tmp.path(), bases: &bases, overrides: &Default::default(),
/// };
/// let first = omnidev_pod::ports::ensure_ports(&request).unwrap();
/// let written = std::fs::read(pod.join("pod.toml")).unwrap();
/// // Even when the port is busy now, the recorded one stays.
/// let _busy = std::net::TcpListener::bind(("127.0.0.1", first.get("web").unwrap()));
/// assert_eq!(omnidev_pod::ports::ensure_ports(&request).unwrap(), first);
/// assert_eq!(std::fs::read(pod.join("pod.toml")).unwrap(), written);
/// ```
pub fn ensure_ports(request: &PortRequest<'_>) -> Result<Ports> {
    check_bases(request.bases)?;
    let allocation = Allocation::begin(request)?;
    let recorded = allocation.recorded();
    if allocation.own.is_some()
        && request.bases.iter().all(|(name, _)| recorded.get(name).is_some())
    {
        return Ok(recorded);
    }
    allocation.fill(recorded.0, BTreeSet::new())
}

/// The ports of a running pod whose profile changed (`omnidev
/// reload-profile`), under the allocation lock: a recorded port is kept
/// (its service may hold it) unless its name is in `rebased` (its base
/// changed: it is probed again from the new base); a forced port stays as
/// forced; a name the profile did not have is probed from its base; a
/// name the profile no longer has is dropped, freeing its port. Persisted
/// in `pod.toml`.
///
/// ```
/// use std::collections::{BTreeMap, BTreeSet};
/// let tmp = tempfile::tempdir().unwrap();
/// let (pod, run, forced) = (tmp.path().join("pod"), tmp.path().join("run"), BTreeMap::new());
/// let request = |bases| omnidev_pod::PortRequest {
///     cache_root: tmp.path(), runtime_dir: &run, pod_dir: &pod,
///     repo: tmp.path(), bases, overrides: &forced,
/// };
/// let web = [("web".to_owned(), 20000)];
/// let first = omnidev_pod::allocate_ports(&request(&web)).unwrap();
/// let bases = [("web".to_owned(), 20000), ("api".to_owned(), 21000)];
/// let next = omnidev_pod::ports::update_ports(&request(&bases), &BTreeSet::new()).unwrap();
/// assert_eq!(next.get("web"), first.get("web"));
/// assert!(next.get("api").unwrap() >= 21000);
/// // `web` moved to another base: probed again from it.
/// let moved = [("web".to_owned(), 22000), ("api".to_owned(), 21000)];
/// let rebased = BTreeSet::from(["web".to_owned()]);
/// let last = omnidev_pod::ports::update_ports(&request(&moved), &rebased).unwrap();
/// assert!(last.get("web").unwrap() >= 22000);
/// assert_eq!(last.get("api"), next.get("api"));
/// ```
pub fn update_ports(request: &PortRequest<'_>, rebased: &BTreeSet<String>) -> Result<Ports> {
    check_bases(request.bases)?;
    let allocation = Allocation::begin(request)?;
    let recorded = allocation.recorded();
    let ports = (request.bases.iter())
        .filter_map(|(name, _)| {
            let kept = recorded.get(name).filter(|_| !rebased.contains(name));
            Some((name.clone(), request.overrides.get(name).copied().or(kept)?))
        })
        .collect();
    allocation.fill(ports, BTreeSet::new())
}

/// Moves the unforced port `name` of a running pod, lost to another
/// process (`holder`, as people read it) before the pod's service bound it,
/// to a new free port: under the allocation lock, probing up from its base
/// (skipping the lost port, the pod's other ports and every other pod's
/// claims), persisted in `pod.toml`. The pod's other ports are kept as they
/// are (its own services hold them). A forced port is never moved:
/// [`Error::ForcedPortTaken`] names the holder.
///
/// ```
/// let tmp = tempfile::tempdir().unwrap();
/// let pod = tmp.path().join("pod");
/// let bases = [("web".to_owned(), 20000)];
/// let request = omnidev_pod::PortRequest {
///     cache_root: tmp.path(), runtime_dir: &tmp.path().join("run"), pod_dir: &pod,
///     repo: tmp.path(), bases: &bases, overrides: &Default::default(),
/// };
/// let first = omnidev_pod::allocate_ports(&request).unwrap().get("web").unwrap();
/// let moved = omnidev_pod::ports::relocate_port(&request, "web", "pid 1 (init)").unwrap();
/// assert_ne!(moved, first);
/// assert_eq!(omnidev_pod::read_ports(&pod).unwrap().ports.get("web"), Some(moved));
/// ```
pub fn relocate_port(request: &PortRequest<'_>, name: &str, holder: &str) -> Result<u16> {
    if !request.bases.iter().any(|(n, _)| n == name) {
        return Err(Error::UnknownPort {
            name: name.to_owned(),
            known: request.bases.iter().map(|(n, _)| n.clone()).collect(),
        });
    }
    if let Some(&forced) = request.overrides.get(name) {
        return Err(Error::ForcedPortTaken {
            name: name.to_owned(),
            port: forced,
            holder: holder.to_owned(),
        });
    }
    let allocation = Allocation::begin(request)?;
    let mut ports = allocation.recorded().0;
    // Probed past the lost port: its holder keeps it.
    let lost = ports.remove(name);
    let ports = allocation.fill(ports, lost.into_iter().collect())?;
    Ok(ports.get(name).unwrap_or_default())
}

/// The pod directories listed in the per-user registry under
/// `runtime_dir` (empty when it does not exist yet; a corrupt one is
/// [`Error::CorruptRegistry`]).
pub fn registered_pods(runtime_dir: &Path) -> Result<BTreeSet<PathBuf>> {
    Ok(Registry::read(&runtime_dir.join(REGISTRY))?.pods)
}

/// Frees the ports of the pods `pod_dirs` in the per-user registry (`omnidev
/// gc`): under the allocation lock, they are taken out of `pods.toml`,
/// which is replaced atomically. A registry that does not exist is left so.
///
/// ```
/// let tmp = tempfile::tempdir().unwrap();
/// let pod = tmp.path().join("pod");
/// let bases = [("web".to_owned(), 20000)];
/// let request = omnidev_pod::PortRequest {
///     cache_root: tmp.path(), runtime_dir: &tmp.path().join("run"), pod_dir: &pod,
///     repo: tmp.path(), bases: &bases, overrides: &Default::default(),
/// };
/// omnidev_pod::allocate_ports(&request).unwrap();
/// let run = tmp.path().join("run");
/// assert_eq!(omnidev_pod::ports::registered_pods(&run).unwrap().len(), 1);
/// omnidev_pod::ports::unregister(&run, &[pod.canonicalize().unwrap()]).unwrap();
/// assert!(omnidev_pod::ports::registered_pods(&run).unwrap().is_empty());
/// ```
pub fn unregister(runtime_dir: &Path, pod_dirs: &[PathBuf]) -> Result<()> {
    let path = runtime_dir.join(REGISTRY);
    if matches!(std::fs::symlink_metadata(runtime_dir), Err(e) if e.kind() == std::io::ErrorKind::NotFound)
    {
        return Ok(());
    }
    let _lock = AllocationLock::acquire(runtime_dir)?;
    let mut registry = Registry::read(&path)?;
    let before = registry.pods.len();
    registry.pods.retain(|dir| !pod_dirs.iter().any(|gone| gone == dir || *gone == canonical(dir)));
    if registry.pods.len() != before {
        crate::state::write_toml(&path, &registry)?;
    }
    Ok(())
}

/// A base of 0 would probe from port 0, which no service can use.
fn check_bases(bases: &[(String, u16)]) -> Result<()> {
    match bases.iter().find(|(_, base)| *base == 0) {
        Some((name, _)) => Err(Error::PortConflict {
            message: format!("the base port of `{name}` is 0; bases are 1-65535"),
        }),
        None => Ok(()),
    }
}

/// One allocation in progress: the lock held, this pod's record and every
/// other pod's claims read.
struct Allocation<'r> {
    request: &'r PortRequest<'r>,
    own: Option<PodRecord>,
    claimed: BTreeSet<u16>,
    registry: Registry,
    _lock: AllocationLock,
}

impl<'r> Allocation<'r> {
    fn begin(request: &'r PortRequest<'r>) -> Result<Self> {
        crate::runtime::ensure_private(request.runtime_dir)?;
        crate::pod::ensure_dir(request.pod_dir)?;
        let lock = AllocationLock::acquire(request.runtime_dir)?;
        let own: Option<PodRecord> = crate::state::read_toml(&request.pod_dir.join(POD_TOML))?;
        let registry_path = request.runtime_dir.join(REGISTRY);
        // A corrupt registry is an error: rewritten, it would drop every
        // other pod's claim.
        let mut registry = Registry::read(&registry_path)?;
        let own_dir = canonical(request.pod_dir);
        // A listed pod whose `pod.toml` is gone holds no port any more; one
        // that cannot be looked at keeps its place.
        registry.pods.retain(|dir| {
            !matches!(std::fs::symlink_metadata(dir.join(POD_TOML)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound)
        });
        let mut others: BTreeSet<PathBuf> =
            registry.pods.iter().filter(|dir| canonical(dir) != own_dir).cloned().collect();
        others.extend(sibling_pods(request.cache_root, &own_dir));
        let claimed = others
            .iter()
            .filter_map(|dir| {
                crate::state::read_toml::<PodRecord>(&dir.join(POD_TOML)).ok().flatten()
            })
            .flat_map(|r| r.ports.0.into_values())
            .collect();
        registry.pods.insert(own_dir);
        Ok(Self { request, own, claimed, registry, _lock: lock })
    }

    /// The ports this pod's `pod.toml` records (none when it has none).
    fn recorded(&self) -> Ports {
        self.own.as_ref().map(|own| own.ports.clone()).unwrap_or_default()
    }

    fn usable(&self, port: u16, taken: &BTreeSet<u16>) -> bool {
        !self.claimed.contains(&port) && !taken.contains(&port) && is_port_free(port)
    }

    /// The first usable port from `base` up.
    fn probe(&self, name: &str, base: u16, taken: &BTreeSet<u16>) -> Result<u16> {
        (base..=u16::MAX)
            .find(|&p| self.usable(p, taken))
            .ok_or_else(|| Error::NoFreePort { name: name.to_owned(), base })
    }

    /// `ports`, with each name of the request it lacks given the first
    /// usable port from its base up (past every port in `ports`, those
    /// given before it and `taken`), persisted ([`Allocation::commit`]).
    fn fill(self, mut ports: BTreeMap<String, u16>, mut taken: BTreeSet<u16>) -> Result<Ports> {
        taken.extend(ports.values());
        for (name, base) in self.request.bases {
            if !ports.contains_key(name) {
                let port = self.probe(name, *base, &taken)?;
                taken.insert(port);
                ports.insert(name.clone(), port);
            }
        }
        self.commit(Ports(ports))
    }

    /// Persists `ports` in `pod.toml` (when they changed) and the registry.
    fn commit(self, ports: Ports) -> Result<Ports> {
        let record = PodRecord {
            pod_id: crate::pod::pod_id(self.request.pod_dir),
            repo: Some(self.request.repo.to_path_buf()),
            ports,
        };
        if self.own.as_ref() != Some(&record) {
            crate::state::write_toml(&self.request.pod_dir.join(POD_TOML), &record)?;
        }
        crate::state::write_toml(&self.request.runtime_dir.join(REGISTRY), &self.registry)?;
        Ok(record.ports)
    }
}

fn canonical(dir: &Path) -> PathBuf {
    dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf())
}

/// Every other pod directory under `cache_root`.
fn sibling_pods(cache_root: &Path, own: &Path) -> Vec<PathBuf> {
    let dirs = crate::pod::cache_dirs(cache_root).unwrap_or_default();
    dirs.iter().map(|dir| canonical(dir)).filter(|dir| dir != own).collect()
}

/// The per-user allocation lock, held for the duration of one allocation.
#[derive(Debug)]
struct AllocationLock {
    _held: std::fs::File,
}

impl AllocationLock {
    fn acquire(runtime_dir: &Path) -> Result<Self> {
        let path = runtime_dir.join(ALLOCATION_LOCK);
        // Through the runtime directory's handle: a link planted as
        // `ports.lock` is refused, never followed.
        let file = omnidev_core::fs::Dir::open(runtime_dir)
            .and_then(|dir| {
                dir.open_file(
                    Path::new(ALLOCATION_LOCK),
                    omnidev_core::fs::OpenOptions::ReadWriteCreate,
                )
            })
            .map_err(Error::io("open the port allocation lock", &path))?;
        file.lock().map_err(Error::io("lock", &path))?;
        Ok(Self { _held: file })
    }
}

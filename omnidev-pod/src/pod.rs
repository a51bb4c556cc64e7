//! The pod directory: where one checkout's state lives, and its layout.

use std::ffi::OsString;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use omnidev_core::fs::{Dir, Kind};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::layout::{
    CONTROL_SOCKET, DB_ENGINE_FILE, DETACHED_LOG, LOCK_FILE, LOG_SUFFIX, LOGS_DIR, MARKER,
    POD_TOML, RUN_DIR, SNAPSHOTS_DIR, STATE_FILE, TMP_DIR,
};
use crate::runtime::Private;

/// The machine-wide cache root, `${XDG_CACHE_HOME:-$HOME/.cache}/omnidev`,
/// computed from the given variable values (an empty or relative
/// `XDG_CACHE_HOME` counts as unset, as the XDG specification says).
///
/// ```
/// use std::path::PathBuf;
/// let root = omnidev_pod::pod::cache_root_from(None, Some("/home/ada".into())).unwrap();
/// assert_eq!(root, PathBuf::from("/home/ada/.cache/omnidev"));
/// let root = omnidev_pod::pod::cache_root_from(Some("/xdg".into()), Some("/home/ada".into())).unwrap();
/// assert_eq!(root, PathBuf::from("/xdg/omnidev"));
/// let root = omnidev_pod::pod::cache_root_from(Some("rel".into()), Some("/home/ada".into())).unwrap();
/// assert_eq!(root, PathBuf::from("/home/ada/.cache/omnidev"));
/// ```
pub fn cache_root_from(
    xdg_cache_home: Option<OsString>,
    home: Option<OsString>,
) -> Result<PathBuf> {
    omnidev_core::fs::cache_root_from(xdg_cache_home, home).ok_or(Error::NoCacheDir)
}

/// The cache root from this process's `XDG_CACHE_HOME` and `HOME`.
/// An existing cache root not owned by this user, or writable by others,
/// is refused ([`crate::runtime::check_private`]).
pub fn cache_root() -> Result<PathBuf> {
    let root = cache_root_from(std::env::var_os("XDG_CACHE_HOME"), std::env::var_os("HOME"))?;
    crate::runtime::check_private(&root, Private::CacheRoot)?;
    Ok(root)
}

/// A stable 8-hex-digit hash of a path: the first 4 bytes of the SHA-256 of
/// the path's raw bytes (as given; pass the canonical repo root), in
/// lower-case hex. This algorithm is part of the on-disk format and must never
/// change, or every user's pods would move.
///
/// ```
/// assert_eq!(omnidev_pod::pod::hash8(std::path::Path::new("/")).len(), 8);
/// ```
pub fn hash8(path: &Path) -> String {
    crate::ids::path_hash(path, 4)
}

/// The longest checkout name kept in a pod directory's name, in bytes
/// (the name is `<basename>-<hash8>`, and a file name may be 255 bytes).
pub const MAX_BASENAME: usize = 64;

/// The default pod directory of a checkout: `<cache_root>/<basename>-<hash8>`,
/// the basename cut to [`MAX_BASENAME`] bytes (at a character boundary) so
/// the name always fits a file name; the hash of the whole path keeps two
/// checkouts with the same long prefix apart. Names that fit are unchanged.
///
/// ```
/// use std::path::Path;
/// let dir = omnidev_pod::pod::default_pod_dir(Path::new("/cache/omnidev"), Path::new("/src/omnigent"));
/// assert!(dir.starts_with("/cache/omnidev"));
/// assert!(dir.file_name().unwrap().to_str().unwrap().starts_with("omnigent-"));
/// let long = Path::new("/src").join("é".repeat(125));
/// let name = omnidev_pod::pod::default_pod_dir(Path::new("/c"), &long);
/// assert!(name.file_name().unwrap().len() <= 64 + 9);
/// ```
pub fn default_pod_dir(cache_root: &Path, repo_root: &Path) -> PathBuf {
    let base = repo_root
        .file_name()
        .map_or_else(|| "root".to_owned(), |n| n.to_string_lossy().into_owned());
    let mut cut = base.len().min(MAX_BASENAME);
    while !base.is_char_boundary(cut) {
        cut -= 1;
    }
    cache_root.join(format!("{}-{}", &base[..cut], hash8(repo_root)))
}

/// The directories in the cache root, where pods are made by default, in
/// name order, read through its [`Dir`] handle (a link there is not
/// followed: the cache root is omnidev's own); none while it does not
/// exist.
pub fn cache_dirs(cache_root: &Path) -> std::io::Result<Vec<PathBuf>> {
    let Some(root) = omnidev_core::fs::found(Dir::open(cache_root))? else {
        return Ok(Vec::new());
    };
    // The seed cache beside the pods is none of them.
    let is_dir = |name: &OsString| {
        name != crate::layout::SEEDS_DIR
            && matches!(root.stat(Path::new(name)), Ok(Some(entry)) if entry.kind == Kind::Dir)
    };
    Ok(root.entries()?.into_iter().filter(is_dir).map(|name| cache_root.join(name)).collect())
}

/// Lexically normalises `value`, a path meant to stay inside a base
/// directory (the pod, or the checkout for a service's `cwd`): `.` parts
/// are dropped and `a/..` pairs folded. Refused, with the reason: an
/// empty value, an absolute path, and a path whose `..` climbs out of the
/// base. The result may be empty (the base itself).
///
/// ```
/// use std::path::Path;
/// use omnidev_pod::pod::relative_inside;
/// assert_eq!(relative_inside("a/./b/../c").unwrap(), Path::new("a/c"));
/// assert!(relative_inside("a/../../b").is_err());
/// assert!(relative_inside("/abs/path").is_err());
/// assert!(relative_inside("../x").is_err());
/// ```
pub fn relative_inside(value: &str) -> std::result::Result<PathBuf, &'static str> {
    use std::path::Component;
    if value.is_empty() {
        return Err("the path is empty");
    }
    let mut out = PathBuf::new();
    for component in Path::new(value).components() {
        match component {
            Component::Prefix(_) | Component::RootDir => {
                return Err("an absolute path is not allowed here; give a relative one");
            }
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return Err("`..` leads out of the directory it is relative to");
                }
            }
            Component::Normal(part) => out.push(part),
        }
    }
    Ok(out)
}

/// Creates `dir` and its missing parents, new ones with mode 0700.
pub(crate) fn ensure_dir(dir: &Path) -> Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(Error::io("create the directory", dir))
}

/// The fixed text of the marker an omnidev before the pod identity wrote:
/// such a marker is still taken as omnidev's (it is replaced by an identity
/// at the pod's next `omnidev up`).
const LEGACY_MARKER_TEXT: &str = "This directory is an omnidev pod; `omnidev clean` removes it.\n";

/// The first line of every marker.
const MARKER_HEADER: &str =
    "# This directory is an omnidev pod; `omnidev clean` removes what omnidev made in it.\n";

/// The most a marker may hold.
const MAX_MARKER_BYTES: u64 = 64 * 1024;

/// The pod identity omnidev writes into each pod it creates
/// (`<pod>/.omnidev-pod`, TOML): a random id, the directory it was written
/// for, and the sub-directories omnidev made in it (the profile's `[pod]
/// dirs`), which are all `omnidev clean` removes besides the fixed layout.
///
/// ```toml
/// id = "5f0c2b7e9a1d4c3b8e6f0a2d4c6b8e0f"
/// dir = "/home/ada/.cache/omnidev/omnigent-e3e2c4da"
/// made = ["data/omnigent", "artifacts", "config", "logs"]
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Marker {
    /// 32 lower-case hex digits, random, also recorded in `pod.toml`.
    pub id: String,
    /// The canonical directory the marker was written for: a copy of the
    /// pod (`cp -a`) or a moved one is somewhere else.
    pub dir: PathBuf,
    /// The sub-directories omnidev made, relative to the pod.
    #[serde(default)]
    pub made: Vec<String>,
}

impl Marker {
    /// Parses a marker's text; `None` for anything omnidev did not write
    /// (another format, an id that is not 32 hex digits, a relative `dir`,
    /// a `made` entry leading out of the pod).
    ///
    /// ```
    /// use omnidev_pod::pod::Marker;
    /// let text = "id = \"0123456789abcdef0123456789abcdef\"\ndir = \"/p\"\nmade = [\"logs\"]\n";
    /// assert_eq!(Marker::parse(text).unwrap().made, ["logs"]);
    /// assert!(Marker::parse("id = \"x\"\ndir = \"/p\"\n").is_none());
    /// assert!(Marker::parse("id = \"0123456789abcdef0123456789abcdef\"\ndir = \"/p\"\nmade = [\"../x\"]\n").is_none());
    /// ```
    pub fn parse(text: &str) -> Option<Self> {
        let marker: Self = toml::from_str(text).ok()?;
        let id_ok = marker.id.len() == 32
            && marker.id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        let made_ok = marker.made.iter().all(|m| {
            relative_inside(m).is_ok_and(|r| !r.as_os_str().is_empty() && r == Path::new(m))
        });
        (id_ok && marker.dir.is_absolute() && made_ok).then_some(marker)
    }

    /// The marker's file text.
    pub fn text(&self) -> Result<String> {
        let body = toml::to_string(self)
            .map_err(|e| Error::Serialise { what: "the pod marker", message: e.to_string() })?;
        Ok(format!("{MARKER_HEADER}{body}"))
    }
}

/// A new random pod id (32 hex digits).
fn new_id() -> Result<String> {
    crate::ids::random_hex(16).map_err(Error::io("read", "the system's random source"))
}

/// Whose pod a directory carrying omnidev's marker is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// Its marker was written for this very directory.
    Own(Marker),
    /// Its marker was written for another directory: a copy (`cp -a`) or
    /// a moved pod. Its files are its own; what the original owns (its
    /// control socket, its ports) is never touched through it.
    Copy(Marker),
    /// The fixed marker of an omnidev older than the identity.
    Legacy,
}

/// What a directory given as a pod directory is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DirKind {
    /// Nothing there yet.
    Missing,
    /// An empty directory: omnidev may make it a pod.
    Empty,
    /// A directory carrying omnidev's pod identity ([`MARKER`]).
    Pod(Identity),
    /// No marker, but a `pod.toml` in omnidev's format: a pod made before
    /// the marker existed. `omnidev up` adopts it (writes its identity);
    /// `omnidev clean` refuses it until then.
    Unmarked,
    /// Anything else (a file, a directory with other contents, a marker
    /// omnidev did not write), with the reason: never written to,
    /// chmod-ed or removed.
    Other(String),
}

/// What `dir` is, the one pod check used by `up`, `up --clean`,
/// `--pod-dir`, `omnidev clean` and `omnidev gc`. A symbolic link is
/// followed only when it names the pod directory itself. Permission and
/// I/O errors are errors, never taken for a missing directory.
///
/// ```
/// use omnidev_pod::pod::{examine, DirKind};
/// let tmp = tempfile::tempdir().unwrap();
/// assert_eq!(examine(&tmp.path().join("new")).unwrap(), DirKind::Missing);
/// assert_eq!(examine(tmp.path()).unwrap(), DirKind::Empty);
/// std::fs::write(tmp.path().join("state.json"), "{}").unwrap();
/// assert!(matches!(examine(tmp.path()).unwrap(), DirKind::Other(_)));
/// ```
pub fn examine(dir: &Path) -> Result<DirKind> {
    let Some(meta) =
        omnidev_core::fs::found(std::fs::metadata(dir)).map_err(Error::io("examine", dir))?
    else {
        return Ok(DirKind::Missing);
    };
    if !meta.is_dir() {
        return Ok(DirKind::Other("it is not a directory".to_owned()));
    }
    let handle = Dir::open(dir).map_err(Error::io("open", dir))?;
    let marker_path = dir.join(MARKER);
    match handle.stat(Path::new(MARKER)).map_err(Error::io("examine", &marker_path))? {
        Some(entry) if entry.kind == Kind::File => {}
        Some(_) => {
            return Ok(DirKind::Other(format!("its {MARKER} is not a regular file")));
        }
        None => {
            let entries = handle.entries().map_err(Error::io("read", dir))?;
            if entries.is_empty() {
                return Ok(DirKind::Empty);
            }
            let record: Result<Option<crate::record::PodRecord>> =
                crate::state::read_toml(&dir.join(POD_TOML));
            return Ok(match record {
                Ok(Some(_)) => DirKind::Unmarked,
                _ => DirKind::Other(format!("it holds no {MARKER} identity")),
            });
        }
    }
    let bytes = handle
        .read(Path::new(MARKER), MAX_MARKER_BYTES)
        .map_err(Error::io("read", &marker_path))?
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes);
    if text == LEGACY_MARKER_TEXT {
        return Ok(DirKind::Pod(Identity::Legacy));
    }
    let Some(marker) = Marker::parse(&text) else {
        return Ok(DirKind::Other(format!("its {MARKER} is not one omnidev wrote")));
    };
    // `pod.toml` records the id too: a marker put beside another pod's
    // record is not that pod's.
    if let Ok(Some(record)) =
        crate::state::read_toml::<crate::record::PodRecord>(&dir.join(POD_TOML))
        && let Some(recorded) = record.pod_id.as_deref()
        && recorded != marker.id
    {
        return Ok(DirKind::Other(format!(
            "its {MARKER} (pod {}) and its {POD_TOML} (pod {recorded}) disagree",
            marker.id
        )));
    }
    let here = dir.canonicalize().map_err(Error::io("resolve", dir))?;
    Ok(DirKind::Pod(if marker.dir == here {
        Identity::Own(marker)
    } else {
        Identity::Copy(marker)
    }))
}

/// The id of the pod at `dir`, when it carries its own identity (for
/// `pod.toml`).
pub fn pod_id(dir: &Path) -> Option<String> {
    match examine(dir) {
        Ok(DirKind::Pod(Identity::Own(marker))) => Some(marker.id),
        _ => None,
    }
}

/// Makes the new pod `dir` (missing or empty, as `kind` says) appear
/// whole: its identity is written in a private sibling directory renamed
/// into place, so that an `up` racing this one finds no pod or a whole one,
/// never a directory without its identity. When another one got there
/// first, that pod is kept and this one's made part removed.
fn appear_whole(dir: &Path, kind: &DirKind, made: &[String]) -> Result<()> {
    let name = dir.file_name().ok_or_else(|| not_a_pod(dir, "it names no directory"))?;
    let target = if *kind == DirKind::Empty {
        dir.canonicalize().map_err(Error::io("resolve", dir))?
    } else {
        let parent = dir.parent().unwrap_or(Path::new("/"));
        ensure_dir(parent)?;
        parent.canonicalize().map_err(Error::io("resolve", parent))?.join(name)
    };
    let marker = Marker { id: new_id()?, dir: target.clone(), made: made.to_vec() };
    let mut staging = target.clone().into_os_string();
    staging.push(format!(".{}.omnidev-tmp", marker.id));
    let staging = PathBuf::from(staging);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&staging)
        .map_err(Error::io("create the directory", &staging))?;
    let written = marker.text().and_then(|text| {
        Dir::open(&staging)
            .and_then(|dir| dir.write_atomic(Path::new(MARKER), text.as_bytes()))
            .map_err(Error::io("write", staging.join(MARKER)))
    });
    let moved = written.and_then(|()| match std::fs::rename(&staging, &target) {
        Ok(()) => Ok(()),
        // A racing `up` made it first (a directory that is not empty now).
        Err(e)
            if target.is_dir()
                && e.raw_os_error()
                    .is_some_and(|n| [libc::ENOTEMPTY, libc::EEXIST].contains(&n)) =>
        {
            Ok(())
        }
        Err(e) => Err(Error::io("move into place", &target)(e)),
    });
    if staging.exists() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    moved
}

/// A copy becoming a pod of its own drops what describes the original:
/// its `state.json` (the original's processes, which this pod must never
/// stop) and its `control.sock` link (to the original's socket). The link
/// itself is removed, never what it points to.
fn forget_the_original(dir: &Path) -> Result<()> {
    let handle = Dir::open(dir).map_err(Error::io("open", dir))?;
    for name in [STATE_FILE, CONTROL_SOCKET] {
        handle.remove_file(Path::new(name)).map_err(Error::io("remove", dir.join(name)))?;
    }
    Ok(())
}

/// Records the pod's new `id` in an existing `pod.toml` (a copy's, or one
/// of a pod made before the identity), so the two agree at once.
fn record_id(dir: &Path, id: &str) -> Result<()> {
    let path = dir.join(POD_TOML);
    let Ok(Some(mut record)) = crate::state::read_toml::<crate::record::PodRecord>(&path) else {
        return Ok(());
    };
    if record.pod_id.as_deref() == Some(id) {
        return Ok(());
    }
    record.pod_id = Some(id.to_owned());
    crate::state::write_toml(&path, &record)
}

fn not_a_pod(dir: &Path, reason: impl Into<String>) -> Error {
    Error::NotAPod { path: dir.to_path_buf(), reason: reason.into() }
}

/// The names at the top of a pod that omnidev itself makes (besides the
/// `made` sub-directories its marker lists): all `omnidev clean` removes.
const LAYOUT: &[&str] =
    &[POD_TOML, LOCK_FILE, STATE_FILE, CONTROL_SOCKET, LOGS_DIR, DB_ENGINE_FILE, SNAPSHOTS_DIR];

/// Whether `name`, at the top of a pod, is a temporary file omnidev left
/// (an atomic write's, or the control socket pointer's being replaced).
fn is_omnidev_temp(name: &str) -> bool {
    (name.starts_with(".omnidev-") || name.starts_with(&format!("{CONTROL_SOCKET}.")))
        && Path::new(name).extension().is_some_and(|e| e == "tmp")
}

/// What [`Pod::clean`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cleaned {
    /// The directory itself was removed (nothing else was left in it).
    pub removed: bool,
    /// Names left in the directory because omnidev did not make them.
    pub kept: Vec<String>,
    /// The pod this one is a copy of, when it is one: nothing of the
    /// original was touched.
    pub copy_of: Option<PathBuf>,
}

/// A checkout's pod directory and the paths inside it.
///
/// ```
/// let tmp = tempfile::tempdir().unwrap();
/// let pod = omnidev_pod::Pod::create(tmp.path().join("pod"), &["logs".into()]).unwrap();
/// assert!(pod.dir().join("logs").is_dir());
/// assert_eq!(pod.state_file(), tmp.path().join("pod/state.json"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    dir: PathBuf,
}

impl Pod {
    /// A handle on `dir` without touching the file system.
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// Creates `dir` (mode 0700, parents as needed) with its identity
    /// ([`Marker`]), its `logs` directory and the profile's sub-directories
    /// `dirs` (relative to it, checked by [`relative_inside`]). An existing
    /// pod or empty directory is kept and its mode tightened to 0700; a pod
    /// made before the identity gets one, and so does a copy of another pod
    /// (it becomes a pod of its own); any other existing directory is
    /// refused untouched ([`Error::NotAPod`]). A symbolic link met on the
    /// way to a sub-directory is never followed: it is an
    /// [`Error::OutsidePod`].
    pub fn create(dir: impl Into<PathBuf>, dirs: &[String]) -> Result<Self> {
        let dir = dir.into();
        // Checked before anything is created or chmod-ed: a directory that
        // is not a pod is the user's, and stays exactly as it was.
        let mut kind = examine(&dir)?;
        if let DirKind::Other(reason) = kind {
            return Err(not_a_pod(&dir, reason));
        }
        crate::runtime::check_private(&dir, Private::Pod)?;
        let mut made = vec![LOGS_DIR.to_owned(), RUN_DIR.to_owned(), TMP_DIR.to_owned()];
        for sub in dirs {
            let relative = relative_inside(sub).map_err(|reason| Error::OutsidePod {
                path: dir.join(sub),
                reason: reason.to_owned(),
            })?;
            let relative = relative.to_string_lossy().into_owned();
            if !relative.is_empty() && !made.contains(&relative) {
                made.push(relative);
            }
        }
        if matches!(kind, DirKind::Missing | DirKind::Empty) {
            appear_whole(&dir, &kind, &made)?;
            // Ours, or the one a racing `up` made first.
            kind = examine(&dir)?;
            if let DirKind::Other(reason) = kind {
                return Err(not_a_pod(&dir, reason));
            }
        }
        crate::runtime::make_private(&dir, Private::Pod)?;
        let is_copy = matches!(kind, DirKind::Pod(Identity::Copy(_)));
        let marker = match kind {
            DirKind::Pod(Identity::Own(mut marker)) => {
                let before = marker.made.len();
                for m in &made {
                    if !marker.made.contains(m) {
                        marker.made.push(m.clone());
                    }
                }
                (marker.made.len() != before).then_some(marker)
            }
            _ => Some(Marker {
                id: new_id()?,
                dir: dir.canonicalize().map_err(Error::io("resolve", &dir))?,
                made: made.clone(),
            }),
        };
        if is_copy {
            forget_the_original(&dir)?;
        }
        if let Some(marker) = marker {
            let path = dir.join(MARKER);
            let text = marker.text()?;
            Dir::open(&dir)
                .and_then(|handle| handle.write_atomic(Path::new(MARKER), text.as_bytes()))
                .map_err(|source| Error::Write { path, source })?;
            record_id(&dir, &marker.id)?;
        }
        let pod = Self { dir };
        for sub in &made {
            pod.create_dir(Path::new(sub))?;
        }
        Ok(pod)
    }

    /// Creates the directory `relative` (already checked by
    /// [`relative_inside`]) inside the pod (created first when missing),
    /// one component at a time through the pod's directory handle, each
    /// new one with mode 0700, refusing to pass through a symbolic link or
    /// a file. Returns its path.
    pub fn create_dir(&self, relative: &Path) -> Result<PathBuf> {
        ensure_dir(&self.dir)?;
        let path = self.dir.join(relative);
        if relative.as_os_str().is_empty() {
            return Ok(path);
        }
        let handle = Dir::open(&self.dir).map_err(Error::io("open", &self.dir))?;
        match handle.create_dir_all(relative, 0o700) {
            Ok(_) => Ok(path),
            Err(e) if e.to_string() == omnidev_core::fs::LINK_REFUSED => {
                // Name the link and where it points.
                let mut at = self.dir.clone();
                for part in relative.components() {
                    at.push(part);
                    if let Ok(target) = std::fs::read_link(&at) {
                        return Err(Error::OutsidePod {
                            reason: format!("it is a symbolic link (to {})", target.display()),
                            path: at,
                        });
                    }
                }
                Err(Error::OutsidePod { path, reason: e.to_string() })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => Err(Error::OutsidePod {
                path,
                reason: "a file is in the way of a directory".to_owned(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => Err(Error::OutsidePod {
                path,
                reason: "the path is not a plain relative path".to_owned(),
            }),
            Err(error) => Err(Error::io("create the pod sub-directory", path)(error)),
        }
    }

    /// Removes what omnidev made in the pod directory `dir` (`--clean`,
    /// `omnidev clean`) — the layout (`pod.toml`, `omnidev.lock`,
    /// `state.json`, the `control.sock` pointer, `logs/`), the
    /// sub-directories its [`Marker`] lists, omnidev's temporary files and,
    /// last, the marker — through its directory handle: links inside are
    /// removed, never followed. The directory itself goes when nothing else
    /// is left; what omnidev did not make is kept and named. Only a
    /// directory carrying omnidev's identity is touched: any other is
    /// refused untouched ([`Error::NotAPod`]). A missing or empty directory
    /// is left as it is.
    pub fn clean(dir: &Path) -> Result<Cleaned> {
        let identity = match examine(dir)? {
            DirKind::Missing | DirKind::Empty => return Ok(Cleaned::default()),
            DirKind::Pod(identity) => identity,
            DirKind::Unmarked => {
                return Err(not_a_pod(
                    dir,
                    format!(
                        "it holds no {MARKER} identity (a pod of an older omnidev gets one at \
                         its next `omnidev up --pod-dir {}`)",
                        dir.display()
                    ),
                ));
            }
            DirKind::Other(reason) => return Err(not_a_pod(dir, reason)),
        };
        let handle = Dir::open(dir).map_err(Error::io("open", dir))?;
        let (made, copy_of) = match &identity {
            Identity::Own(marker) => (marker.made.clone(), None),
            Identity::Copy(marker) => (marker.made.clone(), Some(marker.dir.clone())),
            Identity::Legacy => (Vec::new(), None),
        };
        let remove = |name: &Path| -> Result<()> {
            handle.remove_tree(name).map(drop).map_err(Error::io("remove", dir.join(name)))
        };
        // The lock goes last, with the marker: while it is held, anyone
        // looking (a second `gc`) sees the removal holding it.
        for name in LAYOUT.iter().filter(|name| **name != LOCK_FILE) {
            remove(Path::new(name))?;
        }
        for sub in &made {
            let relative = Path::new(sub);
            remove(relative)?;
            // Its parents, when they are left empty (`data` of `data/omnigent`).
            let mut parent = relative.parent();
            while let Some(p) = parent.filter(|p| !p.as_os_str().is_empty()) {
                if handle.remove_dir(p).is_err() {
                    break;
                }
                parent = p.parent();
            }
        }
        let mut kept = Vec::new();
        for name in handle.entries().map_err(Error::io("read", dir))? {
            let text = name.to_string_lossy().into_owned();
            if text == MARKER || text == LOCK_FILE {
                continue;
            }
            if is_omnidev_temp(&text) {
                remove(Path::new(&name))?;
            } else {
                kept.push(text);
            }
        }
        if !kept.is_empty() {
            remove(Path::new(LOCK_FILE))?;
            return Ok(Cleaned { removed: false, kept, copy_of });
        }
        remove(Path::new(MARKER))?;
        remove(Path::new(LOCK_FILE))?;
        drop(handle);
        omnidev_core::fs::found(std::fs::remove_dir(dir))
            .map_err(Error::io("remove the pod directory", dir))?;
        Ok(Cleaned { removed: true, kept, copy_of })
    }

    /// The pod directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `<pod>/pod.toml`: the allocated ports and the repo path.
    pub fn pod_toml(&self) -> PathBuf {
        self.dir.join(POD_TOML)
    }

    /// The engine `omnidev up --db` last chose for the pod's databases
    /// (`<pod>/db-engine`): the pod keeps it, so a later `up`, `db` and
    /// `run` reach the same data until another `--db` changes it.
    pub fn db_engine(&self) -> Option<crate::database::DbEngine> {
        let bytes = omnidev_core::fs::read_file(&self.dir.join(DB_ENGINE_FILE), 64).ok()??;
        crate::database::DbEngine::from_word(String::from_utf8_lossy(&bytes).trim())
    }

    /// Records `engine` as the pod's ([`Pod::db_engine`]).
    pub fn set_db_engine(&self, engine: crate::database::DbEngine) -> Result<()> {
        let path = self.dir.join(DB_ENGINE_FILE);
        omnidev_core::fs::write_atomic(&path, format!("{}\n", engine.word()).as_bytes())
            .map_err(Error::io("write", &path))
    }

    /// `<pod>/state.json`: the supervisor's record of running processes.
    pub fn state_file(&self) -> PathBuf {
        self.dir.join(STATE_FILE)
    }

    /// `<pod>/logs`: per-service log files.
    pub fn logs_dir(&self) -> PathBuf {
        self.dir.join(LOGS_DIR)
    }

    /// `<pod>/run`: the services' `XDG_RUNTIME_DIR`.
    pub fn run_dir(&self) -> PathBuf {
        self.dir.join(RUN_DIR)
    }

    /// Bytes left for a socket's name in [`Pod::run_dir`] before its path
    /// no longer fits a Unix socket address
    /// ([`crate::runtime::MAX_SOCKET_PATH`]).
    pub fn socket_room(&self) -> usize {
        crate::runtime::MAX_SOCKET_PATH.saturating_sub(self.run_dir().as_os_str().len() + 1)
    }

    /// `<pod>/logs/<service>.log`.
    pub fn log_file(&self, service: &str) -> PathBuf {
        self.logs_dir().join(format!("{service}{LOG_SUFFIX}"))
    }

    /// `<pod>/logs/omnidev.log`: a detached pod's own output.
    pub fn detached_log(&self) -> PathBuf {
        self.logs_dir().join(DETACHED_LOG)
    }

    /// `<pod>/control.sock`: the pointer to the running pod's control socket.
    pub fn control_socket(&self) -> PathBuf {
        self.dir.join(CONTROL_SOCKET)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn cache_dirs_are_its_directories_never_a_link_or_a_file() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let root = tmp.path().join("cache");
        assert!(cache_dirs(&root).expect("a missing root").is_empty());
        std::fs::create_dir_all(root.join("pod-1")).expect("dir");
        std::fs::write(root.join("file"), "").expect("file");
        std::os::unix::fs::symlink(tmp.path(), root.join("link")).expect("link");
        assert_eq!(cache_dirs(&root).expect("listed"), [root.join("pod-1")]);
    }

    #[test]
    fn hash8_is_pinned() {
        // Changing this value moves every user's pod directory: never update
        // it without a migration.
        assert_eq!(hash8(Path::new("/home/user/src/omnigent")), "e3e2c4da");
    }

    #[test]
    fn pod_dir_is_stable_and_distinct() {
        let cache = Path::new("/c");
        let a = default_pod_dir(cache, Path::new("/src/a/omnigent"));
        let a2 = default_pod_dir(cache, Path::new("/src/a/omnigent"));
        let b = default_pod_dir(cache, Path::new("/src/b/omnigent"));
        assert_eq!(a, a2);
        assert_ne!(a, b);
        assert_eq!(a.parent(), b.parent());
    }

    #[test]
    fn create_sets_mode_0700_and_tightens_existing() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("p");
        std::fs::create_dir(&dir).expect("mkdir");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let pod = Pod::create(&dir, &["data/omnigent".into()]).expect("create");
        let mode = std::fs::metadata(pod.dir()).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        assert!(dir.join("data/omnigent").is_dir());
    }

    #[test]
    fn clean_removes_what_omnidev_made_and_keeps_the_rest() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).expect("mkdir");
        std::fs::write(outside.join("keep"), "x").expect("write");
        let pod = Pod::create(tmp.path().join("pod"), &["data/db".into()]).expect("create");
        std::fs::write(pod.dir().join("data/db/chat.db"), "rows").expect("write");
        std::os::unix::fs::symlink(&outside, pod.dir().join("data/db/out")).expect("symlink");
        std::fs::write(pod.state_file(), "{}").expect("write");
        std::fs::write(pod.dir().join("notes.txt"), "mine").expect("write");
        let cleaned = Pod::clean(pod.dir()).expect("clean");
        assert_eq!(cleaned.kept, ["notes.txt"]);
        assert!(!cleaned.removed);
        assert!(!pod.dir().join("data").exists() && !pod.state_file().exists());
        assert!(pod.dir().join(MARKER).is_file(), "the identity goes last");
        assert!(outside.join("keep").exists());
        std::fs::remove_file(pod.dir().join("notes.txt")).expect("rm");
        assert!(Pod::clean(pod.dir()).expect("clean").removed);
        assert!(!pod.dir().exists());
        assert_eq!(Pod::clean(pod.dir()).expect("clean of a missing dir"), Cleaned::default());
    }

    #[test]
    fn a_directory_without_the_identity_is_never_removed() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("work");
        std::fs::create_dir_all(dir.join("src")).expect("mkdir");
        std::fs::write(dir.join("src/main.c"), "int main;").expect("write");
        for planted in [STATE_FILE, LOCK_FILE, CONTROL_SOCKET] {
            std::fs::write(dir.join(planted), "anything").expect("write");
            let err = Pod::clean(&dir).expect_err("no identity");
            assert!(err.to_string().contains("no .omnidev-pod identity"), "{err}");
        }
        // A marker that is not omnidev's, or pod.toml alone, neither.
        std::fs::write(dir.join(POD_TOML), "[ports]\nserver = 1\n").expect("write");
        let err = Pod::clean(&dir).expect_err("unmarked");
        assert!(err.to_string().contains("omnidev up --pod-dir"), "{err}");
        std::fs::write(dir.join(MARKER), "hello").expect("write");
        let err = Pod::clean(&dir).expect_err("foreign marker");
        assert!(err.to_string().contains("not one omnidev wrote"), "{err}");
        assert_eq!(std::fs::read_to_string(dir.join("src/main.c")).expect("kept"), "int main;");
        assert!(dir.join(STATE_FILE).exists());
    }

    #[test]
    fn a_copy_is_recognised_and_becomes_a_pod_of_its_own_at_create() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let original = Pod::create(tmp.path().join("a"), &[]).expect("create");
        let id = pod_id(original.dir()).expect("id");
        let record = format!("pod-id = \"{id}\"\n\n[ports]\nweb = 7\n");
        std::fs::write(original.pod_toml(), record).expect("write");
        std::fs::write(original.state_file(), "{}").expect("write");
        std::os::unix::fs::symlink("/run/elsewhere/control.sock", original.control_socket())
            .expect("symlink");
        let copy = tmp.path().join("b");
        let status = std::process::Command::new("cp")
            .arg("-a")
            .arg(original.dir())
            .arg(&copy)
            .status()
            .expect("cp");
        assert!(status.success());
        let DirKind::Pod(Identity::Copy(marker)) = examine(&copy).expect("examine") else {
            panic!("a copy is a copy");
        };
        assert_eq!(marker.dir, original.dir().canonicalize().expect("canon"));
        Pod::create(&copy, &[]).expect("create");
        let DirKind::Pod(Identity::Own(own)) = examine(&copy).expect("examine") else {
            panic!("now its own");
        };
        assert_ne!(own.id, marker.id);
        // The original's processes and socket are no longer the copy's.
        assert!(
            !copy.join(STATE_FILE).exists()
                && copy.join(CONTROL_SOCKET).symlink_metadata().is_err()
        );
        assert!(original.dir().join(STATE_FILE).is_file());
        let record: crate::record::PodRecord =
            crate::state::read_toml(&copy.join(POD_TOML)).expect("read").expect("present");
        assert_eq!(record.pod_id.as_deref(), Some(own.id.as_str()));
        assert!(matches!(
            examine(original.dir()).expect("examine"),
            DirKind::Pod(Identity::Own(_))
        ));
    }

    #[test]
    fn a_legacy_marker_is_recognised_strictly() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("old");
        std::fs::create_dir_all(dir.join("logs")).expect("mkdir");
        std::fs::write(dir.join(MARKER), LEGACY_MARKER_TEXT).expect("write");
        assert_eq!(examine(&dir).expect("examine"), DirKind::Pod(Identity::Legacy));
        std::fs::write(dir.join(MARKER), format!("{LEGACY_MARKER_TEXT} ")).expect("write");
        assert!(matches!(examine(&dir).expect("examine"), DirKind::Other(_)));
    }

    #[test]
    fn a_very_long_checkout_name_gives_a_pod_dir_that_can_be_made() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let repo = tmp.path().join("r".repeat(250));
        let dir = default_pod_dir(&tmp.path().join("cache"), &repo);
        let name = dir.file_name().expect("name").to_string_lossy().into_owned();
        assert_eq!(name, format!("{}-{}", "r".repeat(MAX_BASENAME), hash8(&repo)));
        assert_eq!(dir, default_pod_dir(&tmp.path().join("cache"), &repo), "stable");
        Pod::create(&dir, &[]).expect("create");
        let other = default_pod_dir(
            &tmp.path().join("cache"),
            &tmp.path().join(format!("{}x", "r".repeat(250))),
        );
        assert_ne!(dir, other);
    }
}

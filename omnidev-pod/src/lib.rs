//! Pod isolation for omnidev: one checkout, one state directory, its own ports, one omnidev.
//!
//! A *pod* is everything that belongs to one checkout (or git worktree) while
//! it runs under omnidev: a private directory under the cache root, TCP ports
//! that no other pod uses, a lock so that only one omnidev runs per pod, and
//! a [`Profile`] that says which services to run and with which environment.
//!
//! ```
//! use omnidev_pod::{Pod, PodLock, PortRequest, Profile, RenderContext};
//!
//! # let tmp = tempfile::tempdir().unwrap();
//! # let repo = tmp.path().join("omnigent");
//! # for d in ["omnigent", "web", ".git"] { std::fs::create_dir_all(repo.join(d)).unwrap(); }
//! # let cache_root = tmp.path().join("cache");
//! // Find the checkout and its profile (the embedded Omnigent one here).
//! let repo = omnidev_pod::find_repo_root(&repo.join("omnigent"))?;
//! let (profile, _source) = Profile::load(&repo, None)?;
//! profile.check_repo(&repo)?;
//!
//! // Create the pod directory and take the single-instance lock first.
//! let pod = Pod::create(omnidev_pod::pod::default_pod_dir(&cache_root, &repo), &profile.pod.dirs)?;
//! let _lock = PodLock::acquire(pod.dir())?;
//!
//! // Allocate ports (machine-wide lock, persisted in pod.toml) and render.
//! let ports = omnidev_pod::allocate_ports(&PortRequest {
//!     cache_root: &cache_root,
//!     runtime_dir: &tmp.path().join("run"),
//!     pod_dir: pod.dir(),
//!     repo: &repo,
//!     bases: &profile.port_bases(&Default::default()),
//!     overrides: &Default::default(),
//! })?;
//! let mut ctx = RenderContext::from_process_env(repo.clone(), pod.dir().to_owned(), ports);
//! ctx.selection.skip.push("vite".into()); // --no-vite: no package manager needed
//! let rendered = profile.render(&ctx)?;
//! assert_eq!(rendered.services[0].name, "server");
//! # Ok::<(), omnidev_pod::Error>(())
//! ```
//!
//! # Choices worth knowing
//!
//! - **Pod directory**: `${XDG_CACHE_HOME:-$HOME/.cache}/omnidev/<basename>-<hash8>`,
//!   where `hash8` is the first 8 hex digits of SHA-256 over the canonical
//!   repo path's bytes ([`pod::hash8`]; pinned by a test, never to change);
//!   the basename is cut to [`pod::MAX_BASENAME`] bytes. Every pod carries
//!   the identity omnidev wrote ([`pod::Marker`]); only such a directory is
//!   ever cleaned, and only of what omnidev made in it.
//! - **Ports** ([`ports`]): persisted in `<pod>/pod.toml` together with the
//!   repo path; allocation is serialised per user, across cache roots, by
//!   `<runtime dir>/ports.lock` ([`runtime`]), where `pods.toml` lists the
//!   pods holding ports (a corrupt registry is an error, never reset);
//!   another pod's unreadable `pod.toml` is ignored,
//!   this pod's corrupt one is an error and is left untouched. A port lost
//!   to another process before the service bound it is moved
//!   ([`ports::relocate_port`]).
//! - **Templates** ([`profile::template`]): `{pod}`, `{repo}`, `{port.NAME}`,
//!   `{host.NAME}` (default `127.0.0.1`), `{env.NAME}` (the inherited
//!   environment; unset renders as empty, except in `[[seed]] from` where it
//!   skips that candidate); `{{` and `}}` are literal braces.
//! - **LAN origins**: a profile names the variable and port in
//!   `[lan-origins]` (an addition to the documented format); the value is
//!   computed — inherited entries first, then the LAN origins, trimmed and
//!   de-duplicated — and set only when there is at least one LAN origin.
//! - **Selection** ([`Selection`]): `--only`/`--skip` never pull in
//!   dependencies; an edge to an unselected service is dropped so that the
//!   dependent starts without waiting.
//! - **Package manager** ([`package_manager`]): only resolved for services
//!   that need it (`script` or `install-deps`), so `--no-vite` works without
//!   Node. Detected by walking from the service's `cwd` up to the checkout
//!   root (`packageManager`, workspace files, lockfiles; nearest first); the
//!   install runs where the lockfile or workspace declaration is (the root
//!   of a pnpm workspace such as Omnigent's), and is stale when any
//!   `package.json` on the way, the lockfile or the workspace file is newer
//!   than that directory's `node_modules/`. pnpm and yarn get
//!   `COREPACK_ENABLE_DOWNLOAD_PROMPT=0`, so corepack never waits for a
//!   confirmation.
//!
//! Modules: [`root`] (checkout discovery), [`pod`] (directory and layout),
//! [`ports`], [`runtime`] (the per-user runtime directory), [`lock`], [`lan`] (LAN origins), [`seed`] (config seeding),
//! [`profile`] (format, embedded profile, templating, rendering),
//! [`package_manager`] and [`state`] (atomic state files).
#![warn(missing_docs)]

pub mod clone;
pub mod database;
pub mod db_seed;
pub mod env_file;
pub mod error;
pub mod ids;
pub mod init;
pub mod lan;
pub mod layout;
pub mod link;
pub mod lock;
pub mod names;
pub mod node;
pub mod package_manager;
pub mod pod;
pub mod ports;
pub mod profile;
pub mod python;
pub mod record;
pub mod root;
pub mod runtime;
pub mod seed;
pub mod snapshot;
pub mod state;

pub use error::{Error, Result};
pub use lock::{LockState, PodLock, Removal};
pub use package_manager::PackageManager;
pub use pod::Pod;
pub use ports::{PortRequest, allocate_ports, read_ports};
pub use profile::render::{RenderContext, RenderedPod, RunChoice, Selection, WatchRule};
pub use profile::{Profile, ProfileSource};
pub use record::{PodRecord, Ports};
pub use root::{find_repo_root, resolve_repo_root};

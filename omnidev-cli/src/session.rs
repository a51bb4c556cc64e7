//! Setting up a checkout's pod, shared by every command that acts on one:
//! find the checkout and its profile, then (for `up`) lock the pod
//! directory, allocate ports, seed config and render the profile; and
//! stopping a pod's supervisor on the shutdown signals; and the async
//! runtime a command runs on.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use omnidev_core::{LogConfig, SupervisorConfig};
use omnidev_pod::seed::SeedOutcome;
use omnidev_pod::{
    Pod, PodLock, PortRequest, Profile, ProfileSource, RenderContext, RenderedPod, Selection,
};

use crate::cli::PodArgs;
use crate::error::{Error, Result};
use crate::run_options::RunOptions;

/// The checkout being run and where its pod lives: the first steps of
/// every pod command, with no side effect.
#[derive(Debug, Clone)]
pub struct Checkout {
    /// The checkout root.
    pub repo: PathBuf,
    /// The effective profile.
    pub profile: Profile,
    /// Where the profile came from.
    pub source: ProfileSource,
    /// The cache root holding every pod.
    pub cache_root: PathBuf,
    /// This checkout's pod directory.
    pub pod_dir: PathBuf,
    /// The engine its databases run on by `--db` (or as the pod last
    /// recorded it), already applied to `profile`.
    pub db: Option<omnidev_pod::database::DbEngine>,
}

/// The async runtime a command runs on, its I/O and timers on: with two
/// worker threads (`up`, `dashboard`: supervising or serving pages beside
/// a busy UI), else on this thread alone.
pub fn runtime(workers: bool) -> Result<tokio::runtime::Runtime> {
    let mut builder = if workers {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(2);
        builder
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    builder.enable_all().build().map_err(Error::Runtime)
}

/// The process's working directory.
pub fn current_dir() -> Result<PathBuf> {
    std::env::current_dir().map_err(|error| {
        Error::Pod(omnidev_pod::Error::Io {
            action: "read the current directory",
            path: PathBuf::from("."),
            error,
        })
    })
}

/// Repo root (`--repo` verbatim, else the surrounding checkout) → profile
/// (`--profile`, `omnidev.toml`, embedded) → pod directory (`--pod-dir`,
/// else the default under the cache root). A run checks the profile
/// further ([`check_run`]).
pub fn resolve_checkout(args: &PodArgs) -> Result<Checkout> {
    let cwd = current_dir()?;
    let repo = omnidev_pod::resolve_repo_root(&cwd, args.repo.as_deref())?;
    let profile_file = args.profile.as_deref().map(|p| cwd.join(p));
    let (profile, source) = Profile::load(&repo, profile_file.as_deref())?;
    let cache_root = omnidev_pod::pod::cache_root()?;
    let pod_dir = match &args.pod_dir {
        // An absolute path stays as it is.
        Some(dir) => cwd.join(dir),
        None => omnidev_pod::pod::default_pod_dir(&cache_root, &repo),
    };
    Ok(Checkout { repo, profile, source, cache_root, pod_dir, db: None })
}

/// Checks the checkout's profile for a run as `options` ask for it
/// ([`Profile::check_run`], what `reload-profile` and `profile check`
/// check too), its databases moved to the engine `--db` chose (else the
/// one the pod recorded): before anything is made or started.
pub fn check_run(checkout: &mut Checkout, options: &RunOptions) -> Result<()> {
    checkout.db = options.db.or_else(|| Pod::at(&checkout.pod_dir).db_engine());
    let path = std::env::var_os("PATH").unwrap_or_default();
    let run = omnidev_pod::RunChoice {
        db: checkout.db,
        scale: &options.scale,
        selection: &options.selection,
        path: &path,
    };
    checkout.profile.check_run(&checkout.repo, &run)?;
    Ok(())
}

/// The pod directory `args` names: `--pod-dir` as given (no checkout
/// needed, so a pod whose worktree was deleted can still be stopped,
/// inspected or cleaned), else the checkout's own. A `--pod-dir` that is
/// not a pod is [`Error::NoSuchPod`]: a typo must not read as "not
/// running" (the checkout's own pod directory may not exist yet: that pod
/// never ran). The profile is not read: a pod whose profile file was
/// broken under it can still be reached, stopped and cleaned.
pub fn pod_dir(args: &PodArgs) -> Result<PathBuf> {
    let Some(dir) = &args.pod_dir else {
        let repo = omnidev_pod::resolve_repo_root(&current_dir()?, args.repo.as_deref())?;
        let cache_root = omnidev_pod::pod::cache_root()?;
        return Ok(omnidev_pod::pod::default_pod_dir(&cache_root, &repo));
    };
    let pod_dir = current_dir()?.join(dir);
    let what = match omnidev_pod::pod::examine(&pod_dir)? {
        omnidev_pod::pod::DirKind::Pod(_) | omnidev_pod::pod::DirKind::Unmarked => {
            return Ok(pod_dir);
        }
        omnidev_pod::pod::DirKind::Missing => "does not exist".to_owned(),
        omnidev_pod::pod::DirKind::Empty => "is an empty directory, not a pod".to_owned(),
        omnidev_pod::pod::DirKind::Other(reason) => {
            format!("is not an omnidev pod ({reason})")
        }
    };
    Err(Error::NoSuchPod { pod_dir, what })
}

/// The pod directory of the checkout `args` names, when its pod runs;
/// [`Error::NotRunning`] otherwise. What every command that asks a running
/// pod (`restart`, `wait`, `events`) checks first.
pub fn running_pod_dir(args: &PodArgs) -> Result<PathBuf> {
    let pod_dir = pod_dir(args)?;
    if crate::control::lock_state(&pod_dir)? == omnidev_pod::LockState::Free {
        return Err(Error::NotRunning { pod_dir });
    }
    Ok(pod_dir)
}

/// A pod made ready to run: locked, ports allocated, config seeded, profile
/// rendered. Dropping it releases the lock.
#[derive(Debug)]
pub struct PreparedPod {
    /// The checkout.
    pub checkout: Checkout,
    /// The pod directory.
    pub pod: Pod,
    /// The single-instance lock, held while this value lives.
    #[expect(dead_code, reason = "held for its Drop, which releases the pod lock")]
    pub lock: PodLock,
    /// The rendered services, env, watch rules and URLs.
    pub rendered: RenderedPod,
    /// Messages for the user (seeding, LAN origins) to show once running.
    pub notices: Vec<String>,
    /// Where the control socket is served (checked to fit before start).
    pub control_socket: PathBuf,
    /// What moving a port needs: where and how the ports were allocated,
    /// and the context the profile was rendered in.
    pub ports: PortSetUp,
    /// Whether output lines start with their time: `--timestamps`, or the
    /// profile's `[pod] timestamps`.
    pub timestamps: bool,
}

/// How a pod's ports were allocated and its profile rendered, kept so a
/// port lost to another process can be moved
/// ([`crate::live_profile::LiveProfile`]) and a changed profile rendered.
#[derive(Debug, Clone)]
pub struct PortSetUp {
    /// The per-user runtime directory (allocation lock and registry).
    pub runtime_dir: PathBuf,
    /// The profile's port names and bases.
    pub bases: Vec<(String, u16)>,
    /// The ports the user forced (never moved).
    pub overrides: BTreeMap<String, u16>,
    /// The render context (its ports change when one moves).
    pub context: RenderContext,
    /// `up --link NAME=CHECKOUT`: where links point instead of their
    /// profile's checkout (a reload resolves the links again with them).
    pub link_overrides: BTreeMap<String, String>,
}

impl PortSetUp {
    /// The names of `bases` (a changed profile's) whose base differs from
    /// the one the pod's port was allocated from, forced ones aside: their
    /// port is probed again from the new base.
    pub fn rebased(&self, bases: &[(String, u16)]) -> BTreeSet<String> {
        bases
            .iter()
            .filter(|(name, base)| {
                !self.overrides.contains_key(name)
                    && self.bases.iter().any(|(old, old_base)| old == name && old_base != base)
            })
            .map(|(name, _)| name.clone())
            .collect()
    }
}

/// A running pod's ports, URLs and links, as the control socket reports
/// them (a port move and a reload of the profile change them).
#[derive(Debug, Clone, Default)]
pub struct Addresses {
    /// Port names and numbers.
    pub ports: BTreeMap<String, u16>,
    /// The pod's own URLs, in profile order (a service's are in its
    /// status).
    pub urls: Vec<omnidev_core::NamedUrl>,
    /// The linked pods, as the pod's placeholders got them.
    pub links: BTreeMap<String, omnidev_pod::link::Linked>,
}

/// [`Addresses`] shared between the control socket and the port mover.
pub type SharedAddresses = std::sync::Arc<std::sync::Mutex<Addresses>>;

impl Addresses {
    /// The addresses of a prepared pod.
    pub fn of(prepared: &PreparedPod) -> SharedAddresses {
        std::sync::Arc::new(std::sync::Mutex::new(Self {
            ports: prepared.ports.context.ports.0.clone(),
            urls: prepared.rendered.urls.clone(),
            links: prepared.ports.context.links.clone(),
        }))
    }
}

/// Bytes below which the services' runtime directory is said to leave too
/// little room for a socket's name (`gunicorn.ctl`, `app-1234.sock`).
const SOCKET_NAME_ROOM: usize = 24;

/// `--clean` → pod directory → lock → package-manager preflight → ports →
/// seed → render.
pub fn prepare(checkout: Checkout, options: &RunOptions) -> Result<PreparedPod> {
    let profile = &checkout.profile;
    let mut notices = Vec::new();
    if options.clean {
        // Never wipe the directory of a pod that is running.
        if let omnidev_pod::LockState::Held { pid } = PodLock::state(&checkout.pod_dir)? {
            return Err(omnidev_pod::Error::AlreadyRunning {
                pod_dir: checkout.pod_dir.clone(),
                pid,
            }
            .into());
        }
        notices.extend(clean_before_up(&checkout.pod_dir)?);
    }
    let pod = Pod::create(&checkout.pod_dir, &profile.pod_dirs())?;
    let lock = PodLock::acquire(pod.dir())?;
    if let Some(engine) = checkout.db {
        pod.set_db_engine(engine)?;
    }
    let control_socket = crate::control::serving_path(pod.dir())?;
    if pod.socket_room() < SOCKET_NAME_ROOM {
        notices.push(format!(
            "the services' XDG_RUNTIME_DIR {} leaves {} bytes for a socket's name; \
             a shorter XDG_CACHE_HOME (or --pod-dir) gives them room",
            pod.run_dir().display(),
            pod.socket_room()
        ));
    }

    let selection = options.selection.clone();
    let bases = profile.port_bases(&options.scale);
    let overrides: BTreeMap<String, u16> =
        omnidev_pod::ports::check_overrides(&options.ports, &bases)?;
    let runtime_dir = omnidev_pod::runtime::runtime_dir();
    let ports = omnidev_pod::allocate_ports(&PortRequest {
        cache_root: &checkout.cache_root,
        runtime_dir: &runtime_dir,
        pod_dir: pod.dir(),
        repo: &checkout.repo,
        bases: &bases,
        overrides: &overrides,
    })?;

    if let Some(from) = &options.clone_from {
        // Before rendering: a clone brings its server's password.
        let cloned = omnidev_pod::clone::clone_missing(
            profile,
            &checkout.repo,
            &checkout.cache_root,
            pod.dir(),
            from,
        )?;
        notices.extend(cloned);
    }
    notices.extend(omnidev_pod::db_seed::seeds_from_cache(
        &profile.databases,
        &checkout.repo,
        &checkout.cache_root,
        pod.dir(),
    )?);
    let mut ctx =
        RenderContext::from_process_env(checkout.repo.clone(), pod.dir().to_owned(), ports.clone());
    ctx.links =
        omnidev_pod::link::resolve(profile, &checkout.repo, &checkout.cache_root, &options.links)?;
    ctx.omnidev = std::env::current_exe().ok();
    ctx.hosts.clone_from(&options.hosts);
    ctx.selection = selection;
    ctx.scale.clone_from(&options.scale);
    ctx.db = checkout.db;
    ctx.seed_store = seed_store(&checkout, pod.dir());
    if options.trust_lan_origins {
        ctx.lan_origins = trusted_origins(profile, &ports, &mut notices);
    }
    notices.extend(seed(profile, &ctx));
    let rendered = profile.render(&ctx)?;
    let timestamps = options.timestamps || profile.pod.timestamps;
    let ports = PortSetUp {
        runtime_dir,
        bases,
        overrides,
        context: ctx,
        link_overrides: options.links.clone(),
    };
    Ok(PreparedPod { checkout, pod, lock, rendered, notices, control_socket, ports, timestamps })
}

/// `--trust-lan-origins`: the LAN origins of the profile's
/// `[lan-origins]` port, and what to say of them.
fn trusted_origins(
    profile: &Profile,
    ports: &omnidev_pod::Ports,
    notices: &mut Vec<String>,
) -> Vec<String> {
    let Some(port) = profile.lan_origin_port().and_then(|name| ports.get(name)) else {
        notices.push(
            "--trust-lan-origins: this profile has no [lan-origins] table; ignored".to_owned(),
        );
        return Vec::new();
    };
    let origins = omnidev_pod::lan::lan_origins(port);
    if origins.is_empty() {
        notices.push("--trust-lan-origins: no LAN address found".to_owned());
    } else {
        notices.push(format!("trusting {}", origins.join(", ")));
    }
    origins
}

/// `up --clean`: removes what omnidev made in the pod directory, as
/// `omnidev clean` does (only a directory carrying the pod identity; a
/// missing or empty one is left for [`Pod::create`]); what to tell the
/// user about it.
pub fn clean_before_up(pod_dir: &Path) -> Result<Option<String>> {
    match omnidev_pod::pod::examine(pod_dir)? {
        omnidev_pod::pod::DirKind::Missing | omnidev_pod::pod::DirKind::Empty => Ok(None),
        omnidev_pod::pod::DirKind::Pod(identity) => Ok(Some(clean_pod(pod_dir, &identity)?)),
        // Refused, with the reason.
        _ => Pod::clean(pod_dir).map(|_| None).map_err(Error::from),
    }
}

/// Removes the socket a pod killed with `kill -9` left in the per-user
/// runtime directory: the one this pod directory itself serves at (keyed by
/// its own path, never the target its `control.sock` link names: a copy's
/// link names the original's live socket), only a socket, only one of this
/// user's (the pod is stopped: its lock was held).
pub(crate) fn remove_stale_socket(pod_dir: &Path) {
    let Ok(socket) = crate::control::serving_path(pod_dir) else {
        return;
    };
    let (Some(parent), Some(name)) = (socket.parent(), socket.file_name()) else {
        return;
    };
    let Ok(dir) = omnidev_core::fs::Dir::open(parent) else {
        return;
    };
    if let Ok(Some(entry)) = dir.stat(Path::new(name))
        && entry.kind == omnidev_core::fs::Kind::Socket
        && entry.uid == nix::unistd::getuid().as_raw()
    {
        let _ = dir.remove_file(Path::new(name));
        drop(dir);
        let _ = std::fs::remove_dir(parent);
    }
}

/// Cleans the stopped pod at `pod_dir` (the caller checked it is one and
/// holds its lock), and the socket it left; what to say about it.
pub(crate) fn clean_pod(
    pod_dir: &Path,
    identity: &omnidev_pod::pod::Identity,
) -> Result<String, Error> {
    // Read before the directory goes: a copy's socket is the original's.
    let own = !matches!(identity, omnidev_pod::pod::Identity::Copy(_));
    let omnidev_pod::pod::Cleaned { removed, kept, copy_of } = Pod::clean(pod_dir)?;
    if own {
        remove_stale_socket(pod_dir);
    }
    let shown = omnidev_core::text::quote_path(pod_dir);
    let mut text = if removed {
        format!("omnidev: removed {shown}")
    } else {
        let kept: Vec<String> =
            kept.iter().map(|k| omnidev_core::text::quote(k).into_owned()).collect();
        format!(
            "omnidev: removed what omnidev made in {shown}; kept what it did not make: {} \
             (remove them yourself to have the directory gone)",
            kept.join(", ")
        )
    };
    if let Some(original) = copy_of {
        let _ = write!(
            text,
            " (it was a copy of the pod {}, which was not touched)",
            omnidev_core::text::quote_path(&original)
        );
    }
    Ok(text)
}

/// Seeds the pod's files (never overwriting one); a line for each copy
/// made or failed.
fn seed(profile: &Profile, ctx: &RenderContext) -> Vec<String> {
    let mut notices = Vec::new();
    for outcome in profile.seed(ctx) {
        match outcome {
            SeedOutcome::Copied { from, to } => {
                notices.push(format!("seeded {} from {}", to.display(), from.display()));
            }
            SeedOutcome::Failed { from, to, error } => notices.push(format!(
                "warning: could not copy {} to {}: {error}",
                from.display(),
                to.display()
            )),
            SeedOutcome::Kept { .. } | SeedOutcome::NoSource { .. } => {}
        }
    }
    notices
}

/// A pod as a command run beside it needs it ([`prepare_beside`]).
pub struct Beside {
    /// The profile rendered for the environment alone (no service).
    pub rendered: RenderedPod,
    /// The pod's ports.
    pub ports: BTreeMap<String, u16>,
    /// What each database's `{db.NAME.PART}` stands for.
    pub databases: BTreeMap<String, omnidev_pod::database::DbParts>,
    /// What seeding the pod's files had to say.
    pub notices: Vec<String>,
}

/// The pod as a command run beside it (`omnidev run`) needs it: the pod
/// directory (created as `up` would when missing), its ports (those in
/// `pod.toml`, untouched; allocated under the allocation lock and written
/// only when there are none), its files seeded, and the profile rendered
/// for the environment alone. Takes no pod lock: the pod may be running.
pub fn prepare_beside(checkout: &Checkout) -> Result<Beside> {
    // The engine the pod runs its databases on (`up --db`).
    let mut chosen = None;
    if let Some(engine) = Pod::at(&checkout.pod_dir).db_engine() {
        let mut moved = checkout.profile.clone();
        if moved.choose_engine(engine).is_ok() {
            chosen = Some(moved);
        }
    }
    let profile = chosen.as_ref().unwrap_or(&checkout.profile);
    let pod = Pod::create(&checkout.pod_dir, &profile.pod_dirs())?;
    let runtime_dir = omnidev_pod::runtime::runtime_dir();
    let ports = omnidev_pod::ports::ensure_ports(&PortRequest {
        cache_root: &checkout.cache_root,
        runtime_dir: &runtime_dir,
        pod_dir: pod.dir(),
        repo: &checkout.repo,
        bases: &profile.port_bases(&BTreeMap::new()),
        overrides: &BTreeMap::new(),
    })?;
    let mut ctx =
        RenderContext::from_process_env(checkout.repo.clone(), pod.dir().to_owned(), ports);
    ctx.links = omnidev_pod::link::resolve(
        profile,
        &checkout.repo,
        &checkout.cache_root,
        &BTreeMap::new(),
    )?;
    ctx.omnidev = std::env::current_exe().ok();
    // Only the environment is needed: leave every service out, so no
    // package manager is looked up.
    ctx.selection = Selection {
        skip: (profile.services.keys()).chain(profile.databases.keys()).cloned().collect(),
        ..Selection::default()
    };
    let notices = seed(profile, &ctx);
    Ok(Beside {
        rendered: profile.render(&ctx)?,
        databases: profile.databases_of(&ctx)?,
        ports: ctx.ports.0.clone(),
        notices,
    })
}

/// The command a database's seed runs through (`omnidev db seed-run`,
/// for this checkout, profile and pod), which keeps its result in the
/// user's cache; `None` when this program cannot say where it is.
fn seed_store(checkout: &Checkout, pod_dir: &Path) -> Option<Vec<String>> {
    let exe = std::env::current_exe().ok()?;
    let text = |path: &Path| path.to_string_lossy().into_owned();
    let mut command = vec![
        text(&exe),
        "db".to_owned(),
        "seed-run".to_owned(),
        "--repo".to_owned(),
        text(&checkout.repo),
        "--pod-dir".to_owned(),
        text(pod_dir),
    ];
    if let ProfileSource::File(file) = &checkout.source {
        command.extend(["--profile".to_owned(), text(file)]);
    }
    Some(command)
}

/// The supervisor configuration of a prepared pod: logs under
/// `<pod>/logs`, state in `<pod>/state.json`.
pub fn supervisor_config(prepared: &PreparedPod) -> SupervisorConfig {
    SupervisorConfig {
        services: prepared.rendered.services.clone(),
        log: LogConfig { dir: Some(prepared.pod.logs_dir()), ..LogConfig::default() },
        state_file: Some(prepared.pod.state_file()),
        pod_limits: prepared.checkout.profile.pod.limits(),
        ..SupervisorConfig::default()
    }
}

/// Lines shown at start: the pod directory and the pod's own URLs (a
/// service's URL is shown once the service is ready).
pub fn banner(prepared: &PreparedPod) -> Vec<String> {
    let mut lines = vec![format!("pod {}", prepared.pod.dir().display())];
    match &prepared.checkout.source {
        ProfileSource::Embedded => lines.push("profile: embedded Omnigent profile".to_owned()),
        ProfileSource::Repo(path) | ProfileSource::File(path) => {
            lines.push(format!("profile {}", path.display()));
        }
    }
    for url in &prepared.rendered.urls {
        lines.push(format!("{} {}", url.name, url.url));
    }
    lines
}

/// Stops the pod. A shutdown signal meanwhile (the second, when a signal
/// started the shutdown) skips what is left of every grace period and
/// kills at once; the next one exits without waiting, leaving the orphan
/// guard (or, after its own death, the next `omnidev up`) to kill the rest.
pub async fn stop_pod(
    supervisor: &omnidev_core::Supervisor,
    signals: &mut omnidev_core::signals::ShutdownSignals,
) -> omnidev_core::Result<()> {
    let stopping = supervisor.shutdown();
    tokio::pin!(stopping);
    let mut hurried = false;
    loop {
        tokio::select! {
            stopped = &mut stopping => return stopped,
            signal = signals.recv() => {
                if hurried {
                    note!("omnidev: {signal} again: exiting now");
                    std::process::exit(128 + signal.number());
                }
                hurried = true;
                note!(
                    "omnidev: {signal} during shutdown: killing every process now \
                     (once more to exit without waiting)"
                );
                supervisor.kill_now();
            }
        }
    }
}

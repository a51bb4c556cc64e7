//! `omnidev up`: compose the pod (checkout, profile, lock, ports, seed,
//! render), the supervisor, the watcher and a front-end (TUI or headless).
//!
//! The steps are separate functions so other commands (`exec`, and later
//! `status`, `up --detach`, the control socket) reuse the same composition.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use omnidev_core::{LogConfig, Supervisor, SupervisorConfig};
use omnidev_pod::seed::SeedOutcome;
use omnidev_pod::{
    PackageManager, Pod, PodLock, PortRequest, Profile, ProfileSource, RenderContext, RenderedPod,
    Selection,
};
use tokio::sync::mpsc;

use crate::cli::{PodArgs, UpArgs};
use crate::error::{Error, Result};
use crate::headless::{self, Printer};
use crate::tui::{self, Action, App, PodInfo};
use crate::watch::{WatchConfig, Watcher};

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
}

/// The process's working directory.
pub fn current_dir() -> Result<PathBuf> {
    std::env::current_dir().map_err(|source| {
        Error::Pod(omnidev_pod::Error::Io {
            action: "read the current directory",
            path: PathBuf::from("."),
            source,
        })
    })
}

fn absolute(cwd: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        cwd.join(path)
    }
}

/// Repo root (`--repo` verbatim, else the surrounding checkout) → profile
/// (`--profile`, `omnidev.toml`, embedded) → shape check → pod directory
/// (`--pod-dir`, else the default under the cache root).
pub fn resolve_checkout(args: &PodArgs) -> Result<Checkout> {
    let cwd = current_dir()?;
    let repo = omnidev_pod::resolve_repo_root(&cwd, args.repo.as_deref())?;
    let profile_file = args.profile.as_deref().map(|p| absolute(&cwd, p));
    let (profile, source) = Profile::load(&repo, profile_file.as_deref())?;
    profile.check_repo(&repo)?;
    let cache_root = omnidev_pod::pod::cache_root()?;
    let pod_dir = match &args.pod_dir {
        Some(dir) => absolute(&cwd, dir),
        None => omnidev_pod::pod::default_pod_dir(&cache_root, &repo),
    };
    Ok(Checkout {
        repo,
        profile,
        source,
        cache_root,
        pod_dir,
    })
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
}

/// `--clean` → pod directory → lock → package-manager preflight → ports →
/// seed → render.
pub fn prepare(checkout: Checkout, args: &UpArgs) -> Result<PreparedPod> {
    let profile = &checkout.profile;
    if args.clean {
        // Never wipe the directory of a pod that is running.
        if let omnidev_pod::LockState::Held { pid } = PodLock::state(&checkout.pod_dir)? {
            return Err(omnidev_pod::Error::AlreadyRunning {
                pod_dir: checkout.pod_dir.clone(),
                pid,
            }
            .into());
        }
        Pod::clean(&checkout.pod_dir)?;
    }
    let pod = Pod::create(&checkout.pod_dir, &profile.pod.dirs)?;
    let lock = PodLock::acquire(pod.dir())?;

    let selection = Selection {
        only: args.only.clone(),
        skip: args.skipped(),
    };
    let selected = selection.apply(profile)?;
    if selected.is_empty() {
        return Err(Error::NothingToRun);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in &selected {
        let service = &profile.services[name];
        if service.script.is_some() || service.install_deps {
            let cwd = checkout.repo.join(service.cwd.as_deref().unwrap_or("."));
            PackageManager::detect(&cwd).resolve(&path, &cwd)?;
        }
    }

    let overrides: BTreeMap<String, u16> = args.port_overrides().into_iter().collect();
    let ports = omnidev_pod::allocate_ports(&PortRequest {
        cache_root: &checkout.cache_root,
        pod_dir: pod.dir(),
        repo: &checkout.repo,
        bases: &profile.port_bases(),
        overrides: &overrides,
    })?;

    let mut notices = Vec::new();
    let mut ctx =
        RenderContext::from_process_env(checkout.repo.clone(), pod.dir().to_owned(), ports.clone());
    ctx.hosts = args.host_overrides().into_iter().collect();
    ctx.selection = selection;
    if args.trust_lan_origins {
        match profile.lan_origin_port().and_then(|name| ports.get(name)) {
            Some(port) => {
                ctx.lan_origins = omnidev_pod::lan::lan_origins(port);
                if ctx.lan_origins.is_empty() {
                    notices.push("--trust-lan-origins: no LAN address found".to_owned());
                } else {
                    notices.push(format!("trusting {}", ctx.lan_origins.join(", ")));
                }
            }
            None => notices.push(
                "--trust-lan-origins: this profile has no [lan-origins] table; ignored".to_owned(),
            ),
        }
    }
    for outcome in profile.seed(&ctx) {
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
    let rendered = profile.render(&ctx)?;
    Ok(PreparedPod {
        checkout,
        pod,
        lock,
        rendered,
        notices,
    })
}

/// The supervisor configuration of a prepared pod: logs under
/// `<pod>/logs`, state in `<pod>/state.json`.
pub fn supervisor_config(prepared: &PreparedPod) -> SupervisorConfig {
    SupervisorConfig {
        services: prepared.rendered.services.clone(),
        log: LogConfig {
            dir: Some(prepared.pod.logs_dir()),
            ..LogConfig::default()
        },
        state_file: Some(prepared.pod.state_file()),
        ..SupervisorConfig::default()
    }
}

/// Lines shown at start: the pod directory and the URLs.
pub fn banner(prepared: &PreparedPod) -> Vec<String> {
    let mut lines = vec![format!("pod {}", prepared.pod.dir().display())];
    match &prepared.checkout.source {
        ProfileSource::Embedded => lines.push("profile: embedded Omnigent profile".to_owned()),
        ProfileSource::Repo(path) | ProfileSource::File(path) => {
            lines.push(format!("profile {}", path.display()));
        }
    }
    for (name, url) in &prepared.rendered.urls {
        lines.push(format!("{name} {url}"));
    }
    lines
}

/// Starts one watcher per watch rule; each burst of changes reloads the
/// rule's service (its dependents follow, by the supervisor's rules).
/// Returns the watchers (dropping them stops watching) and a line per rule
/// saying what is watched.
pub fn start_watchers(
    prepared: &PreparedPod,
    debounce: Duration,
    supervisor: &Supervisor,
) -> Result<(Vec<Watcher>, Vec<String>)> {
    let mut notices = Vec::new();
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    let mut watchers = Vec::new();
    for rule in &prepared.rendered.watch {
        let tx = tx.clone();
        let service = rule.service.clone();
        let watcher = Watcher::start(
            &WatchConfig {
                root: prepared.checkout.repo.clone(),
                patterns: rule.globs.clone(),
                debounce,
            },
            move |_paths| {
                let _ = tx.send(service.clone());
            },
        )?;
        notices.push(if watcher.watched().is_empty() {
            format!(
                "warning: nothing to watch for {} ({} matches no directory)",
                rule.service,
                rule.globs.join(", ")
            )
        } else {
            format!(
                "{} reloads on changes to {} (debounce {})",
                rule.service,
                rule.globs.join(", "),
                crate::describe::duration(debounce)
            )
        });
        watchers.push(watcher);
    }
    let supervisor = supervisor.clone();
    tokio::spawn(async move {
        while let Some(service) = rx.recv().await {
            let mut services = vec![service];
            // Rules firing together are one reload.
            while let Ok(more) = rx.try_recv() {
                if !services.contains(&more) {
                    services.push(more);
                }
            }
            let names: Vec<&str> = services.iter().map(String::as_str).collect();
            // Fails only once the supervisor has shut down.
            if supervisor.reload(&names).await.is_err() {
                return;
            }
        }
    });
    Ok((watchers, notices))
}

/// Runs `omnidev up`.
pub fn run(args: &UpArgs) -> Result<ExitCode> {
    let checkout = resolve_checkout(&args.pod)?;
    let prepared = prepare(checkout, args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(Error::Runtime)?;
    let use_tui = !args.headless && std::io::stdout().is_terminal();
    let debounce = args
        .debounce
        .map_or(prepared.rendered.debounce, Duration::from_millis);
    runtime.block_on(run_pod(prepared, debounce, use_tui))
}

async fn run_pod(prepared: PreparedPod, debounce: Duration, use_tui: bool) -> Result<ExitCode> {
    // Installed before anything is spawned so no signal is lost.
    let mut signals = omnidev_core::signals::ShutdownSignals::new().map_err(Error::Runtime)?;
    // Subscribed before any service starts, so no event (leftover notices,
    // the first lines of output) is missed by the front-end.
    let (supervisor, events) = Supervisor::start_subscribed(supervisor_config(&prepared)).await?;
    let (watchers, watch_notices) = match start_watchers(&prepared, debounce, &supervisor) {
        Ok(w) => w,
        Err(e) => {
            let _ = supervisor.shutdown().await;
            return Err(e);
        }
    };
    let mut prepared = prepared;
    prepared.notices.extend(watch_notices);
    // `status`, `stop`, `restart` and `up --detach` talk to this socket; a
    // pod without it still runs.
    let info = crate::control::ServerInfo::of(&prepared);
    let control = match crate::control::ControlServer::start(info, supervisor.clone()) {
        Ok(server) => Some(server),
        Err(e) => {
            prepared.notices.push(format!(
                "warning: {e}; `omnidev status/stop/restart` cannot reach this pod"
            ));
            None
        }
    };
    let code = if use_tui {
        run_tui(&prepared, &supervisor, events, &mut signals).await
    } else {
        run_headless(&prepared, &supervisor, events, &mut signals).await
    };
    drop(watchers);
    let stopped = supervisor.shutdown().await;
    drop(control);
    drop(prepared);
    let code = code?;
    stopped?;
    Ok(code)
}

async fn run_tui(
    prepared: &PreparedPod,
    supervisor: &Supervisor,
    events: tokio::sync::broadcast::Receiver<omnidev_core::Event>,
    signals: &mut omnidev_core::signals::ShutdownSignals,
) -> Result<ExitCode> {
    let services = prepared
        .rendered
        .services
        .iter()
        .map(|s| (s.name.clone(), s.readiness.is_some()))
        .collect();
    let backend = prepared
        .rendered
        .watch
        .iter()
        .map(|w| w.service.clone())
        .collect();
    let mut app = App::new(
        PodInfo {
            pod_dir: prepared.pod.dir().to_owned(),
            urls: prepared.rendered.urls.clone(),
        },
        services,
        backend,
        LogConfig::default().ring_lines,
    );
    app.apply_snapshot(&supervisor.snapshot());
    for notice in &prepared.notices {
        app.panes[0].push(tui::pane::PaneLine::new("omnidev", notice, true));
    }
    let handle = supervisor.clone();
    let on_action = move |action: Action| {
        let supervisor = handle.clone();
        tokio::spawn(async move {
            // Errors here only mean the supervisor is shutting down.
            let _ = match action {
                Action::Restart(name) => supervisor.restart(&name).await,
                Action::Reload(names) => {
                    let names: Vec<&str> = names.iter().map(String::as_str).collect();
                    supervisor.reload(&names).await
                }
                Action::ClearLogs(name) => supervisor.clear_logs(name.as_deref()),
                Action::Quit => Ok(()),
            };
        });
    };
    let catch_up = {
        let supervisor = supervisor.clone();
        move || tui::CatchUp {
            statuses: supervisor.snapshot(),
            logs: supervisor.logs(None).unwrap_or_default(),
        }
    };
    tui::run(app, tui::Feed { events, catch_up }, on_action, async {
        signals.recv().await;
    })
    .await?;
    eprintln!("omnidev: stopping the pod…");
    Ok(ExitCode::SUCCESS)
}

async fn run_headless(
    prepared: &PreparedPod,
    supervisor: &Supervisor,
    mut events: tokio::sync::broadcast::Receiver<omnidev_core::Event>,
    signals: &mut omnidev_core::signals::ShutdownSignals,
) -> Result<ExitCode> {
    let names: Vec<String> = prepared
        .rendered
        .services
        .iter()
        .map(|s| s.name.clone())
        .collect();
    let printer = Printer::new(
        &names,
        headless::use_colour(std::io::stdout().is_terminal()),
    );
    let mut out = std::io::stdout();
    let mut print = |line: String| {
        // A closed stdout (e.g. `| head`) must not stop the pod.
        let _ = writeln!(out, "{line}");
    };
    for line in banner(prepared).iter().chain(&prepared.notices) {
        print(printer.line("omnidev", line));
    }
    let settled = supervisor.wait_settled();
    tokio::pin!(settled);
    let code = loop {
        tokio::select! {
            event = events.recv() => match event {
                Ok(event) => {
                    if let Some(line) = printer.format(&event) {
                        print(line);
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    print(printer.line("omnidev", &format!("output fell behind: {n} events skipped")));
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break ExitCode::FAILURE,
            },
            settled = &mut settled => {
                // Flush what is already queued before leaving.
                while let Ok(event) = events.try_recv() {
                    if let Some(line) = printer.format(&event) {
                        print(line);
                    }
                }
                let ok = settled.success;
                print(printer.line(
                    "omnidev",
                    if ok { "every service exited 0" } else { "a service failed" },
                ));
                break if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE };
            }
            signal = signals.recv() => {
                print(printer.line("omnidev", &format!("{signal:?}: stopping the pod")));
                break ExitCode::SUCCESS;
            }
        }
    };
    Ok(code)
}

//! The profile a running pod runs, and its file watched: a change is
//! loaded with the loader `omnidev profile check` uses, rendered with the
//! pod's own ports and announced once (a `profile-changed` event naming
//! what applying it would change, or the error and where it is); nothing
//! is applied until someone asks (`omnidev reload-profile`, the TUI's `P`).
//!
//! The file watched is the one the pod was started from: `--profile FILE`,
//! else the checkout's `omnidev.toml` — also when the pod runs the
//! embedded profile because there was none, so a new `omnidev.toml` is a
//! change too. The watch is on the directory holding it (editors save by
//! renaming a new file over the old), and on the directory of what a
//! symbolic link there names. A save burst is one check: the check runs
//! once no event has come for the debounce period, and a check whose
//! outcome is the one last announced (a second save of the same text, a
//! comment) says nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use notify::Watcher as _;
use omnidev_core::sync::Locked;
use omnidev_core::{Applied, EventKind, ProfileApplied, ProfileChange, Supervisor};
use omnidev_pod::profile::changes::ProfileChanges;
use omnidev_pod::{PortRequest, Profile, ProfileSource, RenderedPod};

use crate::session::{Addresses, Checkout, PortSetUp, PreparedPod, SharedAddresses};

/// The shortest quiet time before a change to the profile file is
/// checked, whatever the pod's debounce.
const MIN_QUIET: Duration = Duration::from_millis(100);

/// The profile a running pod runs, what its file holds now, and the pod's
/// port set-up (shared with moving a lost port, which renders the profile
/// too).
#[derive(Debug)]
pub struct LiveProfile {
    /// The file watched.
    file: PathBuf,
    /// The pod was started with `--profile FILE`.
    explicit: bool,
    /// The pod runs the embedded profile (there was no `omnidev.toml`).
    embedded: bool,
    /// The pod directory.
    pod_dir: PathBuf,
    /// Whether the TUI runs the pod (its notices name its key).
    tui: bool,
    state: Mutex<Current>,
    addresses: SharedAddresses,
    /// Held while a change is applied: one at a time.
    applying: tokio::sync::Mutex<()>,
}

/// The profile the pod runs now: its checkout, ports and render.
#[derive(Debug)]
struct Current {
    checkout: Checkout,
    set_up: PortSetUp,
    rendered: RenderedPod,
    /// The outcome of the last check announced (or of the start): a check
    /// with the same outcome says nothing.
    announced: Result<RenderedPod, String>,
}

/// What the file holds now, checked.
#[derive(Debug)]
struct Next {
    profile: Profile,
    rendered: RenderedPod,
    changes: ProfileChanges,
    /// Its links, resolved now.
    links: BTreeMap<String, omnidev_pod::link::Linked>,
}

/// Why a profile file was not applied.
#[derive(Debug)]
pub enum ApplyError {
    /// It cannot be loaded (the error says where); the pod runs on with
    /// the profile it runs.
    Invalid(omnidev_pod::Error),
    /// The supervisor refused (it is shutting down).
    Supervisor(omnidev_core::Error),
}

impl LiveProfile {
    /// The live profile of a prepared pod, whose ports and URLs the
    /// control socket shows from `addresses`.
    pub fn new(prepared: &PreparedPod, addresses: SharedAddresses, tui: bool) -> Self {
        let checkout = prepared.checkout.clone();
        let (file, explicit, embedded) = match &checkout.source {
            ProfileSource::File(path) => (path.clone(), true, false),
            ProfileSource::Repo(path) => (path.clone(), false, false),
            ProfileSource::Embedded => {
                (checkout.repo.join(omnidev_pod::profile::PROFILE_FILE), false, true)
            }
        };
        Self {
            file,
            explicit,
            embedded,
            pod_dir: prepared.pod.dir().to_owned(),
            tui,
            state: Mutex::new(Current {
                checkout,
                set_up: prepared.ports.clone(),
                rendered: prepared.rendered.clone(),
                announced: Ok(prepared.rendered.clone()),
            }),
            addresses,
            applying: tokio::sync::Mutex::new(()),
        }
    }

    /// The profile file watched.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The watched services of the profile applied last
    /// ([`RenderedPod::watched`]).
    pub fn watched(&self) -> Vec<String> {
        self.state().rendered.watched()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Current> {
        self.state.locked()
    }

    /// How the file is named in notices: `omnidev.toml` for the
    /// checkout's own, the path for `--profile FILE`.
    fn shown(&self) -> String {
        if self.explicit {
            omnidev_core::text::quote_path(&self.file)
        } else {
            omnidev_pod::profile::PROFILE_FILE.to_owned()
        }
    }

    /// Loads the file and checks it as `omnidev up` and `omnidev profile
    /// check` do ([`Profile::check_run`], with the choices the pod runs
    /// with) and renders it with the pod's
    /// ports (a port the running profile lacks, or has at another base, at
    /// its new base: nothing is allocated by a check).
    fn load(&self) -> omnidev_pod::Result<Next> {
        let state = self.state();
        let mut profile = if self.embedded && std::fs::symlink_metadata(&self.file).is_err() {
            Profile::omnigent()
        } else {
            Profile::from_file(&self.file)?
        };
        let mut context = state.set_up.context.clone();
        // As `up` checks it, with what the pod runs with (the engine `up
        // --db` chose holds for the profile as edited).
        let path = std::env::var_os("PATH").unwrap_or_default();
        let run = omnidev_pod::RunChoice {
            db: context.db,
            scale: &context.scale,
            selection: &context.selection,
            path: &path,
        };
        profile.check_run(&state.checkout.repo, &run)?;
        // Its links as they are now: one added or pointed elsewhere is
        // followed, one that cannot be is refused (as `up` refuses it).
        context.links = omnidev_pod::link::resolve(
            &profile,
            &state.checkout.repo,
            &state.checkout.cache_root,
            &state.set_up.link_overrides,
        )?;
        let bases = profile.port_bases(&context.scale);
        let rebased = state.set_up.rebased(&bases);
        for (name, base) in bases {
            if rebased.contains(&name) {
                context.ports.0.insert(name, base);
            } else {
                context.ports.0.entry(name).or_insert(base);
            }
        }
        let rendered = profile.render(&context)?;
        let changes = ProfileChanges::between(&state.rendered, &rendered);
        Ok(Next { profile, rendered, changes, links: context.links })
    }

    /// Checks the file: the `profile-changed` event to publish, or `None`
    /// when its outcome is the one last announced.
    pub fn check(&self) -> Option<EventKind> {
        let next = self.load();
        let outcome = match &next {
            Ok(next) => Ok(next.rendered.clone()),
            Err(error) => Err(error.to_string()),
        };
        let mut state = self.state();
        if state.announced == outcome {
            return None;
        }
        state.announced = outcome;
        drop(state);
        Some(self.changed_event(next))
    }

    fn changed_event(&self, next: omnidev_pod::Result<Next>) -> EventKind {
        let next = next.map(|next| next.changes);
        profile_changed(&self.file, &self.shown(), next.as_ref(), self.tui)
    }

    /// Allocates the ports of the file's profile (a new port name gets a
    /// port, one whose base changed is probed again from it, the others
    /// keep theirs) and renders it with them.
    fn allocate(&self) -> omnidev_pod::Result<(Next, PortSetUp)> {
        let Next { profile, links, .. } = self.load()?;
        let state = self.state();
        let bases = profile.port_bases(&state.set_up.context.scale);
        let rebased = state.set_up.rebased(&bases);
        let overrides: BTreeMap<String, u16> = state
            .set_up
            .overrides
            .iter()
            .filter(|(name, _)| bases.iter().any(|(n, _)| n == *name))
            .map(|(name, port)| (name.clone(), *port))
            .collect();
        let ports = omnidev_pod::ports::update_ports(
            &PortRequest {
                cache_root: &state.checkout.cache_root,
                runtime_dir: &state.set_up.runtime_dir,
                pod_dir: &self.pod_dir,
                repo: &state.checkout.repo,
                bases: &bases,
                overrides: &overrides,
            },
            &rebased,
        )?;
        let mut set_up = state.set_up.clone();
        set_up.bases = bases;
        set_up.overrides = overrides;
        set_up.context.ports = ports;
        set_up.context.links = links;
        let rendered = profile.render(&set_up.context)?;
        let changes = ProfileChanges::between(&state.rendered, &rendered);
        Ok((Next { profile, rendered, changes, links: set_up.context.links.clone() }, set_up))
    }

    /// Applies the file as it is now (`omnidev reload-profile`, the TUI's
    /// `P`): loaded and checked as a change is, its ports allocated, then
    /// every service whose rendered spec changed restarts (dependents
    /// following), new ones start, removed ones stop
    /// ([`Supervisor::apply`]); waits until those restarted and started
    /// are ready or one failed, or `deadline`. Publishes a
    /// `profile-applied` event. One apply at a time.
    ///
    /// The new profile is the running one (what a port move renders, what
    /// the next check compares with, the ports and URLs the control socket
    /// shows) from before the supervisor acts, not after the wait: its
    /// services restart on its ports while the wait lasts.
    ///
    /// # Errors
    ///
    /// [`ApplyError::Invalid`] with the file's error (nothing changed);
    /// [`ApplyError::Supervisor`] when the pod is shutting down.
    pub async fn apply(
        self: &Arc<Self>,
        supervisor: &Supervisor,
        deadline: tokio::time::Instant,
    ) -> Result<(ProfileApplied, omnidev_core::Waited), ApplyError> {
        let _one_at_a_time = self.applying.lock().await;
        let this = self.clone();
        let (next, set_up) = tokio::task::spawn_blocking(move || this.allocate())
            .await
            .map_err(|_| ApplyError::Supervisor(omnidev_core::Error::ShutDown))?
            .map_err(ApplyError::Invalid)?;
        let services = next.rendered.services.clone();
        {
            // Refused only by a supervisor shutting down, whose profile no
            // longer matters.
            let mut state = self.state();
            state.checkout.profile = next.profile;
            state.set_up = set_up;
            state.rendered = next.rendered.clone();
            state.announced = Ok(next.rendered);
            self.show_addresses(&state.set_up, &state.rendered);
        }
        let (applied, waited) = supervisor
            .apply_until_ready(services, deadline)
            .await
            .map_err(ApplyError::Supervisor)?;
        let report = ProfileApplied {
            message: applied_message(&self.shown(), &applied, &next.changes),
            applied,
        };
        supervisor.publish(EventKind::ProfileApplied(report.clone()));
        Ok((report, waited))
    }

    /// What the control socket shows: the pod's ports and URLs now.
    fn show_addresses(&self, set_up: &PortSetUp, rendered: &RenderedPod) {
        *self.addresses.locked() = Addresses {
            ports: set_up.context.ports.0.clone(),
            urls: rendered.urls.clone(),
            links: set_up.context.links.clone(),
        };
    }
}

/// Moves a port lost to another process before its service bound it:
/// re-allocates it under the per-user lock, persists it in `pod.toml`,
/// renders the running profile again and updates what the control socket
/// shows. A forced port is refused, naming the holder.
impl omnidev_core::PortMover for LiveProfile {
    /// Moves the port `service` lost to another process (see
    /// [`omnidev_core::PortMover`]) and renders the running profile with it.
    fn move_port(
        &self,
        service: &str,
        port: u16,
        holder: &str,
    ) -> std::result::Result<omnidev_core::Moved, String> {
        let mut state = self.state();
        let Some(name) =
            state.set_up.context.ports.iter().find(|(_, p)| *p == port).map(|(n, _)| n.to_owned())
        else {
            return Err(format!("port {port} of {service} is not one of the pod's ports"));
        };
        let request = PortRequest {
            cache_root: &state.checkout.cache_root,
            runtime_dir: &state.set_up.runtime_dir,
            pod_dir: &self.pod_dir,
            repo: &state.checkout.repo,
            bases: &state.set_up.bases,
            overrides: &state.set_up.overrides,
        };
        let moved =
            omnidev_pod::ports::relocate_port(&request, &name, holder).map_err(|e| match e {
                omnidev_pod::Error::ForcedPortTaken { .. } => format!(
                    "{e}; stop that process, or start without forcing `{name}` to let omnidev \
                     pick a free port"
                ),
                e => e.to_string(),
            })?;
        state.set_up.context.ports.0.insert(name, moved);
        let rendered =
            state.checkout.profile.render(&state.set_up.context).map_err(|e| e.to_string())?;
        self.show_addresses(&state.set_up, &rendered);
        state.rendered.clone_from(&rendered);
        Ok(omnidev_core::Moved { port: moved, services: rendered.services })
    }
}

/// The `profile-changed` event of `file` (`shown` as people read it):
/// what the new profile would change (`Ok`), or why it cannot be loaded.
/// Whether there is anything to apply, and its words, are the pod's
/// ([`ProfileChanges`]); every front-end reads them from here.
pub(crate) fn profile_changed(
    file: &Path,
    shown: &str,
    next: Result<&ProfileChanges, &omnidev_pod::Error>,
    tui: bool,
) -> EventKind {
    let file = file.display().to_string();
    EventKind::ProfileChanged(match next {
        Ok(changes) => ProfileChange {
            file,
            message: changed_message(shown, changes, tui),
            changed: changes.changed.iter().map(|(n, _)| n.clone()).collect(),
            added: changes.added.clone(),
            removed: changes.removed.clone(),
            error: None,
            apply: changes.to_apply(),
        },
        Err(error) => ProfileChange {
            file,
            message: invalid_message(shown, error),
            error: Some(error.to_string()),
            ..ProfileChange::default()
        },
    })
}

/// How the front-end asks for a change to be applied, for notices.
fn how_to_apply(tui: bool) -> &'static str {
    if tui {
        "press P or run `omnidev reload-profile` to apply"
    } else {
        "run `omnidev reload-profile` to apply"
    }
}

/// `omnidev.toml changed: api (command, env), new service worker; press P
/// or run `omnidev reload-profile` to apply`.
fn changed_message(file: &str, changes: &ProfileChanges, tui: bool) -> String {
    if changes.nothing_to_apply() {
        if changes.is_empty() {
            return format!("{file} changed: the services are as they run; nothing to apply");
        }
        return format!("{file} changed: {changes}");
    }
    format!("{file} changed: {changes}; {}", how_to_apply(tui))
}

/// `applied omnidev.toml: restarted api; started worker; stopped old`.
fn applied_message(file: &str, applied: &Applied, changes: &ProfileChanges) -> String {
    let mut parts = Vec::new();
    for (verb, names) in [
        ("restarted", &applied.restarted),
        ("started", &applied.started),
        ("stopped", &applied.stopped),
    ] {
        if !names.is_empty() {
            parts.push(format!("{verb} {}", names.join(", ")));
        }
    }
    if parts.is_empty() {
        parts.push("nothing to restart, start or stop".to_owned());
    }
    if !applied.kept_stopped.is_empty() {
        parts.push(format!(
            "{} changed while stopped: started, it runs the new profile",
            applied.kept_stopped.join(", ")
        ));
    }
    if !changes.not_applied.is_empty() {
        parts.push(format!("{} applied when the pod starts again", changes.not_applied.join(", ")));
    }
    format!("applied {file}: {}", parts.join("; "))
}

/// `omnidev.toml changed but cannot be applied: …:3:9: …; the pod runs on
/// with the profile it loaded`.
fn invalid_message(file: &str, error: &omnidev_pod::Error) -> String {
    format!(
        "{file} changed but cannot be applied: {error}; the pod runs on with the profile it \
         loaded (`omnidev profile check` shows the problem)"
    )
}

/// Watches the profile file of a running pod; dropping it stops watching.
#[derive(Debug)]
pub struct ProfileWatcher {
    _watcher: Arc<Mutex<notify::RecommendedWatcher>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ProfileWatcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The directories to watch for `file`: its own, and that of what a link
/// there names (followed to the end).
fn watched_dirs(file: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = file.parent().map(Path::to_path_buf).into_iter().collect();
    if let Ok(real) = std::fs::canonicalize(file)
        && let Some(parent) = real.parent()
        && !dirs.iter().any(|d| d == parent)
    {
        dirs.push(parent.to_path_buf());
    }
    dirs
}

/// Whether a file event about `path` concerns the profile `file` (or what
/// a link there names).
fn concerns(path: &Path, file: &Path, real: Option<&Path>) -> bool {
    path == file || real.is_some_and(|real| path == real)
}

/// What a symbolic link at the profile's place names now (`None`: no
/// link, or one that names nothing), shared by the watcher's handler and
/// its task.
type LinkTarget = Arc<Mutex<Option<PathBuf>>>;

/// Points `target` at what `file` names now and watches its directory
/// too when it is new (a link made or moved after the start).
fn follow(
    file: &Path,
    target: &LinkTarget,
    watcher: &Mutex<notify::RecommendedWatcher>,
    dirs: &mut BTreeSet<PathBuf>,
) {
    let real = std::fs::canonicalize(file).ok().filter(|r| r != file);
    *target.locked() = real;
    for dir in watched_dirs(file) {
        if !dirs.contains(&dir)
            && watcher.locked().watch(&dir, notify::RecursiveMode::NonRecursive).is_ok()
        {
            dirs.insert(dir);
        }
    }
}

impl ProfileWatcher {
    /// Starts watching `live`'s file; a check runs once no change has come
    /// for `quiet` (at least [`MIN_QUIET`]) and its outcome, when new, is
    /// published on `supervisor`. A file that cannot be watched is a
    /// notice, not an error: the pod runs without it.
    pub fn start(live: Arc<LiveProfile>, supervisor: &Supervisor, quiet: Duration) -> Option<Self> {
        let quiet = quiet.max(MIN_QUIET);
        let file = live.file().to_path_buf();
        let target: LinkTarget = Arc::default();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        let (profile_file, linked) = (file.clone(), target.clone());
        let handler = move |event: notify::Result<notify::Event>| {
            let relevant = match event {
                Ok(event) => {
                    let real = linked.locked();
                    !matches!(event.kind, notify::EventKind::Access(_))
                        && event.paths.iter().any(|p| concerns(p, &profile_file, real.as_deref()))
                }
                // A lost event may have been about the profile.
                Err(_) => true,
            };
            if relevant {
                let _ = tx.send(());
            }
        };
        let mut dirs = BTreeSet::new();
        let watcher = notify::recommended_watcher(handler).and_then(|mut watcher| {
            // Its own directory must be watched; a link's target's is
            // watched when it can be.
            if let Some(dir) = file.parent() {
                watcher.watch(dir, notify::RecursiveMode::NonRecursive)?;
                dirs.insert(dir.to_path_buf());
            }
            Ok(Arc::new(Mutex::new(watcher)))
        });
        let watcher = match watcher {
            Ok(watcher) => watcher,
            Err(error) => {
                supervisor.notice(format!(
                    "changes to {} are not watched: {error}; `omnidev reload-profile` still \
                     applies them",
                    live.shown()
                ));
                return None;
            }
        };
        follow(&file, &target, &watcher, &mut dirs);
        let supervisor = supervisor.clone();
        let task_watcher = watcher.clone();
        let task = tokio::spawn(async move {
            while rx.recv().await.is_some() {
                // Trailing edge: wait until the burst is over.
                loop {
                    match tokio::time::timeout(quiet, rx.recv()).await {
                        Ok(Some(())) => {}
                        Ok(None) => return,
                        Err(_) => break,
                    }
                }
                follow(&file, &target, &task_watcher, &mut dirs);
                let live = live.clone();
                let checked = tokio::task::spawn_blocking(move || live.check()).await;
                if let Ok(Some(event)) = checked {
                    supervisor.publish(event);
                }
            }
        });
        Some(Self { _watcher: watcher, task })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn changes() -> ProfileChanges {
        ProfileChanges {
            changed: vec![("api".into(), vec!["command", "env"])],
            added: vec!["worker".into()],
            removed: vec!["old".into()],
            not_applied: vec!["watch rules"],
            urls: false,
        }
    }

    #[test]
    fn notices_name_what_changed_and_what_to_do() {
        let invalid = omnidev_pod::Profile::parse(
            "[services.api]\ncomand = [\"python3\"]\n",
            "/repo/omnidev.toml",
        )
        .expect_err("an unknown key");
        let nothing =
            ProfileChanges { not_applied: vec!["watch rules"], ..ProfileChanges::default() };
        let notices = [
            changed_message("omnidev.toml", &changes(), true),
            changed_message("omnidev.toml", &changes(), false),
            changed_message("'/p/dev.toml'", &nothing, false),
            changed_message("omnidev.toml", &ProfileChanges::default(), true),
            invalid_message("omnidev.toml", &invalid),
        ];
        insta::assert_snapshot!(notices.join("\n"));
    }
}

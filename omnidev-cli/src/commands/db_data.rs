//! `omnidev db snapshot | restore | snapshots | reset | clone`, and `up
//! --clone-from`: a database's data whole ([`omnidev_pod::snapshot`] makes
//! the copies; this drives the pod around them).
//!
//! A running server is stopped through the pod's control socket before
//! its data is swapped, and restarted after (its dependents restart with
//! it once it is ready); a running server is copied live (each engine's
//! own way: [`omnidev_pod::snapshot`]). SQLite is copied and restored live
//! through its backup API.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use omnidev_pod::database::{Database, DbEngine, DbParts};
use omnidev_pod::snapshot::{self, Copied, Snapshot, Source};

use crate::cli::{DbWhich, PodArgs};
use crate::control::Ask;
use crate::error::Result;
use crate::session::Checkout;

/// How long a service of the pod may take to stop or start again.
const ACTION: Duration = Duration::from_secs(120);

/// A database of this checkout's pod.
struct Target {
    checkout: Checkout,
    name: String,
    database: Database,
    parts: DbParts,
}

impl Target {
    fn of(which: &DbWhich) -> Result<Self> {
        let (checkout, name, parts) = super::db::database(&which.pod, which.name.as_deref())?;
        let database = checkout.profile.databases[&name].clone();
        Ok(Self {
            checkout,
            name,
            database,
            parts,
        })
    }

    fn pod_dir(&self) -> &Path {
        &self.checkout.pod_dir
    }

    fn data(&self) -> PathBuf {
        self.database.data_path(&self.name, self.pod_dir())
    }

    fn engine(&self) -> DbEngine {
        self.database.engine
    }

    /// Whether the pod runs, and whether its server has a process.
    fn running(&self) -> Result<(bool, bool)> {
        running(self.pod_dir(), &self.name)
    }

    fn fail(&self, message: String, help: &str) -> crate::error::Error {
        data_error(&self.name, message, help)
    }
}

fn data_error(name: &str, message: String, help: &str) -> crate::error::Error {
    omnidev_pod::Error::DatabaseData {
        name: name.to_owned(),
        message,
        help: help.to_owned(),
    }
    .into()
}

/// Whether the pod in `pod_dir` runs, and whether its service `name` has
/// a process.
fn running(pod_dir: &Path, name: &str) -> Result<(bool, bool)> {
    let status = crate::control::inspect(pod_dir)?;
    let up =
        (status.services.iter()).any(|s| s.status.name == name && s.status.state.pid().is_some());
    Ok((status.running, status.running && up))
}

/// Asks the running pod in `pod_dir`; a refusal or a failed service is the
/// error.
fn ask(pod_dir: &Path, name: &str, asked: &Ask, what: &str) -> Result<()> {
    let response = asked.send(pod_dir)?;
    if response.ok && response.failed.is_empty() {
        return Ok(());
    }
    let why = response
        .error
        .clone()
        .unwrap_or_else(|| response.failures().join("; "));
    Err(data_error(
        name,
        format!("could not {what}: {why}"),
        "`omnidev status` shows the pod; `omnidev logs NAME` the database's output",
    ))
}

/// The data action `action` names, done: what it did, in a line (`None`
/// for the shell, `url` and `snapshots`).
pub fn act(action: Option<&crate::cli::DbAction>) -> Option<Result<String>> {
    use crate::cli::DbAction;
    Some(match action? {
        DbAction::Snapshot { which, label } => snapshot(which, label.as_deref()),
        DbAction::Restore { which, label } => restore(which, label),
        DbAction::Reset { which, yes } => reset(which, *yes),
        DbAction::Clone { which, from } => clone(which, from.as_deref()),
        DbAction::SeedRun(args) => seed_run(args),
        DbAction::Url { .. } | DbAction::Snapshots { .. } => return None,
    })
}

/// `omnidev db seed-run`: runs the seed's command (its output the
/// service's), then keeps the database as it left it in the user's cache
/// under the seed's key. A failed seed is the error, its exit code said.
fn seed_run(args: &crate::cli::SeedRunArgs) -> Result<String> {
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| data_error("seed", "no command".to_owned(), "give it after `--`"))?;
    let status = std::process::Command::new(program)
        .args(rest)
        .status()
        .map_err(crate::error::Error::spawn(program))?;
    let target = Target::of(&args.which)?;
    if !status.success() {
        return Err(target.fail(
            format!("its seed `{program}` failed ({status})"),
            "its output above says why; `omnidev restart NAME-seed` runs it again",
        ));
    }
    let (_, up) = target.running()?;
    let live = (target.engine().is_server() && up).then_some(&target.parts);
    let data = target.data();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let password = target
        .database
        .engine
        .is_server()
        .then(|| PathBuf::from(&target.parts["password-file"]));
    let (entry, copied) = omnidev_pod::db_seed::store(
        &target.checkout.cache_root,
        &args.key,
        &Source {
            name: &target.name,
            engine: target.engine(),
            data: &data,
            live,
            path: &path,
        },
        password.as_deref(),
    )?;
    Ok(format!(
        "seeded {}; kept in the cache as {} ({})",
        target.name,
        entry.key,
        cost(&copied)
    ))
}

/// Each database with a seed and no data yet whose seed's result the
/// user's cache holds starts from that result (before anything renders:
/// its server's password comes with it). What was restored, a line each.
pub fn seeds_from_cache(checkout: &Checkout, pod_dir: &Path) -> Result<Vec<String>> {
    let mut said = Vec::new();
    let path = std::env::var_os("PATH").unwrap_or_default();
    for (name, database) in &checkout.profile.databases {
        let data = database.data_path(name, pod_dir);
        if database.seed.is_none() || std::fs::symlink_metadata(&data).is_ok() {
            continue;
        }
        let key = omnidev_pod::db_seed::key(&checkout.repo, name, database, &path)?;
        let Some(entry) = omnidev_pod::db_seed::cached(&checkout.cache_root, &key) else {
            continue;
        };
        let password = database
            .engine
            .is_server()
            .then(|| omnidev_pod::database::password_file(name, pod_dir));
        let copied = omnidev_pod::db_seed::restore(
            &checkout.cache_root,
            &entry,
            &data,
            password.as_deref(),
            &path,
        )?;
        said.push(format!(
            "{name} starts from its seed's cached result {key}: {}",
            cost(&copied)
        ));
    }
    Ok(said)
}

/// `omnidev db snapshot [LABEL]`.
pub fn snapshot(which: &DbWhich, label: Option<&str>) -> Result<String> {
    let target = Target::of(which)?;
    let label = label.map_or_else(
        || chrono::Utc::now().format("%Y%m%d-%H%M%S").to_string(),
        str::to_owned,
    );
    let data = target.data();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let (pod_runs, up) = target.running()?;
    let source = |live| Source {
        name: &target.name,
        engine: target.engine(),
        data: &data,
        live,
        path: &path,
    };
    let pod_dir = target.pod_dir();
    let taken = match target.engine() {
        DbEngine::Sqlite => Snapshot::take(pod_dir, &source(None), &label)?,
        _ if up => Snapshot::take(pod_dir, &source(Some(&target.parts)), &label)?,
        _ if pod_runs => {
            // Stopped for its copy (so it does not start meanwhile), and
            // started again when it ran.
            let stop = Ask::stop(vec![target.name.clone()], ACTION);
            ask(pod_dir, &target.name, &stop, "stop it for its copy")?;
            let taken = Snapshot::take(pod_dir, &source(None), &label);
            if up {
                let start = Ask::start(vec![target.name.clone()], ACTION);
                ask(pod_dir, &target.name, &start, "start it again")?;
            }
            taken?
        }
        _ => Snapshot::take(pod_dir, &source(None), &label)?,
    };
    let (snapshot, copied) = taken;
    Ok(format!(
        "snapshot {}/{}: {}",
        snapshot.database,
        snapshot.label,
        cost(&copied)
    ))
}

/// What a copy cost, in words.
fn cost(copied: &Copied) -> String {
    format!(
        "{} in {:.2} s ({})",
        bytes(copied.bytes),
        copied.took.as_secs_f64(),
        copied.how.word()
    )
}

fn bytes(count: u64) -> String {
    #[expect(clippy::cast_precision_loss, reason = "a size shown to one decimal")]
    let mib = count as f64 / (1024.0 * 1024.0);
    format!("{mib:.1} MiB")
}

/// `omnidev db restore LABEL`.
pub fn restore(which: &DbWhich, label: &str) -> Result<String> {
    let target = Target::of(which)?;
    let snapshot = Snapshot::find(target.pod_dir(), &target.name, label)?;
    if snapshot.engine != target.engine() {
        return Err(target.fail(
            format!(
                "snapshot {label} is of {}, the database runs on {}",
                snapshot.engine.word(),
                target.engine().word()
            ),
            "restore it with the pod on that engine (`omnidev up --db ENGINE`)",
        ));
    }
    let started = std::time::Instant::now();
    put_in(&target, &snapshot.data(target.pod_dir()), None)?;
    Ok(format!(
        "restored {}/{} ({}) in {:.2} s",
        target.name,
        label,
        bytes(snapshot.bytes),
        started.elapsed().as_secs_f64()
    ))
}

/// Puts the data at `from` (a snapshot's, a clone's) in place of the
/// target's; `password` is the file whose password comes with it (a
/// clone's source's). SQLite goes in live, through its backup API; a
/// server's data is copied beside its own, the server stopped, the data
/// swapped, and the server (and its dependents) started again.
fn put_in(target: &Target, from: &Path, password: Option<&Path>) -> Result<()> {
    let data = target.data();
    if target.engine() == DbEngine::Sqlite {
        return Ok(snapshot::sqlite_restore(&target.name, from, &data)?);
    }
    let staged = snapshot::beside(&data, ".restoring");
    snapshot::remove_any(&staged)?;
    let path = std::env::var_os("PATH").unwrap_or_default();
    snapshot::copy(
        &Source {
            name: &target.name,
            engine: target.engine(),
            data: from,
            live: None,
            path: &path,
        },
        &staged,
    )?;
    let pod_dir = target.pod_dir();
    let (pod_runs, _) = target.running()?;
    if pod_runs {
        let stop = Ask::stop(vec![target.name.clone()], ACTION);
        ask(pod_dir, &target.name, &stop, "stop it")?;
    }
    snapshot::swap_in(&staged, &data)?;
    if let Some(file) = password {
        snapshot::copy_password(file, Path::new(&target.parts["password-file"]))?;
        if pod_runs {
            // The services' environment holds the password (a Redis URL).
            let reload = Ask::reload_profile(ACTION);
            ask(
                pod_dir,
                &target.name,
                &reload,
                "give the services its password",
            )?;
        }
    }
    if pod_runs {
        let restart = Ask::restart(Some(target.name.clone()), false, false, ACTION);
        ask(pod_dir, &target.name, &restart, "start it again")?;
    }
    Ok(())
}

/// The pod's snapshots (`omnidev db snapshots`).
pub fn list(pod: &PodArgs) -> Result<Vec<Snapshot>> {
    Ok(Snapshot::list(&crate::session::pod_dir(pod)?))
}

/// When a snapshot was taken, in UTC.
pub fn taken_at(snapshot: &Snapshot) -> String {
    i64::try_from(snapshot.taken)
        .ok()
        .and_then(|secs| chrono::DateTime::from_timestamp(secs, 0))
        .map_or_else(String::new, |t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
}

/// `omnidev db snapshots`: a line each.
pub fn snapshots(pod: &PodArgs) -> Result<ExitCode> {
    let all = list(pod)?;
    let mut text = String::new();
    if all.is_empty() {
        text.push_str("no snapshots (`omnidev db snapshot [LABEL]` takes one)\n");
    }
    for s in &all {
        let _ = writeln!(
            text,
            "{}/{}  {}  {}  {}",
            s.database,
            s.label,
            s.engine.word(),
            bytes(s.bytes),
            taken_at(s)
        );
    }
    let cache_root = omnidev_pod::pod::cache_root()?;
    let seeds = omnidev_pod::db_seed::list(&cache_root);
    if !seeds.is_empty() {
        let total: u64 = seeds.iter().map(|e| e.bytes).sum();
        let _ = writeln!(
            text,
            "seed results in {} ({} of at most {}):",
            omnidev_pod::db_seed::cache_dir(&cache_root).display(),
            bytes(total),
            bytes(omnidev_pod::db_seed::MAX_CACHE_BYTES)
        );
        for entry in &seeds {
            let _ = writeln!(
                text,
                "  {}  {}  {}  {}",
                entry.key,
                entry.database,
                entry.engine.word(),
                bytes(entry.bytes)
            );
        }
    }
    crate::output::write_stdout(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// `omnidev db reset --yes`.
pub fn reset(which: &DbWhich, yes: bool) -> Result<String> {
    let target = Target::of(which)?;
    if !yes {
        return Err(target.fail(
            "a reset removes its data".to_owned(),
            "add --yes; `omnidev db snapshot` first keeps a copy",
        ));
    }
    let data = target.data();
    if target.engine() == DbEngine::Sqlite {
        // An empty database restored over it: live, as any restore.
        snapshot::sqlite_reset(&target.name, &data)?;
    } else {
        let pod_dir = target.pod_dir();
        let (pod_runs, _) = target.running()?;
        if pod_runs {
            let stop = Ask::stop(vec![target.name.clone()], ACTION);
            ask(pod_dir, &target.name, &stop, "stop it")?;
        }
        snapshot::remove_data(&data)?;
        if pod_runs {
            let restart = Ask::restart(Some(target.name.clone()), false, false, ACTION);
            ask(pod_dir, &target.name, &restart, "start it afresh")?;
        }
    }
    Ok(format!("{} starts afresh", target.name))
}

/// `omnidev db clone [--from CHECKOUT]`.
pub fn clone(which: &DbWhich, from: Option<&Path>) -> Result<String> {
    let target = Target::of(which)?;
    let source = SourcePod::find(&target.checkout, from)?;
    let staged = snapshot::beside(&target.data(), ".cloning");
    snapshot::remove_any(&staged)?;
    let copied = source.copy(&target.checkout, &target.name, &staged)?;
    let password = source.password_file(&target.database, &target.name);
    let put = put_in(&target, &staged, password.as_deref());
    snapshot::remove_any(&staged)?;
    put?;
    Ok(format!(
        "cloned {} from {}: {}",
        target.name,
        source.repo.display(),
        cost(&copied)
    ))
}

/// `up --clone-from CHECKOUT`: each database of the pod in `pod_dir`
/// without data yet becomes a copy of the source pod's, before anything
/// starts. What was copied, a line each.
pub fn clone_missing(checkout: &Checkout, pod_dir: &Path, from: &Path) -> Result<Vec<String>> {
    let source = SourcePod::find(checkout, Some(from))?;
    let mut said = Vec::new();
    for (name, database) in &checkout.profile.databases {
        let data = database.data_path(name, pod_dir);
        if std::fs::symlink_metadata(&data).is_ok() {
            continue;
        }
        let copied = source.copy(checkout, name, &data)?;
        if let Some(file) = source.password_file(database, name) {
            let ours = omnidev_pod::database::password_file(name, pod_dir);
            snapshot::copy_password(&file, &ours)?;
        }
        said.push(format!(
            "cloned {name} from {}: {}",
            source.repo.display(),
            cost(&copied)
        ));
    }
    Ok(said)
}

/// The pod a clone copies from.
struct SourcePod {
    repo: PathBuf,
    pod_dir: PathBuf,
}

impl SourcePod {
    /// The pod of checkout `from` (default: the main worktree of
    /// `checkout`'s repository).
    fn find(checkout: &Checkout, from: Option<&Path>) -> Result<Self> {
        let repo = match from {
            Some(dir) => dir.to_path_buf(),
            None => main_worktree(&checkout.repo)?,
        };
        let repo = std::fs::canonicalize(&repo).map_err(|e| {
            data_error(
                "clone",
                format!("cannot find {}: {e}", repo.display()),
                "name an existing checkout with --from",
            )
        })?;
        let ours = std::fs::canonicalize(&checkout.repo).unwrap_or_else(|_| checkout.repo.clone());
        if repo == ours {
            return Err(data_error(
                "clone",
                format!("{} is this checkout", repo.display()),
                "name another checkout with --from",
            ));
        }
        let pod_dir = omnidev_pod::pod::default_pod_dir(&checkout.cache_root, &repo);
        if !pod_dir.join(omnidev_pod::layout::MARKER).is_file() {
            return Err(data_error(
                "clone",
                format!(
                    "{} has no pod (looked at {})",
                    repo.display(),
                    pod_dir.display()
                ),
                "run `omnidev up` in that checkout once, or name another with --from",
            ));
        }
        Ok(Self { repo, pod_dir })
    }

    /// Copies database `name` of this pod (as `checkout`'s profile
    /// declares it, on the engine the source runs it on) to `dest`.
    fn copy(&self, checkout: &Checkout, name: &str, dest: &Path) -> Result<Copied> {
        let mut profile = checkout.profile.clone();
        if let Some(engine) = omnidev_pod::Pod::at(&self.pod_dir).db_engine() {
            profile.choose_engine(engine)?;
        }
        let database = &profile.databases[name];
        let ours = &checkout.profile.databases[name];
        if database.engine != ours.engine {
            return Err(data_error(
                name,
                format!(
                    "{} runs it on {}, this pod on {}",
                    self.repo.display(),
                    database.engine.word(),
                    ours.engine.word()
                ),
                "run both on one engine (`omnidev up --db ENGINE`)",
            ));
        }
        let data = database.data_path(name, &self.pod_dir);
        let (_, up) = running(&self.pod_dir, name)?;
        let parts = if up && database.engine.is_server() {
            Some(self.parts(&profile, name)?)
        } else {
            None
        };
        let path = std::env::var_os("PATH").unwrap_or_default();
        Ok(snapshot::copy(
            &Source {
                name,
                engine: database.engine,
                data: &data,
                live: parts.as_ref(),
                path: &path,
            },
            dest,
        )?)
    }

    /// What `{db.NAME.…}` is in the source pod: its ports and socket
    /// directory (nothing is written there: its password file is there
    /// since its server first ran).
    fn parts(&self, profile: &omnidev_pod::Profile, name: &str) -> Result<DbParts> {
        let ports = omnidev_pod::read_ports(&self.pod_dir)?.ports;
        let ctx = omnidev_pod::RenderContext::from_process_env(
            self.repo.clone(),
            self.pod_dir.clone(),
            ports,
        );
        Ok(profile.databases_of(&ctx)?.remove(name).unwrap_or_default())
    }

    /// The source's password file for a server database `name`.
    fn password_file(&self, database: &Database, name: &str) -> Option<PathBuf> {
        database
            .engine
            .is_server()
            .then(|| omnidev_pod::database::password_file(name, &self.pod_dir))
    }
}

/// The main worktree of the repository `repo` is in (`git worktree
/// list`'s first).
fn main_worktree(repo: &Path) -> Result<PathBuf> {
    let output = std::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["worktree", "list", "--porcelain"])
        .output()
        .map_err(crate::error::Error::spawn("git"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .find_map(|line| line.strip_prefix("worktree "))
        .map(PathBuf::from)
        .filter(|_| output.status.success())
        .ok_or_else(|| {
            data_error(
                "clone",
                format!("{} is in no git repository with worktrees", repo.display()),
                "name the checkout to copy from with --from",
            )
        })
}

//! A pod's database as the CLI, MCP and the dashboard reach it: its
//! checkout's profile and parts, and `omnidev db snapshot | restore |
//! snapshots | reset | clone | seed-run` ([`omnidev_pod::snapshot`],
//! [`omnidev_pod::clone`] and [`omnidev_pod::db_seed`] make the copies;
//! this drives the pod around them).
//!
//! Before a server's data is swapped, the services that use it and then
//! the server are stopped through the pod's control socket, and started
//! again after; a running server is copied live (each engine's own way:
//! [`omnidev_pod::snapshot`]). SQLite is copied and restored live through
//! its backup API.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use omnidev_pod::clone::SourcePod;
use omnidev_pod::database::{Database, DbEngine, DbParts};
use omnidev_pod::snapshot::{self, CopySource, Snapshot};

use crate::cli::{DbWhich, PodArgs};
use crate::control::Ask;
use crate::error::{Error, Result};
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
        let (checkout, name, parts) = database(&which.pod, which.name.as_deref())?;
        let database = checkout.profile.databases[&name].clone();
        Ok(Self { checkout, name, database, parts })
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
        let (runs, up) = alive(self.pod_dir())?;
        Ok((runs, up.contains(&self.name)))
    }

    fn fail(&self, message: String, help: &str) -> crate::error::Error {
        data_error(&self.name, message, help)
    }
}

fn data_error(name: &str, message: String, help: &str) -> crate::error::Error {
    omnidev_pod::Error::DatabaseData { name: name.to_owned(), message, help: help.to_owned() }
        .into()
}

/// Whether the pod in `pod_dir` runs, and its services that have a
/// process (one ask of the pod).
fn alive(pod_dir: &Path) -> Result<(bool, Vec<String>)> {
    let status = crate::control::inspect(pod_dir)?;
    let up = (status.services.iter())
        .filter(|s| status.running && s.status.state.pid().is_some())
        .map(|s| s.status.name.clone())
        .collect();
    Ok((status.running, up))
}

/// Asks the running pod in `pod_dir`; a refusal or a failed service is the
/// error.
fn ask(pod_dir: &Path, name: &str, asked: &Ask, what: &str) -> Result<()> {
    let response = asked.send(pod_dir)?;
    if response.failed.is_empty() {
        return Ok(());
    }
    let why = response.failures().join("; ");
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
    let password =
        target.database.engine.is_server().then(|| PathBuf::from(&target.parts["password-file"]));
    let (entry, copied) = omnidev_pod::db_seed::store(
        &target.checkout.cache_root,
        &args.key,
        &CopySource { name: &target.name, engine: target.engine(), data: &data, live, path: &path },
        password.as_deref(),
    )?;
    Ok(format!("seeded {}; kept in the cache as {} ({})", target.name, entry.key, copied.said()))
}

/// `omnidev db snapshot [LABEL]`.
pub fn snapshot(which: &DbWhich, label: Option<&str>) -> Result<String> {
    let target = Target::of(which)?;
    let label =
        label.map_or_else(|| chrono::Utc::now().format("%Y%m%d-%H%M%S").to_string(), str::to_owned);
    let data = target.data();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let (pod_runs, up) = target.running()?;
    let source = |live| CopySource {
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
    Ok(format!("snapshot {}/{}: {}", snapshot.database, snapshot.label, copied.said()))
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
        snapshot::mib(snapshot.bytes),
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
        &CopySource {
            name: &target.name,
            engine: target.engine(),
            data: from,
            live: None,
            path: &path,
        },
        &staged,
    )?;
    let pod_dir = target.pod_dir();
    let (pod_runs, up) = alive(pod_dir)?;
    // The services that use it first, then its server.
    let mut users = target.checkout.profile.database_users(&target.name);
    users.retain(|user| up.contains(user));
    if pod_runs {
        let mut stopped = users.clone();
        stopped.push(target.name.clone());
        let stop = Ask::stop(stopped, ACTION);
        ask(pod_dir, &target.name, &stop, "stop it and the services that use it")?;
    }
    snapshot::swap_in(&staged, &data)?;
    if let Some(file) = password {
        snapshot::copy_password(file, Path::new(&target.parts["password-file"]))?;
        if pod_runs {
            // The services' environment holds the password (a Redis URL).
            let reload = Ask::reload_profile(ACTION);
            ask(pod_dir, &target.name, &reload, "give the services its password")?;
        }
    }
    if pod_runs {
        let mut started = vec![target.name.clone()];
        started.extend(users);
        let start = Ask::start(started, ACTION);
        ask(pod_dir, &target.name, &start, "start it and its users again")?;
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
            snapshot::mib(s.bytes),
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
            snapshot::mib(total),
            snapshot::mib(omnidev_pod::db_seed::MAX_CACHE_BYTES)
        );
        for entry in &seeds {
            let _ = writeln!(
                text,
                "  {}  {}  {}  {}",
                entry.key,
                entry.database,
                entry.engine.word(),
                snapshot::mib(entry.bytes)
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
            let restart =
                Ask::restart(crate::control::RestartScope::service(target.name.clone()), ACTION);
            ask(pod_dir, &target.name, &restart, "start it afresh")?;
        }
    }
    Ok(format!("{} starts afresh", target.name))
}

/// `omnidev db clone [--from CHECKOUT]`.
pub fn clone(which: &DbWhich, from: Option<&Path>) -> Result<String> {
    let target = Target::of(which)?;
    let checkout = &target.checkout;
    let source = SourcePod::find(&checkout.cache_root, &checkout.repo, from)?;
    let staged = snapshot::beside(&target.data(), ".cloning");
    snapshot::remove_any(&staged)?;
    let copied = source.copy(&checkout.profile, &target.name, &staged)?;
    let password = source.password_file(&target.database, &target.name);
    let put = put_in(&target, &staged, password.as_deref());
    snapshot::remove_any(&staged)?;
    put?;
    Ok(format!("cloned {} from {}: {}", target.name, source.repo.display(), copied.said()))
}

/// The checkout (its profile on the engine its pod runs), and the name and
/// parts of its database `name` (the profile's first when `None`).
pub fn database(
    pod: &PodArgs,
    name: Option<&str>,
) -> Result<(crate::session::Checkout, String, DbParts)> {
    let mut checkout = crate::session::resolve_checkout(pod)?;
    // On the engine the pod runs them on (`up --db`).
    if let Some(engine) = omnidev_pod::Pod::at(&checkout.pod_dir).db_engine() {
        let _ = checkout.profile.choose_engine(engine);
    }
    let declared: Vec<String> = checkout.profile.databases.keys().cloned().collect();
    let name = match name {
        Some(name) => name.to_owned(),
        None => declared.first().cloned().ok_or_else(|| Error::UnknownDatabase {
            message: "the profile declares no database".to_owned(),
        })?,
    };
    if !checkout.profile.databases.contains_key(&name) {
        return Err(Error::UnknownDatabase {
            message: format!(
                "the profile declares no database `{name}` (it declares {})",
                omnidev_pod::names::listed(declared.iter())
            ),
        });
    }
    let mut beside = crate::session::prepare_beside(&checkout)?;
    let parts = beside.databases.remove(&name).unwrap_or_default();
    Ok((checkout, name, parts))
}

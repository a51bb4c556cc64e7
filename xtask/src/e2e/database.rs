//! Case: a Postgres, a MariaDB and a Redis of each pod's own, on the
//! machine's real servers, run as an unprivileged user (Postgres and
//! MariaDB refuse root; as root the case makes the user `omnidev-e2e` and
//! runs omnidev through `runuser`): two checkouts, each its own servers,
//! ports and data; a row (a key) written through one not seen through the
//! other; data kept across `restart` and `stop`/`up` with no crash
//! recovery; SIGKILL of omnidev leaves no server of the pod. Then the
//! bundled example on its pod's own Postgres (`up --db postgres`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

use super::{Ctx, SOON, UP, send_signal};
use crate::as_user::AsUser;

/// A pod's profile: a Postgres named `main`, a MariaDB and a Redis, and
/// a service that waits for Postgres and reaches it through its URL.
const PROFILE: &str = r#"
[databases.main]
engine = "postgres"

[databases.maria]
engine = "mariadb"

[databases.cache]
engine = "redis"

[env]
DATABASE_URL = "{db.main.url}"

[services.app]
command = ["sh", "-c", "psql \"$DATABASE_URL\" -tAc 'select 1' && exec sleep 3600"]
ready = { log = "^1$" }
"#;

/// Per database: what writes a row (a key) through checkout a, what
/// makes the same empty place in b, and what counts it (the answer ends
/// with the count).
const STORES: &[(&str, &str, &str, &str)] = &[
    (
        "main",
        "create table notes(body text); insert into notes values ('written in a');",
        "create table notes(body text);",
        "\\pset tuples_only on\nselect count(*) from notes;",
    ),
    (
        "maria",
        "create table notes(body text); insert into notes values ('written in a');",
        "create table notes(body text);",
        "select count(*) from notes;",
    ),
    ("cache", "SET note written-in-a", "PING", "EXISTS note"),
];

/// Who runs omnidev here: [`AsUser`], in a directory of the case's.
struct Unprivileged(AsUser);

impl std::ops::Deref for Unprivileged {
    type Target = AsUser;

    fn deref(&self) -> &AsUser {
        &self.0
    }
}

impl Unprivileged {
    fn new(ctx: &Ctx) -> Result<Self> {
        // One of its own for each case (they run side by side), short: the
        // sockets under it must fit a socket's address.
        let case: String = ctx.tag.splitn(3, '-').take(2).collect::<Vec<_>>().join("-");
        let dir = std::env::temp_dir().join(format!("omnidev-db-{case}"));
        Ok(Self(AsUser::new(dir, ctx.omnidev_path())?))
    }

    /// `omnidev ARGS` in `repo`, as the user, with the case's tag.
    fn omnidev(&self, ctx: &Ctx, repo: &Path, args: &[&str]) -> Command {
        let base = ctx.command(self.0.omnidev_path());
        let env: Vec<(String, String)> = base
            .get_envs()
            .filter_map(|(k, v)| Some((k.to_str()?.to_owned(), v?.to_str()?.to_owned())))
            .collect();
        self.0.omnidev(env, repo, args)
    }

    /// A checkout of the user's with the profile.
    fn checkout(&self, name: &str) -> Result<PathBuf> {
        let repo = self.dir.join(name);
        std::fs::create_dir_all(repo.join(".git"))?;
        std::fs::write(repo.join("omnidev.toml"), PROFILE)?;
        self.0.give(&repo)?;
        Ok(repo)
    }

    /// A checkout of the bundled example of the user's, pinned to the
    /// machine's Python, and uv beside it.
    fn example(&self, ctx: &Ctx) -> Result<PathBuf> {
        let ours = ctx.checkout("example")?;
        let repo = self.dir.join("example");
        let copied = Command::new("cp").arg("-a").arg(&ours).arg(&repo).status()?;
        ensure!(copied.success(), "cp -a {}", ours.display());
        let version = Command::new("python3")
            .args(["-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
            .output()?;
        std::fs::write(repo.join(".python-version"), &version.stdout)?;
        let uv = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|dir| dir.join("uv"))
            .find(|uv| uv.is_file())
            .context("uv on PATH")?;
        std::fs::create_dir_all(self.dir.join("bin"))?;
        std::fs::copy(uv, self.dir.join("bin/uv"))?;
        self.0.give(&repo)?;
        Ok(repo)
    }

    /// `omnidev ARGS` in `repo` to its end; its output, which it must
    /// have exited 0 with.
    fn ok(&self, ctx: &mut Ctx, repo: &Path, args: &[&str], timeout: Duration) -> Result<String> {
        let (status, out) =
            ctx.run_to_end(self.omnidev(ctx, repo, args), &args.join("-"), timeout)?;
        ensure!(status.success(), "omnidev {args:?} failed ({status}):\n{out}");
        Ok(out)
    }

    /// What the shell of database `name` (`omnidev db NAME`) says to
    /// `input`.
    fn db(&self, ctx: &mut Ctx, repo: &Path, name: &str, input: &str) -> Result<String> {
        let mut command = self.omnidev(ctx, repo, &["db", name]);
        let file = self.dir.join("input");
        let input = match name {
            "main" => format!("\\set ON_ERROR_STOP 1\n{input}\n"),
            // Beside a writer: wait for its lock, as any reader would.
            "lite" => format!(".timeout 10000\n{input}\n"),
            _ => format!("{input}\n"),
        };
        std::fs::write(&file, input)?;
        command.stdin(std::fs::File::open(&file)?);
        let (status, out) = ctx.run_to_end(command, &format!("db-{name}"), SOON)?;
        ensure!(status.success(), "omnidev db {name} failed ({status}):\n{out}");
        ensure!(!out.contains("ERR"), "omnidev db {name}:\n{out}");
        Ok(out)
    }

    /// The count each database gives in `repo`, in [`STORES`]' order.
    fn counts(&self, ctx: &mut Ctx, repo: &Path) -> Result<String> {
        let mut counts = String::new();
        for (name, _, _, count) in STORES {
            let out = self.db(ctx, repo, name, count)?;
            counts.push(out.trim().chars().last().unwrap_or('?'));
        }
        Ok(counts)
    }
}

pub fn databases_per_checkout_as_an_unprivileged_user(ctx: &mut Ctx) -> Result<()> {
    let user = Unprivileged::new(ctx)?;
    let (a, b) = (user.checkout("a")?, user.checkout("b")?);
    let started = Instant::now();
    user.ok(ctx, &a, &["up", "--detach"], UP)?;
    ctx.note(format!(
        "a new pod's Postgres, MariaDB and Redis (their data made) ready, and its app, in {:?}",
        started.elapsed()
    ));
    user.ok(ctx, &b, &["up", "--detach"], UP)?;
    let status = |ctx: &mut Ctx, repo: &Path| -> Result<Value> {
        Ok(serde_json::from_str(&user.ok(ctx, repo, &["status", "--json"], SOON)?)?)
    };
    let (sa, sb) = (status(ctx, &a)?, status(ctx, &b)?);
    for (name, ..) in STORES {
        ensure!(sa["ports"][name] != sb["ports"][name], "one {name} port for two pods: {sa} {sb}");
    }
    let urls = (user.ok(ctx, &a, &["db", "url"], SOON)?, user.ok(ctx, &b, &["db", "url"], SOON)?);
    ensure!(urls.0 != urls.1, "one URL for two pods: {urls:?}");

    // A row (a key) through one is not seen through the other.
    for (name, write, empty, _) in STORES {
        user.db(ctx, &a, name, write)?;
        user.db(ctx, &b, name, empty)?;
    }
    ensure!(user.counts(ctx, &a)? == "111", "a's rows");
    ensure!(user.counts(ctx, &b)? == "000", "a's rows seen through b");

    // Kept across a restart of each server and a stop and up of the pod,
    // each a clean shutdown.
    for (name, ..) in STORES {
        user.ok(ctx, &a, &["restart", name], UP)?;
    }
    ensure!(user.counts(ctx, &a)? == "111", "the rows after restarts");
    user.ok(ctx, &a, &["stop"], UP)?;
    user.ok(ctx, &a, &["up", "--detach"], UP)?;
    ensure!(user.counts(ctx, &a)? == "111", "the rows after stop and up");
    let log = user.ok(ctx, &a, &["logs", "main", "maria"], SOON)?;
    for recovered in ["not properly shut down", "crash recovery"] {
        ensure!(!log.contains(recovered), "a recovery after a clean stop:\n{log}");
    }

    // A running MariaDB and Redis cloned into b, each its own way
    // (mariadb-backup, Redis's RDB transfer); b's Postgres keeps its own.
    let from = a.to_str().context("path")?.to_owned();
    for name in ["maria", "cache"] {
        user.ok(ctx, &b, &["db", "clone", "-d", name, "--from", &from], UP)?;
    }
    ensure!(user.counts(ctx, &b)? == "011", "b after its clones of a's");

    // SIGKILL of omnidev: no server of the pod stays.
    let data = serde_json::from_str::<Value>(&user.ok(ctx, &a, &["status", "--json"], SOON)?)?;
    let supervisor = data["pid"].as_u64().context("the pod's pid")?;
    let servers: Vec<u64> = (data["services"].as_array().context("services")?)
        .iter()
        .filter(|s| STORES.iter().any(|(name, ..)| s["name"] == *name))
        .filter_map(|s| s["pid"].as_u64())
        .collect();
    ensure!(servers.len() == STORES.len(), "the servers' pids: {data}");
    let data_dir = format!("{}/data/main", data["pod-dir"].as_str().context("pod-dir")?);
    ensure!(!postgres_of(&data_dir).is_empty(), "no postgres of {data_dir} before the kill");
    send_signal(u32::try_from(supervisor)?, "KILL")?;
    let deadline = Instant::now() + SOON;
    loop {
        let left: Vec<u64> = (servers.iter().copied())
            .filter(|pid| Path::new(&format!("/proc/{pid}")).exists())
            .chain(postgres_of(&data_dir).into_iter().map(u64::from))
            .collect();
        if left.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            bail!("servers of pod a left after SIGKILL of omnidev: {left:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    ensure!(user.counts(ctx, &b)? == "011", "b untouched");
    // `clean` takes a's data with its pod, and nothing of b's.
    user.ok(ctx, &a, &["clean"], SOON)?;
    let pod_a = Path::new(data["pod-dir"].as_str().context("pod-dir")?);
    ensure!(!pod_a.exists(), "{} left after clean", pod_a.display());
    ensure!(user.counts(ctx, &b)? == "011", "b's data after a's clean");
    user.ok(ctx, &b, &["stop"], UP)?;
    ctx.wait_no_pod_process(SOON)?;
    // In the same case: pods of this user beside another case's pods of
    // root would share no port registry.
    example_runs_on_its_pods_postgres(ctx, &user)?;
    compose_app_runs_on_what_init_made_of_it(ctx, &user)?;
    a_new_worktree_starts_with_data(ctx, &user)
}

/// A checkout whose writer keeps inserting rows into its Postgres and its
/// SQLite database while the case copies them.
const WRITER: &str = r#"
[databases.main]
engine = "postgres"

[databases.lite]
engine = "sqlite"

[services.writer]
command = ["sh", "-c", """
psql -X -q "$PG" -c 'create table if not exists w(id serial primary key, v float default random())'
sqlite3 "$LITE" 'create table if not exists w(id integer primary key, v float)'
while :; do
  psql -X -q "$PG" -c 'insert into w default values'
  sqlite3 "$LITE" 'insert into w(v) values (random())' 2>/dev/null
done
"""]
env = { PG = "{db.main.url}", LITE = "{db.lite.path}" }
"#;

/// What `omnidev db NAME` answers to `sql` in `repo` (its last line).
fn answer(
    ctx: &mut Ctx,
    user: &Unprivileged,
    repo: &Path,
    name: &str,
    sql: &str,
) -> Result<String> {
    let said = user.db(ctx, repo, name, &format!("\\pset tuples_only on\n{sql}"))?;
    Ok(said.trim().lines().last().unwrap_or_default().trim().to_owned())
}

/// Each database's row count and a digest of its rows up to `id`.
fn digest(ctx: &mut Ctx, user: &Unprivileged, repo: &Path, id: u64) -> Result<[String; 2]> {
    let pg = answer(
        ctx,
        user,
        repo,
        "main",
        &format!(
            "select count(*) || ' ' || md5(string_agg(id || ':' || v, ',' order by id)) from w where id <= {id};"
        ),
    )?;
    let lite = user.db(
        ctx,
        repo,
        "lite",
        &format!("select count(*) || ' ' || total(v) from w where id <= {id};"),
    )?;
    Ok([pg, lite.trim().to_owned()])
}

/// The rows of each database.
fn counts(ctx: &mut Ctx, user: &Unprivileged, repo: &Path) -> Result<[u64; 2]> {
    let pg = answer(ctx, user, repo, "main", "select count(*) from w;")?;
    let lite = user.db(ctx, repo, "lite", "select count(*) from w;")?;
    Ok([pg.parse()?, lite.trim().parse()?])
}

/// Issue #81: a worktree's pod cloned from the main worktree's while its
/// writer writes (each copy a moment of the source, the source's rows
/// unchanged); a snapshot, a destructive migration and a restore give
/// every row back; a restore cut short leaves the old data usable.
fn a_new_worktree_starts_with_data(ctx: &mut Ctx, user: &Unprivileged) -> Result<()> {
    let (src, dst) = user.repo_and_worktree("wt-main", WRITER, "wt-new")?;
    user.ok(ctx, &src, &["up", "--detach"], UP)?;
    let deadline = Instant::now() + UP;
    while counts(ctx, user, &src)?.iter().any(|&n| n < 20) {
        ensure!(Instant::now() < deadline, "the writer wrote nothing");
        std::thread::sleep(Duration::from_millis(200));
    }
    // The source's rows so far, before and after the copy.
    let before = counts(ctx, user, &src)?;
    let kept = digest(ctx, user, &src, before[0].min(before[1]))?;
    let src_arg = src.to_str().context("path")?.to_owned();
    user.ok(ctx, &dst, &["up", "--detach", "--skip", "writer", "--clone-from", &src_arg], UP)?;
    let copied = counts(ctx, user, &dst)?;
    let after = counts(ctx, user, &src)?;
    for engine in 0..2 {
        ensure!(
            before[engine] <= copied[engine] && copied[engine] <= after[engine],
            "copy {engine}: {copied:?} rows, the source {before:?} before and {after:?} after"
        );
    }
    ensure!(
        digest(ctx, user, &src, before[0].min(before[1]))? == kept,
        "the source's rows changed"
    );
    let top = copied[0].min(copied[1]);
    ensure!(
        digest(ctx, user, &dst, top)? == digest(ctx, user, &src, top)?,
        "the copy's rows differ from the source's"
    );
    ctx.note(format!("cloned while writing: {copied:?} rows of {after:?}"));
    // `db clone` into the running pod, from the main worktree by default.
    user.ok(ctx, &dst, &["db", "clone", "-d", "main"], UP)?;
    let again = counts(ctx, user, &dst)?;
    ensure!(again[0] >= after[0], "a second clone: {again:?} after {after:?}");

    snapshot_migration_restore(ctx, user, &dst)?;
    for repo in [&dst, &src] {
        user.ok(ctx, repo, &["stop"], UP)?;
    }
    ctx.wait_no_pod_process(SOON)?;
    a_postgres_seed_runs_once_per_key(ctx, user)
}

/// A Postgres seeded by a command that counts its runs: once for two new
/// checkouts with the same input (the second starts from the cached
/// result, its rows there), again for one whose input changed.
fn a_postgres_seed_runs_once_per_key(ctx: &mut Ctx, user: &Unprivileged) -> Result<()> {
    let runs = user.dir.join("seed-runs");
    let profile = format!(
        r#"
[databases.main]
engine = "postgres"
seed = {{ command = ["sh", "-c", "echo run >> '{runs}' && psql -X -q -v ON_ERROR_STOP=1 \"$PG\" -f seed.sql"], inputs = ["seed.sql"] }}

[env]
PG = "{{db.main.url}}"
"#,
        runs = runs.display()
    );
    let rows = "create table s(x int); insert into s select generate_series(1, 100);";
    let more = "create table s(x int); insert into s select generate_series(1, 200);";
    for (name, seed, seeded, sum) in
        [("seed-a", rows, 1, "5050"), ("seed-b", rows, 1, "5050"), ("seed-c", more, 2, "20100")]
    {
        let repo = user.dir.join(name);
        std::fs::create_dir_all(repo.join(".git"))?;
        std::fs::write(repo.join("omnidev.toml"), &profile)?;
        std::fs::write(repo.join("seed.sql"), seed)?;
        user.give(&repo)?;
        user.ok(ctx, &repo, &["up", "--detach"], UP)?;
        // Nothing waits for the seed here: its result is kept in the cache
        // once it has exited, not when `up` returns.
        let status: Value =
            serde_json::from_str(&user.ok(ctx, &repo, &["status", "--json"], SOON)?)?;
        let seeding = (status["services"].as_array().context("services")?)
            .iter()
            .any(|s| s["name"] == "main-seed");
        if seeding {
            user.ok(ctx, &repo, &["wait", "--exited", "main-seed"], UP)?;
        }
        let got = answer(ctx, user, &repo, "main", "select sum(x) from s;")?;
        ensure!(got == sum, "{name}: sum {got}, not {sum}");
        let count = std::fs::read_to_string(&runs)?.lines().count();
        ensure!(count == seeded, "{name}: the seed ran {count} times, not {seeded}");
        user.ok(ctx, &repo, &["stop"], UP)?;
    }
    ctx.wait_no_pod_process(SOON)
}

/// Snapshot, a destructive migration, restore: every row back; then a
/// restore cut short (the data renamed aside, a half-made copy beside
/// it): the server starts on the old data.
fn snapshot_migration_restore(ctx: &mut Ctx, user: &Unprivileged, dst: &Path) -> Result<()> {
    let dst = dst.to_path_buf();
    let rows = digest(ctx, user, &dst, u64::MAX / 2)?;
    for name in ["main", "lite"] {
        user.ok(ctx, &dst, &["db", "snapshot", "-d", name, "before"], UP)?;
        user.db(ctx, &dst, name, "drop table w;")?;
    }
    for name in ["main", "lite"] {
        user.ok(ctx, &dst, &["db", "restore", "-d", name, "before"], UP)?;
    }
    ensure!(digest(ctx, user, &dst, u64::MAX / 2)? == rows, "the rows after restore differ");
    let status: Value = serde_json::from_str(&user.ok(ctx, &dst, &["status", "--json"], SOON)?)?;
    let data = Path::new(status["pod-dir"].as_str().context("pod-dir")?).join("data");
    user.ok(ctx, &dst, &["stop"], UP)?;
    std::fs::rename(data.join("main"), data.join("main.previous"))?;
    std::fs::create_dir_all(data.join("main.restoring.partial"))?;
    user.ok(ctx, &dst, &["up", "--detach", "--skip", "writer"], UP)?;
    ensure!(digest(ctx, user, &dst, u64::MAX / 2)? == rows, "the rows after a restore cut short");
    user.ok(ctx, &dst, &["db", "restore", "-d", "main", "before"], UP)?;
    Ok(())
}

/// `examples/compose-app` (a Procfile app that ran Postgres and Redis with
/// docker compose and reads their URLs from `.env`), twice: `omnidev init`
/// then `up --detach`, no edit. Its release step makes the schema through
/// the pod's Postgres, the web's `/health` counts a visit there, the
/// worker beats into Redis database 1 (its broker URL's) and marks
/// database 0 (its cache URL's); the two checkouts share neither.
fn compose_app_runs_on_what_init_made_of_it(ctx: &mut Ctx, user: &Unprivileged) -> Result<()> {
    let app = crate::util::workspace_root().join("examples/compose-app");
    let mut shops = Vec::new();
    for name in ["shop-a", "shop-b"] {
        let repo = user.dir.join(name);
        let copied = Command::new("cp").arg("-a").arg(&app).arg(&repo).status()?;
        ensure!(copied.success(), "cp -a {}", app.display());
        std::fs::create_dir_all(repo.join(".git"))?;
        user.give(&repo)?;
        let said = user.ok(ctx, &repo, &["init"], SOON)?;
        ensure!(said.contains("2 databases (db (postgres), redis (redis))"), "{said}");
        let said = user.ok(ctx, &repo, &["profile", "check"], SOON)?;
        ensure!(said.contains("WARNING: unset: DB_NAME, SECRET_KEY"), "{said}");
        shops.push(repo);
    }
    let started = Instant::now();
    for repo in &shops {
        user.ok(ctx, repo, &["up", "--detach"], UP)?;
    }
    ctx.note(format!(
        "two compose apps, each with its Postgres and Redis, from init to ready in {:?}",
        started.elapsed()
    ));
    let mut ports = Vec::new();
    for repo in &shops {
        let status: Value =
            serde_json::from_str(&user.ok(ctx, repo, &["status", "--json"], SOON)?)?;
        ports.push(status["ports"].clone());
    }
    ensure!(
        ports[0]["db"] != ports[1]["db"] && ports[0]["redis"] != ports[1]["redis"],
        "one database port for two pods: {ports:?}"
    );
    let visits = |repo: usize| -> Result<u64> {
        let port = u16::try_from(ports[repo]["web"].as_u64().context("web's port")?)?;
        let (code, body) = crate::util::http_get(port, "/health")?;
        ensure!(code == 200, "GET /health: {code} {body}");
        let body: Value = serde_json::from_str(&body)?;
        body["visits"].as_u64().context("visits")
    };
    for visit in 1..=3 {
        ensure!(visits(0)? == visit, "a's visit {visit}");
    }
    ensure!(visits(1)? == 1, "a's visits seen through b");
    // The worker's beats land in database 1, its mark in database 0.
    let deadline = Instant::now() + SOON;
    let beats = loop {
        let said = user.db(ctx, &shops[0], "redis", "SELECT 1\nGET worker:beats")?;
        let beats: u64 = said.lines().last().unwrap_or_default().trim().parse().unwrap_or(0);
        if beats > 0 {
            break beats;
        }
        ensure!(Instant::now() < deadline, "no beat in database 1:\n{said}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let said = user.db(
        ctx,
        &shops[0],
        "redis",
        "EXISTS worker:beats\nEXISTS worker:started\nSET only:a 1",
    )?;
    let lines: Vec<&str> = said.lines().map(str::trim).collect();
    ensure!(lines == ["0", "1", "OK"], "database 0 of a: {said}");
    let said = user.db(ctx, &shops[1], "redis", "EXISTS only:a")?;
    ensure!(said.trim() == "0", "a's key seen through b: {said}");
    ctx.note(format!("the worker's beats in Redis database 1: {beats}"));
    // A restore stops the services that use the database and starts them
    // again on the restored data: the web gets a new pid, counts on.
    let web_pid = |ctx: &mut Ctx| -> Result<u64> {
        let status: Value =
            serde_json::from_str(&user.ok(ctx, &shops[0], &["status", "--json"], SOON)?)?;
        (status["services"].as_array().context("services")?)
            .iter()
            .find(|s| s["name"] == "web")
            .and_then(|s| s["pid"].as_u64())
            .context("web's pid")
    };
    user.ok(ctx, &shops[0], &["db", "snapshot", "three"], UP)?;
    ensure!(visits(0)? == 4, "a's fourth visit");
    let before = web_pid(ctx)?;
    user.ok(ctx, &shops[0], &["db", "restore", "three"], UP)?;
    ensure!(web_pid(ctx)? != before, "the web kept pid {before} across a restore");
    ensure!(visits(0)? == 4, "the visits after restoring three");
    for repo in &shops {
        user.ok(ctx, repo, &["stop"], UP)?;
    }
    ctx.wait_no_pod_process(SOON)
}

/// The pids of the processes whose arguments name `data_dir` (a postgres
/// of that pod: its postmaster is given it with `-D`, and its children
/// show it in their titles only when asked; the postmaster is enough).
fn postgres_of(data_dir: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            let named = args.windows(2).any(|w| w[0] == b"-D" && w[1] == data_dir.as_bytes());
            let postgres = args.first().is_some_and(|a| a.ends_with(b"/postgres"));
            (named && postgres).then_some(pid)
        })
        .collect()
}

/// The bundled example on its pod's own Postgres (`up --db postgres`):
/// its server stores a row at each start through psycopg (the driver the
/// profile names, brought by `uv run --with`) and reads the count back;
/// `status` says which engine the pod runs on, and keeps it for the next
/// `up`. Its server's port is one the system gave: the root cases beside
/// this one allocate from another registry.
fn example_runs_on_its_pods_postgres(ctx: &mut Ctx, user: &Unprivileged) -> Result<()> {
    let repo = user.example(ctx)?;
    let free = std::net::TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port();
    let server = format!("server={free}");
    user.ok(
        ctx,
        &repo,
        &["up", "--detach", "--no-vite", "--db", "postgres", "--port", &server],
        UP,
    )?;
    let status: Value = serde_json::from_str(&user.ok(ctx, &repo, &["status", "--json"], SOON)?)?;
    let port = u16::try_from(status["ports"]["server"].as_u64().context("the server's port")?)?;
    let env = |ctx: &mut Ctx| -> Result<Value> {
        let (code, body) = crate::util::http_get(port, "/env")?;
        ensure!(code == 200, "GET /env: {code} {body}");
        let env: Value = serde_json::from_str(&body)?;
        ctx.note(format!(
            "the example's /env: database {} starts {}",
            env["database"], env["starts"]
        ));
        Ok(env)
    };
    let first = env(ctx)?;
    ensure!(first["database"] == "postgres", "{first}");
    ensure!(
        first["env"]["OMNIGENT_DATABASE_URI"]
            .as_str()
            .is_some_and(|uri| uri.starts_with("postgresql+psycopg://omnidev@/db?host=")),
        "{first}"
    );
    ensure!(first["starts"] == 1, "{first}");
    user.ok(ctx, &repo, &["restart", "server"], UP)?;
    ensure!(env(ctx)?["starts"] == 2, "the row of the first start, read back");
    user.ok(ctx, &repo, &["stop"], UP)?;
    // The pod keeps its engine: `up` alone comes back to the same rows.
    user.ok(ctx, &repo, &["up", "--detach", "--no-vite", "--port", &server], UP)?;
    ensure!(env(ctx)?["starts"] == 3, "the rows after stop and up");
    let said = user.ok(ctx, &repo, &["status"], SOON)?;
    ensure!(said.contains("db      postgres"), "{said}");
    let said = user.ok(ctx, &repo, &["status", "--json"], SOON)?;
    let said: serde_json::Value = serde_json::from_str(&said)?;
    ensure!(said["db-engine"] == "postgres", "{said}");
    user.ok(ctx, &repo, &["stop"], UP)?;
    ctx.wait_no_pod_process(SOON)
}

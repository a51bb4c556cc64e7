//! A pod's databases from the CLI: an SQLite file's URL in the services'
//! environment and from `omnidev db url`, a Postgres database refused as
//! root before anything is made, and the profile's mistakes with their
//! place. The real servers run in the e2e (`cargo xtask test-e2e
//! database`), as an unprivileged user it makes.

#[path = "support/context.rs"]
mod common;

use common::{TestContext, stderr};

#[test]
fn an_sqlite_database_is_a_file_of_the_pod_every_part_can_name() {
    let ctx = TestContext::new();
    ctx.write(
        "omnidev.toml",
        r#"
[databases.files]
engine = "sqlite"
scheme = "sqlite+aiosqlite"

[env]
DATABASE_URL = "{db.files.url}"
DATABASE_FILE = "{db.files.path}"
"#,
    );
    let printed = ctx.run_ok(&["run", "--", "sh", "-c", "echo $DATABASE_URL; echo $DATABASE_FILE"]);
    let pod = ctx.pod_dir().expect("the pod");
    let file = pod.join("data/files/files.db");
    assert_eq!(printed, format!("sqlite+aiosqlite:///{0}\n{0}\n", file.display()));
    let url = ctx.run_ok(&["db", "url"]);
    assert_eq!(url.trim(), printed.lines().next().expect("the URL"));
    let unknown = ctx.cmd().args(["db", "url", "nope"]).assert().code(2);
    assert!(stderr(&unknown).contains("declares no database `nope` (it declares files)"));
}

/// As root, a Postgres database is refused before anything is made (the
/// server would refuse to start), with the reason, the way out and exit
/// code 2; as another user the e2e runs it.
#[test]
fn a_server_database_is_refused_as_root_before_anything_starts() {
    let ctx = TestContext::new();
    ctx.write(
        "omnidev.toml",
        "[databases.main]\nengine = \"postgres\"\n\n[services.app]\ncommand = [\"sleep\", \"300\"]\n",
    );
    if !nix::unistd::geteuid().is_root() {
        // Not root: `profile check` accepts it (the e2e runs the server).
        ctx.run_ok(&["profile", "check"]);
        return;
    }
    for args in [&["up", "--detach"][..], &["up", "--headless"]] {
        let refused = ctx.cmd().args(args).assert().code(2);
        let said = stderr(&refused);
        assert!(said.contains("database `main` (postgres) cannot run as root"), "{said}");
        assert!(said.contains("runuser -u USER"), "{said}");
        assert!(ctx.pod_dir().is_none(), "a pod was made: {args:?}");
    }
    // `run` leaves the server out, and so is not refused.
    ctx.run_ok(&["run", "--", "true"]);
}

/// A database's name is its server's service and port: one a service or
/// a port has already is refused with its place; so is an unknown
/// database in a placeholder, a bad scheme, or a path outside the pod.
#[test]
fn database_mistakes_are_refused_with_their_place() {
    let ctx = TestContext::new();
    let cases = [
        (
            "[databases.web]\nengine = \"postgres\"\n[services.web]\ncommand = [\"x\"]\n",
            "omnidev.toml:1:",
            "a service is named `web` too",
        ),
        (
            "[ports]\nmain = 1\n[databases.main]\nengine = \"postgres\"\n",
            "omnidev.toml:3:",
            "a port is named `main` too",
        ),
        (
            "[databases.main]\nengine = \"sqlite\"\n[env]\nU = \"{db.other.url}\"\n",
            "omnidev.toml:4:",
            "unknown database `other`",
        ),
        (
            "[databases.main]\nengine = \"sqlite\"\nscheme = \"no way\"\n",
            "omnidev.toml:3:",
            "is no URL scheme",
        ),
        (
            "[databases.main]\nengine = \"sqlite\"\npath = \"../elsewhere.db\"\n",
            "omnidev.toml:3:",
            "inside the pod directory",
        ),
        ("[databases.main]\nengine = \"oracle\"\n", "omnidev.toml:2:", "postgres"),
        (
            "[databases.main]\nengine = \"redis\"\ndatabase = \"app\"\n",
            "omnidev.toml:3:",
            "a redis has none to name",
        ),
        (
            "[databases.main]\nengine = \"postgres\"\ndatabase = \"a b\"\n",
            "omnidev.toml:3:",
            "must be 1 to 63 letters",
        ),
        (
            "[databases.main]\nengine = \"sqlite\"\nseed = { command = [\"x\"], inputs = [\"../out\"] }\n",
            "omnidev.toml:3:",
            "must be a path inside the checkout",
        ),
        (
            "[databases.main]\nengine = \"sqlite\"\nseed = { command = [\"x\"] }\n\
             [services.main-seed]\ncommand = [\"y\"]\n",
            "omnidev.toml:3:",
            "runs as service `main-seed`",
        ),
        (
            "[pod]\nexpected-env = [\"A B\"]\n[services.web]\ncommand = [\"x\"]\n",
            "omnidev.toml:2:",
            "is no variable name",
        ),
    ];
    for (text, place, said) in cases {
        ctx.write("omnidev.toml", text);
        let refused = ctx.cmd().args(["profile", "check"]).assert().failure();
        let error = stderr(&refused);
        assert!(error.contains(place) && error.contains(said), "{text}\n{error}");
    }
}

/// A database's seed runs once for two new checkouts with the same inputs
/// (the second starts from the result the first kept in the user's
/// cache), and again for one whose input changed; the services start on
/// the seeded data.
#[test]
fn a_seed_runs_once_for_two_new_worktrees_and_again_after_its_input_changes() {
    let ctx = TestContext::new();
    let runs = ctx.root.join("seeded");
    let profile = format!(
        r#"
[env]
DB = "{{db.lite.path}}"

[databases.lite]
engine = "sqlite"
seed = {{ command = ["sh", "-c", "echo run >> '{runs}'; sqlite3 \"$DB\" < seed.sql"], inputs = ["seed.sql"] }}

[services.web]
command = ["sh", "-c", "sqlite3 \"$DB\" 'select sum(x) from t'; exec sleep 300"]
grace-ms = 1000
"#,
        runs = runs.display()
    );
    let rows = "create table t(x); insert into t values (1), (2);";
    let more = "create table t(x); insert into t values (1), (2), (3);";
    for (name, seed, seeded, sum) in
        [("w1", rows, 1, "3"), ("w2", rows, 1, "3"), ("w3", more, 2, "6")]
    {
        let dir = ctx.root.join(name);
        std::fs::create_dir_all(dir.join(".git")).expect("checkout");
        std::fs::write(dir.join("omnidev.toml"), &profile).expect("profile");
        std::fs::write(dir.join("seed.sql"), seed).expect("seed");
        let repo = dir.to_str().expect("path");
        let _stop = ctx.stop_on_drop_with(["--repo", repo]);
        ctx.run_ok(&["up", "--detach", "--repo", repo]);
        omnidev_test_support::poll_until(
            &format!("{name}'s web printing its sum"),
            std::time::Duration::from_secs(60),
            || ctx.run_ok(&["logs", "web", "--repo", repo]).trim() == sum,
        );
        let count = std::fs::read_to_string(&runs).expect("seeded").lines().count();
        assert_eq!(count, seeded, "{name}: seed runs");
    }
    let listed =
        ctx.run_ok(&["db", "snapshots", "--repo", ctx.root.join("w1").to_str().expect("path")]);
    assert_eq!(listed.matches("  lite  sqlite  ").count(), 2, "{listed}");
}

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
    let printed = ctx.run_ok(&[
        "run",
        "--",
        "sh",
        "-c",
        "echo $DATABASE_URL; echo $DATABASE_FILE",
    ]);
    let pod = ctx.pod_dir().expect("the pod");
    let file = pod.join("data/files/files.db");
    assert_eq!(
        printed,
        format!("sqlite+aiosqlite:///{0}\n{0}\n", file.display())
    );
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
        assert!(
            said.contains("database `main` (postgres) cannot run as root"),
            "{said}"
        );
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
        (
            "[databases.main]\nengine = \"oracle\"\n",
            "omnidev.toml:2:",
            "postgres",
        ),
    ];
    for (text, place, said) in cases {
        ctx.write("omnidev.toml", text);
        let refused = ctx.cmd().args(["profile", "check"]).assert().failure();
        let error = stderr(&refused);
        assert!(
            error.contains(place) && error.contains(said),
            "{text}\n{error}"
        );
    }
}

//! A new worktree's data (issue #81): a 200 MB SQLite and a 200 MB
//! Postgres database cloned into another worktree's pod, snapshotted and
//! restored, beside what people do by hand on the same data in the same
//! run (`createdb -T`, `pg_dump | pg_restore`). Run as an unprivileged
//! user (Postgres refuses root).

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Result, ensure};

use super::Row;
use crate::as_user::AsUser;

/// The source checkout's profile: its databases, and libpq's variables
/// so `omnidev run -- createdb …` reaches its Postgres.
const PROFILE: &str = r#"
[env]
PGHOST = "{db.main.socket-dir}"
PGPORT = "{db.main.port}"
PGUSER = "omnidev"

[databases.main]
engine = "postgres"

[databases.lite]
engine = "sqlite"
"#;

/// Rows written: about 200 MB in each engine.
const ROWS: u64 = 1_250_000;

/// The two rows.
pub(super) fn rows(omnidev: &Path, dir: &Path) -> Vec<Row> {
    let measured = measure(omnidev, dir);
    let (sqlite, postgres) = match measured {
        Ok((sqlite, postgres)) => (Ok(sqlite), Ok(postgres)),
        Err(error) => (Err(anyhow::anyhow!("{error:#}")), Err(error)),
    };
    vec![
        Row {
            name: "a 200 MB SQLite database: db clone into a new worktree, db snapshot, db restore",
            figure: sqlite,
            reference: "issue #81: clone ≤ 1 s".to_owned(),
        },
        Row {
            name: "a 200 MB Postgres database: db clone, db snapshot, db restore; createdb -T, pg_dump | pg_restore",
            figure: postgres,
            reference: "issue #81: clone ≤ 10 s".to_owned(),
        },
    ]
}

/// The seconds `omnidev ARGS` in `repo` takes (it must succeed).
fn timed(user: &AsUser, repo: &Path, args: &[&str], input: Option<&str>) -> Result<f64> {
    let mut command = user.omnidev(Vec::new(), repo, args);
    let file = user.dir.join("input.sql");
    if let Some(text) = input {
        std::fs::write(&file, text)?;
        command.stdin(std::fs::File::open(&file)?);
    }
    let started = Instant::now();
    let done = command.output()?;
    ensure!(
        done.status.success(),
        "omnidev {args:?}: {}{}",
        String::from_utf8_lossy(&done.stdout),
        String::from_utf8_lossy(&done.stderr)
    );
    Ok(started.elapsed().as_secs_f64())
}

fn measure(omnidev: &Path, dir: &Path) -> Result<(String, String)> {
    let user = AsUser::new(dir.to_path_buf(), omnidev)?;
    let (src, dst) = user.repo_and_worktree("main", PROFILE, "new")?;
    timed(&user, &src, &["up", "--detach"], None)?;
    let fill = format!(
        "create table big as select g as id, md5(g::text) || repeat('x', 96) as pad \
         from generate_series(1, {ROWS}) g;\n"
    );
    timed(&user, &src, &["db", "main"], Some(&fill))?;
    let fill = format!(
        "create table big(id integer primary key, pad text);\n\
         with recursive c(x) as (select 1 union all select x + 1 from c limit {ROWS}) \
         insert into big select x, hex(randomblob(16)) || printf('%.124c', 'x') from c;\n"
    );
    timed(&user, &src, &["db", "lite"], Some(&fill))?;
    let result = (|| -> Result<(String, String)> {
        let mut figures = Vec::new();
        for name in ["lite", "main"] {
            let clone = timed(&user, &dst, &["db", "clone", "-d", name], None)?;
            let snapshot = timed(&user, &src, &["db", "snapshot", "-d", name, "s"], None)?;
            let restore = timed(&user, &src, &["db", "restore", "-d", name, "s"], None)?;
            let restart =
                if name == "main" { " (the server's restart included)" } else { " (live)" };
            figures.push(format!(
                "clone {clone:.2} s, snapshot {snapshot:.2} s, restore {restore:.2} s{restart}"
            ));
        }
        let template =
            timed(&user, &src, &["run", "--", "createdb", "-T", "main", "copy_t"], None)?;
        let dump = timed(
            &user,
            &src,
            &[
                "run",
                "--",
                "sh",
                "-c",
                "createdb copy_d && pg_dump -Fc main | pg_restore -d copy_d",
            ],
            None,
        )?;
        // What each snapshot holds, and whether the file system shares
        // blocks between copies.
        let listed = user.omnidev(Vec::new(), &src, &["db", "snapshots"]).output()?;
        let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
        let size = |name: &str| {
            listed
                .lines()
                .find(|line| line.starts_with(&format!("{name}/s ")))
                .and_then(|line| line.split("  ").nth(2))
                .unwrap_or("?")
                .to_owned()
        };
        let fs = Command::new("stat").args(["-f", "-c", "%T"]).arg(&user.dir).output()?;
        let fs = String::from_utf8_lossy(&fs.stdout).trim().to_owned();
        figures[0] = format!("{} of {}; {}", size("lite"), fs, figures[0]);
        figures[1] = format!("{} of {}; {}", size("main"), fs, figures[1]);
        Ok((
            figures[0].clone(),
            format!(
                "{}; createdb -T {template:.2} s, pg_dump | pg_restore {dump:.2} s",
                figures[1]
            ),
        ))
    })();
    for repo in [&dst, &src] {
        let _ = timed(&user, repo, &["stop"], None);
    }
    result
}

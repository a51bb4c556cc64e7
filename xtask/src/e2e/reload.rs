//! Case: what editors, shells and git do to a package directory — moved in,
//! within and out, `git mv`, `mkdir` with an immediate write — reloads the
//! server exactly once each (counted by server starts); an ignore rule
//! added while the pod runs applies to the very next write.
//!
//! The checkout is the example's, with a profile whose `server` starts in
//! milliseconds (the example's own reload is `py_change_reloads_…`): 25
//! reloads of the Python server would cost a minute of CI for no more
//! watcher behaviour.

use std::path::Path;

use anyhow::{Result, bail, ensure};

use super::{Ctx, SOON, UP};

/// The example's backend globs, on a server that is quick to restart.
const PROFILE: &str = r#"[services.server]
command = ["sh", "-c", "echo serving; exec sleep 600"]
watch = ["omnigent/**/*.py"]
"#;

/// Server starts so far (one supervisor line each).
fn starts(pod: &super::Pod) -> usize {
    count_starts(&pod.output())
}

fn count_starts(out: &str) -> usize {
    out.lines()
        .filter(|line| line.contains("omnidev") && line.contains("server started (pid "))
        .count()
}

/// Runs `program args` in `dir` as a user would, failing on a non-zero exit.
fn sh(ctx: &Ctx, dir: &Path, program: &str, args: &[&str]) -> Result<()> {
    let output = ctx.command(program).args(args).current_dir(dir).output()?;
    if !output.status.success() {
        bail!(
            "{program} {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

/// Does `change`, then waits for the server to start again.
fn reloads(pod: &mut super::Pod, what: &str, change: impl FnOnce() -> Result<()>) -> Result<()> {
    let before = starts(pod);
    change()?;
    pod.wait_output(&format!("{what} to reload the server"), UP, |out| {
        (count_starts(out) > before).then_some(())
    })
}

/// A package with a module in a sub-package, outside the checkout.
fn package(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir.join("sub"))?;
    std::fs::write(dir.join("__init__.py"), "VALUE = 1\n")?;
    std::fs::write(dir.join("sub/__init__.py"), "")?;
    std::fs::write(dir.join("sub/mod.py"), "X = 1\n")?;
    Ok(())
}

pub fn package_moves_git_mv_and_mkdir_reload_once_each(ctx: &mut Ctx) -> Result<()> {
    let repo = ctx.checkout("a")?;
    std::fs::write(repo.join("omnidev.toml"), PROFILE)?;
    let outside = ctx.dir.join("outside");
    package(&outside.join("pkg"))?;
    // `--debug`: the watcher says how it judged each file event, the
    // positive sign that an ignored write was seen and did not count.
    let mut pod = ctx.up(&repo, &["--debug"])?;
    pod.wait_output("the server to start", UP, |out| out.contains("serving").then_some(()))?;
    let first = starts(&pod);
    let mut expected = 0;

    let into = repo.join("omnigent");
    let pkg = outside.join("pkg").display().to_string();
    reloads(&mut pod, "mv a package in", || sh(ctx, &into, "mv", &[&pkg, "pkg"]))?;
    expected += 1;
    reloads(&mut pod, "mv within omnigent/", || sh(ctx, &into, "mv", &["pkg", "moved"]))?;
    expected += 1;
    sh(ctx, &repo, "git", &["add", "omnigent/moved"])?;
    sh(ctx, &repo, "git", &["commit", "-q", "-m", "a package"])?;
    reloads(&mut pod, "git mv", || {
        sh(ctx, &repo, "git", &["mv", "omnigent/moved", "omnigent/renamed"])
    })?;
    expected += 1;
    let gone = outside.join("gone").display().to_string();
    reloads(&mut pod, "mv a package out", || sh(ctx, &into, "mv", &["renamed", &gone]))?;
    expected += 1;
    for i in 0..20 {
        let script = format!("mkdir q{i} && echo 'X = {i}' > q{i}/__init__.py");
        reloads(&mut pod, &format!("mkdir + write #{}", i + 1), || {
            sh(ctx, &into, "sh", &["-c", &script])
        })?;
        expected += 1;
    }

    // A nested rule added while running: the next write of a file it
    // names changes nothing; a file it does not name reloads once.
    std::fs::write(into.join(".gitignore"), "scratch_*.py\n")?;
    std::fs::write(into.join("scratch_1.py"), "X = 1\n")?;
    // The watcher judged the write (and it did not count), so no reload
    // of it can hide inside the next one.
    pod.wait_output("the watcher to judge the ignored write", SOON, |out| {
        out.lines()
            .any(|line| line.contains("scratch_1.py") && line.contains("does not count"))
            .then_some(())
    })?;
    ensure!(
        starts(&pod) == first + expected,
        "a write of an ignored file reloaded the server:\n{}",
        pod.output()
    );
    reloads(&mut pod, "a write beside the ignored file", || {
        Ok(std::fs::write(into.join("kept.py"), "X = 1\n")?)
    })?;
    expected += 1;

    // Every change was one reload: the reload of the latest change the
    // watcher saw is healthy (`wait --healthy-after-reload`, which a
    // change seen meanwhile moves on), and no event of an ignored file
    // counted.
    ctx.wait_healthy_after_reload(&repo)?;
    let out = pod.output();
    ensure!(
        !out.lines().any(|line| line.contains("scratch_1.py") && line.contains(": counts")),
        "an event of the ignored file counted:\n{out}"
    );
    let total = starts(&pod) - first;
    ensure!(total == expected, "{expected} changes made {total} server starts:\n{}", pod.output());
    ctx.note(format!("{expected} changes, {total} reloads"));
    pod.stop_with("INT", ctx)?;
    Ok(())
}

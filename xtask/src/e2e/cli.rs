//! Cases for the CLI issue: the headless exit rule with one-shot stub
//! services, and `omnidev run` against a running pod.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, ensure};

use super::{Ctx, SOON, UP};

/// A checkout whose `omnidev.toml` runs two one-shot services; the second
/// exits with `second_exit`.
fn one_shot_checkout(ctx: &Ctx, name: &str, second_exit: i32) -> Result<PathBuf> {
    let repo = ctx.dir.join(name);
    fs::create_dir_all(repo.join(".git"))?;
    fs::write(
        repo.join("omnidev.toml"),
        format!(
            r#"[services.first]
command = ["sh", "-c", "echo first says hello"]
restart = "never"

[services.second]
command = ["sh", "-c", "echo second says bye; exit {second_exit}"]
restart = "never"
"#
        ),
    )?;
    Ok(repo)
}

fn up_to_end(ctx: &mut Ctx, repo: &Path) -> Result<(std::process::ExitStatus, String)> {
    let repo = repo.display().to_string();
    ctx.run_omnidev(&["up", "--headless", "--repo", &repo], SOON)
}

/// Headless: `name | line` output; exit 0 when every one-shot service exits
/// 0, 1 when one fails.
pub fn headless_one_shot_exit_rule(ctx: &mut Ctx) -> Result<()> {
    let good = one_shot_checkout(ctx, "good", 0)?;
    let (status, out) = up_to_end(ctx, &good)?;
    ensure!(status.code() == Some(0), "all services exited 0 but omnidev exited {status}:\n{out}");
    for (service, text) in [("first", "first says hello"), ("second", "second says bye")] {
        ensure!(
            out.lines().any(|line| line
                .split_once(" | ")
                .is_some_and(|(name, rest)| name.trim() == service && rest == text)),
            "no `{service} | {text}` line:\n{out}"
        );
    }
    let bad = one_shot_checkout(ctx, "bad", 3)?;
    let (status, out) = up_to_end(ctx, &bad)?;
    ensure!(status.code() == Some(1), "a service exited 3 but omnidev exited {status}:\n{out}");
    ctx.wait_no_pod_process(Duration::from_secs(10))?;
    Ok(())
}

/// `omnidev run` sees the running pod's ports and environment (`PORT` with
/// `--port`), returns the command's exit code and leaves `pod.toml`
/// untouched.
pub fn run_uses_running_pod_ports_and_exit_code(ctx: &mut Ctx) -> Result<()> {
    let repo = ctx.checkout("a")?;
    let mut pod = ctx.up(&repo, &[])?;
    let (server, _) = pod.ready(UP)?;
    let pod_toml = fs::read_dir(ctx.cache_home().join("omnidev"))?
        .flatten()
        .map(|entry| entry.path().join("pod.toml"))
        .find(|path| path.is_file())
        .context("no pod.toml under the cache root")?;
    let before = (fs::read(&pod_toml)?, fs::metadata(&pod_toml)?.modified()?);

    let repo_arg = repo.display().to_string();
    let (status, out) = ctx.run_omnidev(
        &[
            "run",
            "--repo",
            &repo_arg,
            "--port",
            "server",
            "--",
            "sh",
            "-c",
            "echo \"url=$OMNIGENT_URL port=$PORT\"; exit 7",
        ],
        SOON,
    )?;
    ensure!(status.code() == Some(7), "run returned {status}, not the command's 7:\n{out}");
    let url = format!("url=http://127.0.0.1:{0} port={0}", server.port);
    ensure!(
        out.contains(&url),
        "run did not get the running pod's OMNIGENT_URL and PORT ({url}):\n{out}"
    );
    let after = (fs::read(&pod_toml)?, fs::metadata(&pod_toml)?.modified()?);
    ensure!(before == after, "run rewrote {}", pod_toml.display());
    pod.stop_with("INT", ctx)?;
    Ok(())
}

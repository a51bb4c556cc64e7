//! Case: `omnidev install | check | refresh | update` against a local
//! `file://` git repository, with real `uv`; then `kill -9` of an install
//! while uv works.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};

use super::Ctx;
use crate::util;

/// uv work (building a venv, installing a wheel) on a loaded machine.
const UV: Duration = Duration::from_mins(3);

fn git(ctx: &Ctx, repo: &Path, args: &[&str]) -> Result<String> {
    let output = ctx.command("git").args(args).current_dir(repo).output()?;
    if !output.status.success() {
        bail!("git {} failed: {}", args.join(" "), String::from_utf8_lossy(&output.stderr));
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// The commit recorded in the installed tool's PEP 610 `direct_url.json`.
fn installed_commit(tools: &Path) -> Result<String> {
    fn find(dir: &Path, found: &mut Vec<PathBuf>) {
        for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                find(&path, found);
            } else if path.ends_with("direct_url.json")
                && path
                    .parent()
                    .and_then(Path::file_name)
                    .is_some_and(|d| d.to_string_lossy().starts_with("omnigent-"))
            {
                found.push(path);
            }
        }
    }
    let mut found = Vec::new();
    find(tools, &mut found);
    let file = found.first().with_context(|| {
        format!("no omnigent-*.dist-info/direct_url.json under {}", tools.display())
    })?;
    let text = fs::read_to_string(file)?;
    util::json_field(&text, "commit_id")
        .with_context(|| format!("no commit_id in {}: {text}", file.display()))
}

/// Install from a `file://` repository, see a newer commit, update to it.
pub fn install_update_check_from_file_repo(ctx: &mut Ctx) -> Result<()> {
    let source = ctx.checkout("source")?;
    let url = format!("file://{}", source.display());
    let tools = ctx.dir.join("uv-tools");
    let bin = ctx.dir.join("uv-bin");
    let omnidev = |ctx: &Ctx, args: &[&str]| {
        let mut command = ctx.omnidev();
        // The example package builds no web UI, so the Node >= 22 preflight
        // (this machine may have an older Node) does not apply.
        command
            .args(args)
            .env("UV_TOOL_DIR", &tools)
            .env("UV_TOOL_BIN_DIR", &bin)
            .env("OMNIDEV_SKIP_WEB_CHECK", "1");
        command
    };
    let first = git(ctx, &source, &["rev-parse", "HEAD"])?;

    let install = omnidev(
        ctx,
        &["install", "--git", &url, "--ref", "main", "--no-default-extra", "--python", "3.11"],
    );
    let (status, out) = ctx.run_to_end(install, "install", UV)?;
    ensure!(status.success(), "omnidev install failed ({status}):\n{out}");
    let saved = ctx.config_home().join("omnidev/install.toml");
    let saved_text =
        fs::read_to_string(&saved).with_context(|| format!("reading {}", saved.display()))?;
    ensure!(
        saved_text.contains(&url),
        "{} does not record the repo {url}:\n{saved_text}",
        saved.display()
    );
    let entry_point = bin.join("omnigent");
    let help = Command::new(&entry_point)
        .arg("--help")
        .output()
        .with_context(|| format!("running {}", entry_point.display()))?;
    ensure!(help.status.success(), "{} --help failed", entry_point.display());
    ensure!(installed_commit(&tools)? == first, "installed commit is not {first}");

    // A new commit upstream: refresh sees it, check reports it.
    fs::write(
        source.join("omnigent/__init__.py"),
        "\"\"\"Example, second commit.\"\"\"\n\n__version__ = \"0.1.1\"\n",
    )?;
    git(ctx, &source, &["commit", "-q", "-am", "second commit"])?;
    let second = git(ctx, &source, &["rev-parse", "HEAD"])?;
    let (status, out) =
        ctx.run_to_end(omnidev(ctx, &["refresh"]), "refresh", Duration::from_mins(1))?;
    ensure!(status.success(), "omnidev refresh failed ({status}):\n{out}");
    let (status, out) = ctx.run_to_end(
        omnidev(ctx, &["check", "--quiet"]),
        "check-newer",
        Duration::from_secs(30),
    )?;
    ensure!(status.success(), "omnidev check --quiet failed ({status}):\n{out}");
    ensure!(
        out.contains(&second[..7]),
        "check --quiet did not report the new commit {}:\n{out}",
        &second[..7]
    );

    let (status, out) = ctx.run_to_end(omnidev(ctx, &["update"]), "update", UV)?;
    ensure!(status.success(), "omnidev update failed ({status}):\n{out}");
    let now = installed_commit(&tools)?;
    ensure!(now == second, "after update the installed commit is {now}, not {second}");
    let (status, out) = ctx.run_to_end(
        omnidev(ctx, &["check", "--quiet"]),
        "check-current",
        Duration::from_secs(30),
    )?;
    ensure!(
        status.success() && out.trim().is_empty(),
        "check --quiet when up to date printed ({status}):\n{out}"
    );
    kill_9_mid_install_leaves_the_previous_one(ctx, &source, &omnidev, &second)
}

/// `kill -9` of an `omnidev install` while uv works: nothing of it runs
/// 2 s later, and `install.toml` and `check` still describe the previous
/// install (`previous`).
fn kill_9_mid_install_leaves_the_previous_one(
    ctx: &mut Ctx,
    source: &Path,
    omnidev: &dyn Fn(&Ctx, &[&str]) -> Command,
    previous: &str,
) -> Result<()> {
    // A branch whose package carries 32 MiB of incompressible data, so
    // uv is still fetching and building it when the kill comes.
    git(ctx, source, &["checkout", "-q", "-b", "heavy"])?;
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let blob: Vec<u8> = (0..32 * 1024 * 1024 / 8)
        .flat_map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()
        })
        .collect();
    fs::write(source.join("omnigent/blob.bin"), blob)?;
    git(ctx, source, &["add", "omnigent/blob.bin"])?;
    git(ctx, source, &["commit", "-q", "-m", "heavy"])?;
    git(ctx, source, &["checkout", "-q", "main"])?;
    let saved = ctx.config_home().join("omnidev/install.toml");
    let before = fs::read_to_string(&saved)?;
    let url = format!("file://{}", source.display());
    let mut install = omnidev(
        ctx,
        &["install", "--git", &url, "--ref", "heavy", "--no-default-extra", "--python", "3.11"],
    );
    install.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
    let mut child = install.spawn()?;
    let uv_seen = util::wait_for("uv to start", UV, || {
        if let Some(status) = child.try_wait()? {
            bail!("omnidev install ended ({status}) before uv was seen running");
        }
        Ok(ctx.pod_processes().into_iter().find(|(_, cmdline)| cmdline.contains("tool install")))
    })?;
    child.kill()?;
    let _ = child.wait();
    let killed = std::time::Instant::now();
    while !ctx.pod_processes().is_empty() && killed.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left = ctx.pod_processes();
    ensure!(
        left.is_empty(),
        "2 s after kill -9 of omnidev install (uv was {uv_seen:?}) these still run: {left:?}"
    );
    ensure!(fs::read_to_string(&saved)? == before, "install.toml changed by the killed install");
    let (status, out) =
        ctx.run_to_end(omnidev(ctx, &["check"]), "check-after-kill", Duration::from_secs(30))?;
    ensure!(
        status.success() && out.contains("is up to date") && out.contains(&previous[..12]),
        "check after the killed install ({status}):\n{out}"
    );
    ctx.note("kill -9 mid-install: nothing left within 2 s");
    Ok(())
}

//! Cases: the web stack of the example (a pnpm workspace like Omnigent's):
//! install once at the workspace root, failed installs, the Node floor.

use std::path::Path;

use anyhow::{Context, Result, ensure};

use super::{Ctx, UP, install_log};

/// Checks that every install recorded in the example's log was run by pnpm
/// from the workspace root, and returns how many there were.
fn pnpm_installs_at_root(repo: &Path) -> Result<usize> {
    let log = install_log(repo);
    let root = repo.display().to_string();
    for line in &log {
        ensure!(line.contains(" agent=pnpm/"), "an install was not run by pnpm: {line}");
        ensure!(
            line.ends_with(&format!(" init-cwd={root}")),
            "an install did not run at the workspace root {root}: {line}"
        );
    }
    Ok(log.len())
}

/// A fresh copy of the example (no `node_modules`), plain `omnidev
/// --headless` inside it: pnpm installs once at the workspace root, the dev
/// server answers; a second start skips the install.
pub fn pnpm_workspace_installs_once_at_root(ctx: &mut Ctx) -> Result<()> {
    let repo = ctx.checkout("a")?;
    ensure!(
        !repo.join("node_modules").exists() && !repo.join("web/node_modules").exists(),
        "the fresh checkout already has node_modules"
    );
    let mut pod = ctx.up_plain(&repo, &[])?;
    let vite = pod.vite(UP)?;
    let out = pod.output();
    let installs = pnpm_installs_at_root(&repo)?;
    ensure!(installs == 1, "{installs} installs on the first start:\n{out}");
    ensure!(
        repo.join("node_modules/.pnpm").is_dir(),
        "no node_modules/.pnpm at the workspace root"
    );
    ensure!(
        !repo.join("web/package-lock.json").exists(),
        "npm ran in web/ (a package-lock.json appeared)"
    );
    let install_line = out
        .lines()
        .find(|line| line.contains("pnpm install"))
        .context("no `pnpm install` line in the output")?;
    ctx.note(format!("vite :{vite}; {}", install_line.trim()));
    pod.stop_with("INT", ctx)?;

    let mut pod = ctx.up_plain(&repo, &[])?;
    pod.vite(UP)?;
    let out = pod.output();
    pod.stop_with("INT", ctx)?;
    let installs = pnpm_installs_at_root(&repo)?;
    ensure!(
        installs == 1,
        "the second start installed again ({installs} installs in total):\n{out}"
    );
    ensure!(!out.contains("pnpm install"), "the second start mentions an install:\n{out}");
    Ok(())
}

/// Lines of `out` containing `needle`.
fn count_lines(out: &str, needle: &str) -> usize {
    out.lines().filter(|line| line.contains(needle)).count()
}

/// An install that fails (a dependency that does not exist): one clear
/// report, the dev script not started, no second install until a manifest
/// changes; fixing it brings the service up without restarting omnidev.
pub fn failed_install_reported_once_then_fixed(ctx: &mut Ctx) -> Result<()> {
    let repo = ctx.checkout("a")?;
    let manifest = repo.join("web/package.json");
    let good = std::fs::read_to_string(&manifest)?;
    let broken = good.replace(
        "\"omnigent-banner\": \"workspace:*\"",
        "\"omnigent-banner\": \"workspace:*\",\n    \"omnigent-missing\": \"workspace:*\"",
    );
    ensure!(broken != good, "could not add the missing dependency");
    std::fs::write(&manifest, &broken)?;

    let mut pod = ctx.up_plain(&repo, &[])?;
    let report = pod.wait_output("the failed install's report", UP, |out| {
        out.lines()
            .find(|line| line.contains("vite failed: pnpm install failed"))
            .map(str::to_owned)
    })?;
    for needed in ["exit code 1", "package.json", "omnidev restart vite"] {
        ensure!(report.contains(needed), "the report lacks `{needed}`: {report}");
    }
    // Server and host are not affected.
    pod.server(None, UP)?;
    // That nothing retries a failed install by itself, however long one
    // waits, is the paused-clock test
    // `a_failed_prepare_step_waits_for_its_inputs_however_long`; here the
    // fix below must cause exactly one more install.
    let out = pod.output();
    ensure!(out.contains("omnigent-missing"), "the report does not quote pnpm's error:\n{out}");
    ensure!(
        count_lines(&out, "vite: pnpm install …") == 1,
        "the install ran more than once before the fix:\n{out}"
    );
    ensure!(
        count_lines(&out, "vite failed:") == 1,
        "the failure was reported more than once:\n{out}"
    );
    ensure!(
        !out.contains("vite started") && !out.contains("omnigent-web:"),
        "the dev script started after a failed install:\n{out}"
    );

    std::fs::write(&manifest, &good)?;
    let vite = pod.vite(UP)?;
    let out = pod.output();
    ensure!(
        count_lines(&out, "vite: pnpm install …") == 2,
        "the fix did not cause exactly one more install:\n{out}"
    );
    ensure!(pnpm_installs_at_root(&repo)? == 1, "one successful install expected");
    ctx.note(format!("fixed without restarting omnidev; vite :{vite}"));
    pod.stop_with("INT", ctx)?;
    Ok(())
}

/// A `node` below the floor (a fake printing `v20.0.0` first on PATH): one
/// line naming it and `--no-vite`; server and host still run.
pub fn node_below_floor_backend_still_runs(ctx: &mut Ctx) -> Result<()> {
    let repo = ctx.checkout("a")?;
    let bin = ctx.dir.join("old-node");
    std::fs::create_dir_all(&bin)?;
    let node = bin.join("node");
    std::fs::write(&node, "#!/bin/sh\necho v20.0.0\n")?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o755))?;
    }
    let path = std::env::join_paths(
        std::iter::once(bin.clone())
            .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )?;
    let mut command = ctx.omnidev();
    command.arg("--headless").current_dir(&repo).env("PATH", &path);
    let mut pod = ctx.spawn_pod(command, &repo)?;
    pod.ready_backend(UP)?;
    let out = pod.output();
    let lines: Vec<&str> = out.lines().filter(|line| line.contains("v20.0.0")).collect();
    ensure!(lines.len() == 1, "expected one line naming v20.0.0:\n{out}");
    ensure!(
        lines[0].contains("--no-vite") && lines[0].contains(&node.display().to_string()),
        "the line does not name the node and --no-vite: {}",
        lines[0]
    );
    ensure!(
        !out.contains("pnpm install") && !out.contains("omnigent-web:"),
        "vite's install or dev script ran below the floor:\n{out}"
    );
    ctx.note(lines[0].trim().to_owned());
    pod.stop_with("INT", ctx)?;
    Ok(())
}

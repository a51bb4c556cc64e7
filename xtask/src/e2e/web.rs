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
        ensure!(
            line.contains(" agent=pnpm/"),
            "an install was not run by pnpm: {line}"
        );
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
pub fn pnpm_installs_once_at_the_workspace_root(ctx: &mut Ctx) -> Result<()> {
    let repo = ctx.checkout("a")?;
    ensure!(
        !repo.join("node_modules").exists() && !repo.join("web/node_modules").exists(),
        "the fresh checkout already has node_modules"
    );
    let mut pod = ctx.up_plain(&repo, &[])?;
    let vite = pod.vite(UP)?;
    let out = pod.output();
    let installs = pnpm_installs_at_root(&repo)?;
    ensure!(
        installs == 1,
        "{installs} installs on the first start:\n{out}"
    );
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
    ensure!(
        !out.contains("pnpm install"),
        "the second start mentions an install:\n{out}"
    );
    Ok(())
}

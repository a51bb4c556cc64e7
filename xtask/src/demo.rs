//! `cargo xtask demo`: run a pod on the bundled example checkout.

use std::os::unix::process::CommandExt;

use anyhow::{Context, Result, bail};
use xshell::cmd;

use crate::flags::Demo;
use crate::{prereqs, util};

/// Ensure `uv` and pnpm, build omnidev, run `omnidev up --repo examples/omnigent-example`.
pub fn run(options: &Demo) -> Result<()> {
    let sh = util::shell()?;
    let example = util::workspace_root().join("examples/omnigent-example");
    let up_args = &options.up_args;
    let has_uv = util::has_program("uv");
    // The example is a pnpm workspace; install the pnpm it pins, as uv.
    let pnpm = (!util::has_program("pnpm"))
        .then(util::example_package_manager)
        .transpose()?;
    if options.dry_run {
        if !has_uv {
            println!("demo: would run python3 -m pip install --user uv");
        }
        if let Some(pnpm) = &pnpm {
            println!("demo: would run npm install -g {pnpm}");
        }
        println!("demo: would run cargo build -p omnidev-cli --bin omnidev");
        println!(
            "demo: would run target/debug/omnidev up --repo {} {}",
            example.display(),
            up_args.join(" ")
        );
        return Ok(());
    }
    let mut path = std::env::var_os("PATH").unwrap_or_default();
    if !has_uv {
        path = install_uv(&sh)?;
    }
    if let Some(pnpm) = &pnpm {
        println!("demo: pnpm is missing; installing {pnpm} with npm");
        cmd!(sh, "npm install -g --no-fund --no-audit {pnpm}")
            .run()
            .with_context(|| {
                format!("installing pnpm with `npm install -g {pnpm}` (or run `corepack enable`)")
            })?;
    }
    let omnidev = util::build_omnidev(&sh, "dev")?;
    // Replace this process (as `cargo run` replaced cargo) so that omnidev
    // alone owns the terminal and receives Ctrl-C, and its exit code is ours.
    let error = std::process::Command::new(&omnidev)
        .arg("up")
        .arg("--repo")
        .arg(&example)
        .args(up_args)
        .env("PATH", path)
        .exec();
    bail!("could not run {}: {error}", omnidev.display())
}

/// `pip install --user uv` (retried with `--break-system-packages` on a
/// PEP 668 system, harmless for uv, a self-contained binary without Python
/// dependencies); returns `PATH` with the user's script directory in front.
fn install_uv(sh: &xshell::Shell) -> Result<std::ffi::OsString> {
    println!("demo: uv is missing; installing it with `python3 -m pip install --user uv`");
    let plain = cmd!(sh, "python3 -m pip install --user --quiet uv").run();
    if plain.is_err() {
        println!("demo: retrying with --break-system-packages (externally managed Python)");
        cmd!(
            sh,
            "python3 -m pip install --user --quiet --break-system-packages uv"
        )
        .run()
        .with_context(|| {
            format!(
                "installing uv; install it yourself: {}",
                prereqs::UV_INSTALL
            )
        })?;
    }
    let output = cmd!(sh, "python3 -m site --user-base").read()?;
    let scripts = std::path::Path::new(output.trim()).join("bin");
    let mut dirs = vec![scripts];
    dirs.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    Ok(std::env::join_paths(dirs)?)
}

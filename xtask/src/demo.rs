//! `cargo xtask demo`: run a pod on the bundled example checkout.

use std::os::unix::process::CommandExt;

use anyhow::{Context, Result, bail};
use xshell::cmd;

use crate::util;

/// Options of `cargo xtask demo`.
#[derive(Debug, Default)]
pub struct Options {
    /// Print the commands instead of running them.
    pub dry_run: bool,
    /// Passed on to `omnidev up`.
    pub up_args: Vec<String>,
}

impl Options {
    /// Parse the arguments after `demo`: `--dry-run`, everything else goes to `omnidev up`.
    pub fn parse(args: Vec<String>) -> Self {
        let mut options = Self::default();
        for arg in args {
            if arg == "--dry-run" {
                options.dry_run = true;
            } else {
                options.up_args.push(arg);
            }
        }
        options
    }
}

/// Ensure `uv` and pnpm, build omnidev, run `omnidev up --repo examples/omnigent-example`.
pub fn run(options: &Options) -> Result<()> {
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
            println!("demo: would run python3 -m pip install uv");
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
    if !has_uv {
        println!("demo: uv is missing; installing it with pip");
        cmd!(sh, "python3 -m pip install --quiet uv")
            .run()
            .context("installing uv with `python3 -m pip install uv` (install uv yourself: https://docs.astral.sh/uv/)")?;
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
        .exec();
    bail!("could not run {}: {error}", omnidev.display())
}

//! `cargo xtask demo`: run a pod on the bundled example checkout.

use std::os::unix::process::CommandExt;

use anyhow::{Result, bail};

use crate::flags::Demo;
use crate::prereqs::Step;
use crate::{install, util};

/// Install what the demo lacks (uv, pnpm), build omnidev, run
/// `omnidev up --repo examples/omnigent-example`.
pub fn run(options: &Demo) -> Result<()> {
    let example = util::workspace_root().join("examples/omnigent-example");
    let up_args = &options.up_args;
    install::ensure("demo", &[Step::Demo], options.dry_run)?;
    if options.dry_run {
        println!("demo: would run cargo build -p omnidev-cli --bin omnidev");
        println!(
            "demo: would run target/debug/omnidev up --repo {} {}",
            example.display(),
            up_args.join(" ")
        );
        return Ok(());
    }
    let omnidev = util::build_omnidev(&util::shell()?, "dev")?;
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

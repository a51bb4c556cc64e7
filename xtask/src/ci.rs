//! `cargo xtask ci`: the prerequisites (installed when missing), fmt check,
//! clippy with warnings denied, every test, then the e2e.

use std::time::Instant;

use anyhow::{Context, Result, bail};
use xshell::cmd;

use crate::flags::Ci;
use crate::prereqs::Step;
use crate::{e2e, install, prereqs, util};

/// Run the CI steps in order, stopping at the first failure.
pub fn run(options: &Ci) -> Result<()> {
    // Before anything builds: a missing shell or tmux would otherwise show
    // up minutes later as a panic in the middle of `cargo test`.
    let needs: &[Step] = if options.skip_e2e {
        &[Step::Lint, Step::Test]
    } else {
        &[Step::Lint, Step::Test, Step::E2e]
    };
    if options.no_install {
        let missing = prereqs::missing(&std::env::var_os("PATH").unwrap_or_default(), needs);
        if !missing.is_empty() {
            bail!(prereqs::report(&missing));
        }
    } else {
        install::ensure("ci", needs, options.dry_run)?;
    }
    if options.install_only {
        println!("ci: every prerequisite is on PATH");
        return Ok(());
    }
    let sh = util::shell()?;
    let steps: [(&str, xshell::Cmd<'_>); 3] = [
        ("fmt", cmd!(sh, "cargo fmt --all -- --check")),
        (
            "clippy",
            cmd!(sh, "cargo clippy --workspace --all-targets -- -D warnings"),
        ),
        ("test", cmd!(sh, "cargo test --workspace")),
    ];
    let total = Instant::now();
    for (name, step) in steps {
        if options.dry_run {
            println!("ci: would run {step}");
            continue;
        }
        let start = Instant::now();
        println!("ci: {name}: {step}");
        step.run()
            .with_context(|| format!("ci step `{name}` failed"))?;
        println!("ci: {name} ok in {:.0}s", start.elapsed().as_secs_f64());
    }
    if options.skip_e2e {
        return Ok(());
    }
    if options.dry_run {
        println!("ci: would run cargo xtask test-e2e");
        return Ok(());
    }
    let start = Instant::now();
    println!("ci: e2e");
    e2e::run(&crate::flags::TestE2e::default()).context("ci step `e2e` failed")?;
    println!("ci: e2e ok in {:.0}s", start.elapsed().as_secs_f64());
    println!(
        "ci: all steps passed in {:.0}s",
        total.elapsed().as_secs_f64()
    );
    Ok(())
}

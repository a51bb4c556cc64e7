//! `cargo xtask dist`: `target/dist/omnidev-<version>-<target>.tar.gz` and its `.sha256`.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use xshell::cmd;

use crate::util;

/// Options of `cargo xtask dist`.
#[derive(Debug)]
pub struct Options {
    /// Cargo profile to build with (`release` for users; the e2e uses `dev`).
    pub profile: String,
    /// Print the commands instead of running them.
    pub dry_run: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            profile: "release".to_string(),
            dry_run: false,
        }
    }
}

impl Options {
    /// Parse the arguments after `dist`.
    pub fn parse(args: Vec<String>) -> Result<Self> {
        let mut options = Self::default();
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--dry-run" => options.dry_run = true,
                "--profile" => {
                    options.profile = args.next().context("dist: --profile needs a value")?;
                }
                other => bail!("dist: unknown argument `{other}`"),
            }
        }
        Ok(options)
    }
}

/// What `dist` produced.
#[derive(Debug)]
pub struct Artifacts {
    /// The tarball.
    pub tarball: PathBuf,
    /// Its `sha256sum`-format checksum file.
    pub checksum: PathBuf,
}

/// The version shared by the workspace (xtask inherits it).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The host target triple, from `rustc -vV`.
fn host_target(sh: &xshell::Shell) -> Result<String> {
    let info = cmd!(sh, "rustc -vV").read()?;
    info.lines()
        .find_map(|line| line.strip_prefix("host: "))
        .map(str::to_string)
        .context("`rustc -vV` printed no `host:` line")
}

/// Build and pack.
pub fn run(options: &Options) -> Result<Artifacts> {
    let sh = util::shell()?;
    let target = host_target(&sh)?;
    let name = format!("omnidev-{VERSION}-{target}");
    let dist_dir = util::target_dir().join("dist");
    let tarball = dist_dir.join(format!("{name}.tar.gz"));
    let checksum = dist_dir.join(format!("{name}.tar.gz.sha256"));
    if options.dry_run {
        let profile = &options.profile;
        println!("dist: would run cargo build --profile {profile} -p omnidev-cli --bin omnidev");
        println!(
            "dist: would write {} and {}",
            tarball.display(),
            checksum.display()
        );
        return Ok(Artifacts { tarball, checksum });
    }
    let binary = util::build_omnidev(&sh, &options.profile)?;

    let staging = dist_dir.join(&name);
    if staging.exists() {
        sh.remove_path(&staging)?;
    }
    sh.create_dir(&staging)?;
    sh.copy_file(&binary, staging.join("omnidev"))?;
    sh.copy_file(
        util::workspace_root().join("README.md"),
        staging.join("README.md"),
    )?;
    {
        let _dir = sh.push_dir(&dist_dir);
        let file = tarball.file_name().context("tarball name")?;
        cmd!(sh, "tar -czf {file} {name}").run()?;
        let sum = cmd!(sh, "sha256sum {file}").read()?;
        sh.write_file(&checksum, format!("{sum}\n"))?;
    }
    sh.remove_path(&staging)?;
    println!("dist: {}", tarball.display());
    println!("dist: {}", checksum.display());
    Ok(Artifacts { tarball, checksum })
}

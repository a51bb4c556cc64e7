//! `cargo xtask dist`: `target/dist/omnidev-<version>-<target>.tar.gz` and its
//! `.sha256` (in `sha256sum` format), packed and hashed in-process.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use flate2::Compression;
use flate2::write::GzEncoder;
use sha2::{Digest, Sha256};
use xshell::cmd;

use crate::flags::Dist;
use crate::util;

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
pub fn run(options: &Dist) -> Result<Artifacts> {
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
    fs::create_dir_all(&dist_dir)?;
    pack(
        &tarball,
        &name,
        &[
            (binary.as_path(), "omnidev"),
            (&util::workspace_root().join("README.md"), "README.md"),
        ],
    )
    .with_context(|| format!("writing {}", tarball.display()))?;
    let file = tarball
        .file_name()
        .and_then(|f| f.to_str())
        .context("tarball name")?;
    let digest = Sha256::digest(fs::read(&tarball)?);
    let hex = digest.iter().fold(String::new(), |mut hex, byte| {
        let _ = write!(hex, "{byte:02x}");
        hex
    });
    // The format `sha256sum -c` reads.
    fs::write(&checksum, format!("{hex}  {file}\n"))?;
    println!("dist: {}", tarball.display());
    println!("dist: {}", checksum.display());
    Ok(Artifacts { tarball, checksum })
}

/// Writes a gzipped tarball holding `files` (source, name) under `dir/`.
fn pack(tarball: &Path, dir: &str, files: &[(&Path, &str)]) -> Result<()> {
    let gz = GzEncoder::new(fs::File::create(tarball)?, Compression::default());
    let mut archive = tar::Builder::new(gz);
    let parent = tarball.parent().context("tarball has a directory")?;
    archive.append_dir(dir, parent)?;
    for (source, name) in files {
        archive.append_path_with_name(source, format!("{dir}/{name}"))?;
    }
    archive.into_inner()?.finish()?;
    Ok(())
}

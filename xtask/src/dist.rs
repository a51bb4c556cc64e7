//! `cargo xtask dist`: `target/dist/omnidev-<version>-<target>.tar.gz` (the
//! binary, README.md and the man pages `omnidev man` generates from the clap
//! definitions, under `man/man1/`) and its `.sha256` (in `sha256sum`
//! format), packed and hashed in-process.

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

/// The name of the tarball's top directory (`omnidev-VERSION-TARGET`), and
/// where the tarball and its checksum go (`target/dist`).
fn artifacts(sh: &xshell::Shell) -> Result<(String, Artifacts)> {
    let name = format!("omnidev-{VERSION}-{}", host_target(sh)?);
    let dist_dir = util::target_dir().join("dist");
    let artifacts = Artifacts {
        tarball: dist_dir.join(format!("{name}.tar.gz")),
        checksum: dist_dir.join(format!("{name}.tar.gz.sha256")),
    };
    Ok((name, artifacts))
}

/// Build and pack.
pub fn run(options: &Dist) -> Result<Artifacts> {
    let sh = util::shell()?;
    if options.dry_run {
        let (_, artifacts) = artifacts(&sh)?;
        let profile = &options.profile;
        println!("dist: would run cargo build --profile {profile} -p omnidev-cli --bin omnidev");
        println!(
            "dist: would write {} and {}",
            artifacts.tarball.display(),
            artifacts.checksum.display()
        );
        return Ok(artifacts);
    }
    let binary = util::build_omnidev(&sh, &options.profile)?;
    pack_binary(&sh, &binary)
}

/// Packs `binary` (an omnidev already built) as [`run`] does after its
/// build: the tarball and its sha256 in `target/dist`.
pub fn pack_binary(sh: &xshell::Shell, binary: &Path) -> Result<Artifacts> {
    let (name, Artifacts { tarball, checksum }) = artifacts(sh)?;
    let dist_dir = tarball.parent().context("the tarball's directory")?;
    fs::create_dir_all(dist_dir)?;
    let man = dist_dir.join(format!("{name}-man"));
    if man.exists() {
        fs::remove_dir_all(&man)?;
    }
    cmd!(sh, "{binary} man {man}")
        .quiet()
        .ignore_stdout()
        .run()
        .context("generating the man pages")?;
    let pages = man_pages(&man)?;
    let readme = util::workspace_root().join("README.md");
    let mut files =
        vec![(binary.to_path_buf(), "omnidev".to_string()), (readme, "README.md".to_string())];
    files.extend(pages.into_iter().map(|(path, file)| (path, format!("man/man1/{file}"))));
    let files: Vec<(&Path, &str)> =
        files.iter().map(|(path, name)| (path.as_path(), name.as_str())).collect();
    pack(&tarball, &name, &files).with_context(|| format!("writing {}", tarball.display()))?;
    fs::remove_dir_all(&man)?;
    let file = tarball.file_name().and_then(|f| f.to_str()).context("tarball name")?;
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

/// The `*.1` files of `dir`, sorted: (path, file name).
fn man_pages(dir: &Path) -> Result<Vec<(PathBuf, String)>> {
    let mut pages = Vec::new();
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        let file = entry.file_name().to_string_lossy().into_owned();
        if file.ends_with(".1") {
            pages.push((entry.path(), file));
        }
    }
    pages.sort();
    if !pages.iter().any(|(_, file)| file == "omnidev.1") {
        anyhow::bail!("`omnidev man` wrote no omnidev.1 into {}", dir.display());
    }
    Ok(pages)
}

/// Writes a gzipped tarball holding `files` (source, name) under `dir/`.
fn pack(tarball: &Path, dir: &str, files: &[(&Path, &str)]) -> Result<()> {
    let gz = GzEncoder::new(fs::File::create(tarball)?, Compression::default());
    let mut archive = tar::Builder::new(gz);
    let parent = tarball.parent().context("tarball has a directory")?;
    archive.append_dir(dir, parent)?;
    archive.append_dir(format!("{dir}/man"), parent)?;
    archive.append_dir(format!("{dir}/man/man1"), parent)?;
    for (source, name) in files {
        archive.append_path_with_name(source, format!("{dir}/{name}"))?;
    }
    archive.into_inner()?.finish()?;
    Ok(())
}

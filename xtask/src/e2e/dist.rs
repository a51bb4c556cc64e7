//! Case: `cargo xtask dist` produces the tarball and its sha256; the binary
//! in it runs `--version`; its man pages render with `man`.

use std::process::Command;

use anyhow::{Context, Result, ensure};

use super::Ctx;
use crate::dist;

/// Pack the binary under test (the release build is the same code, slower
/// to compile; `cargo xtask dist` only builds before it packs), verify the
/// checksum, unpack, run `omnidev --version`.
pub fn dist_tarball_sha256_and_version(ctx: &mut Ctx) -> Result<()> {
    let artifacts = dist::pack_binary(&crate::util::shell()?, ctx.omnidev_path())?;
    let dir = artifacts.tarball.parent().context("tarball dir")?;
    let check =
        Command::new("sha256sum").arg("-c").arg(&artifacts.checksum).current_dir(dir).output()?;
    ensure!(
        check.status.success(),
        "sha256sum -c {}: {}",
        artifacts.checksum.display(),
        String::from_utf8_lossy(&check.stdout)
    );

    let unpack = ctx.dir.join("unpacked");
    std::fs::create_dir_all(&unpack)?;
    let status =
        Command::new("tar").arg("-xzf").arg(&artifacts.tarball).arg("-C").arg(&unpack).status()?;
    ensure!(status.success(), "tar -xzf {} failed", artifacts.tarball.display());
    let stem = artifacts
        .tarball
        .file_name()
        .context("name")?
        .to_string_lossy()
        .trim_end_matches(".tar.gz")
        .to_string();
    let binary = unpack.join(&stem).join("omnidev");
    let output = ctx
        .command(&binary)
        .arg("--version")
        .output()
        .with_context(|| format!("running {}", binary.display()))?;
    let text = String::from_utf8_lossy(&output.stdout);
    ensure!(
        output.status.success() && text.contains(dist::VERSION),
        "{} --version: {} {text}",
        binary.display(),
        output.status
    );
    let page = unpack.join(&stem).join("man/man1/omnidev.1");
    let man = Command::new("man")
        .arg("-l")
        .arg(&page)
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .output();
    let text_page = match &man {
        Ok(output) if output.status.success() => {
            String::from_utf8_lossy(&output.stdout).into_owned()
        }
        // No man-db here: the roff itself.
        _ => {
            std::fs::read_to_string(&page).with_context(|| format!("reading {}", page.display()))?
        }
    };
    ensure!(
        text_page.contains("one isolated dev pod per checkout"),
        "{}: {text_page}",
        page.display()
    );
    ensure!(
        unpack.join(&stem).join("man/man1/omnidev-up.1").is_file(),
        "no omnidev-up.1 in the tarball"
    );
    ctx.note(format!("{} -> {}", artifacts.tarball.display(), text.trim()));
    Ok(())
}

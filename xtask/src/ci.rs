//! `cargo xtask ci`: the prerequisites (installed when missing), fmt check,
//! clippy with warnings denied, the same clippy for the two macOS targets
//! ([`crate::macos`]), every test, the library crates as outsiders see
//! them (docs, packages, example programs), then the e2e.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use xshell::cmd;

use crate::flags::Ci;
use crate::prereqs::Step;
use crate::{e2e, install, macos, prereqs, suite, util};

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
        macos::install(options.dry_run)?;
        println!("ci: every prerequisite is on PATH");
        return Ok(());
    }
    let sh = util::shell()?;
    let target = util::target_dir();
    let users = "examples/library-users/Cargo.toml";
    let dry_run = options.dry_run;
    let logs = target.join("ci-logs");
    let total = Instant::now();
    foreground("fmt", &cmd!(sh, "cargo fmt --all -- --check"), dry_run)?;
    foreground(
        "clippy",
        &cmd!(sh, "cargo clippy --workspace --all-targets -- -D warnings"),
        dry_run,
    )?;
    // The tests are built first; then, while they run (mostly waiting on
    // the processes they start), the macOS clippy builds in a target dir
    // of its own beside them (the suite holds beside busy loops; `cargo
    // xtask stress` checks that). Beside the build it only slowed both.
    let binaries = step("test-build", "cargo test --workspace --no-run", dry_run, suite::build)?;
    println!("ci: macos: clippy for {}", macos::TARGET);
    let macos = macos::command(!options.no_install, dry_run)
        .context("ci step `macos` failed")?
        .map(|command| Beside::start("macos", command, &logs))
        .transpose()?;
    let what =
        format!("the test binaries, {} at a time, then cargo test --workspace --doc", suite::JOBS);
    step("test", &what, dry_run, || suite::run(&binaries.unwrap_or_default(), suite::JOBS))?;
    if let Some(macos) = macos {
        macos.join()?;
    }
    // Broken intra-doc links and undocumented public items fail here.
    foreground(
        "doc",
        &cmd!(sh, "cargo doc --workspace --no-deps --exclude xtask")
            .env("RUSTDOCFLAGS", "-D warnings"),
        dry_run,
    )?;
    // Programs outside the workspace that use omnidev-pod and omnidev-core
    // as dependencies, built and run.
    foreground(
        "library-users",
        &cmd!(sh, "cargo build --manifest-path {users} --target-dir {target}"),
        dry_run,
    )?;
    if !dry_run {
        library_users(&sh, &target.join("debug"))?;
    }
    // The e2e runs the binary the test-build made (the one the integration
    // tests ran): building it again alone would compile the workspace's
    // crates a second time, for other features of their dependencies. A
    // link of its own, since the package step builds `omnidev` again, from
    // its package, into the same place.
    let omnidev = target.join("ci-e2e/omnidev");
    if !dry_run {
        let _ = std::fs::remove_file(&omnidev);
        std::fs::create_dir_all(target.join("ci-e2e"))?;
        std::fs::hard_link(target.join("debug/omnidev"), &omnidev)
            .with_context(|| format!("linking {}", omnidev.display()))?;
    }
    let package = start_package(&sh, &target, &logs, dry_run)?;
    if options.skip_e2e {
    } else if dry_run {
        println!("ci: would run cargo xtask test-e2e");
    } else {
        let start = Instant::now();
        println!("ci: e2e");
        let e2e = crate::flags::TestE2e {
            omnidev: Some(omnidev),
            jobs: 2,
            ..crate::flags::TestE2e::default()
        };
        e2e::run(&e2e).context("ci step `e2e` failed")?;
        println!("ci: e2e ok in {:.0}s", start.elapsed().as_secs_f64());
    }
    if let Some(package) = package {
        package.join()?;
    }
    if !dry_run {
        println!("ci: all steps passed in {:.0}s", total.elapsed().as_secs_f64());
    }
    Ok(())
}

/// Each library crate packs and builds from its package alone, as
/// crates.io would hold it (path dependencies resolved by version), beside
/// the e2e, which mostly waits on pods. Cargo verifies a package by
/// building it in `target` with this workspace's crates taken from a
/// local registry, with the dependencies this workspace's tests built
/// (the same debuginfo setting as the workspace's own profile, which a
/// package does not carry: otherwise every dependency is built again).
/// `None` on a dry run, which prints it.
fn start_package(
    sh: &xshell::Shell,
    target: &Path,
    logs: &Path,
    dry_run: bool,
) -> Result<Option<Beside>> {
    let mut package = std::process::Command::new("cargo");
    package
        .args([
            "package",
            "--config",
            "profile.dev.package.\"*\".debug=false",
            "--workspace",
            "--exclude",
            "xtask",
            // A dev-dependency only, never published.
            "--exclude",
            "omnidev-test-support",
            "--allow-dirty",
        ])
        .arg("--target-dir")
        .arg(target)
        .current_dir(util::workspace_root());
    if dry_run {
        println!("ci: would run {package:?}");
        return Ok(None);
    }
    let crates = workspace_crates(sh)?;
    forget_packaged_builds(&target.join("debug"), &crates)?;
    forget_packaged_sources(&crates)?;
    Ok(Some(Beside::start("package", package, logs)?))
}

/// Runs a step in the foreground (a dry run prints it).
fn foreground(name: &str, step: &xshell::Cmd<'_>, dry_run: bool) -> Result<()> {
    self::step(name, &step.to_string(), dry_run, || Ok(step.run()?)).map(|_| ())
}

/// Runs the step `name`, which does `what`, in the foreground, saying how
/// long it took; a dry run prints it instead (and has no value).
fn step<T>(
    name: &str,
    what: &str,
    dry_run: bool,
    work: impl FnOnce() -> Result<T>,
) -> Result<Option<T>> {
    if dry_run {
        println!("ci: would run {what}");
        return Ok(None);
    }
    let start = Instant::now();
    println!("ci: {name}: {what}");
    let value = work().with_context(|| format!("ci step `{name}` failed"))?;
    println!("ci: {name} ok in {:.0}s", start.elapsed().as_secs_f64());
    Ok(Some(value))
}

/// A step run beside the foreground ones: its output goes to
/// `target/ci-logs/<name>.log`, printed when it is joined; if CI stops
/// before (a failed step, a panic), its process is killed then.
struct Beside {
    name: &'static str,
    child: Arc<Mutex<std::process::Child>>,
    log: std::path::PathBuf,
    start: Instant,
    /// Polls the process: its status and when it ended.
    waiter: Option<std::thread::JoinHandle<std::io::Result<(std::process::ExitStatus, Instant)>>>,
}

impl Beside {
    fn start(name: &'static str, mut command: std::process::Command, dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let log = dir.join(format!("{name}.log"));
        let file =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let child = command
            .stdin(std::process::Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting ci step `{name}`"))?;
        println!(
            "ci: {name}: running beside the next steps ({command:?}; output in {})",
            log.display()
        );
        let child = Arc::new(Mutex::new(child));
        let polled = Arc::clone(&child);
        // Reaped only under the lock, so a kill never finds its pid reused.
        let waiter = std::thread::spawn(move || {
            loop {
                let status =
                    polled.lock().unwrap_or_else(std::sync::PoisonError::into_inner).try_wait()?;
                if let Some(status) = status {
                    return Ok((status, Instant::now()));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Ok(Self { name, child, log, start: Instant::now(), waiter: Some(waiter) })
    }

    /// Waits for it, prints its output and says how it went.
    fn join(mut self) -> Result<()> {
        let name = self.name;
        let waiter = self.waiter.take().expect("joined once");
        let (status, ended) = waiter
            .join()
            .map_err(|_| anyhow::anyhow!("the waiter of ci step `{name}` panicked"))?
            .with_context(|| format!("waiting for ci step `{name}`"))?;
        let output = std::fs::read(&self.log).unwrap_or_default();
        print!("{}", String::from_utf8_lossy(&output));
        if !status.success() {
            bail!("ci step `{name}` failed ({status})");
        }
        println!(
            "ci: {name} ok in {:.0}s (beside the others)",
            ended.duration_since(self.start).as_secs_f64()
        );
        Ok(())
    }
}

impl Drop for Beside {
    fn drop(&mut self) {
        let Some(waiter) = self.waiter.take() else {
            return;
        };
        {
            let mut child = self.child.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let _ = waiter.join();
    }
}

/// Removes the sources an earlier `cargo package` unpacked for this
/// workspace's own crates. Cargo unpacks each packaged crate into the cargo
/// home, under a directory named after the local registry it builds in
/// `target/package-check/package`, and never refreshes it: a later run
/// from a clone at the same path verified against the old sources and failed to build (a
/// fresh clone's omnidev-cli against an omnidev-core from hours before).
/// Only `NAME-VERSION` directories of this workspace's packages in local
/// registries (their directory names start with `-`: they have no host)
/// are removed; nothing else in the cargo home is touched.
fn forget_packaged_sources(crates: &[(String, String)]) -> Result<()> {
    let crates: Vec<String> =
        crates.iter().map(|(name, version)| format!("{name}-{version}")).collect();
    for stale in stale_package_sources(&util::cargo_home().join("registry/src"), &crates) {
        println!("ci: package: removing {} (an earlier run's copy)", stale.display());
        std::fs::remove_dir_all(&stale).with_context(|| format!("removing {}", stale.display()))?;
    }
    Ok(())
}

/// The workspace's packages, as `(name, version)`.
fn workspace_crates(sh: &xshell::Shell) -> Result<Vec<(String, String)>> {
    let metadata = cmd!(sh, "cargo metadata --no-deps --format-version 1 --offline")
        .quiet()
        .read()
        .context("reading the workspace's packages")?;
    let metadata: serde_json::Value =
        serde_json::from_str(&metadata).context("parsing cargo metadata")?;
    Ok(metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p["name"].as_str()?.to_owned(), p["version"].as_str()?.to_owned())))
        .collect())
}

/// Makes cargo forget what an earlier package step built of this
/// workspace's own crates in `profile_dir` (`target/debug`), so that it
/// builds them from this run's packages: their fingerprints go (cargo
/// then builds the unit again, over its artifacts). The workspace's own
/// builds of the same crates and the dependencies' builds stay.
fn forget_packaged_builds(profile_dir: &Path, crates: &[(String, String)]) -> Result<()> {
    for stale in stale_package_builds(profile_dir, crates) {
        std::fs::remove_dir_all(&stale).with_context(|| format!("removing {}", stale.display()))?;
    }
    Ok(())
}

/// The fingerprints (`.fingerprint/NAME-HASH`) of `crates` in
/// `profile_dir` that were built from a package: their dep-info
/// (`deps/*-HASH.d`, a library's or a program's) names sources in one of
/// cargo's local registries (`registry/src/-…`), where a package is
/// unpacked to be verified. Such a build counts as done for good, as any
/// registry crate's does, even once the package holds other code.
fn stale_package_builds(
    profile_dir: &Path,
    crates: &[(String, String)],
) -> Vec<std::path::PathBuf> {
    let Ok(fingerprints) = std::fs::read_dir(profile_dir.join(".fingerprint")) else {
        return Vec::new();
    };
    let dep_infos: Vec<std::path::PathBuf> = std::fs::read_dir(profile_dir.join("deps"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|e| e == "d"))
        .collect();
    let mut found = Vec::new();
    for entry in fingerprints.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        // `omnidev-core-1a2b…` but not `omnidev-core-extra-1a2b…`: the
        // rest after the name is the hash alone.
        let hash = crates.iter().find_map(|(krate, _)| {
            let hash = name.strip_prefix(krate.as_str())?.strip_prefix('-')?;
            (!hash.is_empty() && hash.chars().all(|c| c.is_ascii_hexdigit())).then_some(hash)
        });
        let Some(hash) = hash else { continue };
        let suffix = format!("-{hash}.d");
        let packaged = dep_infos.iter().any(|path| {
            path.to_string_lossy().ends_with(&suffix)
                && std::fs::read_to_string(path).is_ok_and(|text| text.contains("/registry/src/-"))
        });
        if packaged {
            found.push(entry.path());
        }
    }
    found.sort();
    found
}

/// The `NAME-VERSION` directories of `crates` under the local registries
/// of `src` (cargo's `registry/src`).
fn stale_package_sources(src: &Path, crates: &[String]) -> Vec<std::path::PathBuf> {
    let Ok(registries) = std::fs::read_dir(src) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for registry in registries.flatten() {
        let local = registry.file_name().to_string_lossy().starts_with('-');
        let is_dir = registry.file_type().is_ok_and(|t| t.is_dir());
        if !local || !is_dir {
            continue;
        }
        for name in crates {
            let dir = registry.path().join(name);
            if std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
                found.push(dir);
            }
        }
    }
    found.sort();
    found
}

/// Runs the two example programs of `examples/library-users`: `pod-info` on
/// a fresh copy of the bundled example (with its own cache and runtime
/// directories, so no real pod is touched) must name the pod directory and
/// the profile's ports, and `supervise-two` must see its client answered.
fn library_users(sh: &xshell::Shell, bin: &Path) -> Result<()> {
    let root = std::env::temp_dir().join(format!("omnidev-ci-library-{}", std::process::id()));
    let (checkout, cache, run) = (root.join("ex"), root.join("cache"), root.join("run"));
    std::fs::create_dir_all(&run).with_context(|| format!("creating {}", run.display()))?;
    let example = util::workspace_root().join("examples/omnigent-example");
    cmd!(sh, "cp -R {example} {checkout}").run()?;
    cmd!(sh, "git init -q {checkout}").run()?;
    let pod_info = bin.join("pod-info");
    let printed = cmd!(sh, "{pod_info} {checkout}")
        .env("XDG_CACHE_HOME", &cache)
        .env("XDG_RUNTIME_DIR", &run)
        .read()
        .context("pod-info failed")?;
    println!("{printed}");
    let expected_dir = format!("pod dir   {}", cache.join("omnidev").display());
    if !printed.contains(&expected_dir) || !printed.contains("port      server = ") {
        bail!("pod-info did not print the pod under {} with a server port", cache.display());
    }
    let supervise = bin.join("supervise-two");
    let printed = cmd!(sh, "{supervise}").read().context("supervise-two failed")?;
    println!("{printed}");
    if !printed.contains("client got: hello from api") {
        bail!("supervise-two's client was not answered");
    }
    std::fs::remove_dir_all(&root).with_context(|| format!("removing {}", root.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{stale_package_builds, stale_package_sources};

    #[test]
    fn only_builds_of_this_workspaces_packages_are_stale() {
        let target = tempfile::tempdir().expect("temp dir");
        let debug = target.path();
        let registry = "/root/.cargo/registry/src/-88b6652648f7a036/omnidev-core-0.1.0/src/lib.rs";
        let crates_io =
            "/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/serde-1.0.0/src/lib.rs";
        let entries = [
            // Built from the package: stale.
            (".fingerprint/omnidev-core-0123abcd/lib-omnidev_core.json", String::new()),
            ("deps/omnidev_core-0123abcd.d", format!("x.d: {registry}")),
            // The package's program (named `omnidev`, of omnidev-cli).
            (".fingerprint/omnidev-cli-4567abcd/bin-omnidev.json", String::new()),
            ("deps/omnidev-4567abcd.d", format!("x.d: {registry}")),
            // The workspace's own build of it: kept.
            (".fingerprint/omnidev-core-89ef0123/lib-omnidev_core.json", String::new()),
            ("deps/omnidev_core-89ef0123.d", "x.d: src/lib.rs".to_owned()),
            // Its docs (no dep-info in deps): kept.
            (".fingerprint/omnidev-core-aaaa0000/doc-lib-omnidev_core.json", String::new()),
            // Another crate, from crates.io, and one whose name only starts
            // like ours: kept.
            (".fingerprint/serde-0123abcd/lib-serde.json", String::new()),
            ("deps/serde-0123abcd.d", format!("x.d: {crates_io}")),
            (".fingerprint/omnidev-core-extra-bbbb0000/lib.json", String::new()),
            ("deps/omnidev_core_extra-bbbb0000.d", format!("x.d: {registry}")),
        ];
        for (entry, text) in entries {
            let path = debug.join(entry);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, text).expect("write");
        }
        let crates = [
            ("omnidev-core".to_owned(), "0.1.0".to_owned()),
            ("omnidev-cli".to_owned(), "0.1.0".to_owned()),
        ];
        let found: Vec<_> = stale_package_builds(debug, &crates)
            .into_iter()
            .map(|p| p.strip_prefix(debug).expect("under the dir").to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            found,
            [".fingerprint/omnidev-cli-4567abcd", ".fingerprint/omnidev-core-0123abcd",]
        );
        assert!(stale_package_builds(&debug.join("absent"), &crates).is_empty());
    }

    #[test]
    fn only_this_workspaces_crates_in_local_registries_are_stale() {
        let home = tempfile::tempdir().expect("temp dir");
        let src = home.path();
        for dir in [
            "-22c3805da5a543b4/omnidev-core-0.1.0",
            "-22c3805da5a543b4/omnidev-cli-0.1.0",
            "-22c3805da5a543b4/serde-1.0.0",
            "-910674bf3c05c16c/omnidev-core-0.1.0",
            "-910674bf3c05c16c/omnidev-core-0.2.0",
            "index.crates.io-1949cf8c6b5b557f/omnidev-core-0.1.0",
        ] {
            std::fs::create_dir_all(src.join(dir)).expect("mkdir");
        }
        // A file of the same name is not a source directory.
        std::fs::write(src.join("-910674bf3c05c16c/omnidev-cli-0.1.0"), "").expect("write");
        let crates = ["omnidev-core-0.1.0".to_owned(), "omnidev-cli-0.1.0".to_owned()];
        let found: Vec<_> = stale_package_sources(src, &crates)
            .into_iter()
            .map(|p| p.strip_prefix(src).expect("under src").to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            found,
            [
                "-22c3805da5a543b4/omnidev-cli-0.1.0",
                "-22c3805da5a543b4/omnidev-core-0.1.0",
                "-910674bf3c05c16c/omnidev-core-0.1.0",
            ]
        );
        assert!(stale_package_sources(&src.join("absent"), &crates).is_empty());
    }
}

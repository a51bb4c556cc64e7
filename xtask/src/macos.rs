//! The macOS step of `cargo xtask ci`: clippy of the whole workspace, all
//! targets, warnings denied, for `aarch64-apple-darwin`, on this Linux
//! machine. It type-checks and lints (nothing links or runs), which is
//! what can be had without a Mac.
//!
//! One apple target is enough: every `cfg` of this workspace's code asks
//! for `target_os` (or `unix`), never the architecture, so
//! `x86_64-apple-darwin` compiled the same code a second time (and the
//! dependencies' architecture-specific parts are not linted here anyway).
//!
//! What it takes, installed when missing (and named exactly when it
//! cannot be):
//! - a Rust toolchain with the target's standard library: rustup's, with
//!   the prebuilt one (`rustup target add aarch64-apple-darwin`, a
//!   download); else one with the standard library's source, so that
//!   cargo builds `std` for the target (`-Zbuild-std`, allowed on a
//!   stable compiler by `RUSTC_BOOTSTRAP=1`, about a minute more):
//!   rustup's with the `rust-src` component, or Debian's `rustc-web`,
//!   `cargo-web`, `rust-web-src` and `rust-web-clippy` (installed with
//!   apt-get as root or with passwordless sudo);
//! - a C compiler for the target (the TLS stack builds C): zig, from the
//!   `ziglang` package of PyPI in a venv of its own under
//!   `~/.cache/omnidev-ci`, driven by `cargo-zigbuild` (from crates.io,
//!   built once into `~/.cargo/bin`).
//!
//! The apple builds go to `target/apple`, apart from the normal build.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::{install, prereqs, util};

/// The target checked.
pub const TARGET: &str = "aarch64-apple-darwin";

/// Debian's packages of a Rust with its standard library's source.
pub const DEBIAN_PACKAGES: [&str; 4] =
    ["rustc-web", "cargo-web", "rust-web-src", "rust-web-clippy"];

/// The zig of PyPI, pinned (the version cargo-zigbuild was checked with).
const ZIGLANG: &str = "ziglang==0.17.1";

/// cargo-zigbuild, pinned (PyPI's wheel of it, or crates.io's).
const ZIGBUILD_VERSION: &str = "0.24.1";

/// The oldest compiler that builds the workspace (its `rust-version`).
const MIN_RUST: (u32, u32) = (1, 90);

/// A Rust toolchain that can build `std` for another target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toolchain {
    /// Where it comes from, for the log.
    pub origin: &'static str,
    /// Its `rustc`.
    pub rustc: PathBuf,
    /// Its `cargo`.
    pub cargo: PathBuf,
    /// The directory of its `cargo-clippy`, put first on `PATH`.
    pub bin: PathBuf,
}

/// The toolchain in `sysroot` (`rustc --print sysroot`), when it has
/// clippy and (`needs_source`, to build `std`) the standard library's
/// source.
pub fn toolchain_in(origin: &'static str, sysroot: &Path, needs_source: bool) -> Option<Toolchain> {
    let bin = sysroot.join("bin");
    let source = sysroot.join("lib/rustlib/src/rust/library/std/src/lib.rs");
    let complete = (!needs_source || source.is_file())
        && ["rustc", "cargo", "cargo-clippy", "clippy-driver"]
            .iter()
            .all(|program| bin.join(program).is_file());
    complete.then(|| Toolchain { origin, rustc: bin.join("rustc"), cargo: bin.join("cargo"), bin })
}

/// Whether `rustc --version` output names at least `min` (`rustc 1.96.0 (…)`).
pub fn version_at_least(version: &str, min: (u32, u32)) -> bool {
    let Some(number) = version.split_whitespace().nth(1) else {
        return false;
    };
    let mut parts = number.split(['.', '-']).map(str::parse::<u32>);
    match (parts.next(), parts.next()) {
        (Some(Ok(major)), Some(Ok(minor))) => (major, minor) >= min,
        _ => false,
    }
}

fn output(command: &mut Command) -> Option<String> {
    command
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The origin of the active rustup toolchain.
const RUSTUP: &str = "rustup";

/// Whether rustup has the target's prebuilt standard library, added when
/// missing and allowed (a dry run says it would be).
fn ensure_prebuilt_std(may_install: bool, dry_run: bool) -> bool {
    let installed = output(Command::new("rustup").args(["target", "list", "--installed"]))
        .is_some_and(|list| list.lines().any(|line| line.trim() == TARGET));
    if installed || !may_install {
        return installed;
    }
    let says = format!("adding the prebuilt standard library: rustup target add {TARGET}");
    if dry_run {
        println!("ci: macos: would be {says}");
        return true;
    }
    run(&says, Command::new("rustup").args(["target", "add", TARGET]))
}

/// A usable toolchain on this machine that builds `std` from its source:
/// rustup's (with `rust-src`), else Debian's under `/usr`.
fn find_toolchain() -> Option<Toolchain> {
    rustup_toolchain(true)
        .into_iter()
        .chain(toolchain_in("Debian (rustc-web, rust-web-src)", Path::new("/usr"), true))
        .find(new_enough)
}

/// The active rustup toolchain (with `rust-src` when `needs_source`).
fn rustup_toolchain(needs_source: bool) -> Option<Toolchain> {
    output(Command::new("rustup").arg("--version"))?;
    let sysroot = output(Command::new("rustc").args(["--print", "sysroot"]))?;
    toolchain_in(RUSTUP, Path::new(&sysroot), needs_source).filter(new_enough)
}

/// One older than the workspace needs does not count.
fn new_enough(toolchain: &Toolchain) -> bool {
    output(Command::new(&toolchain.rustc).arg("--version"))
        .is_some_and(|v| version_at_least(&v, MIN_RUST))
}

fn missing_toolchain() -> String {
    format!(
        "no Rust toolchain with the standard library's source (Rust {}.{} or newer); get one of:\n  \
         sudo apt-get install -y {}  (Debian 12: Rust 1.96 in bookworm-security)\n  \
         rustup component add rust-src",
        MIN_RUST.0,
        MIN_RUST.1,
        DEBIAN_PACKAGES.join(" ")
    )
}

/// The directory of the CI's own tools (`$XDG_CACHE_HOME/omnidev-ci`, else
/// `~/.cache/omnidev-ci`).
fn cache_dir() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .filter(|dir| !dir.is_empty())
        .map_or_else(
            || PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/".into())).join(".cache"),
            PathBuf::from,
        )
        .join("omnidev-ci")
}

/// How cargo-zigbuild finds zig: on `PATH`, or through the venv's Python.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Zig {
    OnPath,
    Venv(PathBuf),
}

fn zig_venv() -> PathBuf {
    cache_dir().join("zig-venv")
}

fn find_zig() -> Option<Zig> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    if prereqs::find_program("zig", &path).is_some() {
        return Some(Zig::OnPath);
    }
    let python = zig_venv().join("bin/python");
    output(Command::new(&python).args(["-m", "ziglang", "version"])).map(|_| Zig::Venv(python))
}

fn find_zigbuild() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    prereqs::find_program("cargo-zigbuild", &path).or_else(|| {
        [zig_venv().join("bin/cargo-zigbuild"), util::cargo_home().join("bin/cargo-zigbuild")]
            .into_iter()
            .find(|installed| installed.is_file())
    })
}

/// What the check runs with.
#[derive(Debug)]
struct Tools {
    toolchain: Toolchain,
    zig: Zig,
    zigbuild: PathBuf,
    /// The toolchain has the target's standard library prebuilt: nothing
    /// builds `std`.
    prebuilt_std: bool,
}

/// Runs a command, inheriting the output; whether it succeeded.
fn run(says: &str, command: &mut Command) -> bool {
    println!("ci: macos: {says}");
    command.stdin(Stdio::null()).status().is_ok_and(|status| status.success())
}

/// The toolchain, installed from Debian's packages when missing and
/// allowed; `Err` names what to install.
fn ensure_toolchain(may_install: bool, dry_run: bool) -> Result<Option<Toolchain>, String> {
    if let Some(toolchain) = find_toolchain() {
        return Ok(Some(toolchain));
    }
    if !may_install {
        return Err(missing_toolchain());
    }
    install::apt_packages("ci: macos", &DEBIAN_PACKAGES, dry_run)
        .map_err(|e| format!("{e:#}\n{}", missing_toolchain()))?;
    match find_toolchain() {
        Some(toolchain) => Ok(Some(toolchain)),
        None if dry_run => Ok(None),
        None => Err(missing_toolchain()),
    }
}

fn venv_command(venv: &Path) -> Command {
    let mut command = Command::new("python3");
    command.arg("-m").arg("venv").arg(venv);
    command
}

/// Installs `package` from PyPI into the CI's venv (made when missing),
/// saying it installs `what`; whether it did. A dry run says it would.
fn venv_install(what: &str, package: &str, dry_run: bool) -> bool {
    let venv = zig_venv();
    let python = venv.join("bin/python");
    let says = format!("installing {what}: {} -m pip install {package}", python.display());
    if dry_run {
        println!("ci: macos: would be {says}");
        return true;
    }
    let made = python.is_file() || {
        let says = format!("making a venv for the CI's tools: python3 -m venv {}", venv.display());
        // Debian's python3 has venv in a package of its own.
        run(&says, &mut venv_command(&venv))
            || (install::apt_packages("ci: macos", &["python3-venv"], false).is_ok()
                && run("retrying: python3 -m venv", &mut venv_command(&venv)))
    };
    made && run(&says, Command::new(&python).args(["-m", "pip", "install", "--quiet", package]))
}

/// What to run to install `package` into the CI's venv by hand.
fn by_hand(package: &str) -> String {
    let venv = zig_venv();
    format!(
        "python3 -m venv {venv} && {python} -m pip install {package}",
        venv = venv.display(),
        python = venv.join("bin/python").display()
    )
}

/// Zig, installed into the CI's venv when missing and allowed.
fn ensure_zig(may_install: bool, dry_run: bool) -> Result<Option<Zig>, String> {
    if let Some(zig) = find_zig() {
        return Ok(Some(zig));
    }
    let missing = || {
        format!(
            "no zig (the C compiler for the apple target); get it with:\n  {}\n  \
             (or put a zig on PATH)",
            by_hand(ZIGLANG)
        )
    };
    if !may_install || !venv_install("zig", ZIGLANG, dry_run) {
        return Err(missing());
    }
    match find_zig() {
        Some(zig) => Ok(Some(zig)),
        None if dry_run => Ok(None),
        None => Err(missing()),
    }
}

/// cargo-zigbuild, installed into the CI's venv (PyPI has it prebuilt,
/// where `cargo install` took a minute to build it) when missing and
/// allowed.
fn ensure_zigbuild(may_install: bool, dry_run: bool) -> Result<Option<PathBuf>, String> {
    if let Some(path) = find_zigbuild() {
        return Ok(Some(path));
    }
    let missing = || {
        format!(
            "no cargo-zigbuild; get it with:\n  {}\n  \
             (or `cargo install --locked cargo-zigbuild --version {ZIGBUILD_VERSION}`)",
            by_hand(&zigbuild_package())
        )
    };
    if !may_install || !venv_install("cargo-zigbuild", &zigbuild_package(), dry_run) {
        return Err(missing());
    }
    match find_zigbuild() {
        Some(path) => Ok(Some(path)),
        None if dry_run => Ok(None),
        None => Err(missing()),
    }
}

fn zigbuild_package() -> String {
    format!("cargo-zigbuild=={ZIGBUILD_VERSION}")
}

/// Finds (or with `may_install`, installs) what the check needs; fails
/// naming everything that is missing and how to get it.
fn tools(may_install: bool, dry_run: bool) -> Result<Tools> {
    // rustup's prebuilt std for the target, when rustup can have it;
    // else a toolchain that builds std from its source.
    let prebuilt = rustup_toolchain(false).filter(|_| ensure_prebuilt_std(may_install, dry_run));
    let prebuilt_std = prebuilt.is_some();
    let toolchain = match prebuilt {
        Some(toolchain) => Ok(Some(toolchain)),
        None => ensure_toolchain(may_install, dry_run),
    };
    let zig = ensure_zig(may_install, dry_run);
    let zigbuild = ensure_zigbuild(may_install, dry_run);
    let problems: Vec<&String> =
        [toolchain.as_ref().err(), zig.as_ref().err(), zigbuild.as_ref().err()]
            .into_iter()
            .flatten()
            .collect();
    if !problems.is_empty() {
        let text: Vec<&str> = problems.iter().map(|p| p.as_str()).collect();
        bail!("the macOS check cannot run here:\n{}", text.join("\n"));
    }
    let (Ok(toolchain), Ok(zig), Ok(zigbuild)) = (toolchain, zig, zigbuild) else {
        unreachable!("every error was reported above");
    };
    // A dry run that would install: what the tools will be.
    Ok(Tools {
        prebuilt_std,
        toolchain: toolchain.unwrap_or_else(|| Toolchain {
            origin: "Debian (to be installed)",
            rustc: "/usr/bin/rustc".into(),
            cargo: "/usr/bin/cargo".into(),
            bin: "/usr/bin".into(),
        }),
        zig: zig.unwrap_or_else(|| Zig::Venv(zig_venv().join("bin/python"))),
        zigbuild: zigbuild.unwrap_or_else(|| util::cargo_home().join("bin/cargo-zigbuild")),
    })
}

/// The clippy command for `target`.
fn clippy(tools: &Tools, target: &str, target_dir: &Path) -> Command {
    let mut command = Command::new(&tools.zigbuild);
    command.arg("clippy");
    if !tools.prebuilt_std {
        command.arg("-Zbuild-std=std,panic_abort");
    }
    command.args(["--target", target, "--workspace", "--all-targets", "--target-dir"]);
    command.arg(target_dir).args(["--", "-D", "warnings"]);
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs = vec![tools.toolchain.bin.clone()];
    dirs.extend(std::env::split_paths(&path));
    command
        .current_dir(util::workspace_root())
        .env("RUSTC", &tools.toolchain.rustc)
        .env("CARGO", &tools.toolchain.cargo)
        .env("PATH", std::env::join_paths(dirs).expect("PATH entries never hold ':'"));
    if !tools.prebuilt_std {
        command.env("RUSTC_BOOTSTRAP", "1");
    }
    if let Zig::Venv(python) = &tools.zig {
        command.env("CARGO_ZIGBUILD_PYTHON_PATH", python);
    }
    command
}

/// Installs what the check needs and is missing (`cargo xtask ci
/// --install-only`).
pub fn install(dry_run: bool) -> Result<()> {
    tools(true, dry_run).map(drop)
}

/// The step's command, clippy for [`TARGET`], with its tools found (or,
/// with `may_install`, installed); `None` on a dry run, which prints it.
pub fn command(may_install: bool, dry_run: bool) -> Result<Option<Command>> {
    let tools = tools(may_install, dry_run)?;
    let target_dir = util::target_dir().join("apple");
    println!(
        "ci: macos: toolchain {} ({}), zig {}, {}, std {}",
        tools.toolchain.origin,
        tools.toolchain.rustc.display(),
        match &tools.zig {
            Zig::OnPath => "on PATH".to_owned(),
            Zig::Venv(python) => format!("via {}", python.display()),
        },
        tools.zigbuild.display(),
        if tools.prebuilt_std { "prebuilt" } else { "built from source" }
    );
    let mut command = clippy(&tools, TARGET, &target_dir);
    let envs: Vec<String> = command
        .get_envs()
        .filter(|(key, _)| *key != "PATH")
        .filter_map(|(key, value)| {
            Some(format!("{}={}", key.to_string_lossy(), value?.to_string_lossy()))
        })
        .collect();
    let args: Vec<_> = command.get_args().map(|a| a.to_string_lossy()).collect();
    let shown = format!(
        "{} PATH={}:$PATH {} {}",
        envs.join(" "),
        tools.toolchain.bin.display(),
        tools.zigbuild.display(),
        args.join(" ")
    );
    if dry_run {
        println!("ci: would run {shown}");
        return Ok(None);
    }
    println!("ci: macos {TARGET}: {shown}");
    command.stdin(Stdio::null());
    Ok(Some(command))
}

/// `cargo xtask check-macos`: the step alone, in the foreground.
pub fn check(may_install: bool, dry_run: bool) -> Result<()> {
    let Some(mut command) = command(may_install, dry_run)? else {
        return Ok(());
    };
    let start = Instant::now();
    let status = command.status().context("running cargo-zigbuild")?;
    if !status.success() {
        bail!("ci step `macos` failed for {TARGET}");
    }
    println!("ci: macos {TARGET} ok in {:.0}s", start.elapsed().as_secs_f64());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_toolchain_needs_the_library_source_and_clippy() {
        let root = tempfile::tempdir().expect("temp dir");
        let sysroot = root.path();
        std::fs::create_dir_all(sysroot.join("bin")).expect("bin");
        for program in ["rustc", "cargo", "cargo-clippy"] {
            std::fs::write(sysroot.join("bin").join(program), "").expect("program");
        }
        assert_eq!(toolchain_in("test", sysroot, true), None, "no clippy-driver");
        std::fs::write(sysroot.join("bin/clippy-driver"), "").expect("driver");
        assert_eq!(toolchain_in("test", sysroot, true), None, "no rust-src");
        let std_src = sysroot.join("lib/rustlib/src/rust/library/std/src");
        std::fs::create_dir_all(&std_src).expect("src");
        std::fs::write(std_src.join("lib.rs"), "").expect("lib.rs");
        let found = toolchain_in("test", sysroot, true).expect("complete");
        assert_eq!(found.rustc, sysroot.join("bin/rustc"));
        assert_eq!(found.cargo, sysroot.join("bin/cargo"));
        assert_eq!(found.bin, sysroot.join("bin"));
        // With std prebuilt, the source is not needed.
        std::fs::remove_file(std_src.join("lib.rs")).expect("rm");
        assert!(toolchain_in("test", sysroot, false).is_some());
    }

    #[test]
    fn versions_are_compared_by_major_and_minor() {
        let debian = "rustc 1.96.0 (ac68faa20 2026-05-25) (built from a source tarball)";
        assert!(version_at_least(debian, (1, 90)));
        assert!(version_at_least("rustc 1.90.0", (1, 90)));
        assert!(!version_at_least("rustc 1.85.0 (4d91de4e4 2025-02-17)", (1, 90)));
        assert!(version_at_least("rustc 2.0.0-nightly", (1, 90)));
        assert!(!version_at_least("rustc", (1, 90)));
        assert!(!version_at_least("cargo x.y", (1, 90)));
    }

    #[test]
    fn the_clippy_command_puts_the_toolchain_first_and_denies_warnings() {
        let tools = Tools {
            toolchain: Toolchain {
                origin: "test",
                rustc: "/opt/rust/bin/rustc".into(),
                cargo: "/opt/rust/bin/cargo".into(),
                bin: "/opt/rust/bin".into(),
            },
            zig: Zig::Venv("/cache/zig-venv/bin/python".into()),
            zigbuild: "/home/u/.cargo/bin/cargo-zigbuild".into(),
            prebuilt_std: false,
        };
        let command = clippy(&tools, TARGET, Path::new("/t/apple"));
        let args: Vec<_> = command.get_args().map(|a| a.to_string_lossy()).collect();
        assert_eq!(
            args.join(" "),
            "clippy -Zbuild-std=std,panic_abort --target aarch64-apple-darwin --workspace \
             --all-targets --target-dir /t/apple -- -D warnings"
        );
        let env = |name: &str| {
            command
                .get_envs()
                .find(|(key, _)| *key == name)
                .and_then(|(_, value)| value)
                .map(|value| value.to_string_lossy().into_owned())
        };
        assert_eq!(env("RUSTC_BOOTSTRAP").as_deref(), Some("1"));
        assert_eq!(env("RUSTC").as_deref(), Some("/opt/rust/bin/rustc"));
        assert!(env("PATH").is_some_and(|path| path.starts_with("/opt/rust/bin:")));
        assert_eq!(
            env("CARGO_ZIGBUILD_PYTHON_PATH").as_deref(),
            Some("/cache/zig-venv/bin/python")
        );

        // With the target's std prebuilt, nothing builds it.
        let prebuilt = Tools { prebuilt_std: true, ..tools };
        let command = clippy(&prebuilt, TARGET, Path::new("/t/apple"));
        let args: Vec<_> = command.get_args().map(|a| a.to_string_lossy()).collect();
        assert!(args[1] == "--target", "{args:?}");
        assert!(!command.get_envs().any(|(key, _)| key == "RUSTC_BOOTSTRAP"));
    }
}

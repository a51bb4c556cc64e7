//! `cargo xtask ci` on a machine without zsh, fish and tmux: with
//! `--no-install` it stops before building and names each missing program
//! with how to install it; without, it says how it installs them.

use std::path::Path;
use std::process::Command;

/// Every program the check knows, except the three this test takes away.
const PRESENT: &[&str] = &[
    "cargo",
    "rustfmt",
    "cargo-clippy",
    "git",
    "python3",
    "uv",
    "node",
    "npm",
    "pnpm",
    "chromium",
    "chromedriver",
    "pg_ctlcluster",
    "mariadb-install-db",
    "mariadb-backup",
    "redis-server",
    "sshd",
];

/// Programs the check uses where this machine has them: rustup and its
/// rustc, whose prebuilt standard library the macOS step takes (without
/// them, that step looks for Debian's toolchain and apt-get, which a PATH
/// of symlinks lacks).
const WHERE_PRESENT: &[&str] = &["rustup", "rustc"];

/// The real executable of `program` on this machine's PATH.
fn find(program: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|candidate| candidate.is_file())
}

/// A PATH of symlinks to `programs` only (and those of [`WHERE_PRESENT`]
/// this machine has).
fn path_of(programs: &[&str]) -> tempfile::TempDir {
    let bin = tempfile::tempdir().expect("temp dir");
    let link = |real: std::path::PathBuf, program: &str| {
        std::os::unix::fs::symlink(real, bin.path().join(program)).expect("symlink");
    };
    for program in programs {
        let real = find(program).unwrap_or_else(|| {
            panic!(
                "`{program}` is not on PATH; `cargo xtask ci` checks for it before this test runs"
            )
        });
        link(real, program);
    }
    for program in WHERE_PRESENT {
        if let Some(real) = find(program) {
            link(real, program);
        }
    }
    bin
}

#[test]
fn ci_no_install_without_zsh_fish_and_tmux_stops_and_names_them_without_a_backtrace() {
    let bin = path_of(PRESENT);
    let output = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["ci", "--no-install"])
        .env("PATH", bin.path())
        // Common among Rust developers; the error must still be only its text.
        .env("RUST_BACKTRACE", "1")
        // Where it not to stop, this keeps the test from running the whole CI.
        .arg("--dry-run")
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")))
        .output()
        .expect("run xtask");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.is_empty(), "nothing may run before the check: {stdout}");
    assert!(stderr.starts_with("error: 3 prerequisites are missing"), "{stderr}");
    assert!(!stderr.to_lowercase().contains("backtrace"), "{stderr}");
    let named: Vec<&str> = stderr
        .lines()
        .filter_map(|line| line.strip_prefix("  "))
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    assert_eq!(named, ["zsh", "fish", "tmux"], "{stderr}");
    for install in ["apt-get install zsh", "apt-get install fish", "apt-get install tmux"] {
        assert!(stderr.contains(install), "{stderr}");
    }
}

#[test]
fn ci_without_zsh_fish_and_tmux_says_how_it_installs_them() {
    let mut programs = PRESENT.to_vec();
    let apt = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .any(|dir| dir.join("apt-get").is_file());
    if apt {
        programs.push("apt-get");
    }
    let bin = path_of(&programs);
    let output = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["ci", "--dry-run"])
        .env("PATH", bin.path())
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")))
        .output()
        .expect("run xtask");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stdout.starts_with("ci: missing on PATH: zsh, fish, tmux\n"), "{stdout}\n{stderr}");
    let root = Command::new("id").arg("-u").output().is_ok_and(|out| out.stdout == b"0\n");
    let expected = match (apt, root) {
        (true, true) => {
            "ci: installing zsh, fish, tmux: env DEBIAN_FRONTEND=noninteractive \
             apt-get install -y -qq --no-install-recommends zsh fish tmux"
        }
        (true, false) => "ci: would stop: run by hand: sudo apt-get install -y zsh fish tmux",
        (false, _) => "ci: would stop: run by hand: install zsh fish tmux with this system's",
    };
    assert!(stdout.contains(expected), "{stdout}\n{stderr}");
    assert!(stdout.contains("ci: would run cargo fmt"), "{stdout}");
}

#[test]
fn skip_e2e_does_not_ask_for_tmux() {
    let bin = path_of(&[PRESENT, &["zsh", "fish"]].concat());
    let output = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["ci", "--skip-e2e", "--dry-run"])
        .env("PATH", bin.path())
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .output()
        .expect("run xtask");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    assert!(stdout.contains("would run cargo fmt"), "{stdout}");
}

//! `cargo xtask ci` on a machine without zsh, fish and tmux stops before
//! building and names each missing program with how to install it.

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
    "script",
    "node",
    "npm",
    "pnpm",
];

/// The real executable of `program` on this machine's PATH.
fn real(program: &str) -> std::path::PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!(
                "`{program}` is not on PATH; `cargo xtask ci` checks for it before this test runs"
            )
        })
}

#[test]
fn ci_without_zsh_fish_and_tmux_stops_and_names_them() {
    let bin = tempfile::tempdir().expect("temp dir");
    for program in PRESENT {
        std::os::unix::fs::symlink(real(program), bin.path().join(program)).expect("symlink");
    }
    let output = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .arg("ci")
        .env("PATH", bin.path())
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        // Where it not to stop, this keeps the test from running the whole CI.
        .arg("--dry-run")
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")))
        .output()
        .expect("run xtask");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.is_empty(),
        "nothing may run before the check: {stdout}"
    );
    assert!(stderr.contains("3 prerequisites are missing"), "{stderr}");
    let named: Vec<&str> = stderr
        .lines()
        .filter_map(|line| line.strip_prefix("  "))
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    assert_eq!(named, ["zsh", "fish", "tmux"], "{stderr}");
    for install in [
        "apt-get install zsh",
        "apt-get install fish",
        "apt-get install tmux",
    ] {
        assert!(stderr.contains(install), "{stderr}");
    }
}

#[test]
fn skip_e2e_does_not_ask_for_tmux() {
    let bin = tempfile::tempdir().expect("temp dir");
    for program in PRESENT.iter().chain(&["zsh", "fish"]) {
        std::os::unix::fs::symlink(real(program), bin.path().join(program)).expect("symlink");
    }
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

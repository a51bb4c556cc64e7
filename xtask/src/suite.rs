//! The workspace's tests for `cargo xtask ci`: built as `cargo test
//! --workspace` builds them, then their binaries run [`JOBS`] at a time
//! instead of one after another (most of a test's time is spent waiting on
//! the processes it starts, so two binaries share the cores well; each
//! test already holds beside busy loops, which `cargo xtask stress`
//! checks), each as `cargo test` runs it (from its package's directory,
//! with `CARGO` and `CARGO_MANIFEST_DIR` set), then the doc tests.

use std::collections::VecDeque;
use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context, Result, bail};

/// Test binaries run at once.
pub const JOBS: usize = 2;

/// One test binary cargo built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binary {
    /// What `cargo test` calls it: `omnidev-cli tests/mcp.rs`,
    /// `omnidev-core unittests src/lib.rs`.
    pub label: String,
    /// Its package's directory (the tests' working directory).
    pub package_dir: PathBuf,
    pub executable: PathBuf,
}

/// Builds every test of the workspace (`cargo test --workspace --no-run`,
/// its progress on stderr) and returns the binaries to run, in cargo's
/// order.
pub fn build() -> Result<Vec<Binary>> {
    let mut child = Command::new(cargo())
        .args(["test", "--workspace", "--no-run", "--message-format=json-render-diagnostics"])
        .current_dir(crate::util::workspace_root())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .context("running cargo test --no-run")?;
    let stdout = child.stdout.take().context("cargo's stdout")?;
    let mut binaries = Vec::new();
    for line in std::io::BufReader::new(stdout).lines() {
        if let Some(binary) = test_binary(&line.context("reading cargo's messages")?) {
            binaries.push(binary);
        }
    }
    let status = child.wait()?;
    if !status.success() {
        bail!("cargo test --no-run failed ({status})");
    }
    if binaries.is_empty() {
        bail!("cargo test --no-run built no test binary");
    }
    Ok(binaries)
}

/// The test binary a line of cargo's JSON messages announces, if it is
/// one: an artifact built for testing that has an executable.
fn test_binary(line: &str) -> Option<Binary> {
    let message: serde_json::Value = serde_json::from_str(line).ok()?;
    if message["reason"] != "compiler-artifact" || message["profile"]["test"] != true {
        return None;
    }
    let executable = PathBuf::from(message["executable"].as_str()?);
    let manifest = Path::new(message["manifest_path"].as_str()?);
    let package_dir = manifest.parent()?.to_path_buf();
    let target = &message["target"];
    let source = Path::new(target["src_path"].as_str()?);
    let source = source.strip_prefix(&package_dir).unwrap_or(source);
    let kind = if target["kind"][0] == "test" { "" } else { "unittests " };
    let package = manifest_package(&message, &package_dir);
    Some(Binary { label: format!("{package} {kind}{}", source.display()), package_dir, executable })
}

/// The package's name: the end of its id (`path+file:///…/omnidev-cli#0.1.0`
/// or `…#name@0.1.0`), else its directory's name.
fn manifest_package(message: &serde_json::Value, package_dir: &Path) -> String {
    let from_dir =
        || package_dir.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let Some(id) = message["package_id"].as_str() else {
        return from_dir();
    };
    match id.rsplit_once('#') {
        Some((_, tail)) if tail.contains('@') => tail.split('@').next().unwrap_or("").to_owned(),
        _ => from_dir(),
    }
}

/// The cargo that runs this (as `cargo test` sets `CARGO` for its tests).
fn cargo() -> std::ffi::OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

/// How one binary's run went.
struct Ran {
    binary: Binary,
    output: Vec<u8>,
    passed: bool,
    seconds: f64,
}

/// Runs `binaries`, `jobs` at a time, printing each one's output whole as
/// it ends; then the doc tests. Fails naming every binary that failed.
pub fn run(binaries: &[Binary], jobs: usize) -> Result<()> {
    let queue = Arc::new(Mutex::new(binaries.iter().cloned().collect::<VecDeque<_>>()));
    let (tx, rx) = std::sync::mpsc::channel::<Result<Ran>>();
    let workers: Vec<_> = (0..jobs.max(1))
        .map(|_| {
            let queue = Arc::clone(&queue);
            let tx = tx.clone();
            std::thread::spawn(move || {
                loop {
                    let next =
                        queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pop_front();
                    let Some(binary) = next else { return };
                    if tx.send(run_one(binary)).is_err() {
                        return;
                    }
                }
            })
        })
        .collect();
    drop(tx);
    let mut failed = Vec::new();
    for ran in rx {
        let ran = ran?;
        println!(
            "     Running {} ({}, {:.1}s)",
            ran.binary.label,
            ran.binary.executable.display(),
            ran.seconds
        );
        print!("{}", String::from_utf8_lossy(&ran.output));
        if !ran.passed {
            failed.push(ran.binary.label);
        }
    }
    for worker in workers {
        let _ = worker.join();
    }
    let doc = Command::new(cargo())
        .args(["test", "--workspace", "--doc"])
        .current_dir(crate::util::workspace_root())
        .stdin(Stdio::null())
        .status()
        .context("running cargo test --doc")?;
    if !doc.success() {
        failed.push("the doc tests".to_owned());
    }
    if !failed.is_empty() {
        bail!("failed: {}", failed.join(", "));
    }
    Ok(())
}

/// Runs one binary as `cargo test` would, its stdout and stderr together.
fn run_one(binary: Binary) -> Result<Ran> {
    let start = Instant::now();
    let output = Command::new(&binary.executable)
        .current_dir(&binary.package_dir)
        .env("CARGO", cargo())
        .env("CARGO_MANIFEST_DIR", &binary.package_dir)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {}", binary.executable.display()))?;
    let mut text = output.stdout;
    text.extend_from_slice(&output.stderr);
    Ok(Ran {
        passed: output.status.success(),
        output: text,
        seconds: start.elapsed().as_secs_f64(),
        binary,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_artifacts_are_binaries_and_nothing_else_is() {
        let artifact = |kind: &str, test: bool, executable: Option<&str>| {
            serde_json::json!({
                "reason": "compiler-artifact",
                "package_id": "path+file:///w/omnidev-cli#0.1.0",
                "manifest_path": "/w/omnidev-cli/Cargo.toml",
                "target": {"kind": [kind], "name": "x", "src_path": format!("/w/omnidev-cli/{}", if kind == "test" { "tests/mcp.rs" } else { "src/main.rs" })},
                "profile": {"test": test},
                "executable": executable,
            })
            .to_string()
        };
        assert_eq!(
            test_binary(&artifact("test", true, Some("/w/target/debug/deps/mcp-1"))),
            Some(Binary {
                label: "omnidev-cli tests/mcp.rs".into(),
                package_dir: "/w/omnidev-cli".into(),
                executable: "/w/target/debug/deps/mcp-1".into(),
            })
        );
        let unit = test_binary(&artifact("bin", true, Some("/w/t/omnidev-2"))).expect("a binary");
        assert_eq!(unit.label, "omnidev-cli unittests src/main.rs");
        // The program itself, a library's rlib, other messages: none.
        assert_eq!(test_binary(&artifact("bin", false, Some("/w/t/omnidev"))), None);
        assert_eq!(test_binary(&artifact("lib", true, None)), None);
        assert_eq!(test_binary(r#"{"reason":"build-finished","success":true}"#), None);
        assert_eq!(test_binary("not json"), None);
    }

    #[test]
    fn a_package_is_named_by_its_id_or_its_directory() {
        let dir = Path::new("/w/omnidev-core");
        let named = |id: &str| manifest_package(&serde_json::json!({ "package_id": id }), dir);
        assert_eq!(named("path+file:///w/core#omnidev-core@0.1.0"), "omnidev-core");
        assert_eq!(named("path+file:///w/omnidev-core#0.1.0"), "omnidev-core");
        assert_eq!(manifest_package(&serde_json::json!({}), dir), "omnidev-core");
    }
}

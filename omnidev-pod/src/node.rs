//! The Node.js version floor of a web service: what its toolchain needs,
//! checked against the `node` on PATH before anything is installed.
//!
//! The requirements come from `engines.node` of the `package.json` files
//! between the service's directory and its install root, from the pinned
//! package manager's own need (pnpm 11 needs Node 22.13, see
//! [`crate::PackageManager::node_requirement`]) and from a profile's
//! `node-version`. A Node that misses one is reported in one line naming it
//! and the way out (`--no-vite`); the service is then not started, and the
//! rest of the pod runs.

use std::ffi::OsStr;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use omnidev_core::fs::which;

use crate::package_manager::Detection;

/// How long `node --version` may take.
const VERSION_TIMEOUT: Duration = Duration::from_secs(10);

/// A Node.js range a service needs, and who asks for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// The range, in npm syntax (`>=22.13`, `^20.19.0 || >=22.12.0`).
    pub range: String,
    /// Who asks for it, for messages (`engines.node of web/package.json`).
    pub source: String,
}

/// The requirements of a service whose package manager was detected as
/// `detection`, plus the profile's `node-version` when set.
///
/// ```
/// use omnidev_pod::package_manager::detect;
/// let repo = tempfile::tempdir().unwrap();
/// std::fs::write(repo.path().join("package.json"), r#"{"packageManager": "pnpm@11.15.1"}"#).unwrap();
/// let found = detect(repo.path(), repo.path(), None).unwrap();
/// let needs = omnidev_pod::node::requirements(&found, None);
/// assert_eq!(needs[0].range, ">=22.13");
/// assert_eq!(needs[0].source, "pnpm@11.15.1");
/// ```
pub fn requirements(detection: &Detection, profile: Option<&str>) -> Vec<Requirement> {
    let mut out = Vec::new();
    if let Some(range) = profile {
        out.push(Requirement {
            range: range.to_owned(),
            source: "the profile's node-version".to_owned(),
        });
    }
    if let Some(version) = &detection.version
        && let Some(range) = detection.manager.node_requirement(version)
    {
        out.push(Requirement { range: range.to_owned(), source: detection.label() });
    }
    for (range, file) in &detection.engines {
        out.push(Requirement {
            range: range.clone(),
            source: format!("engines.node of {}", file.display()),
        });
    }
    out
}

/// Checks the `node` found on `path` against `requirements`: `Err` holds
/// the one line to show (the Node found, what needs more, `--no-vite`).
/// No requirement means no check (and no process started).
pub fn check(path: &OsStr, requirements: &[Requirement]) -> Result<(), String> {
    if requirements.is_empty() {
        return Ok(());
    }
    let way_out = "or run without the web UI: --no-vite";
    let Some(node) = which("node", path) else {
        return Err(format!(
            "Node.js is needed ({} asks for {}) but `node` is not on PATH; install it, {way_out}",
            requirements[0].source, requirements[0].range
        ));
    };
    let text = match node_version(&node) {
        Ok(text) => text,
        Err(problem) => {
            return Err(format!(
                "could not read the version of {}: {problem}; {way_out}",
                node.display()
            ));
        }
    };
    let Ok(version) = js_semver::Version::parse(text.trim_start_matches('v')) else {
        return Err(format!(
            "{} --version printed `{text}`, not a version; {way_out}",
            node.display()
        ));
    };
    for requirement in requirements {
        // Ranges were checked when they were read; an unparsable
        // `engines.node` (a typo in a manifest) is not omnidev's to judge.
        let Ok(range) = requirement.range.parse::<js_semver::Range>() else {
            continue;
        };
        if !range.satisfies(&version) {
            return Err(format!(
                "Node {text} ({}) is too old: {} needs {}; put a newer Node first on PATH, {way_out}",
                node.display(),
                requirement.source,
                requirement.range
            ));
        }
    }
    Ok(())
}

/// The first line `node --version` prints (at most 64 bytes are read; it
/// is killed after [`VERSION_TIMEOUT`]).
fn node_version(node: &Path) -> Result<String, String> {
    let mut child = Command::new(node)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let deadline = Instant::now() + VERSION_TIMEOUT;
    let status = loop {
        match child.try_wait().map_err(|e| e.to_string())? {
            Some(status) => break status,
            None if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("it did not answer within {} s", VERSION_TIMEOUT.as_secs()));
            }
            None => std::thread::sleep(Duration::from_millis(10)),
        }
    };
    let mut out = Vec::new();
    if let Some(stdout) = child.stdout.take() {
        let _ = stdout.take(64).read_to_end(&mut out);
    }
    if !status.success() {
        return Err(format!("it ended with {status}"));
    }
    let text = String::from_utf8_lossy(&out);
    let line = text.lines().next().unwrap_or_default().trim();
    if line.is_empty() || !line.chars().all(|c| c.is_ascii_graphic() || c == ' ') {
        return Err("it printed no version".to_owned());
    }
    Ok(line.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A fake `node` in `dir` running `script`.
    fn fake_node(dir: &Path, script: &str) -> PathBuf {
        omnidev_test_support::write_script(&dir.join("node"), &format!("{script}\n"))
    }

    fn needs(range: &str) -> Vec<Requirement> {
        vec![Requirement { range: range.to_owned(), source: "pnpm@11.15.1".to_owned() }]
    }

    #[test]
    fn a_node_below_the_floor_is_named_with_the_way_out() {
        let bin = tempfile::tempdir().expect("tempdir");
        let node = fake_node(bin.path(), "echo v20.0.0");
        let err = check(bin.path().as_os_str(), &needs(">=22.13")).expect_err("too old");
        assert!(err.contains("v20.0.0"), "{err}");
        assert!(err.contains(&node.display().to_string()), "{err}");
        assert!(err.contains("pnpm@11.15.1") && err.contains(">=22.13"), "{err}");
        assert!(err.contains("--no-vite"), "{err}");
        assert!(!err.contains('\n'), "one line: {err}");
        check(bin.path().as_os_str(), &needs("^20.0.0 || >=22.12.0")).expect("20.0.0 fits");
        check(bin.path().as_os_str(), &[]).expect("no requirement, no check");
    }

    #[test]
    fn missing_silent_or_odd_nodes_are_clear_errors() {
        let bin = tempfile::tempdir().expect("tempdir");
        let err = check(bin.path().as_os_str(), &needs(">=22")).expect_err("no node");
        assert!(err.contains("not on PATH") && err.contains("--no-vite"), "{err}");
        fake_node(bin.path(), "echo 'not a version'");
        let err = check(bin.path().as_os_str(), &needs(">=22")).expect_err("odd");
        assert!(err.contains("not a version"), "{err}");
        fake_node(bin.path(), "exit 3");
        let err = check(bin.path().as_os_str(), &needs(">=22")).expect_err("fails");
        assert!(err.contains("exit status: 3"), "{err}");
        fake_node(bin.path(), "printf 'v24.1.0\\033]0;title\\007\\n'");
        let err = check(bin.path().as_os_str(), &needs(">=22")).expect_err("control bytes");
        assert!(!err.contains('\u{1b}'), "{err:?}");
    }
}

//! Talking to uv: preflight checks, `uv tool install`, `uv tool dir`, and the
//! installed commit from PEP 610 `direct_url.json`.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::Deserialize;

use crate::{Error, InstallChoice, Result, TOOL_NAME};

/// Set (to anything but `0` or empty) to skip the Node/npm preflight, for
/// packages that build no web UI.
pub const SKIP_WEB_CHECK_ENV: &str = "OMNIDEV_SKIP_WEB_CHECK";

/// The oldest Node major version the web UI build supports.
pub const MIN_NODE_MAJOR: u32 = 22;

/// Whether `$OMNIDEV_SKIP_WEB_CHECK` asks to skip the web-toolchain check.
pub fn skip_web_check_from_env() -> bool {
    std::env::var_os(SKIP_WEB_CHECK_ENV).is_some_and(|value| !value.is_empty() && value != "0")
}

/// Checks that `uv` is on PATH and, unless `skip_web`, that Node ≥ 22 and
/// npm or pnpm are, so an install fails early with a clear message instead
/// of half-way through a build.
pub fn preflight(skip_web: bool) -> Result<()> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let find_on_path = |program| omnidev_core::fs::which(program, &path);
    find_on_path("uv").ok_or(Error::MissingProgram {
        program: "uv",
        help: "install uv (https://docs.astral.sh/uv/getting-started/installation/) and make sure it is on PATH",
    })?;
    if skip_web {
        return Ok(());
    }
    let node = find_on_path("node").ok_or(Error::MissingProgram {
        program: "node",
        help: "install Node 22+ (the Omnigent web UI is built at install time); to install a package without a web UI set OMNIDEV_SKIP_WEB_CHECK=1 or pass --skip-web-check",
    })?;
    let output = Command::new(&node)
        .arg("--version")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .map_err(Error::spawn(node.display()))?;
    let version = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    if node_major(&version).is_none_or(|major| major < MIN_NODE_MAJOR) {
        return Err(Error::NodeTooOld { found: version });
    }
    if find_on_path("npm").is_none() && find_on_path("pnpm").is_none() {
        return Err(Error::MissingProgram {
            program: "npm",
            help: "install npm or pnpm (they come with Node 22+); to install a package without a web UI set OMNIDEV_SKIP_WEB_CHECK=1 or pass --skip-web-check",
        });
    }
    Ok(())
}

/// `v22.3.1` → 22.
fn node_major(version: &str) -> Option<u32> {
    version.trim().trim_start_matches('v').split('.').next()?.parse().ok()
}

/// The `uv tool install` command line for `choice`: `--force` always (the
/// tool may exist), `--reinstall` for an update so a moving ref re-resolves.
pub fn install_command(choice: &InstallChoice, reinstall: bool) -> Command {
    let mut command = Command::new("uv");
    command.args(["tool", "install", "--force"]);
    if reinstall {
        command.arg("--reinstall");
    }
    command.args(["--python", &choice.python, "--"]).arg(choice.spec());
    command
}

/// Runs `uv tool install` with the terminal's stdout and stderr, so the
/// user sees uv's progress, tied to this process
/// ([`omnidev_core::guard::run_tied`]): if omnidev dies, uv and what it
/// started die too.
pub fn run_install(choice: &InstallChoice, reinstall: bool) -> Result<()> {
    let mut command = install_command(choice, reinstall);
    let line = describe(&command);
    command.stdin(Stdio::null());
    let status = omnidev_core::guard::run_tied(&mut command).map_err(Error::spawn("uv"))?;
    if status.success() {
        Ok(())
    } else {
        Err(Error::CommandFailed {
            command: line,
            status,
            hint: "check the repository URL, the ref and the Python version",
        })
    }
}

fn describe(command: &Command) -> String {
    std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(OsStr::to_string_lossy)
        .collect::<Vec<_>>()
        .join(" ")
}

/// `uv tool dir`: where uv keeps tool environments (honours `UV_TOOL_DIR`).
pub fn tool_dir() -> Result<PathBuf> {
    let output = Command::new("uv")
        .args(["tool", "dir"])
        .stdin(Stdio::null())
        .output()
        .map_err(Error::spawn("uv"))?;
    if !output.status.success() {
        return Err(Error::CommandFailed {
            command: "uv tool dir".to_owned(),
            status: output.status,
            hint: "check that uv works: run `uv tool dir` yourself",
        });
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&output.stdout).trim().to_owned()))
}

#[derive(Deserialize)]
struct DirectUrl {
    vcs_info: Option<VcsInfo>,
}

#[derive(Deserialize)]
struct VcsInfo {
    commit_id: Option<String>,
}

/// The commit the tool was installed from: `vcs_info.commit_id` of the
/// PEP 610 `direct_url.json` in
/// `<tool dir>/omnigent/lib/python*/site-packages/omnigent-*.dist-info/`.
pub fn installed_commit(tool_dir: &Path) -> Result<String> {
    let missing =
        || Error::NoInstallMetadata { tool: TOOL_NAME.to_owned(), tool_dir: tool_dir.to_owned() };
    let lib = tool_dir.join(TOOL_NAME).join("lib");
    let prefix = format!("{TOOL_NAME}-");
    for python in read_dir_sorted(&lib) {
        for dist_info in read_dir_sorted(&python.join("site-packages")) {
            let name = dist_info.file_name().map(|n| n.to_string_lossy().to_ascii_lowercase());
            let is_ours = name.is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".dist-info"));
            if !is_ours {
                continue;
            }
            let path = dist_info.join("direct_url.json");
            let Some(text) = crate::fs::read_optional(&path)? else {
                continue;
            };
            let parsed: DirectUrl = serde_json::from_str(&text).map_err(|_| missing())?;
            if let Some(commit) = parsed.vcs_info.and_then(|vcs| vcs.commit_id) {
                return Ok(commit);
            }
        }
    }
    Err(missing())
}

fn read_dir_sorted(dir: &Path) -> Vec<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    entries.sort();
    entries
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_versions() {
        assert_eq!(node_major("v20.0.0"), Some(20));
        assert_eq!(node_major("v22.11.0\n"), Some(22));
        assert_eq!(node_major("garbage"), None);
    }

    #[test]
    fn install_command_line() {
        let choice = InstallChoice { extras: vec![], ..InstallChoice::default() };
        assert_eq!(
            describe(&install_command(&choice, true)),
            "uv tool install --force --reinstall --python 3.12 -- git+https://github.com/omnigent-ai/omnigent.git@main"
        );
    }

    #[test]
    fn reads_commit_from_direct_url() {
        let dir = tempfile::tempdir().expect("temp dir");
        let dist =
            dir.path().join("omnigent/lib/python3.11/site-packages/omnigent-0.1.0.dist-info");
        std::fs::create_dir_all(&dist).expect("dirs");
        assert!(matches!(installed_commit(dir.path()), Err(Error::NoInstallMetadata { .. })));
        std::fs::write(
            dist.join("direct_url.json"),
            r#"{"url":"file:///r.git","vcs_info":{"vcs":"git","commit_id":"abc","requested_revision":"main"}}"#,
        )
        .expect("write");
        assert_eq!(installed_commit(dir.path()).expect("commit"), "abc");
    }
}

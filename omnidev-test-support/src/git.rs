//! `git` for tests: a fixed identity, no signing, `main` as the first
//! branch, and no user or system configuration read.

use std::path::Path;
use std::process::Command;

/// Runs `git ARGS` in `dir`, which must succeed; its stdout, trimmed.
///
/// ```
/// let dir = tempfile::tempdir().expect("tempdir");
/// omnidev_test_support::git(dir.path(), &["init", "-q"]);
/// assert_eq!(omnidev_test_support::git(dir.path(), &["branch", "--show-current"]), "main");
/// ```
pub fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.invalid",
            "-c",
            "init.defaultBranch=main",
            "-c",
            "commit.gpgsign=false",
            "-c",
            "tag.gpgsign=false",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("run git");
    assert!(
        output.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

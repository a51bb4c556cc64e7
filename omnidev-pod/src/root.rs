//! Finding the checkout root a pod belongs to.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Walks up from `start` to the first directory holding `.jj/` or `.git`
/// (a directory, or a file as in a git worktree) and returns it, canonicalised.
///
/// ```
/// let tmp = tempfile::tempdir().unwrap();
/// std::fs::create_dir_all(tmp.path().join(".git")).unwrap();
/// std::fs::create_dir_all(tmp.path().join("a/b")).unwrap();
/// let root = omnidev_pod::find_repo_root(&tmp.path().join("a/b")).unwrap();
/// assert_eq!(root, tmp.path().canonicalize().unwrap());
/// ```
pub fn find_repo_root(start: &Path) -> Result<PathBuf> {
    let start = start.canonicalize().map_err(Error::io("resolve the directory", start))?;
    let mut dir: &Path = &start;
    loop {
        let jj = dir.join(".jj");
        let git = dir.join(".git");
        if jj.is_dir() || git.is_dir() || git.is_file() {
            return Ok(dir.to_path_buf());
        }
        match dir.parent() {
            Some(parent) => dir = parent,
            None => return Err(Error::RepoNotFound { start }),
        }
    }
}

/// The git directory of the checkout at `root`: its `.git` directory, or
/// the one a `.git` file (a worktree's, a submodule's) names with
/// `gitdir:`, relative to the checkout unless absolute. `None` when there
/// is neither.
///
/// ```
/// let tmp = tempfile::tempdir().unwrap();
/// std::fs::write(tmp.path().join(".git"), "gitdir: ../main/.git/worktrees/a\n").unwrap();
/// let dir = omnidev_pod::root::git_dir(tmp.path()).unwrap();
/// assert_eq!(dir, tmp.path().join("../main/.git/worktrees/a"));
/// ```
pub fn git_dir(root: &Path) -> Option<PathBuf> {
    let dot_git = root.join(".git");
    if std::fs::symlink_metadata(&dot_git).ok()?.is_dir() {
        return Some(dot_git);
    }
    let text = short_text(&dot_git)?;
    Some(root.join(text.trim().strip_prefix("gitdir:")?.trim()))
}

/// A git file of one short line (`.git`, `HEAD`, `commondir`); a bigger
/// one is not git's.
pub fn short_text(path: &Path) -> Option<String> {
    omnidev_core::fs::read_linked(path, 4096).and_then(omnidev_core::fs::text).ok().flatten()
}

/// The checkout root to use: `explicit` (from `--repo DIR`) taken as given
/// (canonicalised, not walked up, so a checkout nested in another repository
/// can be run), otherwise [`find_repo_root`] from `cwd`.
///
/// ```
/// let outer = tempfile::tempdir().unwrap();
/// std::fs::create_dir_all(outer.path().join(".git")).unwrap();
/// let nested = outer.path().join("examples/app");
/// std::fs::create_dir_all(&nested).unwrap();
/// let root = omnidev_pod::resolve_repo_root(outer.path(), Some(&nested)).unwrap();
/// assert_eq!(root, nested.canonicalize().unwrap());
/// ```
pub fn resolve_repo_root(cwd: &Path, explicit: Option<&Path>) -> Result<PathBuf> {
    match explicit {
        Some(dir) => {
            let dir = if dir.is_absolute() { dir.to_path_buf() } else { cwd.join(dir) };
            let canonical = dir
                .canonicalize()
                .map_err(Error::io("open the checkout given with --repo", &dir))?;
            if !canonical.is_dir() {
                let use_it = Error::io("use the checkout given with --repo", canonical);
                return Err(use_it(std::io::ErrorKind::NotADirectory.into()));
            }
            Ok(canonical)
        }
        None => find_repo_root(cwd),
    }
}

/// Checks that every `marker` directory exists under `root`.
///
/// ```
/// let tmp = tempfile::tempdir().unwrap();
/// std::fs::create_dir(tmp.path().join("web")).unwrap();
/// let err = omnidev_pod::root::check_markers(tmp.path(), &["omnigent".into(), "web".into()]);
/// assert!(err.unwrap_err().to_string().contains("missing omnigent"));
/// ```
pub fn check_markers(root: &Path, markers: &[String]) -> Result<()> {
    let missing: Vec<String> = markers.iter().filter(|m| !root.join(m).is_dir()).cloned().collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Error::RepoShape { root: root.to_path_buf(), missing, expected: markers.to_vec() })
    }
}

/// The branch checked out in the checkout at `repo` (a worktree's too),
/// or the commit when it is detached; `None` when it cannot be read.
pub fn branch(repo: &Path) -> Option<String> {
    let git_dir = git_dir(repo)?;
    let head = short_text(&git_dir.join("HEAD"))?;
    let head = head.trim();
    Some(match head.strip_prefix("ref: refs/heads/") {
        Some(branch) => branch.to_owned(),
        None => head.chars().take(12).collect(),
    })
}

/// The pod's own host name under `localhost`, which browsers (and most
/// resolvers) send to the loopback address with no set-up:
/// `<branch>.<checkout directory>.localhost`, each label lowercase
/// letters, digits and `-`. Two worktrees' pods get two names, so their
/// UIs keep separate cookies (cookies are per host, not per port).
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// let repo = dir.path().join("My_App");
/// std::fs::create_dir_all(repo.join(".git")).unwrap();
/// std::fs::write(repo.join(".git/HEAD"), "ref: refs/heads/feature/Login-2\n").unwrap();
/// assert_eq!(omnidev_pod::root::pod_host(&repo), "feature-login-2.my-app.localhost");
/// ```
pub fn pod_host(repo: &Path) -> String {
    let label = |text: &str| {
        let mut out = String::new();
        for c in text.chars() {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_alphanumeric() {
                out.push(c);
            } else if !out.ends_with('-') {
                out.push('-');
            }
        }
        let out: String = out.trim_matches('-').chars().take(40).collect();
        let out = out.trim_end_matches('-').to_owned();
        if out.is_empty() { "pod".to_owned() } else { out }
    };
    let name = repo.file_name().map(|n| n.to_string_lossy().into_owned());
    format!(
        "{}.{}.localhost",
        label(&branch(repo).unwrap_or_default()),
        label(&name.unwrap_or_default())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_root_from_nested_directory() {
        let tmp = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(tmp.path().join(".jj")).expect("mkdir");
        let nested = tmp.path().join("x/y/z");
        std::fs::create_dir_all(&nested).expect("mkdir");
        let root = find_repo_root(&nested).expect("root");
        assert_eq!(root, tmp.path().canonicalize().expect("canon"));
    }

    #[test]
    fn git_file_marks_a_worktree_root() {
        let tmp = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(tmp.path().join(".git")).expect("mkdir");
        let worktree = tmp.path().join("wt");
        std::fs::create_dir_all(worktree.join("src")).expect("mkdir");
        std::fs::write(worktree.join(".git"), "gitdir: ../.git/worktrees/wt\n").expect("write");
        let root = find_repo_root(&worktree.join("src")).expect("root");
        assert_eq!(root, worktree.canonicalize().expect("canon"));
    }

    #[test]
    fn missing_markers_are_named() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let err =
            check_markers(tmp.path(), &["omnigent".into(), "web".into()]).expect_err("shape error");
        let text = err.to_string();
        assert!(text.contains("omnigent") && text.contains("web"), "{text}");
        assert!(text.contains(&tmp.path().display().to_string()), "{text}");
    }
}

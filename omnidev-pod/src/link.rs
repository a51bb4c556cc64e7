//! `[links.NAME]`: the pods of other checkouts this pod uses (a frontend
//! worktree's link to its backend's), found by path or by branch, and what
//! `{link.NAME.…}` placeholders take from them: ports, URLs, databases.
//!
//! A link only reads: the linked pod's `pod.toml` (its ports), its
//! profile (its URLs and databases, rendered with those ports). It never
//! writes into the linked pod, never allocates its ports and never starts
//! it. A link to this checkout itself, a loop of links (followed through
//! the linked checkouts' own profiles), a checkout that is not there, and
//! one whose pod never ran are errors that say what to do.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use crate::profile::template::{LINK_READY, Linked};

use crate::Profile;
use crate::error::{Error, Result};

/// How deep a chain of links is followed when looking for a loop.
const MAX_DEPTH: usize = 16;

/// Each link of `profile` (the checkout at `repo`), `overrides` (`up
/// --link NAME=PATH`) in place of what the profile says, resolved to the
/// linked pod under `cache_root`.
///
/// # Errors
///
/// Those of [`checkouts`]; a linked pod that never ran.
pub fn resolve(
    profile: &Profile,
    repo: &Path,
    cache_root: &Path,
    overrides: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, Linked>> {
    (checkouts(profile, repo, overrides)?.into_iter())
        .map(|(name, checkout, theirs)| {
            let pod = pod_of(&name, &checkout, &theirs, cache_root)?;
            Ok((name, pod))
        })
        .collect()
}

/// Each link of `profile` (the checkout at `repo`; `overrides` from `up
/// --link`) with its checkout and that checkout's profile.
///
/// # Errors
///
/// A link this profile does not declare in `overrides`; a checkout that
/// is not there, is this one, or loops back.
pub fn checkouts(
    profile: &Profile,
    repo: &Path,
    overrides: &BTreeMap<String, String>,
) -> Result<Vec<(String, PathBuf, Profile)>> {
    if let Some(name) = overrides.keys().find(|n| !profile.links.contains_key(*n)) {
        return Err(fail(
            name,
            "is not declared".to_owned(),
            "declare it in the profile (`[links.NAME] checkout = \"../other\"`) before \
             pointing it elsewhere with `--link NAME=PATH`",
        ));
    }
    let mut found = Vec::new();
    for (name, link) in &profile.links {
        let written = overrides.get(name).unwrap_or(&link.checkout);
        let checkout = find_checkout(name, repo, written)?;
        if checkout == repo {
            return Err(fail(
                name,
                format!("`{written}` is this checkout itself"),
                "a link names another checkout (a path, or the branch of another worktree)",
            ));
        }
        let (theirs, _) = Profile::load(&checkout, None)?;
        no_loop(&mut vec![repo.to_path_buf(), checkout.clone()], &theirs)?;
        found.push((name.clone(), checkout, theirs));
    }
    Ok(found)
}

/// The pod of the linked `checkout` (whose profile is `profile`), read
/// only: its ports, its URLs and databases rendered with them.
fn pod_of(name: &str, checkout: &Path, profile: &Profile, cache_root: &Path) -> Result<Linked> {
    let pod_dir = crate::pod::default_pod_dir(cache_root, checkout);
    let record = match crate::ports::read_ports(&pod_dir) {
        Ok(record) => record,
        Err(Error::NoPorts { .. }) => {
            return Err(fail(
                name,
                format!("{} has no pod yet", checkout.display()),
                &format!(
                    "start it once (`omnidev up --detach --repo {}`), or start this pod with \
                     `omnidev up --with-links`",
                    checkout.display()
                ),
            ));
        }
        Err(e) => return Err(e),
    };
    let ctx = crate::RenderContext::from_process_env(
        checkout.to_path_buf(),
        pod_dir.clone(),
        record.ports.clone(),
    );
    // A server's database the pod has not made (no password yet) is left
    // out: making it would write into the linked pod.
    let mut made = profile.clone();
    made.databases.retain(|db, database| {
        !database.engine.is_server() || crate::database::password_file(db, &pod_dir).is_file()
    });
    Ok(Linked {
        checkout: checkout.to_path_buf(),
        urls: made.urls_of(&ctx)?,
        databases: made.databases_of(&ctx)?,
        pod_dir,
        ports: record.ports,
    })
}

/// Follows the links of `profile` (the last checkout of `chain`) through
/// the linked checkouts' own profiles: one that comes back to a checkout
/// of the chain is a loop.
fn no_loop(chain: &mut Vec<PathBuf>, profile: &Profile) -> Result<()> {
    let here = chain.last().cloned().unwrap_or_default();
    for (name, link) in &profile.links {
        let Ok(next) = find_checkout(name, &here, &link.checkout) else {
            // Theirs to report when they start.
            continue;
        };
        if let Some(at) = chain.iter().position(|c| *c == next) {
            let mut cycle: Vec<String> =
                chain[at..].iter().map(|c| c.display().to_string()).collect();
            cycle.push(next.display().to_string());
            return Err(fail(
                name,
                format!("links go round in a loop: {}", cycle.join(" → ")),
                "a pod may use another's, not one that uses it back: drop one of the links",
            ));
        }
        if chain.len() >= MAX_DEPTH {
            continue;
        }
        let Ok((theirs, _)) = Profile::load(&next, None) else {
            continue;
        };
        chain.push(next);
        no_loop(chain, &theirs)?;
        chain.pop();
    }
    Ok(())
}

/// The checkout root `written` names, from the checkout at `repo`: a path
/// (relative to `repo`), or the branch of one of this repository's
/// worktrees.
fn find_checkout(name: &str, repo: &Path, written: &str) -> Result<PathBuf> {
    let path = repo.join(written);
    let looks_like_path = written.contains('/') || written.starts_with('.');
    if let Ok(found) = path.canonicalize() {
        if found.is_dir() {
            return Ok(found);
        }
        return Err(fail(
            name,
            format!("{} is not a directory", found.display()),
            "point it at a checkout's root",
        ));
    }
    if !looks_like_path && let Some(found) = worktree_of_branch(repo, written) {
        return Ok(found);
    }
    Err(fail(
        name,
        format!(
            "`{written}` is neither a directory (from {}) nor the branch of a worktree of this \
             repository",
            repo.display()
        ),
        "write the path of the other checkout (relative to this one), or a branch `git \
         worktree list` shows; `omnidev up --link NAME=PATH` points it elsewhere for one run",
    ))
}

/// The worktree of the repository at `repo` that has `branch` checked out.
fn worktree_of_branch(repo: &Path, branch: &str) -> Option<PathBuf> {
    let output = std::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["worktree", "list", "--porcelain"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    let wanted = format!("branch refs/heads/{branch}");
    let mut current = None;
    for line in text.lines() {
        if let Some(path) = line.strip_prefix("worktree ") {
            current = Some(PathBuf::from(path));
        } else if line == wanted {
            return current.and_then(|p| p.canonicalize().ok());
        }
    }
    None
}

fn fail(name: &str, message: String, help: &str) -> Error {
    Error::Link { name: name.to_owned(), message, help: help.to_owned() }
}

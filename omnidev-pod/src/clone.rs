//! Another checkout's pod's databases copied into this one's (`omnidev db
//! clone`, `up --clone-from`): the source pod found by its checkout (the
//! repository's main worktree by default), its database copied as
//! [`crate::snapshot::copy`] copies (live while its server runs), and its
//! server's password taken with the data (the server's users came with
//! it). Nothing is written into the source pod.

use std::path::{Path, PathBuf};

use crate::database::{Database, DbParts};
use crate::error::{Error, Result};
use crate::snapshot::{self, Copied, CopySource};
use crate::{LockState, Pod, PodLock, Profile, RenderContext};

fn error(name: &str, message: String, help: &str) -> Error {
    Error::DatabaseData { name: name.to_owned(), message, help: help.to_owned() }
}

/// The pod a clone copies from.
#[derive(Debug, Clone)]
pub struct SourcePod {
    /// Its checkout.
    pub repo: PathBuf,
    /// Its pod directory.
    pub pod_dir: PathBuf,
}

impl SourcePod {
    /// The pod (under `cache_root`) of the checkout `from`, else of the
    /// main worktree of the repository `repo` is in; never `repo`'s own.
    pub fn find(cache_root: &Path, repo: &Path, from: Option<&Path>) -> Result<Self> {
        let source = match from {
            Some(dir) => dir.to_path_buf(),
            None => main_worktree(repo)?,
        };
        let source = std::fs::canonicalize(&source).map_err(|e| {
            error(
                "clone",
                format!("cannot find {}: {e}", source.display()),
                "name an existing checkout with --from",
            )
        })?;
        let ours = std::fs::canonicalize(repo).unwrap_or_else(|_| repo.to_path_buf());
        if source == ours {
            return Err(error(
                "clone",
                format!("{} is this checkout", source.display()),
                "name another checkout with --from",
            ));
        }
        let pod_dir = crate::pod::default_pod_dir(cache_root, &source);
        if !pod_dir.join(crate::layout::MARKER).is_file() {
            return Err(error(
                "clone",
                format!("{} has no pod (looked at {})", source.display(), pod_dir.display()),
                "run `omnidev up` in that checkout once, or name another with --from",
            ));
        }
        Ok(Self { repo: source, pod_dir })
    }

    /// Copies database `name` of this pod to `dest`: as `profile` (the
    /// target's, on its engine) declares it, on the engine the source
    /// runs it on, which must be the same.
    pub fn copy(&self, profile: &Profile, name: &str, dest: &Path) -> Result<Copied> {
        let mut theirs = profile.clone();
        if let Some(engine) = Pod::at(&self.pod_dir).db_engine() {
            theirs.choose_engine(engine)?;
        }
        let database = &theirs.databases[name];
        let ours = &profile.databases[name];
        if database.engine != ours.engine {
            return Err(error(
                name,
                format!(
                    "{} runs it on {}, this pod on {}",
                    self.repo.display(),
                    database.engine.word(),
                    ours.engine.word()
                ),
                "run both on one engine (`omnidev up --db ENGINE`)",
            ));
        }
        let data = database.data_path(name, &self.pod_dir);
        let parts = if database.engine.is_server() && server_up(&self.pod_dir, name)? {
            Some(self.parts(&theirs, name)?)
        } else {
            None
        };
        let path = std::env::var_os("PATH").unwrap_or_default();
        snapshot::copy(
            &CopySource {
                name,
                engine: database.engine,
                data: &data,
                live: parts.as_ref(),
                path: &path,
            },
            dest,
        )
    }

    /// What `{db.NAME.…}` is in the source pod: its ports and socket
    /// directory (nothing is written there: its password file is there
    /// since its server first ran).
    fn parts(&self, profile: &Profile, name: &str) -> Result<DbParts> {
        let ports = crate::read_ports(&self.pod_dir)?.ports;
        let ctx = RenderContext::from_process_env(self.repo.clone(), self.pod_dir.clone(), ports);
        Ok(profile.databases_of(&ctx)?.remove(name).unwrap_or_default())
    }

    /// The source's password file for database `name` (a server's).
    pub fn password_file(&self, database: &Database, name: &str) -> Option<PathBuf> {
        database.engine.is_server().then(|| crate::database::password_file(name, &self.pod_dir))
    }
}

/// Whether the pod in `pod_dir` runs and its service `name` has a process
/// (its supervisor's `state.json`).
fn server_up(pod_dir: &Path, name: &str) -> Result<bool> {
    if !matches!(PodLock::state(pod_dir)?, LockState::Held { .. }) {
        return Ok(false);
    }
    let state = omnidev_core::read_state(&Pod::at(pod_dir).state_file()).ok().flatten();
    Ok(state.is_some_and(|state| {
        (state.services.get(name)).is_some_and(|record| record.state.pid().is_some())
    }))
}

/// `up --clone-from CHECKOUT`: each database of `profile` in the pod
/// `pod_dir` without data yet becomes a copy of the source pod's, with its
/// server's password, before anything renders. What was copied, a line
/// each.
pub fn clone_missing(
    profile: &Profile,
    repo: &Path,
    cache_root: &Path,
    pod_dir: &Path,
    from: &Path,
) -> Result<Vec<String>> {
    let source = SourcePod::find(cache_root, repo, Some(from))?;
    let mut said = Vec::new();
    for (name, database) in &profile.databases {
        let data = database.data_path(name, pod_dir);
        if std::fs::symlink_metadata(&data).is_ok() {
            continue;
        }
        let copied = source.copy(profile, name, &data)?;
        if let Some(file) = source.password_file(database, name) {
            let ours = crate::database::password_file(name, pod_dir);
            snapshot::copy_password(&file, &ours)?;
        }
        said.push(format!("cloned {name} from {}: {}", source.repo.display(), copied.said()));
    }
    Ok(said)
}

/// The main worktree of the repository `repo` is in (`git worktree
/// list`'s first).
fn main_worktree(repo: &Path) -> Result<PathBuf> {
    let output = std::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["worktree", "list", "--porcelain"])
        .output()
        .map_err(Error::io("run git in", repo))?;
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .find_map(|line| line.strip_prefix("worktree "))
        .map(PathBuf::from)
        .filter(|_| output.status.success())
        .ok_or_else(|| {
            error(
                "clone",
                format!("{} is in no git repository with worktrees", repo.display()),
                "name the checkout to copy from with --from",
            )
        })
}

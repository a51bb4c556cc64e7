//! The operations behind `install`, `update` and `refresh`.

use std::path::PathBuf;
use std::time::SystemTime;

use crate::cache::{CheckCache, MAX_AGE, RETRY_AFTER_FAILURE, unix_seconds};
use crate::source::Source;
use crate::{InstallChoice, Paths, Result, uv};

/// Options of [`install`] and [`update`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InstallOptions {
    /// Skip the Node/npm preflight.
    pub skip_web_check: bool,
}

/// What is installed after [`install`] or [`update`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    /// The commit read from `direct_url.json`.
    pub commit: String,
    /// `uv tool dir`.
    pub tool_dir: PathBuf,
    /// The choice that was installed.
    pub choice: InstallChoice,
}

/// `omnidev install`: validate, preflight, save the choice atomically, run
/// `uv tool install --force`, then cache the installed commit. Nothing is
/// written or started when validation fails.
pub fn install(
    paths: &Paths,
    choice: &InstallChoice,
    options: InstallOptions,
) -> Result<Installed> {
    choice.validate()?;
    uv::preflight(options.skip_web_check)?;
    choice.save(&paths.install_toml())?;
    uv::run_install(choice, false)?;
    record_installed(paths, choice, SystemTime::now())
}

/// `omnidev update`: reinstall the saved choice (the defaults when nothing
/// was saved) with `--reinstall`, so a moving ref re-resolves.
pub fn update(paths: &Paths, options: InstallOptions) -> Result<Installed> {
    let choice = saved_choice(paths)?;
    choice.validate()?;
    uv::preflight(options.skip_web_check)?;
    uv::run_install(&choice, true)?;
    record_installed(paths, &choice, SystemTime::now())
}

/// The saved choice, or the defaults when none was saved.
pub fn saved_choice(paths: &Paths) -> Result<InstallChoice> {
    Ok(InstallChoice::load(&paths.install_toml())?.unwrap_or_default())
}

/// After an install the installed commit is also the newest one known, so
/// the cache is fresh and says "up to date".
fn record_installed(paths: &Paths, choice: &InstallChoice, now: SystemTime) -> Result<Installed> {
    let tool_dir = uv::tool_dir()?;
    let commit = uv::installed_commit(&tool_dir)?;
    let path = paths.check_cache();
    let previous = CheckCache::load(&path).filter(|c| same_target(c, choice));
    CheckCache {
        checked_at: unix_seconds(now),
        repo: choice.repo.clone(),
        reference: choice.reference.clone(),
        remote_commit: Some(commit.clone()),
        installed_commit: Some(commit.clone()),
        tool_dir: Some(tool_dir.clone()),
        declined_commit: previous.and_then(|c| c.declined_commit),
        last_error: None,
    }
    .save(&path)?;
    Ok(Installed {
        commit,
        tool_dir,
        choice: choice.clone(),
    })
}

fn same_target(cache: &CheckCache, choice: &InstallChoice) -> bool {
    cache.repo == choice.repo && cache.reference == choice.reference
}

/// `omnidev refresh`: look up the remote commit of the saved repo/ref with
/// `source`, re-read the installed commit, and rewrite the cache atomically
/// (a corrupt cache is simply replaced).
///
/// A failed lookup still rewrites the cache — keeping what was known and
/// recording the error — dated so the next try comes after
/// [`RETRY_AFTER_FAILURE`] rather than from the very next shell.
pub async fn refresh(paths: &Paths, source: &dyn Source, now: SystemTime) -> Result<CheckCache> {
    let choice = saved_choice(paths)?;
    choice.validate()?;
    let path = paths.check_cache();
    let previous = CheckCache::load(&path).filter(|c| same_target(c, &choice));
    let tool_dir = uv::tool_dir()
        .ok()
        .or_else(|| previous.as_ref().and_then(|c| c.tool_dir.clone()));
    let installed_commit = tool_dir
        .as_deref()
        .and_then(|dir| uv::installed_commit(dir).ok());
    let mut cache = CheckCache {
        checked_at: unix_seconds(now),
        repo: choice.repo.clone(),
        reference: choice.reference.clone(),
        remote_commit: None,
        installed_commit,
        tool_dir,
        declined_commit: previous.as_ref().and_then(|c| c.declined_commit.clone()),
        last_error: None,
    };
    match source.remote_commit(&choice.repo, &choice.reference).await {
        Ok(commit) => {
            cache.remote_commit = Some(commit);
            cache.save(&path)?;
            Ok(cache)
        }
        Err(error) => {
            cache.remote_commit = previous.and_then(|c| c.remote_commit);
            cache.last_error = Some(error.to_string());
            cache.checked_at = cache
                .checked_at
                .saturating_sub(MAX_AGE.as_secs() - RETRY_AFTER_FAILURE.as_secs());
            cache.save(&path)?;
            Err(error)
        }
    }
}

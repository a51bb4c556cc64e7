//! The operations behind `install`, `update` and `refresh`.

use std::path::PathBuf;
use std::time::SystemTime;

use crate::cache::{CheckCache, MAX_AGE, RETRY_AFTER_FAILURE, unix_seconds};
use crate::source::Source;
use crate::{InstallChoice, Paths, Result, uv};

/// Options of [`install`] and [`update`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InstallOptions {
    /// Skip the Node/npm preflight (an `update` also skips it when the
    /// saved choice says so).
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

/// `omnidev install`: validate, preflight, take the install lock, run
/// `uv tool install --force`, and only once it succeeded save the choice
/// (atomically) and cache the installed commit. Nothing is written or
/// started when validation fails; a failed or interrupted uv leaves the
/// previous choice and cache as they were.
pub fn install(
    paths: &Paths,
    choice: &InstallChoice,
    options: InstallOptions,
) -> Result<Installed> {
    choice.validate()?;
    uv::preflight(options.skip_web_check)?;
    let _lock = InstallLock::take(paths)?;
    uv::run_install(choice, false)?;
    choice.save(&paths.install_toml())?;
    record_installed(paths, choice, SystemTime::now())
}

/// `omnidev update`: reinstall the saved choice (the defaults when nothing
/// was saved) with `--reinstall`, so a moving ref re-resolves.
pub fn update(paths: &Paths, options: InstallOptions) -> Result<Installed> {
    let choice = saved_choice(paths)?;
    choice.validate()?;
    uv::preflight(options.skip_web_check || choice.skip_web_check)?;
    let _lock = InstallLock::take(paths)?;
    // Read again under the lock: an install that just finished may have
    // changed it.
    let choice = saved_choice(paths)?;
    choice.validate()?;
    uv::run_install(&choice, true)?;
    record_installed(paths, &choice, SystemTime::now())
}

/// One `install` or `update` at a time: an exclusive lock on
/// [`Paths::install_lock`], holding the holder's pid for the message the
/// next one gets. Released when dropped (or when the process dies).
#[derive(Debug)]
struct InstallLock {
    _file: std::fs::File,
}

impl InstallLock {
    fn take(paths: &Paths) -> Result<Self> {
        use std::io::{Read, Seek, Write};
        let path = paths.install_lock();
        crate::fs::create_private_dir(&paths.cache_dir)?;
        let mut file =
            omnidev_core::fs::open(&path, omnidev_core::fs::OpenOptions::ReadWriteCreate)
                .map_err(|source| crate::Error::io("open", &path, source))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut text = String::new();
                let _ = (&file).take(32).read_to_string(&mut text);
                return Err(crate::Error::InstallRunning { pid: text.trim().parse().ok(), path });
            }
            Err(std::fs::TryLockError::Error(source)) => {
                return Err(crate::Error::io("lock", &path, source));
            }
        }
        // For the message of the next one only; the lock is what counts.
        let _ = file
            .set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| writeln!(file, "{}", std::process::id()));
        Ok(Self { _file: file })
    }
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
    CheckCache::modify(&paths.check_cache(), |current| CheckCache {
        checked_at: unix_seconds(now),
        repo: choice.repo.clone(),
        reference: choice.reference.clone(),
        remote_commit: Some(commit.clone()),
        installed_commit: Some(commit.clone()),
        tool_dir: Some(tool_dir.clone()),
        declined_commit: current.filter(|c| same_target(c, choice)).and_then(|c| c.declined_commit),
        last_error: None,
    })?;
    Ok(Installed { commit, tool_dir, choice: choice.clone() })
}

fn same_target(cache: &CheckCache, choice: &InstallChoice) -> bool {
    cache.repo == choice.repo && cache.reference == choice.reference
}

/// `omnidev refresh`: look up the remote commit of the saved repo/ref with
/// `source`, re-read the installed commit, and rewrite the cache atomically
/// (a corrupt cache is simply replaced).
///
/// The entry is built from the cache as it is *after* the lookup (see
/// [`CheckCache::modify`]), so a decline or an update that finished while
/// the lookup waited for the network is kept.
///
/// A failed lookup still rewrites the cache — keeping what was known and
/// recording the error — dated so the next try comes after
/// [`RETRY_AFTER_FAILURE`] rather than from the very next shell.
pub async fn refresh(paths: &Paths, source: &dyn Source, now: SystemTime) -> Result<CheckCache> {
    let choice = match saved_choice(paths).and_then(|c| c.validate().map(|()| c)) {
        Ok(choice) => choice,
        Err(error) => {
            // Nothing can be looked up, but the attempt is recorded: without
            // it every new shell would start another refresh that fails the
            // same way. The next try comes after the failure back-off.
            let _ = CheckCache::modify(&paths.check_cache(), |current| CheckCache {
                checked_at: retry_time(now),
                last_error: Some(error.to_string()),
                ..current.unwrap_or_default()
            });
            return Err(error);
        }
    };
    let tool_dir = uv::tool_dir().ok();
    let lookup = source.remote_commit(&choice.repo, &choice.reference).await;
    let cache = CheckCache::modify(&paths.check_cache(), |current| {
        let previous = current.filter(|c| same_target(c, &choice));
        let tool_dir = tool_dir.or_else(|| previous.as_ref().and_then(|c| c.tool_dir.clone()));
        let installed_commit = tool_dir.as_deref().and_then(|dir| uv::installed_commit(dir).ok());
        let (remote_commit, last_error, checked_at) = match &lookup {
            Ok(commit) => (Some(commit.clone()), None, unix_seconds(now)),
            Err(error) => (
                previous.as_ref().and_then(|c| c.remote_commit.clone()),
                Some(error.to_string()),
                retry_time(now),
            ),
        };
        CheckCache {
            checked_at,
            repo: choice.repo.clone(),
            reference: choice.reference.clone(),
            remote_commit,
            installed_commit,
            tool_dir,
            declined_commit: previous.and_then(|c| c.declined_commit),
            last_error,
        }
    })?;
    lookup.map(|_| cache)
}

/// The `checked_at` that makes a failed refresh be retried after
/// `RETRY_AFTER_FAILURE` instead of at once or a day later.
fn retry_time(now: SystemTime) -> u64 {
    unix_seconds(now).saturating_sub(MAX_AGE.as_secs() - RETRY_AFTER_FAILURE.as_secs())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use async_trait::async_trait;

    use super::*;
    use crate::Error;

    /// A [`Source`] that answers from a fixed value, or fails.
    #[derive(Debug)]
    struct Fixed(Option<&'static str>);

    #[async_trait]
    impl Source for Fixed {
        async fn remote_commit(&self, repo: &str, reference: &str) -> Result<String> {
            self.0.map(str::to_owned).ok_or_else(|| Error::RefNotFound {
                repo: repo.to_owned(),
                reference: reference.to_owned(),
            })
        }
    }

    /// A [`Source`] that, while "on the network", lets the user decline
    /// `commit` at the prompt of a concurrent `check`.
    #[derive(Debug)]
    struct DeclineDuringLookup {
        paths: Paths,
        commit: &'static str,
    }

    #[async_trait]
    impl Source for DeclineDuringLookup {
        async fn remote_commit(&self, _repo: &str, _reference: &str) -> Result<String> {
            crate::check::decline(&self.paths, self.commit)?;
            Ok(self.commit.to_owned())
        }
    }

    fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(future)
    }

    /// Config and cache directories inside a temp dir (kept alive by the
    /// returned guard).
    fn temp_paths() -> (tempfile::TempDir, Paths) {
        let dir = tempfile::tempdir().expect("temp dir");
        let paths =
            Paths { config_dir: dir.path().join("config"), cache_dir: dir.path().join("cache") };
        (dir, paths)
    }

    /// Saves a choice of a local repo and `cache` for that repo and ref.
    fn save_choice_and_cache(paths: &Paths, cache: CheckCache) {
        let choice = InstallChoice {
            repo: "file:///nowhere/omnigent.git".into(),
            ..InstallChoice::default()
        };
        choice.save(&paths.install_toml()).expect("save choice");
        CheckCache { repo: choice.repo, reference: choice.reference, ..cache }
            .save(&paths.check_cache())
            .expect("seed cache");
    }

    #[test]
    fn refresh_keeps_the_decline_and_a_failure_retries_within_the_hour() {
        let (_dir, paths) = temp_paths();
        save_choice_and_cache(
            &paths,
            CheckCache {
                remote_commit: Some("old".into()),
                declined_commit: Some("old".into()),
                ..CheckCache::default()
            },
        );

        let now = SystemTime::now();
        let cache = block_on(refresh(&paths, &Fixed(Some("new")), now)).expect("refresh");
        assert_eq!(cache.remote_commit.as_deref(), Some("new"));
        assert_eq!(cache.declined_commit.as_deref(), Some("old"));
        assert!(!cache.is_stale(now));
        assert_eq!(CheckCache::load(&paths.check_cache()), Some(cache));

        let error = block_on(refresh(&paths, &Fixed(None), now)).expect_err("lookup fails");
        assert!(matches!(error, Error::RefNotFound { .. }));
        let cache = CheckCache::load(&paths.check_cache()).expect("cache written anyway");
        assert_eq!(cache.remote_commit.as_deref(), Some("new"), "what was known is kept");
        assert!(cache.last_error.is_some());
        assert!(!cache.is_stale(now), "no refresh storm right after a failure");
        assert!(cache.is_stale(now + RETRY_AFTER_FAILURE + Duration::from_secs(1)));
    }

    #[test]
    fn a_corrupt_install_toml_is_recorded_so_shells_do_not_retry_at_once() {
        let (_dir, paths) = temp_paths();
        std::fs::create_dir_all(&paths.config_dir).expect("config dir");
        std::fs::write(paths.install_toml(), "repo = [").expect("corrupt choice");
        let now = SystemTime::now();
        let error = block_on(refresh(&paths, &Fixed(Some("new")), now)).expect_err("corrupt");
        assert!(error.to_string().contains("install.toml"), "the error names the file: {error}");
        let cache = CheckCache::load(&paths.check_cache()).expect("the failure is recorded");
        assert!(cache.last_error.is_some());
        assert!(!cache.is_stale(now), "no refresh from the next shell");
        assert!(cache.is_stale(now + RETRY_AFTER_FAILURE + Duration::from_secs(1)));
        assert_eq!(
            std::fs::read_to_string(paths.install_toml()).expect("choice"),
            "repo = [",
            "the user's file is left as it was"
        );
    }

    #[test]
    fn a_decline_during_the_lookup_is_not_lost() {
        let (_dir, paths) = temp_paths();
        save_choice_and_cache(
            &paths,
            CheckCache {
                installed_commit: Some("old".into()),
                remote_commit: Some("new".into()),
                ..CheckCache::default()
            },
        );

        let source = DeclineDuringLookup { paths: paths.clone(), commit: "new" };
        let cache = block_on(refresh(&paths, &source, SystemTime::now())).expect("refresh");
        assert_eq!(cache.declined_commit.as_deref(), Some("new"));
        assert_eq!(
            CheckCache::load(&paths.check_cache()).and_then(|c| c.declined_commit),
            Some("new".to_owned()),
            "the refresh kept the decline written while it ran"
        );
    }
}

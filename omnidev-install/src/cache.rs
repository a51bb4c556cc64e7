//! The update-check cache (`omnigent-check.json`): what the hot path reads.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::{Error, Result, fs};

/// How long a cache entry counts as fresh.
pub const MAX_AGE: Duration = Duration::from_secs(24 * 60 * 60);

/// How soon a failed refresh is retried (it still rewrites the cache, so a
/// broken network does not start a refresh from every shell).
pub const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(60 * 60);

/// The largest cache file read; a written one is a few hundred bytes.
pub const MAX_FILE_BYTES: u64 = 64 * 1024;

/// The cached state of the update check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub struct CheckCache {
    /// When the entry was last refreshed, in seconds since the Unix epoch.
    pub checked_at: u64,
    /// Repository the remote commit belongs to.
    pub repo: String,
    /// Ref the remote commit belongs to.
    #[serde(rename = "ref")]
    pub reference: String,
    /// Newest commit of the ref, as last seen.
    pub remote_commit: Option<String>,
    /// Commit currently installed (from PEP 610 `direct_url.json`).
    pub installed_commit: Option<String>,
    /// `uv tool dir` as last seen, so the hot path never asks uv.
    pub tool_dir: Option<PathBuf>,
    /// A commit the user said no to; it is not offered again.
    pub declined_commit: Option<String>,
    /// Why the last refresh failed, if it did.
    pub last_error: Option<String>,
}

impl CheckCache {
    /// Reads the cache. A missing, corrupt or oversized file (more than
    /// [`MAX_FILE_BYTES`]) is a miss (`None`): the next refresh rewrites it.
    /// At most `MAX_FILE_BYTES + 1` bytes are read, so a huge file costs
    /// the hot path no more than a small one.
    pub fn load(path: &Path) -> Option<Self> {
        let bytes = omnidev_core::fs::read_file(path, MAX_FILE_BYTES).ok()??;
        serde_json::from_slice(&bytes).ok()
    }

    /// Writes the cache atomically, and its [`quiet_stamp`] with it: every
    /// write of the cache goes through here, so the stamp never outlives the
    /// entry it describes. An entry with an update on offer removes the
    /// stamp before it is written (a shell never skips a notice); any other
    /// writes the stamp after it.
    pub fn save(&self, path: &Path) -> Result<()> {
        let stamp = quiet_stamp(path);
        let offers = self.available_update().is_some();
        if offers {
            omnidev_core::fs::found(std::fs::remove_file(&stamp))
                .map_err(|error| Error::io("remove", &stamp, error))?;
        }
        let mut text = serde_json::to_string_pretty(self).unwrap_or_default();
        text.push('\n');
        fs::write_private(path, text.as_bytes())?;
        if !offers {
            self.write_quiet_stamp(&stamp)?;
        }
        Ok(())
    }

    /// `<checked_at> <MAX_AGE seconds>`, the file's mtime set to
    /// `checked_at` (fish has no clock of its own but reads a file's age).
    fn write_quiet_stamp(&self, stamp: &Path) -> Result<()> {
        let text = format!("{} {}\n", self.checked_at, MAX_AGE.as_secs());
        fs::write_private(stamp, text.as_bytes())?;
        let at = UNIX_EPOCH + Duration::from_secs(self.checked_at);
        std::fs::File::options()
            .write(true)
            .open(stamp)
            .and_then(|file| file.set_modified(at))
            .map_err(|source| Error::io("set the time of", stamp, source))
    }

    /// Builds the new entry from the current one with `change` and writes
    /// it, under an exclusive lock on [`lock_path`]`(path)`.
    ///
    /// The writers run concurrently — a background refresh, a decline at
    /// the prompt of `check`, an install or update — and each must build on
    /// the others' last word: a decline typed while a refresh waits for the
    /// network is not lost. Readers need no lock (writes are atomic renames).
    pub fn modify(path: &Path, change: impl FnOnce(Option<Self>) -> Self) -> Result<Self> {
        let lock_path = lock_path(path);
        if let Some(dir) = lock_path.parent() {
            fs::create_private_dir(dir)?;
        }
        let lock =
            omnidev_core::fs::open(&lock_path, omnidev_core::fs::OpenOptions::ReadWriteCreate)
                .map_err(|source| Error::io("open", &lock_path, source))?;
        lock.lock().map_err(|source| Error::io("lock", &lock_path, source))?;
        let cache = change(Self::load(path));
        cache.save(path)?;
        Ok(cache)
    }

    /// Whether the entry is older than [`MAX_AGE`] at `now` (or written in
    /// the future by a clock that has since been corrected).
    pub fn is_stale(&self, now: SystemTime) -> bool {
        let now = unix_seconds(now);
        let age = now.saturating_sub(self.checked_at);
        age >= MAX_AGE.as_secs() || self.checked_at > now + MAX_AGE.as_secs()
    }

    /// The update on offer, if a newer commit than the installed one is
    /// known and was not declined.
    pub fn available_update(&self) -> Option<NewerCommit> {
        let installed = self.installed_commit.as_deref()?;
        let remote = self.remote_commit.as_deref()?;
        if installed == remote || self.declined_commit.as_deref() == Some(remote) {
            return None;
        }
        Some(NewerCommit {
            installed: installed.to_owned(),
            available: remote.to_owned(),
            reference: self.reference.clone(),
        })
    }

    /// A newer commit than the installed one that the user declined: it
    /// is not offered again, but it is not "up to date" either.
    pub fn declined_update(&self) -> Option<&str> {
        let installed = self.installed_commit.as_deref()?;
        let remote = self.remote_commit.as_deref()?;
        (installed != remote && self.declined_commit.as_deref() == Some(remote)).then_some(remote)
    }
}

/// The lock serialising writers of the cache at `path` (see
/// [`CheckCache::modify`]): `omnigent-check.lock` beside it.
pub fn lock_path(path: &Path) -> PathBuf {
    path.with_extension("lock")
}

/// A newer commit than the installed one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewerCommit {
    /// The installed commit.
    pub installed: String,
    /// The newer commit.
    pub available: String,
    /// The ref it was found on.
    pub reference: String,
}

/// Seconds since the Unix epoch (0 for times before it).
pub fn unix_seconds(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_secs())
}

/// The stamp beside the cache `path` (`omnigent-check.quiet`) that lets
/// the shell hook start nothing: while `now - checked_at` lies in
/// `[-MAX_AGE, MAX_AGE)` (the entry is fresh, [`CheckCache::is_stale`]) and
/// the stamp exists (no update on offer), `omnidev check --quiet` would
/// print nothing and start nothing, so the hook skips it. Written only by
/// [`CheckCache::save`].
pub fn quiet_stamp(path: &Path) -> PathBuf {
    path.with_extension("quiet")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(seconds)
    }

    #[test]
    fn staleness() {
        let cache = CheckCache { checked_at: 1_000_000, ..CheckCache::default() };
        assert!(!cache.is_stale(at(1_000_000)));
        assert!(!cache.is_stale(at(1_000_000 + MAX_AGE.as_secs() - 1)));
        assert!(cache.is_stale(at(1_000_000 + MAX_AGE.as_secs())));
        assert!(cache.is_stale(at(1_000_000 - MAX_AGE.as_secs() - 1)));
    }

    #[test]
    fn update_offer_respects_decline() {
        let mut cache = CheckCache {
            installed_commit: Some("a".into()),
            remote_commit: Some("a".into()),
            reference: "main".into(),
            ..CheckCache::default()
        };
        assert_eq!(cache.available_update(), None, "up to date");
        cache.remote_commit = Some("b".into());
        assert_eq!(cache.available_update().map(|u| u.available), Some("b".to_owned()));
        cache.declined_commit = Some("b".into());
        assert_eq!(cache.available_update(), None, "declined");
        assert_eq!(cache.declined_update(), Some("b"));
        cache.remote_commit = Some("c".into());
        assert!(cache.available_update().is_some(), "a newer one is offered");
        cache.installed_commit = None;
        assert_eq!(cache.available_update(), None, "nothing installed");
    }

    #[test]
    fn corrupt_cache_is_a_miss() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("c.json");
        std::fs::write(&path, "{not json").expect("write");
        assert_eq!(CheckCache::load(&path), None);
        let cache = CheckCache { checked_at: 5, ..CheckCache::default() };
        cache.save(&path).expect("save");
        assert_eq!(CheckCache::load(&path), Some(cache));
    }

    #[test]
    fn an_oversized_cache_is_a_miss() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("c.json");
        let cache = CheckCache { checked_at: 5, ..CheckCache::default() };
        cache.save(&path).expect("save");
        // Valid JSON followed by whitespace past the bound: read whole it
        // would parse, so a miss shows only the bounded prefix was read.
        let mut text = std::fs::read(&path).expect("read");
        text.resize(usize::try_from(MAX_FILE_BYTES).expect("small") + 10, b' ');
        std::fs::write(&path, &text).expect("write");
        assert!(serde_json::from_slice::<CheckCache>(&text).is_ok());
        assert_eq!(CheckCache::load(&path), None);
    }

    #[test]
    fn concurrent_modifications_lose_nothing() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("omnidev/c.json");
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    for _ in 0..25 {
                        CheckCache::modify(&path, |current| {
                            let mut cache = current.unwrap_or_default();
                            cache.checked_at += 1;
                            cache
                        })
                        .expect("modify");
                    }
                });
            }
        });
        assert_eq!(CheckCache::load(&path).map(|c| c.checked_at), Some(200));
        assert!(lock_path(&path).ends_with("omnidev/c.lock"));
    }

    #[test]
    fn save_keeps_the_quiet_stamp_only_while_nothing_is_on_offer() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("omnidev/omnigent-check.json");
        let stamp = quiet_stamp(&path);
        assert!(stamp.ends_with("omnidev/omnigent-check.quiet"));
        let quiet = CheckCache {
            checked_at: 1_700_000_000,
            installed_commit: Some("a".into()),
            remote_commit: Some("a".into()),
            ..CheckCache::default()
        };
        quiet.save(&path).expect("save");
        assert_eq!(
            std::fs::read_to_string(&stamp).expect("stamp"),
            format!("1700000000 {}\n", MAX_AGE.as_secs())
        );
        let mtime = std::fs::metadata(&stamp).and_then(|meta| meta.modified()).expect("mtime");
        assert_eq!(mtime, UNIX_EPOCH + Duration::from_secs(1_700_000_000));
        let offering = CheckCache { remote_commit: Some("b".into()), ..quiet.clone() };
        offering.save(&path).expect("save");
        assert!(!stamp.exists(), "an update on offer must reach the shell");
        let declined = CheckCache { declined_commit: Some("b".into()), ..offering };
        declined.save(&path).expect("save");
        assert!(stamp.exists(), "a declined update is nothing to say");
    }
}

//! A database's seed (`[databases.NAME.seed]`): a command run once against
//! a new database, its result kept in the user's cache under a key of what
//! it depends on, so the next new worktree with the same key starts from
//! that result instead of seeding again.
//!
//! The key is a hash of the database's name and engine, the engine's
//! version (its server's `--version`), the seed's command and the content
//! of its `inputs` (files, or every file under a directory); a changed
//! input, command or engine version seeds anew. The cache
//! (`<cache root>/.seeds/<key>/`) holds each result's data and its
//! server's password, written under a name of its own and renamed into
//! place when complete; it is bounded in bytes ([`MAX_CACHE_BYTES`]), the
//! least recently used results going first.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::database::{Database, DbEngine};
use crate::error::{Error, Result};
use crate::snapshot::{self, Copied, CopySource};

/// The bytes the cache keeps at most.
pub const MAX_CACHE_BYTES: u64 = 2 * 1024 * 1024 * 1024;

/// The most bytes of one input file hashed into a key (a seed depends
/// on scripts and migrations, not on data dumps).
const MAX_INPUT_BYTES: u64 = 64 * 1024 * 1024;

/// A cached result's record, written last.
const RECORD: &str = "seed.toml";

/// Its data, and its server's password.
const DATA: &str = "data";
const PASSWORD: &str = "password";

/// A seed's result in the cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SeedResult {
    /// Its key.
    pub key: String,
    /// The database it was made for.
    pub database: String,
    /// The engine its data is of.
    pub engine: DbEngine,
    /// Its bytes.
    pub bytes: u64,
    /// When it was stored (seconds since the epoch).
    pub stored: u64,
    /// When it was last stored or used (seconds since the epoch).
    pub used: u64,
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// `<cache root>/.seeds`.
pub fn cache_dir(cache_root: &Path) -> PathBuf {
    cache_root.join(crate::layout::SEEDS_DIR)
}

/// The key of database `name`'s seed in the checkout `repo`, its
/// programs found on `path`.
pub fn key(repo: &Path, name: &str, database: &Database, path: &std::ffi::OsStr) -> Result<String> {
    let mut hash = Sha256::new();
    let mut part = |bytes: &[u8]| {
        hash.update((bytes.len() as u64).to_le_bytes());
        hash.update(bytes);
    };
    part(b"omnidev-seed-1");
    part(name.as_bytes());
    part(database.engine.word().as_bytes());
    part(engine_version(database.engine, path).as_bytes());
    let seed = database.seed.clone().unwrap_or_default();
    for word in &seed.command {
        part(word.as_bytes());
    }
    for input in &seed.inputs {
        part(input.as_bytes());
        let mut files = Vec::new();
        walk(&repo.join(input), &mut files);
        files.sort();
        if files.is_empty() {
            part(b"(none)");
        }
        for file in files {
            let relative = file.strip_prefix(repo).unwrap_or(&file);
            part(relative.to_string_lossy().as_bytes());
            let bytes = omnidev_core::fs::read_file(&file, MAX_INPUT_BYTES)
                .map_err(Error::io("read the seed input", &file))?
                .unwrap_or_default();
            part(&Sha256::digest(&bytes));
        }
    }
    let digest = hash.finalize();
    let mut key = String::new();
    for byte in &digest[..16] {
        let _ = write!(key, "{byte:02x}");
    }
    Ok(key)
}

/// The files under `path` (itself when a file), links not followed.
fn walk(path: &Path, files: &mut Vec<PathBuf>) {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => {
            for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
                walk(&entry.path(), files);
            }
        }
        Ok(meta) if meta.is_file() => files.push(path.to_path_buf()),
        _ => {}
    }
}

/// What its server says of its version (`postgres (PostgreSQL) 15.18`),
/// empty when it cannot say.
fn engine_version(engine: DbEngine, path: &std::ffi::OsStr) -> String {
    let program = if engine == DbEngine::Sqlite {
        PathBuf::from("sqlite3")
    } else {
        match crate::database::find_programs(engine, path) {
            Ok(programs) => programs[0].clone(),
            Err(_) => return String::new(),
        }
    };
    std::process::Command::new(program)
        .arg("--version")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .unwrap_or_default()
}

/// Whether `key` may name an entry (32 hex digits).
fn is_key(key: &str) -> bool {
    key.len() == 32 && key.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The complete entries of the cache.
pub fn list(cache_root: &Path) -> Vec<SeedResult> {
    let mut all: Vec<SeedResult> = std::fs::read_dir(cache_dir(cache_root))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|dir| {
            let text = omnidev_core::fs::read_file(&dir.path().join(RECORD), 64 * 1024).ok()??;
            let entry: SeedResult = toml::from_str(&String::from_utf8(text).ok()?).ok()?;
            (is_key(&entry.key) && dir.file_name() == entry.key.as_str()).then_some(entry)
        })
        .collect();
    all.sort_by_key(|e| std::cmp::Reverse(e.used));
    all
}

/// The entry of `key`, when the cache holds it whole.
pub fn cached(cache_root: &Path, key: &str) -> Option<SeedResult> {
    list(cache_root).into_iter().find(|e| e.key == key)
}

fn write_record(cache_root: &Path, entry: &SeedResult) -> Result<()> {
    let file = cache_dir(cache_root).join(&entry.key).join(RECORD);
    let text = toml::to_string(entry).unwrap_or_default();
    omnidev_core::fs::write_atomic(&file, text.as_bytes()).map_err(Error::io("write", &file))
}

/// Stores `source` (a database just seeded) as `key`'s result, with the
/// password file `password` of its server; then keeps the cache within
/// [`MAX_CACHE_BYTES`]. An entry already there is kept as it is.
pub fn store(
    cache_root: &Path,
    key: &str,
    source: &CopySource<'_>,
    password: Option<&Path>,
) -> Result<(SeedResult, Copied)> {
    let dir = cache_dir(cache_root).join(key);
    if !is_key(key) {
        return Err(Error::DatabaseData {
            name: source.name.to_owned(),
            message: format!("{} is no seed key", crate::names::shown(key)),
            help: "a key is 32 hex digits".to_owned(),
        });
    }
    let partial = snapshot::beside(&dir, ".partial");
    snapshot::remove_any(&partial)?;
    std::fs::create_dir_all(cache_root).map_err(Error::io("create", cache_root))?;
    let name = format!("{key}.partial");
    snapshot::make_dir_inside(cache_root, &Path::new(crate::layout::SEEDS_DIR).join(name))?;
    let copied = snapshot::copy(source, &partial.join(DATA))?;
    if let Some(file) = password {
        snapshot::copy_password(file, &partial.join(PASSWORD))?;
    }
    if cached(cache_root, key).is_none() {
        snapshot::remove_any(&dir)?;
        std::fs::rename(&partial, &dir).map_err(Error::io("rename into place", &dir))?;
    } else {
        snapshot::remove_any(&partial)?;
    }
    let entry = SeedResult {
        key: key.to_owned(),
        database: source.name.to_owned(),
        engine: source.engine,
        bytes: copied.bytes,
        stored: now(),
        used: now(),
    };
    write_record(cache_root, &entry)?;
    prune(cache_root, MAX_CACHE_BYTES)?;
    Ok((entry, copied))
}

/// Puts `entry`'s data at `data` (which must not exist) and its password
/// at `password` (a server's).
pub fn restore(
    cache_root: &Path,
    entry: &SeedResult,
    data: &Path,
    password: Option<&Path>,
    path: &std::ffi::OsStr,
) -> Result<Copied> {
    let dir = cache_dir(cache_root).join(&entry.key);
    let copied = snapshot::copy(
        &CopySource {
            name: &entry.database,
            engine: entry.engine,
            data: &dir.join(DATA),
            live: None,
            path,
        },
        data,
    )?;
    if let Some(to) = password
        && dir.join(PASSWORD).is_file()
    {
        snapshot::copy_password(&dir.join(PASSWORD), to)?;
    }
    let used = SeedResult { used: now(), ..entry.clone() };
    write_record(cache_root, &used)?;
    Ok(copied)
}

/// Each of `databases` with a seed and no data yet in the pod
/// `pod_dir` whose seed's result the cache holds starts from that result
/// (before anything renders: its server's password comes with it). What
/// was restored, a line each.
pub fn seeds_from_cache(
    databases: &indexmap::IndexMap<String, Database>,
    repo: &Path,
    cache_root: &Path,
    pod_dir: &Path,
) -> Result<Vec<String>> {
    let mut said = Vec::new();
    let path = std::env::var_os("PATH").unwrap_or_default();
    for (name, database) in databases {
        let data = database.data_path(name, pod_dir);
        if database.seed.is_none() || std::fs::symlink_metadata(&data).is_ok() {
            continue;
        }
        let key = key(repo, name, database, &path)?;
        let Some(result) = cached(cache_root, &key) else {
            continue;
        };
        let password =
            (database.engine.is_server()).then(|| crate::database::password_file(name, pod_dir));
        let copied = restore(cache_root, &result, &data, password.as_deref(), &path)?;
        said.push(format!("{name} starts from its seed's cached result {key}: {}", copied.said()));
    }
    Ok(said)
}

/// Removes the least recently used entries until the cache holds at most
/// `max_bytes`, and anything in it that is no complete entry; the entries
/// removed.
pub fn prune(cache_root: &Path, max_bytes: u64) -> Result<Vec<SeedResult>> {
    let root = cache_dir(cache_root);
    let entries = list(cache_root);
    for dir in std::fs::read_dir(&root).into_iter().flatten().flatten() {
        let name = dir.file_name().to_string_lossy().into_owned();
        let whole = entries.iter().any(|e| e.key == name);
        // A store under way is a `.partial` of its own: left to it.
        if !whole && !name.ends_with(".partial") {
            snapshot::remove_any(&dir.path())?;
        }
    }
    let mut kept = 0;
    let mut removed = Vec::new();
    for entry in entries {
        if kept + entry.bytes > max_bytes {
            snapshot::remove_any(&root.join(&entry.key))?;
            removed.push(entry);
        } else {
            kept += entry.bytes;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_follows_the_inputs_and_the_command() {
        let repo = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(repo.path().join("migrations")).expect("dir");
        std::fs::write(repo.path().join("seed.py"), "rows = 10").expect("write");
        std::fs::write(repo.path().join("migrations/1.sql"), "create").expect("write");
        let database = Database {
            engine: DbEngine::Sqlite,
            seed: Some(crate::database::DbSeed {
                command: vec!["python3".into(), "seed.py".into()],
                inputs: vec!["seed.py".into(), "migrations".into()],
            }),
            ..Database::default()
        };
        let path = std::env::var_os("PATH").unwrap_or_default();
        let key = |db: &Database| super::key(repo.path(), "main", db, &path).expect("key");
        let first = key(&database);
        assert!(is_key(&first), "{first}");
        assert_eq!(key(&database), first, "the same inputs, the same key");
        std::fs::write(repo.path().join("migrations/2.sql"), "alter").expect("write");
        let second = key(&database);
        assert_ne!(second, first, "a new file in an input directory");
        std::fs::write(repo.path().join("seed.py"), "rows = 11").expect("write");
        assert_ne!(key(&database), second, "a changed input file");
        let mut other = database.clone();
        other.seed.as_mut().expect("seed").command.push("--more".into());
        assert_ne!(key(&other), key(&database), "another command");
    }

    #[test]
    fn the_cache_keeps_its_bound_dropping_the_least_recently_used() {
        let root = tempfile::tempdir().expect("tempdir");
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut keys = Vec::new();
        for n in 0..3u8 {
            let file = root.path().join(format!("db{n}"));
            std::fs::write(&file, vec![n; 1000]).expect("write");
            let key = format!("{n:032x}");
            // A plain file stands for a stopped server's data here.
            let source = CopySource {
                name: "main",
                engine: DbEngine::Redis,
                data: &file,
                live: None,
                path: &path,
            };
            store(root.path(), &key, &source, None).expect("store");
            keys.push(key);
        }
        // Used at 100, 200 and 300 s; then the oldest used again: the
        // middle one is now the least recently used.
        for (n, key) in keys.iter().enumerate() {
            let entry = cached(root.path(), key).expect("cached");
            let used = 100 * (n as u64 + 1);
            write_record(root.path(), &SeedResult { used, ..entry }).expect("record");
        }
        let oldest = cached(root.path(), &keys[0]).expect("cached");
        let out = root.path().join("restored");
        restore(root.path(), &oldest, &out, None, &path).expect("restore");
        assert_eq!(std::fs::read(&out).expect("read"), vec![0; 1000]);
        std::fs::create_dir_all(cache_dir(root.path()).join("junk")).expect("junk");
        let removed = prune(root.path(), 2000).expect("prune");
        let gone: Vec<&str> = removed.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(gone, [keys[1].as_str()]);
        assert_eq!(list(root.path()).len(), 2);
        assert!(!cache_dir(root.path()).join("junk").exists());
    }
}

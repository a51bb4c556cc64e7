//! A database's data copied whole: from another pod (`omnidev db clone`),
//! into a snapshot kept in the pod (`db snapshot`), and back (`db
//! restore`).
//!
//! A copy is consistent while its source runs and never writes into the
//! source: SQLite through its online backup API (`sqlite3 -readonly …
//! .backup`), a running Postgres through a base backup over its own socket
//! (`pg_basebackup`, its WAL streamed beside it), a running MariaDB
//! through `mariadb-backup` (then prepared), a running Redis through its
//! own RDB transfer (`redis-cli --rdb`, made the base of its append-only
//! files), and a stopped server as its data directory, copied with shared
//! blocks where the file system allows (`cp --reflink=auto`; on APFS `cp
//! -c`). Every copy is made under a name of
//! its own and renamed into place only when complete; data is swapped in
//! ([`swap_in`]) with the old kept beside it until the new is in, so a
//! swap cut short leaves data a server starts on ([`recover`]).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::database::{DbEngine, DbParts};
use crate::error::{Error, Result};

/// Where a database's data is read from.
#[derive(Debug, Clone, Copy)]
pub struct CopySource<'a> {
    /// The database's name (for messages).
    pub name: &'a str,
    /// Its engine.
    pub engine: DbEngine,
    /// Its data: a server's data directory, an SQLite file.
    pub data: &'a Path,
    /// Its parts while its server runs (`None`: stopped, or SQLite).
    pub live: Option<&'a DbParts>,
    /// The `PATH` its programs are found on.
    pub path: &'a std::ffi::OsStr,
}

/// What a copy took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Copied {
    /// The bytes of the copy.
    pub bytes: u64,
    /// How long it took.
    pub took: Duration,
    /// How it was made.
    pub how: How,
}

impl Copied {
    /// What it cost, in words: `45.3 MiB in 0.21 s (a base backup of the
    /// running server)`.
    pub fn said(&self) -> String {
        format!("{} in {:.2} s ({})", mib(self.bytes), self.took.as_secs_f64(), self.how.word())
    }
}

pub use omnidev_core::platform::mib;

/// How a copy was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// SQLite's online backup.
    Backup,
    /// Postgres's base backup of the running server.
    BaseBackup,
    /// `mariadb-backup` of the running server, prepared.
    MariadbBackup,
    /// The running Redis's own RDB transfer.
    RedisDump,
    /// The stopped data directory, blocks shared where the file system
    /// allows.
    Files,
}

impl How {
    /// In words.
    pub fn word(self) -> &'static str {
        match self {
            How::Backup => "SQLite's online backup",
            How::BaseBackup => "a base backup of the running server",
            How::MariadbBackup => "mariadb-backup of the running server",
            How::RedisDump => "the running server's RDB dump",
            How::Files => "a copy of its stopped files (blocks shared where the file system can)",
        }
    }
}

/// `path` with `suffix` appended to its file name.
pub fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    path.with_file_name(name)
}

/// Copies `source`'s data to `dest` (which must not exist): made as
/// `dest.partial`, renamed when complete.
pub fn copy(source: &CopySource<'_>, dest: &Path) -> Result<Copied> {
    let started = std::time::Instant::now();
    let fail = |message: String, help: &str| Error::DatabaseData {
        name: source.name.to_owned(),
        message,
        help: help.to_owned(),
    };
    if std::fs::symlink_metadata(source.data).is_err() {
        return Err(fail(
            format!("it has no data yet at {}", source.data.display()),
            "start its pod once (`omnidev up`), or pick another source",
        ));
    }
    if std::fs::symlink_metadata(dest).is_ok() {
        return Err(fail(
            format!("{} is there already", dest.display()),
            "move it away, or pick another name",
        ));
    }
    let partial = beside(dest, ".partial");
    remove_any(&partial)?;
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent).map_err(Error::io("create", parent))?;
    }
    let how = match (source.engine, source.live) {
        (DbEngine::Sqlite, _) => {
            sqlite_backup(source, &partial)?;
            How::Backup
        }
        (DbEngine::Postgres, Some(parts)) => {
            base_backup(source, parts, &partial)?;
            How::BaseBackup
        }
        (DbEngine::Mariadb, Some(parts)) => {
            mariadb_backup(source, parts, &partial)?;
            How::MariadbBackup
        }
        (DbEngine::Redis, Some(parts)) => {
            redis_dump(source, parts, &partial)?;
            How::RedisDump
        }
        (_, None) => {
            copy_files(source.data, &partial)?;
            How::Files
        }
    };
    std::fs::rename(&partial, dest).map_err(Error::io("rename into place", dest))?;
    Ok(Copied { bytes: size(dest), took: started.elapsed(), how })
}

/// `sqlite3 -readonly DATA ".backup NAME"`, in the directory of `dest`:
/// the dot-command names a plain file, so no path is quoted into it.
fn sqlite_backup(source: &CopySource<'_>, dest: &Path) -> Result<()> {
    let dir = dest.parent().unwrap_or(Path::new("."));
    let name = dest.file_name().unwrap_or_default().to_string_lossy();
    let mut command = Command::new("sqlite3");
    command
        .arg("-readonly")
        .arg(source.data)
        .arg(".timeout 10000")
        .arg(format!(".backup '{name}'"))
        .current_dir(dir);
    run(source.name, command, "sqlite3", "sqlite3")
}

/// A base backup of a running Postgres over its socket (trusted there),
/// its WAL streamed beside it, so the copy starts without its source.
fn base_backup(source: &CopySource<'_>, parts: &DbParts, dest: &Path) -> Result<()> {
    let programs = crate::database::find_programs(DbEngine::Postgres, source.path)?;
    let bin = programs[0].parent().unwrap_or(Path::new("/"));
    let mut command = Command::new(bin.join("pg_basebackup"));
    command
        .args(["-h", &parts["socket-dir"], "-p", &parts["port"]])
        .args(["-U", &parts["user"], "-w", "-X", "stream", "-c", "fast"])
        .arg("-D")
        .arg(dest);
    run(source.name, command, "pg_basebackup", "postgresql")
}

/// `mariadb-backup` of a running MariaDB over its socket (the user's own
/// account there), then prepared, so the copy starts as a stopped
/// server's data.
fn mariadb_backup(source: &CopySource<'_>, parts: &DbParts, dest: &Path) -> Result<()> {
    let program = ["/usr/bin/mariadb-backup", "/usr/local/bin/mariadb-backup"]
        .iter()
        .map(PathBuf::from)
        .chain(std::env::split_paths(source.path).map(|dir| dir.join("mariadb-backup")))
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("mariadb-backup"));
    let mut backup = Command::new(&program);
    backup
        .arg("--backup")
        .arg(format!("--socket={}", parts["socket"]))
        .arg(format!("--user={}", parts["user"]))
        .arg(format!("--target-dir={}", dest.display()));
    run(source.name, backup, "mariadb-backup", "mariadb-backup")?;
    let mut prepare = Command::new(&program);
    prepare.arg("--prepare").arg(format!("--target-dir={}", dest.display()));
    run(source.name, prepare, "mariadb-backup", "mariadb-backup")
}

/// A running Redis's dataset as RDB (`redis-cli --rdb`: the server forks
/// and streams it; nothing is written where its data is), made the base
/// of an append-only directory, as the pod's Redis keeps its data.
fn redis_dump(source: &CopySource<'_>, parts: &DbParts, dest: &Path) -> Result<()> {
    let programs = crate::database::find_programs(DbEngine::Redis, source.path)?;
    let aof = dest.join("appendonlydir");
    std::fs::create_dir_all(&aof).map_err(Error::io("create", &aof))?;
    let mut command = Command::new(&programs[1]);
    command
        .args(["-s", &parts["socket"], "--rdb"])
        .arg(aof.join("appendonly.aof.1.base.rdb"))
        .env("REDISCLI_AUTH", &parts["password"]);
    run(source.name, command, "redis-cli", "redis-server")?;
    let manifest = aof.join("appendonly.aof.manifest");
    let line = b"file appendonly.aof.1.base.rdb seq 1 type b\n";
    omnidev_core::fs::write_atomic(&manifest, line).map_err(Error::io("write", &manifest))
}

/// A stopped data directory (or file) copied, blocks shared where the
/// file system allows.
fn copy_files(from: &Path, to: &Path) -> Result<()> {
    let mut command = Command::new("cp");
    if cfg!(target_os = "macos") {
        command.args(["-R", "-p", "-c"]);
    } else {
        command.args(["-a", "--reflink=auto"]);
    }
    command.arg("--").arg(from).arg(to);
    run("data", command, "cp", "coreutils")
}

/// Runs `command` to its end; its output is the error when it fails.
fn run(name: &str, mut command: Command, program: &str, package: &str) -> Result<()> {
    let output = command.output().map_err(|e| Error::DatabaseData {
        name: name.to_owned(),
        message: format!("cannot run `{program}`: {e}"),
        help: format!("install it (`apt install {package}`)"),
    })?;
    if output.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&output.stderr);
    let said = omnidev_core::text::clip(said.trim(), 600);
    Err(Error::DatabaseData {
        name: name.to_owned(),
        message: format!(
            "`{program}` failed ({}): {}",
            output.status,
            omnidev_core::text::quote(&said)
        ),
        help: "its own message above says why".to_owned(),
    })
}

/// The bytes of the files under `path`.
pub fn size(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.len();
    }
    std::fs::read_dir(path).into_iter().flatten().flatten().map(|entry| size(&entry.path())).sum()
}

/// Makes the directory `relative` inside `base` (0700 where new), one
/// component at a time without following a link: a link planted on the
/// way (`snapshots -> /elsewhere`) is an error, never written through.
pub fn make_dir_inside(base: &Path, relative: &Path) -> Result<PathBuf> {
    let dir = base.join(relative);
    omnidev_core::fs::Dir::open(base)
        .and_then(|handle| handle.create_dir_all(relative, 0o700))
        .map_err(Error::io("create (without following a link)", &dir))?;
    Ok(dir)
}

/// Removes `path` (a file or a tree) when it is there.
pub fn remove_any(path: &Path) -> Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => {
            std::fs::remove_dir_all(path).map_err(Error::io("remove", path))
        }
        Ok(_) => std::fs::remove_file(path).map_err(Error::io("remove", path)),
        Err(_) => Ok(()),
    }
}

/// Puts `new` (a complete copy) in place of `data`, its server stopped:
/// the old data is renamed `DATA.previous`, the new renamed in, the old
/// removed. Cut short anywhere, either the old or the new data is in
/// place, or [`recover`] puts the old back.
pub fn swap_in(new: &Path, data: &Path) -> Result<()> {
    recover(data)?;
    let previous = beside(data, ".previous");
    let had = std::fs::symlink_metadata(data).is_ok();
    if had {
        std::fs::rename(data, &previous).map_err(Error::io("move aside", data))?;
    }
    std::fs::rename(new, data).map_err(Error::io("move into place", data))?;
    if had {
        remove_any(&previous)?;
    }
    Ok(())
}

/// A server's data removed (`omnidev db reset`), its server stopped: it
/// makes new data at its next start.
pub fn remove_data(data: &Path) -> Result<()> {
    recover(data)?;
    remove_any(data)
}

/// The password file `from` (a clone's source's) copied over `to` (0600,
/// atomically): the server's users came with its data.
pub fn copy_password(from: &Path, to: &Path) -> Result<()> {
    let read = omnidev_core::fs::read_file(from, 1024)
        .map_err(Error::io("read", from))?
        .unwrap_or_default();
    omnidev_core::fs::write_atomic(to, &read).map_err(Error::io("write", to))
}

/// `sqlite3 DATA .restore` from the SQLite file `from` (an empty one
/// for a reset): the live file takes the copy's pages in one transaction,
/// readers and writers waiting, so services using it run on.
pub fn sqlite_restore(name: &str, from: &Path, data: &Path) -> Result<()> {
    if let Some(dir) = data.parent() {
        std::fs::create_dir_all(dir).map_err(Error::io("create", dir))?;
    }
    let dir = from.parent().unwrap_or(Path::new("."));
    let file = from.file_name().unwrap_or_default().to_string_lossy();
    let mut command = Command::new("sqlite3");
    command.arg(data).arg(".timeout 10000").arg(format!(".restore '{file}'")).current_dir(dir);
    run(name, command, "sqlite3", "sqlite3")
}

/// An SQLite database emptied live (`omnidev db reset`).
pub fn sqlite_reset(name: &str, data: &Path) -> Result<()> {
    let empty = beside(data, ".empty");
    omnidev_core::fs::write_atomic(&empty, b"").map_err(Error::io("write", &empty))?;
    let done = sqlite_restore(name, &empty, data);
    let _ = std::fs::remove_file(&empty);
    done
}

/// After a swap cut short between its renames: the old data put back.
pub fn recover(data: &Path) -> Result<()> {
    let previous = beside(data, ".previous");
    let has_previous = std::fs::symlink_metadata(&previous).is_ok();
    match std::fs::symlink_metadata(data) {
        Err(_) if has_previous => {
            std::fs::rename(&previous, data).map_err(Error::io("put back", data))
        }
        Ok(_) if has_previous => remove_any(&previous),
        _ => Ok(()),
    }
}

/// A snapshot's record (`snapshot.toml` beside its data): written last,
/// so a snapshot without one is incomplete and never restored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Snapshot {
    /// The database.
    pub database: String,
    /// Its label.
    pub label: String,
    /// The engine its data is of.
    pub engine: DbEngine,
    /// When it was taken (seconds since the epoch).
    pub taken: u64,
    /// Its bytes.
    pub bytes: u64,
}

/// The record's file name.
const RECORD: &str = "snapshot.toml";

/// The data's name inside a snapshot's directory.
const DATA: &str = "data";

/// `<pod>/snapshots`.
pub fn snapshots_dir(pod_dir: &Path) -> PathBuf {
    pod_dir.join(crate::layout::SNAPSHOTS_DIR)
}

/// Whether `label` may name a snapshot: 1 to 64 of letters, digits, `.`,
/// `_`, `-`, not starting with `.`.
pub fn is_label(label: &str) -> bool {
    (1..=64).contains(&label.len())
        && !label.starts_with('.')
        && label.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

impl Snapshot {
    /// Its directory in the pod `pod_dir`.
    pub fn dir(&self, pod_dir: &Path) -> PathBuf {
        snapshots_dir(pod_dir).join(&self.database).join(&self.label)
    }

    /// Its data.
    pub fn data(&self, pod_dir: &Path) -> PathBuf {
        self.dir(pod_dir).join(DATA)
    }

    /// Takes a snapshot of `source` into the pod `pod_dir` as `label`.
    pub fn take(pod_dir: &Path, source: &CopySource<'_>, label: &str) -> Result<(Self, Copied)> {
        if !is_label(label) {
            return Err(Error::DatabaseData {
                name: source.name.to_owned(),
                message: format!("{} is no snapshot label", crate::names::shown(label)),
                help: "use 1 to 64 letters, digits, `.`, `_` or `-`".to_owned(),
            });
        }
        let mut snapshot = Self {
            database: source.name.to_owned(),
            label: label.to_owned(),
            engine: source.engine,
            taken: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            bytes: 0,
        };
        let dir = snapshot.dir(pod_dir);
        if std::fs::symlink_metadata(&dir).is_ok() {
            return Err(Error::DatabaseData {
                name: source.name.to_owned(),
                message: format!("a snapshot `{label}` is there already"),
                help: "pick another label, or `omnidev db snapshots` to see them".to_owned(),
            });
        }
        let inside =
            Path::new(crate::layout::SNAPSHOTS_DIR).join(&snapshot.database).join(&snapshot.label);
        make_dir_inside(pod_dir, &inside)?;
        let copied = copy(source, &dir.join(DATA)).inspect_err(|_| {
            let _ = std::fs::remove_dir_all(&dir);
        })?;
        snapshot.bytes = copied.bytes;
        let record = toml::to_string(&snapshot).unwrap_or_default();
        omnidev_core::fs::write_atomic(&dir.join(RECORD), record.as_bytes())
            .map_err(Error::io("write", dir.join(RECORD)))?;
        Ok((snapshot, copied))
    }

    /// The complete snapshots of the pod `pod_dir`, by database and time.
    pub fn list(pod_dir: &Path) -> Vec<Self> {
        let mut all = Vec::new();
        let root = snapshots_dir(pod_dir);
        for database in std::fs::read_dir(&root).into_iter().flatten().flatten() {
            for entry in std::fs::read_dir(database.path()).into_iter().flatten().flatten() {
                let record = entry.path().join(RECORD);
                let read = omnidev_core::fs::read_file(&record, 64 * 1024).ok().flatten();
                let parsed = read
                    .and_then(|bytes| String::from_utf8(bytes).ok())
                    .and_then(|text| toml::from_str::<Self>(&text).ok());
                // Only a record that names the directory it is in.
                if let Some(snapshot) = parsed.filter(|s| {
                    is_label(&s.label)
                        && crate::names::is_valid(&s.database)
                        && s.dir(pod_dir) == entry.path()
                }) {
                    all.push(snapshot);
                }
            }
        }
        all.sort_by(|a, b| (&a.database, a.taken, &a.label).cmp(&(&b.database, b.taken, &b.label)));
        all
    }

    /// Snapshot `label` of database `name`, or an error naming those there
    /// are.
    pub fn find(pod_dir: &Path, name: &str, label: &str) -> Result<Self> {
        let all: Vec<Self> =
            Self::list(pod_dir).into_iter().filter(|s| s.database == name).collect();
        let labels: Vec<&str> = all.iter().map(|s| s.label.as_str()).collect();
        all.iter().find(|s| s.label == label).cloned().ok_or_else(|| Error::DatabaseData {
            name: name.to_owned(),
            message: format!(
                "no snapshot {} (there {})",
                crate::names::shown(label),
                if labels.is_empty() {
                    "are none".to_owned()
                } else {
                    format!("are {}", labels.join(", "))
                }
            ),
            help: "`omnidev db snapshot NAME [LABEL]` takes one".to_owned(),
        })
    }

    /// Removes it.
    pub fn remove(&self, pod_dir: &Path) -> Result<()> {
        remove_any(&self.dir(pod_dir))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_swap_cut_short_leaves_the_old_data_or_the_new() {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("main");
        std::fs::create_dir(&data).expect("data");
        std::fs::write(data.join("rows"), "old").expect("old");
        let new = dir.path().join("main.restoring");
        std::fs::create_dir(&new).expect("new");
        std::fs::write(new.join("rows"), "new").expect("new rows");
        // Cut after the first rename: the old is put back.
        std::fs::rename(&data, beside(&data, ".previous")).expect("aside");
        recover(&data).expect("recover");
        assert_eq!(std::fs::read_to_string(data.join("rows")).expect("read"), "old");
        swap_in(&new, &data).expect("swap");
        assert_eq!(std::fs::read_to_string(data.join("rows")).expect("read"), "new");
        assert!(!beside(&data, ".previous").exists());
    }

    #[test]
    fn a_snapshot_is_never_written_through_a_link_planted_in_the_pod() {
        let pod = tempfile::tempdir().expect("pod");
        let elsewhere = tempfile::tempdir().expect("elsewhere");
        std::os::unix::fs::symlink(elsewhere.path(), pod.path().join("snapshots")).expect("link");
        let data = pod.path().join("data.db");
        std::fs::write(&data, b"").expect("data");
        let path = std::env::var_os("PATH").unwrap_or_default();
        let source = CopySource {
            name: "lite",
            engine: DbEngine::Sqlite,
            data: &data,
            live: None,
            path: &path,
        };
        let refused = Snapshot::take(pod.path(), &source, "x").expect_err("refused");
        assert!(refused.to_string().contains("without following a link"), "{refused}");
        let written = std::fs::read_dir(elsewhere.path()).expect("list").count();
        assert_eq!(written, 0, "written through the link");
    }

    #[test]
    fn labels_are_plain_names() {
        assert!(is_label("before-migration.2") && is_label("20261207-1130"));
        assert!(!is_label("") && !is_label("../x") && !is_label(".hidden") && !is_label("a b"));
    }
}

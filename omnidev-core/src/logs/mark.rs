//! The reload mark: where the pod's last reload (or start) left each
//! service's log file.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::event::Changes;

/// The file in a pod's log directory that says where the last reload, or
/// the pod's start, left each service's log file (`omnidev logs
/// --since-reload`).
pub const MARK_FILE: &str = "reload-mark.json";

/// What to tell people when the mark at `path` could not be written.
pub(crate) fn mark_failed(path: &Path, cause: &str) -> String {
    format!(
        "could not write {}: {cause}; `omnidev logs --since-reload` may start at an earlier \
         reload",
        path.display()
    )
}

/// The largest [`MARK_FILE`] read (a real one is a few hundred bytes).
const MARK_MAX_BYTES: u64 = 1024 * 1024;

/// Where the pod's last reload (or its start, when none followed) left the
/// services' log files: written at that moment to [`MARK_FILE`], read by
/// `omnidev logs --since-reload`, on a running pod or a stopped one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Mark {
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// A reload; `false`: the pod's start.
    pub reload: bool,
    /// The changed files that asked for the reload (at most
    /// [`Changes::KEPT`]; none for a start or a restart asked for by hand).
    #[serde(default)]
    pub files: Vec<String>,
    /// Per service, where its log file stood.
    pub logs: BTreeMap<String, Position>,
}

impl Mark {
    /// Says what it marks: a reload for `changes` (`None`: the pod's start).
    pub(crate) fn name(&mut self, changes: Option<&Changes>) {
        self.reload = changes.is_some();
        self.files = changes.map(|c| c.paths.clone()).unwrap_or_default();
    }

    /// Its file's text. Atomic but not flushed: a mark matters only while
    /// the pod runs.
    pub(crate) fn encode(&self) -> Vec<u8> {
        // A mark holds strings and numbers only: encoding cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// A [`Mark`] taken and not yet written, with the file it goes to.
#[derive(Debug)]
pub(crate) struct TakenMark {
    pub(crate) path: PathBuf,
    pub(crate) mark: Mark,
}

/// A place in a log file that rotation does not move: the file (by inode,
/// whatever its name is now) and the byte offset in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    /// The file's inode.
    pub inode: u64,
    /// Bytes written to it before the mark.
    pub offset: u64,
}

impl Mark {
    /// Reads the mark in the log directory `dir`. A missing file is
    /// [`Error::Read`](crate::Error::Read) with
    /// [`io::ErrorKind::NotFound`]; one that is not a mark is
    /// [`io::ErrorKind::InvalidData`].
    pub fn read(dir: &Path) -> crate::Result<Self> {
        let path = dir.join(MARK_FILE);
        let invalid = |message: String| io::Error::new(io::ErrorKind::InvalidData, message);
        // Through the one door: a FIFO planted as the mark is refused at
        // once, naming what it is, instead of blocking the open.
        crate::fs::read_file(&path, MARK_MAX_BYTES)
            .and_then(|bytes| bytes.ok_or_else(|| io::ErrorKind::NotFound.into()))
            .and_then(|bytes| serde_json::from_slice(&bytes).map_err(|e| invalid(e.to_string())))
            .map_err(|source| crate::Error::Read { path, source })
    }

    /// When it was written.
    pub fn at(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(self.at_ms)
    }
}

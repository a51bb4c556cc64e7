//! Atomic reading and writing of the pod's small TOML state files.

use std::path::Path;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

/// Serialises `value` as TOML and replaces `path` with it atomically
/// (temporary file, fsync, rename): readers see the old file or the new one.
///
/// ```
/// let tmp = tempfile::tempdir().unwrap();
/// let path = tmp.path().join("x.toml");
/// let mut map = std::collections::BTreeMap::new();
/// map.insert("a".to_owned(), 1);
/// omnidev_pod::state::write_toml(&path, &map).unwrap();
/// let back: std::collections::BTreeMap<String, i32> = omnidev_pod::state::read_toml(&path).unwrap().unwrap();
/// assert_eq!(back, map);
/// ```
pub fn write_toml<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let text = toml::to_string(value)
        .map_err(|e| Error::Serialise { what: "a TOML state file", message: e.to_string() })?;
    omnidev_core::fs::write_atomic(path, text.as_bytes())
        .map_err(|source| Error::Write { path: path.to_path_buf(), source })
}

/// Reads a TOML state file: `Ok(None)` when it does not exist, an
/// [`Error::CorruptState`] naming the file and the problem when it does not
/// parse. A corrupt file is never modified.
pub fn read_toml<T: DeserializeOwned>(path: &Path) -> Result<Option<T>> {
    let Some(text) = read_optional(path)? else {
        return Ok(None);
    };
    toml::from_str(&text).map(Some).map_err(|e| Error::CorruptState {
        path: path.to_path_buf(),
        message: e.to_string().trim().to_owned(),
    })
}

/// The most a state file may hold (`pod.toml`, the registry, a marker):
/// far above what omnidev writes, and a bound on what a planted file costs.
pub const MAX_STATE_BYTES: u64 = 4 << 20;

/// The text of a state file through [`omnidev_core::fs`]: a symbolic link
/// as its name, or anything but a regular file, is an error, never followed;
/// `None` when missing.
fn read_optional(path: &Path) -> Result<Option<String>> {
    let read = omnidev_core::fs::read_file(path, MAX_STATE_BYTES).map_err(Error::io("read", path));
    let Some(bytes) = read? else {
        return Ok(None);
    };
    String::from_utf8(bytes).map(Some).map_err(|_| Error::CorruptState {
        path: path.to_path_buf(),
        message: "it is not UTF-8 text".to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn corrupt_file_is_named_and_left_alone() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("pod.toml");
        std::fs::write(&path, "[ports\nserver = 1").expect("write");
        let err = read_toml::<BTreeMap<String, toml::Value>>(&path).expect_err("corrupt");
        let text = err.to_string();
        assert!(text.contains(&path.display().to_string()), "{text}");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "[ports\nserver = 1");
    }

    #[test]
    fn rewrite_replaces_the_file_by_rename_and_leaves_no_temp_files() {
        use std::os::unix::fs::MetadataExt;
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("pod.toml");
        let first = BTreeMap::from([("a".to_owned(), 1)]);
        write_toml(&path, &first).expect("write");
        // A reader holding the old file keeps seeing the old contents.
        let old_inode = std::fs::metadata(&path).expect("meta").ino();
        let reader = std::fs::File::open(&path).expect("open");
        write_toml(&path, &BTreeMap::from([("a".to_owned(), 2)])).expect("rewrite");
        assert_ne!(std::fs::metadata(&path).expect("meta").ino(), old_inode);
        let mut old = String::new();
        std::io::Read::read_to_string(&mut &reader, &mut old).expect("read old");
        assert_eq!(old, "a = 1\n");
        let back: BTreeMap<String, i32> = read_toml(&path).expect("read").expect("present");
        assert_eq!(back["a"], 2);
        assert_eq!(std::fs::read_dir(tmp.path()).expect("ls").count(), 1);
    }
}

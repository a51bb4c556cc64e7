//! Small file helpers: private directories, and atomic writes into them.

use std::path::Path;

use crate::{Error, Result};

/// Writes `bytes` to `path` with [`omnidev_core::fs::write_atomic`],
/// creating the parent directory (mode 0700) first if needed.
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    create_private_dir(dir)?;
    omnidev_core::fs::write_atomic(path, bytes).map_err(|source| Error::io("replace", path, source))
}

/// Creates `dir` and its parents; new directories get mode 0700 because they
/// hold per-user state.
pub fn create_private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| Error::io("create directory", dir, source))
}

/// The most an install state file may hold (`install.toml`, uv's
/// receipts): far above what they hold, a bound on a planted file.
const MAX_STATE_BYTES: u64 = 1 << 20;

/// The text of the state file `path` through [`omnidev_core::fs`] (a
/// regular file, not through a link, never blocking, bounded);
/// `Ok(None)` when it does not exist.
pub fn read_optional(path: &Path) -> Result<Option<String>> {
    omnidev_core::fs::read_file(path, MAX_STATE_BYTES)
        .and_then(omnidev_core::fs::text)
        .map_err(|source| Error::io("read", path, source))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_private_creates_parents_and_replaces() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("a/b/file.txt");
        write_private(&path, b"one").expect("first write");
        write_private(&path, b"two").expect("second write");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "two");
        let leftovers: Vec<_> = std::fs::read_dir(path.parent().expect("parent"))
            .expect("list")
            .collect();
        assert_eq!(leftovers.len(), 1, "no temp files are left behind");
    }

    #[test]
    fn read_optional_missing_is_none() {
        let dir = tempfile::tempdir().expect("temp dir");
        assert_eq!(read_optional(&dir.path().join("nope")).expect("read"), None);
    }
}

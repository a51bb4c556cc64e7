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

/// Reads `path` to a string; `Ok(None)` when it does not exist.
pub fn read_optional(path: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(Error::io("read", path, source)),
    }
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

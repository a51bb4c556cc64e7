//! Small file helpers: atomic writes and private directories.

use std::io::Write;
use std::path::Path;

use crate::{Error, Result};

/// Writes `bytes` to `path` atomically: a temp file in the same directory,
/// fsync, then rename over `path`. Readers see the old or the new content,
/// never a torn file. Creates the parent directory (mode 0700) if needed.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    create_private_dir(dir)?;
    let mut temp = tempfile::Builder::new()
        .prefix(".omnidev-")
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(|source| Error::io("create a temporary file in", dir, source))?;
    temp.write_all(bytes)
        .and_then(|()| temp.as_file().sync_all())
        .map_err(|source| Error::io("write", temp.path(), source))?;
    temp.persist(path)
        .map_err(|error| Error::io("replace", path, error.error))?;
    Ok(())
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
    fn write_atomic_creates_parents_and_replaces() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("a/b/file.txt");
        write_atomic(&path, b"one").expect("first write");
        write_atomic(&path, b"two").expect("second write");
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

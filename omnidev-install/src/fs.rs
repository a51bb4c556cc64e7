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
/// hold per-user state, and one that was there already must be this
/// user's alone ([`omnidev_core::fs::check_private`], as the pods' cache
/// root is checked).
pub fn create_private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| Error::io("create directory", dir, source))?;
    // One that was there already must be as private as a new one.
    match omnidev_core::fs::check_private(dir, false) {
        Ok(None) => Ok(()),
        Ok(Some(found)) => {
            Err(Error::UnsafeDir { path: dir.to_path_buf(), reason: found.reason, fix: found.fix })
        }
        Err(source) => Err(Error::io("examine", dir, source)),
    }
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
    fn a_directory_others_can_write_in_is_refused_and_left_as_it_is() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("temp dir");
        let shared = dir.path().join("cache/omnidev");
        std::fs::create_dir_all(&shared).expect("mkdir");
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let refused = create_private_dir(&shared).expect_err("refused");
        assert!(refused.to_string().contains("lets others write in it"), "{refused}");
        let mode = std::fs::metadata(&shared).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o777, "never chmod what omnidev did not make");
        let refused =
            write_private(&shared.join("omnigent-check.json"), b"{}").expect_err("refused");
        assert!(matches!(refused, Error::UnsafeDir { .. }), "{refused}");
        assert!(!shared.join("omnigent-check.json").exists());
    }

    #[test]
    fn write_private_creates_parents_and_replaces() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("a/b/file.txt");
        write_private(&path, b"one").expect("first write");
        write_private(&path, b"two").expect("second write");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "two");
        let leftovers: Vec<_> =
            std::fs::read_dir(path.parent().expect("parent")).expect("list").collect();
        assert_eq!(leftovers.len(), 1, "no temp files are left behind");
    }

    #[test]
    fn read_optional_missing_is_none() {
        let dir = tempfile::tempdir().expect("temp dir");
        assert_eq!(read_optional(&dir.path().join("nope")).expect("read"), None);
    }
}

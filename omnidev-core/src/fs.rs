//! Small file-system helpers shared by the omnidev crates.

use std::io::{self, Write};
use std::path::Path;

/// Replaces `path` with `contents` atomically and durably: the bytes go
/// to a temporary file (`.omnidev-*.tmp`) in the same directory, which is
/// flushed to disk and renamed over `path`, and then the directory itself is
/// flushed so the rename survives a crash. A reader sees either the old file
/// or the new one, never a torn one. The one such helper of every omnidev
/// crate; callers wrap the error with their own context.
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("state.json");
/// omnidev_core::fs::write_atomic(&path, b"{}").unwrap();
/// assert_eq!(std::fs::read(&path).unwrap(), b"{}");
/// ```
pub fn write_atomic(path: &Path, contents: &[u8]) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".omnidev-")
        .suffix(".tmp")
        .tempfile_in(dir)?;
    tmp.write_all(contents)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    // Make the rename itself durable.
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_existing_file_and_leaves_no_temp_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a.toml");
        std::fs::write(&path, "old").expect("write");
        write_atomic(&path, b"new").expect("atomic write");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "new");
        let entries = std::fs::read_dir(dir.path()).expect("read_dir").count();
        assert_eq!(entries, 1);
    }
}

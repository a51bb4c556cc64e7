//! `{python}`: the Python version a pod's `uv run` pins, from the
//! checkout's `.python-version` (else 3.12), so an exported `UV_PYTHON`
//! cannot move the pod's `.venv` to another interpreter.

use std::path::Path;

/// The version pinned when the checkout has no `.python-version`.
pub const DEFAULT_PYTHON: &str = "3.12";

/// Most bytes of `.python-version` read, and most characters of a version.
const MAX_FILE: u64 = 4096;
const MAX_VERSION: usize = 64;

/// The pinned version, or why `.python-version` cannot give one (its
/// path, what is wrong and what to do).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PythonPin(pub Result<String, String>);

impl Default for PythonPin {
    fn default() -> Self {
        Self(Ok(DEFAULT_PYTHON.to_owned()))
    }
}

impl PythonPin {
    /// The first version line (not empty, not a `#` comment) of
    /// `<repo>/.python-version`, as uv reads it; [`DEFAULT_PYTHON`] when
    /// the file is missing or holds none.
    ///
    /// ```
    /// use omnidev_pod::python::PythonPin;
    /// let repo = tempfile::tempdir().unwrap();
    /// assert_eq!(PythonPin::of_checkout(repo.path()).0.unwrap(), "3.12");
    /// std::fs::write(repo.path().join(".python-version"), "# pinned\n3.13\n").unwrap();
    /// assert_eq!(PythonPin::of_checkout(repo.path()).0.unwrap(), "3.13");
    /// ```
    pub fn of_checkout(repo: &Path) -> Self {
        let path = repo.join(".python-version");
        let read = omnidev_core::fs::read_linked(&path, MAX_FILE).and_then(omnidev_core::fs::text);
        let text = match read {
            Ok(Some(text)) => text,
            Ok(None) => return Self::default(),
            Err(reason) => {
                return Self(Err(format!("cannot read {}: {reason}", path.display())));
            }
        };
        let Some(version) = text
            .lines()
            .map(str::trim)
            .find(|line| !line.is_empty() && !line.starts_with('#'))
        else {
            return Self::default();
        };
        let valid = version.len() <= MAX_VERSION
            && version
                .chars()
                .all(|c| c.is_ascii_graphic() && !matches!(c, '\'' | '"' | '`' | '\\'));
        if valid {
            Self(Ok(version.to_owned()))
        } else {
            let shown: String = version.chars().take(MAX_VERSION).collect();
            Self(Err(format!(
                "{} holds `{}`, which is not a Python version (at most {MAX_VERSION} \
                 printable characters, such as `3.12`); fix the file or remove it \
                 (then {DEFAULT_PYTHON} is used)",
                path.display(),
                shown.escape_debug()
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hostile_or_unreadable_file_is_an_error_naming_it() {
        let repo = tempfile::tempdir().expect("tempdir");
        let file = repo.path().join(".python-version");
        std::fs::write(&file, "3.12 --index-url=http://evil\n").expect("write");
        let reason = PythonPin::of_checkout(repo.path()).0.expect_err("spaces");
        assert!(reason.contains(".python-version"), "{reason}");
        std::fs::write(&file, "x".repeat(100_000)).expect("write");
        assert!(PythonPin::of_checkout(repo.path()).0.is_err());
        std::fs::write(&file, b"\xff\xfe").expect("write");
        let reason = PythonPin::of_checkout(repo.path()).0.expect_err("bytes");
        assert!(reason.contains("UTF-8"), "{reason}");
        std::fs::remove_file(&file).expect("remove");
        std::fs::create_dir(&file).expect("dir");
        assert!(PythonPin::of_checkout(repo.path()).0.is_err());
        std::fs::remove_dir(&file).expect("rmdir");
        std::fs::write(&file, "\n# nothing\n\n").expect("write");
        assert_eq!(PythonPin::of_checkout(repo.path()).0.as_deref(), Ok("3.12"));
        std::fs::write(&file, "cpython@3.12.7\n").expect("write");
        assert_eq!(
            PythonPin::of_checkout(repo.path()).0.as_deref(),
            Ok("cpython@3.12.7")
        );
    }
}

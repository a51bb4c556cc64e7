//! Env files (`env-files = [".env", ".env.local"]`): dotenv syntax read with
//! `dotenvy` — `KEY=value`, `export KEY=value`, `#` comments, single quotes
//! (literal), double quotes (with `\n`-style escapes), and `${OTHER}`
//! references to the variables above it or in the environment.
//!
//! Paths are relative to the checkout root. A file that does not exist is
//! skipped (a `.env.local` only some people have); any other read error,
//! a file over [`MAX_ENV_FILE_BYTES`], or a line dotenv cannot parse is an
//! error naming the file. Later files win over earlier ones.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{Error, Result};

/// The largest env file read (1 MiB): a `.env` is a few hundred bytes; a
/// larger file is almost certainly not one.
pub const MAX_ENV_FILE_BYTES: u64 = 1 << 20;

/// The variables of `files` (relative to `repo`), later files winning.
///
/// ```
/// let repo = tempfile::tempdir().unwrap();
/// std::fs::write(repo.path().join(".env"), "export A=1\nB='x y' # note\n").unwrap();
/// std::fs::write(repo.path().join(".env.local"), "A=2\n").unwrap();
/// let files = [".env".to_owned(), ".env.local".to_owned(), ".env.missing".to_owned()];
/// let vars = omnidev_pod::env_file::load(repo.path(), &files).unwrap();
/// assert_eq!(vars["A"], "2");
/// assert_eq!(vars["B"], "x y");
/// ```
pub fn load(repo: &Path, files: &[String]) -> Result<BTreeMap<String, String>> {
    let mut vars = BTreeMap::new();
    for file in files {
        let path = repo.join(file);
        let read = omnidev_core::fs::read_linked(&path, MAX_ENV_FILE_BYTES)
            .and_then(omnidev_core::fs::text);
        let Some(text) = read.map_err(Error::io("read the env file", &path))? else {
            continue;
        };
        for item in dotenvy::from_read_iter(text.as_bytes()) {
            let (key, value) = item.map_err(|e| Error::EnvFile {
                path: path.clone(),
                message: describe(&text, &e),
            })?;
            vars.insert(key, value);
        }
    }
    Ok(vars)
}

/// dotenvy's parse error with the line number it happened on.
fn describe(text: &str, error: &dotenvy::Error) -> String {
    match error {
        dotenvy::Error::LineParse(line, index) => {
            let number = text
                .lines()
                .position(|l| l.contains(line.lines().next().unwrap_or(line)))
                .map_or_else(String::new, |i| format!("line {}: ", i + 1));
            format!(
                "{number}cannot parse {} at character {}",
                crate::names::shown(line.lines().next().unwrap_or(line)),
                index + 1
            )
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::write(dir.join(name), text).expect("write");
    }

    #[test]
    fn dotenv_syntax() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(
            dir.path(),
            ".env",
            "# a comment\n\nexport EXPORTED=yes\nPLAIN=\"a b\"\nSINGLE='$NOT ${EXPANDED}'\n\
             DOUBLE=\"line1\\nline2\"\nHASH=value # trailing comment\nREF=${PLAIN}!\nEMPTY=\n",
        );
        let vars = load(dir.path(), &[".env".into()]).expect("load");
        assert_eq!(vars["EXPORTED"], "yes");
        assert_eq!(vars["PLAIN"], "a b");
        assert_eq!(vars["SINGLE"], "$NOT ${EXPANDED}");
        assert_eq!(vars["DOUBLE"], "line1\nline2");
        assert_eq!(vars["HASH"], "value");
        assert_eq!(vars["REF"], "a b!");
        assert_eq!(vars["EMPTY"], "");
    }

    #[test]
    fn later_files_win_and_missing_ones_are_skipped() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(dir.path(), ".env", "A=1\nB=1\n");
        write(dir.path(), ".env.local", "B=2\n");
        let files = [".env.absent".into(), ".env".into(), ".env.local".into()];
        let vars = load(dir.path(), &files).expect("load");
        assert_eq!((vars["A"].as_str(), vars["B"].as_str()), ("1", "2"));
    }

    #[test]
    fn a_bad_line_names_the_file_and_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(dir.path(), ".env", "GOOD=1\nBAD LINE\n");
        let error = load(dir.path(), &[".env".into()]).expect_err("bad line");
        let text = error.to_string();
        assert!(text.contains(".env"), "{text}");
        assert!(text.contains("line 2"), "{text}");
    }

    #[test]
    fn an_unreadable_or_huge_file_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join(".env")).expect("a directory");
        assert!(load(dir.path(), &[".env".into()]).is_err());
        let big = "A=".to_owned() + &"x".repeat(usize::try_from(MAX_ENV_FILE_BYTES).expect("fits"));
        write(dir.path(), "big.env", &big);
        let error = load(dir.path(), &["big.env".into()]).expect_err("too big");
        assert!(error.to_string().contains("big.env"), "{error}");
    }
}

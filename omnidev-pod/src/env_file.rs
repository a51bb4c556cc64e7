//! Env files (`env-files = [".env", ".env.local"]`), read as foreman and
//! honcho read a `.env`: a value means what it says, and `$` is always
//! literal (neither tool expands anything).
//!
//! - `KEY=value` per line, `export KEY=value` too; a key is `[A-Za-z_]`
//!   then `[A-Za-z0-9_]`; blank lines and `#` lines are skipped.
//! - Unquoted: the rest of the line, trimmed, up to a ` #` comment;
//!   backslashes and quotes inside are kept as written.
//! - 'Single' quotes: every character as written (a value may go on over
//!   lines until its quote closes).
//! - "Double" quotes: `\n`, `\t`, `\r`, `\"`, `\\` and `\$` escapes (over
//!   lines too).
//!
//! What the other dotenv readers would take differently is an error with
//! its line, never a silent change: a `$NAME` or `${NAME}` outside single
//! quotes (which docker compose, python-dotenv and dotenvy expand, and
//! foreman and honcho keep; single quotes or `\$` say it is literal), an
//! unknown escape, an unclosed quote, text after a closing quote, a line
//! that is not an assignment.
//!
//! Paths are relative to the checkout root. A file that does not exist is
//! skipped (a `.env.local` only some people have); any other read error or
//! a file over [`MAX_ENV_FILE_BYTES`] is an error naming the file. Later
//! files win over earlier ones.

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
/// std::fs::write(repo.path().join(".env"), "export A=1\nB='x $y' # note\n").unwrap();
/// std::fs::write(repo.path().join(".env.local"), "A=2\n").unwrap();
/// let files = [".env".to_owned(), ".env.local".to_owned(), ".env.missing".to_owned()];
/// let vars = omnidev_pod::env_file::load(repo.path(), &files).unwrap();
/// assert_eq!(vars["A"], "2");
/// assert_eq!(vars["B"], "x $y");
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
        let parsed = parse(&text).map_err(|(line, message)| Error::EnvFile {
            path: path.clone(),
            message: format!("line {line}: {message}"),
        })?;
        vars.extend(parsed);
    }
    Ok(vars)
}

/// The assignments of an env file, in order; the first line (from 1) that
/// is not understood and why.
pub fn parse(text: &str) -> std::result::Result<Vec<(String, String)>, (usize, String)> {
    if let Some(at) = text.find('\0') {
        let line = text[..at].matches('\n').count() + 1;
        return Err((line, "a NUL byte cannot be in an environment variable".to_owned()));
    }
    let lines: Vec<&str> =
        text.split('\n').map(|line| line.strip_suffix('\r').unwrap_or(line)).collect();
    let mut vars = Vec::new();
    let mut at = 0;
    while at < lines.len() {
        let number = at + 1;
        let line = lines[at].trim_start();
        at += 1;
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let assignment = line.strip_prefix("export ").map_or(line, str::trim_start);
        let Some((key, rest)) = assignment.split_once('=') else {
            return Err((number, not_an_assignment(line)));
        };
        let key = key.trim_end();
        if !is_key(key) {
            return Err((number, not_an_assignment(line)));
        }
        let rest = rest.trim_start();
        let value = if let Some(quote @ ('\'' | '"')) = rest.chars().next() {
            let (value, after, used) = quoted(&rest[1..], &lines[at..], quote)
                .map_err(|(offset, message)| (number + offset, message))?;
            at += used;
            let after = after.trim_start();
            if !(after.is_empty() || after.starts_with('#')) {
                return Err((
                    number + used,
                    format!(
                        "{} after the closing quote: a comment starts with `#`",
                        crate::names::shown(after)
                    ),
                ));
            }
            value
        } else {
            let value = comment_cut(rest).trim_end();
            literal_dollars(value).map_err(|message| (number, message))?;
            value.to_owned()
        };
        vars.push((key.to_owned(), value));
    }
    Ok(vars)
}

fn not_an_assignment(line: &str) -> String {
    format!(
        "{} is not `KEY=value` (a key is letters, digits and `_`, not starting with a digit)",
        crate::names::shown(line)
    )
}

/// Whether `key` is a variable name: a letter or `_`, then letters, digits, `_`.
pub(crate) fn is_key(key: &str) -> bool {
    let mut chars = key.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// An unquoted value up to a comment (`#` after whitespace).
fn comment_cut(value: &str) -> &str {
    let bytes = value.as_bytes();
    (1..bytes.len())
        .find(|&i| bytes[i] == b'#' && bytes[i - 1].is_ascii_whitespace())
        .map_or(value, |i| &value[..i])
}

/// A `$NAME` or `${NAME}`, which other dotenv readers would expand, is
/// refused; every other `$` is literal.
fn literal_dollars(value: &str) -> std::result::Result<(), String> {
    let bytes = value.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        // `\$` in double quotes (marked by `quoted`), and `$$`, are a `$`
        // to every reader or to none: kept.
        if bytes[i] == 0 || (bytes[i] == b'$' && bytes.get(i + 1) == Some(&b'$')) {
            i += 2;
            continue;
        }
        let next = bytes.get(i + 1).copied();
        if bytes[i] == b'$'
            && next.is_some_and(|b| b == b'{' || b == b'_' || b.is_ascii_alphabetic())
        {
            let end = (i + 1..bytes.len())
                .find(|&j| !(bytes[j].is_ascii_alphanumeric() || b"_{}".contains(&bytes[j])))
                .unwrap_or(bytes.len());
            return Err(format!(
                "{} would be another variable's value to docker compose and dotenv, \
                 but is kept as written by foreman and honcho (and omnidev): put the \
                 value in 'single quotes' (or write `\\$` in \"double quotes\") to keep \
                 the `$`, or set the variable in the profile's `[env]` with `{{env.NAME}}`",
                crate::names::shown(&value[i..end])
            ));
        }
        i += 1;
    }
    Ok(())
}

/// A value after its opening `quote`, from `first` (the rest of its line)
/// and the `more` lines after it: the value, what follows the closing
/// quote on its line, and how many more lines it took. An error gives
/// the line (counted from the opening one) and why.
fn quoted<'t>(
    first: &'t str,
    more: &[&'t str],
    quote: char,
) -> std::result::Result<(String, &'t str, usize), (usize, String)> {
    let mut value = String::new();
    let mut line = first;
    let mut used = 0;
    loop {
        let mut chars = line.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                c if c == quote => {
                    if quote == '"' {
                        literal_dollars(&value).map_err(|message| (used, message))?;
                    }
                    return Ok((value.replace("\u{0}$", "$"), &line[i + 1..], used));
                }
                '\\' if quote == '"' => {
                    let escaped = match chars.next().map(|(_, c)| c) {
                        Some('n') => '\n',
                        Some('t') => '\t',
                        Some('r') => '\r',
                        Some(c @ ('"' | '\\')) => c,
                        // Marked, so the check for references passes it.
                        Some('$') => {
                            value.push('\u{0}');
                            '$'
                        }
                        other => {
                            let shown = other.map_or_else(
                                || "\\ at the end of a line".to_owned(),
                                |c| format!("`\\{c}`"),
                            );
                            return Err((
                                used,
                                format!(
                                    "{shown} is not an escape here: in \"double quotes\", \
                                     `\\n`, `\\t`, `\\r`, `\\\"`, `\\\\` and `\\$` are"
                                ),
                            ));
                        }
                    };
                    value.push(escaped);
                }
                c => value.push(c),
            }
        }
        let Some(next) = more.get(used) else {
            return Err((0, format!("the {quote} that opens this value is never closed")));
        };
        value.push('\n');
        line = next;
        used += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::write(dir.join(name), text).expect("write");
    }

    fn one(text: &str) -> String {
        let vars = parse(text).unwrap_or_else(|e| panic!("{text:?}: {e:?}"));
        assert_eq!(vars.len(), 1, "{vars:?}");
        vars[0].1.clone()
    }

    #[test]
    fn dotenv_syntax_as_foreman_and_honcho_read_it() {
        let text = "# a comment\n\nexport EXPORTED=yes\nPLAIN=\"a b\"\nSINGLE='$NOT ${EXPANDED}'\n\
                    DOUBLE=\"line1\\nline2\"\nHASH=value # trailing comment\nSPACED=hello world\n\
                    EMPTY=\nKEY = spaced\r\nMULTI=\"one\ntwo\"\nAFTER=1\n";
        let vars: BTreeMap<_, _> = parse(text).expect("parse").into_iter().collect();
        assert_eq!(vars["EXPORTED"], "yes");
        assert_eq!(vars["PLAIN"], "a b");
        assert_eq!(vars["SINGLE"], "$NOT ${EXPANDED}");
        assert_eq!(vars["DOUBLE"], "line1\nline2");
        assert_eq!(vars["HASH"], "value");
        assert_eq!(vars["SPACED"], "hello world");
        assert_eq!(vars["EMPTY"], "");
        assert_eq!(vars["KEY"], "spaced");
        assert_eq!(vars["MULTI"], "one\ntwo");
        assert_eq!(vars["AFTER"], "1");
    }

    /// Values with `$` come back as written (the break: `pa$$word` was
    /// `pa`, `$5` empty, `abc$!def` `abc!def`).
    #[test]
    fn values_with_a_dollar_round_trip() {
        for value in ["pa$$word", "$5", "abc$!def", "100$", "$", "a$-b", "$$", "x$1y", "$?"] {
            assert_eq!(one(&format!("P={value}\n")), value, "unquoted");
            assert_eq!(one(&format!("P=\"{value}\"\n")), value, "double quotes");
            assert_eq!(one(&format!("P='{value}'\n")), value, "single quotes");
        }
        assert_eq!(one("P='$HOME ${HOME}'"), "$HOME ${HOME}");
        assert_eq!(one("P=\"\\$HOME \\${HOME}\""), "$HOME ${HOME}");
        assert_eq!(one("P=\"a\\\\b\\\"c\""), "a\\b\"c");
        assert_eq!(one("P=a\\nb\"c'"), "a\\nb\"c'", "unquoted: as written");
    }

    /// What another reader would take differently is an error with its
    /// line and the fix.
    #[test]
    fn what_is_not_understood_is_an_error_with_its_line() {
        let cases = [
            ("A=1\nURL=http://$HOST:80\n", 2, "\"$HOST\""),
            ("A=1\n\nURL=\"${HOST}\"\n", 3, "\"${HOST}\""),
            ("A=$$$HOST\n", 1, "\"$HOST\""),
            ("A=\"a\\qb\"\n", 1, "`\\q` is not an escape"),
            ("A=1\nB=\"open\nC=2\n", 2, "never closed"),
            ("A='x' y\n", 1, "after the closing quote"),
            ("A=1\nBAD LINE\n", 2, "is not `KEY=value`"),
            ("1A=x\n", 1, "is not `KEY=value`"),
            ("A=\"one\ntwo\" x\n", 2, "after the closing quote"),
            ("A=1\nB=x\0y\n", 2, "NUL"),
        ];
        for (text, line, said) in cases {
            let (at, why) = parse(text).expect_err(text);
            assert_eq!(at, line, "{text:?}: {why}");
            assert!(why.contains(said), "{text:?}: {why}");
        }
        let (_, why) = parse("U=$HOST\n").expect_err("a reference");
        assert!(why.contains("'single quotes'"), "{why}");
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

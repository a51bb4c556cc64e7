//! The install choice (repo, ref, extras, Python), its safety rules, its
//! `uv` spec string and its file `install.toml`.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{Error, Result, fs};

/// The tool (PEP 508 distribution name) that omnidev installs.
pub const TOOL_NAME: &str = "omnigent";
/// Default repository.
pub const DEFAULT_REPO: &str = "https://github.com/omnigent-ai/omnigent.git";
/// Default ref.
pub const DEFAULT_REF: &str = "main";
/// Default extra.
pub const DEFAULT_EXTRA: &str = "databricks";
/// Default Python version.
pub const DEFAULT_PYTHON: &str = "3.12";

/// What to install, as saved in `install.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct InstallChoice {
    /// Git repository URL (without the `git+` prefix).
    pub repo: String,
    /// Branch, tag or full commit sha.
    #[serde(rename = "ref")]
    pub reference: String,
    /// Package extras, in order; empty for none.
    #[serde(default)]
    pub extras: Vec<String>,
    /// Python version (or interpreter path) passed to `uv --python`.
    pub python: String,
    /// `install --skip-web-check` was given: `update` (and the update
    /// prompt's `y`) skip the Node/npm preflight too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skip_web_check: bool,
}

impl Default for InstallChoice {
    fn default() -> Self {
        Self {
            repo: DEFAULT_REPO.to_owned(),
            reference: DEFAULT_REF.to_owned(),
            extras: vec![DEFAULT_EXTRA.to_owned()],
            python: DEFAULT_PYTHON.to_owned(),
            skip_web_check: false,
        }
    }
}

impl InstallChoice {
    /// The requirement handed to `uv tool install`:
    /// `omnigent[EXTRAS] @ git+REPO@REF`, or `git+REPO@REF` without extras.
    ///
    /// ```
    /// use omnidev_install::InstallChoice;
    /// assert_eq!(
    ///     InstallChoice::default().spec(),
    ///     "omnigent[databricks] @ git+https://github.com/omnigent-ai/omnigent.git@main"
    /// );
    /// ```
    pub fn spec(&self) -> String {
        let url = format!("git+{}@{}", self.repo, self.reference);
        if self.extras.is_empty() {
            url
        } else {
            format!("{TOOL_NAME}[{}] @ {url}", self.extras.join(","))
        }
    }

    /// Checks every field against the safety rules (see [`validate_repo`],
    /// [`validate_ref`]); call before any process sees the values.
    pub fn validate(&self) -> Result<()> {
        validate_repo(&self.repo)?;
        validate_ref(&self.reference)?;
        for extra in &self.extras {
            validate_name("extra", extra)?;
        }
        validate_python(&self.python)
    }

    /// Loads the saved choice; `Ok(None)` when none was saved, an error
    /// naming the file when it is corrupt.
    pub fn load(path: &Path) -> Result<Option<Self>> {
        let Some(text) = fs::read_optional(path)? else {
            return Ok(None);
        };
        let choice: Self = toml::from_str(&text).map_err(|error| Error::CorruptChoice {
            path: path.to_owned(),
            message: error.to_string().trim().replace('\n', " "),
        })?;
        Ok(Some(choice))
    }

    /// Saves the choice atomically.
    pub fn save(&self, path: &Path) -> Result<()> {
        let text = toml::to_string(self).map_err(|error| Error::CorruptChoice {
            path: path.to_owned(),
            message: error.to_string(),
        })?;
        let header =
            "# Written by `omnidev install`; read by `omnidev update` and `omnidev check`.\n";
        fs::write_private(path, format!("{header}{text}").as_bytes())
    }
}

/// Rejects repository URLs that git or uv could read as an option (leading
/// `-`) or that select a command-running transport (`ext::`, `fd::`), plus
/// whitespace and control characters (which have no place in a URL).
pub fn validate_repo(repo: &str) -> Result<()> {
    let reject = |reason| Err(Error::UnsafeRepo { repo: repo.to_owned(), reason });
    if repo.is_empty() {
        return reject("it is empty");
    }
    if repo.starts_with('-') {
        return reject("it starts with `-` and would be read as an option");
    }
    let lower = repo.to_ascii_lowercase();
    // `ext::` and `fd::` run commands wherever they select the transport,
    // including behind another helper (`git+ext::…`, `x+fd::…`).
    if lower.contains("ext::") || lower.contains("fd::") {
        return reject("the ext:: and fd:: transports run arbitrary commands");
    }
    if repo.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return reject("it contains whitespace or control characters");
    }
    if repo.len() > MAX_REPO {
        return reject("it is longer than 2048 bytes");
    }
    // A user part (`ssh://git@host/…`) is fine; any other `@` would be read
    // as the `@REF` separator of `git+URL@REF`.
    let after_authority = repo
        .split_once("://")
        .map_or(repo, |(_, rest)| rest.find('/').map_or("", |slash| &rest[slash..]));
    if after_authority.contains('@') || (!repo.contains("://") && repo.contains('@')) {
        return reject(
            "an `@` outside the user part would be read as the `@REF` separator of \
             `git+URL@REF`; give the ref with --ref, and write the URL as scheme://[user@]host/path",
        );
    }
    Ok(())
}

/// Longest repository URL accepted.
const MAX_REPO: usize = 2048;
/// Longest ref accepted.
const MAX_REF: usize = 256;

/// Rejects refs that could be read as an option or are not valid git ref
/// names (a subset of `git check-ref-format`), so the exact-match lookup and
/// the `@REF` suffix of the spec mean one thing only.
pub fn validate_ref(reference: &str) -> Result<()> {
    let reject = |reason| Err(Error::UnsafeRef { reference: reference.to_owned(), reason });
    if reference.is_empty() {
        return reject("it is empty");
    }
    if reference.starts_with('-') {
        return reject("it starts with `-` and would be read as an option");
    }
    if reference.len() > MAX_REF {
        return reject("it is longer than 256 bytes");
    }
    if reference.chars().any(|c| c.is_whitespace() || c.is_control() || "~^:?*[\\@#".contains(c)) {
        return reject("it contains a character git refs may not hold (space ~ ^ : ? * [ \\ @ #)");
    }
    if reference.contains("..")
        || reference.contains("//")
        || reference.starts_with('/')
        || reference.ends_with('/')
        || reference.to_ascii_lowercase().ends_with(".lock")
        || reference.ends_with('.')
    {
        return reject("it is not a valid git ref name");
    }
    Ok(())
}

fn validate_name(what: &'static str, value: &str) -> Result<()> {
    let ok = !value.is_empty()
        && !value.starts_with('-')
        && value.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok { Ok(()) } else { Err(Error::InvalidValue { what, value: value.to_owned() }) }
}

/// A Python request is a version (`3.12`), an implementation name
/// (`cpython3.12`) or an absolute interpreter path.
fn validate_python(value: &str) -> Result<()> {
    if value.starts_with('/') && !value.chars().any(char::is_control) {
        return Ok(());
    }
    validate_name("Python version", value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choice(repo: &str, reference: &str, extras: &[&str]) -> InstallChoice {
        InstallChoice {
            repo: repo.to_owned(),
            reference: reference.to_owned(),
            extras: extras.iter().map(|e| (*e).to_owned()).collect(),
            ..InstallChoice::default()
        }
    }

    #[test]
    fn spec_strings() {
        assert_eq!(
            InstallChoice::default().spec(),
            "omnigent[databricks] @ git+https://github.com/omnigent-ai/omnigent.git@main"
        );
        assert_eq!(
            choice(DEFAULT_REPO, "main", &[]).spec(),
            "git+https://github.com/omnigent-ai/omnigent.git@main"
        );
        assert_eq!(
            choice(DEFAULT_REPO, "main", &["databricks", "dev", "gpu"]).spec(),
            "omnigent[databricks,dev,gpu] @ git+https://github.com/omnigent-ai/omnigent.git@main"
        );
        assert_eq!(
            choice("https://example.com/me/fork.git", "v1.2.0", &["dev"]).spec(),
            "omnigent[dev] @ git+https://example.com/me/fork.git@v1.2.0"
        );
        assert_eq!(
            choice("file:///srv/git/omnigent.git", "feature/x", &[]).spec(),
            "git+file:///srv/git/omnigent.git@feature/x"
        );
    }

    #[test]
    fn safe_values_pass() {
        InstallChoice::default().validate().expect("defaults are safe");
        choice("ssh://git@github.com/o/r.git", "release/1.0", &["a_b", "c-d"])
            .validate()
            .expect("plain values are safe");
        InstallChoice { python: "/usr/bin/python3.11".into(), ..InstallChoice::default() }
            .validate()
            .expect("an interpreter path is fine");
    }

    #[test]
    fn option_like_and_command_transports_are_rejected() {
        for repo in [
            "--upload-pack=touch /tmp/x",
            "-u",
            "ext::sh -c touch% /tmp/x",
            "EXT::sh",
            "fd::3",
            "git+fd::3",
            "git+ext::sh -c id",
            "https://example.com/a b",
            "",
            "https://example.com/o/r@v1",
            "ssh://git@github.com/o/r.git@main",
            "git@github.com:o/r",
            &format!("https://example.com/{}", "a".repeat(3000)),
        ] {
            assert!(
                matches!(validate_repo(repo), Err(Error::UnsafeRepo { .. })),
                "{repo:?} must be rejected"
            );
        }
        for reference in [
            "-x",
            "--upload-pack=x",
            "a..b",
            "a b",
            "a@{1}",
            "*",
            "x.lock",
            "",
            &"a".repeat(100_000),
        ] {
            assert!(
                matches!(validate_ref(reference), Err(Error::UnsafeRef { .. })),
                "{reference:?} must be rejected"
            );
        }
        assert!(choice(DEFAULT_REPO, "main", &["--x"]).validate().is_err());
        assert!(choice(DEFAULT_REPO, "main", &["a]b"]).validate().is_err());
    }

    #[test]
    fn save_and_load_round_trip_and_corrupt_file_is_named() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("omnidev/install.toml");
        assert_eq!(InstallChoice::load(&path).expect("missing"), None);
        let saved = choice("file:///x.git", "dev", &["a", "b"]);
        saved.save(&path).expect("save");
        assert_eq!(InstallChoice::load(&path).expect("load"), Some(saved));

        std::fs::write(&path, "repo = [unterminated").expect("corrupt");
        let error = InstallChoice::load(&path).expect_err("corrupt");
        assert!(matches!(&error, Error::CorruptChoice { path: p, .. } if *p == path));
        assert!(error.to_string().contains("install.toml"), "{error}");
    }
}

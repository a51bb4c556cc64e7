//! Remote-commit lookup through the GitHub REST API.

use std::fmt::Write as _;
use std::time::Duration;

use async_trait::async_trait;

use super::{Source, full_sha};
use crate::{Error, Result, validate_ref};

/// Environment variable overriding the API base URL (default
/// `https://api.github.com`), e.g. for GitHub Enterprise or a test server.
pub const GITHUB_API_URL_ENV: &str = "OMNIDEV_GITHUB_API_URL";

const DEFAULT_BASE: &str = "https://api.github.com";

/// `GET {base}/repos/{owner}/{repo}/commits/{ref}` with
/// `Accept: application/vnd.github.sha`, which answers with the bare sha.
#[derive(Debug, Clone)]
pub struct GitHubApi {
    base_url: String,
    client: reqwest::Client,
}

impl GitHubApi {
    /// The default timeout of one lookup.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

    /// An API client for `base_url` with a whole-request `timeout`.
    pub fn new(base_url: impl Into<String>, timeout: Duration) -> Result<Self> {
        let base_url = base_url.into().trim_end_matches('/').to_owned();
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .user_agent(concat!("omnidev/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|error| Error::GitHub { url: base_url.clone(), message: error.to_string() })?;
        Ok(Self { base_url, client })
    }

    /// The API at `$OMNIDEV_GITHUB_API_URL` or `https://api.github.com`,
    /// with the 5 s default timeout.
    pub fn from_env() -> Result<Self> {
        let base = std::env::var(GITHUB_API_URL_ENV)
            .ok()
            .filter(|value| !value.is_empty())
            .unwrap_or_else(|| DEFAULT_BASE.to_owned());
        Self::new(base, Self::DEFAULT_TIMEOUT)
    }

    /// The request URL for a lookup.
    pub fn url(&self, owner: &str, repo: &str, reference: &str) -> String {
        format!("{}/repos/{owner}/{repo}/commits/{}", self.base_url, encode_path(reference))
    }
}

#[async_trait]
impl Source for GitHubApi {
    async fn remote_commit(&self, repo_url: &str, reference: &str) -> Result<String> {
        // URL parsing resolves `..` segments: an unchecked ref could name
        // another API endpoint.
        validate_ref(reference)?;
        let (owner, repo) =
            github_repo(repo_url).ok_or_else(|| Error::NotGitHub { repo: repo_url.to_owned() })?;
        let url = self.url(&owner, &repo, reference);
        let failed = |message: String| Error::GitHub { url: url.clone(), message };
        let response = self
            .client
            .get(&url)
            .header(reqwest::header::ACCEPT, "application/vnd.github.sha")
            .send()
            .await
            .map_err(|error| failed(describe(&error)))?;
        let status = response.status();
        if !status.is_success() {
            return Err(failed(format!("HTTP {status}")));
        }
        let body = response.text().await.map_err(|error| failed(describe(&error)))?;
        full_sha(body.trim()).ok_or_else(|| {
            failed(format!("expected a commit sha, got {:?}", omnidev_core::text::clip(&body, 80)))
        })
    }
}

fn describe(error: &reqwest::Error) -> String {
    if error.is_timeout() { "timed out".to_owned() } else { omnidev_core::text::with_causes(error) }
}

/// Percent-encodes a ref for a URL path, keeping `/` (GitHub accepts branch
/// names with slashes as they are).
fn encode_path(reference: &str) -> String {
    let mut out = String::with_capacity(reference.len());
    for byte in reference.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

/// `(owner, repo)` when `url` names a github.com repository
/// (`https://github.com/o/r(.git)`, `ssh://git@github.com/o/r.git`,
/// `git@github.com:o/r.git`).
///
/// ```
/// use omnidev_install::source::github_repo;
/// assert_eq!(
///     github_repo("https://github.com/omnigent-ai/omnigent.git"),
///     Some(("omnigent-ai".to_owned(), "omnigent".to_owned()))
/// );
/// assert_eq!(github_repo("https://gitlab.com/a/b.git"), None);
/// ```
pub fn github_repo(url: &str) -> Option<(String, String)> {
    let with_scheme = ["https://", "http://", "ssh://", "git://"]
        .iter()
        .find_map(|scheme| url.strip_prefix(scheme));
    let rest = match with_scheme {
        Some(rest) => {
            let (authority, path) = rest.split_once('/')?;
            let host = authority.rsplit('@').next()?;
            host.eq_ignore_ascii_case("github.com").then_some(path)?
        }
        None => url.strip_prefix("git@github.com:")?,
    };
    let path = rest.trim_end_matches('/');
    let path = path.strip_suffix(".git").unwrap_or(path);
    let (owner, repo) = path.split_once('/')?;
    let valid = |part: &str| {
        !part.is_empty()
            && part.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    (valid(owner) && valid(repo)).then(|| (owner.to_owned(), repo.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_github_urls() {
        let pair = Some(("o".to_owned(), "r".to_owned()));
        for url in [
            "https://github.com/o/r.git",
            "https://github.com/o/r",
            "https://GitHub.com/o/r/",
            "ssh://git@github.com/o/r.git",
            "git@github.com:o/r.git",
        ] {
            assert_eq!(github_repo(url), pair, "{url}");
        }
        for url in [
            "https://github.com.evil.com/o/r.git",
            "https://example.com/o/r.git",
            "file:///srv/o/r.git",
            "https://github.com/o",
            "https://github.com/o/r/extra",
        ] {
            assert_eq!(github_repo(url), None, "{url}");
        }
    }

    #[test]
    fn url_encodes_the_ref() {
        let api = GitHubApi::new("http://h/", Duration::from_secs(1)).expect("client");
        assert_eq!(api.url("o", "r", "feature/a+b"), "http://h/repos/o/r/commits/feature/a%2Bb");
    }
}

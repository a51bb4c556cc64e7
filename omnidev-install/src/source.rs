//! Remote-commit lookup: the [`Source`] seam and its two implementations,
//! the GitHub API ([`GitHubApi`]) and `git ls-remote` ([`GitLsRemote`]).

mod git;
mod github;

use async_trait::async_trait;

pub use git::GitLsRemote;
pub use github::{GITHUB_API_URL_ENV, GitHubApi, github_repo};

use crate::Result;

/// Finds the commit a ref of a repository points at.
#[async_trait]
pub trait Source: Send + Sync + std::fmt::Debug {
    /// The full sha of `reference` (a branch, tag or full sha) in `repo`.
    async fn remote_commit(&self, repo: &str, reference: &str) -> Result<String>;
}

/// The lookup `refresh` uses: the GitHub API for github.com repositories,
/// falling back to `git ls-remote` when the API fails or times out; `git
/// ls-remote` alone otherwise.
#[derive(Debug, Clone)]
pub struct DefaultSource {
    /// The API lookup.
    pub github: GitHubApi,
    /// The git fallback.
    pub git: GitLsRemote,
}

impl DefaultSource {
    /// The API at `$OMNIDEV_GITHUB_API_URL` (default `https://api.github.com`)
    /// and `git` from PATH, with their default timeouts.
    pub fn from_env() -> Result<Self> {
        Ok(Self { github: GitHubApi::from_env()?, git: GitLsRemote::default() })
    }
}

#[async_trait]
impl Source for DefaultSource {
    async fn remote_commit(&self, repo: &str, reference: &str) -> Result<String> {
        if let Some(sha) = full_sha(reference) {
            return Ok(sha);
        }
        if github_repo(repo).is_some() {
            match self.github.remote_commit(repo, reference).await {
                Ok(sha) => return Ok(sha),
                // The API is a shortcut; git is the authority.
                Err(_api_error) => {}
            }
        }
        self.git.remote_commit(repo, reference).await
    }
}

/// `reference` lower-cased when it is a full 40-hex-digit sha: a pinned
/// commit is its own newest commit.
pub fn full_sha(reference: &str) -> Option<String> {
    (reference.len() == 40 && reference.chars().all(|c| c.is_ascii_hexdigit()))
        .then(|| reference.to_ascii_lowercase())
}

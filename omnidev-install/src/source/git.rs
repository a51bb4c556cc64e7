//! Remote-commit lookup with `git ls-remote`, under the safety rules.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;

use super::{Source, full_sha};
use crate::{Error, Result, validate_ref, validate_repo};

/// Protocols git may use for the lookup (no `ext::`, `fd::` or helpers).
pub const GIT_ALLOW_PROTOCOL: &str = "file:git:http:https:ssh";

/// `git ls-remote -- REPO refs/heads/REF refs/tags/REF refs/tags/REF^{}`, with a hard
/// timeout, no prompts, an allow-list of protocols, and a neutral working
/// directory that no repository discovery can escape.
#[derive(Debug, Clone)]
pub struct GitLsRemote {
    /// The git executable (`git`, found on PATH, by default).
    pub program: PathBuf,
    /// After this long the whole process group is killed.
    pub timeout: Duration,
}

impl Default for GitLsRemote {
    fn default() -> Self {
        Self { program: PathBuf::from("git"), timeout: Self::DEFAULT_TIMEOUT }
    }
}

impl GitLsRemote {
    /// The default hard timeout.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(20);
}

#[async_trait]
impl Source for GitLsRemote {
    async fn remote_commit(&self, repo: &str, reference: &str) -> Result<String> {
        validate_repo(repo)?;
        validate_ref(reference)?;
        if let Some(sha) = full_sha(reference) {
            return Ok(sha);
        }
        let failed = |message: String| Error::Git { repo: repo.to_owned(), message };
        let neutral = tempfile::tempdir()
            .map_err(|error| failed(format!("cannot create a working directory: {error}")))?;
        let ceiling = neutral.path().parent().unwrap_or(neutral.path()).to_owned();
        let heads = format!("refs/heads/{reference}");
        let tags = format!("refs/tags/{reference}");
        // ls-remote lists a peeled annotated tag only when asked for it.
        let peeled = format!("refs/tags/{reference}^{{}}");
        let mut command = tokio::process::Command::new(&self.program);
        command
            .args(["ls-remote", "--"])
            .arg(repo)
            .args([&heads, &tags, &peeled])
            .current_dir(neutral.path())
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_ALLOW_PROTOCOL", GIT_ALLOW_PROTOCOL)
            .env("GIT_CEILING_DIRECTORIES", &ceiling)
            .env("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE")
            .env_remove(crate::check::REFRESH_LOCK_FD_ENV)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let child = command.spawn().map_err(Error::spawn(self.program.display()))?;
        let pgid = child.id();
        let output = match tokio::time::timeout(self.timeout, child.wait_with_output()).await {
            Ok(result) => result.map_err(|error| failed(error.to_string()))?,
            Err(_elapsed) => {
                if let Some(pgid) = pgid {
                    // The leader is already killed (kill_on_drop dropped it
                    // with the timed-out future); its children (ssh, remote
                    // helpers) are still in the group.
                    // The process group created with process_group(0).
                    if let Ok(pgid) = i32::try_from(pgid) {
                        let _ = nix::sys::signal::killpg(
                            nix::unistd::Pid::from_raw(pgid),
                            nix::sys::signal::Signal::SIGKILL,
                        );
                    }
                }
                return Err(failed(format!("no answer within {} s", self.timeout.as_secs_f32())));
            }
        };
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            return Err(failed(format!("{} ({})", stderr.trim(), output.status)));
        }
        let listing = String::from_utf8_lossy(&output.stdout);
        pick_ref(&listing, reference).ok_or_else(|| Error::RefNotFound {
            repo: repo.to_owned(),
            reference: reference.to_owned(),
        })
    }
}

/// The sha for exactly `refs/heads/REF`, else the peeled `refs/tags/REF^{}`
/// (an annotated tag's commit), else `refs/tags/REF`. No pattern matching:
/// `ls-remote` itself matches patterns by suffix, so `main` would also list
/// `refs/heads/x/main`.
pub fn pick_ref(listing: &str, reference: &str) -> Option<String> {
    let entries: Vec<(&str, &str)> =
        listing.lines().filter_map(|line| line.split_once('\t')).collect();
    let find =
        |name: String| entries.iter().find(|(_, r)| *r == name).and_then(|(sha, _)| full_sha(sha));
    find(format!("refs/heads/{reference}"))
        .or_else(|| find(format!("refs/tags/{reference}^{{}}")))
        .or_else(|| find(format!("refs/tags/{reference}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    const C: &str = "cccccccccccccccccccccccccccccccccccccccc";

    #[test]
    fn picks_the_exact_ref_only() {
        let listing = format!("{A}\trefs/heads/x/main\n{B}\trefs/heads/main\n");
        assert_eq!(pick_ref(&listing, "main"), Some(B.to_owned()));
        let listing = format!("{A}\trefs/heads/x/main\n");
        assert_eq!(pick_ref(&listing, "main"), None);
    }

    #[test]
    fn prefers_peeled_tags() {
        let listing = format!("{A}\trefs/tags/v1\n{C}\trefs/tags/v1^{{}}\n");
        assert_eq!(pick_ref(&listing, "v1"), Some(C.to_owned()));
        let listing = format!("{A}\trefs/tags/v1\n");
        assert_eq!(pick_ref(&listing, "v1"), Some(A.to_owned()));
    }
}

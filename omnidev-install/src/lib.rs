//! Install and update a git-installed tool (Omnigent) with `uv tool install`,
//! and a daily update check cheap enough to run from every interactive shell.
//!
//! ```
//! use omnidev_install::InstallChoice;
//! let choice = InstallChoice { extras: vec![], ..InstallChoice::default() };
//! assert_eq!(choice.spec(), "git+https://github.com/omnigent-ai/omnigent.git@main");
//! ```
//!
//! # Files
//!
//! - `${XDG_CONFIG_HOME:-~/.config}/omnidev/install.toml`: the saved
//!   [`InstallChoice`] (written atomically; corrupt → an error naming it).
//! - `${XDG_CACHE_HOME:-~/.cache}/omnidev/omnigent-check.json`: the
//!   [`CheckCache`] (remote commit, installed commit, `uv tool dir`, the
//!   declined commit; corrupt → a miss, rewritten by the next refresh).
//! - `${XDG_CACHE_HOME:-~/.cache}/omnidev/omnigent-refresh.lock`: the
//!   single-flight lock of the background refresh.
//! - `${XDG_CACHE_HOME:-~/.cache}/omnidev/omnigent-check.lock`: serialises
//!   the cache's writers (refresh, a declined prompt, install/update), so
//!   none loses another's change; the hot path reads without it.
//! - `${XDG_CACHE_HOME:-~/.cache}/omnidev/omnigent-install.lock`: one
//!   `install` or `update` at a time (a second one is refused, naming the
//!   first one's pid).
//!
//! # Install and update
//!
//! `uv tool install` runs in a process group of its own, tied to omnidev
//! by an orphan guard ([`omnidev_core::guard::run_tied`], the supervisor's
//! own guard): if omnidev dies (Ctrl-C, a closed terminal, `kill -9`) the
//! guard kills uv and everything it started. The
//! choice (`install.toml`) and the cache's installed commit are written
//! only after uv has succeeded, one after the other under the install lock,
//! so an interrupted or failed install leaves both describing the previous
//! install.
//!
//! # The hot path
//!
//! [`check::evaluate`] reads the cache file and nothing else: no process, no
//! network, no `uv tool dir` (the tool dir and installed commit are cached
//! by `install`, `update` and `refresh`). When the cache is older than 24 h,
//! [`check::start_background_refresh`] starts one detached `omnidev refresh`
//! (new session, stdio on `/dev/null`) holding an inherited `flock`, so any
//! number of simultaneous checks start exactly one refresh.
//!
//! # Environment
//!
//! | variable | effect |
//! |---|---|
//! | `XDG_CONFIG_HOME`, `XDG_CACHE_HOME`, `HOME` | where the files above live |
//! | `UV_TOOL_DIR` (read by uv) | where uv installs tools |
//! | `OMNIDEV_GITHUB_API_URL` | GitHub API base URL (default `https://api.github.com`) |
//! | `OMNIDEV_SKIP_WEB_CHECK=1` | skip the Node ≥ 22 / npm-or-pnpm preflight |
//! | `OMNIDEV_NO_UPDATE_CHECK=1` | `check` and the shell hook do nothing |
//! | `OMNIDEV_REFRESH_EXE` | program started as the background refresh (tests) |
//!
//! # Remote lookup and safety
//!
//! `refresh` asks the GitHub API (5 s timeout, `Accept:
//! application/vnd.github.sha`) for github.com repositories and falls back to
//! `git ls-remote` (20 s hard timeout) otherwise or on failure. Repo URLs and
//! refs starting with `-`, and the `ext::`/`fd::` transports, are rejected
//! before any process starts; git runs with `--` before positionals,
//! `GIT_TERMINAL_PROMPT=0`, `GIT_ALLOW_PROTOCOL=file:git:http:https:ssh`, an
//! empty temporary working directory bounded by `GIT_CEILING_DIRECTORIES`,
//! and the exact ref is picked from the listing.
//!
//! # Benchmarking the check
//!
//! To time `omnidev check --quiet` against a fresh cache, point
//! `XDG_CACHE_HOME` at a directory holding `omnidev/omnigent-check.json` with
//! `checked_at` set to the current Unix time and equal `remote_commit` /
//! `installed_commit`, e.g.
//!
//! ```text
//! mkdir -p /tmp/b/omnidev
//! printf '{"checked_at":%s,"repo":"r","ref":"main","remote_commit":"a","installed_commit":"a"}' \
//!     "$(date +%s)" > /tmp/b/omnidev/omnigent-check.json
//! XDG_CACHE_HOME=/tmp/b XDG_CONFIG_HOME=/tmp/b omnidev check --quiet
//! ```
//!
//! and compare its median with `/bin/true`'s over a few hundred runs.
#![warn(missing_docs)]

pub mod cache;
pub mod check;
pub mod choice;
pub mod error;
pub mod fs;
pub mod hook;
pub mod manage;
pub mod paths;
pub mod source;
pub mod uv;

pub use cache::{CheckCache, NewerCommit};
pub use choice::{
    DEFAULT_EXTRA, DEFAULT_PYTHON, DEFAULT_REF, DEFAULT_REPO, InstallChoice, TOOL_NAME,
    validate_ref, validate_repo,
};
pub use error::{Error, Result};
pub use hook::Shell;
pub use manage::{InstallOptions, Installed, install, refresh, update};
pub use paths::Paths;
pub use source::{DefaultSource, GitHubApi, GitLsRemote, Source};

//! What omnidev's tests share (uv's `uv-test` is the model): a temp home
//! with its own `HOME` and XDG directories ([`TestContext`]), waiting for a
//! condition with a deadline ([`poll_until`]), `git` with a fixed identity
//! ([`git()`]), signalling and reaping processes on `nix` ([`process`]),
//! waiting for a line of a child's output ([`Lines`]), free ports
//! ([`free_port`]) and fake tools that never fail to run
//! ([`write_script`]). A dev-dependency only: never published,
//! never linked into omnidev.
//!
//! ```
//! use std::time::Duration;
//! let ctx = omnidev_test_support::TestContext::new();
//! std::fs::write(ctx.repo.join("a.txt"), "x").expect("write");
//! omnidev_test_support::poll_until("a.txt to exist", Duration::from_secs(5), || {
//!     ctx.repo.join("a.txt").is_file()
//! });
//! ```
#![warn(missing_docs)]
#![allow(
    clippy::missing_panics_doc,
    reason = "test helpers panic with a message where a test would fail"
)]

pub mod alone;
pub mod context;
pub mod git;
pub mod hostile;
pub mod lines;
pub mod poll;
pub mod ports;
pub mod process;
pub mod script;

pub use alone::in_own_process;
pub use context::TestContext;
pub use git::git;
pub use lines::Lines;
pub use poll::{poll_until, poll_until_async};
pub use ports::{free_port, free_ports, quiet_ports};
pub use script::write_script;

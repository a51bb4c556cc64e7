//! Process supervision for omnidev: service specs, process groups, readiness,
//! restarts with backoff, reloads, shutdown, log capture and events.
//!
//! A [`Supervisor`] is started from a [`SupervisorConfig`] (plain
//! [`ServiceSpec`]s) and runs every service in its own process group, in
//! dependency order, waiting for readiness probes, restarting crashes with
//! backoff ([`backoff`]), capturing output into rotated files ([`logs`]),
//! publishing typed [`Event`]s to a bounded [`history`] that any number of
//! readers read through cursors (a [`Follower`] one event at a time, a
//! [`Lossless`] reader spooling to disk what it would miss), recording
//! pids in `state.json` ([`state`]) and protecting
//! against orphans with a guard process ([`guard`] docs) when
//! the supervisor itself is killed. The library never prints or exits.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> omnidev_core::Result<()> {
//! use omnidev_core::{RestartPolicy, ServiceSpec, Supervisor, SupervisorConfig};
//! let mut hello = ServiceSpec::new("hello", "sh", ["-c", "echo hi"], ".");
//! hello.restart = RestartPolicy::Never;
//! let supervisor = Supervisor::builder(SupervisorConfig {
//!     services: vec![hello],
//!     ..Default::default()
//! })?
//! .run()
//! .await?;
//! let settled = supervisor.wait_settled().await;
//! assert!(settled.success);
//! supervisor.shutdown().await?;
//! # Ok(()) }
//! ```
#![warn(missing_docs)]
// `pid` and `pgid` are the domain's own words; renaming them would obscure.
#![allow(clippy::similar_names)]

pub mod backoff;
pub mod containment;
pub mod error;
pub mod event;
pub mod fs;
pub mod guard;
pub mod history;
pub mod listener;
pub mod logs;
pub mod platform;
pub mod probe;
pub mod process;
pub mod signals;
pub mod spec;
pub mod state;
pub mod supervisor;
pub mod sync;
pub mod text;

pub use backoff::BackoffPolicy;
pub use containment::{ContainmentChoice, Mechanism};
pub use error::{Error, Result};
pub use event::{
    Changes, EndReason, Ending, Event, EventKind, ExitStatus, LogLine, ProfileApplied,
    ProfileChange, ServiceState, ServiceStatus, Stream, Tone,
};
pub use history::{Follower, History, Kept, Lossless, Recv};
pub use spec::{
    CommandSpec, Condition, Dependency, Env, LogConfig, NamedUrl, PrepareStep, PrepareWhen,
    ProbeSpec, Readiness, RestartPolicy, ServiceSpec, StopSpec,
};
pub use state::{StateFile, read_state};
pub use supervisor::{
    Applied, Moved, PortMover, STABLE, Settled, Supervisor, SupervisorConfig, Until, Waited,
    depth_first, start_order,
};

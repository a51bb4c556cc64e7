//! Process supervision for omnidev: service specs, process groups, readiness,
//! restarts with backoff, reloads, shutdown, log capture and events.
#![warn(missing_docs)]

pub mod error;
pub mod event;
pub mod fs;
pub mod spec;

pub use error::{Error, Result};
pub use event::{Event, EventKind, ExitStatus, LogLine, ServiceState, ServiceStatus, Stream};
pub use spec::{
    CommandSpec, Condition, Dependency, LogConfig, PrepareStep, PrepareWhen, ProbeSpec, Readiness,
    RestartPolicy, ServiceSpec, StopSpec,
};

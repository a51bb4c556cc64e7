//! omnidev-install (under construction).
#![warn(missing_docs)]

pub mod error;

pub use error::{Error, Result};

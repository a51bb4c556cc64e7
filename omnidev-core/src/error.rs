//! The error type of `omnidev-core`.

use std::path::PathBuf;

/// Everything that can go wrong in the supervision engine.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be written or replaced.
    #[error("could not write {path}")]
    #[diagnostic(
        code(omnidev::core::write),
        help("check that the directory exists and is writable")
    )]
    Write {
        /// The file that was being written.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// `Result` with [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

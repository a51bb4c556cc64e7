//! The error type of `omnidev-install`.

/// Everything that can go wrong in this crate.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
#[non_exhaustive]
pub enum Error {
    /// An I/O error.
    #[error(transparent)]
    #[diagnostic(code(omnidev::install::io))]
    Io(#[from] std::io::Error),
}

/// `Result` with [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

//! One module per subcommand; `run` dispatches.

use std::process::ExitCode;

use crate::cli::{Cli, Command};

/// Runs the parsed command line.
pub fn run(cli: Cli) -> miette::Result<ExitCode> {
    match cli.command {
        Some(Command::Up(_)) | None => Err(miette::miette!("`omnidev up` is not built yet")),
    }
}

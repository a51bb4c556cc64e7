//! Command-line arguments (clap). Raw arguments only: validation and
//! defaults that need the file system happen in `commands/`.

use clap::{Args, Parser, Subcommand};

/// One isolated dev pod per checkout.
#[derive(Debug, Parser)]
#[command(
    name = "omnidev",
    version,
    about,
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    /// What to do; `up` when omitted.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Arguments of `up`, accepted without the word `up`.
    #[command(flatten)]
    pub up: UpArgs,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the pod of this checkout (the default).
    Up(UpArgs),
}

/// Arguments of `omnidev up` (filled in by the CLI work).
#[derive(Debug, Args, Default)]
pub struct UpArgs {}

//! `omnidev completions <shell>`: print a shell completion script.

use std::process::ExitCode;

use clap::{Args, CommandFactory};
use clap_complete::Shell;

/// Arguments of `omnidev completions`.
#[derive(Debug, Args, Clone)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    #[arg(value_name = "SHELL")]
    pub shell: Shell,
}

/// Runs `omnidev completions`.
pub fn run(args: &CompletionsArgs) -> ExitCode {
    let mut command = crate::cli::Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut command, "omnidev", &mut out);
    match crate::commands::status::write_stdout(&String::from_utf8_lossy(&out)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    }
}

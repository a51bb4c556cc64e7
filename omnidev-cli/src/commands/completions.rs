//! `omnidev completions <shell>`: print a shell completion script.

use std::process::ExitCode;

use crate::cli::CompletionsArgs;

/// Runs `omnidev completions`.
pub fn run(args: &CompletionsArgs) -> ExitCode {
    let mut command = crate::cli::command();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut command, "omnidev", &mut out);
    match crate::output::write_stdout(&String::from_utf8_lossy(&out)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    }
}

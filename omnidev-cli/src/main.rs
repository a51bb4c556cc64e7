//! The `omnidev` binary: parse arguments, run the command, render errors.

use clap::Parser;

mod cli;
mod commands;

fn main() -> std::process::ExitCode {
    let args = cli::Cli::parse();
    match commands::run(args) {
        Ok(code) => code,
        Err(report) => {
            eprintln!("{report:?}");
            std::process::ExitCode::FAILURE
        }
    }
}

//! The `omnidev` binary: parse arguments, run the command, render errors.

use clap::Parser;

mod cli;
mod commands;
mod control;
mod error;
mod headless;
mod output;
mod session;
mod terminal_text;
mod tui;
mod watch;

fn main() -> std::process::ExitCode {
    let args = cli::Cli::parse();
    // Fancy, coloured diagnostics; plain when NO_COLOR or not a terminal
    // (miette's own detection). Off a terminal, lines are not wrapped, so
    // logs and CI output keep each message on one line.
    let _ = miette::set_hook(Box::new(|_| {
        let mut options = miette::MietteHandlerOpts::new();
        if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            options = options.width(usize::MAX / 4).break_words(false);
        }
        Box::new(options.build())
    }));
    match commands::run(args) {
        Ok(code) => code,
        Err(report) => {
            eprintln!("{report:?}");
            std::process::ExitCode::FAILURE
        }
    }
}

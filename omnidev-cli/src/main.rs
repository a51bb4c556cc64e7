//! The `omnidev` binary: parse arguments, run the command, render errors.

/// `eprintln!` through the one sanitiser (`omnidev_core::text::message`: no
/// escape sequence of a quoted name, path or argument is obeyed) that never
/// panics: with stderr closed the message is lost, and the command goes on
/// (its exit code says how it went).
macro_rules! note {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let text = format!($($arg)*);
        let _ = writeln!(std::io::stderr(), "{}", omnidev_core::text::message(&text));
    }};
}

mod cli;
mod commands;
mod control;
mod dashboard;
mod detach;
mod detached_log;
mod error;
mod headless;
mod live_profile;
mod log_files;
mod mcp;
mod output;
mod pod_data;
mod remote;
mod run_options;
mod session;
mod tui;
mod watch;

fn main() -> std::process::ExitCode {
    let args = cli::parse();
    let json = args.wants_json();
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
        // Whoever read the output has gone: nothing to say, and no one to
        // say it to.
        Err(report) if matches!(report.downcast_ref(), Some(error::Error::OutputClosed)) => {
            std::process::ExitCode::FAILURE
        }
        // With `--json`, the error is one record on stdout, where the
        // program reading the output looks.
        Err(report) if json => {
            use std::io::Write as _;
            let mut out = std::io::stdout();
            let _ =
                out.write_all(error::json_record(&report).as_bytes()).and_then(|()| out.flush());
            error::exit_code(&report).into()
        }
        Err(report) => {
            error::print(&report);
            error::exit_code(&report).into()
        }
    }
}

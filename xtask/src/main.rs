//! Project automation: `cargo xtask ci | test-e2e | dist | bench | demo`.

mod as_user;
mod bench;
mod ci;
#[cfg(test)]
mod codemap;
mod demo;
mod dist;
mod e2e;
#[cfg(test)]
mod file_door;
mod flags;
#[cfg(test)]
mod imports;
mod install;
mod macos;
mod prereqs;
mod ssh_host;
mod stress;
mod suite;
mod util;

use std::fmt::Write as _;
use std::process::ExitCode;

use clap::Parser;

use crate::flags::Task;

fn main() -> ExitCode {
    let outcome = match flags::Xtask::parse().task {
        Task::Ci(options) => ci::run(&options).and_then(|()| match options.stress {
            Some(runs) => stress::run(&flags::Stress {
                runs,
                hogs: None,
                skip_e2e: options.skip_e2e,
                packages: Vec::new(),
                run_timeout: 1800,
            }),
            None => Ok(()),
        }),
        Task::CheckMacos(options) => macos::check(!options.no_install, options.dry_run),
        Task::TestE2e(options) => e2e::run(&options),
        Task::Dist(options) => dist::run(&options).map(|_| ()),
        Task::Bench(options) => bench::run(&options),
        Task::Demo(options) => demo::run(&options),
        Task::Stress(options) => stress::run(&options),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprint!("{}", render(&error));
            ExitCode::FAILURE
        }
    }
}

/// An error as the user reads it: the message, then each cause on a line
/// of its own. Never a backtrace, whatever `RUST_BACKTRACE` says (returning
/// the error from `main` would print one: a 60-line stack of xtask's own
/// frames in front of a message such as "zsh is missing").
fn render(error: &anyhow::Error) -> String {
    let mut text = format!("error: {error}\n");
    for cause in error.chain().skip(1) {
        let _ = writeln!(text, "  caused by: {cause}");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_renders_as_its_message_and_causes_without_a_backtrace() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let error =
            anyhow::Error::new(io).context("reading package.json").context("installing pnpm");
        assert_eq!(
            render(&error),
            "error: installing pnpm\n  caused by: reading package.json\n  caused by: no such file\n"
        );
    }
}

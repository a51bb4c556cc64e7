//! `omnidev install | update | check | refresh | shell-hook`: a git-based
//! Omnigent install managed with uv, and its update check.

use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::process::ExitCode;
use std::time::SystemTime;

use omnidev_install::check::{self, RefreshStart};
use omnidev_install::hook::NO_UPDATE_CHECK_ENV;
use omnidev_install::uv::skip_web_check_from_env;
use omnidev_install::{DefaultSource, InstallOptions, Installed, Paths, Shell, Update};

use crate::cli::{CheckArgs, InstallArgs, ShellHookArgs, ShellName};
use crate::output::write_stdout;

/// `omnidev install`.
pub fn install(args: &InstallArgs) -> miette::Result<ExitCode> {
    let paths = Paths::from_env()?;
    let options = InstallOptions {
        skip_web_check: args.skip_web_check || skip_web_check_from_env(),
    };
    let installed = omnidev_install::install(&paths, &args.choice(), options)?;
    report_installed(&installed)?;
    Ok(ExitCode::SUCCESS)
}

/// `omnidev update`.
pub fn update() -> miette::Result<ExitCode> {
    let paths = Paths::from_env()?;
    let installed = run_update(&paths)?;
    report_installed(&installed)?;
    Ok(ExitCode::SUCCESS)
}

fn run_update(paths: &Paths) -> miette::Result<Installed> {
    let options = InstallOptions {
        skip_web_check: skip_web_check_from_env(),
    };
    Ok(omnidev_install::update(paths, options)?)
}

fn report_installed(installed: &Installed) -> Result<(), crate::error::Error> {
    write_stdout(&format!(
        "installed omnigent {} from {}@{} (tool dir {})\n",
        short(&installed.commit),
        installed.choice.repo,
        installed.choice.reference,
        installed.tool_dir.display()
    ))
}

/// `omnidev check`: the hot path. Reads the cache; starts a detached
/// refresh when it is stale; tells about (and on a terminal offers) an
/// update. Never starts any other process, never touches the network.
pub fn check(args: &CheckArgs) -> miette::Result<ExitCode> {
    if std::env::var_os(NO_UPDATE_CHECK_ENV).is_some_and(|value| !value.is_empty()) {
        return Ok(ExitCode::SUCCESS);
    }
    let paths = Paths::from_env()?;
    let now = SystemTime::now();
    let report = check::evaluate(&paths, now);
    let mut refreshing = false;
    if report.stale {
        let program = check::refresh_program()?;
        refreshing =
            check::start_background_refresh(&paths, &program, now)? != RefreshStart::NotNeeded;
    }
    if let Some(update) = &report.update {
        note!(
            "omnidev: a newer omnigent is available on {}: {} -> {}; run `omnidev update` to install it",
            update.reference,
            short(&update.installed),
            short(&update.available)
        );
        if std::io::stdin().is_terminal() && std::io::stderr().is_terminal() {
            return offer_update(&paths, update);
        }
    } else if !args.quiet {
        let installed = report
            .cache
            .as_ref()
            .and_then(|cache| cache.installed_commit.as_deref());
        match (installed, refreshing) {
            (Some(commit), _) => note!("omnidev: omnigent {} is up to date", short(commit)),
            (None, true) => {
                note!("omnidev: no update information yet; checking in the background");
            }
            (None, false) => note!("omnidev: omnigent is not installed; run `omnidev install`"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Asks on `/dev/tty`; `y` updates now, anything else remembers the decline.
fn offer_update(paths: &Paths, update: &Update) -> miette::Result<ExitCode> {
    let Ok(mut tty) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
    else {
        return Ok(ExitCode::SUCCESS);
    };
    let _ = write!(tty, "Update omnigent now? [y/N] ");
    let _ = tty.flush();
    let mut answer = String::new();
    let _ = BufReader::new(&tty).read_line(&mut answer);
    if matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
        let installed = run_update(paths)?;
        report_installed(&installed)?;
    } else {
        check::decline(paths, &update.available)?;
        let _ = writeln!(
            tty,
            "omnidev: not updating; {} will not be offered again",
            short(&update.available)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `omnidev refresh`: ask the network for the newest commit and rewrite the
/// update-check cache.
pub fn refresh() -> miette::Result<ExitCode> {
    check::adopt_inherited_lock();
    let paths = Paths::from_env()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| miette::miette!("could not start the async runtime: {error}"))?;
    let cache = runtime.block_on(async {
        let source = DefaultSource::from_env()?;
        omnidev_install::refresh(&paths, &source, SystemTime::now()).await
    })?;
    let remote = cache.remote_commit.as_deref().map_or("unknown", short);
    let installed = cache
        .installed_commit
        .as_deref()
        .map_or("not installed", short);
    write_stdout(&format!(
        "{}@{}: newest {remote}, installed {installed}\n",
        cache.repo, cache.reference
    ))?;
    Ok(ExitCode::SUCCESS)
}

/// `omnidev shell-hook`.
pub fn shell_hook(args: &ShellHookArgs) -> miette::Result<ExitCode> {
    let shell = match args.shell {
        Some(ShellName::Bash) => Shell::Bash,
        Some(ShellName::Zsh) => Shell::Zsh,
        Some(ShellName::Fish) => Shell::Fish,
        None => std::env::var("SHELL")
            .ok()
            .and_then(|shell| Shell::from_path(&shell))
            .unwrap_or(Shell::Bash),
    };
    write_stdout(shell.snippet())?;
    Ok(ExitCode::SUCCESS)
}

fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

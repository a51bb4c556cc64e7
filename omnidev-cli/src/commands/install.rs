//! `omnidev install | update | check | refresh | shell-hook`: a git-based
//! Omnigent install managed with uv, and its update check.

use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::process::ExitCode;
use std::time::SystemTime;

use clap::{Args, ValueEnum};
use omnidev_install::check::{self, RefreshStart};
use omnidev_install::hook::NO_UPDATE_CHECK_ENV;
use omnidev_install::uv::skip_web_check_from_env;
use omnidev_install::{
    DEFAULT_EXTRA, DEFAULT_PYTHON, DEFAULT_REF, DEFAULT_REPO, DefaultSource, InstallChoice,
    InstallOptions, Installed, Paths, Shell, Update,
};

/// Arguments of `omnidev install`.
#[derive(Debug, Args, Clone)]
pub struct InstallArgs {
    /// Branch, tag or full commit sha to install.
    #[arg(long = "ref", value_name = "REF", default_value = DEFAULT_REF, allow_hyphen_values = true)]
    pub reference: String,
    /// Package extra to install (repeatable), in addition to `databricks`
    /// unless `--no-default-extra`.
    #[arg(long = "extra", value_name = "NAME", allow_hyphen_values = true)]
    pub extras: Vec<String>,
    /// Do not add the default `databricks` extra.
    #[arg(long)]
    pub no_default_extra: bool,
    /// Git repository to install from.
    #[arg(long, value_name = "URL", default_value = DEFAULT_REPO, allow_hyphen_values = true)]
    pub repo: String,
    /// Python version (or interpreter path) for the tool's environment.
    #[arg(long, value_name = "VER", default_value = DEFAULT_PYTHON, allow_hyphen_values = true)]
    pub python: String,
    /// Skip the Node ≥ 22 / npm-or-pnpm check (also `OMNIDEV_SKIP_WEB_CHECK=1`),
    /// for a package that builds no web UI.
    #[arg(long)]
    pub skip_web_check: bool,
}

impl InstallArgs {
    /// The choice these arguments describe: the default extra first (unless
    /// turned off), then `--extra`s in order, without duplicates.
    pub fn choice(&self) -> InstallChoice {
        let mut extras: Vec<String> = Vec::new();
        let defaults = (!self.no_default_extra).then(|| DEFAULT_EXTRA.to_owned());
        for extra in defaults.into_iter().chain(self.extras.iter().cloned()) {
            if !extras.contains(&extra) {
                extras.push(extra);
            }
        }
        InstallChoice {
            repo: self.repo.clone(),
            reference: self.reference.clone(),
            extras,
            python: self.python.clone(),
        }
    }
}

/// Arguments of `omnidev check`.
#[derive(Debug, Args, Clone, Default)]
pub struct CheckArgs {
    /// Print nothing when omnigent is up to date.
    #[arg(long, short)]
    pub quiet: bool,
}

/// A shell for `omnidev shell-hook`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ShellName {
    /// bash
    Bash,
    /// zsh
    Zsh,
    /// fish
    Fish,
}

/// Arguments of `omnidev shell-hook`.
#[derive(Debug, Args, Clone)]
pub struct ShellHookArgs {
    /// The shell (default: from `$SHELL`, else bash).
    #[arg(value_enum)]
    pub shell: Option<ShellName>,
}

/// `omnidev install`.
pub fn install(args: &InstallArgs) -> miette::Result<ExitCode> {
    let paths = Paths::from_env()?;
    let options = InstallOptions {
        skip_web_check: args.skip_web_check || skip_web_check_from_env(),
    };
    let installed = omnidev_install::install(&paths, &args.choice(), options)?;
    report_installed(&installed);
    Ok(ExitCode::SUCCESS)
}

/// `omnidev update`.
pub fn update() -> miette::Result<ExitCode> {
    let paths = Paths::from_env()?;
    let installed = run_update(&paths)?;
    report_installed(&installed);
    Ok(ExitCode::SUCCESS)
}

fn run_update(paths: &Paths) -> miette::Result<Installed> {
    let options = InstallOptions {
        skip_web_check: skip_web_check_from_env(),
    };
    Ok(omnidev_install::update(paths, options)?)
}

fn report_installed(installed: &Installed) {
    println!(
        "installed omnigent {} from {}@{} (tool dir {})",
        short(&installed.commit),
        installed.choice.repo,
        installed.choice.reference,
        installed.tool_dir.display()
    );
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
        eprintln!(
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
            (Some(commit), _) => eprintln!("omnidev: omnigent {} is up to date", short(commit)),
            (None, true) => {
                eprintln!("omnidev: no update information yet; checking in the background");
            }
            (None, false) => eprintln!("omnidev: omnigent is not installed; run `omnidev install`"),
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
        report_installed(&installed);
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
    println!(
        "{}@{}: newest {remote}, installed {installed}",
        cache.repo, cache.reference
    );
    Ok(ExitCode::SUCCESS)
}

/// `omnidev shell-hook`.
pub fn shell_hook(args: &ShellHookArgs) -> ExitCode {
    let shell = match args.shell {
        Some(ShellName::Bash) => Shell::Bash,
        Some(ShellName::Zsh) => Shell::Zsh,
        Some(ShellName::Fish) => Shell::Fish,
        None => std::env::var("SHELL")
            .ok()
            .and_then(|shell| Shell::from_path(&shell))
            .unwrap_or(Shell::Bash),
    };
    print!("{}", shell.snippet());
    ExitCode::SUCCESS
}

fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extras: &[&str], no_default: bool) -> InstallArgs {
        InstallArgs {
            reference: "main".into(),
            extras: extras.iter().map(|e| (*e).to_owned()).collect(),
            no_default_extra: no_default,
            repo: DEFAULT_REPO.into(),
            python: DEFAULT_PYTHON.into(),
            skip_web_check: false,
        }
    }

    #[test]
    fn extras_from_flags() {
        assert_eq!(args(&[], false).choice().extras, ["databricks"]);
        assert_eq!(args(&[], true).choice().extras, Vec::<String>::new());
        assert_eq!(
            args(&["dev", "databricks", "dev"], false).choice().extras,
            ["databricks", "dev"]
        );
    }
}

//! `omnidev install | update | check | refresh | shell-hook`: a git-based
//! Omnigent install managed with uv, and its update check.

use std::io::{BufRead, BufReader, IsTerminal, Read, Write};
use std::os::fd::AsRawFd;
use std::process::ExitCode;
use std::time::SystemTime;

use omnidev_install::cache::CheckCache;
use omnidev_install::check::{self, RefreshStart};
use omnidev_install::hook::NO_UPDATE_CHECK_ENV;
use omnidev_install::uv::skip_web_check_from_env;
use omnidev_install::{
    DefaultSource, InstallChoice, InstallOptions, Installed, NewerCommit, Paths, Shell,
};

use crate::cli::{CheckArgs, InstallArgs, ShellHookArgs, UpdateArgs};
use crate::output::write_stdout;

/// `omnidev install`.
pub fn install(args: &InstallArgs) -> miette::Result<ExitCode> {
    let paths = Paths::from_env()?;
    let options =
        InstallOptions { skip_web_check: args.skip_web_check || skip_web_check_from_env() };
    let installed = omnidev_install::install(&paths, &args.choice(), options)?;
    report_installed(&installed)?;
    Ok(ExitCode::SUCCESS)
}

/// `omnidev update`.
pub fn update(args: &UpdateArgs) -> miette::Result<ExitCode> {
    let paths = Paths::from_env()?;
    let installed = run_update(&paths, args.skip_web_check)?;
    report_installed(&installed)?;
    Ok(ExitCode::SUCCESS)
}

/// An update; the web check is skipped with `skip_web_check`,
/// `OMNIDEV_SKIP_WEB_CHECK`, or when the saved choice says so.
fn run_update(paths: &Paths, skip_web_check: bool) -> miette::Result<Installed> {
    let options = InstallOptions { skip_web_check: skip_web_check || skip_web_check_from_env() };
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
///
/// With `--quiet` (the shell hook) an error is one line, and the same
/// failure is told at most once a day: every new shell would otherwise
/// repeat it (an unwritable `HOME`, a corrupt `install.toml`).
pub fn check(args: &CheckArgs) -> miette::Result<ExitCode> {
    if std::env::var_os(NO_UPDATE_CHECK_ENV).is_some_and(|value| !value.is_empty()) {
        return Ok(ExitCode::SUCCESS);
    }
    match run_check(args) {
        Err(report) if args.quiet => {
            hook_error::tell_once_a_day(&report, SystemTime::now());
            Ok(ExitCode::SUCCESS)
        }
        outcome => outcome,
    }
}

fn run_check(args: &CheckArgs) -> miette::Result<ExitCode> {
    let paths = Paths::from_env()?;
    // A corrupt choice is not "not installed", nor a silence: plain `check`
    // names the file, the hook tells it in its one line (once a day).
    InstallChoice::load(&paths.install_toml())?;
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
        let cache = report.cache.as_ref();
        if let Some(problem) = cache.and_then(|cache| cache.last_error.as_deref()) {
            note!("omnidev: the last update check failed: {problem}");
        }
        let installed = cache.and_then(|cache| cache.installed_commit.as_deref());
        let declined = cache.and_then(CheckCache::declined_update);
        match (installed, refreshing) {
            (Some(_), _) if let Some(newer) = declined => note!(
                "omnidev: omnigent {} is available (declined; run `omnidev update` to install it)",
                short(newer)
            ),
            (Some(commit), _) => note!("omnidev: omnigent {} is up to date", short(commit)),
            (None, true) => {
                note!("omnidev: no update information yet; checking in the background");
            }
            (None, false) => note!("omnidev: omnigent is not installed; run `omnidev install`"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Asks on `/dev/tty` — unless the user has already typed something
/// (a new tab's first command), which must reach the shell, not become the
/// answer: then the notice above is all. `y` updates now, `n` remembers
/// the decline; anything else (an empty line, end of input) decides
/// nothing and the question comes again next time.
fn offer_update(paths: &Paths, update: &NewerCommit) -> miette::Result<ExitCode> {
    let Ok(mut tty) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/tty") else {
        return Ok(ExitCode::SUCCESS);
    };
    if pending_input(&tty) {
        return Ok(ExitCode::SUCCESS);
    }
    let _ = write!(tty, "Update omnigent now? [y/N] ");
    let _ = tty.flush();
    let mut answer = String::new();
    let _ = BufReader::new(&tty).take(256).read_line(&mut answer);
    match answer.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => match run_update(paths, false) {
            Ok(installed) => report_installed(&installed)?,
            // Asked for just now: told in full, not folded into the
            // hook's once-a-day line.
            Err(report) => {
                crate::error::print(&report);
                return Ok(ExitCode::FAILURE);
            }
        },
        "n" | "no" => {
            check::decline(paths, &update.available)?;
            let _ = writeln!(
                tty,
                "omnidev: not updating; {} will not be offered again",
                short(&update.available)
            );
        }
        _ => {
            // At end of input the cursor still sits after the question.
            let newline = if answer.ends_with('\n') { "" } else { "\n" };
            let _ = writeln!(
                tty,
                "{newline}omnidev: not updating now; asking again next time (`n` stops asking about {})",
                short(&update.available)
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether input is waiting on the terminal, typed before any question
/// was asked. In canonical mode the kernel counts only finished lines, so
/// for the look the terminal leaves canonical mode (nothing is read or
/// flushed) and returns to it at once.
fn pending_input(tty: &std::fs::File) -> bool {
    use nix::sys::termios::{LocalFlags, SetArg, tcgetattr, tcsetattr};
    let Ok(saved) = tcgetattr(tty) else {
        return false;
    };
    let mut look = saved.clone();
    look.local_flags.remove(LocalFlags::ICANON);
    let switched = tcsetattr(tty, SetArg::TCSANOW, &look).is_ok();
    let mut waiting: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through a pointer to a live local.
    let asked = unsafe { libc::ioctl(tty.as_raw_fd(), libc::FIONREAD, &raw mut waiting) };
    if switched {
        let _ = tcsetattr(tty, SetArg::TCSANOW, &saved);
    }
    // Not knowing is treated as "something is waiting": never risk eating
    // the user's command.
    asked != 0 || waiting > 0
}

/// `omnidev refresh`: ask the network for the newest commit and rewrite the
/// update-check cache.
pub fn refresh() -> miette::Result<ExitCode> {
    check::adopt_inherited_lock();
    let paths = Paths::from_env()?;
    let cache = crate::session::runtime(false)?.block_on(async {
        let source = DefaultSource::from_env()?;
        omnidev_install::refresh(&paths, &source, SystemTime::now()).await
    })?;
    let remote = cache.remote_commit.as_deref().map_or("unknown", short);
    let installed = cache.installed_commit.as_deref().map_or("not installed", short);
    write_stdout(&format!(
        "{}@{}: newest {remote}, installed {installed}\n",
        cache.repo, cache.reference
    ))?;
    Ok(ExitCode::SUCCESS)
}

/// `omnidev shell-hook`.
pub fn shell_hook(args: &ShellHookArgs) -> miette::Result<ExitCode> {
    let from_env = || Shell::from_path(&std::env::var("SHELL").ok()?);
    let shell = args.shell.or_else(from_env).unwrap_or(Shell::Bash);
    write_stdout(shell.snippet())?;
    Ok(ExitCode::SUCCESS)
}

/// Failures of the shell hook's `check --quiet`, told in one line and at
/// most once a day per cache root and per fault: one fault (or another
/// cache root's) never silences another.
mod hook_error {
    use std::hash::{Hash as _, Hasher as _};
    use std::os::unix::fs::MetadataExt;
    use std::path::PathBuf;
    use std::time::{Duration, SystemTime};

    /// How often the same fault is told again.
    const QUIET_FOR: Duration = Duration::from_secs(24 * 60 * 60);

    /// Where the telling of `line` is stamped: a per-user file in the temp
    /// dir (the cache root may be the very thing that fails), named by a
    /// hash of the cache root and the fault.
    fn stamp(line: &str) -> PathBuf {
        let uid = nix::unistd::getuid().as_raw();
        let cache = omnidev_install::Paths::from_env().map(|paths| paths.cache_dir);
        let mut hasher = std::hash::DefaultHasher::new();
        (cache.ok(), line).hash(&mut hasher);
        std::env::temp_dir().join(format!("omnidev-{uid}-check-{:016x}.stamp", hasher.finish()))
    }

    /// Prints `report` as one line unless the same fault of the same cache
    /// root was told less than a day ago, and stamps the telling.
    pub(super) fn tell_once_a_day(report: &miette::Report, now: SystemTime) {
        let mut line = report.to_string();
        if let Some(help) = report.help() {
            line = format!("{line} ({help})");
        }
        let line = line.replace('\n', " ");
        let stamp = stamp(&line);
        // Only a plain file of this user's counts (the temp dir is shared).
        let uid = nix::unistd::getuid().as_raw();
        let told_recently = std::fs::symlink_metadata(&stamp).is_ok_and(|meta| {
            meta.is_file()
                && meta.uid() == uid
                && meta
                    .modified()
                    .is_ok_and(|at| now.duration_since(at).is_ok_and(|age| age < QUIET_FOR))
        });
        if told_recently {
            return;
        }
        note!(
            "omnidev: the update check failed: {line}; told once a day, OMNIDEV_NO_UPDATE_CHECK=1 turns the check off"
        );
        // A new file renamed into place: a link there is replaced, never
        // followed; the modified time moves.
        let _ = omnidev_core::fs::write_atomic_unsynced(&stamp, line.as_bytes());
    }
}

fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

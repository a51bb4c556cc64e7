//! Every command-line type (clap) of `omnidev`, in one place. Raw arguments
//! only: `up`'s are derived into `run_options::RunOptions` once, and
//! validation that needs the file system happens in `commands/` and
//! `session`.

use clap::{Parser, Subcommand};

mod args;
mod help;

pub use args::*;
pub use help::*;

/// One isolated dev pod per checkout.
#[derive(Debug, Parser)]
#[command(name = "omnidev", version, about, args_conflicts_with_subcommands = true)]
pub struct Cli {
    /// What to do; `up` when omitted.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Arguments of `up`, accepted without the word `up`.
    #[command(flatten)]
    pub up: UpArgs,
}

/// The subcommands, in the order `--help` groups them (see [`GROUPS`]).
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the pod of this checkout (the default).
    #[command(after_long_help = format!("{UP_LONG_HELP}{UP_EXAMPLES}"))]
    Up(UpArgs),
    /// Open the terminal UI of this checkout's running pod (`q` leaves it running).
    #[command(after_long_help = ATTACH_LONG_HELP)]
    Attach(AttachArgs),
    /// Show this checkout's pod: directory, ports, supervisor, services.
    Status(StatusArgs),
    /// List every pod under the cache root, running or not.
    Ls(LsArgs),
    /// Print (and follow) the pod's log files.
    Logs(LogsArgs),
    /// Print the running pod's events (state, ready, crashed, reload …) and follow them.
    Events(EventsArgs),
    /// Wait until services are ready, have exited, or are healthy after a reload.
    Wait(WaitArgs),
    /// Restart a service of the running pod; without one, the services with watch rules.
    Restart(RestartArgs),
    /// Apply the edited profile file: restart only the services whose spec changed.
    ReloadProfile(ReloadProfileArgs),
    /// Stop the running pod of this checkout (from any terminal), or some of its services.
    Stop(StopArgs),
    /// Start services of the running pod that were stopped or have ended.
    Start(StartArgs),
    /// Run a one-off command with the pod's environment and persisted ports.
    #[command(visible_alias = "exec")]
    Run(RunArgs),
    /// Open the engine's shell on a database of the pod (psql, mariadb,
    /// redis-cli, sqlite3); `omnidev db url` prints its URL.
    Db(DbArgs),
    /// Shorthand for `omnidev run -- uv run omnigent ARGS…`.
    Omnigent(OmnigentArgs),
    /// Remove this checkout's pod directory (refused while it runs).
    Clean(CleanArgs),
    /// Remove the stopped pods whose checkout is gone, freeing their ports
    Gc(GcArgs),
    /// Write an omnidev.toml for this checkout: its Procfile, compose file, .env.example, app.json.
    Init(InitArgs),
    /// Serve this checkout's pod to coding agents over MCP (stdio).
    Mcp(McpArgs),
    /// Every pod of this user in one browser page, served on 127.0.0.1.
    Dashboard(DashboardArgs),
    /// Inspect and check profiles; `omnidev help profile` prints the
    /// profile format.
    #[command(subcommand, after_long_help = omnidev_pod::profile::REFERENCE)]
    Profile(ProfileCommand),
    /// Install Omnigent from git with `uv tool install` and save the choice.
    Install(InstallArgs),
    /// Reinstall the newest commit of the saved repo/ref/extras.
    Update(UpdateArgs),
    /// Tell (and on a terminal offer) an Omnigent update; reads a cache only.
    Check(CheckArgs),
    /// Print the snippet that runs the update check from an interactive shell.
    ShellHook(ShellHookArgs),
    /// Print a shell completion script.
    #[command(after_long_help = COMPLETIONS_LONG_HELP)]
    Completions(CompletionsArgs),
    /// Refresh the update-check cache from the network (run by `check` in
    /// the background; internal).
    #[command(hide = true)]
    Refresh,
    /// Write the man pages into DIR (`cargo xtask dist` ships them; internal).
    #[command(hide = true)]
    Man(ManArgs),
    /// The background process of `up --detach`: runs the pod headless with
    /// the options `up --detach` writes to its standard input (internal).
    #[command(hide = true)]
    Detached,
    /// The service `LINK.SERVICE` of a pod whose service depends on a
    /// linked pod's: ready while that service is ready (internal).
    #[command(hide = true)]
    LinkWatch(LinkWatchArgs),
}

/// The clap command of `omnidev` with the grouped subcommand list in its
/// help (clap lists subcommands under a single heading).
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    use std::fmt::Write as _;
    let command = Cli::command();
    let width =
        GROUPS.iter().flat_map(|(_, names)| names.iter()).map(|name| name.len()).max().unwrap_or(0);
    let mut groups = String::new();
    for (heading, names) in GROUPS {
        groups.push_str(heading);
        groups.push_str(":\n");
        for name in *names {
            let about = if *name == "help" {
                "Print this message or the help of the given subcommand(s)".to_owned()
            } else {
                command
                    .find_subcommand(name)
                    .and_then(clap::Command::get_about)
                    .map(ToString::to_string)
                    .unwrap_or_default()
            };
            let _ = writeln!(groups, "  {name:width$}  {about}");
        }
        groups.push('\n');
    }
    command.help_template(format!(
        "{{before-help}}{{about-with-newline}}\n{{usage-heading}} {{usage}}\n\n{groups}\
         Options:\n{{options}}{{after-help}}"
    ))
}

/// Parse the process's arguments (clap's errors and `--help` exit here;
/// with `--json` among the arguments, a usage error is one JSON record on
/// stdout, exit 2). Help asked for in a checkout fits that checkout's
/// profile (see [`fit_to_profile`]).
pub fn parse() -> Cli {
    use clap::FromArgMatches;
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let mut command = command();
    if asks_for_help(&args)
        && let Some(profile) = profile_for_help(&args)
    {
        command = fit_to_profile(command, &profile)
            .mut_subcommand("up", |up| {
                fit_to_profile(up, &profile).after_long_help(up_long_help(&profile))
            })
            .mut_subcommand("restart", |restart| restart_for_profile(restart, &profile));
    }
    let json = args.iter().any(|arg| arg == "--json");
    let parsed =
        command.try_get_matches_from(args).and_then(|matches| Cli::from_arg_matches(&matches));
    parsed.unwrap_or_else(|error| {
        if json && error.use_stderr() {
            let text = error.to_string();
            let message = text.lines().next().unwrap_or_default();
            let record = crate::error::error_record(
                "omnidev::usage",
                message.trim_start_matches("error: "),
                Some("see `omnidev help`"),
                crate::error::exit::USAGE,
            );
            let _ = std::io::Write::write_all(&mut std::io::stdout(), record.as_bytes());
            std::process::exit(i32::from(crate::error::exit::USAGE));
        }
        error.exit()
    })
}

impl Cli {
    /// Whether the command asked for JSON output: its errors are then one
    /// JSON record on stdout.
    pub fn wants_json(&self) -> bool {
        match &self.command {
            None => self.up.json,
            Some(Command::Up(args)) => args.json,
            Some(Command::Status(args)) => args.json,
            Some(Command::Ls(args)) => args.json,
            Some(Command::Logs(args)) => args.json,
            Some(Command::Events(args)) => args.json,
            Some(Command::Restart(args)) => args.json,
            Some(Command::ReloadProfile(args)) => args.json,
            Some(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use omnidev_install::{DEFAULT_PYTHON, DEFAULT_REPO};

    use super::*;

    #[test]
    fn command_definition_is_consistent() {
        command().debug_assert();
    }

    #[test]
    fn durations_are_read_as_people_write_them() {
        use std::time::Duration;
        for (text, secs) in [("30s", 30), ("5m", 300), ("1h30m", 5400), ("2d", 172_800), ("12", 12)]
        {
            assert_eq!(args::parse_duration(text), Ok(Duration::from_secs(secs)), "{text}");
        }
        assert_eq!(args::parse_duration("500ms"), Ok(Duration::from_millis(500)));
        for bad in ["", "5x", "-3s", "99999999999999999999d"] {
            let said = args::parse_duration(bad).expect_err(bad);
            assert!(said.contains("is not a duration"), "{said}");
        }
    }

    #[test]
    fn every_visible_subcommand_is_in_one_group() {
        let mut grouped: Vec<&str> =
            GROUPS.iter().flat_map(|(_, names)| names.iter().copied()).collect();
        let command = command();
        let mut visible: Vec<&str> = command
            .get_subcommands()
            .filter(|sub| !sub.is_hide_set())
            .map(clap::Command::get_name)
            .chain(["help"])
            .collect();
        grouped.sort_unstable();
        visible.sort_unstable();
        assert_eq!(grouped, visible);
    }

    #[test]
    fn bare_flags_mean_up() {
        let cli =
            Cli::try_parse_from(["omnidev", "--server-port", "7000", "--no-vite"]).expect("parse");
        assert!(cli.command.is_none());
        assert_eq!(cli.up.server_port, Some(7000));
        assert!(cli.up.no_vite);
    }

    #[test]
    fn only_and_skip_combine() {
        let cli = Cli::try_parse_from(["omnidev", "--only", "a", "--only", "b", "--skip", "b"])
            .expect("parse");
        assert_eq!(cli.up.only, ["a", "b"]);
        assert_eq!(cli.up.skip, ["b"]);
    }

    #[test]
    fn generic_overrides_parse() {
        let cli = Cli::try_parse_from([
            "omnidev",
            "up",
            "--port",
            "api=8000",
            "--host",
            "api=0.0.0.0",
            "--vite-host",
            "0.0.0.0",
        ])
        .expect("parse");
        let Some(Command::Up(up)) = cli.command else {
            panic!("expected up");
        };
        assert_eq!(up.ports, vec![("api".to_owned(), 8000)]);
        assert_eq!(up.vite_host.as_deref(), Some("0.0.0.0"));
        assert_eq!(up.hosts, vec![args::HostArg::Bind("api".to_owned(), "0.0.0.0".to_owned())]);
    }

    #[test]
    fn bad_port_override_is_a_usage_error() {
        let err = Cli::try_parse_from(["omnidev", "--port", "server"]).expect_err("must fail");
        assert_eq!(err.exit_code(), 2);
        let err = Cli::try_parse_from(["omnidev", "--port", "server=0"]).expect_err("must fail");
        assert_eq!(err.exit_code(), 2);
    }

    #[test]
    fn run_and_exec_take_everything_after_double_dash() {
        for name in ["run", "exec"] {
            let cli =
                Cli::try_parse_from(["omnidev", name, "--port", "web", "--", "sh", "-c", "x"])
                    .expect("parse");
            let Some(Command::Run(run)) = cli.command else {
                panic!("expected run");
            };
            assert_eq!(run.command, ["sh", "-c", "x"]);
            assert_eq!(run.port.as_deref(), Some("web"));
        }
    }

    #[test]
    fn omnigent_passes_flags_through() {
        let cli = Cli::try_parse_from(["omnidev", "omnigent", "server", "--help"]).expect("parse");
        let Some(Command::Omnigent(args)) = cli.command else {
            panic!("expected omnigent");
        };
        assert_eq!(args.args, ["server", "--help"]);
    }

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

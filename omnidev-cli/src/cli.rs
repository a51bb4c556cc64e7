//! Every command-line type (clap) of `omnidev`, in one place. Raw arguments
//! only: `up`'s are derived into `run_options::RunOptions` once, and
//! validation that needs the file system happens in `commands/` and
//! `session`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use clap_complete::Shell;
use omnidev_core::spec::limits;
use omnidev_install::{DEFAULT_EXTRA, DEFAULT_PYTHON, DEFAULT_REF, DEFAULT_REPO, InstallChoice};

/// One isolated dev pod per checkout.
#[derive(Debug, Parser)]
#[command(
    name = "omnidev",
    version,
    about,
    args_conflicts_with_subcommands = true
)]
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
    /// Shorthand for `omnidev run -- uv run omnigent ARGS…`.
    Omnigent(OmnigentArgs),
    /// Remove this checkout's pod directory (refused while it runs).
    Clean(CleanArgs),
    /// Remove the stopped pods whose checkout is gone, freeing their ports
    Gc(GcArgs),
    /// Write an omnidev.toml for this checkout (from its Procfile when it has one).
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
}

/// How `omnidev --help` groups the subcommands: a heading, then the
/// subcommands under it. Every visible subcommand is in exactly one group
/// (a unit test checks it).
pub const GROUPS: &[(&str, &[&str])] = &[
    (
        "Pod commands (the pod of this checkout)",
        &[
            "up",
            "attach",
            "status",
            "ls",
            "dashboard",
            "logs",
            "events",
            "wait",
            "restart",
            "reload-profile",
            "stop",
            "start",
            "run",
            "omnigent",
            "clean",
            "gc",
            "init",
            "profile",
            "mcp",
        ],
    ),
    (
        "Install commands (Omnigent through uv; no checkout needed)",
        &["install", "update", "check", "shell-hook"],
    ),
    ("Other", &["completions", "help"]),
];

/// The long help of `omnidev up` after its options.
const UP_LONG_HELP: &str = "\
Overview:
  Finds the checkout, its profile (omnidev.toml, else the embedded Omnigent
  profile) and its pod directory, takes the pod's lock, allocates ports, then
  starts the services in dependency order, each once its dependencies are
  ready, and restarts, reloads and stops them. A terminal gets the TUI;
  otherwise (or with --headless) each line prints as `<service> | <line>`.

TUI keys:
  1…9 / 0 / Tab, Shift-Tab   focus a service pane / the combined pane / cycle
  ↑ ↓ j k  PgUp PgDn Space   scroll (scrolling up stops following)
  u d  g G Home End          half page, top, bottom (G follows again)
  f / F                      toggle follow
  / or ? then text, Enter    search forward / backward; n / N next / previous
  Esc                        clear the search highlight
  w                          wrap long lines
  t                          show each line's time (toggle; --timestamps starts with it on)
  r                          restart the focused service (dependents follow)
  s                          stop the focused service (the pod runs on); s again starts it
  R                          reload the watched services (every one when none has watch rules)
  P                          apply the changed profile file (omnidev reload-profile)
  c                          clear the focused pane
  q, Ctrl-C                  quit and stop everything
  Ctrl-Z                     suspend (the pod runs on); fg brings the UI back

Exit codes:
  0      stopped by a signal, q or Ctrl-C, or every service ended with 0
         by itself (after `omnidev stop SERVICE` the pod waits to be stopped)
  1      an error before start, or a service ended with a failure and no restart
  2      usage error
  128+N  a third signal N during shutdown (the orphan guard kills the rest)
";

/// The examples closing `omnidev up --help` for Omnigent's profile (and
/// outside a checkout).
const UP_EXAMPLES: &str = "
Examples:
  omnidev                                          TUI for the surrounding checkout
  omnidev --headless --no-vite                     CI / agents: Omnigent's backend only, plain lines
  omnidev up --detach && omnidev status            background pod, then its state
  omnidev --vite-host 0.0.0.0 --trust-lan-origins  reach Omnigent's vite from the LAN
  omnidev --repo ~/src/other --port server=7000    another checkout, a fixed port
";

/// `omnidev up`'s long help for `profile`: Omnigent's examples when it
/// runs vite, else examples naming its own first service and port.
fn up_long_help(profile: &omnidev_pod::Profile) -> String {
    use std::fmt::Write as _;
    if profile.services.contains_key("vite") {
        return format!("{UP_LONG_HELP}{UP_EXAMPLES}");
    }
    let service = profile.services.keys().next().map_or("web", String::as_str);
    let port = profile.ports.keys().next().map_or("web", String::as_str);
    let rows = [
        ("omnidev".to_owned(), "TUI for the surrounding checkout"),
        (
            "omnidev --headless".to_owned(),
            "CI / agents: plain `<service> | <line>` lines",
        ),
        (
            "omnidev up --detach && omnidev status".to_owned(),
            "background pod, then its state",
        ),
        (
            format!("omnidev --only {service}"),
            "one service and what it depends on",
        ),
        (
            format!("omnidev --repo ~/src/other --port {port}=7000"),
            "another checkout, a fixed port",
        ),
    ];
    let width = rows
        .iter()
        .map(|(command, _)| command.len())
        .max()
        .unwrap_or(0);
    let mut help = format!("{UP_LONG_HELP}\nExamples:\n");
    for (command, what) in rows {
        let _ = writeln!(help, "  {command:width$}  {what}");
    }
    help
}

/// The long help of `omnidev attach` after its options.
const ATTACH_LONG_HELP: &str = "\
Overview:
  The TUI of a pod that runs without one (`omnidev up --detach`, or an
  `omnidev up` in another terminal), over its control socket: the panes
  start with the pod's kept lines and events, then follow; the keys act on
  the pod. Several can be attached at once.

Keys: those of `omnidev up` (see `omnidev up --help`), except:
  q, Ctrl-C                  detach: the UI leaves, the pod keeps running
  c                          clear the pane in this UI only
  r, R, s                    sent to the pod; the footer says how it went
Stop the pod with `omnidev stop`.

Exit codes:
  0      detached (q, Ctrl-C, SIGINT, SIGTERM, SIGHUP), or the pod stopped
         while attached (the last line says how)
  1      not on a terminal, or the pod's control socket does not answer
  2      a --pod-dir that is not a pod
  3      no pod runs there
";

/// The long help of `omnidev completions` after its arguments.
const COMPLETIONS_LONG_HELP: &str = "\
Where the script goes (then open a new shell):
  bash        omnidev completions --install bash
              (writes ~/.local/share/bash-completion/completions/omnidev)
  zsh         omnidev completions --install zsh
              (writes ~/.local/share/zsh/site-functions/_omnidev; with
              `fpath=(~/.local/share/zsh/site-functions $fpath)` before
              compinit in ~/.zshrc, which it names when missing)
  fish        omnidev completions --install fish
              (writes ~/.config/fish/completions/omnidev.fish)
  elvish      omnidev completions elvish >> ~/.config/elvish/rc.elv
  powershell  omnidev completions powershell >> $PROFILE
--install follows XDG_DATA_HOME, XDG_CONFIG_HOME and BASH_COMPLETION_USER_DIR,
rewrites only a file it wrote itself (--force replaces another), and says
where it wrote.
";

/// The clap command of `omnidev` with the grouped subcommand list in its
/// help (clap lists subcommands under a single heading).
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    use std::fmt::Write as _;
    let command = Cli::command();
    let width = GROUPS
        .iter()
        .flat_map(|(_, names)| names.iter())
        .map(|name| name.len())
        .max()
        .unwrap_or(0);
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
    let parsed = command
        .try_get_matches_from(args)
        .and_then(|matches| Cli::from_arg_matches(&matches));
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

/// Whether `args` ask for help (`-h`, `--help`, `help`) before a `--`.
fn asks_for_help(args: &[std::ffi::OsString]) -> bool {
    args.iter()
        .skip(1)
        .take_while(|arg| *arg != "--")
        .any(|arg| arg == "-h" || arg == "--help" || arg == "help")
}

/// The profile help is shown for: `--profile FILE`, else that of the
/// checkout (`--repo DIR`, else the surrounding one). `None` when there is
/// none to be had: help is then the general one, never an error.
fn profile_for_help(args: &[std::ffi::OsString]) -> Option<omnidev_pod::Profile> {
    let value = |flag: &str| {
        let prefix = format!("{flag}=");
        args.iter().enumerate().find_map(|(i, arg)| {
            let arg = arg.to_str()?;
            if arg == flag {
                args.get(i + 1).map(PathBuf::from)
            } else {
                arg.strip_prefix(&prefix).map(PathBuf::from)
            }
        })
    };
    if let Some(file) = value("--profile") {
        return omnidev_pod::Profile::from_file(&file).ok();
    }
    let cwd = std::env::current_dir().ok()?;
    let repo = omnidev_pod::resolve_repo_root(&cwd, value("--repo").as_deref()).ok()?;
    omnidev_pod::Profile::load(&repo, None)
        .ok()
        .map(|(profile, _)| profile)
}

/// `restart`'s help naming what it restarts without an argument in
/// `profile`.
fn restart_for_profile(command: clap::Command, profile: &omnidev_pod::Profile) -> clap::Command {
    let mut watched: Vec<&str> = profile
        .services
        .iter()
        .filter(|(_, service)| !service.watch.is_empty())
        .map(|(name, _)| name.as_str())
        .collect();
    if watched.is_empty() {
        watched = profile.services.keys().map(String::as_str).collect();
    }
    let names = watched.join(", ");
    command.mut_arg("service", |arg| {
        let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
        arg.help(format!("{help} (this profile: {names})"))
    })
}

/// The options of `up` as they apply to `profile`: the Omnigent-only ones
/// (marked "Omnigent profile:" in every help) are hidden when the profile
/// has nothing they act on, and `--port`, `--host`, `--only` and `--skip`
/// name the profile's own ports and services.
pub fn fit_to_profile(command: clap::Command, profile: &omnidev_pod::Profile) -> clap::Command {
    let has_port = |name: &str| profile.ports.contains_key(name);
    let applies = [
        ("server_port", has_port("server")),
        ("vite_port", has_port("vite")),
        ("vite_host", has_port("vite")),
        ("no_vite", profile.services.contains_key("vite")),
        ("trust_lan_origins", profile.lan_origins.is_some()),
    ];
    let mut command = command;
    for (id, applies) in applies {
        if !applies {
            command = command.mut_arg(id, |arg| arg.hide(true));
        }
    }
    let list = |names: Vec<&String>| {
        if names.is_empty() {
            "none".to_owned()
        } else {
            names
                .into_iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    let ports = list(profile.ports.keys().collect());
    let services = list(profile.services.keys().collect());
    let with = |what: &'static str, names: String| {
        move |arg: clap::Arg| {
            let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
            arg.help(format!("{help} (this profile's {what}: {names})"))
        }
    };
    command
        .mut_arg("ports", with("ports", ports.clone()))
        .mut_arg("hosts", with("ports", ports))
        .mut_arg("only", with("services", services.clone()))
        .mut_arg("skip", with("services", services))
}

/// Where the pod is: the checkout, its profile and its pod directory. Shared
/// by every command that acts on a checkout's pod.
#[derive(Debug, Args, Default, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct PodArgs {
    /// Checkout to run, taken verbatim as the repository root (default: the
    /// first directory holding `.git` or `.jj` above the current one).
    #[arg(long, value_name = "DIR")]
    pub repo: Option<PathBuf>,
    /// Profile to use instead of `<repo>/omnidev.toml` or the embedded
    /// Omnigent profile.
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// Use this pod directory instead of
    /// `${XDG_CACHE_HOME:-~/.cache}/omnidev/<repo>-<hash8>`.
    #[arg(long, value_name = "PATH")]
    pub pod_dir: Option<PathBuf>,
}

/// Arguments of `omnidev up`.
#[derive(Debug, Args, Default, Clone)]
#[expect(clippy::struct_excessive_bools, reason = "one field per CLI switch")]
pub struct UpArgs {
    /// Checkout, profile and pod directory.
    #[command(flatten)]
    pub pod: PodArgs,
    /// Omnigent profile: force the `server` port (same as `--port
    /// server=N`); fails if busy.
    #[arg(long, value_name = "N")]
    pub server_port: Option<u16>,
    /// Omnigent profile: force the `vite` port (same as `--port vite=N`);
    /// fails if busy.
    #[arg(long, value_name = "N")]
    pub vite_port: Option<u16>,
    /// Force the port named NAME in the profile; fails if busy. Repeatable.
    #[arg(long = "port", value_name = "NAME=N", value_parser = parse_port_override)]
    pub ports: Vec<(String, u16)>,
    /// Omnigent profile: bind host for vite (default 127.0.0.1; 0.0.0.0 to
    /// reach it from the LAN). Same as `--host vite=ADDR`.
    #[arg(long, value_name = "ADDR")]
    pub vite_host: Option<String>,
    /// Bind host for the port named NAME (`{host.NAME}` in the profile).
    /// Repeatable.
    #[arg(long = "host", value_name = "NAME=ADDR", value_parser = parse_host_override)]
    pub hosts: Vec<(String, String)>,
    /// Omnigent profile (any with `[lan-origins]`): trust `http://<LAN
    /// ip>:<vite port>` as WebSocket origins.
    #[arg(long)]
    pub trust_lan_origins: bool,
    /// Omnigent profile: backend only, do not run vite (same as `--skip
    /// vite`).
    #[arg(long)]
    pub no_vite: bool,
    /// Run only these services and the services they depend on (all the
    /// way down). Repeatable; `--skip` then leaves some of them out, and a
    /// dependent of a service left out starts without waiting for it.
    #[arg(long, value_name = "SERVICE")]
    pub only: Vec<String>,
    /// With `--only`: exactly the services named, not their dependencies.
    #[arg(long, requires = "only")]
    pub no_deps: bool,
    /// Do not run these services (applied after `--only`). Repeatable.
    #[arg(long, value_name = "SERVICE")]
    pub skip: Vec<String>,
    /// Run N copies of SERVICE (`SERVICE.1` … `SERVICE.N`, each with its
    /// own process, log and port), over its `replicas`. Repeatable.
    #[arg(long, value_name = "SERVICE=N", value_parser = parse_scale)]
    pub scale: Vec<(String, u32)>,
    /// Remove the pod directory before starting.
    #[arg(long)]
    pub clean: bool,
    /// No TUI: print `<service> | <line>` (the default when stdout is not a
    /// terminal).
    #[arg(long)]
    pub headless: bool,
    /// Headless, printing one JSON event record a line (schema:
    /// docs/events.md) and nothing else on stdout.
    #[arg(long, conflicts_with = "detach")]
    pub json: bool,
    /// Start each line with the time the service wrote it (`HH:MM:SS`, local), in
    /// the TUI and headless (also `[pod] timestamps = true`).
    #[arg(long)]
    pub timestamps: bool,
    /// File-watch debounce in milliseconds (default: the profile's, else
    /// 100; at most 60000).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(..=limits::MAX_DEBOUNCE.as_secs() * 1000))]
    pub debounce: Option<u64>,
    /// Show why each file change did or did not reload, and each readiness
    /// attempt, as `debug:` lines (also `OMNIDEV_LOG=debug`).
    #[arg(long)]
    pub debug: bool,
    /// Start the pod in the background, return once every service is ready
    /// (exit 1 when one failed) and print the URLs; output goes to
    /// `<pod>/logs/omnidev.log`.
    #[arg(long)]
    pub detach: bool,
    /// With --detach: seconds to wait for readiness (at most 86400).
    #[arg(long, value_name = "SECS", default_value_t = 600, requires = "detach", value_parser = clap::value_parser!(u64).range(..=limits::MAX_READY_TIMEOUT.as_secs()))]
    pub ready_timeout: u64,
}

/// Arguments of `omnidev run` (alias `exec`).
#[derive(Debug, Args, Clone)]
pub struct RunArgs {
    /// Checkout, profile and pod directory.
    #[command(flatten)]
    pub pod: PodArgs,
    /// Set `PORT` to the pod's port NAME, as the service of that name gets
    /// it (a Procfile service's port bears its name).
    #[arg(long = "port", value_name = "NAME")]
    pub port: Option<String>,
    /// The command and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<String>,
}

/// Arguments of `omnidev omnigent`.
#[derive(Debug, Args, Clone)]
pub struct OmnigentArgs {
    /// Checkout, profile and pod directory.
    #[command(flatten)]
    pub pod: PodArgs,
    /// Arguments passed to `uv run omnigent`.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub args: Vec<String>,
}

/// `omnidev profile …`.
#[derive(Debug, Subcommand, Clone)]
pub enum ProfileCommand {
    /// Print the effective profile (the embedded Omnigent one when the
    /// checkout has no `omnidev.toml`), to start a new profile from.
    Show(ProfileShowArgs),
    /// Load and validate the effective profile without running anything,
    /// and print its services in start order (exit 1 on a problem).
    Check(ProfileCheckArgs),
}

/// Arguments of `omnidev init`.
#[derive(Debug, Args, Clone)]
pub struct InitArgs {
    /// Checkout to write the profile for (default: the surrounding one).
    #[arg(long, value_name = "DIR")]
    pub repo: Option<PathBuf>,
    /// Replace an existing `omnidev.toml`.
    #[arg(long)]
    pub force: bool,
    /// The Procfile to read (default: `Procfile.dev`, else `Procfile`).
    #[arg(short = 'f', long = "procfile", value_name = "FILE")]
    pub procfile: Option<PathBuf>,
}

/// Arguments of `omnidev profile check`.
#[derive(Debug, Args, Clone)]
pub struct ProfileCheckArgs {
    /// Checkout whose profile to check (default: the surrounding one).
    #[arg(long, value_name = "DIR")]
    pub repo: Option<PathBuf>,
    /// Check this profile file instead of the checkout's `omnidev.toml`.
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
}

/// Arguments of `omnidev profile show`.
#[derive(Debug, Args, Clone)]
pub struct ProfileShowArgs {
    /// Checkout whose profile to show (default: the surrounding one; the
    /// embedded profile outside a checkout).
    #[arg(long, value_name = "DIR")]
    pub repo: Option<PathBuf>,
    /// Show this profile file.
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// Show the embedded Omnigent profile, whatever the checkout has.
    #[arg(long, conflicts_with_all = ["repo", "profile"])]
    pub embedded: bool,
}

/// Arguments of `omnidev clean`.
#[derive(Debug, Args, Clone)]
pub struct CleanArgs {
    /// Checkout, profile and pod directory.
    #[command(flatten)]
    pub pod: PodArgs,
}

/// Arguments of `omnidev gc`.
#[derive(Debug, Args, Clone)]
pub struct GcArgs {
    /// Say what would be removed, and change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Arguments of `omnidev completions`.
#[derive(Debug, Args, Clone)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_name = "SHELL")]
    pub shell: Shell,
    /// Write the script where the shell looks for it (bash, zsh, fish) and
    /// say where, instead of printing it.
    #[arg(long)]
    pub install: bool,
    /// With --install: replace a file there that omnidev did not write.
    #[arg(long, requires = "install")]
    pub force: bool,
}

/// Arguments of `omnidev man`.
#[derive(Debug, Args, Clone)]
pub struct ManArgs {
    /// The directory to write `omnidev.1`, `omnidev-up.1`, … into.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
}

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
    /// Git repository to install from (a URL, not a checkout: `--repo` of
    /// the pod commands is a directory).
    #[arg(long = "git", value_name = "URL", default_value = DEFAULT_REPO, allow_hyphen_values = true)]
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
            skip_web_check: self.skip_web_check,
        }
    }
}

/// Arguments of `omnidev update`.
#[derive(Debug, Args, Clone, Default)]
pub struct UpdateArgs {
    /// Skip the Node ≥ 22 / npm-or-pnpm check (also `OMNIDEV_SKIP_WEB_CHECK=1`;
    /// skipped anyway when `install --skip-web-check` saved it).
    #[arg(long)]
    pub skip_web_check: bool,
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

/// Arguments of `omnidev logs`.
#[derive(Debug, Args, Clone)]
pub struct LogsArgs {
    /// Checkout, profile and pod directory.
    #[command(flatten)]
    pub pod: PodArgs,
    /// Only these services; every service when omitted (lines prefixed
    /// `name | ` unless one service is named).
    #[arg(value_name = "SERVICE")]
    pub services: Vec<String>,
    /// Keep printing new lines as they are written, until Ctrl-C or until
    /// the pod stops (at once when it does not run); says so and exits 0.
    #[arg(short, long)]
    pub follow: bool,
    /// Print only the last N lines of each log (default: all; 10 with -f,
    /// unless --since-reload).
    #[arg(short = 'n', long = "lines", value_name = "N")]
    pub lines: Option<usize>,
    /// Only the lines written since the pod's last reload (since it started
    /// when none happened), running or stopped.
    #[arg(long)]
    pub since_reload: bool,
    /// Print one JSON `log` record a line (schema: docs/events.md).
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `omnidev events`.
#[derive(Debug, Args, Clone)]
#[expect(clippy::struct_excessive_bools, reason = "one field per CLI switch")]
pub struct EventsArgs {
    /// Checkout, profile and pod directory.
    #[command(flatten)]
    pub pod: PodArgs,
    /// Only these services' events (and the pod's own); all when omitted.
    #[arg(value_name = "SERVICE")]
    pub services: Vec<String>,
    /// Print one JSON record a line (schema: docs/events.md).
    #[arg(long)]
    pub json: bool,
    /// Keep printing new events until the pod stops (or Ctrl-C).
    #[arg(short, long)]
    pub follow: bool,
    /// Only events of the last DURATION (`30s`, `5m`, `2h`, `500ms`; a bare
    /// number is seconds).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, conflicts_with = "since_reload")]
    pub since: Option<std::time::Duration>,
    /// Only events from the last reload on (all when none happened).
    #[arg(long)]
    pub since_reload: bool,
    /// Include the services' output lines (`log` events).
    #[arg(long)]
    pub logs: bool,
}

/// Arguments of `omnidev wait`: exit 0 when the condition holds, 1 when a
/// service failed, 2 on usage errors, 3 when the pod does not run, 4 when
/// the time ran out.
#[derive(Debug, Args, Clone)]
#[command(group(clap::ArgGroup::new("until").required(true).args(["ready", "exited", "healthy_after_reload"])))]
pub struct WaitArgs {
    /// Checkout, profile and pod directory.
    #[command(flatten)]
    pub pod: PodArgs,
    /// The services; every service when omitted.
    #[arg(value_name = "SERVICE")]
    pub services: Vec<String>,
    /// Until each is ready (exit 1 as soon as one crashed, failed or its
    /// readiness probe timed out).
    #[arg(long)]
    pub ready: bool,
    /// Until each has ended (exit 1 when one crashed or failed).
    #[arg(long)]
    pub exited: bool,
    /// Until the reload of the latest change the watcher has seen (begun at
    /// most 2 s before this command, or after it) is over and each is
    /// ready again (exit 1 as soon as a service crashed after it).
    #[arg(long)]
    pub healthy_after_reload: bool,
    /// Seconds to wait at most (default 600; 60 with
    /// --healthy-after-reload; at most 86400).
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(..=limits::MAX_REQUEST_TIMEOUT.as_secs()))]
    pub timeout: Option<u64>,
}

impl WaitArgs {
    /// Seconds to wait: `--timeout`, else 600 (a first start may install
    /// dependencies), or 60 after a reload (a reload that takes longer is
    /// stuck).
    pub fn timeout_secs(&self) -> u64 {
        self.timeout
            .unwrap_or(if self.healthy_after_reload { 60 } else { 600 })
    }
}

/// `30s`, `5m`, `2h`, `1d`, `500ms`, or a number of seconds.
fn parse_duration(value: &str) -> Result<std::time::Duration, String> {
    let digits = value
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(value.len());
    let (number, unit) = value.split_at(digits);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("`{value}` is not a duration: write e.g. 30s, 5m, 2h or 500ms"))?;
    let millis = match unit {
        "ms" => Some(number),
        "" | "s" => number.checked_mul(1000),
        "m" => number.checked_mul(60_000),
        "h" => number.checked_mul(3_600_000),
        "d" => number.checked_mul(86_400_000),
        _ => {
            return Err(format!(
                "`{value}`: unknown unit `{unit}` (use ms, s, m, h or d)"
            ));
        }
    };
    millis
        .map(std::time::Duration::from_millis)
        .ok_or_else(|| format!("`{value}` is too long a duration"))
}

/// Arguments of `omnidev ls`.
#[derive(Debug, Args, Clone)]
pub struct LsArgs {
    /// Print JSON (schema 1, see docs/control.md).
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `omnidev restart`.
#[derive(Debug, Args, Clone)]
pub struct RestartArgs {
    /// Checkout, profile and pod directory.
    #[command(flatten)]
    pub pod: PodArgs,
    /// The service to restart (its dependents follow). Without it: the
    /// services that have `watch` rules, as a file change would reload
    /// them (in the Omnigent profile `server`, then `host`, its
    /// dependent), or every service when none has.
    #[arg(value_name = "SERVICE", conflicts_with = "all")]
    pub service: Option<String>,
    /// Restart every service, as one reload (dependencies first, each
    /// dependent once what it needs is ready again).
    #[arg(long)]
    pub all: bool,
    /// Restart SERVICE only: its dependents keep running.
    #[arg(long, requires = "service")]
    pub no_deps: bool,
    /// Print the pod's status afterwards as JSON.
    #[arg(long)]
    pub json: bool,
    /// Seconds to wait for the restarted services to be ready (at most
    /// 86400).
    #[arg(long, value_name = "SECS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(..=limits::MAX_REQUEST_TIMEOUT.as_secs()))]
    pub timeout: u64,
}

/// Arguments of `omnidev attach`.
#[derive(Debug, Args, Clone)]
pub struct AttachArgs {
    /// Checkout, profile and pod directory.
    #[command(flatten)]
    pub pod: PodArgs,
    /// Start each line with the time the service wrote it (`HH:MM:SS`, local;
    /// `t` toggles it).
    #[arg(long)]
    pub timestamps: bool,
}

/// Arguments of `omnidev reload-profile`.
#[derive(Debug, Args, Clone)]
pub struct ReloadProfileArgs {
    /// Checkout, profile and pod directory.
    #[command(flatten)]
    pub pod: PodArgs,
    /// Print what was done and the pod's status afterwards as JSON.
    #[arg(long)]
    pub json: bool,
    /// Seconds to wait for the restarted and started services to be ready
    /// (at most 86400).
    #[arg(long, value_name = "SECS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(..=limits::MAX_REQUEST_TIMEOUT.as_secs()))]
    pub timeout: u64,
}

/// Arguments of `omnidev status`.
#[derive(Debug, Args, Clone)]
pub struct StatusArgs {
    /// Checkout, profile and pod directory.
    #[command(flatten)]
    pub pod: PodArgs,
    /// Print JSON (schema 1, see docs/control.md).
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `omnidev mcp`.
#[derive(Debug, Args, Clone)]
pub struct McpArgs {
    /// Checkout, profile and pod directory.
    #[command(flatten)]
    pub pod: PodArgs,
    /// Offer the `up` tool, which starts the pod in the background (without
    /// it, agents can only act on a pod someone started).
    #[arg(long)]
    pub allow_up: bool,
}

/// Arguments of `omnidev dashboard`.
#[derive(Debug, Args, Clone)]
pub struct DashboardArgs {
    /// The port to serve on (on 127.0.0.1); 0 lets the system choose.
    #[arg(long, value_name = "PORT", default_value_t = 0)]
    pub port: u16,
    /// Open the page in the browser.
    #[arg(long)]
    pub open: bool,
    /// Offer `up` for a stopped pod (`omnidev up --detach` of its
    /// checkout), as `omnidev mcp --allow-up` does.
    #[arg(long)]
    pub allow_up: bool,
}

/// Arguments of `omnidev start`.
#[derive(Debug, Args, Clone)]
pub struct StartArgs {
    /// Checkout, profile and pod directory.
    #[command(flatten)]
    pub pod: PodArgs,
    /// The services to start again (stopped with `omnidev stop SERVICE`, or
    /// ended); one that runs is left as it is.
    #[arg(value_name = "SERVICE", required = true)]
    pub services: Vec<String>,
    /// Seconds to wait for them to be ready (at most 86400).
    #[arg(long, value_name = "SECS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(..=limits::MAX_REQUEST_TIMEOUT.as_secs()))]
    pub timeout: u64,
}

/// Arguments of `omnidev stop`.
#[derive(Debug, Args, Clone)]
pub struct StopArgs {
    /// Checkout, profile and pod directory.
    #[command(flatten)]
    pub pod: PodArgs,
    /// Stop only these services (the pod and their dependents run on;
    /// `omnidev start` brings them back); the whole pod when omitted.
    #[arg(value_name = "SERVICE")]
    pub services: Vec<String>,
    /// Seconds to wait for the pod to end (at most 86400).
    #[arg(long, value_name = "SECS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(..=limits::MAX_REQUEST_TIMEOUT.as_secs()))]
    pub timeout: u64,
}

fn split_pair(value: &str) -> Result<(&str, &str), String> {
    let (name, rest) = value
        .split_once('=')
        .ok_or_else(|| format!("expected NAME=VALUE, got `{value}`"))?;
    if name.is_empty() {
        return Err(format!("missing NAME before `=` in `{value}`"));
    }
    Ok((name, rest))
}

fn parse_port_override(value: &str) -> Result<(String, u16), String> {
    let (name, port) = split_pair(value)?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("`{port}` is not a port number (1-65535)"))?;
    if port == 0 {
        return Err("port 0 is not allowed".to_owned());
    }
    Ok((name.to_owned(), port))
}

fn parse_scale(value: &str) -> Result<(String, u32), String> {
    let (name, count) = split_pair(value)?;
    let count: u32 = count
        .parse()
        .map_err(|_| format!("`{count}` is not a number of copies"))?;
    Ok((name.to_owned(), count))
}

fn parse_host_override(value: &str) -> Result<(String, String), String> {
    let (name, host) = split_pair(value)?;
    if host.is_empty() {
        return Err(format!("missing address after `=` in `{value}`"));
    }
    Ok((name.to_owned(), host.to_owned()))
}

impl PodArgs {
    /// The flags that name the same pod again, for a command to suggest
    /// (` --repo DIR`, ` --pod-dir PATH`; empty for this checkout's pod).
    pub fn same_pod(&self) -> String {
        use std::fmt::Write as _;
        let mut flags = String::new();
        for (flag, path) in [("--repo", &self.repo), ("--pod-dir", &self.pod_dir)] {
            if let Some(path) = path {
                let path = path.to_string_lossy();
                let plain = !path.is_empty()
                    && path
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@%~".contains(c));
                if plain {
                    let _ = write!(flags, " {flag} {path}");
                } else {
                    let _ = write!(flags, " {flag} '{}'", path.replace('\'', "'\\''"));
                }
            }
        }
        flags
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_definition_is_consistent() {
        command().debug_assert();
    }

    #[test]
    fn every_visible_subcommand_is_in_one_group() {
        let mut grouped: Vec<&str> = GROUPS
            .iter()
            .flat_map(|(_, names)| names.iter().copied())
            .collect();
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
        assert_eq!(up.hosts, vec![("api".to_owned(), "0.0.0.0".to_owned())]);
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

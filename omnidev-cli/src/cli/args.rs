//! The arguments of each subcommand (clap types, raw: `up`'s are derived
//! into `run_options::RunOptions` once).

use std::path::PathBuf;

use clap::builder::{PossibleValuesParser, TypedValueParser as _};
use clap::{Args, Subcommand};
use clap_complete::Shell;
use omnidev_core::spec::limits;
use omnidev_install::{DEFAULT_EXTRA, DEFAULT_PYTHON, DEFAULT_REF, DEFAULT_REPO, InstallChoice};

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
    /// `NAME=ADDR`: bind host for the port named NAME (`{host.NAME}` in
    /// the profile; repeatable). `[USER@]HOST[:PORT]`: run the pod on that
    /// host over ssh, its ports forwarded here (once).
    #[arg(long = "host", value_name = "HOST", value_parser = parse_host_arg)]
    pub hosts: Vec<HostArg>,
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
    /// Run the profile's database on ENGINE (`postgres`, `mariadb`,
    /// `sqlite`…): a server of the pod's own (the pod keeps the choice;
    /// the Omnigent profile's database may go to postgres or mariadb).
    #[arg(long, value_name = "ENGINE", value_parser = parse_engine)]
    pub db: Option<omnidev_pod::database::DbEngine>,
    /// A database of this pod without data yet starts as a copy of the
    /// same database of CHECKOUT's pod (`omnidev db clone`).
    #[arg(long, value_name = "CHECKOUT")]
    pub clone_from: Option<PathBuf>,
    /// Point the profile's link NAME (`[links.NAME]`) at another checkout
    /// for this run: a path (relative to this checkout) or a worktree's
    /// branch. Repeatable.
    #[arg(long, value_name = "NAME=CHECKOUT", value_parser = parse_link)]
    pub link: Vec<(String, String)>,
    /// Start the pods of the profile's links that are not running first,
    /// each in the background in its own checkout (as `omnidev up
    /// --detach --with-links --repo CHECKOUT`).
    #[arg(long)]
    pub with_links: bool,
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
    /// 100; at most 60000); a fifth of it once each changed file is closed,
    /// renamed or removed.
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

/// Arguments of `omnidev db`.
#[derive(Debug, Args, Clone)]
#[command(args_conflicts_with_subcommands = true)]
pub struct DbArgs {
    /// `url`: print the database's URL instead.
    #[command(subcommand)]
    pub action: Option<DbAction>,
    /// Checkout, profile and pod directory.
    #[command(flatten)]
    pub pod: PodArgs,
    /// The database (the profile's first when omitted).
    #[arg(value_name = "NAME")]
    pub name: Option<String>,
}

/// What `omnidev db` does besides opening the shell.
#[derive(Debug, Subcommand, Clone)]
pub enum DbAction {
    /// Print the database's URL (`{db.NAME.url}`).
    Url {
        /// Checkout, profile and pod directory.
        #[command(flatten)]
        pod: PodArgs,
        /// The database (the profile's first when omitted).
        #[arg(value_name = "NAME")]
        name: Option<String>,
    },
    /// Keep a copy of the database's data in the pod, to restore later.
    Snapshot {
        /// Which database, and of which pod.
        #[command(flatten)]
        which: DbWhich,
        /// Its label (default: the time, `YYYYMMDD-HHMMSS`).
        #[arg(value_name = "LABEL")]
        label: Option<String>,
    },
    /// Put a snapshot's data back: the services that use it stop, the data
    /// is swapped in, they start again.
    Restore {
        /// Which database, and of which pod.
        #[command(flatten)]
        which: DbWhich,
        /// The snapshot (`omnidev db snapshots` lists them).
        #[arg(value_name = "LABEL")]
        label: String,
    },
    /// List the pod's snapshots.
    Snapshots {
        /// Checkout, profile and pod directory.
        #[command(flatten)]
        pod: PodArgs,
    },
    /// Start the database afresh: its data is removed (its snapshots
    /// stay).
    Reset {
        /// Which database, and of which pod.
        #[command(flatten)]
        which: DbWhich,
        /// Yes, remove its data.
        #[arg(long)]
        yes: bool,
    },
    /// Run a database's seed and keep its result in the user's cache
    /// (what a pod's `NAME-seed` service runs).
    #[command(hide = true)]
    SeedRun(SeedRunArgs),
    /// Copy another checkout's pod's database into this pod's (in place
    /// of its data).
    Clone {
        /// Which database, and of which pod.
        #[command(flatten)]
        which: DbWhich,
        /// The checkout whose pod to copy from (default: this
        /// repository's main worktree).
        #[arg(long, value_name = "CHECKOUT")]
        from: Option<PathBuf>,
    },
}

/// `omnidev db seed-run`: how a pod runs a database's seed (hidden).
#[derive(Debug, Args, Clone)]
pub struct SeedRunArgs {
    /// Which database, and of which pod.
    #[command(flatten)]
    pub which: DbWhich,
    /// The seed's key in the user's cache.
    #[arg(long)]
    pub key: String,
    /// The seed's command.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// The database an `omnidev db` action works on.
#[derive(Debug, Args, Clone)]
pub struct DbWhich {
    /// Checkout, profile and pod directory.
    #[command(flatten)]
    pub pod: PodArgs,
    /// The database (the profile's first when omitted).
    #[arg(long = "database", short = 'd', value_name = "NAME")]
    pub name: Option<String>,
}

/// Arguments of `omnidev omnigent`.
#[derive(Debug, Args, Clone)]
pub struct OmnigentArgs {
    /// Checkout, profile and pod directory.
    #[command(flatten)]
    pub pod: PodArgs,
    /// Arguments passed to `uv run omnigent`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "ARGS")]
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

/// Arguments of `omnidev link-watch` (internal).
#[derive(Debug, Args, Clone)]
pub struct LinkWatchArgs {
    /// The linked pod's directory.
    #[arg(long, value_name = "PATH")]
    pub pod_dir: PathBuf,
    /// Its service this pod's services wait for.
    #[arg(long, value_name = "NAME")]
    pub service: String,
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

/// Arguments of `omnidev shell-hook`.
#[derive(Debug, Args, Clone)]
pub struct ShellHookArgs {
    /// The shell (default: from `$SHELL`, else bash).
    #[arg(value_parser = PossibleValuesParser::new(["bash", "zsh", "fish"])
        .map(|name| omnidev_install::Shell::from_path(&name).expect("a listed shell")))]
    pub shell: Option<omnidev_install::Shell>,
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
        self.timeout.unwrap_or(if self.healthy_after_reload { 60 } else { 600 })
    }
}

/// `30s`, `5m`, `2h`, `1d`, `500ms`, `1h30m` (humantime's units), or a
/// number of seconds.
pub(super) fn parse_duration(value: &str) -> Result<std::time::Duration, String> {
    if let Ok(secs) = value.parse::<u64>() {
        return Ok(std::time::Duration::from_secs(secs));
    }
    humantime::parse_duration(value)
        .map_err(|e| format!("`{value}` is not a duration ({e}): write e.g. 30s, 5m, 2h or 500ms"))
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
    /// Stop every running pod of this user (asks first on a terminal).
    #[arg(long, conflicts_with = "services")]
    pub all: bool,
    /// With --all: do not ask.
    #[arg(long, requires = "all")]
    pub yes: bool,
    /// Stop this checkout's pod on that host (`up --host`).
    #[arg(long, value_name = "[USER@]HOST[:PORT]", value_parser = RemoteHost::parse, conflicts_with_all = ["services", "all"])]
    pub host: Option<RemoteHost>,
    /// Seconds to wait for the pod to end (at most 86400).
    #[arg(long, value_name = "SECS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(..=limits::MAX_REQUEST_TIMEOUT.as_secs()))]
    pub timeout: u64,
}

pub(super) fn split_pair(value: &str) -> Result<(&str, &str), String> {
    let (name, rest) =
        value.split_once('=').ok_or_else(|| format!("expected NAME=VALUE, got `{value}`"))?;
    if name.is_empty() {
        return Err(format!("missing NAME before `=` in `{value}`"));
    }
    Ok((name, rest))
}

pub(super) fn parse_port_override(value: &str) -> Result<(String, u16), String> {
    let (name, port) = split_pair(value)?;
    let port: u16 = port.parse().map_err(|_| format!("`{port}` is not a port number (1-65535)"))?;
    if port == 0 {
        return Err("port 0 is not allowed".to_owned());
    }
    Ok((name.to_owned(), port))
}

pub(super) fn parse_engine(value: &str) -> Result<omnidev_pod::database::DbEngine, String> {
    omnidev_pod::database::DbEngine::from_word(value)
        .ok_or_else(|| "give `postgres`, `mariadb`, `redis` or `sqlite`".to_owned())
}

pub(super) fn parse_scale(value: &str) -> Result<(String, u32), String> {
    let (name, count) = split_pair(value)?;
    let count: u32 = count.parse().map_err(|_| format!("`{count}` is not a number of copies"))?;
    Ok((name.to_owned(), count))
}

pub(super) fn parse_link(value: &str) -> Result<(String, String), String> {
    let (name, checkout) = split_pair(value)?;
    if checkout.is_empty() {
        return Err(format!("missing checkout after `=` in `{value}`"));
    }
    Ok((name.to_owned(), checkout.to_owned()))
}

/// Where a pod runs: `[USER@]HOST[:PORT]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteHost {
    pub user: Option<String>,
    pub name: String,
    pub port: Option<u16>,
}

impl RemoteHost {
    /// Parses `[USER@]HOST[:PORT]`. Names are letters, digits, `.`, `_`
    /// and `-`, never starting with `-` (ssh would take it for an option).
    pub fn parse(value: &str) -> std::result::Result<Self, String> {
        let (user, rest) = match value.split_once('@') {
            Some((user, rest)) => (Some(user), rest),
            None => (None, value),
        };
        let (name, port) = match rest.rsplit_once(':') {
            Some((name, port)) => {
                let port = port
                    .parse::<u16>()
                    .ok()
                    .filter(|p| *p > 0)
                    .ok_or_else(|| format!("`{port}` in `{value}` is not a port (1-65535)"))?;
                (name, Some(port))
            }
            None => (rest, None),
        };
        let word = |what: &str, word: &str| {
            let fine = !word.is_empty()
                && !word.starts_with('-')
                && word.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
            if fine {
                Ok(word.to_owned())
            } else {
                Err(format!(
                    "`{word}` in `{value}` is no {what}: letters, digits, `.`, `_` and `-`, not \
                     starting with `-` (write `[USER@]HOST[:PORT]`, or a `Host` alias of your \
                     ssh config)"
                ))
            }
        };
        Ok(Self {
            user: user.map(|u| word("user name", u)).transpose()?,
            name: word("host name", name)?,
            port,
        })
    }

    /// What ssh is given as its destination.
    pub fn destination(&self) -> String {
        match &self.user {
            Some(user) => format!("{user}@{}", self.name),
            None => self.name.clone(),
        }
    }
}

impl std::fmt::Display for RemoteHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.destination())?;
        if let Some(port) = self.port {
            write!(f, ":{port}")?;
        }
        Ok(())
    }
}

/// A `--host` of `up`: a port's bind host, or the host to run the pod on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostArg {
    /// `NAME=ADDR`.
    Bind(String, String),
    /// `[USER@]HOST[:PORT]` (no `=`).
    Ssh(RemoteHost),
}

fn parse_host_arg(value: &str) -> Result<HostArg, String> {
    if value.contains('=') {
        parse_host_override(value).map(|(name, addr)| HostArg::Bind(name, addr))
    } else {
        RemoteHost::parse(value).map(HostArg::Ssh)
    }
}

impl UpArgs {
    /// The host of `--host [USER@]HOST[:PORT]`, if one was given (two are
    /// refused).
    pub fn ssh_host(&self) -> Result<Option<&RemoteHost>, String> {
        let mut hosts = self.hosts.iter().filter_map(|h| match h {
            HostArg::Ssh(host) => Some(host),
            HostArg::Bind(..) => None,
        });
        let first = hosts.next();
        match hosts.next() {
            Some(second) => Err(format!(
                "one pod runs on one host: `--host {first:?}` and `--host {second}`",
                first = first.map(ToString::to_string).unwrap_or_default()
            )),
            None => Ok(first),
        }
    }
}

pub(super) fn parse_host_override(value: &str) -> Result<(String, String), String> {
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
                let path = omnidev_core::text::shell_word(&path.to_string_lossy()).into_owned();
                let _ = write!(flags, " {flag} {path}");
            }
        }
        flags
    }
}

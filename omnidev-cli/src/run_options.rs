//! `omnidev up`'s options as they apply: [`RunOptions`], derived once from
//! the raw [`UpArgs`] (ripgrep's low and high arguments), with the checks
//! that need no profile. `up`, `session`, the front-ends and the
//! background process of `up --detach` read this one value; none of them
//! looks at the command line.

use std::collections::BTreeMap;
use std::io::IsTerminal as _;
use std::time::Duration;

use omnidev_pod::Selection;
use serde::{Deserialize, Serialize};

use crate::cli::{PodArgs, UpArgs};
use crate::error::{Error, Result};

/// What `omnidev up` was asked to do, validated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
#[expect(clippy::struct_excessive_bools, reason = "each is one independent flag of `up`")]
pub struct RunOptions {
    /// The checkout, its profile and its pod directory, as given.
    pub pod: PodArgs,
    /// The services to run (`--only`, `--skip`, `--no-vite`, `--no-deps`).
    pub selection: Selection,
    /// Forced ports: `--server-port`, `--vite-port`, then `--port`, in that
    /// order (the profile's port names are checked when it is known).
    pub ports: Vec<(String, u16)>,
    /// Bind hosts by port name: `--vite-host`, then `--host`.
    pub hosts: BTreeMap<String, String>,
    /// `--trust-lan-origins`.
    pub trust_lan_origins: bool,
    /// `--clean`: remove the pod directory before starting.
    pub clean: bool,
    /// Where the pod's output goes.
    pub front: Front,
    /// `--debounce`; `None` is the profile's.
    pub debounce: Option<Duration>,
    /// `--scale NAME=N` (the last one given for a name wins).
    #[serde(default)]
    pub scale: BTreeMap<String, u32>,
    /// `--db ENGINE`: the engine the profile's databases run on.
    #[serde(default)]
    pub db: Option<omnidev_pod::database::DbEngine>,
    /// `--clone-from CHECKOUT`: the pod whose databases a database of
    /// this pod without data yet starts as a copy of.
    #[serde(default)]
    pub clone_from: Option<std::path::PathBuf>,
    /// `--link NAME=CHECKOUT` (the last one given for a name wins).
    #[serde(default)]
    pub links: BTreeMap<String, String>,
    /// `--with-links`: the linked pods that do not run are started first.
    #[serde(default)]
    pub with_links: bool,
    /// `--timestamps` (the profile's `[pod] timestamps` also turns them
    /// on: see `PreparedPod::timestamps`).
    #[serde(default)]
    pub timestamps: bool,
    /// `--debug` or `OMNIDEV_LOG=debug`.
    pub debug: bool,
    /// With `--detach`, how long to wait for readiness.
    pub detach: Option<Duration>,
    /// `OMNIDEV_CONTAINMENT`: how the pod's processes may be contained.
    #[serde(default)]
    pub containment: omnidev_core::ContainmentChoice,
}

/// The front-end of a running pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Front {
    /// The TUI (stdout is a terminal, and neither `--headless` nor
    /// `--json`).
    Tui,
    /// `<service> | <line>` on stdout.
    Lines,
    /// One JSON event record a line on stdout.
    Json,
}

/// What the options depend on besides the command line.
#[derive(Debug, Clone, Default)]
pub struct Surroundings {
    /// Whether stdout is a terminal.
    pub stdout_is_terminal: bool,
    /// `OMNIDEV_LOG`.
    pub log_level: Option<String>,
    /// `OMNIDEV_CONTAINMENT`.
    pub containment: Option<String>,
}

impl Surroundings {
    /// This process's.
    pub fn current() -> Self {
        Self {
            stdout_is_terminal: std::io::stdout().is_terminal(),
            log_level: std::env::var("OMNIDEV_LOG").ok(),
            containment: std::env::var(omnidev_core::containment::CONTAINMENT_ENV).ok(),
        }
    }
}

impl RunOptions {
    /// The options `args` give in this process.
    pub fn from_args(args: &UpArgs) -> Result<Self> {
        Self::derive(args, &Surroundings::current())
    }

    /// The one derivation of the options from the raw arguments: an error
    /// for a bind host forced twice, or an `OMNIDEV_CONTAINMENT` that names
    /// no mechanism (before anything is made).
    pub fn derive(args: &UpArgs, around: &Surroundings) -> Result<Self> {
        let mut ports = Vec::new();
        ports.extend(args.server_port.map(|p| ("server".to_owned(), p)));
        ports.extend(args.vite_port.map(|p| ("vite".to_owned(), p)));
        ports.extend(args.ports.iter().cloned());

        let mut hosts: BTreeMap<String, String> = BTreeMap::new();
        let given = args.vite_host.iter().map(|h| ("vite".to_owned(), h.clone())).chain(
            args.hosts.iter().filter_map(|host| match host {
                crate::cli::HostArg::Bind(name, addr) => Some((name.clone(), addr.clone())),
                crate::cli::HostArg::Ssh(_) => None,
            }),
        );
        for (name, host) in given {
            match hosts.get(&name) {
                Some(first) if *first != host => {
                    return Err(Error::HostForcedTwice {
                        name,
                        first: first.clone(),
                        second: host,
                    });
                }
                _ => {
                    hosts.insert(name, host);
                }
            }
        }

        let mut skip = args.skip.clone();
        if args.no_vite && !skip.iter().any(|s| s == "vite") {
            skip.push("vite".to_owned());
        }
        let front = if args.json {
            Front::Json
        } else if args.headless || args.detach || !around.stdout_is_terminal {
            Front::Lines
        } else {
            Front::Tui
        };
        Ok(Self {
            pod: args.pod.clone(),
            selection: Selection { only: args.only.clone(), skip, exact: args.no_deps },
            ports,
            hosts,
            trust_lan_origins: args.trust_lan_origins,
            clean: args.clean,
            front,
            debounce: args.debounce.map(Duration::from_millis),
            scale: args.scale.iter().cloned().collect(),
            db: args.db,
            clone_from: args.clone_from.clone(),
            links: args.link.iter().cloned().collect(),
            with_links: args.with_links,
            timestamps: args.timestamps,
            debug: args.debug
                || around
                    .log_level
                    .as_deref()
                    .is_some_and(|level| level.eq_ignore_ascii_case("debug")),
            detach: args.detach.then(|| Duration::from_secs(args.ready_timeout)),
            containment: (around.containment.as_deref()).map_or(
                Ok(omnidev_core::ContainmentChoice::Auto),
                omnidev_core::ContainmentChoice::parse,
            )?,
        })
    }

    /// The options of the background process `up --detach` starts: the
    /// same pod, headless, without what only the foreground does (the
    /// cleaning, done before it starts, and the wait for readiness).
    #[must_use]
    pub fn in_background(&self) -> Self {
        Self { clean: false, front: Front::Lines, detach: None, ..self.clone() }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::cli::{Cli, Command};

    fn options(args: &[&str], around: &Surroundings) -> Result<RunOptions> {
        let cli = Cli::try_parse_from(std::iter::once("omnidev").chain(args.iter().copied()))
            .expect("parse");
        let up = match cli.command {
            Some(Command::Up(up)) => up,
            None => cli.up,
            Some(other) => panic!("not up: {other:?}"),
        };
        RunOptions::derive(&up, around)
    }

    fn terminal() -> Surroundings {
        Surroundings { stdout_is_terminal: true, log_level: None, containment: None }
    }

    #[test]
    fn overrides_keep_their_order_and_no_vite_skips_vite() {
        let got = options(
            &[
                "--port",
                "api=8000",
                "--server-port",
                "7000",
                "--vite-host",
                "0.0.0.0",
                "--host",
                "api=::",
                "--no-vite",
                "--skip",
                "vite",
            ],
            &terminal(),
        )
        .expect("options");
        assert_eq!(got.ports, [("server".to_owned(), 7000), ("api".to_owned(), 8000)]);
        assert_eq!(
            got.hosts.into_iter().collect::<Vec<_>>(),
            [("api".to_owned(), "::".to_owned()), ("vite".to_owned(), "0.0.0.0".to_owned())]
        );
        assert_eq!(got.selection.skip, ["vite"]);
    }

    #[test]
    fn a_host_forced_twice_is_refused_naming_both() {
        let err = options(&["--vite-host", "0.0.0.0", "--host", "vite=::1"], &terminal())
            .expect_err("refused");
        assert!(matches!(err, Error::HostForcedTwice { .. }), "{err:?}");
        assert!(err.to_string().contains("0.0.0.0") && err.to_string().contains("::1"));
        assert_eq!(err.exit_code(), crate::error::exit::USAGE);
        // The same address twice is no conflict.
        options(&["--vite-host", "::1", "--host", "vite=::1"], &terminal()).expect("same host");
    }

    #[test]
    fn the_front_follows_the_flags_and_the_terminal() {
        let front = |args: &[&str], around: &Surroundings| options(args, around).expect("ok").front;
        assert_eq!(front(&[], &terminal()), Front::Tui);
        assert_eq!(front(&[], &Surroundings::default()), Front::Lines);
        assert_eq!(front(&["--headless"], &terminal()), Front::Lines);
        assert_eq!(front(&["--json"], &terminal()), Front::Json);
        assert_eq!(front(&["up", "--detach"], &terminal()), Front::Lines);
    }

    #[test]
    fn debug_comes_from_the_flag_or_the_environment() {
        let level = |value: &str| Surroundings { log_level: Some(value.to_owned()), ..terminal() };
        assert!(!options(&[], &terminal()).expect("ok").debug);
        assert!(options(&["--debug"], &terminal()).expect("ok").debug);
        assert!(options(&[], &level("DEBUG")).expect("ok").debug);
        assert!(!options(&[], &level("info")).expect("ok").debug);
    }

    #[test]
    fn the_background_gets_the_same_pod_without_the_foreground_part() {
        let given = options(
            &[
                "up",
                "--detach",
                "--clean",
                "--ready-timeout=30",
                "--only=--clean",
                "--skip",
                "30",
                "--debounce",
                "250",
                "--repo=--ready-timeout",
            ],
            &terminal(),
        )
        .expect("options");
        assert_eq!(given.detach, Some(Duration::from_secs(30)));
        let background = given.in_background();
        assert_eq!(background.detach, None);
        assert!(!background.clean);
        assert_eq!(background.front, Front::Lines);
        assert_eq!(background.selection.only, ["--clean"]);
        assert_eq!(background.selection.skip, ["30"]);
        assert_eq!(background.debounce, Some(Duration::from_millis(250)));
        assert_eq!(background.pod.repo.as_deref(), Some(std::path::Path::new("--ready-timeout")));
        // What the background process reads is what was sent.
        let sent = serde_json::to_string(&background).expect("encode");
        let read: RunOptions = serde_json::from_str(&sent).expect("read back");
        assert_eq!(read, background);
    }
}

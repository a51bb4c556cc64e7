//! Profiles (`omnidev.toml`): what a pod is made of, and the embedded Omnigent profile.
//!
//! A profile is TOML with kebab-case keys; unknown keys and unknown
//! `{placeholders}` are errors with line and column. See [`Profile`] for the
//! tables, [`template`] for placeholders and [`render`] for turning a profile
//! into service specs.

pub mod changes;
pub mod render;
mod servers;
pub mod template;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use indexmap::IndexMap;
use omnidev_core::spec::limits;
use omnidev_core::{Condition, RestartPolicy};
use serde::{Deserialize, Serialize};
use toml::de::{DeTable, DeValue};

use crate::error::{Error, Result};

/// The text of the embedded Omnigent profile.
pub const OMNIGENT_PROFILE: &str = include_str!("profile/omnigent.toml");

/// The profile format's reference, as `omnidev help profile` prints it.
pub const REFERENCE: &str = include_str!("profile/reference.md");

/// Origin name used in errors about the embedded profile.
pub const OMNIGENT_ORIGIN: &str = "<embedded omnigent profile>";

/// File name of a repository's own profile, at its root.
pub const PROFILE_FILE: &str = "omnidev.toml";

/// The largest profile file read (1 MiB; the embedded Omnigent profile is
/// about 3 KiB).
pub const MAX_PROFILE_BYTES: u64 = 1024 * 1024;

/// The text of the profile file at `path` (see [`Profile::from_file`]).
fn read_profile_text(path: &Path) -> Result<String> {
    let real = std::fs::canonicalize(path).map_err(Error::io("read the profile", path))?;
    // Named as what a link there names: that is what is wrong.
    let failed = |error| Error::io("read the profile", &real)(error);
    omnidev_core::fs::read_file(&real, MAX_PROFILE_BYTES)
        .and_then(omnidev_core::fs::text)
        .map_err(failed)?
        .ok_or_else(|| failed(std::io::ErrorKind::NotFound.into()))
}

/// A pod profile.
///
/// ```
/// let profile = omnidev_pod::Profile::parse(r#"
/// [ports]
/// web = 8000
///
/// [services.web]
/// command = ["python3", "-m", "http.server", "{port.web}"]
/// "#, "omnidev.toml").unwrap();
/// assert_eq!(profile.ports["web"], 8000);
/// let err = omnidev_pod::Profile::parse("[servces.web]\n", "omnidev.toml").unwrap_err();
/// assert!(err.to_string().starts_with("omnidev.toml:1:2:"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Profile {
    /// Repository shape.
    #[serde(default, skip_serializing_if = "is_default")]
    pub repo: RepoSection,
    /// Pod layout.
    #[serde(default, skip_serializing_if = "is_default")]
    pub pod: PodSection,
    /// Named ports with their preferred bases, in order.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub ports: IndexMap<String, u16>,
    /// Environment overrides for every service (templated).
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub env: IndexMap<String, String>,
    /// Where LAN origins go with `--trust-lan-origins` (an addition to the
    /// format of docs/design.md: the variable is computed, not templated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lan_origins: Option<LanOrigins>,
    /// Files copied into a new pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub seed: Vec<Seed>,
    /// URLs shown to people (templated), in order.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub urls: IndexMap<String, Url>,
    /// File-watch settings.
    #[serde(default, skip_serializing_if = "is_default")]
    pub watch: WatchSection,
    /// The services, in order.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub services: IndexMap<String, Service>,
    /// The pod's databases ([`crate::database`]), in order.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub databases: IndexMap<String, crate::database::Database>,
    /// The pods of other checkouts this one uses ([`crate::link`]).
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub links: IndexMap<String, Link>,
    /// Where the text puts each `{env.NAME}` without a default, for an
    /// error with line and column when NAME is unset at render time.
    #[serde(skip)]
    env_uses: EnvUses,
}

/// The `{env.NAME}` placeholders without a default of a parsed profile and
/// where they are written. Only a record of the text: it takes no part in
/// comparing profiles (the same profile written out again is equal).
#[derive(Debug, Clone, Default)]
struct EnvUses {
    origin: String,
    uses: Vec<EnvUse>,
}

#[derive(Debug, Clone)]
struct EnvUse {
    /// The keys leading to the string (`services`, `api`, `env`, `URL`).
    path: Vec<String>,
    name: String,
    line: usize,
    column: usize,
}

impl PartialEq for EnvUses {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for EnvUses {}

/// A URL of `[urls]`: `name = "http://…"`, or `name = { url = "http://…",
/// service = "vite" }` for the URL of a service. A URL is shown only when
/// its service runs in the pod (`--no-vite` leaves `ui` out), and once that
/// service is ready. Without `service`, a URL named like a service is that
/// service's; any other is the pod's and always shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Url {
    /// Just the URL.
    Plain(String),
    /// The URL and the service serving it.
    Service(ServiceUrl),
}

/// The table form of a [`Url`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ServiceUrl {
    /// The URL (templated).
    pub url: String,
    /// The service serving it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
}

impl Url {
    /// The URL template.
    pub fn template(&self) -> &str {
        match self {
            Url::Plain(url) | Url::Service(ServiceUrl { url, .. }) => url,
        }
    }

    /// The service serving the URL named `name` in `profile`, if any.
    pub fn service<'a>(&'a self, name: &'a str, profile: &Profile) -> Option<&'a str> {
        match self {
            Url::Service(ServiceUrl { service: Some(service), .. }) => Some(service),
            _ => profile.services.contains_key(name).then_some(name),
        }
    }
}

/// `[repo]`: the repository's shape.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct RepoSection {
    /// Directories that must exist at the checkout root.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub markers: Vec<String>,
}

/// `[pod]`: the pod directory's layout, its env files, how its output is
/// shown.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct PodSection {
    /// Sub-directories created in the pod directory.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dirs: Vec<String>,
    /// Env files (dotenv syntax, relative to the checkout, missing ones
    /// skipped, later ones winning) read for every service, under the
    /// profile's `[env]` ([`crate::env_file`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_files: Vec<String>,
    /// Variables the program reads that the profile does not set (the
    /// secrets and keys of an `.env.example`): `omnidev profile check`
    /// names those no service gets, from the environment, an env file or
    /// the profile.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expected_env: Vec<String>,
    /// Output lines start with their time (`HH:MM:SS`, local), in the TUI
    /// and headless, as with `omnidev up --timestamps`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timestamps: bool,
    /// The pod's `[urls]` on `localhost` use its own host name
    /// (`{host.pod}`, `<branch>.<checkout>.localhost`): two worktrees'
    /// UIs keep separate cookies.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hostnames: bool,
    /// Most memory the pod's services may hold together (`"512MiB"`); see
    /// [`omnidev_core::spec::Limits`].
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "words::memory")]
    pub memory_max: Option<u64>,
    /// Most CPU they (the pod's services) may use together, in percent of one CPU (`"150%"`,
    /// or `1.5` CPUs); enforced only with a delegated cgroup v2 cpu
    /// controller.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "words::cpu",
        serialize_with = "words::percent"
    )]
    pub cpu_max: Option<u32>,
}

/// `[lan-origins]`: the variable that receives trusted LAN origins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct LanOrigins {
    /// The environment variable (a comma-separated origin list).
    pub env: String,
    /// The port whose `http://<ip>:<port>` origins are trusted.
    pub port: String,
}

/// `[links.NAME]`: another checkout whose pod this one uses; its ports,
/// URLs and databases are `{link.NAME.…}` placeholders.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Link {
    /// The checkout: a path relative to this one (`../backend`), or the
    /// branch of one of this repository's worktrees.
    pub checkout: String,
}

/// `[[seed]]`: a file copied into a new pod when absent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Seed {
    /// Candidate sources; the first whose placeholders all resolve is used.
    pub from: Vec<String>,
    /// Destination, relative to the pod directory; never overwritten.
    pub to: String,
}

/// `[watch]`: file-watch settings.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct WatchSection {
    /// Debounce in milliseconds (default 100): the quiet that ends a burst
    /// of changes; a fifth of it once each changed file is whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debounce_ms: Option<u64>,
}

/// `[services.NAME]`: one service.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
#[expect(clippy::struct_excessive_bools, reason = "each is a yes/no key of the profile format")]
pub struct Service {
    /// Program and arguments (templated). Exactly one of `command` and
    /// `script` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// A `package.json` script run through the detected package manager.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    /// Extra arguments (after `command`, or passed to the script).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Working directory relative to the checkout root (default `.`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Environment overrides on top of the profile's `[env]` (templated).
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub env: IndexMap<String, String>,
    /// This service's env files, over the profile's `[env]` and under its
    /// own `env` ([`crate::env_file`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_files: Vec<String>,
    /// Services this one waits for, with the condition.
    #[serde(
        default,
        skip_serializing_if = "IndexMap::is_empty",
        deserialize_with = "words::conditions"
    )]
    pub depends_on: IndexMap<String, Condition>,
    /// Restart policy (default `always`).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "words::restart")]
    pub restart: Option<RestartPolicy>,
    /// Stop signal name, e.g. `SIGTERM` (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_signal: Option<String>,
    /// Grace period before SIGKILL, in milliseconds (default 5000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_ms: Option<u64>,
    /// Readiness probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<Ready>,
    /// Globs (relative to the checkout) whose change reloads this service.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub watch: Vec<String>,
    /// Run `<package manager> install` first when `node_modules/` is stale.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub install_deps: bool,
    /// Make `<cwd>/.venv` first when it is missing or older than the
    /// project's files (`uv sync` for a `pyproject.toml`/`uv.lock`, else
    /// `uv pip install -r` of each `requirements*.txt`), and run the
    /// service with that venv's `bin` first on its `PATH` and
    /// `VIRTUAL_ENV` set (see [`crate::python::deps_step`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub python_deps: bool,
    /// Allows a `cwd` outside the checkout (absolute, or climbing out with
    /// `..`). Off by default: the package manager writes `node_modules/`
    /// into the `cwd`, and a pod should only change its own checkout.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cwd_outside_repo: bool,
    /// The package manager (`npm`, `pnpm`, `yarn`, `bun`), overriding
    /// detection (see [`crate::package_manager::detect`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package_manager: Option<String>,
    /// Workspace package the install is narrowed to when it runs at a
    /// workspace root above `cwd` (pnpm/bun `--filter VALUE`, npm
    /// `--workspace VALUE`; yarn installs the whole workspace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install_filter: Option<String>,
    /// The Node.js range (npm syntax, e.g. `>=22.12`) this service needs,
    /// checked before its install together with `engines.node` and the
    /// package manager's own need.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_version: Option<String>,
    /// `yield = true`: while another service that does not yield is
    /// preparing or starting, this one's install and run are in the
    /// background (lowest CPU and I/O priority); see
    /// [`omnidev_core::spec::ServiceSpec::yields`].
    #[serde(default, rename = "yield", skip_serializing_if = "std::ops::Not::not")]
    pub yields: bool,
    /// How many copies run (default 1): `NAME.1` … `NAME.N`, each its own
    /// process, log and port (`omnidev up --scale NAME=N` overrides it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<u32>,
    /// Most memory its processes (each replica apart) may hold together (`"512MiB"`); see
    /// [`omnidev_core::spec::Limits`].
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "words::memory")]
    pub memory_max: Option<u64>,
    /// Most CPU they may use together, in percent of one CPU (`"150%"`,
    /// or `1.5` CPUs); enforced only with a delegated cgroup v2 cpu
    /// controller.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "words::cpu",
        serialize_with = "words::percent"
    )]
    pub cpu_max: Option<u32>,
}

impl Service {
    /// Its `memory-max` and `cpu-max`.
    pub fn limits(&self) -> omnidev_core::spec::Limits {
        omnidev_core::spec::Limits { memory_max: self.memory_max, cpu_max: self.cpu_max }
    }
}

impl PodSection {
    /// Its `memory-max` and `cpu-max`: the pod's services together.
    pub fn limits(&self) -> omnidev_core::spec::Limits {
        omnidev_core::spec::Limits { memory_max: self.memory_max, cpu_max: self.cpu_max }
    }
}

/// `ready = { … }`: a readiness probe; exactly one of `http`, `tcp`,
/// `command`, `log`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Ready {
    /// URL answered with a 2xx status when ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<String>,
    /// `Host` header sent with the HTTP probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// `host:port` accepting a TCP connection when ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<String>,
    /// A command exiting 0 when ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// A regular expression: ready once a line of the service's output
    /// (colour codes removed) matches it, the whole line (up to 1 MiB;
    /// a longer line never matches).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
    /// Longest pause between attempts, ms (default 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_ms: Option<u64>,
    /// Time until a "probe timed out" event, ms (default 60000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Whether an `http` or `tcp` probe on one of the pod's ports counts
    /// only when the service itself listens there (default true; `false`
    /// for a probe of a port another service or an outside program
    /// serves, such as a container runtime's proxy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub own_listener: Option<bool>,
}

/// The `ready` table of service `name`: exactly one probe kind, a non-empty
/// command, a usable log pattern.
fn validate_ready(at: &Locator<'_>, name: &str, ready: &Ready) -> Result<()> {
    let kinds =
        [ready.http.is_some(), ready.tcp.is_some(), ready.command.is_some(), ready.log.is_some()];
    if kinds.iter().filter(|k| **k).count() != 1 {
        return Err(at.error(
            &["services", name, "ready"],
            format!(
                "`ready` of service `{name}` needs exactly one of `http`, `tcp`, `command`, `log`"
            ),
        ));
    }
    if let Some(pattern) = &ready.log
        && let Err(reason) = omnidev_core::probe::compile_log_pattern(pattern)
    {
        return Err(at.error(
            &["services", name, "ready", "log"],
            format!("`ready.log` of service `{name}` is not a usable regular expression: {reason}"),
        ));
    }
    if ready.command.as_ref().is_some_and(Vec::is_empty) {
        return Err(at.error(
            &["services", name, "ready", "command"],
            format!("`ready.command` of service `{name}` is empty"),
        ));
    }
    Ok(())
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// Where the effective profile came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProfileSource {
    /// The embedded Omnigent profile.
    Embedded,
    /// `omnidev.toml` at the checkout root.
    Repo(PathBuf),
    /// A file named with `--profile`.
    File(PathBuf),
}

/// Signal names accepted by `stop-signal`.
const SIGNALS: &[(&str, i32)] = &[
    ("SIGTERM", libc::SIGTERM),
    ("SIGINT", libc::SIGINT),
    ("SIGHUP", libc::SIGHUP),
    ("SIGQUIT", libc::SIGQUIT),
    ("SIGKILL", libc::SIGKILL),
    ("SIGUSR1", libc::SIGUSR1),
    ("SIGUSR2", libc::SIGUSR2),
];

/// The number of a signal name such as `SIGTERM` or `TERM`.
///
/// ```
/// assert_eq!(omnidev_pod::profile::signal_number("SIGINT"), Some(2));
/// assert_eq!(omnidev_pod::profile::signal_number("TERM"), Some(15));
/// ```
pub fn signal_number(name: &str) -> Option<i32> {
    let upper = name.to_ascii_uppercase();
    let full = if upper.starts_with("SIG") { upper } else { format!("SIG{upper}") };
    SIGNALS.iter().find(|(n, _)| *n == full).map(|(_, s)| *s)
}

impl Profile {
    /// The embedded Omnigent profile.
    ///
    /// # Panics
    ///
    /// Never: the embedded text is checked by this crate's tests.
    ///
    /// ```
    /// let p = omnidev_pod::Profile::omnigent();
    /// assert_eq!(p.services.keys().collect::<Vec<_>>(), ["server", "host", "vite"]);
    /// ```
    pub fn omnigent() -> Self {
        Self::parse(OMNIGENT_PROFILE, OMNIGENT_ORIGIN)
            .expect("the embedded profile is valid (checked by a test)")
    }

    /// Parses and validates profile text. `origin` names it in errors
    /// (`origin:line:column: message`).
    pub fn parse(text: &str, origin: &str) -> Result<Self> {
        let unreadable = |e: toml::de::Error| {
            let (line, column) = e.span().map_or((1, 1), |span| line_column(text, span.start));
            Error::Profile {
                origin: origin.to_owned(),
                line,
                column,
                message: e.message().trim().to_owned(),
            }
        };
        let profile: Self = toml::from_str(text).map_err(unreadable)?;
        let document = DeTable::parse(text).map_err(unreadable)?;
        let locator = Locator { text, origin, root: document.get_ref() };
        let mut profile = profile;
        let uses = profile.validate(&locator)?;
        profile.env_uses = EnvUses { origin: origin.to_owned(), uses };
        Ok(profile)
    }

    /// Reads and parses the profile file at `path`: a regular file of at
    /// most [`MAX_PROFILE_BYTES`] of UTF-8 text. A symbolic link there
    /// (a profile kept with someone's dotfiles) is followed, once, to what
    /// it names; a FIFO, a device, a directory or a larger file is an
    /// error naming the path, never a read that blocks or fills memory.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = read_profile_text(path)?;
        Self::parse(&text, &path.display().to_string())
    }

    /// The effective profile for a checkout: `explicit` (`--profile FILE`),
    /// else `<repo>/omnidev.toml` when present (anything by that name, a
    /// link to a FIFO or a dangling one too, whose read is then the error:
    /// never the embedded profile in its place), else the embedded
    /// Omnigent profile.
    pub fn load(repo_root: &Path, explicit: Option<&Path>) -> Result<(Self, ProfileSource)> {
        if let Some(path) = explicit {
            return Ok((Self::from_file(path)?, ProfileSource::File(path.to_path_buf())));
        }
        let in_repo = repo_root.join(PROFILE_FILE);
        if std::fs::symlink_metadata(&in_repo).is_ok() {
            return Ok((Self::from_file(&in_repo)?, ProfileSource::Repo(in_repo)));
        }
        Ok((Self::omnigent(), ProfileSource::Embedded))
    }

    /// The profile as TOML text that parses back to the same value (for
    /// `omnidev profile show`).
    ///
    /// ```
    /// let p = omnidev_pod::Profile::omnigent();
    /// let text = p.to_toml().unwrap();
    /// assert_eq!(omnidev_pod::Profile::parse(&text, "shown").unwrap(), p);
    /// ```
    pub fn to_toml(&self) -> Result<String> {
        toml::to_string(self)
            .map_err(|e| Error::Serialise { what: "the profile", message: e.to_string() })
    }

    /// Checks that the checkout has every `[repo] markers` directory.
    pub fn check_repo(&self, repo_root: &Path) -> Result<()> {
        crate::root::check_markers(repo_root, &self.repo.markers)
    }

    /// How many copies of `service` run: `scale`'s count for it, else its
    /// `replicas`, else 1.
    pub fn replicas(&self, service: &str, scale: &BTreeMap<String, u32>) -> u32 {
        scale
            .get(service)
            .copied()
            .or_else(|| self.services.get(service).and_then(|s| s.replicas))
            .unwrap_or(1)
    }

    /// The names `service` runs under: its own, or, when it has
    /// `replicas` (or `--scale` names it), `service.1` … `service.N`, also
    /// when N is 1: scaling down to one keeps `service.1` running and
    /// stops only the replicas that go.
    pub fn running_names(&self, service: &str, scale: &BTreeMap<String, u32>) -> Vec<String> {
        let replicated = scale.contains_key(service)
            || self.services.get(service).is_some_and(|s| s.replicas.is_some());
        if !replicated {
            return vec![service.to_owned()];
        }
        (1..=self.replicas(service, scale).max(1))
            .map(|index| crate::names::replica(service, index))
            .collect()
    }

    /// Port names with their bases, in profile order (for
    /// [`crate::PortRequest::bases`]), then a port for every further
    /// replica (`scale` over `replicas`): a port named like a service that
    /// runs N > 1 copies is replica 1's, and replicas 2…N get `NAME.2`…
    /// with the bases after it.
    pub fn port_bases(&self, scale: &BTreeMap<String, u32>) -> Vec<(String, u16)> {
        let mut bases: Vec<(String, u16)> =
            self.ports.iter().map(|(n, p)| (n.clone(), *p)).collect();
        // A server database's port is named like it.
        bases.extend(
            (self.databases.iter())
                .filter_map(|(name, database)| Some((name.clone(), database.engine.base_port()?))),
        );
        for (name, base) in &self.ports {
            let base = *base;
            for index in 2..=self.replicas(name, scale) {
                let offset = u16::try_from(index - 1).unwrap_or(u16::MAX);
                bases.push((crate::names::replica(name, index), base.saturating_add(offset)));
            }
        }
        bases
    }

    /// Checks `--scale` counts: each names a service of the profile, and
    /// asks for 1 to [`crate::names::MAX_REPLICAS`] copies.
    pub fn check_scale(&self, scale: &BTreeMap<String, u32>) -> Result<()> {
        for (name, count) in scale {
            if !self.services.contains_key(name) {
                return Err(Error::UnknownService {
                    name: name.clone(),
                    known: self.services.keys().cloned().collect(),
                });
            }
            if !(1..=crate::names::MAX_REPLICAS).contains(count) {
                return Err(Error::BadScale { name: name.clone(), count: *count });
            }
        }
        Ok(())
    }

    /// Every duration within its maximum ([`limits`]).
    fn check_durations(&self, at: &Locator<'_>) -> Result<()> {
        if let Some(ms) = self.watch.debounce_ms {
            check_duration(at, &["watch", "debounce-ms"], ms, limits::MAX_DEBOUNCE)?;
        }
        for (name, service) in &self.services {
            let mut bounds = vec![(vec!["grace-ms"], service.grace_ms, limits::MAX_GRACE)];
            if let Some(ready) = &service.ready {
                bounds.push((
                    vec!["ready", "interval-ms"],
                    ready.interval_ms,
                    limits::MAX_READY_INTERVAL,
                ));
                bounds.push((
                    vec!["ready", "timeout-ms"],
                    ready.timeout_ms,
                    limits::MAX_READY_TIMEOUT,
                ));
            }
            for (keys, value, max) in bounds {
                if let Some(ms) = value {
                    let mut path = vec!["services", name.as_str()];
                    path.extend(keys);
                    check_duration(at, &path, ms, max)?;
                }
            }
        }
        Ok(())
    }

    /// Each `depends-on` of service `name` names a service of the profile,
    /// or a linked pod's (`LINK.SERVICE`).
    fn check_dependencies(&self, at: &Locator<'_>, name: &str, service: &Service) -> Result<()> {
        for dependency in service.depends_on.keys() {
            if self.services.contains_key(dependency) {
                continue;
            }
            let path = ["services", name, "depends-on", dependency];
            match dependency.split_once('.') {
                Some((link, theirs)) if self.links.contains_key(link) => {
                    crate::names::check("service name", theirs)
                        .map_err(|bad| at.error(&path, format!("in `{dependency}`: {bad}")))?;
                }
                _ => {
                    return Err(at.error(
                        &path,
                        format!(
                            "service `{name}` depends on unknown service `{dependency}` \
                             (a linked pod's service is `LINK.SERVICE`, LINK one of [links]: \
                             {})",
                            crate::names::listed(self.links.keys())
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Every `[pod] expected-env` entry is a variable's name.
    fn check_expected_env(&self, at: &Locator<'_>) -> Result<()> {
        match (self.pod.expected_env.iter()).find(|name| !crate::env_file::is_key(name)) {
            Some(bad) => Err(at.error(
                &["pod", "expected-env"],
                format!(
                    "{} is no variable name (a letter or `_`, then letters, digits, `_`)",
                    crate::names::shown(bad)
                ),
            )),
            None => Ok(()),
        }
    }

    /// Validates the profile; returns where its `{env.NAME}`s without a
    /// default are written (found by the same walk that checks placeholders).
    fn validate(&self, at: &Locator<'_>) -> Result<Vec<EnvUse>> {
        let uses = self.check_databases_and_placeholders(at)?;
        self.validate_names_and_paths(at)?;
        if let Some(lan) = &self.lan_origins
            && !self.ports.contains_key(&lan.port)
        {
            return Err(at.error(
                &["lan-origins", "port"],
                format!(
                    "unknown port `{}`: the [ports] table declares {}",
                    lan.port,
                    self.ports.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        self.check_durations(at)?;
        self.check_expected_env(at)?;
        for (name, url) in &self.urls {
            if let Url::Service(ServiceUrl { service: Some(service), .. }) = url
                && !self.services.contains_key(service)
            {
                return Err(at.error(
                    &["urls", name, "service"],
                    format!("URL `{name}` names unknown service `{service}`"),
                ));
            }
        }
        for (name, service) in &self.services {
            let path = ["services", name.as_str()];
            match (&service.command, &service.script) {
                (Some(_), Some(_)) | (None, None) => {
                    return Err(at.error(
                        &path,
                        format!("service `{name}` needs exactly one of `command` and `script`"),
                    ));
                }
                (Some(command), None) if command.is_empty() => {
                    return Err(at.error(
                        &["services", name, "command"],
                        format!("service `{name}` has an empty `command`"),
                    ));
                }
                _ => {}
            }
            self.check_dependencies(at, name, service)?;
            if let Some(pm) = &service.package_manager
                && crate::PackageManager::from_name(pm).is_none()
            {
                return Err(at.error(
                    &["services", name, "package-manager"],
                    format!("unknown package manager `{pm}`; use npm, pnpm, yarn or bun"),
                ));
            }
            if let Some(range) = &service.node_version
                && range.parse::<js_semver::Range>().is_err()
            {
                return Err(at.error(
                    &["services", name, "node-version"],
                    format!("`{range}` is not a version range such as `>=22.12`"),
                ));
            }
            if let Some(signal) = &service.stop_signal
                && signal_number(signal).is_none()
            {
                return Err(at.error(
                    &["services", name, "stop-signal"],
                    format!(
                        "unknown signal `{signal}`; use one of {}",
                        SIGNALS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
            if let Some(ready) = &service.ready {
                validate_ready(at, name, ready)?;
            }
        }
        self.check_cycles(at)?;
        Ok(uses)
    }
}

impl Profile {
    /// Service and port names follow [`crate::names::NAME_SYNTAX`]; paths
    /// omnidev writes in the pod stay in it; a service's `cwd` stays in the
    /// checkout unless `cwd-outside-repo` says otherwise.
    /// The sub-directories a pod of this profile is made with: `[pod]
    /// dirs`, and where its databases keep their data (`data` for a
    /// server's, an SQLite file's directory), so that they are the pod's
    /// own and `clean` removes them with it.
    pub fn pod_dirs(&self) -> Vec<String> {
        let mut dirs = self.pod.dirs.clone();
        for (name, database) in &self.databases {
            let dir = if database.engine.is_server() {
                "data".to_owned()
            } else {
                let file =
                    database.path.clone().unwrap_or_else(|| format!("data/{name}/{name}.db"));
                match file.rsplit_once('/') {
                    Some((dir, _)) => dir.to_owned(),
                    None => continue,
                }
            };
            if !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
        dirs
    }

    /// Runs the profile's databases on `engine` (`omnidev up --db
    /// ENGINE`): each that lists it among its `engines` (or runs on it
    /// already) moves there; an error when none can.
    pub fn choose_engine(&mut self, engine: crate::database::DbEngine) -> Result<()> {
        let mut moved = false;
        for database in self.databases.values_mut() {
            if let Some(there) = database.on(engine) {
                *database = there;
                moved = true;
            }
        }
        if moved {
            Ok(())
        } else {
            Err(Error::NoDatabaseFor {
                engine: engine.word(),
                declared: self.databases.keys().cloned().collect::<Vec<_>>().join(", "),
            })
        }
    }

    /// Checks the databases, then every placeholder against the ports (a
    /// server database's among them) and databases; where the `{env.NAME}`s
    /// without a default are.
    fn check_databases_and_placeholders(&self, at: &Locator<'_>) -> Result<Vec<EnvUse>> {
        self.validate_databases(at)?;
        let port_names: Vec<&str> = (self.ports.keys())
            .chain((self.databases.iter()).filter(|(_, d)| d.engine.is_server()).map(|(n, _)| n))
            .map(String::as_str)
            .collect();
        let database_names: Vec<&str> = self.databases.keys().map(String::as_str).collect();
        let link_names: Vec<&str> = self.links.keys().map(String::as_str).collect();
        let known =
            template::Names { ports: &port_names, databases: &database_names, links: &link_names };
        let mut uses = Vec::new();
        check_placeholders(at, at.root, &mut Vec::new(), &known, &mut uses)?;
        Ok(uses)
    }

    /// A database's seed: a command, a service name of its own, inputs
    /// inside the checkout.
    fn check_seed(
        &self,
        name: &str,
        database: &crate::database::Database,
        at: &Locator<'_>,
    ) -> Result<()> {
        let Some(seed) = &database.seed else {
            return Ok(());
        };
        let seed_name = format!("{name}-seed");
        let message = if seed.command.is_empty() {
            Some("the seed's `command` is empty".to_owned())
        } else if self.services.contains_key(&seed_name) {
            Some(format!(
                "the seed of `{name}` runs as service `{seed_name}`, and a service has \
                 that name: rename it"
            ))
        } else {
            (seed.inputs.iter()).find(|input| crate::pod::relative_inside(input).is_err()).map(
                |input| {
                    format!(
                        "seed input {} must be a path inside the checkout",
                        crate::names::shown(input)
                    )
                },
            )
        };
        match message {
            Some(message) => Err(at.error(&["databases", name, "seed"], message)),
            None => Ok(()),
        }
    }

    /// A database's name is a service's name no service has (a server's
    /// is its service and port), its scheme a URL scheme, an SQLite file a
    /// path inside the pod.
    fn validate_databases(&self, at: &Locator<'_>) -> Result<()> {
        for (name, database) in &self.databases {
            let path = ["databases", name.as_str()];
            crate::names::check("database name", name)
                .map_err(|bad| at.error(&path, bad.to_string()))?;
            if database.engine.is_server() {
                let clash = if self.services.contains_key(name) {
                    Some("service")
                } else if self.ports.contains_key(name) {
                    Some("port")
                } else {
                    None
                };
                if let Some(what) = clash {
                    return Err(at.error(
                        &path,
                        format!(
                            "database `{name}` runs as a service with a port of its name, \
                             and a {what} is named `{name}` too: rename one"
                        ),
                    ));
                }
            }
            if let Some(scheme) = &database.scheme {
                let fits = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                    && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
                if !fits {
                    return Err(at.error(
                        &["databases", name, "scheme"],
                        format!(
                            "`scheme` = {} is no URL scheme (letters, digits, `+`, `-`, `.`)",
                            crate::names::shown(scheme)
                        ),
                    ));
                }
            }
            self.check_seed(name, database, at)?;
            if let Some(made) = &database.database {
                let fits = (1..=63).contains(&made.len())
                    && made.chars().all(|c| c.is_ascii_alphanumeric() || "_-".contains(c));
                let message = if !database.engine.names_databases() {
                    Some(format!(
                        "`database` names the database a Postgres or MariaDB server makes; \
                         a {} has none to name",
                        database.engine.word()
                    ))
                } else if fits {
                    None
                } else {
                    Some(format!(
                        "`database` = {} must be 1 to 63 letters, digits, `_` or `-`",
                        crate::names::shown(made)
                    ))
                };
                if let Some(message) = message {
                    return Err(at.error(&["databases", name, "database"], message));
                }
            }
            match (&database.path, database.engine) {
                (Some(_), engine) if engine.is_server() => {
                    return Err(at.error(
                        &["databases", name, "path"],
                        "`path` is an SQLite file's; a server keeps its data in `data/NAME`"
                            .to_owned(),
                    ));
                }
                (Some(file), _) => {
                    crate::pod::relative_inside(file)
                        .ok()
                        .filter(|relative| {
                            relative.parent().is_some_and(|p| !p.as_os_str().is_empty())
                                || relative.file_name().is_some()
                        })
                        .ok_or_else(|| {
                            at.error(
                                &["databases", name, "path"],
                                format!(
                                    "`path` = {} must be a file inside the pod directory",
                                    crate::names::shown(file)
                                ),
                            )
                        })?;
                }
                (None, _) => {}
            }
        }
        Ok(())
    }

    fn validate_names_and_paths(&self, at: &Locator<'_>) -> Result<()> {
        for (name, base) in &self.ports {
            crate::names::check("port name", name)
                .map_err(|bad| at.error(&["ports", name], bad.to_string()))?;
            if name == "pod" {
                return Err(at.error(
                    &["ports", name],
                    "the port name `pod` is taken: `{host.pod}` is the pod's host name; \
                     call the port something else"
                        .to_owned(),
                ));
            }
            if *base == 0 {
                return Err(at.error(
                    &["ports", name],
                    format!("the base port of `{name}` is 0; give a port between 1 and 65535"),
                ));
            }
        }
        for (name, link) in &self.links {
            crate::names::check("link name", name)
                .map_err(|bad| at.error(&["links", name], bad.to_string()))?;
            if link.checkout.trim().is_empty() {
                return Err(at.error(
                    &["links", name, "checkout"],
                    format!(
                        "`checkout` of link `{name}` is empty: give the other checkout's path                          (relative to this one) or its worktree's branch"
                    ),
                ));
            }
        }
        for (name, service) in &self.services {
            crate::names::check("service name", name)
                .map_err(|bad| at.error(&["services", name], bad.to_string()))?;
            if let Some(count) = service.replicas
                && !(1..=crate::names::MAX_REPLICAS).contains(&count)
            {
                return Err(at.error(
                    &["services", name, "replicas"],
                    format!("`replicas` is {count}; give 1 to {}", crate::names::MAX_REPLICAS),
                ));
            }
        }
        let in_pod = |value: &str, key: &str, path: &[&str]| {
            match crate::pod::relative_inside(value) {
                Ok(relative) if relative.as_os_str().is_empty() => {
                    Err("it names the pod directory itself")
                }
                Ok(_) => Ok(()),
                Err(reason) => Err(reason),
            }
            .map_err(|reason| {
                at.error(
                    path,
                    format!(
                        "`{key}` = {} must be a path inside the pod directory: {reason}",
                        crate::names::shown(value)
                    ),
                )
            })
        };
        for (i, dir) in self.pod.dirs.iter().enumerate() {
            in_pod(dir, "pod.dirs", &["pod", "dirs", &i.to_string()])?;
        }
        for (i, seed) in self.seed.iter().enumerate() {
            in_pod(&seed.to, "seed.to", &["seed", &i.to_string(), "to"])?;
        }
        for (name, service) in &self.services {
            let Some(cwd) = service.cwd.as_deref() else {
                continue;
            };
            if service.cwd_outside_repo {
                continue;
            }
            if let Err(reason) = crate::pod::relative_inside(cwd) {
                return Err(at.error(
                    &["services", name, "cwd"],
                    format!(
                        "`cwd` = {} of service `{name}` must stay inside the checkout: {reason} \
                         (set `cwd-outside-repo = true` on the service to allow it)",
                        crate::names::shown(cwd)
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The words a profile spells enums with, read so that a wrong value is
/// told with the words allowed (serde's own message for `restart = true`
/// names no choice).
mod words {
    use indexmap::IndexMap;
    use omnidev_core::{Condition, RestartPolicy};
    use serde::Deserialize;
    use serde::de::{Deserializer, Error as _};

    /// `restart = "always" | "on-failure" | "never"`.
    pub(super) fn restart<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<RestartPolicy>, D::Error> {
        let value = toml::Value::deserialize(deserializer)?;
        let policy = match value.as_str() {
            Some("always") => RestartPolicy::Always,
            Some("on-failure") => RestartPolicy::OnFailure,
            Some("never") => RestartPolicy::Never,
            _ => {
                return Err(D::Error::custom(format!(
                    "`restart` is {}; use one of \"always\", \"on-failure\", \"never\"",
                    shown(&value)
                )));
            }
        };
        Ok(Some(policy))
    }

    /// `memory-max = "512MiB"` (`K`/`KiB`, `M`/`MiB`, `G`/`GiB` count
    /// 1024s, `KB`/`MB`/`GB` 1000s; a bare integer is bytes): at least
    /// 1 MiB, so a forgotten unit is an error rather than a limit every
    /// start goes over.
    pub(super) fn memory<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<u64>, D::Error> {
        let value = toml::Value::deserialize(deserializer)?;
        let bytes = match &value {
            toml::Value::Integer(n) => u64::try_from(*n).ok(),
            toml::Value::String(text) => bytes(text),
            _ => None,
        };
        match bytes {
            Some(bytes) if bytes >= 1 << 20 => Ok(Some(bytes)),
            Some(_) => Err(D::Error::custom(format!(
                "`memory-max` is {}, under 1 MiB: no program runs in that; write a unit, \
                 as in \"512MiB\" or \"2GiB\"",
                shown(&value)
            ))),
            None => Err(D::Error::custom(format!(
                "`memory-max` is {}; write a size, as in \"512MiB\" or \"2GiB\"",
                shown(&value)
            ))),
        }
    }

    /// `"1.5GiB"` in bytes.
    fn bytes(text: &str) -> Option<u64> {
        let text = text.trim();
        let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let number: f64 = number.parse().ok()?;
        let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1.0,
            "k" | "kib" => 1024.0,
            "kb" => 1e3,
            "m" | "mib" => 1024.0 * 1024.0,
            "mb" => 1e6,
            "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
            "gb" => 1e9,
            "t" | "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
            "tb" => 1e12,
            _ => return None,
        };
        let bytes = (number * scale).round();
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "checked to be a finite non-negative size below 2^63 first"
        )]
        (bytes.is_finite() && (0.0..9.2e18).contains(&bytes)).then_some(bytes as u64)
    }

    /// `cpu-max = "150%"` (of one CPU) or a number of CPUs (`1.5`).
    pub(super) fn cpu<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u32>, D::Error> {
        let value = toml::Value::deserialize(deserializer)?;
        let percent = match &value {
            toml::Value::String(text) => {
                (text.trim().strip_suffix('%')).and_then(|n| n.trim().parse::<f64>().ok())
            }
            toml::Value::Integer(n) => i32::try_from(*n).ok().map(|n| f64::from(n) * 100.0),
            toml::Value::Float(n) => Some(n * 100.0),
            _ => None,
        };
        match percent {
            #[expect(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "checked to be between 1 and 100000 first"
            )]
            Some(p) if (1.0..=100_000.0).contains(&p) => Ok(Some(p.round() as u32)),
            _ => Err(D::Error::custom(format!(
                "`cpu-max` is {}; write a share of one CPU, as in \"50%\" or \"150%\", or \
                 a number of CPUs, as in 1.5",
                shown(&value)
            ))),
        }
    }

    /// A `cpu-max` as written back: `"150%"`.
    #[expect(
        clippy::ref_option,
        clippy::trivially_copy_pass_by_ref,
        reason = "serde's serialize_with passes the field by reference"
    )]
    pub(super) fn percent<S: serde::Serializer>(
        value: &Option<u32>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(p) => serializer.serialize_str(&format!("{p}%")),
            None => serializer.serialize_none(),
        }
    }

    /// `depends-on = { NAME = "started" | "ready" | "completed" }`.
    pub(super) fn conditions<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<IndexMap<String, Condition>, D::Error> {
        let table = IndexMap::<String, toml::Value>::deserialize(deserializer)?;
        table
            .into_iter()
            .map(|(name, value)| {
                let condition = match value.as_str() {
                    Some("started") => Condition::Started,
                    Some("ready") => Condition::Ready,
                    Some("completed") => Condition::Completed,
                    _ => {
                        return Err(D::Error::custom(format!(
                            "the condition on `{name}` is {}; use one of \"started\", \"ready\", \"completed\"",
                            shown(&value)
                        )));
                    }
                };
                Ok((name, condition))
            })
            .collect()
    }

    /// A string as written (quoted, bounded, control characters visible);
    /// anything else with its type: `true`, a boolean.
    fn shown(value: &toml::Value) -> String {
        if let Some(text) = value.as_str() {
            return crate::names::shown(text);
        }
        let text = value.to_string();
        let text = omnidev_core::text::clip(&text, 64);
        format!("`{}`, a {}", crate::names::shown(&text).trim_matches('"'), value.type_str())
    }
}

impl Profile {
    /// A dependency cycle is an error listing every edge of the cycle with
    /// the line and column where it is written.
    fn check_cycles(&self, at: &Locator<'_>) -> Result<()> {
        // Every dependency names a service (checked before).
        let names: Vec<&str> = self.services.keys().map(String::as_str).collect();
        let deps: Vec<Vec<usize>> = (self.services.values())
            .map(|s| s.depends_on.keys().filter_map(|d| self.services.get_index_of(d)).collect())
            .collect();
        if let Err(cycle) = omnidev_core::depth_first(&deps) {
            let cycle: Vec<&str> = cycle.into_iter().map(|i| names[i]).collect();
            let edges: Vec<String> = cycle
                .windows(2)
                .map(|pair| {
                    let (line, column) = at.position(&["services", pair[0], "depends-on", pair[1]]);
                    format!("`{}` depends on `{}` (line {line}, column {column})", pair[0], pair[1])
                })
                .collect();
            return Err(at.error(
                &["services", cycle[0], "depends-on", cycle[1]],
                format!(
                    "dependency cycle {}: {}; remove one of these edges",
                    cycle.join(" → "),
                    edges.join(", ")
                ),
            ));
        }
        Ok(())
    }
}

/// Finds positions in the profile text for validation errors.
struct Locator<'a> {
    text: &'a str,
    origin: &'a str,
    root: &'a DeTable<'a>,
}

impl Locator<'_> {
    /// The line and column of the deepest existing key of `path`.
    fn position(&self, path: &[&str]) -> (usize, usize) {
        line_column(self.text, self.find(path).0.start)
    }

    /// An error at the deepest existing element of `path`: keys of tables,
    /// and indexes (`"0"`) of arrays, whose element itself is pointed at.
    fn error(&self, path: &[&str], message: String) -> Error {
        self.error_at(self.find(path).0.start, message)
    }

    /// An error at the value of `path` (at its key when it is missing).
    fn value_error(&self, path: &[&str], message: String) -> Error {
        let (key, value) = self.find(path);
        self.error_at(value.unwrap_or(key).start, message)
    }

    /// The spans of the deepest existing key of `path` and, when the whole
    /// path exists, of its value.
    fn find(&self, path: &[&str]) -> (std::ops::Range<usize>, Option<std::ops::Range<usize>>) {
        let mut span = 0..0;
        let mut table = Some(self.root);
        let mut array: Option<&[toml::Spanned<DeValue<'_>>]> = None;
        for (depth, key) in path.iter().enumerate() {
            let value = if let Some(items) = array {
                let Some(item) = key.parse::<usize>().ok().and_then(|i| items.get(i)) else {
                    break;
                };
                span = item.span();
                item
            } else {
                let Some(entry) = table.and_then(|t| t.iter().find(|(k, _)| k.get_ref() == key))
                else {
                    break;
                };
                span = entry.0.span();
                entry.1
            };
            if depth + 1 == path.len() {
                return (span, Some(value.span()));
            }
            table = value.get_ref().as_table();
            array = value.get_ref().as_array().map(AsRef::as_ref);
        }
        (span, None)
    }

    fn error_at(&self, offset: usize, message: String) -> Error {
        let (line, column) = line_column(self.text, offset);
        Error::Profile { origin: self.origin.to_owned(), line, column, message }
    }
}

/// A duration in milliseconds at `path` must not exceed `max`.
fn check_duration(at: &Locator<'_>, path: &[&str], ms: u64, max: Duration) -> Result<()> {
    let max_ms = u64::try_from(max.as_millis()).unwrap_or(u64::MAX);
    if ms <= max_ms {
        return Ok(());
    }
    let key = path.last().copied().unwrap_or_default();
    Err(at.value_error(
        path,
        format!(
            "`{key}` is {ms}; it must be at most {max_ms} ({})",
            omnidev_core::event::format_duration(max)
        ),
    ))
}

/// Checks every string value of the document for valid placeholders, and
/// records each `{env.NAME}` without a default with its position in `uses`.
fn check_placeholders<'a>(
    at: &Locator<'_>,
    table: &'a DeTable<'a>,
    path: &mut Vec<String>,
    ports: &template::Names<'_>,
    uses: &mut Vec<EnvUse>,
) -> Result<()> {
    for (key, value) in table {
        path.push(key.get_ref().to_string());
        check_value(at, value, path, ports, uses)?;
        path.pop();
    }
    Ok(())
}

fn check_value<'a>(
    at: &Locator<'_>,
    value: &'a toml::Spanned<DeValue<'a>>,
    path: &mut Vec<String>,
    ports: &template::Names<'_>,
    uses: &mut Vec<EnvUse>,
) -> Result<()> {
    match value.get_ref() {
        DeValue::String(text) => {
            // Point at the placeholder as written when it can be found in
            // the raw text (escapes inside the string may shift it).
            let span = value.span();
            let raw = at.text.get(span.clone()).unwrap_or_default();
            let offset_of =
                |snippet: &str| raw.find(snippet).map_or(span.start, |i| span.start + i);
            if text.contains('\0') {
                return Err(at.error_at(
                    offset_of("\\u0000"),
                    format!(
                        "in `{}`: a NUL byte cannot reach a program (a command, its \
                         arguments and its environment are C strings)",
                        path.join(".")
                    ),
                ));
            }
            let segments = template::parse_known(text, ports).map_err(|e| {
                at.error_at(
                    offset_of(&e.snippet),
                    format!("in `{}`: {}", path.join("."), e.message),
                )
            })?;
            for segment in segments {
                if let template::Segment::Placeholder(template::Placeholder::Env {
                    name,
                    default: None,
                }) = segment
                {
                    let (line, column) =
                        line_column(at.text, offset_of(&format!("{{env.{name}}}")));
                    uses.push(EnvUse { path: path.clone(), name, line, column });
                }
            }
        }
        DeValue::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                path.push(i.to_string());
                check_value(at, item, path, ports, uses)?;
                path.pop();
            }
        }
        DeValue::Table(table) => check_placeholders(at, table, path, ports, uses)?,
        _ => {}
    }
    Ok(())
}

impl Profile {
    /// Every `{env.NAME}` without a default that the rendered pod would use
    /// — in `[env]`, `[urls]` and the `selected` services; not in `[[seed]]
    /// from`, where an unset one only skips a candidate, and not in
    /// `ready.log`, which is a regular expression — must be set in `env`.
    /// The error points at the placeholder as written.
    pub(crate) fn check_env_set(
        &self,
        env: &BTreeMap<String, String>,
        selected: &[String],
    ) -> Result<()> {
        for used in &self.env_uses.uses {
            let keys: Vec<&str> = used.path.iter().map(String::as_str).collect();
            let applies = match keys.as_slice() {
                ["seed", ..] | ["services", _, "ready", "log"] => false,
                ["services", service, ..] => selected.iter().any(|s| s == service),
                _ => true,
            };
            if applies && !env.contains_key(&used.name) {
                return Err(Error::Profile {
                    origin: self.env_uses.origin.clone(),
                    line: used.line,
                    column: used.column,
                    message: format!(
                        "`{{env.{name}}}` in `{}`: `{name}` is not set; set it in the \
                         environment or an env file, or give a default: `{{env.{name}:-…}}`",
                        used.path.join("."),
                        name = used.name
                    ),
                });
            }
        }
        Ok(())
    }
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset.min(text.len())).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile_error(text: &str) -> (usize, usize, String) {
        match Profile::parse(text, "p.toml").expect_err("should fail") {
            Error::Profile { line, column, message, .. } => (line, column, message),
            other => panic!("unexpected error {other}"),
        }
    }

    #[test]
    fn embedded_profile_parses_and_round_trips() {
        let profile = Profile::parse(OMNIGENT_PROFILE, OMNIGENT_ORIGIN).expect("embedded parses");
        let text = profile.to_toml().expect("serialise");
        let back = Profile::parse(&text, "shown").expect("shown text parses");
        assert_eq!(back, profile);
        assert_eq!(profile.ports.keys().collect::<Vec<_>>(), ["server", "vite"]);
        assert_eq!(profile.urls.keys().collect::<Vec<_>>(), ["ui", "server"]);
        assert_eq!(profile.watch.debounce_ms, Some(100));
    }

    #[test]
    fn a_wrong_restart_or_condition_names_the_choices() {
        let (line, column, message) =
            profile_error("[services.a]\ncommand = [\"x\"]\nrestart = true\n");
        assert_eq!((line, column), (3, 11), "{message}");
        assert!(
            message.contains("\"always\", \"on-failure\", \"never\"") && message.contains("true"),
            "{message}"
        );
        let (line, _, message) = profile_error(
            "[services.a]\ncommand = [\"x\"]\n[services.b]\ncommand = [\"x\"]\ndepends-on = { a = \"healthy\" }\n",
        );
        assert_eq!(line, 5, "{message}");
        assert!(
            message.contains("\"started\", \"ready\", \"completed\"")
                && message.contains("healthy"),
            "{message}"
        );
    }

    #[test]
    fn limits_read_sizes_and_shares_and_refuse_the_rest() {
        let limits = |keys: &str| {
            let text = format!("[services.a]\ncommand = [\"x\"]\n{keys}\n");
            let profile = Profile::parse(&text, "p.toml").expect("parses");
            profile.services["a"].limits()
        };
        let mib = 1024 * 1024;
        for (written, bytes) in [
            ("\"512MiB\"", 512 * mib),
            ("\"512M\"", 512 * mib),
            ("\"1.5 GiB\"", 1536 * mib),
            ("\"2GB\"", 2_000_000_000),
            ("1048576", mib),
        ] {
            let got = limits(&format!("memory-max = {written}")).memory_max;
            assert_eq!(got, Some(bytes), "{written}");
        }
        for (written, percent) in [("\"150%\"", 150), ("\" 50 %\"", 50), ("1.5", 150), ("2", 200)] {
            let got = limits(&format!("cpu-max = {written}")).cpu_max;
            assert_eq!(got, Some(percent), "{written}");
        }
        for (written, says) in [
            ("memory-max = \"100\"", "under 1 MiB"),
            ("memory-max = 512", "under 1 MiB"),
            ("memory-max = \"lots\"", "write a size"),
            ("memory-max = \"5 parsecs\"", "write a size"),
            ("memory-max = true", "write a size"),
            ("cpu-max = \"0%\"", "share of one CPU"),
            ("cpu-max = \"fast\"", "share of one CPU"),
            ("cpu-max = -1", "share of one CPU"),
        ] {
            let (line, _, message) =
                profile_error(&format!("[services.a]\ncommand = [\"x\"]\n{written}\n"));
            assert_eq!(line, 3, "{message}");
            assert!(message.contains(says), "{written}: {message}");
        }
        // The pod's, and written back as read.
        let text = "[pod]\nmemory-max = \"4GiB\"\ncpu-max = \"250%\"\n\
                    [services.a]\ncommand = [\"x\"]\ncpu-max = 0.5\n";
        let profile = Profile::parse(text, "p.toml").expect("parses");
        assert_eq!(profile.pod.limits().memory_max, Some(4096 * mib));
        assert_eq!(profile.pod.limits().cpu_max, Some(250));
        let back = Profile::parse(&profile.to_toml().expect("toml"), "shown").expect("parses");
        assert_eq!(back, profile);
    }

    #[test]
    fn hostnames_put_the_pods_own_host_in_its_localhost_urls() {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = dir.path().join("shop");
        std::fs::create_dir_all(repo.join(".git")).expect("mkdir");
        std::fs::write(repo.join(".git/HEAD"), "ref: refs/heads/login\n").expect("write");
        let text = |hostnames: bool| {
            format!(
                "[pod]\nhostnames = {hostnames}\n[ports]\nweb = 8000\n\
                 [services.web]\ncommand = [\"serve\", \"--host\", \"{{host.pod}}\"]\n\
                 [urls]\nweb = \"http://localhost:{{port.web}}/\"\n\
                 docs = \"http://localhost.example:1/\"\n"
            )
        };
        let mut ports = crate::Ports::default();
        ports.0.insert("web".into(), 8001);
        let ctx =
            crate::RenderContext::from_process_env(repo.clone(), dir.path().join("pod"), ports);
        let urls = |hostnames| {
            let profile = Profile::parse(&text(hostnames), "p.toml").expect("parses");
            profile.urls_of(&ctx).expect("urls")
        };
        assert_eq!(urls(true)["web"], "http://login.shop.localhost:8001/");
        assert_eq!(urls(false)["web"], "http://localhost:8001/");
        // Only the host `localhost` is changed.
        assert_eq!(urls(true)["docs"], "http://localhost.example:1/");
        let profile = Profile::parse(&text(true), "p.toml").expect("parses");
        let rendered = profile.render(&ctx).expect("renders");
        assert_eq!(rendered.services[0].command.args, ["--host", "login.shop.localhost"]);
        assert_eq!(rendered.services[0].urls[0].url, "http://login.shop.localhost:8001/");
        // `pod` is no port's name.
        let (_, _, message) = profile_error("[ports]\npod = 8000\n");
        assert!(message.contains("`{host.pod}`"), "{message}");
    }

    #[test]
    fn a_cycle_names_each_edge_with_its_line() {
        let text = "[services.api]\ncommand = [\"x\"]\ndepends-on = { worker = \"ready\" }\n\n\
                    [services.worker]\ncommand = [\"x\"]\ndepends-on = { db = \"started\" }\n\n\
                    [services.db]\ncommand = [\"x\"]\ndepends-on = { api = \"ready\" }\n";
        let (line, column, message) = profile_error(text);
        assert_eq!((line, column), (3, 16), "{message}");
        assert!(message.contains("api → worker → db → api"), "{message}");
        for edge in [
            "`api` depends on `worker` (line 3,",
            "`worker` depends on `db` (line 7,",
            "`db` depends on `api` (line 11,",
        ] {
            assert!(message.contains(edge), "{edge} in {message}");
        }
        // A service depending on itself is a cycle too.
        let (_, _, message) =
            profile_error("[services.a]\ncommand = [\"x\"]\ndepends-on = { a = \"ready\" }\n");
        assert!(message.contains("a → a"), "{message}");
    }

    #[test]
    fn unknown_key_has_line_and_column() {
        let (line, column, message) =
            profile_error("[ports]\nweb = 1\n\n[services.web]\ncommand = [\"x\"]\n  cmd = 3\n");
        assert_eq!((line, column), (6, 3), "{message}");
        assert!(message.contains("cmd"), "{message}");
    }

    #[test]
    fn a_base_port_of_zero_or_above_65535_is_refused_with_its_place() {
        let (line, _, message) =
            profile_error("[ports]\nweb = 0\n\n[services.web]\ncommand = [\"x\"]\n");
        assert_eq!(line, 2, "{message}");
        assert!(message.contains("base port of `web` is 0"), "{message}");
        let (line, _, message) =
            profile_error("[ports]\nweb = 70000\n\n[services.web]\ncommand = [\"x\"]\n");
        assert_eq!(line, 2, "{message}");
        assert!(message.contains("70000"), "{message}");
    }

    #[test]
    fn a_nul_in_a_string_is_refused_with_its_place() {
        let (line, column, message) = profile_error(
            "[env]\nA = \"x\"\n\n[services.web]\ncommand = [\"echo\", \"a\\u0000b\"]\n",
        );
        assert_eq!((line, column), (5, 22), "{message}");
        assert!(message.contains("services.web.command.1"), "{message}");
        assert!(message.contains("NUL byte"), "{message}");
    }

    #[test]
    fn unknown_placeholder_has_line_and_column() {
        let (line, column, message) =
            profile_error("[ports]\nweb = 1\n[env]\nA = \"x\"\nB = \"http://h:{port.api}\"\n");
        assert_eq!((line, column), (5, 15), "{message}");
        assert!(message.contains("port.api") || message.contains("`api`"), "{message}");
        let (line, column, message) =
            profile_error("[services.a]\ncommand = [\"echo\", \"{nope}\"]\n");
        assert_eq!((line, column), (2, 21), "{message}");
        assert!(message.contains("{nope}"), "{message}");
    }

    #[test]
    fn semantic_errors_point_at_the_key() {
        let (line, _, message) =
            profile_error("[services.a]\ncommand = [\"x\"]\ndepends-on = { b = \"ready\" }\n");
        assert_eq!(line, 3, "{message}");
        assert!(message.contains("unknown service `b`"), "{message}");
        let (line, _, message) = profile_error(
            "[services.a]\ncommand = [\"x\"]\n[urls]\nui = { url = \"http://h\", service = \"web\" }\n",
        );
        assert_eq!(line, 4, "{message}");
        assert!(message.contains("URL `ui` names unknown service `web`"), "{message}");
        let (line, _, message) = profile_error("\n[services.a]\nargs = []\n");
        assert_eq!(line, 2, "{message}");
        let (line, _, message) =
            profile_error("[services.a]\ncommand = [\"x\"]\nstop-signal = \"SIGFOO\"\n");
        assert_eq!(line, 3, "{message}");
    }

    #[test]
    fn durations_above_their_maxima_point_at_the_value() {
        let (line, column, message) =
            profile_error("[services.a]\ncommand = [\"x\"]\ngrace-ms = 18446744073709551615\n");
        assert_eq!((line, column), (3, 12), "{message}");
        assert!(message.contains("grace-ms"), "{message}");
        assert!(message.contains("600000"), "{message}");
        let (line, column, message) =
            profile_error("[services.a]\ncommand = [\"x\"]\ngrace-ms = 600001\n");
        assert_eq!((line, column), (3, 12), "{message}");
        assert!(message.contains("at most 600000 (600s)"), "{message}");
        let (line, _, message) = profile_error(
            "[services.a]\ncommand = [\"x\"]\nready = { tcp = \"h:1\", timeout-ms = 99999999999 }\n",
        );
        assert_eq!(line, 3, "{message}");
        assert!(message.contains("timeout-ms"), "{message}");
        let (line, _, message) = profile_error(
            "[services.a]\ncommand = [\"x\"]\nready = { tcp = \"h:1\", interval-ms = 600001 }\n",
        );
        assert_eq!(line, 3, "{message}");
        assert!(message.contains("interval-ms"), "{message}");
        let (line, _, message) = profile_error("[watch]\ndebounce-ms = 60001\n");
        assert_eq!(line, 2, "{message}");
        assert!(message.contains("debounce-ms"), "{message}");
        // The maxima themselves are fine.
        Profile::parse(
            "[watch]\ndebounce-ms = 60000\n[services.a]\ncommand = [\"x\"]\ngrace-ms = 600000\n",
            "p.toml",
        )
        .expect("maxima accepted");
    }

    #[test]
    fn a_log_probe_needs_a_usable_pattern() {
        let profile = Profile::parse(
            "[services.a]\ncommand = [\"x\"]\nready = { log = \"^Connected as '\" }\n",
            "test",
        )
        .expect("a log probe parses");
        let ready = profile.services["a"].ready.as_ref().expect("ready");
        assert_eq!(ready.log.as_deref(), Some("^Connected as '"));
        let (_, _, message) =
            profile_error("[services.a]\ncommand = [\"x\"]\nready = { log = \"(unclosed\" }\n");
        assert!(message.contains("`ready.log` of service `a`"), "{message}");
        let (_, _, message) = profile_error(
            "[services.a]\ncommand = [\"x\"]\nready = { log = \"x\", tcp = \"h:1\" }\n",
        );
        assert!(message.contains("exactly one of"), "{message}");
    }

    #[test]
    fn load_prefers_explicit_then_repo_file_then_embedded() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (_, source) = Profile::load(tmp.path(), None).expect("embedded");
        assert_eq!(source, ProfileSource::Embedded);
        let own = tmp.path().join(PROFILE_FILE);
        std::fs::write(&own, "[services.a]\ncommand = [\"true\"]\n").expect("write");
        let (profile, source) = Profile::load(tmp.path(), None).expect("repo");
        assert_eq!(source, ProfileSource::Repo(own));
        assert!(profile.services.contains_key("a"));
        let other = tmp.path().join("other.toml");
        std::fs::write(&other, "[services.b]\ncommand = [\"true\"]\n").expect("write");
        let (profile, _) = Profile::load(tmp.path(), Some(&other)).expect("explicit");
        assert!(profile.services.contains_key("b"));
    }

    #[test]
    fn a_repo_profile_that_cannot_be_read_is_an_error_not_the_embedded_one() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let own = tmp.path().join(PROFILE_FILE);
        let fifo = tmp.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
        for target in [Path::new("/dev/zero"), &fifo, &tmp.path().join("missing")] {
            std::os::unix::fs::symlink(target, &own).expect("symlink");
            let error = Profile::load(tmp.path(), None).expect_err("a link there is read");
            assert!(
                error.to_string().contains("could not read the profile"),
                "{target:?}: {error}"
            );
            std::fs::remove_file(&own).expect("rm");
        }
        std::fs::create_dir(&own).expect("mkdir");
        let error = Profile::load(tmp.path(), None).expect_err("a directory there");
        assert!(error.to_string().contains("could not read the profile"), "{error}");
    }
}

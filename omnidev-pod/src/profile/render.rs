//! Rendering a profile into the environment, service specs, watch rules and URLs of one pod.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use omnidev_core::{
    CommandSpec, Dependency, Env, NamedUrl, PrepareStep, PrepareWhen, ProbeSpec, Readiness,
    ServiceSpec, StopSpec,
};

use super::template::{self, Unresolved, Values};
use super::{Profile, Ready, Service, signal_number};
use crate::error::{Error, Result};
use crate::package_manager::{self, Detection, Invocation, PackageManager};
use crate::ports::Ports;
use crate::python::PythonPin;
use crate::seed::{SeedOutcome, seed_file};

/// Default debounce of file-watch reloads.
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(100);
/// Default longest pause between readiness attempts.
pub const DEFAULT_READY_INTERVAL: Duration = Duration::from_secs(1);
/// Default time before a "probe timed out" event.
pub const DEFAULT_READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Heartbeat interval of a silent dependency install.
pub const INSTALL_HEARTBEAT: Duration = Duration::from_secs(5);

/// Which services to run: `--only` / `--skip` (`--no-vite` is `skip =
/// ["vite"]`).
///
/// `only` brings the services its names depend on, transitively (as
/// `docker compose up web` does), unless `exact` (`--no-deps`). `skip` is
/// applied last. A selected service whose dependency is not selected loses
/// that edge and starts without waiting for it (the user left it out on
/// purpose; they may run it elsewhere).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Selection {
    /// When non-empty, only these services (and their dependencies).
    pub only: Vec<String>,
    /// These services are left out.
    pub skip: Vec<String>,
    /// `only` names exactly the services to run, without their dependencies.
    pub exact: bool,
}

impl Selection {
    /// The selected service names in profile order; unknown names are an
    /// error.
    ///
    /// ```
    /// use omnidev_pod::{Profile, Selection};
    /// let no_vite = Selection { skip: vec!["vite".into()], ..Default::default() };
    /// assert_eq!(no_vite.apply(&Profile::omnigent()).unwrap(), ["server", "host"]);
    /// // The host depends on the server: `--only host` brings it.
    /// let host = Selection { only: vec!["host".into()], ..Default::default() };
    /// assert_eq!(host.apply(&Profile::omnigent()).unwrap(), ["server", "host"]);
    /// let exact = Selection { exact: true, ..host };
    /// assert_eq!(exact.apply(&Profile::omnigent()).unwrap(), ["host"]);
    /// ```
    pub fn apply(&self, profile: &Profile) -> Result<Vec<String>> {
        let known: Vec<String> = profile.services.keys().cloned().collect();
        for name in self.only.iter().chain(&self.skip) {
            // A database left out is no service yet (`omnidev run`).
            let left_out_database =
                profile.databases.contains_key(name) && self.skip.contains(name);
            if !profile.services.contains_key(name) && !left_out_database {
                return Err(Error::UnknownService { name: name.clone(), known });
            }
        }
        let mut wanted: Vec<&str> = self.only.iter().map(String::as_str).collect();
        if !self.exact {
            // A walk down the dependency edges; a cycle is the profile
            // check's to report, and ends the walk here.
            let mut next = 0;
            while let Some(name) = wanted.get(next).copied() {
                next += 1;
                for dependency in profile.services[name].depends_on.keys() {
                    if !wanted.contains(&dependency.as_str()) {
                        wanted.push(dependency);
                    }
                }
            }
        }
        Ok(known
            .iter()
            .filter(|n| self.only.is_empty() || wanted.contains(&n.as_str()))
            .filter(|n| !self.skip.contains(n))
            .cloned()
            .collect())
    }

    /// The services a pod of `profile` runs ([`Selection::apply`]): none
    /// is an error, the one `up`, `profile check` and `reload-profile`
    /// give alike (a profile without services included).
    pub fn to_run(&self, profile: &Profile) -> Result<Vec<String>> {
        let selected = self.apply(profile)?;
        // A pod of only a database server (a Postgres per checkout) runs
        // that server.
        let server_left = self.only.is_empty()
            && (profile.databases.iter())
                .any(|(name, d)| d.engine.is_server() && !self.skip.contains(name));
        if !selected.is_empty() || server_left {
            return Ok(selected);
        }
        Err(if profile.services.is_empty() {
            Error::NothingToRun {
                reason: "the profile defines no service",
                help: "add a `[services.NAME]` table with its `command`, or a \
                       `[databases.NAME]` with a server `engine` (`omnidev help profile`)",
            }
        } else {
            Error::NothingToRun {
                reason: "--only / --skip / --no-vite left none of the profile's services",
                help: "check --only / --skip / --no-vite",
            }
        })
    }
}

/// Everything a profile is rendered against.
#[derive(Debug, Clone, Default)]
pub struct RenderContext {
    /// The checkout root (`{repo}`; service `cwd`s are relative to it).
    pub repo: PathBuf,
    /// The pod directory (`{pod}`).
    pub pod_dir: PathBuf,
    /// Allocated ports (`{port.NAME}`).
    pub ports: Ports,
    /// Bind hosts by port name (`{host.NAME}`, default `127.0.0.1`).
    pub hosts: BTreeMap<String, String>,
    /// The inherited environment (`{env.NAME}`, and the inherited value of
    /// the LAN-origins variable).
    pub inherited_env: BTreeMap<String, String>,
    /// Trusted LAN origins (empty unless `--trust-lan-origins` found some).
    pub lan_origins: Vec<String>,
    /// Which services to render.
    pub selection: Selection,
    /// The `PATH` searched for the package manager.
    pub path: OsString,
    /// `{python}`: the checkout's `.python-version` (3.12 by default).
    pub python: PythonPin,
    /// omnidev's per-user runtime directory ([`crate::runtime`]): the
    /// services' `OMNIDEV_RUNTIME_DIR`, so an omnidev they run finds the
    /// registry and sockets their own `XDG_RUNTIME_DIR` no longer leads to.
    pub runtime_dir: Option<PathBuf>,
    /// `--scale NAME=N`: copies of a service, over its `replicas`.
    pub scale: BTreeMap<String, u32>,
    /// `--db ENGINE`: the engine the profile's databases run on, applied
    /// to the profile when it is loaded again (`reload-profile`).
    pub db: Option<crate::database::DbEngine>,
    /// The command that runs a database's seed and keeps its result in the
    /// user's cache (`omnidev db seed-run --repo … --pod-dir …`, given
    /// `--database NAME --key KEY -- COMMAND…`); without it a seed runs
    /// uncached.
    pub seed_store: Option<Vec<String>>,
    /// `{link.NAME.…}`: the linked pods ([`crate::link::resolve`]).
    pub links: BTreeMap<String, crate::link::Linked>,
    /// This program (`omnidev`), which runs a linked service's watch
    /// (`LINK.SERVICE` in `depends-on`).
    pub omnidev: Option<PathBuf>,
    /// `{host.pod}`: the pod's host name ([`crate::root::pod_host`]).
    pub pod_host: String,
}

impl RenderContext {
    /// A context with `inherited_env` and `path` taken from this process.
    pub fn from_process_env(repo: PathBuf, pod_dir: PathBuf, ports: Ports) -> Self {
        let python = PythonPin::of_checkout(&repo);
        Self {
            pod_host: crate::root::pod_host(&repo),
            repo,
            pod_dir,
            ports,
            inherited_env: std::env::vars().collect(),
            path: std::env::var_os("PATH").unwrap_or_default(),
            python,
            runtime_dir: Some(crate::runtime::runtime_dir()),
            ..Self::default()
        }
    }

    /// What keeps the services to the pod's own directories, under
    /// everything the profile sets: `XDG_RUNTIME_DIR` = `<pod>/run`,
    /// `TMPDIR` = `<pod>/tmp`, and `OMNIDEV_RUNTIME_DIR` (see
    /// [`RenderContext::runtime_dir`]). Nothing without a pod directory.
    fn own_dirs(&self) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        if self.pod_dir.as_os_str().is_empty() {
            return env;
        }
        let path = |p: &Path| p.to_string_lossy().into_owned();
        env.insert("XDG_RUNTIME_DIR".to_owned(), path(&self.pod_dir.join(crate::layout::RUN_DIR)));
        env.insert("TMPDIR".to_owned(), path(&self.pod_dir.join(crate::layout::TMP_DIR)));
        if let Some(dir) = &self.runtime_dir {
            env.insert(crate::runtime::OWN_RUNTIME_DIR.to_owned(), path(dir));
        }
        env
    }

    /// What `{env.NAME}` reads: the inherited environment overlaid with the
    /// pod's env files.
    fn template_env(&self, pod_files: &BTreeMap<String, String>) -> BTreeMap<String, String> {
        let mut env = self.inherited_env.clone();
        env.extend(pod_files.iter().map(|(k, v)| (k.clone(), v.clone())));
        env
    }

    fn values_with<'a>(
        &'a self,
        env: &'a BTreeMap<String, String>,
        databases: &'a BTreeMap<String, crate::database::DbParts>,
    ) -> Values<'a> {
        Values {
            pod: &self.pod_dir,
            repo: &self.repo,
            ports: &self.ports,
            hosts: &self.hosts,
            pod_host: &self.pod_host,
            env,
            python: self.python.0.as_deref(),
            databases,
            links: &self.links,
        }
    }

    /// The pod's socket directory: under omnidev's runtime directory (a
    /// short path, 0700), else `<pod>/run`.
    fn socket_dir(&self) -> PathBuf {
        match &self.runtime_dir {
            Some(runtime) => {
                let canonical =
                    (self.pod_dir.canonicalize()).unwrap_or_else(|_| self.pod_dir.clone());
                crate::runtime::socket_dir(runtime, &canonical)
            }
            None => self.pod_dir.join(crate::layout::RUN_DIR),
        }
    }
}

/// A watch rule: a change to a file matching `globs` (relative to the
/// checkout) reloads `service`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchRule {
    /// The service to reload.
    pub service: String,
    /// Glob patterns relative to the checkout root.
    pub globs: Vec<String>,
}

/// A profile rendered for one pod.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedPod {
    /// The pod's environment overrides (profile `[env]` plus the LAN-origins
    /// variable): what `omnidev run` sets, and what every service's
    /// [`Env`] shares.
    pub env: Arc<BTreeMap<String, String>>,
    /// The selected services, in profile order.
    pub services: Vec<ServiceSpec>,
    /// Watch rules of the selected services.
    pub watch: Vec<WatchRule>,
    /// File-watch debounce.
    pub debounce: Duration,
    /// The pod's own URLs (a service's are in its spec), in profile order:
    /// shown from the start.
    pub urls: Vec<NamedUrl>,
}

impl RenderedPod {
    /// What `restart` without a service (and the TUI's `R`) restarts: the
    /// services with watch rules, every service when none has.
    pub fn watched(&self) -> Vec<String> {
        let watched: Vec<String> = self.watch.iter().map(|w| w.service.clone()).collect();
        if watched.is_empty() {
            self.services.iter().map(|s| s.name.clone()).collect()
        } else {
            watched
        }
    }
}

impl Profile {
    /// Renders the profile for one pod.
    ///
    /// ```
    /// use omnidev_pod::{Profile, RenderContext, Selection};
    /// let mut ctx = RenderContext { repo: "/src/app".into(), pod_dir: "/pods/app".into(), ..Default::default() };
    /// ctx.ports.0.extend([("server".into(), 6767), ("vite".into(), 5173)]);
    /// ctx.selection = Selection { skip: vec!["vite".into()], ..Default::default() };
    /// let pod = Profile::omnigent().render(&ctx).unwrap();
    /// assert_eq!(pod.env["OMNIGENT_URL"], "http://127.0.0.1:6767");
    /// assert_eq!(pod.services.len(), 2);
    /// // Each URL is its service's; `ui` is vite's, which is left out.
    /// assert!(pod.urls.is_empty());
    /// let urls: Vec<_> = pod.services.iter().flat_map(|s| &s.urls).collect();
    /// assert_eq!(urls.len(), 1);
    /// assert_eq!(urls[0].url, "http://localhost:6767");
    /// ```
    pub fn render(&self, ctx: &RenderContext) -> Result<RenderedPod> {
        let socket_dir = ctx.socket_dir();
        let place = crate::database::DbPlace {
            pod_dir: &ctx.pod_dir,
            socket_dir: &socket_dir,
            ports: &ctx.ports,
        };
        let databases = self.database_parts(&place)?;
        // A server left out (`omnidev run` leaves every service out) is
        // neither looked for nor refused.
        let servers = (self.databases.iter()).any(|(name, d)| {
            (d.engine.is_server() || d.seed.is_some()) && !ctx.selection.skip.contains(name)
        });
        let mut profile = std::borrow::Cow::Borrowed(self);
        if servers {
            profile = std::borrow::Cow::Owned(self.with_database_services(ctx, &place)?);
        }
        let mut watches = Vec::new();
        if profile.uses_linked_services() {
            let (with, names) = profile.with_link_watches(ctx)?;
            profile = std::borrow::Cow::Owned(with);
            watches = names;
        }
        let mut pod = profile.render_with(ctx, &databases)?;
        for spec in &mut pod.services {
            spec.link = watches.contains(&spec.name);
        }
        // A set the supervisor would refuse is the profile's mistake.
        omnidev_core::start_order(&pod.services)
            .map_err(|e| Error::Render { message: e.to_string() })?;
        Ok(pod)
    }

    /// A `[urls]` entry rendered; with `[pod] hostnames`, its host
    /// `localhost` is the pod's own host name, so two pods' UIs keep
    /// separate cookies.
    fn url_text(&self, template: &str, values: &Values<'_>) -> Result<String> {
        let url = render_text(template, values)?;
        if !self.pod.hostnames {
            return Ok(url);
        }
        Ok(match url.split_once("://localhost") {
            Some((scheme, rest)) if rest.is_empty() || rest.starts_with([':', '/']) => {
                format!("{scheme}://{}{rest}", values.pod_host)
            }
            _ => url,
        })
    }

    /// Whether a service depends on a linked pod's (`LINK.SERVICE`).
    fn uses_linked_services(&self) -> bool {
        (self.services.values())
            .flat_map(|s| s.depends_on.keys())
            .any(|d| !self.services.contains_key(d))
    }

    /// This profile with a service `LINK.SERVICE` for each linked pod's
    /// service one of its services depends on, and their names: `omnidev
    /// link-watch`, ready while that service is ready in its pod, which
    /// ends when it is not (its spec is marked
    /// [`ServiceSpec::link`](omnidev_core::spec::ServiceSpec::link): it is
    /// looked at again soon, its dependents wait blocked meanwhile). It
    /// only reads the linked pod.
    fn with_link_watches(&self, ctx: &RenderContext) -> Result<(Profile, Vec<String>)> {
        let mut profile = self.clone();
        let wanted: Vec<String> = (self.services.values())
            .flat_map(|s| s.depends_on.keys())
            .filter(|d| !self.services.contains_key(*d))
            .cloned()
            .collect();
        for dependency in &wanted {
            let Some((link, theirs)) = dependency.split_once('.') else {
                continue;
            };
            let (Some(linked), Some(program)) = (ctx.links.get(link), &ctx.omnidev) else {
                return Err(Error::Link {
                    name: link.to_owned(),
                    message: format!("`{dependency}` cannot be watched from here"),
                    help: "start the pod with `omnidev up`, which follows its links".to_owned(),
                });
            };
            let text = |p: &Path| p.to_string_lossy().into_owned();
            profile.services.insert(
                dependency.clone(),
                super::Service {
                    command: Some(vec![
                        text(program),
                        "link-watch".to_owned(),
                        "--pod-dir".to_owned(),
                        text(&linked.pod_dir),
                        "--service".to_owned(),
                        theirs.to_owned(),
                    ]),
                    ready: Some(super::Ready {
                        log: Some(format!("^{}$", template::LINK_READY)),
                        interval_ms: Some(100),
                        ..Default::default()
                    }),
                    grace_ms: Some(1000),
                    ..Default::default()
                },
            );
        }
        Ok((profile, wanted))
    }

    /// Every `[urls]` entry rendered in the pod `ctx` renders, whether its
    /// service runs or not: what a linking pod's `{link.NAME.url.URL}`
    /// reads.
    pub fn urls_of(&self, ctx: &RenderContext) -> Result<BTreeMap<String, String>> {
        let databases = self.databases_of(ctx)?;
        let values = ctx.values_with(&ctx.inherited_env, &databases);
        (self.urls.iter())
            .map(|(name, url)| Ok((name.clone(), self.url_text(url.template(), &values)?)))
            .collect()
    }

    /// What each database's `{db.NAME.PART}` stands for in the pod `ctx`
    /// renders (`omnidev db url` prints its `url`).
    pub fn databases_of(
        &self,
        ctx: &RenderContext,
    ) -> Result<BTreeMap<String, crate::database::DbParts>> {
        let socket_dir = ctx.socket_dir();
        self.database_parts(&crate::database::DbPlace {
            pod_dir: &ctx.pod_dir,
            socket_dir: &socket_dir,
            ports: &ctx.ports,
        })
    }

    fn database_parts(
        &self,
        place: &crate::database::DbPlace<'_>,
    ) -> Result<BTreeMap<String, crate::database::DbParts>> {
        (self.databases.iter())
            .map(|(name, database)| Ok((name.clone(), database.parts(name, place)?)))
            .collect()
    }

    /// This profile with a service for each server database, first, and
    /// each service that uses a database (every one when the pod's `[env]`
    /// does) waiting for it to be ready.
    fn with_database_services(
        &self,
        ctx: &RenderContext,
        place: &crate::database::DbPlace<'_>,
    ) -> Result<Profile> {
        let mut services = super::servers::services(&self.databases, place, |engine| {
            crate::database::find_programs(engine, &ctx.path)
        })?;
        let servers: Vec<String> = services.keys().cloned().collect();
        let mut profile = self.clone();
        for name in &servers {
            for user in self.database_users(name) {
                if let Some(service) = profile.services.get_mut(&user) {
                    service
                        .depends_on
                        .entry(name.clone())
                        .or_insert(omnidev_core::Condition::Ready);
                }
            }
        }
        self.with_seeds(ctx, place, &mut services, &mut profile)?;
        services.extend(profile.services);
        profile.services = services;
        Ok(profile)
    }

    /// The services of this profile that use database `name`: those that
    /// name one of its `{db.NAME.…}` parts, every one when the pod's
    /// `[env]` does. They start once it is ready, and stop while its data
    /// is swapped (`omnidev db restore`).
    pub fn database_users(&self, name: &str) -> Vec<String> {
        let mention = format!("{{db.{name}.");
        let pod_wide = self.env.values().any(|value| value.contains(&mention));
        (self.services.iter())
            .filter(|(_, service)| {
                pod_wide || toml::to_string(*service).is_ok_and(|text| text.contains(&mention))
            })
            .map(|(user, _)| user.clone())
            .collect()
    }

    /// For each database with a seed and no data yet, a one-shot service
    /// `NAME-seed` run once the database is ready (through `seed_store`,
    /// which keeps its result in the user's cache, when the context has
    /// it); the services that use the database start once it completed.
    fn with_seeds(
        &self,
        ctx: &RenderContext,
        place: &crate::database::DbPlace<'_>,
        services: &mut indexmap::IndexMap<String, super::Service>,
        profile: &mut Profile,
    ) -> Result<()> {
        for (name, database) in &self.databases {
            let Some(seed) = &database.seed else {
                continue;
            };
            let data = database.data_path(name, place.pod_dir);
            if ctx.selection.skip.contains(name) || std::fs::symlink_metadata(&data).is_ok() {
                continue;
            }
            let seed_name = format!("{name}-seed");
            let mut command = Vec::new();
            if let Some(store) = &ctx.seed_store {
                let key = crate::db_seed::key(&ctx.repo, name, database, &ctx.path)?;
                command.extend(store.iter().map(|word| word.replace('{', "{{").replace('}', "}}")));
                command.extend(["--database".to_owned(), name.clone(), "--key".to_owned(), key]);
                command.push("--".to_owned());
            }
            command.extend(seed.command.iter().cloned());
            let mut depends_on = indexmap::IndexMap::new();
            if database.engine.is_server() {
                depends_on.insert(name.clone(), omnidev_core::Condition::Ready);
            }
            for user in self.database_users(name) {
                if let Some(service) = profile.services.get_mut(&user) {
                    service
                        .depends_on
                        .insert(seed_name.clone(), omnidev_core::Condition::Completed);
                }
            }
            services.insert(
                seed_name,
                super::Service {
                    command: Some(command),
                    restart: Some(omnidev_core::RestartPolicy::Never),
                    depends_on,
                    ..Default::default()
                },
            );
        }
        Ok(())
    }

    fn render_with(
        &self,
        ctx: &RenderContext,
        databases: &BTreeMap<String, crate::database::DbParts>,
    ) -> Result<RenderedPod> {
        let pod_files = crate::env_file::load(&ctx.repo, &self.pod.env_files)?;
        let template_env = ctx.template_env(&pod_files);
        let values = ctx.values_with(&template_env, databases);
        let text = |s: &str| render_text(s, &values);
        let selected = ctx.selection.apply(self)?;
        self.check_env_set(&template_env, &selected)?;

        // inherited < the pod's own directories < pod env files < [env] <
        // service env files < service env
        let mut env = ctx.own_dirs();
        env.extend(pod_files);
        for (name, value) in &self.env {
            env.insert(name.clone(), text(value)?);
        }
        if let Some(lan) = &self.lan_origins
            && !ctx.lan_origins.is_empty()
        {
            let inherited = ctx.inherited_env.get(&lan.env).map(String::as_str);
            env.insert(lan.env.clone(), crate::lan::merge_origins(inherited, &ctx.lan_origins));
        }

        let env = Arc::new(env);
        // What runs of each selected service: itself, or its replicas.
        let running: BTreeMap<String, Vec<String>> = selected
            .iter()
            .map(|name| (name.clone(), self.running_names(name, &ctx.scale)))
            .collect();
        let mut services = Vec::new();
        let mut watch = Vec::new();
        for name in &selected {
            let service = &self.services[name];
            let copies = &running[name];
            let mut first_prepares = false;
            for (index, copy) in (1..).zip(copies) {
                // A replica's `{port.NAME}` is its own port (replica 1
                // keeps the port named like the service).
                let ports = ctx.ports.for_replica(name, index);
                let values = Values { ports: &ports, ..values };
                let mut spec = render_service(copy, service, &env, &running, ctx, &values)?;
                if index == 1 {
                    first_prepares = !spec.prepare.is_empty();
                } else {
                    // One install for all: replica 1 runs the prepare steps,
                    // and the others start once it has.
                    if first_prepares {
                        spec.depends_on.push(Dependency {
                            service: copies[0].clone(),
                            condition: omnidev_core::spec::Condition::Started,
                        });
                    }
                    spec.prepare.clear();
                }
                for (url_name, url) in &self.urls {
                    if url.service(url_name, self) == Some(name.as_str()) {
                        spec.urls.push(NamedUrl {
                            name: if copies[0] == *name {
                                url_name.clone()
                            } else {
                                crate::names::replica(url_name, index)
                            },
                            url: self.url_text(url.template(), &values)?,
                        });
                    }
                }
                services.push(spec);
                if !service.watch.is_empty() {
                    watch.push(WatchRule { service: copy.clone(), globs: service.watch.clone() });
                }
            }
        }

        // The pod's own URLs; a service's went to its spec (a service left
        // out takes its URLs with it).
        let mut urls = Vec::new();
        for (name, url) in &self.urls {
            if url.service(name, self).is_none() {
                urls.push(NamedUrl {
                    name: name.clone(),
                    url: self.url_text(url.template(), &values)?,
                });
            }
        }
        Ok(RenderedPod {
            env,
            services,
            watch,
            debounce: self.watch.debounce_ms.map_or(DEFAULT_DEBOUNCE, Duration::from_millis),
            urls,
        })
    }
}

/// How a service is stopped: its `stop-signal` and `grace-ms` over the
/// defaults.
fn stop_spec(service: &Service) -> StopSpec {
    let mut stop = StopSpec::default();
    if let Some(signal) = service.stop_signal.as_deref().and_then(signal_number) {
        stop.signal = signal;
    }
    if let Some(grace) = service.grace_ms {
        stop.grace = Duration::from_millis(grace);
    }
    stop
}

/// The spec of service (or replica) `name`; its dependencies on selected
/// services are on each of what `running` runs of them.
fn render_service(
    name: &str,
    service: &Service,
    pod_env: &Arc<BTreeMap<String, String>>,
    running: &BTreeMap<String, Vec<String>>,
    ctx: &RenderContext,
    values: &Values<'_>,
) -> Result<ServiceSpec> {
    let text = |s: &str| render_text(s, values);
    let all = |items: &[String]| items.iter().map(|s| text(s)).collect::<Result<Vec<_>>>();

    let cwd = ctx.repo.join(service.cwd.as_deref().unwrap_or("."));
    let mut env = Env::over(pod_env);
    env.extend(crate::env_file::load(&ctx.repo, &service.env_files)?);
    for (key, value) in &service.env {
        env.insert(key.clone(), text(value)?);
    }
    let python_step = if service.python_deps {
        let path = ctx.path.to_string_lossy();
        Some(crate::python::deps_step(name, &cwd, &mut env, &path, INSTALL_HEARTBEAT)?)
    } else {
        None
    };
    let tools = service_tools(service, &ctx.repo, &ctx.path)?;
    if let Some((_, pm)) = &tools
        && matches!(pm.manager, PackageManager::Pnpm | PackageManager::Yarn)
    {
        // Through corepack (or a corepack shim named pnpm/yarn) a download
        // would otherwise wait for a confirmation nobody can type.
        env.insert("COREPACK_ENABLE_DOWNLOAD_PROMPT".to_owned(), "0".to_owned());
    }
    let pm = tools.as_ref().map(|(_, pm)| pm);
    let unavailable = tools.as_ref().and_then(|(detection, _)| {
        let needs = crate::node::requirements(detection, service.node_version.as_deref());
        crate::node::check(&ctx.path, &needs).err()
    });

    let args = all(&service.args)?;
    let (program, args) = match (&service.command, &service.script, pm) {
        (Some(command), _, _) => {
            let (program, mut command) = split_program(name, all(command)?)?;
            command.extend(args);
            (program, command)
        }
        (None, Some(script), Some(pm)) => {
            (pm.program_string(), pm.run_script_args(&text(script)?, &args))
        }
        _ => {
            return Err(Error::Render {
                message: format!("service `{name}` has neither `command` nor `script`"),
            });
        }
    };
    let command = CommandSpec { program, args, cwd: cwd.clone(), env: env.clone() };

    let readiness = service
        .ready
        .as_ref()
        .map(|ready| render_readiness(name, ready, &cwd, &env, ctx, values))
        .transpose()?;

    let mut prepare = match (&tools, service.install_deps) {
        (Some((detection, pm)), true) => {
            let filter = service.install_filter.as_deref().filter(|_| detection.root != cwd);
            vec![install_step(detection, pm, filter, &env)]
        }
        _ => Vec::new(),
    };
    prepare.extend(python_step);

    Ok(ServiceSpec {
        name: name.to_owned(),
        command,
        depends_on: service
            .depends_on
            .iter()
            .filter_map(|(dep, condition)| Some((running.get(dep)?, condition)))
            .flat_map(|(copies, condition)| {
                copies
                    .iter()
                    .map(|copy| Dependency { service: copy.clone(), condition: *condition })
            })
            .collect(),
        readiness,
        restart: service.restart.unwrap_or_default(),
        stop: stop_spec(service),
        prepare,
        unavailable,
        yields: service.yields,
        // Set by `render`, which reads `[urls]`.
        urls: Vec::new(),
        limits: service.limits(),
        link: false,
    })
}

impl Profile {
    /// Seeds the profile's `[[seed]]` files into the pod: for each, the first
    /// `from` candidate whose placeholders all resolve (an unset
    /// `{env.NAME}` skips a candidate) is copied to `<pod>/<to>` when that
    /// does not exist yet. Never fails; see [`SeedOutcome`].
    pub fn seed(&self, ctx: &RenderContext) -> Vec<SeedOutcome> {
        // An unreadable env file is reported by `render`; seeding goes on
        // with the inherited environment alone.
        let pod_files = crate::env_file::load(&ctx.repo, &self.pod.env_files).unwrap_or_default();
        let template_env = ctx.template_env(&pod_files);
        let databases = BTreeMap::new();
        let values = ctx.values_with(&template_env, &databases);
        self.seed
            .iter()
            .map(|seed| {
                let candidate = seed
                    .from
                    .iter()
                    .find_map(|from| template::render(from, &values, true).ok())
                    .map(PathBuf::from);
                let pod = crate::Pod::at(&ctx.pod_dir);
                // Checked when the profile loaded; checked again here because
                // a profile value can also be built in code.
                let relative = match crate::pod::relative_inside(&seed.to) {
                    Ok(relative) if relative.parent().is_some() => relative,
                    Ok(_) | Err(_) => {
                        return SeedOutcome::Failed {
                            from: candidate.unwrap_or_default(),
                            to: ctx.pod_dir.join(&seed.to),
                            error: "the destination is not a file path inside the pod".to_owned(),
                        };
                    }
                };
                let to = ctx.pod_dir.join(&relative);
                let parent = relative.parent().unwrap_or(Path::new(""));
                if let Some(from) = candidate.as_ref().filter(|c| c.is_file())
                    && let Err(e) = pod.create_dir(parent)
                {
                    return SeedOutcome::Failed { from: from.clone(), to, error: e.to_string() };
                }
                seed_file(candidate.as_slice(), &to)
            })
            .collect()
    }

    /// The port whose origins `--trust-lan-origins` trusts, if the profile
    /// has a `[lan-origins]` table.
    pub fn lan_origin_port(&self) -> Option<&str> {
        self.lan_origins.as_ref().map(|l| l.port.as_str())
    }
}

fn render_readiness(
    name: &str,
    ready: &Ready,
    cwd: &Path,
    env: &Env,
    ctx: &RenderContext,
    values: &Values<'_>,
) -> Result<Readiness> {
    let text = |s: &str| render_text(s, values);
    let probe = if let Some(url) = &ready.http {
        ProbeSpec::Http { url: text(url)?, host: ready.host.as_deref().map(text).transpose()? }
    } else if let Some(address) = &ready.tcp {
        ProbeSpec::Tcp { address: text(address)? }
    } else if let Some(probe) = &ready.command {
        let probe = probe.iter().map(|s| text(s)).collect::<Result<Vec<_>>>()?;
        let (program, args) = split_program(name, probe)?;
        ProbeSpec::Command(CommandSpec { program, args, cwd: cwd.to_path_buf(), env: env.clone() })
    } else if let Some(pattern) = &ready.log {
        // Taken verbatim: `{` and `}` are regex syntax here, not placeholders.
        ProbeSpec::Log { pattern: pattern.clone() }
    } else {
        return Err(Error::Render {
            message: format!("`ready` of service `{name}` names no probe"),
        });
    };
    // The port of an `http`/`tcp` probe, when it is one of the pod's ports:
    // the service must be the one listening there.
    let target = match &probe {
        ProbeSpec::Http { url, .. } => url.split_once("://").map(|(_, rest)| rest),
        ProbeSpec::Tcp { address } => Some(address.as_str()),
        _ => None,
    };
    let listener = target
        .and_then(probe_port)
        .filter(|port| ctx.ports.iter().any(|(_, p)| p == *port))
        .filter(|_| ready.own_listener != Some(false));
    Ok(Readiness {
        probe,
        listener,
        interval: ready.interval_ms.map_or(DEFAULT_READY_INTERVAL, Duration::from_millis),
        timeout: ready.timeout_ms.map_or(DEFAULT_READY_TIMEOUT, Duration::from_millis),
    })
}

/// The port of `host:port[/path]` (`[v6]:port` too), if it names one.
///
/// ```text
/// 127.0.0.1:6767/health → 6767, [::1]:80 → 80, example.test/x → none
/// ```
fn probe_port(authority_and_path: &str) -> Option<u16> {
    let authority = authority_and_path.split(['/', '?', '#']).next().unwrap_or_default();
    let (host, port) = authority.rsplit_once(':')?;
    if host.is_empty() || host.ends_with(':') {
        return None; // a bare IPv6 address without brackets
    }
    port.parse().ok()
}

fn split_program(name: &str, mut command: Vec<String>) -> Result<(String, Vec<String>)> {
    if command.is_empty() {
        return Err(Error::Render { message: format!("service `{name}` has an empty command") });
    }
    let program = command.remove(0);
    Ok((program, command))
}

/// The package manager a service needs (it runs a `script` or installs
/// dependencies), detected from its `cwd` up to `repo` and found on `path`.
fn service_tools(
    service: &Service,
    repo: &Path,
    path: &std::ffi::OsStr,
) -> Result<Option<(Detection, Invocation)>> {
    if service.script.is_none() && !service.install_deps {
        return Ok(None);
    }
    let cwd = repo.join(service.cwd.as_deref().unwrap_or("."));
    // Validated when the profile was parsed.
    let explicit = service.package_manager.as_deref().and_then(PackageManager::from_name);
    let detection = package_manager::detect(&cwd, repo, explicit)?;
    let pm = detection.manager.resolve(path, &cwd)?;
    Ok(Some((detection, pm)))
}

/// How a profile is to run, for [`Profile::check_run`]: what `up`'s flags
/// chose (for a reload, the running pod's).
#[derive(Debug, Clone, Copy)]
pub struct RunChoice<'a> {
    /// `--db`, or the engine the pod recorded.
    pub db: Option<crate::database::DbEngine>,
    /// `--scale`.
    pub scale: &'a BTreeMap<String, u32>,
    /// `--only`, `--skip`, `--no-vite`.
    pub selection: &'a Selection,
    /// The `PATH` its programs are looked for on.
    pub path: &'a std::ffi::OsStr,
}

impl Profile {
    /// Everything a profile is refused for before a pod is made, started
    /// or changed: one list that `omnidev up` (and `up --detach` before it
    /// goes to the background), a reload of the profile and `omnidev
    /// profile check` share, so the three accept and refuse the same
    /// profiles. In order: the checkout's `[repo] markers`, the database
    /// engine chosen (the databases moved to it), each server database's
    /// programs and user (never root), the scale, the selection, the
    /// package managers of the selected services. (Rendering then refuses
    /// what only a render finds: placeholders, a dependency loop.)
    pub fn check_run(&mut self, repo: &Path, run: &RunChoice<'_>) -> Result<()> {
        self.check_repo(repo)?;
        if let Some(engine) = run.db {
            self.choose_engine(engine)?;
        }
        crate::database::check_can_run(&self.databases, run.path)?;
        self.check_scale(run.scale)?;
        let selected = run.selection.to_run(self)?;
        self.check_tools(repo, &selected, run.path)
    }

    /// Checks, before anything starts, that every selected service that
    /// needs a package manager has one: its `package.json` files parse and
    /// the program (or corepack) is on `path`.
    fn check_tools(&self, repo: &Path, selected: &[String], path: &std::ffi::OsStr) -> Result<()> {
        for name in selected {
            if let Some(service) = self.services.get(name) {
                service_tools(service, repo, path)?;
            }
        }
        Ok(())
    }
}

fn install_step(
    detection: &Detection,
    pm: &Invocation,
    filter: Option<&str>,
    env: &Env,
) -> PrepareStep {
    PrepareStep {
        name: format!("{} install", pm.manager.name()),
        command: CommandSpec {
            program: pm.program_string(),
            args: pm.install_args(filter),
            cwd: detection.root.clone(),
            env: env.clone(),
        },
        when: PrepareWhen::Stale { target: detection.target(), sources: detection.inputs.clone() },
        heartbeat: INSTALL_HEARTBEAT,
    }
}

fn render_text(text: &str, values: &Values<'_>) -> Result<String> {
    template::render(text, values, false).map_err(|e| match e {
        Unresolved::Link { link, why } => Error::Link {
            name: link,
            message: format!("{why} (used in `{text}`)"),
            help: "the linked pod has what its profile declares once it has run: check the \
                   name against its profile (`omnidev profile show --repo CHECKOUT`)"
                .to_owned(),
        },
        e => Error::Render {
            message: match e {
                Unresolved::Port(name) => {
                    format!("no port `{name}` was allocated (used in `{text}`)")
                }
                Unresolved::Env(name) => format!("`{name}` is not set (used in `{text}`)"),
                Unresolved::Syntax(message) => format!("in `{text}`: {message}"),
                Unresolved::Python(reason) => format!("`{{python}}` (used in `{text}`): {reason}"),
                Unresolved::Db(part) => format!("no database part `{part}` (used in `{text}`)"),
                Unresolved::Link { .. } => unreachable!("a link's is its own error"),
            },
        },
    })
}

//! Containment: keeping every process a service starts where omnidev can
//! find it, so that stopping a service (or losing omnidev) leaves nothing
//! behind.
//!
//! # Mechanisms
//!
//! - **cgroup v2** ([`Mechanism::Cgroup`], Linux, when the unified
//!   hierarchy is mounted and omnidev's own cgroup is writable, as in a
//!   systemd user session or as root). At start the supervisor creates
//!   `omnidev-<pid>-<start time>-<n>` under its own cgroup, and one leaf per
//!   service (`<index>-<name>`). Each service process moves itself into its
//!   leaf before `exec`, so nothing it starts can leave: not a double fork,
//!   not `setsid`, not `setpgid`. A stop signals every process of the leaf,
//!   waits the grace period, writes `cgroup.kill`, and reports the service
//!   stopped once `cgroup.events` says `populated 0`; empty cgroups are
//!   removed. When omnidev dies, even by SIGKILL, the orphan guard writes
//!   the pod cgroup's `cgroup.kill`; when the guard dies with it, the next
//!   supervisor of the same `state.json` kills the recorded cgroups (each
//!   service's, and the prepare steps' beside it) before it starts
//!   anything. A process that moved itself into another cgroup (root may)
//!   is found by its exact [`SERVICE_ID_ENV`] among every process: by the
//!   shutdown's sweep, and by the next start after a SIGKILL. Kernels
//!   without `cgroup.kill` (before 5.14) use the fallback.
//! - **Process groups, sessions and a subreaper**
//!   ([`Mechanism::ProcessGroups`]: elsewhere, or when forced with
//!   `OMNIDEV_CONTAINMENT=process-groups`). Each service leads its own
//!   session and group; the supervisor is a child subreaper, so orphans of
//!   its services are re-parented to it instead of to init. A stop signals
//!   the service's session and group, its descendants by parent pid, and
//!   orphans adopted by the supervisor that carry the service's
//!   [`SERVICE_ID_ENV`]; the shutdown ends with a sweep of every adopted
//!   orphan of the pod. After a SIGKILL of omnidev the guard kills only the
//!   service process groups: processes that left the group (`setsid`,
//!   `setpgid`) run on until the next supervisor of the same `state.json`
//!   starts, which stops every process of the recorded sessions and every
//!   process carrying a recorded service id, also for a service recorded
//!   without a pid (killed while a prepare step ran) — a process that
//!   cleared its environment and left its session is out of reach.
//!
//! Prepare steps are contained like their service: the same service id,
//! and with cgroups a cgroup of their own beside the service's
//! (`<index>-<name>.prepare-<n>`), so killing a step never touches the
//! service and the recovery above finds both.
//!
//! On macOS there are no cgroups and no subreaper: orphans of services go
//! to launchd, so a live supervisor looks for processes carrying a
//! service id among every process (those of the user's own whose
//! environment it can read), where Linux looks only among the orphans it
//! adopted. Sessions, groups, parentage and start times come from
//! `sysctl(KERN_PROC)` and libproc ([`crate::platform`]), so the stop,
//! the sweep and the recovery of leftovers work as on Linux's fallback.

mod cgroup;
mod tree;

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::watch;

use crate::process;
use crate::spec::CommandSpec;
pub use crate::state::Mechanism;
use crate::state::{ProcessRecord, ServiceRecord, StateFile};
use crate::sync::Locked;

pub use tree::SERVICE_ID_ENV;

/// The environment variable that forces a mechanism: `process-groups`
/// (the fallback), or `auto` (cgroup v2 where possible; the default).
pub const CONTAINMENT_ENV: &str = "OMNIDEV_CONTAINMENT";

/// Which mechanism a supervisor may use.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum ContainmentChoice {
    /// cgroup v2 where the machine allows it (under omnidev's own cgroup),
    /// else the fallback.
    #[default]
    Auto,
    /// cgroup v2 under this directory of the cgroup2 hierarchy instead of
    /// omnidev's own cgroup (a delegated one, say), else the fallback.
    CgroupUnder(PathBuf),
    /// Process groups, sessions and a subreaper, even where cgroups work.
    ProcessGroups,
}

impl ContainmentChoice {
    /// The choice a value of [`CONTAINMENT_ENV`] names: empty or `auto` is
    /// [`ContainmentChoice::Auto`], `process-groups` the fallback, and
    /// `cgroup-under:DIR` [`ContainmentChoice::CgroupUnder`] (the variable
    /// unset is `Auto` too).
    ///
    /// ```
    /// use omnidev_core::ContainmentChoice;
    /// assert!(matches!(ContainmentChoice::parse("process-groups"), Ok(ContainmentChoice::ProcessGroups)));
    /// let refused = ContainmentChoice::parse("cgroups").unwrap_err();
    /// assert_eq!(refused.to_string(), "OMNIDEV_CONTAINMENT=cgroups names no mechanism");
    /// ```
    ///
    /// # Errors
    ///
    /// A value that names no mechanism, with the accepted ones.
    pub fn parse(value: &str) -> crate::Result<Self> {
        match value {
            "" | "auto" => Ok(Self::Auto),
            "process-groups" => Ok(Self::ProcessGroups),
            other => match other.strip_prefix("cgroup-under:") {
                Some(dir) if !dir.is_empty() => Ok(Self::CgroupUnder(PathBuf::from(dir))),
                _ => Err(crate::Error::Containment { value: other.to_owned() }),
            },
        }
    }

    /// The choice [`CONTAINMENT_ENV`] names in this process's environment
    /// ([`ContainmentChoice::parse`]; unset is `Auto`).
    ///
    /// # Errors
    ///
    /// A value that names no mechanism.
    pub fn from_env() -> crate::Result<Self> {
        std::env::var(CONTAINMENT_ENV).map_or(Ok(Self::Auto), |value| Self::parse(&value))
    }
}

/// How often a stop looks whether its processes are gone: first after
/// `first`, then after twice as long each time, up to `most`. Most
/// services end within milliseconds of their signal; a fixed 10 ms poll
/// made every restart wait about 10 ms for nothing.
#[derive(Debug, Clone, Copy)]
struct Poll {
    first: Duration,
    most: Duration,
}

impl Poll {
    /// The pause after `pause` (start with [`Poll::first`]).
    fn next(self, pause: Duration) -> Duration {
        (pause * 2).min(self.most)
    }
}

/// While a cgroup empties (reading one small file).
const CGROUP_POLL: Poll = Poll { first: Duration::from_millis(1), most: Duration::from_millis(10) };
/// While a process tree empties (a walk of `/proc`).
const TREE_POLL: Poll = Poll { first: Duration::from_millis(5), most: Duration::from_millis(40) };

/// One supervisor's containment: the mechanism and, with cgroups, the pod
/// cgroup and the service leaves.
#[derive(Debug)]
pub(crate) struct Containment {
    mechanism: Mechanism,
    /// The cgroup2 mount and the pod cgroup, with cgroups.
    cgroup: Option<(PathBuf, PathBuf)>,
    /// `<supervisor pid>.<start time>.<n>` (the n-th supervisor of the
    /// process), the prefix of every service id.
    id: String,
    /// Each service's name and leaf name (`<index>-<name>`), by slot; a
    /// service added to a running pod gets the next slot.
    slots: std::sync::Mutex<Vec<(String, String)>>,
    /// Set to skip what is left of every grace period.
    hurry: watch::Sender<bool>,
    /// Prepare steps spawned so far (names their cgroups: one per step, so
    /// killing a step never touches the next one).
    prepare_count: std::sync::atomic::AtomicU64,
    /// The controllers a service's cgroup has (the limits the kernel
    /// enforces on it), and the pod cgroup's own.
    controllers: (cgroup::Controllers, cgroup::Controllers),
}

/// What a stop acts on: one run of one service.
#[derive(Debug, Clone)]
pub(crate) struct Confined {
    leaf: Option<PathBuf>,
    identity: tree::GroupIdentity,
}

impl Containment {
    /// Sets up containment for services `names` of `supervisor`; the
    /// second value is a notice when cgroups were wanted but unavailable.
    pub(crate) fn new(
        choice: &ContainmentChoice,
        names: &[String],
        supervisor: ProcessRecord,
    ) -> (Self, Option<String>) {
        // Several supervisors may run in one process (tests do).
        static SUPERVISORS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = SUPERVISORS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = format!("{}.{}.{n}", supervisor.pid, supervisor.start_time.unwrap_or(0));
        let slots = names
            .iter()
            .enumerate()
            .map(|(i, name)| (name.clone(), format!("{i}-{}", leaf_name(name))))
            .collect();
        let (mechanism, cgroup, notice) = match choice {
            ContainmentChoice::ProcessGroups => (
                Mechanism::ProcessGroups { reason: format!("{CONTAINMENT_ENV}=process-groups") },
                None,
                None,
            ),
            ContainmentChoice::Auto | ContainmentChoice::CgroupUnder(_) => match pod_cgroup(
                &id,
                match choice {
                    ContainmentChoice::CgroupUnder(dir) => Some(dir.as_path()),
                    _ => None,
                },
            ) {
                Ok((mount, pod)) => {
                    (Mechanism::Cgroup { path: pod.clone() }, Some((mount, pod)), None)
                }
                Err(reason) => {
                    let notice = format!(
                        "services are contained by process groups{}, not a cgroup: {reason}",
                        if crate::platform::HAS_SUBREAPER {
                            " and a subreaper"
                        } else {
                            " and sessions (no subreaper here)"
                        }
                    );
                    (Mechanism::ProcessGroups { reason }, None, Some(notice))
                }
            },
        };
        let controllers = match &cgroup {
            Some((_, pod)) => (
                cgroup::enable_controllers(pod),
                cgroup::Controllers {
                    memory: pod.join("memory.max").exists(),
                    cpu: pod.join("cpu.max").exists(),
                },
            ),
            None => Default::default(),
        };
        let (hurry, _) = watch::channel(false);
        let containment = Self {
            controllers,
            mechanism,
            cgroup,
            id,
            slots: std::sync::Mutex::new(slots),
            hurry,
            prepare_count: std::sync::atomic::AtomicU64::new(0),
        };
        (containment, notice)
    }

    /// The mechanism in force.
    pub(crate) fn mechanism(&self) -> &Mechanism {
        &self.mechanism
    }

    /// The pod cgroup, with cgroups.
    pub(crate) fn pod_cgroup(&self) -> Option<&Path> {
        self.cgroup.as_ref().map(|(_, pod)| pod.as_path())
    }

    /// The cgroup of service `slot`, with cgroups.
    pub(crate) fn leaf(&self, slot: usize) -> Option<PathBuf> {
        let pod = self.pod_cgroup()?;
        Some(pod.join(&self.slots().get(slot)?.1))
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, Vec<(String, String)>> {
        self.slots.locked()
    }

    /// Gives service `name`, added to the running pod, the next slot (its
    /// leaf is made at its first start); a known name keeps its own.
    pub(crate) fn add(&self, name: &str) -> usize {
        let mut slots = self.slots();
        if let Some(slot) = slots.iter().position(|(n, _)| n == name) {
            return slot;
        }
        let slot = slots.len();
        slots.push((name.to_owned(), format!("{slot}-{}", leaf_name(name))));
        slot
    }

    /// Whether the kernel enforces a memory limit and a CPU limit on a
    /// service here, and on the pod ([`crate::spec::Limits`]).
    pub(crate) fn enforced(&self) -> (cgroup::Controllers, cgroup::Controllers) {
        self.controllers
    }

    /// Writes the limits of service `slot` into its cgroup (made now if
    /// new), for the kernel to enforce; nothing without cgroups.
    pub(crate) fn set_limits(&self, slot: usize, limits: crate::spec::Limits) {
        if let Some(leaf) = self.leaf(slot)
            && cgroup::create_leaf(&leaf).is_ok()
        {
            cgroup::set_limits(&leaf, limits, self.controllers.0);
        }
    }

    /// Writes the pod's limits into its cgroup.
    pub(crate) fn set_pod_limits(&self, limits: crate::spec::Limits) {
        if let Some(pod) = self.pod_cgroup() {
            cgroup::set_limits(pod, limits, self.controllers.1);
        }
    }

    /// What the processes of service `slot` hold now, `pid` its leader:
    /// with cgroups every process of its cgroup (and the kernel's count of
    /// its memory, where the memory controller is on), else `pid` and the
    /// processes below it.
    pub(crate) fn usage(&self, slot: usize, pid: u32) -> crate::platform::Usage {
        let Some(leaf) = self.leaf(slot) else {
            return crate::platform::tree_usage(pid);
        };
        let mut usage = crate::platform::usage_of(&cgroup::members(&leaf));
        if let Some(charged) = cgroup::memory_current(&leaf) {
            usage.rss_bytes = charged;
        }
        usage
    }

    /// How often the kernel has killed a process of service `slot` for
    /// its memory limit, all its runs together.
    pub(crate) fn oom_kills(&self, slot: usize) -> u64 {
        self.leaf(slot).map_or(0, |leaf| cgroup::oom_kills(&leaf))
    }

    /// The value of [`SERVICE_ID_ENV`] for service `slot`.
    pub(crate) fn service_id(&self, slot: usize) -> String {
        format!("{}.{slot}", self.id)
    }

    /// The slot of service `name`.
    pub(crate) fn slot(&self, name: &str) -> Option<usize> {
        self.slots().iter().position(|(n, _)| n == name)
    }

    /// Spawns a process of service `slot` (its command, or with `step` a
    /// prepare step): in its own session and group, carrying its service
    /// id, and with cgroups inside a cgroup from before `exec`, the
    /// service's own or, for a step, one of its own beside it. Returns the
    /// child and what stops it.
    pub(crate) fn spawn(
        &self,
        slot: usize,
        command: &CommandSpec,
        step: bool,
    ) -> io::Result<(process::GroupChild, Confined)> {
        let leaf = self.leaf(slot).map(|leaf| {
            if !step {
                return leaf;
            }
            let n = self.prepare_count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let mut name = leaf.file_name().unwrap_or_default().to_os_string();
            name.push(format!(".prepare-{n}"));
            leaf.with_file_name(name)
        });
        let child = self.spawn_in(slot, command, leaf.as_deref())?;
        let leader = ProcessRecord::of(child.id());
        let mut target = self.target(slot, leader);
        target.leaf = leaf;
        Ok((child, target))
    }

    fn spawn_in(
        &self,
        slot: usize,
        command: &CommandSpec,
        leaf: Option<&Path>,
    ) -> io::Result<process::GroupChild> {
        let mut command = command.clone();
        command.env.insert(SERVICE_ID_ENV.to_owned(), self.service_id(slot));
        let placement = match leaf {
            Some(leaf) => {
                cgroup::create_leaf(leaf).map_err(|e| {
                    io::Error::new(e.kind(), format!("cgroup {}: {e}", leaf.display()))
                })?;
                process::Placement::Cgroup(leaf)
            }
            None => process::Placement::Here,
        };
        process::spawn_group_in(&command, placement)
    }

    /// The processes of service `slot` whose leader is `leader`.
    fn target(&self, slot: usize, leader: ProcessRecord) -> Confined {
        Confined {
            leaf: self.leaf(slot),
            identity: tree::GroupIdentity {
                leader: Some(leader.pid),
                since: leader.start_time,
                service_id: self.service_id(slot),
            },
        }
    }

    /// From now on every stop skips what is left of its grace period and
    /// kills at once.
    pub(crate) fn hurry(&self) {
        self.hurry.send_replace(true);
    }

    /// Sends `signal` to every process of `target`, waits up to `grace` for
    /// them to end (less after [`Containment::hurry`]), then SIGKILLs what
    /// is left until nothing is. The caller reaps the leader.
    /// True when the grace ran out (or a shutdown hurried it) and what was
    /// left was killed with SIGKILL.
    pub(crate) async fn stop(&self, target: &Confined, signal: i32, grace: Duration) -> bool {
        let hurry = self.hurry.subscribe();
        stop_target(target, signal, grace, LIVE_SEARCH, &hurry).await
    }

    /// At the end of a shutdown: stops every process that carries one of
    /// the service ids this supervisor gave (exactly, never a value that
    /// merely begins the same way) and was not stopped with its service: without
    /// cgroups an orphan adopted by this process (any process, without a
    /// subreaper), a daemon whose service was stopped before it could be
    /// told apart; with cgroups any process of the user's, one that moved
    /// itself out of the pod's cgroup. SIGTERM, `grace`, then SIGKILL.
    pub(crate) async fn sweep(&self, grace: Duration) {
        let everywhere = self.cgroup.is_some() || LIVE_SEARCH == Search::Everywhere;
        let ids: BTreeSet<String> =
            (0..self.slots().len()).map(|slot| self.service_id(slot)).collect();
        let orphans = || {
            let me = std::process::id();
            let table = crate::platform::table();
            let roots: BTreeSet<u32> = table
                .iter()
                .filter(|p| (everywhere || p.ppid == me) && !p.is_zombie() && p.pid != me)
                .filter(|p| tree::service_id_of(p.pid).is_some_and(|id| ids.contains(&id)))
                .map(|p| p.pid)
                .collect();
            tree::with_descendants(&table, roots, me)
        };
        let hurry = self.hurry.subscribe();
        let _killed = kill_until_empty(orphans, libc::SIGTERM, grace, TREE_POLL, &hurry).await;
    }

    /// Removes the pod cgroup (once every service has stopped).
    pub(crate) fn close(&self) {
        if let Some(pod) = self.pod_cgroup() {
            cgroup::remove(pod);
        }
    }
}

use tree::Search;

/// Where a live supervisor looks for a service's orphans that left its
/// session: among those adopted by it, as a subreaper; without one
/// (macOS), orphans go to launchd and every process is searched for the
/// service id.
const LIVE_SEARCH: Search =
    if crate::platform::HAS_SUBREAPER { Search::Adopted } else { Search::Everywhere };

/// The live processes of `target` now: its cgroup's members, or (without
/// cgroups) its session, group, descendants and orphans carrying its
/// service id ([`LIVE_SEARCH`]). Used to tell whether a listener is the
/// service's.
pub(crate) fn members(target: &Confined) -> Vec<u32> {
    if let Some(leaf) = &target.leaf {
        return cgroup::members(leaf);
    }
    tree::members(
        &crate::platform::table(),
        &target.identity,
        std::process::id(),
        LIVE_SEARCH,
        tree::service_id_of,
    )
}

/// The pod cgroup for supervisor `id` under `parent` (default: this
/// process's own cgroup), or why there is none.
fn pod_cgroup(id: &str, parent: Option<&Path>) -> Result<(PathBuf, PathBuf), String> {
    if !cfg!(target_os = "linux") {
        return Err("cgroups are Linux-only".to_owned());
    }
    let (mount, own) = cgroup::own_dir()?;
    let own = match parent {
        Some(dir) if dir.starts_with(&mount) => dir.to_path_buf(),
        Some(dir) => {
            return Err(format!(
                "{} is not in the cgroup2 hierarchy at {}",
                dir.display(),
                mount.display()
            ));
        }
        None => own,
    };
    let name = format!("{}{}", cgroup::POD_PREFIX, id.replace('.', "-"));
    let pod = cgroup::create_pod(&own, &name)?;
    Ok((mount, pod))
}

/// A service name as a cgroup directory name: letters, digits, `-`, `_`
/// and `.` kept, anything else `_`, at most 64 bytes.
fn leaf_name(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '_' })
        .take(64)
        .collect()
}

async fn stop_target(
    target: &Confined,
    signal: i32,
    grace: Duration,
    search: Search,
    hurry: &watch::Receiver<bool>,
) -> bool {
    if let Some(leaf) = &target.leaf {
        let leaf = leaf.clone();
        let members = || {
            if cgroup::populated(&leaf) { cgroup::members(&leaf) } else { Vec::new() }
        };
        let ended = kill_until_empty_first(members, signal, grace, CGROUP_POLL, hurry).await;
        if !ended {
            loop {
                if cgroup::kill(&leaf).is_err() {
                    // Without cgroup.kill (it was checked at start, but the
                    // leaf may have been removed from outside): one by one.
                    for pid in cgroup::members(&leaf) {
                        process::signal_pid(pid, libc::SIGKILL);
                    }
                }
                if wait_empty(
                    || !cgroup::populated(&leaf),
                    Duration::from_secs(1),
                    CGROUP_POLL,
                    None,
                )
                .await
                {
                    break;
                }
            }
        }
        cgroup::remove(&leaf);
        return !ended && signal != libc::SIGKILL;
    }
    let identity = target.identity.clone();
    let members = move || {
        let table = crate::platform::table();
        let mut pids =
            tree::members(&table, &identity, std::process::id(), search, tree::service_id_of);
        // Where /proc cannot be read, the group is all there is to see.
        if let Some(leader) = identity.leader
            && process::group_alive(leader as i32)
            && table.is_empty()
        {
            pids.push(leader);
        }
        pids
    };
    if let Some(leader) = target.identity.leader {
        process::signal_group(leader as i32, signal);
    }
    kill_until_empty(members, signal, grace, TREE_POLL, hurry).await
}

/// Signals `members()` with `signal`, waits up to `grace` for them to be
/// gone, then SIGKILLs them until there are none. True when some were
/// left after the grace and `signal` was not SIGKILL already.
async fn kill_until_empty(
    members: impl Fn() -> Vec<u32>,
    signal: i32,
    grace: Duration,
    poll: Poll,
    hurry: &watch::Receiver<bool>,
) -> bool {
    if kill_until_empty_first(&members, signal, grace, poll, hurry).await {
        return false;
    }
    let mut pause = poll.first;
    let mut killed = false;
    loop {
        let pids = members();
        if pids.is_empty() {
            return killed && signal != libc::SIGKILL;
        }
        killed = true;
        for pid in pids {
            process::signal_pid(pid, libc::SIGKILL);
        }
        tokio::time::sleep(pause).await;
        pause = poll.next(pause);
    }
}

/// The first phase of a stop: `signal` to every member, then up to `grace`
/// for them to end. True if they did.
async fn kill_until_empty_first(
    members: impl Fn() -> Vec<u32>,
    signal: i32,
    grace: Duration,
    poll: Poll,
    hurry: &watch::Receiver<bool>,
) -> bool {
    let pids = members();
    if pids.is_empty() {
        return true;
    }
    for pid in pids {
        process::signal_pid(pid, signal);
    }
    let grace = if signal == libc::SIGKILL { Duration::ZERO } else { grace };
    wait_empty(|| members().is_empty(), grace, poll, Some(hurry)).await
}

/// Polls `empty` as `poll` says until it holds (true) or `limit` has
/// passed or `hurry` is set (false).
async fn wait_empty(
    empty: impl Fn() -> bool,
    limit: Duration,
    poll: Poll,
    hurry: Option<&watch::Receiver<bool>>,
) -> bool {
    let start = tokio::time::Instant::now();
    let mut pause = poll.first;
    loop {
        if empty() {
            return true;
        }
        if start.elapsed() >= limit || hurry.is_some_and(|h| *h.borrow()) {
            return false;
        }
        tokio::time::sleep(pause).await;
        pause = poll.next(pause);
    }
}

/// Stops what a previous supervisor left of one service, recorded in
/// `state.json` as `record`: its cgroup when one is recorded (and is one
/// omnidev made), then every process of its session and group not older
/// than its leader and every process carrying its service id (with
/// cgroups, those that left the cgroup: a helper that wrote itself into
/// another one). A leader pid that now belongs to another process is left
/// alone. Returns the notice to show, if anything was found.
pub(crate) async fn stop_leftover(
    name: &str,
    record: &ServiceRecord,
    grace: Duration,
) -> Option<String> {
    let (_never, hurry) = watch::channel(false);
    let cgroup = match &record.cgroup {
        Some(path) => stop_leftover_cgroup(name, path, grace, &hurry).await,
        None => None,
    };
    let processes = stop_leftover_processes(name, record, grace, &hurry).await;
    match (cgroup, processes) {
        (Some(cgroup), Some(processes)) => Some(format!("{cgroup}; {processes}")),
        (cgroup, processes) => cgroup.or(processes),
    }
}

/// The processes part of [`stop_leftover`]: by session and service id.
async fn stop_leftover_processes(
    name: &str,
    record: &ServiceRecord,
    grace: Duration,
    hurry: &watch::Receiver<bool>,
) -> Option<String> {
    // A service recorded stopped (a stop returns once its processes are
    // gone; after a clean shutdown every service is) has nothing left,
    // which spares each start a search of every process's environment.
    let stopped = record.pid.is_none() && record.state == crate::event::ServiceState::Stopped;
    // Without a pid (the service was preparing, or between runs) its
    // processes, a prepare step's included, are those carrying its id.
    let recycled = record.pid.is_some_and(|pid| {
        let leader = ProcessRecord { pid, start_time: record.start_time };
        process::pid_alive(pid) && !leader.is_alive()
    });
    let identity = tree::GroupIdentity {
        // The session is only trusted when the leader's start time is known
        // and the pid does not now belong to another process.
        leader: record.pid.filter(|_| !recycled && record.start_time.is_some()),
        since: record.start_time,
        service_id: record.service_id.clone().unwrap_or_default(),
    };
    // Nothing to look for: no pid and no id, or a service recorded
    // stopped.
    if stopped || (identity.leader.is_none() && identity.service_id.is_empty() && !recycled) {
        return None;
    }
    let target = Confined { leaf: None, identity: identity.clone() };
    let found = !tree::members(
        &crate::platform::table(),
        &identity,
        std::process::id(),
        Search::Everywhere,
        tree::service_id_of,
    )
    .is_empty();
    if found {
        stop_target(&target, libc::SIGTERM, grace, Search::Everywhere, hurry).await;
    }
    match (found, record.pid) {
        (true, Some(pid)) => Some(format!(
            "stopping leftover `{name}` from a previous run (pid {pid}, session {pid})"
        )),
        (true, None) => Some(format!(
            "stopping leftover `{name}` from a previous run (the processes carrying service id \
             {})",
            identity.service_id
        )),
        (false, Some(pid)) if recycled => Some(format!(
            "recorded pid {pid} of `{name}` now belongs to another process; left alone"
        )),
        (false, _) => None,
    }
}

/// [`stop_leftover`] of a service recorded with its cgroup `path`: that
/// cgroup, its prepare steps' beside it, then the emptied pod cgroup.
async fn stop_leftover_cgroup(
    name: &str,
    path: &Path,
    grace: Duration,
    hurry: &watch::Receiver<bool>,
) -> Option<String> {
    let mount = cgroup::own_dir().ok().map(|(mount, _)| mount)?;
    if !cgroup::is_pod_cgroup(&mount, path) {
        return Some(format!(
            "recorded cgroup {} of `{name}` is not one omnidev makes; left alone",
            path.display()
        ));
    }
    let notice = cgroup::populated(path).then(|| {
        format!("stopping leftover `{name}` from a previous run (cgroup {})", path.display())
    });
    let cgroup_target = |leaf: PathBuf| Confined {
        leaf: Some(leaf),
        identity: tree::GroupIdentity { leader: None, since: None, service_id: String::new() },
    };
    stop_target(
        &cgroup_target(path.to_path_buf()),
        libc::SIGTERM,
        grace,
        Search::Everywhere,
        hurry,
    )
    .await;
    // A prepare step runs in a cgroup of its own beside the service's
    // (`<leaf>.prepare-<n>`), killed outright as a running step is.
    let mut notice = notice;
    for step in prepare_cgroups(path) {
        if cgroup::populated(&step) {
            notice.get_or_insert_with(|| {
                format!(
                    "stopping leftover prepare step of `{name}` from a previous run (cgroup {})",
                    step.display()
                )
            });
        }
        stop_target(&cgroup_target(step), libc::SIGKILL, Duration::ZERO, Search::Everywhere, hurry)
            .await;
    }
    if let Some(pod) = path.parent()
        && cgroup::is_pod_cgroup(&mount, pod)
    {
        cgroup::remove(pod);
    }
    notice
}

/// The prepare steps' cgroups beside service cgroup `leaf`
/// (`<leaf>.prepare-<n>`; see [`Containment::spawn`]).
fn prepare_cgroups(leaf: &Path) -> Vec<PathBuf> {
    let (Some(pod), Some(name)) = (leaf.parent(), leaf.file_name()) else {
        return Vec::new();
    };
    let mut prefix = name.to_os_string();
    prefix.push(".prepare-");
    let prefix = prefix.as_encoded_bytes().to_vec();
    std::fs::read_dir(pod)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .filter(|e| e.file_name().as_encoded_bytes().starts_with(&prefix))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// Stops what a previous run left behind: each recorded service's cgroup, or its session,
/// group and tagged processes, with SIGTERM, then SIGKILL after `grace`;
/// the leader need not be alive. Returns one message per service acted on
/// (stopped, or left alone because the pid now belongs to another process).
pub(crate) async fn stop_leftovers(state: &StateFile, grace: Duration) -> Vec<String> {
    let stops = state.services.iter().map(|(name, record)| stop_leftover(name, record, grace));
    let mut notices = Vec::new();
    for stop in stops {
        notices.extend(stop.await);
    }
    notices
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaf_names_are_plain_directory_names() {
        assert_eq!(leaf_name("web"), "web");
        assert_eq!(leaf_name("../etc"), ".._etc");
        assert_eq!(leaf_name("a b/c"), "a_b_c");
        assert_eq!(leaf_name(&"x".repeat(100)).len(), 64);
    }

    #[test]
    fn a_stop_looks_soon_then_less_often() {
        let mut pauses = vec![CGROUP_POLL.first];
        while pauses.len() < 7 {
            let last = pauses[pauses.len() - 1];
            pauses.push(CGROUP_POLL.next(last));
        }
        let ms: Vec<u128> = pauses.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [1, 2, 4, 8, 10, 10, 10]);
        assert_eq!(TREE_POLL.next(TREE_POLL.first), Duration::from_millis(10));
        assert_eq!(TREE_POLL.next(TREE_POLL.most), TREE_POLL.most);
    }

    #[test]
    fn the_fallback_names_what_this_os_has() {
        let shown =
            Mechanism::ProcessGroups { reason: "cgroups are Linux-only".into() }.to_string();
        if cfg!(target_os = "linux") {
            assert_eq!(shown, "process groups and a subreaper (cgroups are Linux-only)");
        } else {
            assert_eq!(
                shown,
                "process groups and sessions, no subreaper: orphans are found by their \
                 service id among every process (cgroups are Linux-only)"
            );
        }
        assert_eq!(LIVE_SEARCH == Search::Adopted, crate::platform::HAS_SUBREAPER);
    }

    /// A pod cgroup of this process's own, removed when dropped. These
    /// tests need a writable cgroup v2 hierarchy, as the containment tests
    /// of `tests/processes.rs` do.
    struct TestPod(PathBuf);

    impl TestPod {
        fn new(name: &str) -> Self {
            let (_, own) = cgroup::own_dir().expect("a cgroup v2 hierarchy");
            let name = format!("{}test-{}-{name}", cgroup::POD_PREFIX, std::process::id());
            let pod = cgroup::create_pod(&own, &name).unwrap_or_else(|e| {
                panic!(
                    "these tests need a writable cgroup v2 hierarchy (as root, or in a \
                     systemd user session): {e}"
                )
            });
            Self(pod)
        }
    }

    impl Drop for TestPod {
        fn drop(&mut self) {
            let _ = cgroup::kill(&self.0);
            for _ in 0..200 {
                if !cgroup::populated(&self.0) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            cgroup::remove(&self.0);
        }
    }

    /// The kernel's release as (major, minor).
    fn kernel() -> (u32, u32) {
        let release = nix::sys::utsname::uname().expect("uname");
        let release = release.release().to_string_lossy().into_owned();
        let mut parts = release.split(|c: char| !c.is_ascii_digit());
        let mut next = || parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        (next(), next())
    }

    /// A script that prints its cgroup (its first act), its session and
    /// nice value, working directory and `$PROBE`, then exits 3.
    fn reporting_command(dir: &Path) -> CommandSpec {
        let mut env = crate::Env::default();
        env.insert("PROBE".to_owned(), "from the spec".to_owned());
        CommandSpec {
            program: "sh".into(),
            args: vec![
                "-c".into(),
                "cat /proc/self/cgroup; cut -d' ' -f1,6,19 /proc/$$/stat; pwd; echo \"$PROBE\"; \
                 exit 3"
                    .into(),
            ],
            cwd: dir.to_path_buf(),
            env,
        }
    }

    /// The reporting command started in a leaf of a test pod (with `clone3`
    /// or the fallback), its output, and the leaf's name as the child sees
    /// it (`<pod>/0-svc`) and its working directory.
    async fn run_reporting(clone3: bool) -> (process::GroupChild, String, String, PathBuf) {
        let pod = TestPod::new(if clone3 { "clone3" } else { "moved" });
        let leaf = pod.0.join("0-svc");
        cgroup::create_leaf(&leaf).expect("leaf");
        let cwd = tempfile::tempdir().expect("tempdir");
        let mut child = process::spawn_placed(
            &reporting_command(cwd.path()),
            process::Placement::Cgroup(&leaf),
            clone3,
        )
        .expect("spawn");
        let mut out = std::fs::File::from(child.stdout.take().expect("stdout"));
        let text = tokio::task::spawn_blocking(move || {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut out, &mut text).map(|_| text)
        })
        .await
        .expect("join")
        .expect("read stdout");
        let name = format!("/{}/0-svc", pod.0.file_name().expect("name").to_string_lossy());
        let cwd = std::fs::canonicalize(cwd.path()).expect("cwd");
        drop(pod);
        (child, text, name, cwd)
    }

    async fn assert_started_inside(clone3: bool) -> bool {
        let (child, text, leaf, cwd) = run_reporting(clone3).await;
        let pid = child.id().to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines.iter().any(|l| l.starts_with("0::/") && l.ends_with(&leaf)),
            "in {leaf} from its first command: {text}"
        );
        // SAFETY: getpriority only reads this process's nice value.
        let own = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
        let expected = format!("{pid} {pid} {own}");
        assert!(
            lines.contains(&expected.as_str()),
            "leads its session, as nice as we are ({expected}): {text}"
        );
        assert!(
            lines.contains(&cwd.to_string_lossy().as_ref()),
            "runs in {}: {text}",
            cwd.display()
        );
        assert!(lines.contains(&"from the spec"), "the spec's variable: {text}");
        let cloned = child.cloned_into_cgroup();
        let status = child.wait().await.expect("wait");
        assert_eq!(status.code(), Some(3), "its exit code is reported");
        cloned
    }

    #[tokio::test]
    async fn a_process_is_cloned_into_its_cgroup_where_the_kernel_can() {
        let cloned = assert_started_inside(true).await;
        if kernel() >= (5, 7) {
            assert!(
                cloned,
                "Linux {:?} has clone3(CLONE_INTO_CGROUP); was it refused (a seccomp filter)?",
                kernel()
            );
        }
    }

    #[tokio::test]
    async fn the_fallback_moves_the_child_in_before_exec() {
        assert!(!assert_started_inside(false).await);
    }

    #[tokio::test]
    async fn a_program_that_cannot_start_is_an_error_and_leaves_no_child() {
        let pod = TestPod::new("missing");
        let leaf = pod.0.join("0-svc");
        cgroup::create_leaf(&leaf).expect("leaf");
        for clone3 in [true, false] {
            let missing =
                CommandSpec { program: "omnidev-no-such-program".into(), ..CommandSpec::default() };
            let error = process::spawn_placed(&missing, process::Placement::Cgroup(&leaf), clone3)
                .expect_err("no such program");
            assert_eq!(error.kind(), io::ErrorKind::NotFound, "{error}");
            let nul = CommandSpec {
                program: "sh".into(),
                args: vec!["a\0b".into()],
                ..CommandSpec::default()
            };
            assert!(
                process::spawn_placed(&nul, process::Placement::Cgroup(&leaf), clone3).is_err()
            );
        }
        assert!(!cgroup::populated(&leaf), "nothing left in the leaf");
        let zombies: Vec<u32> = crate::platform::children(std::process::id())
            .into_iter()
            .filter(|&p| crate::platform::stat(p).is_some_and(|s| s.is_zombie()))
            .filter(|&p| {
                crate::platform::cmdline(p).contains("omnidev-no-such")
                    || crate::platform::name(p).is_some_and(|n| n.contains("omnidev-no-such"))
            })
            .collect();
        assert!(zombies.is_empty(), "reaped: {zombies:?}");
    }

    /// `sleep 300` started in `leaf`, with `clone3` or the fallback.
    fn spawn_sleep(leaf: &Path, clone3: bool) -> process::GroupChild {
        let sleeper = CommandSpec {
            program: "sleep".into(),
            args: vec!["300".into()],
            ..CommandSpec::default()
        };
        process::spawn_placed(&sleeper, process::Placement::Cgroup(leaf), clone3).expect("spawn")
    }

    /// Both ways of starting a process hand it its three standard streams
    /// and no other descriptor (neither omnidev's own, such as the cgroup's,
    /// the far ends of its pipes, the report pipe and the runtime's, nor one
    /// omnidev inherited without close-on-exec), no blocked signal, and
    /// SIGPIPE at its default although omnidev ignores it.
    #[tokio::test]
    async fn a_process_gets_only_its_standard_streams_and_default_signals() {
        let status_field = |pid: &str, name: &str| -> u64 {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
            let hex = status
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .expect("field");
            u64::from_str_radix(hex.trim(), 16).expect("hex")
        };
        let sigpipe = 1u64 << (libc::SIGPIPE - 1);
        assert_ne!(status_field("self", "SigIgn") & sigpipe, 0, "we ignore it");
        // One omnidev holds without close-on-exec, as one it inherited.
        let null = std::fs::File::open("/dev/null").expect("/dev/null");
        let inherited = nix::unistd::dup(&null).expect("dup");
        let pod = TestPod::new("hygiene");
        let leaf = pod.0.join("0-svc");
        cgroup::create_leaf(&leaf).expect("leaf");
        for clone3 in [true, false] {
            let child = spawn_sleep(&leaf, clone3);
            let pid = child.id();
            omnidev_test_support::poll_until_async(
                &format!("pid {pid} runs sleep"),
                Duration::from_secs(20),
                || crate::platform::name(pid).as_deref() == Some("sleep"),
            )
            .await;
            // `inherited` is among those that must not reach it. `sleep`
            // opens files of its own while it starts (the locale, under
            // load seen as a fourth descriptor), and closes them: what it
            // was given stays for good, so the set must settle on the
            // standard streams.
            let fds = || -> BTreeSet<String> {
                std::fs::read_dir(format!("/proc/{pid}/fd"))
                    .expect("its descriptors")
                    .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                    .collect()
            };
            let standard = BTreeSet::from(["0", "1", "2"].map(String::from));
            omnidev_test_support::poll_until_async(
                &format!("pid {pid} holds only its standard streams (clone3: {clone3})"),
                Duration::from_secs(20),
                || fds() == standard,
            )
            .await;
            let pid_text = pid.to_string();
            assert_eq!(status_field(&pid_text, "SigBlk"), 0, "clone3: {clone3}");
            assert_eq!(status_field(&pid_text, "SigIgn") & sigpipe, 0, "clone3: {clone3}");
            process::signal_pid(pid, libc::SIGKILL);
            child.wait().await.expect("wait");
        }
        drop(inherited);
    }

    /// A wait given up while under way (the task holding it aborted, as a
    /// cancelled prepare step's is) leaves the child to the reaper of
    /// adopted processes: once it exits it is reaped, never left a zombie
    /// recorded as ours.
    #[tokio::test]
    async fn a_child_whose_wait_was_given_up_is_reaped_once_it_exits() {
        let pod = TestPod::new("given-up");
        let leaf = pod.0.join("0-svc");
        cgroup::create_leaf(&leaf).expect("leaf");
        for clone3 in [true, false] {
            let child = spawn_sleep(&leaf, clone3);
            let pid = child.id();
            let mut wait = Box::pin(child.wait());
            // Polled once, so the wait is under way, then dropped.
            tokio::select! {
                biased;
                _ = &mut wait => panic!("sleep 300 ended"),
                () = std::future::ready(()) => {}
            }
            drop(wait);
            process::signal_pid(pid, libc::SIGKILL);
            omnidev_test_support::poll_until_async(
                &format!("pid {pid} reaped (clone3: {clone3})"),
                Duration::from_secs(20),
                || {
                    process::reap_adopted();
                    crate::platform::stat(pid).is_none()
                },
            )
            .await;
        }
    }

    #[test]
    fn forced_fallback_names_the_switch() {
        let (containment, notice) = Containment::new(
            &ContainmentChoice::ProcessGroups,
            &["web".to_owned()],
            ProcessRecord::of(std::process::id()),
        );
        assert!(notice.is_none());
        assert!(containment.pod_cgroup().is_none());
        assert!(containment.mechanism().to_string().contains(CONTAINMENT_ENV));
    }
}

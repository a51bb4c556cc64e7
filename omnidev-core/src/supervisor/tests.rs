//! The engine's decisions (reloads, backoff, dependency order) driven with
//! fake children on a paused clock: no processes, no sleeps, the same
//! interleaving every run. The real-process behaviour is tested in
//! `tests/supervision.rs`.

mod background;
mod readiness;

use std::collections::HashSet;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{oneshot, watch};

use super::spawn::{ProcessGroup, Spawned, Spawner};
use super::{Supervisor, SupervisorConfig, Waited};
use crate::event::{ExitStatus, ServiceState};
use crate::spec::{
    CommandSpec, Condition, Dependency, PrepareStep, PrepareWhen, RestartPolicy, ServiceSpec,
};

/// Fake pids start here, far above what a real kernel hands out by default,
/// and never reach the OS: the fake group signals nothing.
const FIRST_PID: u32 = 4_000_000;

/// One fake child: which service and program it was started for, and the
/// switch that makes its leader exit.
#[derive(Debug)]
struct FakeChild {
    service: String,
    program: String,
    exit: Arc<Mutex<Option<oneshot::Sender<ExitStatus>>>>,
    /// Whether the engine has put it in the background.
    background: Arc<AtomicBool>,
}

/// A spawner whose children exit when the test says so (or when the engine
/// stops them), like watchexec's `TestChild`.
#[derive(Debug)]
struct FakeSpawner {
    next_pid: AtomicU32,
    children: Mutex<Vec<FakeChild>>,
    /// Services whose stops wait until `gate` opens.
    gated: Mutex<HashSet<String>>,
    gate: watch::Sender<bool>,
    /// Signals sent through stops, per service.
    signals: Mutex<Vec<(String, i32)>>,
}

impl FakeSpawner {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            next_pid: AtomicU32::new(FIRST_PID),
            children: Mutex::new(Vec::new()),
            gated: Mutex::new(HashSet::new()),
            gate: watch::channel(true).0,
            signals: Mutex::new(Vec::new()),
        })
    }

    /// How many times `program` was started for `service`.
    fn spawns(&self, service: &str, program: &str) -> usize {
        let children = self.children.lock().expect("children");
        children.iter().filter(|c| c.service == service && c.program == program).count()
    }

    /// Makes the newest child of `service` running `program` exit.
    fn exit(&self, service: &str, program: &str, status: ExitStatus) {
        let children = self.children.lock().expect("children");
        let child = children
            .iter()
            .rev()
            .find(|c| c.service == service && c.program == program)
            .expect("a child of that service");
        let sender = child.exit.lock().expect("exit").take();
        sender.expect("still running").send(status).expect("engine waits");
    }

    /// From now on, stops of `service` hang until [`FakeSpawner::open`].
    fn hold_stops(&self, service: &str) {
        self.gated.lock().expect("gated").insert(service.to_owned());
        self.gate.send_replace(false);
    }

    fn open(&self) {
        self.gated.lock().expect("gated").clear();
        self.gate.send_replace(true);
    }

    /// Whether the newest child of `service` running `program` is in the
    /// background.
    fn background(&self, service: &str, program: &str) -> bool {
        let children = self.children.lock().expect("children");
        children
            .iter()
            .rev()
            .find(|c| c.service == service && c.program == program)
            .expect("a child of that service")
            .background
            .load(Ordering::SeqCst)
    }

    fn signals(&self, service: &str) -> Vec<i32> {
        let signals = self.signals.lock().expect("signals");
        signals.iter().filter(|(s, _)| s == service).map(|&(_, signal)| signal).collect()
    }
}

impl Spawner for Arc<FakeSpawner> {
    fn spawn(&self, command: &CommandSpec, service: &str) -> io::Result<Spawned> {
        let pid = self.next_pid.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = oneshot::channel();
        let exit = Arc::new(Mutex::new(Some(tx)));
        let background = Arc::new(AtomicBool::new(false));
        self.children.lock().expect("children").push(FakeChild {
            service: service.to_owned(),
            program: command.program.clone(),
            exit: exit.clone(),
            background: background.clone(),
        });
        Ok(Spawned {
            pid,
            start_time: Some(u64::from(pid)),
            exit: Box::pin(async move { rx.await.unwrap_or(ExitStatus::Signal(libc::SIGKILL)) }),
            group: Arc::new(FakeGroup {
                service: service.to_owned(),
                exit,
                spawner: Arc::downgrade(self),
                background,
            }),
        })
    }
}

#[derive(Debug)]
struct FakeGroup {
    service: String,
    exit: Arc<Mutex<Option<oneshot::Sender<ExitStatus>>>>,
    spawner: std::sync::Weak<FakeSpawner>,
    background: Arc<AtomicBool>,
}

#[async_trait]
impl ProcessGroup for FakeGroup {
    async fn stop(&self, signal: i32, _grace: Duration) -> bool {
        if let Some(spawner) = self.spawner.upgrade() {
            let mut gate = spawner.gate.subscribe();
            let gated = spawner.gated.lock().expect("gated").contains(&self.service);
            spawner.signals.lock().expect("signals").push((self.service.clone(), signal));
            drop(spawner);
            if gated {
                let _ = gate.wait_for(|open| *open).await;
            }
        }
        // The leader dies of the signal (if it had not exited already).
        let sender = self.exit.lock().expect("exit").take();
        if let Some(sender) = sender {
            let _ = sender.send(ExitStatus::Signal(signal));
        }
        false
    }

    fn release(&self) {}

    fn set_background(&self, on: bool) {
        self.background.store(on, Ordering::SeqCst);
    }
}

fn service(name: &str, depends_on: &[&str]) -> ServiceSpec {
    let mut spec = ServiceSpec::new(name, name, Vec::<String>::new(), ".");
    spec.restart = RestartPolicy::Always;
    spec.depends_on = depends_on
        .iter()
        .map(|d| Dependency { service: (*d).to_owned(), condition: Condition::Ready })
        .collect();
    spec
}

async fn start(services: Vec<ServiceSpec>, spawner: &Arc<FakeSpawner>) -> Supervisor {
    let config = SupervisorConfig { services, ..SupervisorConfig::default() };
    Supervisor::builder(config)
        .expect("a valid graph")
        .spawner(Arc::new(spawner.clone()))
        .run()
        .await
        .expect("start")
}

fn state(supervisor: &Supervisor, name: &str) -> ServiceState {
    supervisor.snapshot().into_iter().find(|s| s.name == name).expect("known service").state
}

/// Lets the engine run (the clock is paused: it advances only when every
/// task is idle) until `condition` holds; a generous virtual deadline.
async fn until(what: &str, mut condition: impl FnMut() -> bool) {
    for _ in 0..100_000 {
        if condition() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

fn is_running(state: &ServiceState) -> bool {
    matches!(state, ServiceState::Running { .. })
}

/// A server and a host that depends on it, both running.
async fn server_and_host_running() -> (Arc<FakeSpawner>, Supervisor) {
    let spawner = FakeSpawner::new();
    let supervisor =
        start(vec![service("server", &[]), service("host", &["server"])], &spawner).await;
    until("both running", || {
        is_running(&state(&supervisor, "server")) && is_running(&state(&supervisor, "host"))
    })
    .await;
    (spawner, supervisor)
}

/// A prepare step `install` of `service` (a fake child of the program
/// `install`).
fn install_step(service: &ServiceSpec, when: PrepareWhen) -> PrepareStep {
    PrepareStep {
        name: "install".to_owned(),
        command: CommandSpec { program: "install".to_owned(), ..service.command.clone() },
        when,
        heartbeat: Duration::from_secs(3600),
    }
}

/// The status lists services in start order, whatever order the profile
/// gives them in: a dependent after what it waits for; and it lists every
/// one from the start, waiting until the engine's first turn (a reader
/// never sees a pod without services).
#[tokio::test(start_paused = true)]
async fn the_status_lists_services_in_start_order() {
    let spawner = FakeSpawner::new();
    let supervisor = start(
        vec![
            service("web", &["api"]),
            service("api", &["db"]),
            service("db", &[]),
            service("cron", &[]),
        ],
        &spawner,
    )
    .await;
    let names = |s: &Supervisor| s.snapshot().into_iter().map(|s| s.name).collect::<Vec<_>>();
    assert_eq!(names(&supervisor), ["db", "api", "web", "cron"]);
    let first = supervisor.snapshot();
    assert!(first.iter().all(|s| s.state == ServiceState::Waiting), "{first:?}");
    until("all running", || supervisor.snapshot().iter().all(|s| is_running(&s.state))).await;
    assert_eq!(names(&supervisor), ["db", "api", "web", "cron"]);
    supervisor.shutdown().await.expect("shutdown");
}

/// A restart's wait knows each service by name, whatever order the status
/// lists them in: `b` (listed first, given second) is judged by its own
/// start count, not by `a`'s higher one.
#[tokio::test(start_paused = true)]
async fn a_restart_waits_for_its_own_service_whatever_the_status_order() {
    let spawner = FakeSpawner::new();
    let supervisor = start(vec![service("a", &["b"]), service("b", &[])], &spawner).await;
    until("both running", || supervisor.snapshot().iter().all(|s| is_running(&s.state))).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    for _ in 0..2 {
        let waited = supervisor
            .restart_until_ready(&["a".to_owned()], false, deadline)
            .await
            .expect("restart a");
        assert_eq!(waited, Waited::Met);
    }
    let waited = supervisor
        .restart_until_ready(&["b".to_owned()], false, deadline)
        .await
        .expect("restart b");
    assert_eq!(waited, Waited::Met, "b's restart judged by a's start count");
    supervisor.shutdown().await.expect("shutdown");
}

/// What `tests/supervision.rs` shows with real processes, with time on
/// the paused clock: after a failed install nothing runs again by itself,
/// however long it waits; a change of the install's inputs does.
#[tokio::test(start_paused = true)]
async fn a_failed_prepare_step_waits_for_its_inputs_however_long() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lockfile = dir.path().join("lockfile");
    std::fs::write(&lockfile, "broken").expect("lockfile");
    let spawner = FakeSpawner::new();
    let mut web = service("web", &[]);
    web.prepare = vec![install_step(
        &web,
        PrepareWhen::Stale {
            target: dir.path().join("node_modules"),
            sources: vec![lockfile.clone()],
        },
    )];
    let supervisor = start(vec![web], &spawner).await;
    until("the install", || spawner.spawns("web", "install") == 1).await;
    spawner.exit("web", "install", ExitStatus::Code(3));
    until("web to fail", || matches!(state(&supervisor, "web"), ServiceState::Failed { .. })).await;

    // An hour on the paused clock: no retry, the service never started.
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(spawner.spawns("web", "install"), 1);
    assert_eq!(spawner.spawns("web", "web"), 0);
    assert!(matches!(state(&supervisor, "web"), ServiceState::Failed { .. }));

    // The fix (a change of the lockfile) runs the install again, then web.
    std::fs::write(&lockfile, "fixed at last").expect("fix");
    until("the install to run again", || spawner.spawns("web", "install") == 2).await;
    spawner.exit("web", "install", ExitStatus::Code(0));
    until("web to run", || is_running(&state(&supervisor, "web"))).await;
    assert_eq!(spawner.spawns("web", "web"), 1);
    supervisor.shutdown().await.expect("shutdown");
}

#[tokio::test(start_paused = true)]
async fn a_reload_burst_during_startup_restarts_at_most_twice() {
    let spawner = FakeSpawner::new();
    let mut server = service("server", &[]);
    server.prepare = vec![install_step(&server, PrepareWhen::Always)];
    let supervisor = start(vec![server, service("host", &["server"])], &spawner).await;
    until("the first prepare step", || spawner.spawns("server", "install") == 1).await;

    // Five reloads while the server is still preparing.
    for _ in 0..5 {
        supervisor.reload(&["server"]).await.expect("reload");
    }
    until("the prepare step to start again", || {
        spawner.spawns("server", "install") == 2 && !spawner.signals("server").is_empty()
    })
    .await;
    assert_eq!(
        spawner.signals("server"),
        [libc::SIGKILL],
        "the interrupted step is killed outright"
    );
    spawner.exit("server", "install", ExitStatus::Code(0));

    // The first reload ends once the server runs; the four queued ones are
    // one more reload, which prepares the server once more.
    until("the queued reload's prepare step", || spawner.spawns("server", "install") == 3).await;
    spawner.exit("server", "install", ExitStatus::Code(0));
    until("both running, no reload left", || {
        is_running(&state(&supervisor, "server"))
            && is_running(&state(&supervisor, "host"))
            && !supervisor.is_reloading()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(spawner.spawns("server", "server"), 2);
    assert_eq!(spawner.spawns("host", "host"), 2);
    assert_eq!(spawner.spawns("server", "install"), 3);
    assert!(!supervisor.is_reloading());
    supervisor.shutdown().await.expect("shutdown");
}

#[tokio::test(start_paused = true)]
async fn a_crash_during_a_dependencys_restart_waits_for_the_dependency() {
    let (spawner, supervisor) = server_and_host_running().await;

    spawner.hold_stops("server");
    supervisor.restart("server").await.expect("restart");
    until("the server stopping", || {
        matches!(state(&supervisor, "server"), ServiceState::Stopping { .. })
    })
    .await;
    spawner.exit("host", "host", ExitStatus::Code(1));
    // Long past the host's backoff (1 s), while the server is still down.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(spawner.spawns("host", "host"), 1, "host waits for server");
    assert_eq!(state(&supervisor, "host"), ServiceState::Waiting);

    spawner.open();
    until("both running again", || {
        is_running(&state(&supervisor, "server")) && is_running(&state(&supervisor, "host"))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(spawner.spawns("server", "server"), 2);
    assert_eq!(spawner.spawns("host", "host"), 2, "host started once more");
    let host = supervisor.snapshot().into_iter().find(|s| s.name == "host").expect("host");
    assert_eq!(host.restarts, 1);
    assert!(is_running(&host.state));
    supervisor.shutdown().await.expect("shutdown");
}

#[tokio::test(start_paused = true)]
async fn stop_during_backoff_cancels_the_restart() {
    let spawner = FakeSpawner::new();
    let supervisor = start(vec![service("server", &[])], &spawner).await;
    until("running", || is_running(&state(&supervisor, "server"))).await;

    spawner.exit("server", "server", ExitStatus::Code(3));
    until("backing off", || {
        matches!(state(&supervisor, "server"), ServiceState::Restarting { attempt: 1, .. })
    })
    .await;
    supervisor.stop_service("server").await.expect("stop");
    assert_eq!(state(&supervisor, "server"), ServiceState::Stopped);

    // Far past the backoff: nothing starts it again.
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(state(&supervisor, "server"), ServiceState::Stopped);
    assert_eq!(spawner.spawns("server", "server"), 1);
    // Stopped on request, the pod waits to be told to stop (issue 44).
    let mut settled = std::pin::pin!(supervisor.wait_settled());
    assert!(futures_poll_once(&mut settled).await.is_none());

    // A start request brings it back, with a fresh backoff.
    supervisor.start_service("server").await.expect("start");
    until("running again", || is_running(&state(&supervisor, "server"))).await;
    assert_eq!(spawner.spawns("server", "server"), 2);
    supervisor.shutdown().await.expect("shutdown");
}

/// A server made ready by its log line `serving`, and a host that needs it
/// ready: the backend of the Omnigent profile.
async fn backend(spawner: &Arc<FakeSpawner>) -> Supervisor {
    start(vec![logged_server(), service("host", &["server"])], spawner).await
}

/// A server made ready by its log line `serving` (see [`serve`]).
fn logged_server() -> ServiceSpec {
    let mut server = service("server", &[]);
    server.readiness = Some(crate::spec::Readiness {
        listener: None,
        probe: crate::spec::ProbeSpec::Log { pattern: "serving".to_owned() },
        interval: Duration::from_millis(100),
        timeout: Duration::from_secs(600),
    });
    server
}

/// [`backend`] once its server is ready and its host runs.
async fn running_backend(spawner: &Arc<FakeSpawner>) -> Supervisor {
    let supervisor = backend(spawner).await;
    until("the server spawned", || spawner.spawns("server", "server") == 1).await;
    serve(&supervisor);
    until("the host running", || is_running(&state(&supervisor, "host"))).await;
    supervisor
}

/// The newest server prints the line that makes it ready.
fn serve(supervisor: &Supervisor) {
    let mut line = vec!["serving".to_owned()];
    supervisor.inner.logs.push_batch("server", crate::event::Stream::Stdout, &mut line, &[]);
}

fn changed(path: &str) -> crate::event::Changes {
    crate::event::Changes::of([path])
}

#[tokio::test(start_paused = true)]
async fn a_fix_during_a_long_backoff_restarts_at_once_and_only_once() {
    let spawner = FakeSpawner::new();
    let supervisor = running_backend(&spawner).await;

    // The edit that breaks it: the reload's server crashes before it is
    // ready, again and again, until the backoff is 16 s.
    supervisor.reload_changed(&["server"], changed("omnigent/a.py")).await.expect("reload");
    for attempt in 1..=5_u32 {
        // The reload's server, then one after each backoff.
        let expected = 1 + attempt as usize;
        until("a new server", || spawner.spawns("server", "server") == expected).await;
        spawner.exit("server", "server", ExitStatus::Code(1));
        until("backing off", || {
            matches!(state(&supervisor, "server"), ServiceState::Restarting { attempt: a, .. } if a == attempt)
        })
        .await;
    }
    assert_eq!(
        state(&supervisor, "server"),
        ServiceState::Restarting { after: Duration::from_secs(16), attempt: 5 }
    );
    let servers = spawner.spawns("server", "server");
    let hosts = spawner.spawns("host", "host");
    let before = tokio::time::Instant::now();

    // The fix.
    supervisor.reload_changed(&["server"], changed("omnigent/a.py")).await.expect("reload");
    until("the fixed server", || spawner.spawns("server", "server") == servers + 1).await;
    assert!(
        before.elapsed() < Duration::from_millis(100),
        "the backoff was waited out: {:?}",
        before.elapsed()
    );
    serve(&supervisor);
    until("the host restarted after it", || {
        spawner.spawns("host", "host") == hosts + 1 && is_running(&state(&supervisor, "host"))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(spawner.spawns("server", "server"), servers + 1, "one server start");
    assert_eq!(spawner.spawns("host", "host"), hosts + 1, "one host restart");
    assert!(!supervisor.is_reloading());
    assert!(matches!(state(&supervisor, "server"), ServiceState::Ready { .. }));
    let server = supervisor.snapshot().remove(0);
    assert_eq!(server.restarts, 5, "the crash count is kept");

    // The attempt count was kept too: the next crash backs off further.
    spawner.exit("server", "server", ExitStatus::Code(1));
    until("backing off again", || {
        matches!(state(&supervisor, "server"), ServiceState::Restarting { attempt: 6, .. })
    })
    .await;
    supervisor.shutdown().await.expect("shutdown");
}

#[tokio::test(start_paused = true)]
async fn a_change_queued_behind_a_reload_restarts_a_crashed_server_at_once() {
    let spawner = FakeSpawner::new();
    let supervisor = running_backend(&spawner).await;

    // A reload whose server is still starting (not ready) when the next
    // change arrives: that change is queued.
    supervisor.reload(&["server"]).await.expect("reload");
    until("the reloaded server", || spawner.spawns("server", "server") == 2).await;
    supervisor.reload_changed(&["server"], changed("omnigent/b.py")).await.expect("reload");
    assert!(supervisor.is_reloading());
    // It crashes: what was queued for it starts it now, not after 1 s.
    spawner.exit("server", "server", ExitStatus::Code(1));
    let crashed = tokio::time::Instant::now();
    until("the server started again", || spawner.spawns("server", "server") == 3).await;
    assert!(crashed.elapsed() < Duration::from_millis(500), "waited {:?}", crashed.elapsed());
    serve(&supervisor);
    until("no reload left", || !supervisor.is_reloading()).await;
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(spawner.spawns("server", "server"), 3, "nothing queued behind it");
    assert_eq!(spawner.spawns("host", "host"), 2, "the host follows once");
    supervisor.shutdown().await.expect("shutdown");
}

#[tokio::test(start_paused = true)]
async fn a_change_does_not_wait_for_the_dependents_of_the_last_reload() {
    let spawner = FakeSpawner::new();
    let supervisor = running_backend(&spawner).await;

    // A reload whose server is ready while the host is still stopping.
    spawner.hold_stops("host");
    supervisor.reload(&["server"]).await.expect("reload");
    until("the reloaded server", || spawner.spawns("server", "server") == 2).await;
    serve(&supervisor);
    until("the host stopping", || {
        matches!(state(&supervisor, "host"), ServiceState::Stopping { .. })
    })
    .await;

    // The next change restarts the server now, not after the host.
    supervisor.reload_changed(&["server"], changed("omnigent/c.py")).await.expect("reload");
    until("the server restarted again", || spawner.spawns("server", "server") == 3).await;
    assert!(matches!(state(&supervisor, "host"), ServiceState::Stopping { .. }));
    spawner.open();
    serve(&supervisor);
    until("the host back", || is_running(&state(&supervisor, "host"))).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(spawner.spawns("server", "server"), 3);
    assert_eq!(spawner.spawns("host", "host"), 2, "the host restarts once");
    assert!(!supervisor.is_reloading());
    supervisor.shutdown().await.expect("shutdown");
}

/// A reload's respawn follows the old run's end at once: no timer sits
/// between the group emptying and the new start, nor between the new
/// start and the dependent's restart (the virtual clock does not move),
/// and each restarts exactly once.
#[tokio::test(start_paused = true)]
async fn a_reload_respawns_the_moment_the_old_run_is_gone() {
    let (spawner, supervisor) = server_and_host_running().await;

    spawner.hold_stops("server");
    supervisor.reload(&["server"]).await.expect("reload");
    until("the server stopping", || {
        matches!(state(&supervisor, "server"), ServiceState::Stopping { .. })
    })
    .await;
    let gone = tokio::time::Instant::now();
    spawner.open();
    // Only yields: while this task is ready the paused clock cannot move,
    // so a sleep anywhere on the engine's path would never end.
    for _ in 0..10_000 {
        if spawner.spawns("host", "host") == 2 && !supervisor.is_reloading() {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(spawner.spawns("server", "server"), 2, "server started again");
    assert_eq!(spawner.spawns("host", "host"), 2, "host followed it");
    assert_eq!(
        tokio::time::Instant::now(),
        gone,
        "no time passed between the old run's end and the restarts"
    );
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(spawner.spawns("server", "server"), 2);
    assert_eq!(spawner.spawns("host", "host"), 2, "the host restarts once");
    supervisor.shutdown().await.expect("shutdown");
}

/// The first change of a burst stops the server at once; nothing starts it
/// until the burst's reload, however long that takes; the reload starts it
/// without stopping anything; its host follows once it is ready.
#[tokio::test(start_paused = true)]
async fn a_coming_reload_stops_the_old_run_and_only_the_reload_starts_it() {
    let spawner = FakeSpawner::new();
    let supervisor = running_backend(&spawner).await;

    supervisor.reload_coming(&["server"]).expect("coming");
    until("the server down, waiting", || state(&supervisor, "server") == ServiceState::Waiting)
        .await;
    assert_eq!(spawner.signals("server"), vec![libc::SIGTERM]);
    // Said again by every change of the burst: still one stop.
    supervisor.reload_coming(&["server"]).expect("coming");
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(state(&supervisor, "server"), ServiceState::Waiting);
    assert_eq!(spawner.spawns("server", "server"), 1, "not started early");
    assert_eq!(spawner.signals("server").len(), 1);
    assert!(is_running(&state(&supervisor, "host")), "the host runs until its server is back");
    let settled = supervisor.wait_settled();
    tokio::pin!(settled);
    assert!(
        futures_poll_once(&mut settled).await.is_none(),
        "a pod whose reload is coming has not settled"
    );

    supervisor.reload_changed(&["server"], changed("omnigent/a.py")).await.expect("reload");
    until("the new server", || spawner.spawns("server", "server") == 2).await;
    assert_eq!(spawner.signals("server").len(), 1, "nothing stopped twice");
    serve(&supervisor);
    until("the host restarted after it", || {
        spawner.spawns("host", "host") == 2 && is_running(&state(&supervisor, "host"))
    })
    .await;
    until("the reload over", || !supervisor.is_reloading()).await;
    supervisor.shutdown().await.expect("shutdown");
}

/// A reload that runs decides when the next restart is: a change seen
/// meanwhile stops nothing ahead of it; nor is a service stopped by hand
/// touched, and a start request brings back one stopped ahead.
#[tokio::test(start_paused = true)]
async fn a_coming_reload_leaves_alone_what_is_not_simply_running() {
    let spawner = FakeSpawner::new();
    let supervisor = running_backend(&spawner).await;

    // A reload in progress: the server restarted, not ready yet.
    supervisor.reload_changed(&["server"], changed("omnigent/a.py")).await.expect("reload");
    until("the reload's server", || spawner.spawns("server", "server") == 2).await;
    supervisor.reload_coming(&["server"]).expect("coming");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(spawner.signals("server").len(), 1, "only the reload's stop");
    assert!(matches!(state(&supervisor, "server"), ServiceState::Starting { .. }));
    serve(&supervisor);
    until("the reload over", || !supervisor.is_reloading()).await;

    // Stopped by hand: stays stopped.
    supervisor.stop_service("host").await.expect("stop");
    let stops = spawner.signals("host").len();
    supervisor.reload_coming(&["host"]).expect("coming");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(state(&supervisor, "host"), ServiceState::Stopped);
    assert_eq!(spawner.signals("host").len(), stops);

    // Stopped ahead, then started by a request: it runs again.
    supervisor.reload_coming(&["server"]).expect("coming");
    until("the server down, waiting", || state(&supervisor, "server") == ServiceState::Waiting)
        .await;
    supervisor.start_service("server").await.expect("start");
    until("started by the request", || spawner.spawns("server", "server") == 3).await;
    supervisor.shutdown().await.expect("shutdown");
}

/// Polls `future` once: its output if it is ready now.
async fn futures_poll_once<F: std::future::Future + Unpin>(future: &mut F) -> Option<F::Output> {
    std::future::poll_fn(|cx| {
        std::task::Poll::Ready(match std::pin::Pin::new(&mut *future).poll(cx) {
            std::task::Poll::Ready(output) => Some(output),
            std::task::Poll::Pending => None,
        })
    })
    .await
}

#[tokio::test(start_paused = true)]
async fn a_guard_that_cannot_be_replaced_stops_the_pod_and_says_why() {
    let (_spawner, supervisor) = server_and_host_running().await;
    let mut events = supervisor.subscribe();
    let lost = crate::guard::Replaced::none_started(42, "fork: Resource temporarily unavailable");
    supervisor.send(super::Order::GuardReplaced(Ok(lost))).expect("send");
    until("the pod to stop", || supervisor.is_finished()).await;
    for name in ["server", "host"] {
        assert_eq!(state(&supervisor, name), ServiceState::Stopped, "{name}");
    }
    let mut notices = Vec::new();
    while let Some(event) = events.try_recv() {
        if let crate::event::EventKind::Notice { message } = event.kind {
            notices.push(message);
        }
    }
    assert_eq!(
        notices.first().map(String::as_str),
        Some(
            "the orphan guard (pid 42) ended (killed by SIGKILL); a new one could not be started \
             (fork: Resource temporarily unavailable): stopping the pod, since nothing would stop \
             its processes if omnidev died"
        ),
        "{notices:?}"
    );
    assert!(notices.iter().any(|n| n == "shutting down"), "{notices:?}");
}

/// The fake spawner replaces everything that touches the machine: no
/// orphan guard is forked, no cgroup is made, and the test process does
/// not become a subreaper (no other test of this crate starts a real
/// supervisor in this process).
#[tokio::test(start_paused = true)]
async fn the_fake_path_starts_no_process_and_makes_no_cgroup() {
    let (_spawner, supervisor) = server_and_host_running().await;
    assert_eq!(supervisor.guard_pid(), None, "no orphan guard was forked");
    assert!(
        matches!(supervisor.containment(), crate::containment::Mechanism::ProcessGroups { .. }),
        "{}",
        supervisor.containment()
    );
    #[cfg(target_os = "linux")]
    assert_eq!(
        nix::sys::prctl::get_child_subreaper().ok(),
        Some(false),
        "the test process did not become a subreaper"
    );
    supervisor.shutdown().await.expect("shutdown");
}

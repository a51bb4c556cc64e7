//! Core's readiness on the paused clock: `starting` apart from `running`,
//! and the waits every front-end asks ([`Supervisor::wait_ready`], a
//! restart until ready, healthy after a reload).

use std::time::Duration;

use tokio::time::Instant;

use super::{FakeSpawner, backend, running_backend, serve, start, state, until};
use crate::event::{ExitStatus, ServiceState};
use crate::supervisor::{STABLE, Waited};

fn names(names: &[&str]) -> Vec<String> {
    names.iter().map(|&n| n.to_owned()).collect()
}

fn later(secs: u64) -> Instant {
    Instant::now() + Duration::from_secs(secs)
}

#[tokio::test(start_paused = true)]
async fn a_run_is_starting_until_its_probe_passes_and_running_without_one() {
    let spawner = FakeSpawner::new();
    let supervisor = backend(&spawner).await;
    until("the server spawned", || {
        matches!(state(&supervisor, "server"), ServiceState::Starting { .. })
    })
    .await;
    let status = &supervisor.snapshot()[0];
    assert!(!status.ready && status.starts == 1, "{status:?}");
    serve(&supervisor);
    until("the host running", || {
        matches!(state(&supervisor, "host"), ServiceState::Running { .. })
    })
    .await;
    assert!(matches!(state(&supervisor, "server"), ServiceState::Ready { .. }));
    assert!(supervisor.snapshot()[0].ready);
    assert!(!supervisor.snapshot()[1].ready, "the host ran for less than STABLE");
    until("the host ready", || supervisor.snapshot()[1].ready).await;
    supervisor.shutdown().await.expect("shutdown");
}

#[tokio::test(start_paused = true)]
async fn wait_ready_counts_a_run_without_a_probe_once_it_has_run_for_a_second() {
    let spawner = FakeSpawner::new();
    let supervisor = backend(&spawner).await;
    let waiter = supervisor.clone();
    let wait = tokio::spawn(async move { waiter.wait_ready(&[], later(600)).await });
    until("the server spawned", || spawner.spawns("server", "server") == 1).await;
    serve(&supervisor);
    until("the host running", || {
        matches!(state(&supervisor, "host"), ServiceState::Running { .. })
    })
    .await;
    // `until` looks every 10 ms (virtual): the host began at most that
    // long before.
    let host_ran = Instant::now() - Duration::from_millis(10);
    assert!(!wait.is_finished(), "the host has not run for a second yet");
    assert_eq!(wait.await.expect("joined").expect("known"), Waited::Met);
    assert!(
        Instant::now() >= host_ran + STABLE,
        "the host counted only after running for {STABLE:?}"
    );
    supervisor.shutdown().await.expect("shutdown");
}

#[tokio::test(start_paused = true)]
async fn wait_ready_fails_at_once_naming_the_service_that_crashed() {
    let spawner = FakeSpawner::new();
    let supervisor = running_backend(&spawner).await;
    let waiter = supervisor.clone();
    let wait = tokio::spawn(async move { waiter.wait_ready(&[], later(600)).await });
    let asked = Instant::now();
    spawner.exit("host", "host", ExitStatus::Code(1));
    assert_eq!(wait.await.expect("joined").expect("known"), Waited::Failed(names(&["host"])));
    assert!(
        Instant::now() < asked + STABLE,
        "a crash ends the wait before the host could have counted as ready"
    );
    supervisor.shutdown().await.expect("shutdown");
}

#[tokio::test(start_paused = true)]
async fn wait_ready_fails_once_a_probe_timed_out_and_times_out_naming_what_is_pending() {
    let spawner = FakeSpawner::new();
    let mut server = super::service("server", &[]);
    server.readiness = Some(crate::spec::Readiness {
        listener: None,
        probe: crate::spec::ProbeSpec::Log { pattern: "serving".to_owned() },
        interval: Duration::from_millis(100),
        timeout: Duration::from_secs(5),
    });
    let supervisor = start(vec![server], &spawner).await;
    assert_eq!(
        supervisor.wait_ready(&names(&["server"]), later(2)).await.expect("known"),
        Waited::TimedOut(names(&["server"]))
    );
    assert_eq!(
        supervisor.wait_ready(&[], later(600)).await.expect("known"),
        Waited::Failed(names(&["server"]))
    );
    assert!(supervisor.snapshot()[0].probe_timed_out);
    assert!(
        supervisor.wait_ready(&names(&["nope"]), later(1)).await.is_err(),
        "an unknown service is an error"
    );
    supervisor.shutdown().await.expect("shutdown");
}

#[tokio::test(start_paused = true)]
async fn a_restart_is_waited_for_until_its_new_run_is_ready() {
    let spawner = FakeSpawner::new();
    let supervisor = running_backend(&spawner).await;
    let old = supervisor.snapshot()[0].pid();
    let waiter = supervisor.clone();
    let wait = tokio::spawn(async move {
        waiter.restart_until_ready(&names(&["server"]), true, later(600)).await
    });
    until("the new server", || spawner.spawns("server", "server") == 2).await;
    // Its old run was ready; the new one is not until it serves.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(!wait.is_finished(), "the new run is not ready yet");
    serve(&supervisor);
    assert_eq!(wait.await.expect("joined").expect("known"), Waited::Met);
    let new = supervisor.snapshot()[0].pid();
    assert!(new.is_some() && new != old, "{old:?} → {new:?}");
    supervisor.shutdown().await.expect("shutdown");
}

#[tokio::test(start_paused = true)]
async fn healthy_after_reload_waits_for_a_reload_that_began_after_the_ask() {
    let spawner = FakeSpawner::new();
    let supervisor = running_backend(&spawner).await;
    let asked = std::time::SystemTime::now();
    assert_eq!(
        supervisor.wait_healthy_after_reload(&[], asked, later(5)).await.expect("known"),
        Waited::NoReload,
        "ready, but no reload came"
    );
    let waiter = supervisor.clone();
    let wait =
        tokio::spawn(async move { waiter.wait_healthy_after_reload(&[], asked, later(600)).await });
    supervisor.reload(&["server"]).await.expect("reload");
    until("the new server", || spawner.spawns("server", "server") == 2).await;
    serve(&supervisor);
    until("the host restarted", || spawner.spawns("host", "host") == 2).await;
    assert_eq!(wait.await.expect("joined").expect("known"), Waited::Met);
    supervisor.shutdown().await.expect("shutdown");
}

/// A healthy-after-reload wait of every service, asked for `after`.
fn wait_after(
    supervisor: &crate::supervisor::Supervisor,
    after: std::time::SystemTime,
) -> tokio::task::JoinHandle<crate::Result<Waited>> {
    let waiter = supervisor.clone();
    tokio::spawn(async move { waiter.wait_healthy_after_reload(&[], after, later(600)).await })
}

/// Serves the reloaded server and waits for its reload to be over.
async fn reload_over(spawner: &FakeSpawner, supervisor: &crate::supervisor::Supervisor) {
    serve(supervisor);
    until("the reload over", || spawner.spawns("host", "host") == 2 && !supervisor.is_reloading())
        .await;
}

/// Long enough for `wait` to be met if it judged the reload that is over
/// (the host has no probe: it counts once it has run for STABLE); then a
/// reload whose server crashes, which `wait` must fail on, naming it.
async fn a_breaking_reload_fails(
    spawner: &FakeSpawner,
    supervisor: &crate::supervisor::Supervisor,
    wait: tokio::task::JoinHandle<crate::Result<Waited>>,
) {
    tokio::time::sleep(STABLE * 2).await;
    supervisor.reload(&["server"]).await.expect("reload");
    until("the newest server", || spawner.spawns("server", "server") == 3).await;
    spawner.exit("server", "server", ExitStatus::Code(1));
    assert_eq!(wait.await.expect("joined").expect("known"), Waited::Failed(names(&["server"])));
    supervisor.shutdown().await.expect("shutdown");
}

#[tokio::test(start_paused = true)]
async fn healthy_after_reload_judges_the_reload_of_the_latest_change_seen() {
    let spawner = FakeSpawner::new();
    let supervisor = running_backend(&spawner).await;
    // A first edit, reloaded and healthy again.
    supervisor.saw_change();
    supervisor.reload(&["server"]).await.expect("reload");
    until("the new server", || spawner.spawns("server", "server") == 2).await;
    reload_over(&spawner, &supervisor).await;
    // A second edit just after it, which breaks the server: seen, its
    // reload not begun yet (the watcher's debounce runs). The wait is
    // asked with a lookback that reaches back past the first reload, yet
    // judges the second.
    supervisor.saw_change();
    let wait = wait_after(&supervisor, std::time::SystemTime::now() - Duration::from_secs(2));
    a_breaking_reload_fails(&spawner, &supervisor, wait).await;
}

#[tokio::test(start_paused = true)]
async fn a_change_seen_while_waiting_moves_the_bar_to_its_reload() {
    let spawner = FakeSpawner::new();
    let supervisor = running_backend(&spawner).await;
    let wait = wait_after(&supervisor, std::time::SystemTime::now());
    // A reload begins after the ask; before it is over, another change is
    // seen: the wait is for that change's reload, which breaks the server.
    supervisor.reload(&["server"]).await.expect("reload");
    until("the new server", || spawner.spawns("server", "server") == 2).await;
    supervisor.saw_change();
    reload_over(&spawner, &supervisor).await;
    a_breaking_reload_fails(&spawner, &supervisor, wait).await;
}

#[tokio::test(start_paused = true)]
async fn a_start_is_waited_for_until_the_stopped_service_runs_again() {
    let spawner = FakeSpawner::new();
    let supervisor = running_backend(&spawner).await;
    supervisor.stop_service("host").await.expect("stopped");
    assert!(matches!(state(&supervisor, "host"), ServiceState::Stopped));
    // Stopped counts as ended for a plain wait: the start's own wait must
    // not be met by the state before the start.
    let waited = supervisor.start_until_ready(&names(&["host"]), later(600)).await.expect("known");
    assert_eq!(waited, Waited::Met);
    assert_eq!(spawner.spawns("host", "host"), 2);
    assert!(matches!(state(&supervisor, "host"), ServiceState::Running { .. }));
    // One that runs is left as it is, and its run counts.
    let waited =
        supervisor.start_until_ready(&names(&["server", "host"]), later(600)).await.expect("known");
    assert_eq!(waited, Waited::Met);
    assert_eq!(spawner.spawns("host", "host"), 2);
    supervisor.shutdown().await.expect("shutdown");
}

#[tokio::test(start_paused = true)]
async fn healthy_after_reload_fails_at_the_first_crash_after_the_reload() {
    let spawner = FakeSpawner::new();
    let supervisor = running_backend(&spawner).await;
    // A crash before the reload does not count; one after it does, at
    // once, though the crash loop keeps the reload from being over.
    let asked = std::time::SystemTime::now();
    let waiter = supervisor.clone();
    let wait =
        tokio::spawn(async move { waiter.wait_healthy_after_reload(&[], asked, later(600)).await });
    supervisor.reload(&["server"]).await.expect("reload");
    until("the new server", || spawner.spawns("server", "server") == 2).await;
    let crashed = Instant::now();
    spawner.exit("server", "server", ExitStatus::Code(1));
    assert_eq!(wait.await.expect("joined").expect("known"), Waited::Failed(names(&["server"])));
    assert!(
        Instant::now() < crashed + Duration::from_secs(1),
        "the wait ended at the crash, not at its deadline"
    );
    supervisor.shutdown().await.expect("shutdown");
}

#[tokio::test(start_paused = true)]
async fn a_stopped_service_fails_a_ready_wait_at_once() {
    let spawner = FakeSpawner::new();
    let supervisor = running_backend(&spawner).await;
    supervisor.stop_service("host").await.expect("stopped");
    let asked = Instant::now();
    let waited = supervisor.wait_ready(&names(&["host"]), later(600)).await.expect("known");
    assert_eq!(waited, Waited::Failed(names(&["host"])));
    assert_eq!(Instant::now(), asked, "judged on the status as it is");
    assert!(!supervisor.snapshot()[1].ready);
    supervisor.shutdown().await.expect("shutdown");
}

#[tokio::test(start_paused = true)]
async fn a_restart_whose_dependency_is_stopped_fails_at_once_blocked() {
    let spawner = FakeSpawner::new();
    let supervisor = running_backend(&spawner).await;
    supervisor.stop_service("server").await.expect("stopped");
    // The host runs on without it; restarted, it waits for it for good.
    let asked = Instant::now();
    let waited =
        supervisor.restart_until_ready(&names(&["host"]), true, later(600)).await.expect("known");
    assert_eq!(waited, Waited::Failed(names(&["host"])));
    assert!(
        Instant::now() < asked + Duration::from_secs(5),
        "ended when the host was blocked, not at the deadline"
    );
    let ServiceState::Blocked { reason } = state(&supervisor, "host") else {
        panic!("blocked: {:?}", state(&supervisor, "host"));
    };
    assert!(reason.contains("server"), "{reason}");
    supervisor.shutdown().await.expect("shutdown");
}

#[tokio::test(start_paused = true)]
async fn a_start_overtaken_by_a_stop_fails_at_once() {
    let spawner = FakeSpawner::new();
    let supervisor = running_backend(&spawner).await;
    supervisor.stop_service("server").await.expect("stopped");
    supervisor.stop_service("host").await.expect("stopped");
    // The host's start waits for the server, which a stop holds: the
    // host's own stop comes before it ever runs again.
    let starter = supervisor.clone();
    let start =
        tokio::spawn(async move { starter.start_until_ready(&names(&["host"]), later(600)).await });
    until("the host waiting", || !matches!(state(&supervisor, "host"), ServiceState::Stopped))
        .await;
    let asked = Instant::now();
    supervisor.stop_service("host").await.expect("stopped");
    assert_eq!(start.await.expect("joined").expect("known"), Waited::Failed(names(&["host"])));
    assert!(
        Instant::now() < asked + Duration::from_secs(5),
        "ended at the stop, not at the deadline"
    );
    assert_eq!(spawner.spawns("host", "host"), 1);
    supervisor.shutdown().await.expect("shutdown");
}

#[tokio::test(start_paused = true)]
async fn a_command_that_cannot_be_run_fails_at_once_and_is_never_restarted() {
    for code in [126, 127] {
        let spawner = FakeSpawner::new();
        let supervisor = running_backend(&spawner).await;
        spawner.exit("host", "host", ExitStatus::Code(code));
        until("the host failed", || {
            matches!(state(&supervisor, "host"), ServiceState::Failed { .. })
        })
        .await;
        let ServiceState::Failed { reason } = state(&supervisor, "host") else {
            unreachable!("checked above");
        };
        assert!(reason.contains(&format!("exit code {code}")), "{reason}");
        assert!(reason.contains("prepare"), "{reason}");
        // However long one waits: no backoff, no restart.
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert_eq!(spawner.spawns("host", "host"), 1);
        assert!(matches!(state(&supervisor, "host"), ServiceState::Failed { .. }));
        // Started by hand, it runs again.
        let waited =
            supervisor.start_until_ready(&names(&["host"]), later(600)).await.expect("known");
        assert_eq!(waited, Waited::Met);
        assert_eq!(spawner.spawns("host", "host"), 2);
        supervisor.shutdown().await.expect("shutdown");
    }
}

//! Services that yield ([`crate::spec::ServiceSpec::yields`]) on the
//! paused clock: in the background exactly while another service that
//! does not yield is preparing or starting.

use std::sync::Arc;
use std::time::Duration;

use super::{FakeSpawner, install_step, logged_server, serve, service, start, until};
use crate::event::ExitStatus;
use crate::spec::PrepareWhen;
use crate::supervisor::Supervisor;

/// `web`, which yields, with an install step.
fn yielding_web() -> crate::spec::ServiceSpec {
    let mut web = service("web", &[]);
    web.yields = true;
    web.prepare = vec![install_step(&web, PrepareWhen::Always)];
    web
}

/// The server and host of the Omnigent profile, and [`yielding_web`].
async fn backend_and_web(spawner: &Arc<FakeSpawner>) -> Supervisor {
    start(vec![logged_server(), service("host", &["server"]), yielding_web()], spawner).await
}

#[tokio::test(start_paused = true)]
async fn a_yielding_service_is_in_the_background_while_the_others_start() {
    let spawner = FakeSpawner::new();
    let supervisor = backend_and_web(&spawner).await;
    until("the install spawned", || spawner.spawns("web", "install") == 1).await;
    assert!(spawner.background("web", "install"), "its install starts in the background");
    spawner.exit("web", "install", ExitStatus::Code(0));
    until("web spawned", || spawner.spawns("web", "web") == 1).await;
    assert!(spawner.background("web", "web"), "its run starts in the background");
    assert!(!spawner.background("server", "server"), "the server does not yield");
    // The server ready, the host (no probe) runs: nobody is starting.
    serve(&supervisor);
    until("web in the foreground", || !spawner.background("web", "web")).await;
    assert_eq!(spawner.spawns("host", "host"), 1);
    // A restart of the server is a start like the first.
    supervisor.restart("server").await.expect("restart");
    until("web in the background again", || spawner.background("web", "web")).await;
    serve(&supervisor);
    until("web in the foreground again", || !spawner.background("web", "web")).await;
    assert_eq!(spawner.spawns("web", "web"), 1, "web was never restarted");
    supervisor.shutdown().await.expect("shutdown");
}

#[tokio::test(start_paused = true)]
async fn a_probe_that_timed_out_holds_nobody_in_the_background() {
    let spawner = FakeSpawner::new();
    let mut server = logged_server();
    if let Some(readiness) = &mut server.readiness {
        readiness.timeout = Duration::from_secs(30);
    }
    let mut web = service("web", &[]);
    web.yields = true;
    let began = tokio::time::Instant::now();
    let supervisor = start(vec![server, web], &spawner).await;
    until("web spawned", || spawner.spawns("web", "web") == 1).await;
    assert!(spawner.background("web", "web"));
    // The server never prints its line; once its probe has timed out it no
    // longer counts as starting.
    until("web in the foreground", || !spawner.background("web", "web")).await;
    assert!(began.elapsed() >= Duration::from_secs(30), "{:?}", began.elapsed());
    supervisor.shutdown().await.expect("shutdown");
}

#[tokio::test(start_paused = true)]
async fn services_that_all_yield_or_none_stay_in_the_foreground() {
    let spawner = FakeSpawner::new();
    let mut server = logged_server();
    server.yields = true;
    let supervisor = start(vec![server, yielding_web()], &spawner).await;
    until("the install spawned", || spawner.spawns("web", "install") == 1).await;
    assert!(!spawner.background("web", "install"));
    assert!(!spawner.background("server", "server"));
    supervisor.shutdown().await.expect("shutdown");
}

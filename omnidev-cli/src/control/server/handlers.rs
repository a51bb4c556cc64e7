//! What each request does, from the supervisor's state: the answers.

use std::time::Duration;

use omnidev_core::spec::limits;
use omnidev_core::sync::Locked;
use omnidev_core::{Until, Waited};

use crate::control::events::rfc3339;
use crate::control::protocol::{
    ErrorKind, LinkReport, PodStatus, Refusal, ReloadReport, Request, Response, SCHEMA,
    ServiceReport, UrlReport, WaitFor,
};

use super::{
    RELOAD_LOOKBACK, RESTART_DEADLINE, Server, WAIT_DEADLINE, WAIT_READY_DEADLINE, WATCHER_CATCH_UP,
};

pub(super) fn unknown_service(shared: &Server, name: &str) -> Refusal {
    Refusal::new(
        ErrorKind::UnknownService,
        format!(
            "unknown service `{name}` (known: {})",
            shared.supervisor.service_names().join(", ")
        ),
    )
}

pub(super) async fn answer(shared: &Server, request: Request) -> Response {
    answered(shared, request).await.unwrap_or_else(Response::from)
}

/// A request's answer, or the refusal that ended it early (`?`).
type Answered = std::result::Result<Response, Refusal>;

/// The answer to `request`; a refusal as the error.
async fn answered(shared: &Server, request: Request) -> Answered {
    Ok(match request {
        Request::Status | Request::Stop => Response::ok(status(shared), Vec::new()),
        // Answered by `stream_events`.
        Request::Events(_) => Response::error("`events` is answered as a stream"),
        Request::Wait { until, services, timeout_secs } => {
            let limit = limit(timeout_secs, WAIT_DEADLINE)?;
            let services = expand(shared, &services);
            unknown(shared, &services)?;
            wait(shared, until, &services, limit).await
        }
        Request::WaitReady => {
            let deadline = tokio::time::Instant::now() + WAIT_READY_DEADLINE;
            let waited = shared.supervisor.wait_ready(&[], deadline).await;
            outcome(shared, waited, |_| {
                format!(
                    "not ready after {} s; ask again to keep waiting",
                    WAIT_READY_DEADLINE.as_secs()
                )
            })
        }
        Request::StopService { services } => {
            stop_services(shared, &expand(shared, &services)).await?
        }
        Request::StartService { services, timeout_secs } => {
            let limit = limit(timeout_secs, RESTART_DEADLINE)?;
            start_services(shared, &expand(shared, &services), limit).await?
        }
        Request::ReloadProfile { timeout_secs } => {
            reload_profile(shared, limit(timeout_secs, RESTART_DEADLINE)?).await
        }
        Request::Restart { service, all, no_deps, timeout_secs } => {
            let limit = limit(timeout_secs, RESTART_DEADLINE)?;
            let target = match service {
                Some(_) if all => {
                    let why = "`all` and `service` exclude each other";
                    return Err(Refusal::new(ErrorKind::Usage, why));
                }
                _ if all => Restart::All,
                Some(name) => {
                    Restart::Service { copies: expand(shared, &[name]), dependents: !no_deps }
                }
                None => Restart::Watched,
            };
            restart(shared, target, limit).await?
        }
    })
}

/// A request's `timeout-secs` (`default` when absent), refused beyond the
/// maximum: a larger value would overflow the deadline's `Instant`.
pub(super) fn limit(
    timeout_secs: Option<u64>,
    default: Duration,
) -> std::result::Result<Duration, Refusal> {
    let limit = timeout_secs.map_or(default, Duration::from_secs);
    if limit > limits::MAX_REQUEST_TIMEOUT {
        return Err(Refusal::new(
            ErrorKind::Usage,
            format!(
                "`timeout-secs` is {}; it must be at most {}",
                limit.as_secs(),
                limits::MAX_REQUEST_TIMEOUT.as_secs()
            ),
        ));
    }
    Ok(limit)
}

/// Stops `services`, answering once each one's processes are gone.
pub(super) async fn stop_services(shared: &Server, services: &[String]) -> Answered {
    check_services(shared, services)?;
    for name in services {
        if let Err(e) = shared.supervisor.stop_service(name).await {
            return Ok(Response::error(e.to_string()));
        }
    }
    Ok(Response::ok(status(shared), Vec::new()))
}

/// Starts `services`, answering once each is ready or one failed.
pub(super) async fn start_services(
    shared: &Server,
    services: &[String],
    limit: Duration,
) -> Answered {
    check_services(shared, services)?;
    let deadline = tokio::time::Instant::now() + limit;
    let waited = shared.supervisor.start_until_ready(services, deadline).await;
    Ok(outcome(shared, waited, |_| {
        format!("{} not ready within {} s", services.join(", "), limit.as_secs())
    }))
}

/// The services `names` stand for ([`omnidev_pod::names::expand`]).
pub(super) fn expand(shared: &Server, names: &[String]) -> Vec<String> {
    omnidev_pod::names::expand(names, &shared.supervisor.service_names())
}

/// A refusal when `services` is empty, or names a service badly or one
/// the pod does not have.
pub(super) fn check_services(shared: &Server, services: &[String]) -> Result<(), Refusal> {
    if services.is_empty() {
        return Err(Refusal::new(ErrorKind::Usage, "no service named"));
    }
    unknown(shared, services)
}

/// The refusal of the first of `names` that is no service name, or not
/// one of this pod's services.
fn unknown(shared: &Server, names: &[String]) -> Result<(), Refusal> {
    let known = shared.supervisor.service_names();
    let refusal = names.iter().find_map(|name| match omnidev_pod::names::check_service(name) {
        Err(bad) => Some(Refusal::new(ErrorKind::Usage, bad.to_string())),
        Ok(()) if !known.contains(name) => Some(unknown_service(shared, name)),
        Ok(()) => None,
    });
    refusal.map_or(Ok(()), Err)
}

/// The watched services of the profile the pod runs now (a
/// `reload-profile` may have added or removed some).
pub(super) fn watched(shared: &Server) -> Vec<String> {
    shared.info.live.as_ref().map_or_else(|| shared.info.watched.clone(), |live| live.watched())
}

/// What `restart` restarts.
pub(super) enum Restart {
    /// The services with watch rules (every one when none has).
    Watched,
    /// One service, or its replicas one after another (each ready before
    /// the next stops: the service keeps answering throughout).
    Service {
        /// The service, or its replicas.
        copies: Vec<String>,
        /// Its dependents follow (not with `no-deps`).
        dependents: bool,
    },
    /// Every service, as one reload.
    All,
}

/// Restarts `target` and answers once it is ready again.
pub(super) async fn restart(shared: &Server, target: Restart, limit: Duration) -> Answered {
    let names = match &target {
        Restart::All => shared.supervisor.service_names(),
        Restart::Service { copies, .. } => copies.clone(),
        Restart::Watched => watched(shared),
    };
    unknown(shared, &names)?;
    let deadline = tokio::time::Instant::now() + limit;
    let dependents = !matches!(target, Restart::Service { dependents: false, .. });
    // A service's replicas one at a time, the next only once this one is
    // ready again; anything else at once, as one reload.
    let batches: Vec<&[String]> = if matches!(target, Restart::Service { .. }) {
        names.chunks(1).collect()
    } else {
        vec![names.as_slice()]
    };
    let mut waited = Ok(Waited::Met);
    for batch in batches {
        waited = shared.supervisor.restart_until_ready(batch, dependents, deadline).await;
        if !matches!(waited, Ok(Waited::Met)) {
            break;
        }
    }
    Ok(outcome(shared, waited, |_| {
        format!("{} not ready again within {} s", names.join(", "), limit.as_secs())
    }))
}

/// Applies the profile file and answers once what it restarted and
/// started is ready again (or one failed); an invalid file is refused with
/// its error, the pod running on.
pub(super) async fn reload_profile(shared: &Server, limit: Duration) -> Response {
    let Some(live) = &shared.info.live else {
        return Response::error("this pod follows no profile file");
    };
    let deadline = tokio::time::Instant::now() + limit;
    match live.apply(&shared.supervisor, deadline).await {
        Err(crate::live_profile::ApplyError::Invalid(error)) => Response::refused(
            ErrorKind::InvalidProfile,
            format!("{error}; the pod runs on with the profile it loaded"),
        ),
        Err(crate::live_profile::ApplyError::Supervisor(error)) => {
            Response::error(error.to_string())
        }
        Ok((applied, waited)) => {
            let names = applied.applied.coming_up();
            let mut response = outcome(shared, Ok(waited), |_| {
                format!(
                    "{} not ready within {} s of applying the profile",
                    names.join(", "),
                    limit.as_secs()
                )
            });
            if let Response::Done(done) = &mut response {
                done.applied = Some(applied);
            }
            response
        }
    }
}

/// Waits until `until` holds for `services` (all when empty): the
/// answer's `failed` names the services that failed instead.
pub(super) async fn wait(
    shared: &Server,
    until: WaitFor,
    services: &[String],
    limit: Duration,
) -> Response {
    let asked = std::time::SystemTime::now();
    let deadline = tokio::time::Instant::now() + limit;
    let supervisor = &shared.supervisor;
    let waited = match until {
        WaitFor::Ready => supervisor.wait(services, Until::Ready, deadline).await,
        WaitFor::Exited => supervisor.wait(services, Until::Exited, deadline).await,
        WaitFor::HealthyAfterReload => {
            let after = asked.checked_sub(RELOAD_LOOKBACK).unwrap_or(asked);
            tokio::time::sleep(WATCHER_CATCH_UP).await;
            supervisor.wait_healthy_after_reload(services, after, deadline).await
        }
    };
    outcome(shared, waited, |waited| {
        let what = match (until, waited) {
            (_, Waited::NoReload) => {
                "no reload began (did the change touch a watched file?), so not healthy after one"
            }
            (WaitFor::Ready, _) => "not ready",
            (WaitFor::Exited, _) => "still running",
            (WaitFor::HealthyAfterReload, _) => "not ready again after the reload",
        };
        let names = if services.is_empty() { "the pod".to_owned() } else { services.join(", ") };
        format!("{names}: {what} within {} s", limit.as_secs())
    })
}

/// The answer to a wait that ended with `waited`: the pod's status and
/// the services that failed, or the error `late` words for a wait that
/// did not end in time.
pub(super) fn outcome(
    shared: &Server,
    waited: omnidev_core::Result<Waited>,
    late: impl FnOnce(&Waited) -> String,
) -> Response {
    match waited {
        Ok(Waited::Met) => Response::ok(status(shared), Vec::new()),
        Ok(Waited::Failed(failed)) => Response::ok(status(shared), failed),
        Ok(Waited::ShutDown(_)) => Response::error("the pod stopped meanwhile"),
        Ok(late_one @ (Waited::TimedOut(_) | Waited::NoReload)) => {
            Response::refused(ErrorKind::Timeout, late(&late_one))
        }
        Err(e) => Response::error(e.to_string()),
    }
}

pub(super) fn status(shared: &Server) -> PodStatus {
    let info = &shared.info;
    let snapshot = shared.supervisor.snapshot();
    let addresses = info.addresses.locked().clone();
    // Measured now, as it is asked for: nothing samples while nobody looks.
    let services: Vec<ServiceReport> = (snapshot.iter().cloned())
        .map(|status| {
            let log_file = shared.supervisor.log_file(&status.name).ok().flatten();
            let usage = shared.supervisor.usage(&status);
            ServiceReport { usage, ..ServiceReport::new(status, log_file) }
        })
        .collect();
    let mut usage = omnidev_core::platform::Usage::default();
    for service in &services {
        usage.add(service.usage.unwrap_or_default());
    }
    PodStatus {
        schema: SCHEMA,
        pod_dir: info.pod_dir.clone(),
        repo: Some(info.repo.clone()),
        running: true,
        pid: Some(std::process::id()),
        control: true,
        ports: addresses.ports.clone(),
        urls: UrlReport::shown(&addresses.urls, &snapshot),
        containment: Some(shared.supervisor.containment().to_string()),
        host: None,
        db_engine: crate::control::inspect::db_engine(&info.pod_dir),
        services,
        usage: Some(usage),
        last_reload: last_reload(shared),
        links: (addresses.links.iter())
            .map(|(name, linked)| (name.clone(), LinkReport::of(linked)))
            .collect(),
        started_at: Some(rfc3339(shared.supervisor.started_at())),
        last_activity: (shared.supervisor.history().last_activity()).map(rfc3339),
        watched: watched(shared),
        error: None,
    }
}

pub(super) fn last_reload(shared: &Server) -> Option<ReloadReport> {
    let event = shared.supervisor.history().last_reload()?;
    match &event.kind {
        omnidev_core::EventKind::Reloading { services, changes } => Some(ReloadReport {
            ts: rfc3339(event.at),
            services: services.clone(),
            changes: changes.clone(),
        }),
        _ => None,
    }
}

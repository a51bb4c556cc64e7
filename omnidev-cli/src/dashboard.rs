//! `omnidev dashboard`: every pod of this user in one browser page, served
//! on loopback. The page reads what `omnidev ls --json` and `omnidev
//! events --json` read (each running pod's records through its control
//! socket, with core's wording of each beside it) and asks the pods what
//! the CLI asks them; it holds no copy of states or wording.
//!
//! Safe on a shared machine: it listens on 127.0.0.1 only; every request
//! goes through one security layer (`guard`: the `Host`, the `Origin`,
//! the secret, never a cookie); the secret is new each time a dashboard
//! starts, is never sent to a port before that port proved it holds it
//! (`secret`), and is on no command line (`--open` hands the browser a
//! private file); strangers' connections cannot starve the owner's
//! (`door`); event streams are bounded (`stream`).

mod actions;
mod door;
mod guard;
mod page;
mod secret;
mod stream;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse as _, Response};
use axum::routing::{get, post};
use tower::ServiceExt as _;

use crate::cli::DashboardArgs;
use crate::error::Error;

/// Where a dashboard proves it holds the secret (see `secret`).
pub const PROVE_PATH: &str = "/api/prove";

/// How long a request's head may take to arrive.
const HEAD_WITHIN: Duration = Duration::from_secs(10);

/// How long the accept loop waits when the system has no descriptor for
/// a new connection (it would spin, retrying at once).
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// The largest action body read.
const MAX_BODY: usize = 16 * 1024;

/// Runs `omnidev dashboard` until interrupted.
pub fn run(args: &DashboardArgs) -> miette::Result<ExitCode> {
    crate::session::runtime(true)?.block_on(serve(args))
}

async fn serve(args: &DashboardArgs) -> miette::Result<ExitCode> {
    let cache_root = omnidev_pod::pod::cache_root().map_err(Error::Pod)?;
    let runtime_dir = omnidev_pod::runtime::runtime_dir();
    omnidev_pod::runtime::ensure_private(&runtime_dir).map_err(Error::Pod)?;
    let record = Served::read(&runtime_dir);
    if args.port == 0
        && let Some(served) = record.as_ref().filter(|r| r.pid != 0)
        && let Some(token) = secret::current(&runtime_dir)
        && secret::answers(served.port, &token)
    {
        // One dashboard a user: the one serving is the URL to use.
        note!("omnidev: a dashboard already serves this user (pid {})", served.pid);
        print_url(&runtime_dir, served.port, &token, args.open)?;
        return Ok(ExitCode::SUCCESS);
    }
    let token = secret::rotate(&runtime_dir)?;
    // The port of the last dashboard when it is free (the URL a browser
    // has stays good), else one the system picks.
    let wanted = match (args.port, &record) {
        (0, Some(record)) => record.port,
        (port, _) => port,
    };
    let listener = match tokio::net::TcpListener::bind(("127.0.0.1", wanted)).await {
        Err(_) if args.port == 0 => tokio::net::TcpListener::bind(("127.0.0.1", 0)).await,
        bound => bound,
    }
    .map_err(Error::io("listen on", format!("127.0.0.1:{wanted}")))?;
    let port = listener.local_addr().map_err(Error::io("listen on", "127.0.0.1"))?.port();
    let served = Served { port, pid: std::process::id() };
    served.write(&runtime_dir)?;
    print_url(&runtime_dir, port, &token, args.open)?;
    let (changed, _) = tokio::sync::watch::channel(());
    // Pods starting and stopping make and remove their sockets there.
    let _watcher = watch_runtime_dir(&runtime_dir, changed.clone());
    let app = router(
        Arc::new(Dashboard { token: token.clone(), cache_root, changed, allow_up: args.allow_up }),
        Arc::new(guard::Policy { token, port }),
    );
    let door = Arc::new(door::Door::default());
    let mut signals = omnidev_core::signals::ShutdownSignals::new().map_err(Error::Runtime)?;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((stream, _)) = accepted {
                    tokio::spawn(connection(stream, door.enter(), app.clone()));
                } else {
                    // Out of descriptors (or memory): a stranger makes
                    // room, and the next try waits instead of spinning.
                    door.close_oldest_stranger();
                    tokio::time::sleep(ACCEPT_PAUSE).await;
                }
            }
            _ = signals.recv() => {
                served.forget(&runtime_dir);
                return Ok(ExitCode::SUCCESS);
            }
        }
    }
}

/// Serves one connection until it ends, its head is late, or the door
/// closes it (a stranger that made room).
async fn connection(stream: tokio::net::TcpStream, visit: Arc<door::Visit>, app: Router) {
    let held = visit.clone();
    let service = hyper::service::service_fn(move |mut request: hyper::Request<_>| {
        // The security layer lets this connection in when it may.
        request.extensions_mut().insert(held.clone());
        app.clone().oneshot(request.map(axum::body::Body::new))
    });
    let serving = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEAD_WITHIN)
        .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
    tokio::select! {
        _ = serving => {}
        () = visit.closed() => {}
    }
}

/// Every route, behind the security layer (which answers a 404 or a 405
/// only to a request it lets through).
fn router(state: Arc<Dashboard>, policy: Arc<guard::Policy>) -> Router {
    Router::new()
        .route("/", get(page::page))
        .route("/api/pods", get(pods))
        .route("/api/pods/changes", get(changes))
        .route("/api/events", get(events))
        .route("/api/act", post(actions::act))
        .route(PROVE_PATH, get(prove))
        .fallback(|| async { text(StatusCode::NOT_FOUND, "no such page") })
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
        .layer(axum::middleware::from_fn_with_state(policy, guard::guard))
}

/// Prints the URL of the dashboard on `port` (and opens it).
fn print_url(runtime_dir: &Path, port: u16, token: &str, open_it: bool) -> miette::Result<()> {
    let url = format!("http://127.0.0.1:{port}/?token={token}");
    crate::output::write_stdout(&format!("dashboard {url}\n"))?;
    if open_it {
        open(&secret::open_file(runtime_dir, &url)?);
    }
    Ok(())
}

/// The file in the runtime dir that records where the user's dashboard
/// serves.
const SERVED_FILE: &str = "dashboard.json";

/// Where the user's dashboard serves: the port, kept for the next one,
/// and the pid serving it.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Served {
    port: u16,
    pid: u32,
}

impl Served {
    fn read(runtime_dir: &Path) -> Option<Self> {
        let bytes = omnidev_core::fs::read_file(&runtime_dir.join(SERVED_FILE), 4096).ok()??;
        serde_json::from_slice(&bytes).ok()
    }

    fn write(&self, runtime_dir: &Path) -> miette::Result<()> {
        let path = runtime_dir.join(SERVED_FILE);
        let text = serde_json::to_vec(self).unwrap_or_default();
        omnidev_core::fs::write_atomic(&path, &text).map_err(Error::io("write", &path))?;
        Ok(())
    }

    /// Removes the record while it is still this one's (the port stays
    /// for the next dashboard).
    fn forget(&self, runtime_dir: &Path) {
        if Self::read(runtime_dir).is_some_and(|r| r.pid == self.pid) {
            let stopped = Self { port: self.port, pid: 0 };
            let _ = stopped.write(runtime_dir);
        }
    }
}

/// Tells `changed` of every change under the runtime dir, where each
/// running pod has its control socket (nothing else changes there while
/// no pod starts or stops, so an idle dashboard does nothing). `None` when
/// it cannot be watched: pages then see pods come and go when they look
/// again.
fn watch_runtime_dir(
    dir: &Path,
    changed: tokio::sync::watch::Sender<()>,
) -> Option<notify::RecommendedWatcher> {
    use notify::Watcher as _;
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok_and(|e| !e.kind.is_access()) {
            changed.send_replace(());
        }
    })
    .ok()?;
    watcher.watch(dir, notify::RecursiveMode::Recursive).ok()?;
    Some(watcher)
}

/// Opens `page` (a private file that goes on to the URL) in the user's
/// browser (best effort: the URL is printed). The opener is waited for
/// on a thread of its own, so it leaves no zombie behind while the
/// dashboard runs.
fn open(page: &Path) {
    let program = if cfg!(target_os = "macos") { "open" } else { "xdg-open" };
    let spawned = std::process::Command::new(program)
        .arg(page)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    if let Ok(mut opener) = spawned {
        std::thread::spawn(move || opener.wait());
    }
}

/// What every route is served with.
struct Dashboard {
    token: String,
    cache_root: PathBuf,
    /// Changes when pods may have started or stopped.
    changed: tokio::sync::watch::Sender<()>,
    /// `up` of a stopped pod is offered (`--allow-up`).
    allow_up: bool,
}

/// `GET /api/prove?challenge=HEX`: the proof that this server holds the
/// secret (see `secret`).
async fn prove(State(state): State<Arc<Dashboard>>, Query(asked): Query<Challenge>) -> Response {
    let fits = (1..=128).contains(&asked.challenge.len())
        && asked.challenge.bytes().all(|b| b.is_ascii_hexdigit());
    if !fits {
        return text(StatusCode::BAD_REQUEST, "a challenge is 1 to 128 hex digits");
    }
    text(StatusCode::OK, &secret::proof(&state.token, &asked.challenge))
}

#[derive(serde::Deserialize)]
struct Challenge {
    challenge: String,
}

/// `GET /api/pods`: `omnidev ls --json`'s listing, and the branch each
/// pod's checkout has out (by the pod directory's name).
#[derive(serde::Serialize)]
struct Listing {
    list: crate::control::PodList,
    branches: std::collections::BTreeMap<String, String>,
}

async fn pods(State(state): State<Arc<Dashboard>>) -> Response {
    let listed = tokio::task::spawn_blocking(move || {
        let list = crate::control::list_pods(&state.cache_root)?;
        let branches: std::collections::BTreeMap<String, String> = (list.pods.iter())
            .filter_map(|pod| {
                let name = pod.pod_dir.file_name()?.to_string_lossy().into_owned();
                Some((name, omnidev_pod::root::branch(pod.repo.as_deref()?)?))
            })
            .collect();
        Ok::<_, Error>(Listing { list, branches })
    })
    .await;
    match listed {
        Ok(Ok(list)) => json(StatusCode::OK, &list),
        Ok(Err(error)) => text(StatusCode::INTERNAL_SERVER_ERROR, &error.to_string()),
        Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "the listing failed"),
    }
}

/// A pod, by its directory's name (decoded from the query: the page
/// percent-encodes it, as any name may need).
#[derive(serde::Deserialize)]
struct PodQuery {
    pod: String,
}

async fn events(State(state): State<Arc<Dashboard>>, Query(asked): Query<PodQuery>) -> Response {
    state.pod_named(&asked.pod).map_or_else(no_pod, stream::events)
}

async fn changes(State(state): State<Arc<Dashboard>>) -> Response {
    stream::changes(state.changed.subscribe())
}

impl Dashboard {
    /// The directory of the pod named `name`: a pod under the cache root,
    /// by its directory's name (nothing else: no path).
    fn pod_named(&self, name: &str) -> Option<PathBuf> {
        let plain = !name.is_empty() && Path::new(name).file_name() == Some(name.as_ref());
        let dir = self.cache_root.join(name);
        (plain && omnidev_pod::Pod::at(&dir).pod_toml().is_file()).then_some(dir)
    }
}

fn no_pod() -> Response {
    text(StatusCode::NOT_FOUND, "no such pod")
}

fn text(status: StatusCode, text: &str) -> Response {
    let mut response = (status, format!("{text}\n")).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

fn json(status: StatusCode, value: &impl serde::Serialize) -> Response {
    let mut response = (status, omnidev_core::text::json_line(value)).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_is_named_by_its_directory_under_the_cache_root_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = Dashboard {
            token: "ab".repeat(32),
            cache_root: dir.path().to_owned(),
            changed: tokio::sync::watch::channel(()).0,
            allow_up: false,
        };
        for name in ["repo-1234", "my app-1234", "café-1", "a@b+c%20-1"] {
            let pod = dir.path().join(name);
            std::fs::create_dir(&pod).expect("mkdir");
            std::fs::write(omnidev_pod::Pod::at(&pod).pod_toml(), "").expect("pod.toml");
            assert_eq!(state.pod_named(name), Some(pod), "{name}");
        }
        for bad in ["", "..", "../repo-1234", "/etc", "repo-1234/logs", "missing"] {
            assert_eq!(state.pod_named(bad), None, "{bad}");
        }
    }
}

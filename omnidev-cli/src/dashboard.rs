//! `omnidev dashboard`: every pod of this user in one browser page, served
//! on loopback. The page reads what `omnidev ls --json` and `omnidev
//! events --json` read (each running pod's records through its control
//! socket, with core's wording of each beside it) and asks the pods what
//! the CLI asks them; it holds no copy of states or wording.
//!
//! Safe on a shared machine: it listens on 127.0.0.1 only; every request
//! carries the user's secret (a cookie the URL sets, kept 0600 in the
//! runtime dir) and names this server as its `Host` (no DNS rebinding) and,
//! when it has one, as its `Origin` (no cross-site request); an action is
//! a POST carrying the secret in a header a form cannot set, never a GET.
//! Bounded: a page's event stream holds at most [`STREAM_BYTES`] waiting
//! for it; a page that stops reading is dropped (its browser reconnects
//! and the pod replays what it keeps).

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body as HttpBody, Bytes, Frame, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request as HttpRequest, Response as HttpResponse, StatusCode};
use tokio::sync::mpsc;

use crate::cli::DashboardArgs;
use crate::control::client::Line;
use crate::control::events::Record;
use crate::control::{Ask, CallConnection, Request};
use crate::error::Error;

/// The page, with the secret for its actions put in at `{{TOKEN}}`.
const PAGE: &str = include_str!("dashboard/page.html");

/// The file in the runtime dir that holds the user's secret.
const TOKEN_FILE: &str = "dashboard-token";

/// The cookie that carries the secret.
const COOKIE: &str = "omnidev-dashboard";

/// The header that carries the secret on an action.
const TOKEN_HEADER: &str = "x-omnidev-token";

/// Bytes a page's event stream holds while the page does not read (a
/// record longer than that is sent alone).
pub const STREAM_BYTES: usize = 1024 * 1024;

/// Connections served at once (each page holds one a pod it shows, and
/// one for the pod list); one beyond is closed unread.
const MAX_CONNECTIONS: usize = 256;

/// How long a request's head may take to arrive.
const HEAD_WITHIN: Duration = Duration::from_secs(10);

/// The largest action body read.
const MAX_BODY: usize = 16 * 1024;

/// How long an action lets the pod take (a restart waits for readiness).
const ACTION_WAIT: Duration = Duration::from_secs(300);

/// Runs `omnidev dashboard` until interrupted.
pub fn run(args: &DashboardArgs) -> miette::Result<ExitCode> {
    crate::session::runtime(true)?.block_on(serve(args))
}

async fn serve(args: &DashboardArgs) -> miette::Result<ExitCode> {
    let cache_root = omnidev_pod::pod::cache_root().map_err(Error::Pod)?;
    let runtime_dir = omnidev_pod::runtime::runtime_dir();
    omnidev_pod::runtime::ensure_private(&runtime_dir).map_err(Error::Pod)?;
    let token = token(&runtime_dir)?;
    let record = Served::read(&runtime_dir);
    if args.port == 0
        && let Some(served) = record.as_ref().filter(|r| answers(r.port, &token))
    {
        // One dashboard a user: the one serving is the URL to use.
        note!(
            "omnidev: a dashboard already serves this user (pid {})",
            served.pid
        );
        return print_url(served.port, &token, args.open);
    }
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
    let port = listener
        .local_addr()
        .map_err(Error::io("listen on", "127.0.0.1"))?
        .port();
    let served = Served {
        port,
        pid: std::process::id(),
    };
    served.write(&runtime_dir)?;
    print_url(port, &token, args.open)?;
    let (changed, _) = tokio::sync::watch::channel(());
    // Pods starting and stopping make and remove their sockets there.
    let _watcher = watch_runtime_dir(&runtime_dir, changed.clone());
    let state = Arc::new(Dashboard {
        token,
        port,
        cache_root,
        changed,
        allow_up: args.allow_up,
    });
    let mut signals = omnidev_core::signals::ShutdownSignals::new().map_err(Error::Runtime)?;
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(_) => continue,
            },
            _ = signals.recv() => {
                served.forget(&runtime_dir);
                return Ok(ExitCode::SUCCESS);
            }
        };
        // Beyond the connections served at once, one is closed unread.
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            continue;
        };
        let state = state.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(state.handle(request).await) }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            // A client that never finishes its request's head lets go.
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEAD_WITHIN)
                .serve_connection(io, service)
                .await;
            drop(slot);
        });
    }
}

/// Prints the URL of the dashboard on `port` (and opens it).
fn print_url(port: u16, token: &str, open_it: bool) -> miette::Result<ExitCode> {
    let url = format!("http://127.0.0.1:{port}/?token={token}");
    crate::output::write_stdout(&format!("dashboard {url}\n"))?;
    if open_it {
        open(&url);
    }
    Ok(ExitCode::SUCCESS)
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
            let stopped = Self {
                port: self.port,
                pid: 0,
            };
            let _ = stopped.write(runtime_dir);
        }
    }
}

/// Whether the dashboard of this user answers on `port`: only a server
/// that holds the user's secret lists the pods for it (a port someone
/// else took since is never trusted).
fn answers(port: u16, token: &str) -> bool {
    use std::io::{Read as _, Write as _};
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut stream) = std::net::TcpStream::connect_timeout(&address, Duration::from_secs(1))
    else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let asked = write!(
        stream,
        "GET /api/pods HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nCookie: {COOKIE}={token}\r\n\
         Connection: close\r\n\r\n"
    );
    let mut head = [0u8; 12];
    asked.is_ok() && stream.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 200")
}

/// The user's secret: the one in the runtime dir, or a new one written
/// there (0600, atomically).
fn token(runtime_dir: &Path) -> miette::Result<String> {
    let path = runtime_dir.join(TOKEN_FILE);
    let read = omnidev_core::fs::read_file(&path, 1024).map_err(Error::io("read", &path))?;
    if let Some(text) = read.and_then(|bytes| String::from_utf8(bytes).ok())
        && text.len() == 64
        && text.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return Ok(text);
    }
    let text = omnidev_pod::ids::random_hex(32).map_err(Error::io("make", "a secret"))?;
    omnidev_core::fs::write_atomic(&path, text.as_bytes()).map_err(Error::io("write", &path))?;
    Ok(text)
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

/// Opens `url` in the user's browser (best effort: the URL is printed).
/// The opener is waited for on a thread of its own, so it leaves no
/// zombie behind while the dashboard runs.
fn open(url: &str) {
    let program = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    let spawned = std::process::Command::new(program)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    if let Ok(mut opener) = spawned {
        std::thread::spawn(move || opener.wait());
    }
}

/// What every request is served with.
struct Dashboard {
    token: String,
    port: u16,
    cache_root: PathBuf,
    /// Changes when pods may have started or stopped.
    changed: tokio::sync::watch::Sender<()>,
    /// `up` of a stopped pod is offered (`--allow-up`).
    allow_up: bool,
}

/// `GET /api/pods`: `omnidev ls --json`'s listing, and the branch each
/// pod's checkout has out (by the pod directory's name).
#[derive(serde::Serialize)]
struct Listing {
    list: crate::control::PodList,
    branches: std::collections::BTreeMap<String, String>,
}

/// Why a request is refused (said in the 403's body).
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// Its `Host` is not this server (DNS rebinding).
    Host,
    /// Its `Origin` is another site.
    Origin,
    /// It carries no secret, or a wrong one.
    Token,
}

impl Dashboard {
    /// Whether `request` may be served: see the module docs.
    fn allowed<B>(&self, request: &HttpRequest<B>) -> Result<(), Refused> {
        let headers = request.headers();
        let ours = |value: &str, scheme: &str| {
            [
                format!("{scheme}127.0.0.1:{}", self.port),
                format!("{scheme}localhost:{}", self.port),
            ]
            .iter()
            .any(|own| own == value)
        };
        let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
        if !host.is_some_and(|host| ours(host, "")) {
            return Err(Refused::Host);
        }
        if let Some(origin) = headers.get(header::ORIGIN)
            && !origin.to_str().is_ok_and(|o| ours(o, "http://"))
        {
            return Err(Refused::Origin);
        }
        let given = if request.method() == Method::GET {
            query(request.uri().query(), "token").or_else(|| cookie(headers, COOKIE))
        } else {
            headers
                .get(TOKEN_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        if !given.is_some_and(|given| same(given.as_bytes(), self.token.as_bytes())) {
            return Err(Refused::Token);
        }
        Ok(())
    }

    async fn handle(self: Arc<Self>, request: HttpRequest<Incoming>) -> HttpResponse<Body> {
        if let Err(refused) = self.allowed(&request) {
            let why = match refused {
                Refused::Host => "this server answers to 127.0.0.1 and localhost only",
                Refused::Origin => "requests from other sites are refused",
                Refused::Token => {
                    "open the URL `omnidev dashboard` printed (it carries the secret)"
                }
            };
            return text(StatusCode::FORBIDDEN, why);
        }
        let path = request.uri().path().to_owned();
        match (request.method().clone(), path.as_str()) {
            (Method::GET, "/") if query(request.uri().query(), "token").is_some() => {
                // The secret moves from the URL to a cookie.
                let mut response = text(StatusCode::SEE_OTHER, "");
                let cookie = format!("{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict", self.token);
                let headers = response.headers_mut();
                headers.insert(header::LOCATION, HeaderValue::from_static("/"));
                if let Ok(cookie) = HeaderValue::from_str(&cookie) {
                    headers.insert(header::SET_COOKIE, cookie);
                }
                response
            }
            (Method::GET, "/") => {
                let page = PAGE
                    .replace("{{TOKEN}}", &self.token)
                    .replace("{{ALLOW_UP}}", if self.allow_up { "yes" } else { "no" });
                with_type(
                    HttpResponse::new(Body::whole(page)),
                    "text/html; charset=utf-8",
                )
            }
            (Method::GET, "/api/pods") => {
                let state = self.clone();
                let listed = tokio::task::spawn_blocking(move || {
                    let list = crate::control::list_pods(&state.cache_root)?;
                    let branches: std::collections::BTreeMap<String, String> = (list.pods.iter())
                        .filter_map(|pod| {
                            let name = pod.pod_dir.file_name()?.to_string_lossy().into_owned();
                            Some((name, branch(pod.repo.as_deref()?)?))
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
            (Method::GET, "/api/events") => {
                let name = query(request.uri().query(), "pod").unwrap_or_default();
                self.pod_named(&name).map_or_else(no_pod, events)
            }
            (Method::GET, "/api/pods/changes") => changes(self.changed.subscribe()),
            (Method::POST, "/api/act") => self.act(request).await,
            (_, "/api/act" | "/api/events" | "/api/pods" | "/api/pods/changes" | "/") => {
                text(StatusCode::METHOD_NOT_ALLOWED, "not with this method")
            }
            _ => text(StatusCode::NOT_FOUND, "no such page"),
        }
    }

    /// The directory of the pod named `name`: a pod under the cache root,
    /// by its directory's name (nothing else: no path).
    fn pod_named(&self, name: &str) -> Option<PathBuf> {
        let plain = !name.is_empty() && Path::new(name).file_name() == Some(name.as_ref());
        let dir = self.cache_root.join(name);
        (plain && omnidev_pod::Pod::at(&dir).pod_toml().is_file()).then_some(dir)
    }

    /// `POST /api/act` `{"pod", "action", "service"}`: what the CLI's
    /// `restart`, `stop`, `start`, `reload-profile` and `stop` (of the
    /// pod) ask; the pod's answer as it gives it.
    async fn act(&self, request: HttpRequest<Incoming>) -> HttpResponse<Body> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Act {
            pod: String,
            action: String,
            service: Option<String>,
        }
        let Some(bytes) = body(request.into_body(), MAX_BODY).await else {
            return text(StatusCode::PAYLOAD_TOO_LARGE, "at most 16 KiB");
        };
        let act: Act = match serde_json::from_slice(&bytes) {
            Ok(act) => act,
            Err(error) => return text(StatusCode::BAD_REQUEST, &error.to_string()),
        };
        let Some(pod_dir) = self.pod_named(&act.pod) else {
            return no_pod();
        };
        if act.action == "up" && act.service.is_none() {
            return self.up(pod_dir).await;
        }
        let services = act.service.clone().into_iter().collect::<Vec<_>>();
        let ask = match (act.action.as_str(), act.service) {
            ("restart", Some(service)) => Ask::restart(Some(service), false, false, ACTION_WAIT),
            ("stop", Some(_)) => Ask::stop(services, ACTION_WAIT),
            ("start", Some(_)) => Ask::start(services, ACTION_WAIT),
            ("stop", None) => Ask::stop_pod(),
            ("reload-profile", None) => Ask::reload_profile(ACTION_WAIT),
            _ => {
                return text(
                    StatusCode::BAD_REQUEST,
                    "actions: restart, stop, start (of a service), stop (of the pod), reload-profile, up",
                );
            }
        };
        match tokio::task::spawn_blocking(move || ask.send(&pod_dir)).await {
            Ok(Ok(response)) => json(StatusCode::OK, &response),
            Ok(Err(error)) => text(StatusCode::CONFLICT, &error.to_string()),
            Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "the action failed"),
        }
    }
}

impl Dashboard {
    /// `up` of the stopped pod in `pod_dir`: `omnidev up --detach` of its
    /// checkout, as MCP's `up` runs it; only with `--allow-up`.
    async fn up(&self, pod_dir: PathBuf) -> HttpResponse<Body> {
        if !self.allow_up {
            return text(
                StatusCode::FORBIDDEN,
                "`up` is offered only by `omnidev dashboard --allow-up`",
            );
        }
        let Ok(record) = omnidev_pod::read_ports(&pod_dir) else {
            return text(StatusCode::CONFLICT, "the pod records no checkout");
        };
        let pod = crate::cli::PodArgs {
            repo: record.repo,
            profile: None,
            pod_dir: Some(pod_dir),
        };
        let started = tokio::task::spawn_blocking(move || {
            crate::mcp::up_detached(&pod, ACTION_WAIT.as_secs(), &CallConnection::default())
        })
        .await;
        match started {
            Ok(Ok(outcome)) => json(StatusCode::OK, &outcome),
            Ok(Err(error)) => text(StatusCode::CONFLICT, &error.to_string()),
            Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "up failed"),
        }
    }
}

/// `GET /api/events?pod=NAME`: the pod's records as server-sent events,
/// each `{"text", "record"}` (core's wording, or the line as plain text,
/// beside the record of `events --json`), its status first and at each
/// change, every line of output; a stopped pod's stream ends at once.
fn events(pod_dir: PathBuf) -> HttpResponse<Body> {
    let (sender, receiver) = mpsc::unbounded_channel::<Bytes>();
    let held = Arc::new(AtomicUsize::new(0));
    let holding = held.clone();
    let hang_up = CallConnection::default();
    let connected = hang_up.clone();
    std::thread::spawn(move || {
        let Ok(records) = Ask::events(Request::everything(false)).stream(&pod_dir, true) else {
            return;
        };
        // A page that goes away hangs up on the pod at once, so a quiet
        // pod does not keep a follower's slot for it until its next record.
        if let Ok(connection) = records.hang_up_handle() {
            connected.keep(&connection);
        }
        if sender.is_closed() {
            return;
        }
        for line in records {
            let Line::Text(line) = line else { continue };
            let Ok(record) = serde_json::from_slice::<Record>(&line) else {
                continue;
            };
            let plain = |text: &str| omnidev_core::text::plain(text);
            let (text, states) = match &record.event.kind {
                // Colours kept, as the TUI shows them; no other control.
                omnidev_core::EventKind::Log { line } => (
                    omnidev_core::text::sanitise(&line.text, true).into_owned(),
                    None,
                ),
                omnidev_core::EventKind::Status { services } => (
                    String::new(),
                    Some(
                        (services.iter())
                            .map(|s| (s.name.clone(), plain(&s.state.to_string())))
                            .collect::<std::collections::BTreeMap<_, _>>(),
                    ),
                ),
                _ => (plain(&record.event.to_string()), None),
            };
            let value = serde_json::json!({ "text": text, "states": states, "record": record });
            let data = format!(
                "data: {}\n\n",
                omnidev_core::text::json_line(&value).trim_end()
            );
            // A page that does not read is dropped, never waited for.
            let waiting = holding.fetch_add(data.len(), Ordering::Relaxed);
            if (waiting > 0 && waiting + data.len() > STREAM_BYTES)
                || sender.send(Bytes::from(data)).is_err()
            {
                return;
            }
        }
    });
    let mut response = with_type(
        HttpResponse::new(Body::Stream(receiver, held, Some(hang_up))),
        "text/event-stream",
    );
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // A dropped stream ends its connection: the browser opens another.
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// `GET /api/pods/changes`: an event each time pods may have started or
/// stopped (at most every [`CHANGES_EVERY`]), for the page to list them
/// again; nothing while nothing changes.
fn changes(mut changed: tokio::sync::watch::Receiver<()>) -> HttpResponse<Body> {
    let (sender, receiver) = mpsc::unbounded_channel();
    let held = Arc::new(AtomicUsize::new(0));
    let holding = held.clone();
    tokio::spawn(async move {
        loop {
            // A page that goes away ends this at once, not at the next change.
            tokio::select! {
                () = sender.closed() => return,
                seen = changed.changed() => if seen.is_err() { return },
            }
            tokio::time::sleep(CHANGES_EVERY).await;
            changed.borrow_and_update();
            // One not read yet says as much.
            if holding.load(Ordering::Relaxed) > 0 {
                continue;
            }
            let data = Bytes::from_static(b"data: changed\n\n");
            holding.fetch_add(data.len(), Ordering::Relaxed);
            if sender.send(data).is_err() {
                return;
            }
        }
    });
    with_type(
        HttpResponse::new(Body::Stream(receiver, held, None)),
        "text/event-stream",
    )
}

/// How often the page is told to list the pods again, at most.
const CHANGES_EVERY: Duration = Duration::from_millis(250);

/// The branch checked out in `repo` (a worktree's too), or the commit
/// when it is detached; `None` when it cannot be read.
fn branch(repo: &Path) -> Option<String> {
    let git_dir = omnidev_pod::root::git_dir(repo)?;
    let head = omnidev_pod::root::short_text(&git_dir.join("HEAD"))?;
    let head = head.trim();
    Some(match head.strip_prefix("ref: refs/heads/") {
        Some(branch) => branch.to_owned(),
        None => head.chars().take(12).collect(),
    })
}

/// A response body: whole, or the chunks of a stream.
pub enum Body {
    /// All of it (taken once sent).
    Whole(Option<Bytes>),
    /// Chunks as they come, and the bytes sent and not yet taken; the
    /// end when the sender is gone. Dropped (the page went away, or its
    /// stream ended), it hangs up the pod connection the chunks come from.
    Stream(
        mpsc::UnboundedReceiver<Bytes>,
        Arc<AtomicUsize>,
        Option<CallConnection>,
    ),
}

impl Drop for Body {
    fn drop(&mut self) {
        if let Body::Stream(_, _, Some(hang_up)) = self {
            hang_up.hang_up();
        }
    }
}

impl Body {
    fn whole(text: impl Into<Bytes>) -> Self {
        Self::Whole(Some(text.into()))
    }
}

impl HttpBody for Body {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            Body::Whole(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Body::Stream(receiver, held, _) => receiver.poll_recv(cx).map(|bytes| {
                bytes.map(|bytes| {
                    held.fetch_sub(bytes.len(), Ordering::Relaxed);
                    Ok(Frame::data(bytes))
                })
            }),
        }
    }
}

/// The request body, when it is at most `max` bytes.
async fn body(mut incoming: Incoming, max: usize) -> Option<Vec<u8>> {
    let mut bytes = Vec::new();
    while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut incoming).poll_frame(cx)).await
    {
        if let Ok(data) = frame.ok()?.into_data() {
            bytes.extend_from_slice(&data);
            if bytes.len() > max {
                return None;
            }
        }
    }
    Some(bytes)
}

fn no_pod() -> HttpResponse<Body> {
    text(StatusCode::NOT_FOUND, "no such pod")
}

fn with_type(mut response: HttpResponse<Body>, kind: &'static str) -> HttpResponse<Body> {
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    response
}

fn text(status: StatusCode, text: &str) -> HttpResponse<Body> {
    let mut response = HttpResponse::new(Body::whole(format!("{text}\n")));
    *response.status_mut() = status;
    with_type(response, "text/plain; charset=utf-8")
}

fn json(status: StatusCode, value: &impl serde::Serialize) -> HttpResponse<Body> {
    let mut response = HttpResponse::new(Body::whole(omnidev_core::text::json_line(value)));
    *response.status_mut() = status;
    with_type(response, "application/json")
}

/// The value of `name` in a query string (`a=1&b=2`; no escapes: the
/// values it is asked for are hex and pod names).
fn query(query: Option<&str>, name: &str) -> Option<String> {
    query?
        .split('&')
        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
        .map(str::to_owned)
}

/// The value of the cookie `name`.
fn cookie(headers: &hyper::HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| pair.trim().strip_prefix(name)?.strip_prefix('='))
        .map(str::to_owned)
}

/// Whether `a` and `b` are equal, in a time that does not tell where they
/// differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> Dashboard {
        Dashboard {
            token: "ab".repeat(32),
            port: 4321,
            cache_root: PathBuf::from("/nonexistent"),
            changed: tokio::sync::watch::channel(()).0,
            allow_up: false,
        }
    }

    fn request(method: Method, uri: &str, headers: &[(&str, &str)]) -> HttpRequest<()> {
        let mut builder = HttpRequest::builder().method(method).uri(uri);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(()).expect("a request")
    }

    /// No secret, a wrong one, another Host or a foreign Origin: refused;
    /// an action's secret must come in its header, not in a cookie.
    #[test]
    fn requests_without_the_secret_or_from_elsewhere_are_refused() {
        let state = state();
        let token = state.token.clone();
        let cookie = format!("a=b; {COOKIE}={token}");
        let host = ("host", "127.0.0.1:4321");
        let get = |uri: &str, headers: &[(&str, &str)]| {
            state.allowed(&request(Method::GET, uri, headers))
        };
        assert_eq!(get("/", &[host]), Err(Refused::Token));
        assert_eq!(get("/?token=00", &[host]), Err(Refused::Token));
        assert_eq!(get(&format!("/?token={token}"), &[host]), Ok(()));
        assert_eq!(get("/api/pods", &[host, ("cookie", &cookie)]), Ok(()));
        assert_eq!(
            get(
                "/api/pods",
                &[("host", "localhost:4321"), ("cookie", &cookie)]
            ),
            Ok(())
        );
        // DNS rebinding: the browser names the attacker's host.
        assert_eq!(
            get(
                "/api/pods",
                &[("host", "evil.example:4321"), ("cookie", &cookie)]
            ),
            Err(Refused::Host)
        );
        assert_eq!(get("/api/pods", &[("cookie", &cookie)]), Err(Refused::Host));
        assert_eq!(
            get(
                "/api/pods",
                &[host, ("cookie", &cookie), ("origin", "http://evil.example")]
            ),
            Err(Refused::Origin)
        );
        assert_eq!(
            get(
                "/api/pods",
                &[
                    host,
                    ("cookie", &cookie),
                    ("origin", "http://127.0.0.1:4321")
                ]
            ),
            Ok(())
        );
        let post =
            |headers: &[(&str, &str)]| state.allowed(&request(Method::POST, "/api/act", headers));
        assert_eq!(post(&[host, ("cookie", &cookie)]), Err(Refused::Token));
        assert_eq!(post(&[host, (TOKEN_HEADER, &token)]), Ok(()));
        assert_eq!(post(&[host, (TOKEN_HEADER, "ab")]), Err(Refused::Token));
    }

    #[test]
    fn a_pod_is_named_by_its_directory_under_the_cache_root_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pod = dir.path().join("repo-1234");
        std::fs::create_dir(&pod).expect("mkdir");
        std::fs::write(omnidev_pod::Pod::at(&pod).pod_toml(), "").expect("pod.toml");
        let state = Dashboard {
            cache_root: dir.path().to_owned(),
            ..state()
        };
        assert_eq!(state.pod_named("repo-1234"), Some(pod));
        for bad in [
            "",
            "..",
            "../repo-1234",
            "/etc",
            "repo-1234/logs",
            "missing",
        ] {
            assert_eq!(state.pod_named(bad), None, "{bad}");
        }
    }

    #[test]
    fn queries_and_cookies() {
        assert_eq!(query(Some("pod=a&token=b"), "token").as_deref(), Some("b"));
        assert_eq!(query(Some("tokens=b"), "token"), None);
        let mut headers = hyper::HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("x=1; omnidev-dashboard=t"),
        );
        assert_eq!(cookie(&headers, COOKIE).as_deref(), Some("t"));
        assert!(same(b"abc", b"abc") && !same(b"abc", b"abd") && !same(b"ab", b"abc"));
    }
}

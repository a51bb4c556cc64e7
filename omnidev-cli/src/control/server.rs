//! The server side, run inside `omnidev up`: accepts connections on
//! `<pod>/control.sock` and answers requests from the supervisor's state.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use omnidev_core::spec::limits;
use omnidev_core::{ServiceState, ServiceStatus, Supervisor, Until, Waited};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::task::JoinHandle;

use super::events::Encoder;
use super::protocol::{
    ErrorKind, PodStatus, ReloadReport, Request, Response, SCHEMA, ServiceReport, UrlReport,
    WaitFor,
};
use super::retained::{self, Filter};
use crate::error::{Error, Result};
use omnidev_core::text::json_line;

/// How often a waiting request looks whether its client hung up (and
/// how long a failed `accept` pauses).
const POLL: Duration = Duration::from_millis(100);

/// How long `restart` waits for the restarted services before answering,
/// unless the request names its own limit.
const RESTART_DEADLINE: Duration = Duration::from_secs(300);

/// Longest request line accepted.
const MAX_REQUEST: u64 = 64 * 1024;
/// Connections served at once; one beyond them is told the pod is busy
/// and closed, so a flood can never exhaust the pod's descriptors.
const MAX_CONNECTIONS: usize = 256;
/// Of those, requests that wait (`wait-ready`, `restart`): a flood of
/// them leaves room for `status` and `stop`.
const MAX_WAITING: usize = 32;
/// Longest `wait-ready` answer time (the client's own limit is usually
/// shorter).
const WAIT_READY_DEADLINE: Duration = Duration::from_secs(3600);

/// How long a connected client has to send its request line (and to take
/// the answer; for `events`, each part of it).
const REQUEST_DEADLINE: Duration = Duration::from_secs(10);

/// `events` requests served at once (beside the waiting ones).
const MAX_FOLLOWING: usize = 32;

/// How long `wait` waits unless told.
const WAIT_DEADLINE: Duration = Duration::from_secs(600);

/// How long before a `wait --healthy-after-reload` request a reload may
/// have begun and still count: the reload of an edit made just before
/// `wait` may begin before the request arrives. Never one older than the
/// latest change the watcher has seen (core keeps that bar): two edits
/// within the lookback are judged on the second one's reload.
const RELOAD_LOOKBACK: Duration = Duration::from_secs(2);

/// How long a `wait --healthy-after-reload` request lets the watcher catch
/// up before anything is judged: the kernel queues the event of a file
/// saved just before the request at once, but the watcher's threads must
/// still read it to know its reload is coming (a client already connected,
/// as an MCP server is, can ask within microseconds of the save).
const WATCHER_CATCH_UP: Duration = Duration::from_millis(250);

/// What the server reports about its pod besides the supervisor's state.
#[derive(Debug, Clone, Default)]
pub struct ServerInfo {
    /// The pod directory (the pointer to the socket lives in it).
    pub pod_dir: PathBuf,
    /// Where the socket itself is served ([`super::serving_path`]).
    pub socket: PathBuf,
    /// The checkout.
    pub repo: PathBuf,
    /// The pod's ports and URLs, updated when a port moves.
    pub addresses: crate::session::SharedAddresses,
    /// The watched services: what `restart` without a service restarts
    /// (those of the profile applied last, when the pod follows its file:
    /// [`watched`]).
    pub watched: Vec<String>,
    /// The profile the pod runs and its file, for `reload-profile`.
    pub live: Option<Arc<crate::live_profile::LiveProfile>>,
}

impl ServerInfo {
    /// The information of a prepared pod, whose ports and URLs are
    /// `addresses`.
    pub fn of(
        prepared: &crate::session::PreparedPod,
        addresses: crate::session::SharedAddresses,
    ) -> Self {
        let socket = prepared.control_socket.clone();
        let watched = prepared.rendered.watched();
        Self {
            pod_dir: prepared.pod.dir().to_owned(),
            socket,
            repo: prepared.checkout.repo.clone(),
            addresses,
            watched,
            live: None,
        }
    }
}

/// A running control socket server. Dropping it stops serving and removes
/// the socket, its directory and the pointer to it.
#[derive(Debug)]
pub struct ControlServer {
    path: PathBuf,
    pointer: PathBuf,
    tasks: Vec<JoinHandle<()>>,
    /// The `events` slots: all free once every follower has finished.
    following: Arc<tokio::sync::Semaphore>,
}

struct Shared {
    info: ServerInfo,
    supervisor: Supervisor,
    /// Slots for requests that wait ([`MAX_WAITING`]).
    waiting: Arc<tokio::sync::Semaphore>,
    /// How long a client has to send its request and take the answer
    /// ([`REQUEST_DEADLINE`]; shorter in tests).
    request_deadline: Duration,
    /// Slots for `events` ([`MAX_FOLLOWING`]).
    following: Arc<tokio::sync::Semaphore>,
    /// Records of this pod.
    encoder: Encoder,
}

impl ControlServer {
    /// Listens on `info.socket` (its directory made 0700 first),
    /// replacing a socket left there by a previous run (the caller holds
    /// the pod lock, so no live server can own it), restricts it to the
    /// owner (mode 0600) and points `<pod>/control.sock` at it. `events`
    /// readers read the supervisor's history. Must be called inside a
    /// tokio runtime.
    pub fn start(info: ServerInfo, supervisor: Supervisor) -> Result<Self> {
        Self::start_with_deadline(info, supervisor, REQUEST_DEADLINE)
    }

    /// [`ControlServer::start`] with another request deadline (tests give
    /// a short one instead of waiting out the real one).
    pub(crate) fn start_with_deadline(
        info: ServerInfo,
        supervisor: Supervisor,
        request_deadline: Duration,
    ) -> Result<Self> {
        let path = info.socket.clone();
        let pointer = super::pointer_path(&info.pod_dir);
        let listen = |source| Error::Listen {
            path: path.clone(),
            source,
        };
        if let Some(dir) = path.parent() {
            omnidev_pod::runtime::ensure_private(dir)?;
        }
        remove_if_present(&path).map_err(listen)?;
        // The directory is 0700, so nobody else can reach the socket in the
        // instant before the chmod.
        let std_listener = std::os::unix::net::UnixListener::bind(&path).map_err(listen)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).map_err(listen)?;
        std_listener.set_nonblocking(true).map_err(listen)?;
        let listener = UnixListener::from_std(std_listener).map_err(listen)?;
        if pointer != path {
            point_at(&pointer, &path).map_err(|source| Error::Listen {
                path: pointer.clone(),
                source,
            })?;
        }

        let encoder = Encoder::new(&info.pod_dir);
        let following = Arc::new(tokio::sync::Semaphore::new(MAX_FOLLOWING));
        let shared = Arc::new(Shared {
            info,
            supervisor,
            waiting: Arc::new(tokio::sync::Semaphore::new(MAX_WAITING)),
            request_deadline,
            following: following.clone(),
            encoder,
        });
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        let acceptor = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    // Out of descriptors or similar: try again shortly.
                    tokio::time::sleep(POLL).await;
                    continue;
                };
                match slots.clone().try_acquire_owned() {
                    Ok(slot) => {
                        let shared = shared.clone();
                        tokio::spawn(async move {
                            serve(stream, shared).await;
                            drop(slot);
                        });
                    }
                    // Full: say so without waiting for anything, and hang
                    // up (a fresh socket's buffer takes the short answer).
                    Err(_) => {
                        let _ = stream.try_write(busy_answer().as_bytes());
                    }
                }
            }
        });
        Ok(Self {
            path,
            pointer,
            tasks: vec![acceptor],
            following,
        })
    }

    /// Stops serving once the pod has stopped: the `events -f` followers
    /// take what is left (the `ended` record last) and their streams end,
    /// before the socket goes (waiting at most [`FINISH_GRACE`]).
    pub async fn finish(self) {
        let all = u32::try_from(MAX_FOLLOWING).unwrap_or(u32::MAX);
        let _ = tokio::time::timeout(FINISH_GRACE, self.following.acquire_many(all)).await;
    }
}

/// How long [`ControlServer::finish`] waits for the followers to take the
/// last records.
const FINISH_GRACE: Duration = Duration::from_secs(2);

impl Drop for ControlServer {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        let _ = std::fs::remove_file(&self.path);
        if self.pointer != self.path {
            // Only the pointer to this server's socket: a newer one is not ours.
            if std::fs::read_link(&self.pointer).is_ok_and(|target| target == self.path) {
                let _ = std::fs::remove_file(&self.pointer);
            }
            if let Some(dir) = self.path.parent() {
                let _ = std::fs::remove_dir(dir);
            }
        }
    }
}

fn remove_if_present(path: &std::path::Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Makes `pointer` a symbolic link to `target`, replacing whatever file or
/// link is there by a rename (never writing through it).
fn point_at(pointer: &std::path::Path, target: &std::path::Path) -> std::io::Result<()> {
    let mut temp = pointer.as_os_str().to_owned();
    temp.push(format!(".{}.tmp", std::process::id()));
    let temp = PathBuf::from(temp);
    remove_if_present(&temp)?;
    std::os::unix::fs::symlink(target, &temp)?;
    std::fs::rename(&temp, pointer).inspect_err(|_| {
        let _ = std::fs::remove_file(&temp);
    })
}

fn busy_answer() -> String {
    json_line(&busy(MAX_CONNECTIONS))
}

fn busy(limit: usize) -> Response {
    Response::error(format!(
        "busy: {limit} requests are already being answered; try again"
    ))
}

/// Whether the client has closed its end completely (`POLLHUP`). A client
/// that only shut down its writing side still waits for the answer.
fn peer_gone(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let mut fds = [PollFd::new(fd, PollFlags::empty())];
    let ready = poll(&mut fds, PollTimeout::ZERO).unwrap_or(0);
    ready > 0
        && fds[0].revents().is_some_and(|revents| {
            revents.intersects(PollFlags::POLLHUP | PollFlags::POLLERR | PollFlags::POLLNVAL)
        })
}

/// Resolves once the client behind `fd` has hung up.
async fn hang_up(fd: std::os::fd::BorrowedFd<'_>) {
    loop {
        tokio::time::sleep(POLL).await;
        if peer_gone(fd) {
            return;
        }
    }
}

async fn serve(stream: UnixStream, shared: Arc<Shared>) {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(tokio::io::AsyncReadExt::take(read, MAX_REQUEST));
    let mut line = String::new();
    // A client that connects and never sends its request line must not
    // hold a task for the life of the pod.
    match tokio::time::timeout(shared.request_deadline, reader.read_line(&mut line)).await {
        Ok(Ok(_)) => {}
        Ok(Err(_)) | Err(_) => return,
    }
    let request = serde_json::from_str::<Request>(&line);
    let stop = matches!(request, Ok(Request::Stop));
    if let Ok(Request::Events {
        follow,
        services,
        logs,
        since_ms,
        since_reload,
        partial,
        status,
    }) = request
    {
        let filter = Filter {
            services,
            logs,
            since: since_ms
                .and_then(|ms| std::time::SystemTime::now().checked_sub(Duration::from_millis(ms))),
            since_reload,
            partial,
        };
        let fd = std::os::fd::AsFd::as_fd(reader.get_ref().get_ref().as_ref());
        let statuses = status.then(|| shared.supervisor.watch_status());
        stream_events(&shared, write, fd, filter, follow, statuses).await;
        retained::give_back_memory();
        return;
    }
    let response = match request {
        Ok(request @ (Request::Status | Request::Stop)) => answer(&shared, request).await,
        // A client that gives up (Ctrl-C on `up --detach`, a script's own
        // timeout) ends the wait: nothing stays behind per abandoned
        // request.
        Ok(request) => match shared.waiting.clone().try_acquire_owned() {
            Ok(_slot) => tokio::select! {
                response = answer(&shared, request) => response,
                () = hang_up(std::os::fd::AsFd::as_fd(reader.get_ref().get_ref().as_ref())) => return,
            },
            Err(_) => busy(MAX_WAITING),
        },
        Err(e) => Response::refused(ErrorKind::Usage, format!("not a request: {e}")),
    };
    let text = json_line(&response);
    let _ = tokio::time::timeout(shared.request_deadline, async {
        let _ = write.write_all(text.as_bytes()).await;
        let _ = write.shutdown().await;
    })
    .await;
    if stop {
        // The same path as a SIGTERM from a terminal: the front-end stops
        // the supervisor, then `omnidev up` exits and releases the lock.
        let _ = nix::sys::signal::kill(nix::unistd::Pid::this(), nix::sys::signal::SIGTERM);
    }
}

/// How a part of an `events` answer went out.
enum Sent {
    Done,
    /// The client is gone.
    Gone,
    /// The client did not take it within [`REQUEST_DEADLINE`].
    Stalled,
}

/// The next status of `statuses` once it changes; never when there is
/// none to follow (or the supervisor is gone).
async fn changed(
    statuses: &mut Option<tokio::sync::watch::Receiver<Vec<ServiceStatus>>>,
) -> Vec<ServiceStatus> {
    if let Some(watch) = statuses
        && watch.changed().await.is_ok()
    {
        return watch.borrow_and_update().clone();
    }
    std::future::pending().await
}

/// The `status` record of `services`, as a line.
fn status_line(shared: &Shared, services: Vec<ServiceStatus>) -> String {
    json_line(&shared.encoder.record(
        std::time::SystemTime::now(),
        None,
        omnidev_core::EventKind::Status { services },
    ))
}

/// Writes all of `buf` (emptying it as it goes out), giving up after
/// `limit`; what was not written stays in `buf`.
async fn send(
    write: &mut tokio::net::unix::OwnedWriteHalf,
    buf: &mut Vec<u8>,
    limit: Duration,
) -> Sent {
    let deadline = tokio::time::Instant::now() + limit;
    while !buf.is_empty() {
        // `write` is cancel-safe: on timeout nothing of this call was written.
        match tokio::time::timeout_at(deadline, write.write(buf)).await {
            Ok(Ok(0) | Err(_)) => return Sent::Gone,
            Ok(Ok(n)) => {
                buf.drain(..n);
            }
            Err(_) => return Sent::Stalled,
        }
    }
    Sent::Done
}

/// Answers `events`: an answer line, the kept records `filter` wants
/// (encoded a chunk at a time as the client takes them), then (with
/// `follow`) every new one until the pod stops or the client leaves;
/// with `statuses`, a `status` record once it has read the kept ones and
/// at each change. A follower reads through its own cursor: one that
/// falls behind what the pod keeps gets a `lost` record saying exactly
/// how many lines and records it missed, and goes on; one that takes
/// nothing for [`REQUEST_DEADLINE`] gets a last `lagged` record and is
/// closed. The pod never waits for a reader.
async fn stream_events(
    shared: &Shared,
    mut write: tokio::net::unix::OwnedWriteHalf,
    fd: std::os::fd::BorrowedFd<'_>,
    filter: Filter,
    follow: bool,
    mut statuses: Option<tokio::sync::watch::Receiver<Vec<ServiceStatus>>>,
) {
    let unknown = filter
        .services
        .iter()
        .find(|name| !shared.supervisor.service_names().contains(name));
    let answer = match (unknown, shared.following.clone().try_acquire_owned()) {
        (Some(name), _) => Err(unknown_service(shared, name)),
        (None, Err(_)) => Err(busy(MAX_FOLLOWING)),
        (None, Ok(slot)) => Ok(slot),
    };
    let _slot = match answer {
        Ok(slot) => slot,
        Err(response) => {
            let mut buf = json_line(&response).into_bytes();
            let _ = send(&mut write, &mut buf, shared.request_deadline).await;
            let _ = write.shutdown().await;
            return;
        }
    };
    let history = shared.supervisor.history();
    let (mut cursor, mut wake) = (filter.cursor(history, follow), history.wake());
    if let Some(watch) = &mut statuses {
        // The first status goes out once the kept records have, the next
        // at each change.
        watch.mark_changed();
    }
    let mut buf = json_line(&Response::accepted()).into_bytes();
    let lagged = loop {
        let chunk = filter.read(history, &mut cursor, &shared.encoder, &mut buf);
        match send(&mut write, &mut buf, shared.request_deadline).await {
            Sent::Done => {}
            Sent::Gone => return,
            Sent::Stalled => {
                break format!(
                    "this reader took nothing for {} s; the pod does not wait: run `omnidev events` again",
                    shared.request_deadline.as_secs_f64()
                );
            }
        }
        if chunk.done {
            let _ = write.shutdown().await;
            return;
        }
        if !chunk.any {
            tokio::select! {
                woken = wake.changed() => if woken.is_err() { return },
                now = changed(&mut statuses) => {
                    buf.extend_from_slice(status_line(shared, now).as_bytes());
                }
                () = hang_up(fd) => return,
            }
        }
    };
    let record = shared.encoder.record(
        std::time::SystemTime::now(),
        None,
        omnidev_core::EventKind::Lagged { message: lagged },
    );
    buf.extend_from_slice(json_line(&record).as_bytes());
    // A reader that paused gets the record when it reads again; one gone
    // for good holds its slot this long at most.
    let _ = send(&mut write, &mut buf, shared.request_deadline * 3).await;
    let _ = write.shutdown().await;
}

fn unknown_service(shared: &Shared, name: &str) -> Response {
    Response::refused(
        ErrorKind::UnknownService,
        format!(
            "unknown service `{name}` (known: {})",
            shared.supervisor.service_names().join(", ")
        ),
    )
}

async fn answer(shared: &Shared, request: Request) -> Response {
    match request {
        Request::Status | Request::Stop => Response::ok(status(shared), Vec::new()),
        // Answered by `stream_events`.
        Request::Events { .. } => Response::error("`events` is answered as a stream"),
        Request::Wait {
            until,
            services,
            timeout_secs,
        } => {
            let limit = match limit(timeout_secs, WAIT_DEADLINE) {
                Ok(limit) => limit,
                Err(refusal) => return *refusal,
            };
            let services = expand(shared, &services);
            if let Some(name) = services
                .iter()
                .find(|name| !shared.supervisor.service_names().contains(name))
            {
                return unknown_service(shared, name);
            }
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
            stop_services(shared, &expand(shared, &services)).await
        }
        Request::StartService {
            services,
            timeout_secs,
        } => match limit(timeout_secs, RESTART_DEADLINE) {
            Ok(limit) => start_services(shared, &expand(shared, &services), limit).await,
            Err(refusal) => *refusal,
        },
        Request::ReloadProfile { timeout_secs } => match limit(timeout_secs, RESTART_DEADLINE) {
            Ok(limit) => reload_profile(shared, limit).await,
            Err(refusal) => *refusal,
        },
        Request::Restart {
            service,
            all,
            no_deps,
            timeout_secs,
        } => {
            let limit = match limit(timeout_secs, RESTART_DEADLINE) {
                Ok(limit) => limit,
                Err(refusal) => return *refusal,
            };
            let target = match service {
                Some(_) if all => {
                    return Response::refused(
                        ErrorKind::Usage,
                        "`all` and `service` exclude each other",
                    );
                }
                _ if all => Target::All,
                Some(name) => match expand(shared, std::slice::from_ref(&name)).as_slice() {
                    [one] => Target::Service(one.clone(), !no_deps),
                    copies => Target::Replicas(copies.to_vec(), !no_deps),
                },
                None => Target::Watched,
            };
            restart(shared, target, limit).await
        }
    }
}

/// A request's `timeout-secs` (`default` when absent), refused beyond the
/// maximum: a larger value would overflow the deadline's `Instant`.
fn limit(
    timeout_secs: Option<u64>,
    default: Duration,
) -> std::result::Result<Duration, Box<Response>> {
    let limit = timeout_secs.map_or(default, Duration::from_secs);
    if limit > limits::MAX_REQUEST_TIMEOUT {
        return Err(Box::new(Response::refused(
            ErrorKind::Usage,
            format!(
                "`timeout-secs` is {}; it must be at most {}",
                limit.as_secs(),
                limits::MAX_REQUEST_TIMEOUT.as_secs()
            ),
        )));
    }
    Ok(limit)
}

/// Stops `services`, answering once each one's processes are gone.
async fn stop_services(shared: &Shared, services: &[String]) -> Response {
    if let Some(refusal) = check_services(shared, services) {
        return refusal;
    }
    for name in services {
        if let Err(e) = shared.supervisor.stop_service(name).await {
            return Response::error(e.to_string());
        }
    }
    Response::ok(status(shared), Vec::new())
}

/// Starts `services`, answering once each is ready or one failed.
async fn start_services(shared: &Shared, services: &[String], limit: Duration) -> Response {
    if let Some(refusal) = check_services(shared, services) {
        return refusal;
    }
    let deadline = tokio::time::Instant::now() + limit;
    let waited = shared
        .supervisor
        .start_until_ready(services, deadline)
        .await;
    outcome(shared, waited, |_| {
        format!(
            "{} not ready within {} s",
            services.join(", "),
            limit.as_secs()
        )
    })
}

/// The services `names` stand for: each one itself, except a service
/// that runs as replicas, which stands for them all (`web` → `web.1`,
/// `web.2`, in order). An unknown name stays, to be refused by its caller.
fn expand(shared: &Shared, names: &[String]) -> Vec<String> {
    let running = shared.supervisor.service_names();
    names
        .iter()
        .flat_map(|name| {
            let copies = omnidev_pod::names::replicas_among(name, &running);
            if running.contains(name) || copies.is_empty() {
                vec![name.clone()]
            } else {
                copies.into_iter().cloned().collect()
            }
        })
        .collect()
}

/// A refusal when `services` is empty, or names a service badly or one
/// the pod does not have.
fn check_services(shared: &Shared, services: &[String]) -> Option<Response> {
    if services.is_empty() {
        return Some(Response::refused(ErrorKind::Usage, "no service named"));
    }
    for name in services {
        if let Err(message) = omnidev_pod::names::check_service(name) {
            return Some(Response::refused(ErrorKind::Usage, message));
        }
        if !shared.supervisor.service_names().contains(name) {
            return Some(unknown_service(shared, name));
        }
    }
    None
}

/// The watched services of the profile the pod runs now (a
/// `reload-profile` may have added or removed some).
fn watched(shared: &Shared) -> Vec<String> {
    shared
        .info
        .live
        .as_ref()
        .map_or_else(|| shared.info.watched.clone(), |live| live.watched())
}

/// What `restart` restarts.
enum Target {
    /// The services with watch rules (every one when none has).
    Watched,
    /// One service; its dependents follow unless the flag is false.
    Service(String, bool),
    /// A service's replicas, one after another (each ready before the
    /// next stops): the service keeps answering throughout.
    Replicas(Vec<String>, bool),
    /// Every service, as one reload.
    All,
}

/// Restarts `target` and answers once it is ready again.
async fn restart(shared: &Shared, target: Target, limit: Duration) -> Response {
    let names = match &target {
        Target::All => shared.supervisor.service_names(),
        Target::Service(name, _) => {
            if let Err(message) = omnidev_pod::names::check_service(name) {
                return Response::refused(ErrorKind::Usage, message);
            }
            vec![name.clone()]
        }
        Target::Replicas(copies, _) => copies.clone(),
        Target::Watched => watched(shared),
    };
    if let Some(unknown) = names
        .iter()
        .find(|name| !shared.supervisor.service_names().contains(name))
    {
        return unknown_service(shared, unknown);
    }
    let deadline = tokio::time::Instant::now() + limit;
    let dependents = !matches!(
        target,
        Target::Service(_, false) | Target::Replicas(_, false)
    );
    // Replicas one at a time, the next only once this one is ready again;
    // anything else at once, as one reload.
    let batches: Vec<&[String]> = if matches!(target, Target::Replicas(..)) {
        names.chunks(1).collect()
    } else {
        vec![names.as_slice()]
    };
    let mut waited = Ok(Waited::Met);
    for batch in batches {
        waited = shared
            .supervisor
            .restart_until_ready_with(batch, dependents, deadline)
            .await;
        if !matches!(waited, Ok(Waited::Met)) {
            break;
        }
    }
    outcome(shared, waited, |_| {
        format!(
            "{} not ready again within {} s",
            names.join(", "),
            limit.as_secs()
        )
    })
}

/// Applies the profile file and answers once what it restarted and
/// started is ready again (or one failed); an invalid file is refused with
/// its error, the pod running on.
async fn reload_profile(shared: &Shared, limit: Duration) -> Response {
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
            let names: Vec<String> = applied
                .restarted
                .iter()
                .chain(&applied.started)
                .cloned()
                .collect();
            let mut response = outcome(shared, Ok(waited), |_| {
                format!(
                    "{} not ready within {} s of applying the profile",
                    names.join(", "),
                    limit.as_secs()
                )
            });
            response.applied = Some(applied);
            response
        }
    }
}

/// Waits until `until` holds for `services` (all when empty): the
/// answer's `failed` names the services that failed instead.
async fn wait(shared: &Shared, until: WaitFor, services: &[String], limit: Duration) -> Response {
    let asked = std::time::SystemTime::now();
    let deadline = tokio::time::Instant::now() + limit;
    let supervisor = &shared.supervisor;
    let waited = match until {
        WaitFor::Ready => supervisor.wait(services, Until::Ready, deadline).await,
        WaitFor::Exited => supervisor.wait(services, Until::Exited, deadline).await,
        WaitFor::HealthyAfterReload => {
            let after = asked.checked_sub(RELOAD_LOOKBACK).unwrap_or(asked);
            tokio::time::sleep(WATCHER_CATCH_UP).await;
            supervisor
                .wait_healthy_after_reload(services, after, deadline)
                .await
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
        let names = if services.is_empty() {
            "the pod".to_owned()
        } else {
            services.join(", ")
        };
        format!("{names}: {what} within {} s", limit.as_secs())
    })
}

/// The answer to a wait that ended with `waited`: the pod's status and
/// the services that failed, or the error `late` words for a wait that
/// did not end in time.
fn outcome(
    shared: &Shared,
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

fn status(shared: &Shared) -> PodStatus {
    let info = &shared.info;
    let snapshot = shared.supervisor.snapshot();
    let statuses: Vec<ServiceStatus> = if snapshot.is_empty() {
        // Before the supervisor's first status: every service waits.
        shared
            .supervisor
            .service_names()
            .iter()
            .map(|name| ServiceStatus::new(name, ServiceState::Waiting))
            .collect()
    } else {
        snapshot.clone()
    };
    let addresses = info
        .addresses
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
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
        services: statuses
            .into_iter()
            .map(|status| {
                let log_file = shared.supervisor.log_file(&status.name).ok().flatten();
                ServiceReport::new(status, log_file)
            })
            .collect(),
        last_reload: last_reload(shared),
        watched: watched(shared),
        error: None,
    }
}

fn last_reload(shared: &Shared) -> Option<ReloadReport> {
    let event = shared.supervisor.history().last_reload()?;
    match &event.kind {
        omnidev_core::EventKind::Reloading { services, changes } => Some(ReloadReport {
            ts: super::events::rfc3339(event.at),
            services: services.clone(),
            files: changes.paths.clone(),
            files_total: changes.total,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use omnidev_core::{RestartPolicy, ServiceSpec, SupervisorConfig};
    use tokio::io::AsyncReadExt;

    use super::*;

    /// A supervisor of one idle `sleep` service and a control server for it
    /// in `dir`; `watched` lists the services `restart` with no name acts on.
    async fn idle_pod(
        dir: &std::path::Path,
        restart: RestartPolicy,
        watched: Vec<String>,
    ) -> (Supervisor, ControlServer) {
        idle_pod_with_deadline(dir, restart, watched, REQUEST_DEADLINE).await
    }

    async fn idle_pod_with_deadline(
        dir: &std::path::Path,
        restart: RestartPolicy,
        watched: Vec<String>,
        request_deadline: Duration,
    ) -> (Supervisor, ControlServer) {
        let mut idle = ServiceSpec::new("idle", "sleep", ["1000"], dir);
        idle.restart = restart;
        let supervisor = Supervisor::builder(SupervisorConfig {
            services: vec![idle],
            ..SupervisorConfig::default()
        })
        .expect("a valid graph")
        .run()
        .await
        .expect("supervisor");
        let info = ServerInfo {
            pod_dir: dir.to_path_buf(),
            socket: dir.join("run/control.sock"),
            repo: dir.to_path_buf(),
            addresses: crate::session::SharedAddresses::default(),
            watched,
            live: None,
        };
        let server = ControlServer::start_with_deadline(info, supervisor.clone(), request_deadline)
            .expect("server");
        (supervisor, server)
    }

    #[tokio::test]
    async fn a_silent_client_is_disconnected() {
        let dir = tempfile::tempdir().expect("tempdir");
        // An injected 200 ms deadline instead of the real 10 s one.
        let deadline = Duration::from_millis(200);
        let (supervisor, server) =
            idle_pod_with_deadline(dir.path(), RestartPolicy::Never, Vec::new(), deadline).await;
        let mut client = UnixStream::connect(super::super::socket_path(dir.path()))
            .await
            .expect("connect");
        // The server hangs up well before this generous wait ends.
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(REQUEST_DEADLINE * 3, client.read(&mut byte)).await;
        assert!(
            matches!(read, Ok(Ok(0))),
            "the server must hang up on a client that sends nothing: {read:?}"
        );
        drop(server);
        supervisor.shutdown().await.expect("shutdown");
    }

    #[tokio::test]
    async fn a_restart_timeout_beyond_the_maximum_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (supervisor, server) =
            idle_pod(dir.path(), RestartPolicy::default(), vec!["idle".into()]).await;
        let pid = || {
            supervisor
                .snapshot()
                .first()
                .and_then(omnidev_core::ServiceStatus::pid)
        };
        while pid().is_none() {
            tokio::time::sleep(POLL).await;
        }
        let before = pid();
        for timeout in [u64::MAX, limits::MAX_REQUEST_TIMEOUT.as_secs() + 1] {
            let mut client = UnixStream::connect(super::super::socket_path(dir.path()))
                .await
                .expect("connect");
            let line = format!("{{\"cmd\":\"restart\",\"timeout-secs\":{timeout}}}\n");
            client.write_all(line.as_bytes()).await.expect("send");
            let mut answer = String::new();
            tokio::time::timeout(REQUEST_DEADLINE, client.read_to_string(&mut answer))
                .await
                .expect("answered at once")
                .expect("read");
            let response: Response = serde_json::from_str(&answer).expect("response");
            assert!(!response.ok, "{answer}");
            let error = response.error.unwrap_or_default();
            assert!(error.contains("at most 86400"), "{error}");
        }
        // Refused before anything was restarted.
        assert_eq!(pid(), before);
        drop(server);
        supervisor.shutdown().await.expect("shutdown");
    }

    /// Sends `line` to the pod in `dir` and reads the whole answer.
    async fn ask(dir: &std::path::Path, line: &str) -> String {
        let mut client = UnixStream::connect(super::super::socket_path(dir))
            .await
            .expect("connect");
        client.write_all(line.as_bytes()).await.expect("send");
        let mut answer = String::new();
        tokio::time::timeout(REQUEST_DEADLINE * 3, client.read_to_string(&mut answer))
            .await
            .expect("answered")
            .expect("read");
        answer
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_follower_that_stops_reading_gets_lagged_and_the_pod_goes_on() {
        let dir = tempfile::tempdir().expect("tempdir");
        // About 500 lines of 2 KB a second: a paused reader's socket
        // fills at once, a reading one keeps up easily.
        let line = "x".repeat(2000);
        let chatty = ServiceSpec::new(
            "chatty",
            "sh",
            ["-c", &format!("while :; do echo {line}; sleep 0.002; done")],
            dir.path(),
        );
        let supervisor = Supervisor::builder(SupervisorConfig {
            services: vec![chatty],
            ..SupervisorConfig::default()
        })
        .expect("a valid graph")
        .run()
        .await
        .expect("supervisor");
        let info = ServerInfo {
            pod_dir: dir.path().to_path_buf(),
            socket: dir.path().join("run/control.sock"),
            repo: dir.path().to_path_buf(),
            addresses: crate::session::SharedAddresses::default(),
            watched: Vec::new(),
            live: None,
        };
        // An injected 1 s deadline instead of the real 10 s one.
        let server =
            ControlServer::start_with_deadline(info, supervisor.clone(), Duration::from_secs(1))
                .expect("server");
        let pid = || {
            supervisor
                .snapshot()
                .first()
                .and_then(omnidev_core::ServiceStatus::pid)
        };
        while pid().is_none() {
            tokio::time::sleep(POLL).await;
        }
        let before = pid();
        let follow = "{\"cmd\":\"events\",\"follow\":true,\"logs\":true}\n";
        let socket = super::super::socket_path(dir.path());
        let mut slow = UnixStream::connect(&socket).await.expect("connect");
        slow.write_all(follow.as_bytes()).await.expect("send");
        // A reader that keeps up, beside it.
        let mut fast = UnixStream::connect(&socket).await.expect("connect");
        fast.write_all(follow.as_bytes()).await.expect("send");
        let read_fast = tokio::spawn(async move {
            let mut reader = BufReader::new(fast);
            let mut count = 0usize;
            let mut text = String::new();
            while count < 2500 {
                text.clear();
                match reader.read_line(&mut text).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => count += 1,
                }
            }
            count
        });
        // The slow reader reads nothing for a while: the pod goes on.
        tokio::time::sleep(Duration::from_secs(4)).await;
        let status = ask(dir.path(), "{\"cmd\":\"status\"}\n").await;
        assert!(status.contains("\"ok\":true"), "{status}");
        assert_eq!(pid(), before, "the service kept running");
        // Reading again, it gets what was sent, then `lagged`, then the end.
        let mut reader = BufReader::new(slow);
        let mut last = String::new();
        let mut text = String::new();
        loop {
            text.clear();
            let read = tokio::time::timeout(REQUEST_DEADLINE * 3, reader.read_line(&mut text))
                .await
                .expect("the slow reader is closed, not left hanging")
                .expect("read");
            if read == 0 {
                break;
            }
            last.clone_from(&text);
        }
        let record: super::super::events::Record =
            serde_json::from_str(&last).expect("the last line is a record");
        assert!(
            matches!(record.event.kind, omnidev_core::EventKind::Lagged { .. }),
            "the last record says it lagged: {last}"
        );
        // The other reader was not dropped with it.
        let count = tokio::time::timeout(REQUEST_DEADLINE * 6, read_fast)
            .await
            .expect("the fast reader keeps receiving")
            .expect("task");
        assert_eq!(count, 2500, "the fast reader kept receiving");
        assert_eq!(pid(), before);
        drop(server);
        supervisor.shutdown().await.expect("shutdown");
    }
}

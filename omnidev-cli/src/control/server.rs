//! The server side, run inside `omnidev up`: accepts connections on
//! `<pod>/control.sock` and answers requests from the supervisor's state.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use omnidev_core::Supervisor;
use tokio::net::UnixListener;
use tokio::task::JoinHandle;

use super::events::Encoder;
use crate::error::{Error, Result};

mod conn;
mod handlers;

use conn::{busy_answer, serve};

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
    /// [`watched`](handlers::watched)).
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
        Self {
            pod_dir: prepared.pod.dir().to_owned(),
            socket: prepared.control_socket.clone(),
            repo: prepared.checkout.repo.clone(),
            addresses,
            watched: prepared.rendered.watched(),
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
    acceptor: JoinHandle<()>,
    /// The `events` slots: all free once every follower has finished.
    following: Arc<tokio::sync::Semaphore>,
}

/// What every connection of the server shares: the pod's supervisor and
/// what it reports, and the bounds on connections and waits.
struct Server {
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
        let listen = |source| Error::Listen { path: path.clone(), source };
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
            super::point_at(&pointer, &path)
                .map_err(|source| Error::Listen { path: pointer.clone(), source })?;
        }

        let encoder = Encoder::new(&info.pod_dir);
        let following = Arc::new(tokio::sync::Semaphore::new(MAX_FOLLOWING));
        let shared = Arc::new(Server {
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
        Ok(Self { path, pointer, acceptor, following })
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
        self.acceptor.abort();
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
    omnidev_core::fs::found(std::fs::remove_file(path)).map(drop)
}

#[cfg(test)]
mod tests {
    use omnidev_core::spec::limits;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    use tokio::net::UnixStream;

    use crate::control::protocol::Response;
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
        let mut client =
            UnixStream::connect(super::super::socket_path(dir.path())).await.expect("connect");
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
        let pid = || supervisor.snapshot().first().and_then(omnidev_core::ServiceStatus::pid);
        while pid().is_none() {
            tokio::time::sleep(POLL).await;
        }
        let before = pid();
        for timeout in [u64::MAX, limits::MAX_REQUEST_TIMEOUT.as_secs() + 1] {
            let mut client =
                UnixStream::connect(super::super::socket_path(dir.path())).await.expect("connect");
            let line = format!("{{\"cmd\":\"restart\",\"timeout-secs\":{timeout}}}\n");
            client.write_all(line.as_bytes()).await.expect("send");
            let mut answer = String::new();
            tokio::time::timeout(REQUEST_DEADLINE, client.read_to_string(&mut answer))
                .await
                .expect("answered at once")
                .expect("read");
            let response: Response = serde_json::from_str(&answer).expect("response");
            let Response::Refused(refusal) = response else { panic!("not refused: {answer}") };
            assert!(refusal.message.contains("at most 86400"), "{}", refusal.message);
        }
        // Refused before anything was restarted.
        assert_eq!(pid(), before);
        drop(server);
        supervisor.shutdown().await.expect("shutdown");
    }

    /// Sends `line` to the pod in `dir` and reads the whole answer.
    async fn ask(dir: &std::path::Path, line: &str) -> String {
        let mut client =
            UnixStream::connect(super::super::socket_path(dir)).await.expect("connect");
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
        let pid = || supervisor.snapshot().first().and_then(omnidev_core::ServiceStatus::pid);
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

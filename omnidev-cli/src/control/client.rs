//! The synchronous client side: one request, one response, with timeouts,
//! so a command never hangs on a pod that does not answer. Every line
//! taken from a pod's socket (an answer, a record) is cut by [`Lines`],
//! at most [`MAX_LINE_BYTES`] each.

use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use omnidev_core::sync::Locked;
use tokio_util::bytes::BytesMut;
use tokio_util::codec::{AnyDelimiterCodec, Decoder as _};

use super::protocol::{Completed, ErrorKind, Refusal, Request, Response};
use crate::error::{Error, Result};

/// Longest line taken from a pod's socket: a 64 KiB log line (the
/// supervisor splits longer ones) of control bytes is six times that as
/// JSON; a longer line is skipped whole, never held.
pub const MAX_LINE_BYTES: usize = 1024 * 1024;

/// Bytes read from the socket at a time.
pub const READ_CHUNK: usize = 64 * 1024;

/// One line off the socket.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A whole line, without its newline.
    Text(Vec<u8>),
    /// A line longer than [`MAX_LINE_BYTES`], skipped.
    TooLong,
}

/// What was read off a socket and not taken yet, cut into lines by
/// tokio-util's delimiter codec: at most one unfinished line of
/// [`MAX_LINE_BYTES`] (a longer one is [`Line::TooLong`] as soon as it
/// is, and dropped as it comes up to its newline) and what a read added
/// after it.
#[derive(Debug)]
pub struct Lines {
    codec: AnyDelimiterCodec,
    pending: BytesMut,
}

impl Default for Lines {
    fn default() -> Self {
        Self {
            codec: AnyDelimiterCodec::new_with_max_length(
                b"\n".to_vec(),
                Vec::new(),
                MAX_LINE_BYTES,
            ),
            pending: BytesMut::new(),
        }
    }
}

impl Lines {
    /// Adds what was read.
    pub fn add(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
    }

    /// A line already read, if one is whole (or is known too long).
    pub fn take(&mut self) -> Option<Line> {
        match self.codec.decode(&mut self.pending) {
            Ok(Some(line)) => Some(Line::Text(line.to_vec())),
            Ok(None) => None,
            Err(_) => Some(Line::TooLong),
        }
    }
}

/// The lines of a connection to a pod, each at most [`MAX_LINE_BYTES`]
/// (as an iterator: until the stream ends or a read fails, an unfinished
/// last line dropped).
#[derive(Debug)]
pub struct Records {
    stream: UnixStream,
    lines: Lines,
    chunk: Box<[u8]>,
}

impl Records {
    /// The next line; `None` at the end of the stream (an unfinished last
    /// line is dropped: the pod went away in the middle of it).
    ///
    /// # Errors
    ///
    /// A read that failed or timed out.
    pub fn read(&mut self) -> std::io::Result<Option<Line>> {
        loop {
            if let Some(line) = self.lines.take() {
                return Ok(Some(line));
            }
            match self.stream.read(&mut self.chunk) {
                Ok(0) => return Ok(None),
                Ok(n) => self.lines.add(&self.chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// A handle on the connection, to hang it up from another thread (a
    /// read blocked on it then ends).
    pub fn hang_up_handle(&self) -> std::io::Result<UnixStream> {
        self.stream.try_clone()
    }

    /// The connection and what was read of it and not taken yet.
    pub fn into_parts(self) -> (UnixStream, Lines) {
        (self.stream, self.lines)
    }
}

impl Iterator for Records {
    type Item = Line;

    fn next(&mut self) -> Option<Line> {
        self.read().ok().flatten()
    }
}

/// How much longer than the time a request gives the pod its answer may
/// take: the pod answers with an error once its own time has passed, and
/// that answer must still arrive.
const ANSWER_MARGIN: Duration = Duration::from_secs(5);

/// How long a pod has to answer what it answers at once (its status, a
/// stop): one that takes longer is stuck, and `status` falls back to its
/// files.
const QUICK_ANSWER: Duration = Duration::from_secs(5);

/// How long a pod has to answer an `events` request and, without
/// `follow`, to send each part of what it kept.
const STREAM_ANSWER: Duration = Duration::from_secs(15);

/// One request to a running pod and the time its answer may take: made
/// here for every front-end (the commands, MCP, attach), so a request's
/// time limit and the read that waits for its answer are decided once.
#[derive(Debug, Clone)]
pub struct Ask {
    request: Request,
    within: Duration,
}

/// What a restart restarts: a service and its dependents
/// ([`RestartScope::service`]), the watched services (the default), every
/// service (`all`), or a service alone (`no_deps`).
#[derive(Debug, Clone, Default)]
pub struct RestartScope {
    /// The service; the watched services when absent.
    pub service: Option<String>,
    /// Every service, as one reload.
    pub all: bool,
    /// The service alone: its dependents keep running.
    pub no_deps: bool,
}

impl RestartScope {
    /// `service`, its dependents once it is ready again.
    pub fn service(name: String) -> Self {
        Self { service: Some(name), ..Self::default() }
    }
}

impl Ask {
    /// The pod's status.
    pub fn status() -> Self {
        Self::quick(Request::Status)
    }

    /// Stop the pod (answered once it has begun to stop).
    pub fn stop_pod() -> Self {
        Self::quick(Request::Stop)
    }

    /// Restart `service` (its dependents follow unless `no_deps`), every
    /// service with `all`, else the watched ones; the pod gives it
    /// `timeout` to be ready again.
    pub fn restart(what: RestartScope, timeout: Duration) -> Self {
        let RestartScope { service, all, no_deps } = what;
        Self::waiting(
            Request::Restart { service, all, no_deps, timeout_secs: Some(timeout.as_secs()) },
            timeout,
        )
    }

    /// Start `services`, each given `timeout` to be ready.
    pub fn start(services: Vec<String>, timeout: Duration) -> Self {
        Self::waiting(
            Request::StartService { services, timeout_secs: Some(timeout.as_secs()) },
            timeout,
        )
    }

    /// Stop `services` (answered once their processes are gone, which
    /// their grace bounds: waited for up to `timeout`).
    pub fn stop(services: Vec<String>, timeout: Duration) -> Self {
        Self::waiting(Request::StopService { services }, timeout)
    }

    /// Wait `timeout` at most until `until` holds for `services`.
    pub fn wait(until: super::protocol::WaitFor, services: Vec<String>, timeout: Duration) -> Self {
        Self::waiting(
            Request::Wait { until, services, timeout_secs: Some(timeout.as_secs()) },
            timeout,
        )
    }

    /// Wait until every service is ready, or `left` runs out here (the pod
    /// answers on its own deadline, at most every few seconds).
    pub fn wait_ready(left: Duration) -> Self {
        Self { request: Request::WaitReady, within: left }
    }

    /// The event stream `query` selects ([`Ask::stream`]).
    pub fn events(query: super::EventsQuery) -> Self {
        Self { request: Request::Events(query), within: STREAM_ANSWER }
    }

    /// Apply the profile file, giving what it restarts `timeout` to be
    /// ready.
    pub fn reload_profile(timeout: Duration) -> Self {
        Self::waiting(Request::ReloadProfile { timeout_secs: Some(timeout.as_secs()) }, timeout)
    }

    fn quick(request: Request) -> Self {
        Self { request, within: QUICK_ANSWER }
    }

    fn waiting(request: Request, timeout: Duration) -> Self {
        Self { request, within: timeout.saturating_add(ANSWER_MARGIN) }
    }

    /// Sends a streaming request ([`Ask::events`]) to the pod in
    /// `pod_dir`: the lines of the connection after its answer, from the
    /// first record on. Later reads have no timeout when it follows (the
    /// pod closes the stream when it stops).
    pub fn stream(&self, pod_dir: &Path) -> Result<Records> {
        let (_, records) = exchange(pod_dir, &self.request, self.within, |_| {})?;
        if matches!(&self.request, Request::Events(query) if query.follow) {
            let _ = records.stream.set_read_timeout(None);
        }
        Ok(records)
    }

    /// Sends it to the pod in `pod_dir` and returns its answer.
    ///
    /// Connecting to a socket nobody listens on (missing file, or one left
    /// by a killed supervisor) fails at once with [`Error::Unreachable`];
    /// the answer must arrive within the request's time. A refusal
    /// becomes [`Error::Refused`] (or the error its kind names).
    pub fn send(&self, pod_dir: &Path) -> Result<Completed> {
        self.send_on(pod_dir, |_| {})
    }

    /// [`Ask::send`] for a request whose answer matters only as done or
    /// refused (`stop`): an answer without a status is taken too, as a pod
    /// run by another omnidev may give.
    pub fn tell(&self, pod_dir: &Path) -> Result<()> {
        exchange(pod_dir, &self.request, self.within, |_| {}).map(drop)
    }

    /// [`Ask::send`], showing the connection to `connected` as soon as it
    /// is made: a caller that gives up (an MCP client's cancelled call)
    /// shuts it down through a clone, and the pod stops waiting for a
    /// client that is gone (the read here then ends at once).
    pub fn send_on(
        &self,
        pod_dir: &Path,
        connected: impl FnOnce(&UnixStream),
    ) -> Result<Completed> {
        match exchange(pod_dir, &self.request, self.within, connected)? {
            (Some(done), _) => Ok(done),
            (None, _) => Err(Error::Protocol {
                socket: super::socket_path(pod_dir),
                message: "the pod's answer has no status".to_owned(),
            }),
        }
    }
}

/// The schema number of an answer, read before the rest.
#[derive(serde::Deserialize)]
struct Schema {
    schema: u32,
}

fn exchange(
    pod_dir: &Path,
    request: &Request,
    timeout: Duration,
    connected: impl FnOnce(&UnixStream),
) -> Result<(Option<Completed>, Records)> {
    let socket = super::socket_path(pod_dir);
    let unreachable = |source: std::io::Error| Error::Unreachable {
        pod_dir: pod_dir.to_path_buf(),
        socket: socket.clone(),
        pid: match omnidev_pod::PodLock::state(pod_dir) {
            Ok(omnidev_pod::LockState::Held { pid }) => pid,
            _ => None,
        },
        source,
    };
    let mut stream = UnixStream::connect(&socket).map_err(unreachable)?;
    connected(&stream);
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(unreachable)?;
    let protocol = |message: String| Error::Protocol { socket: socket.clone(), message };
    let mut line = serde_json::to_string(request).map_err(|e| protocol(e.to_string()))?;
    line.push('\n');
    stream.write_all(line.as_bytes()).map_err(unreachable)?;
    let mut records =
        Records { stream, lines: Lines::default(), chunk: vec![0; READ_CHUNK].into_boxed_slice() };
    let answer = match records.read().map_err(unreachable)? {
        Some(Line::Text(answer)) => answer,
        Some(Line::TooLong) => {
            let why = format!("the answer is longer than {} KiB", MAX_LINE_BYTES / 1024);
            return Err(protocol(why));
        }
        None => {
            return Err(protocol("the connection closed without an answer".to_owned()));
        }
    };
    // A pod run by another omnidev: a stop is understood whatever the
    // schema, a status or a stream of records may not be.
    let other = serde_json::from_slice::<Schema>(&answer)
        .ok()
        .filter(|s| s.schema != super::protocol::SCHEMA)
        .map(|Schema { schema }| {
            protocol(format!(
                "the pod answers in control schema {schema}, this omnidev reads schema {}",
                super::protocol::SCHEMA
            ))
        });
    let response: Response = match serde_json::from_slice(&answer) {
        Ok(response) if other.is_none() || !matches!(request, Request::Events(_)) => response,
        Ok(_) => return Err(other.expect("another schema")),
        Err(e) => {
            return Err(other.unwrap_or_else(|| protocol(e.to_string())));
        }
    };
    match response {
        Response::Accepted => Ok((None, records)),
        Response::Done(done) => Ok((Some(*done), records)),
        Response::Refused(Refusal { kind, message }) => Err(match kind {
            Some(ErrorKind::UnknownService) => Error::UnknownService { message },
            Some(ErrorKind::Usage) => Error::BadRequest { message },
            Some(ErrorKind::Timeout) => Error::TimedOut { message },
            Some(ErrorKind::InvalidProfile) => Error::InvalidProfile { message },
            None => Error::Refused { message },
        }),
    }
}

/// The connection of a tool's request to the pod, hung up when the client
/// cancels the call: the pod then stops waiting for it at once (it sees
/// its client gone) and frees the waiting slot, and the blocked read
/// here ends, instead of both lasting until the request's timeout. Work
/// between connections (`up --detach` waiting for the socket) looks at
/// [`CallConnection::cancelled`].
#[derive(Debug, Clone, Default)]
pub struct CallConnection(Arc<Mutex<Hangup>>);

#[derive(Debug, Default)]
struct Hangup {
    stream: Option<UnixStream>,
    cancelled: bool,
}

impl CallConnection {
    /// Keeps a handle of `stream` (hung up at once if the call was
    /// cancelled before it connected).
    pub fn keep(&self, stream: &UnixStream) {
        let mut state = self.0.locked();
        if state.cancelled {
            let _ = stream.shutdown(Shutdown::Both);
        } else {
            state.stream = stream.try_clone().ok();
        }
    }

    /// Whether the call was cancelled (for work that looks rather than
    /// blocks on a connection).
    pub fn cancelled(&self) -> bool {
        self.0.locked().cancelled
    }

    /// Hangs up, now or as soon as it connects.
    pub fn hang_up(&self) {
        let mut state = self.0.locked();
        state.cancelled = true;
        if let Some(stream) = state.stream.take() {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

#[cfg(test)]
mod tests {
    impl super::Lines {
        /// Bytes held.
        pub fn held(&self) -> usize {
            self.pending.len()
        }
    }

    /// Sends `request` with the time `within` for its answer.
    fn request(pod_dir: &Path, request: &Request, within: Duration) -> Result<Completed> {
        let ask = Ask { request: request.clone(), within };
        ask.send(pod_dir)
    }

    /// Sends the streaming `request` with the time `within` for its answer.
    fn stream(pod_dir: &Path, request: &Request, within: Duration) -> Result<Records> {
        let ask = Ask { request: request.clone(), within };
        ask.stream(pod_dir)
    }

    use std::io::{BufRead, BufReader};
    use std::os::unix::net::UnixListener;

    use super::*;
    use crate::control::EventsQuery;

    #[test]
    fn a_line_over_the_bound_is_too_long_even_when_whole_in_one_read() {
        let mut lines = Lines::default();
        let mut longest = vec![b'x'; MAX_LINE_BYTES];
        longest.push(b'\n');
        lines.add(&longest);
        lines.add(b"y");
        lines.add(&longest);
        assert_eq!(
            lines.take(),
            Some(Line::Text(vec![b'x'; MAX_LINE_BYTES])),
            "a line of the bound is whole"
        );
        assert_eq!(lines.take(), Some(Line::TooLong), "one byte more is not");
        assert_eq!(lines.take(), None);
        assert_eq!(lines.held(), 0);
    }

    /// A pod in `dir` that answers one connection with `answer`, after
    /// reading its request line.
    fn pod(dir: &Path, answer: Vec<u8>) -> std::thread::JoinHandle<()> {
        let socket = super::super::socket_path(dir);
        let _ = std::fs::remove_file(&socket);
        let listener = UnixListener::bind(socket).expect("bind");
        std::thread::spawn(move || {
            let (stream, _) = listener.accept().expect("accept");
            let mut request = String::new();
            BufReader::new(&stream).read_line(&mut request).expect("request");
            // The client may hang up before taking all of a long answer.
            let _ = (&stream).write_all(&answer);
        })
    }

    /// The answer and every record from a pod's socket are cut by the one
    /// bound: a longer answer is an error, a longer record is skipped
    /// whole and the next one read.
    #[test]
    fn answers_and_records_from_the_socket_are_bounded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let long = vec![b'x'; MAX_LINE_BYTES * 3];
        let served = pod(dir.path(), [&long[..], b"\n"].concat());
        let error = request(dir.path(), &Request::Status, Duration::from_secs(60))
            .expect_err("an answer over the bound");
        assert!(error.to_string().contains("the answer is longer than 1024 KiB"), "{error}");
        served.join().expect("pod");

        let ok = br#"{"schema":3,"ok":true,"failed":[]}"#;
        let records = [&ok[..], b"\n", &long, b"\n{\"next\":1}\n"].concat();
        let served = pod(dir.path(), records);
        let events = Request::Events(EventsQuery { logs: true, ..EventsQuery::default() });
        let read: Vec<Line> =
            stream(dir.path(), &events, Duration::from_secs(60)).expect("the answer").collect();
        assert_eq!(read, [Line::TooLong, Line::Text(b"{\"next\":1}".to_vec())]);
        served.join().expect("pod");
    }

    /// A pod run by another omnidev, whose answers this one would misread,
    /// is named as such, not misread; an answer it reads (a stop's) is
    /// taken.
    #[test]
    fn a_pod_speaking_another_schema_is_told_apart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let served = pod(
            dir.path(),
            br#"{"schema":2,"ok":true,"failed":[]}
"#
            .to_vec(),
        );
        let stop = Ask { request: Request::Stop, within: Duration::from_secs(60) };
        stop.tell(dir.path()).expect("a stop is understood");
        served.join().expect("pod");
        let served = pod(
            dir.path(),
            br#"{"schema":2,"ok":true,"failed":[]}
"#
            .to_vec(),
        );
        let events = Request::Events(EventsQuery { follow: true, ..EventsQuery::default() });
        assert!(
            stream(dir.path(), &events, Duration::from_secs(60)).is_err(),
            "records of another schema are not read"
        );
        served.join().expect("pod");
        let served = pod(
            dir.path(),
            br#"{"schema":2,"ok":true,"status":{"services":[{"state":"crashed"}]},"failed":[]}
"#
            .to_vec(),
        );
        let error = request(dir.path(), &Request::Status, Duration::from_secs(60))
            .expect_err("another schema");
        assert!(
            error.to_string().contains("control schema 2, this omnidev reads schema 3"),
            "{error}"
        );
        served.join().expect("pod");
    }
}

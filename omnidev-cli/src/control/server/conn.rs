//! One connection: its request read within its bound, answered (or, for
//! `events`, streamed) without ever waiting on a reader that stopped.

use std::sync::Arc;
use std::time::Duration;

use omnidev_core::ServiceStatus;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

use crate::control::protocol::{ErrorKind, Refusal, Request, Response};
use crate::control::retained::{self, Filter};
use omnidev_core::text::json_line;

use super::handlers::{answer, unknown_service};
use super::{MAX_CONNECTIONS, MAX_FOLLOWING, MAX_REQUEST, MAX_WAITING, POLL, Server};

pub(super) fn busy_answer() -> String {
    json_line(&Response::from(busy(MAX_CONNECTIONS)))
}

pub(super) fn busy(limit: usize) -> Refusal {
    Refusal::other(format!("busy: {limit} requests are already being answered; try again"))
}

/// Whether the client has closed its end completely (`POLLHUP`). A client
/// that only shut down its writing side still waits for the answer.
pub(super) fn peer_gone(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let mut fds = [PollFd::new(fd, PollFlags::empty())];
    let ready = poll(&mut fds, PollTimeout::ZERO).unwrap_or(0);
    ready > 0
        && fds[0].revents().is_some_and(|revents| {
            revents.intersects(PollFlags::POLLHUP | PollFlags::POLLERR | PollFlags::POLLNVAL)
        })
}

/// Resolves once the client behind `fd` has hung up.
pub(super) async fn hang_up(fd: std::os::fd::BorrowedFd<'_>) {
    loop {
        tokio::time::sleep(POLL).await;
        if peer_gone(fd) {
            return;
        }
    }
}

pub(super) async fn serve(stream: UnixStream, shared: Arc<Server>) {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(tokio::io::AsyncReadExt::take(read, MAX_REQUEST));
    let mut line = Vec::new();
    // A client that connects and never sends its request line must not
    // hold a task for the life of the pod.
    match tokio::time::timeout(shared.request_deadline, reader.read_until(b'\n', &mut line)).await {
        Ok(Ok(_)) => {}
        Ok(Err(_)) | Err(_) => return,
    }
    // Bytes that are not UTF-8 are answered as any other bad request.
    let request = std::str::from_utf8(&line)
        .map_err(|e| format!("it is not UTF-8 (byte {} is not)", e.valid_up_to() + 1))
        .and_then(|line| serde_json::from_str::<Request>(line).map_err(|e| e.to_string()));
    let stop = matches!(request, Ok(Request::Stop));
    if let Ok(Request::Events(mut query)) = request {
        // A service that runs as replicas stands for them all.
        query.services = super::handlers::expand(&shared, &query.services);
        let (follow, status) = (query.follow, query.status);
        let filter = Filter::new(query, std::time::SystemTime::now());
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
            Err(_) => busy(MAX_WAITING).into(),
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
pub(super) enum Sent {
    Done,
    /// The client is gone.
    Gone,
    /// The client did not take it within [`REQUEST_DEADLINE`](super::REQUEST_DEADLINE).
    Stalled,
}

/// The next status of `statuses` once it changes; never when there is
/// none to follow (or the supervisor is gone).
pub(super) async fn changed(
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
pub(super) fn status_line(shared: &Server, services: Vec<ServiceStatus>) -> String {
    json_line(&shared.encoder.record(
        std::time::SystemTime::now(),
        None,
        omnidev_core::EventKind::Status { services },
    ))
}

/// Writes all of `buf` (emptying it as it goes out), giving up after
/// `limit`; what was not written stays in `buf`.
pub(super) async fn send(
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
/// nothing for [`REQUEST_DEADLINE`](super::REQUEST_DEADLINE) gets a last `lagged` record and is
/// closed. The pod never waits for a reader.
pub(super) async fn stream_events(
    shared: &Server,
    mut write: tokio::net::unix::OwnedWriteHalf,
    fd: std::os::fd::BorrowedFd<'_>,
    filter: Filter,
    follow: bool,
    mut statuses: Option<tokio::sync::watch::Receiver<Vec<ServiceStatus>>>,
) {
    let unknown =
        (filter.services().iter()).find(|name| !shared.supervisor.service_names().contains(name));
    let answer = match (unknown, shared.following.clone().try_acquire_owned()) {
        (Some(name), _) => Err(unknown_service(shared, name)),
        (None, Err(_)) => Err(busy(MAX_FOLLOWING)),
        (None, Ok(slot)) => Ok(slot),
    };
    let _slot = match answer {
        Ok(slot) => slot,
        Err(response) => {
            let mut buf = json_line(&Response::from(response)).into_bytes();
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
    let mut buf = json_line(&Response::Accepted).into_bytes();
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

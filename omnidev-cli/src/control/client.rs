//! The synchronous client side: one request, one response, with timeouts,
//! so a command never hangs on a pod that does not answer.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use super::protocol::{ErrorKind, Request, Response};
use crate::error::{Error, Result};

/// Sends `request` to the pod in `pod_dir` and returns its answer.
///
/// Connecting to a socket nobody listens on (missing file, or one left by a
/// killed supervisor) fails at once with [`Error::Unreachable`]; the answer
/// must arrive within `timeout`. An answer with `ok: false` becomes
/// [`Error::Refused`].
pub fn request(pod_dir: &Path, request: &Request, timeout: Duration) -> Result<Response> {
    request_on(pod_dir, request, timeout, |_| {})
}

/// [`request`], showing the connection to `connected` as soon as it is
/// made: a caller that gives up (an MCP client's cancelled call) shuts it
/// down through a clone, and the pod stops waiting for a client that is
/// gone (the read here then ends at once).
pub fn request_on(
    pod_dir: &Path,
    request: &Request,
    timeout: Duration,
    connected: impl FnOnce(&UnixStream),
) -> Result<Response> {
    Ok(exchange(pod_dir, request, timeout, connected)?.0)
}

/// Sends a streaming `request` (`events`) and returns the pod's answer
/// and the connection, positioned at the first record. Later reads have
/// no timeout when `follow` (the pod closes the stream when it stops).
pub fn stream(
    pod_dir: &Path,
    request: &Request,
    timeout: Duration,
    follow: bool,
) -> Result<BufReader<UnixStream>> {
    let (_, reader) = exchange(pod_dir, request, timeout, |_| {})?;
    if follow {
        let _ = reader.get_ref().set_read_timeout(None);
    }
    Ok(reader)
}

fn exchange(
    pod_dir: &Path,
    request: &Request,
    timeout: Duration,
    connected: impl FnOnce(&UnixStream),
) -> Result<(Response, BufReader<UnixStream>)> {
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
    let mut line = serde_json::to_string(request).map_err(|e| Error::Protocol {
        socket: socket.clone(),
        message: e.to_string(),
    })?;
    line.push('\n');
    stream.write_all(line.as_bytes()).map_err(unreachable)?;
    let mut reader = BufReader::new(stream);
    let mut answer = String::new();
    reader.read_line(&mut answer).map_err(unreachable)?;
    if answer.is_empty() {
        return Err(Error::Protocol {
            socket,
            message: "the connection closed without an answer".to_owned(),
        });
    }
    let response: Response = serde_json::from_str(&answer).map_err(|e| Error::Protocol {
        socket: socket.clone(),
        message: e.to_string(),
    })?;
    if response.ok {
        return Ok((response, reader));
    }
    let message = response
        .error
        .unwrap_or_else(|| "no reason given".to_owned());
    Err(match response.error_kind {
        Some(ErrorKind::UnknownService) => Error::UnknownService { message },
        Some(ErrorKind::Usage) => Error::BadRequest { message },
        Some(ErrorKind::Timeout) => Error::TimedOut { message },
        Some(ErrorKind::InvalidProfile) => Error::InvalidProfile { message },
        None => Error::Refused { message },
    })
}

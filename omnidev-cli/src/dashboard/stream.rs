//! The dashboard's event streams (server-sent events): a pod's records,
//! and a word each time pods may have started or stopped. Bounded: a
//! stream holds at most [`STREAM_BYTES`] its page has not taken; a page
//! that stops reading is dropped (its browser reconnects and the pod
//! replays what it keeps), and one that goes away hangs up on its pod.

use std::convert::Infallible;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{HeaderValue, header};
use axum::response::Response;
use hyper::body::{Body as HttpBody, Bytes, Frame};
use tokio::sync::mpsc;

use crate::control::client::Line;
use crate::control::events::Record;
use crate::control::{Ask, CallConnection, EventsQuery};

/// Bytes a page's event stream holds while the page does not read (a
/// record longer than that is sent alone).
pub const STREAM_BYTES: usize = 1024 * 1024;

/// `GET /api/events?pod=NAME`: the pod's records as server-sent events,
/// each `{"text", "record"}` (core's wording, or the line as plain text,
/// beside the record of `events --json`), its status first and at each
/// change, every line of output; a stopped pod's stream ends at once.
pub fn events(pod_dir: PathBuf) -> Response {
    let (sender, receiver) = mpsc::unbounded_channel::<Bytes>();
    let held = Arc::new(AtomicUsize::new(0));
    let holding = held.clone();
    let hang_up = CallConnection::default();
    let connected = hang_up.clone();
    tokio::spawn(measure_every(pod_dir.clone(), sender.downgrade(), held.clone()));
    std::thread::spawn(move || {
        let Ok(records) = Ask::events(EventsQuery::everything()).stream(&pod_dir) else {
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
                omnidev_core::EventKind::Log { line } => {
                    (omnidev_core::text::sanitise(&line.text, true).into_owned(), None)
                }
                // Core's label (the main pid) and tone, as the TUI shows
                // them.
                omnidev_core::EventKind::Status { services } => (
                    String::new(),
                    Some(
                        (services.iter())
                            .map(|s| {
                                let shown = serde_json::json!({
                                    "label": plain(&s.label()),
                                    "tone": s.state.tone(),
                                });
                                (s.name.clone(), shown)
                            })
                            .collect::<std::collections::BTreeMap<_, _>>(),
                    ),
                ),
                _ => (plain(&record.event.to_string()), None),
            };
            let value = serde_json::json!({ "text": text, "states": states, "record": record });
            let data = format!("data: {}\n\n", omnidev_core::text::json_line(&value).trim_end());
            // A page that does not read is dropped, never waited for.
            let waiting = holding.fetch_add(data.len(), Ordering::Relaxed);
            if (waiting > 0 && waiting + data.len() > STREAM_BYTES)
                || sender.send(Bytes::from(data)).is_err()
            {
                return;
            }
        }
    });
    let mut response = event_stream(Body { chunks: receiver, held, hang_up: Some(hang_up) });
    // A dropped stream ends its connection: the browser opens another.
    (response.headers_mut()).insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// What the pod in `pod_dir` holds, and its links, told to its page
/// every [`crate::output::LIVE_USAGE_EVERY`] as `{"usage": {"text", "of",
/// "services": {NAME: {"text", "of"}}}, "links": {NAME: …}}` (`of` and
/// the links: as `status --json` has them), while the page's stream
/// lasts: measured only while someone looks. Holds no sender of its own,
/// so the stream still ends with its records.
async fn measure_every(
    pod_dir: PathBuf,
    sender: mpsc::WeakUnboundedSender<Bytes>,
    held: Arc<AtomicUsize>,
) {
    let mut every = tokio::time::interval(crate::output::LIVE_USAGE_EVERY);
    loop {
        every.tick().await;
        let dir = pod_dir.clone();
        let asked = tokio::task::spawn_blocking(move || Ask::status().send(&dir)).await;
        let Some(sender) = sender.upgrade() else {
            return;
        };
        let Some(status) = asked.ok().and_then(Result::ok).map(|r| r.status) else {
            continue;
        };
        let told = |usage: &omnidev_core::platform::Usage| serde_json::json!({ "text": crate::output::usage(usage), "of": usage });
        let services: serde_json::Map<String, serde_json::Value> = (status.services.iter())
            .filter_map(|s| Some((s.status.name.clone(), told(s.usage.as_ref()?))))
            .collect();
        let mut value = serde_json::json!({ "links": status.links });
        if let Some(pod) = &status.usage {
            let mut usage = told(pod);
            usage["services"] = serde_json::Value::Object(services);
            value["usage"] = usage;
        }
        let data = format!("data: {}\n\n", omnidev_core::text::json_line(&value).trim_end());
        // One not taken yet says as much: a page that does not read gets
        // no more of these.
        if held.load(Ordering::Relaxed) > 0 {
            continue;
        }
        held.fetch_add(data.len(), Ordering::Relaxed);
        if sender.send(Bytes::from(data)).is_err() {
            return;
        }
    }
}

/// `GET /api/pods/changes`: an event each time pods may have started or
/// stopped (at most every [`CHANGES_EVERY`]), for the page to list them
/// again; nothing while nothing changes.
pub fn changes(mut changed: tokio::sync::watch::Receiver<()>) -> Response {
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
    event_stream(Body { chunks: receiver, held, hang_up: None })
}

fn event_stream(body: Body) -> Response {
    let mut response = Response::new(axum::body::Body::new(body));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// How often the page is told to list the pods again, at most.
const CHANGES_EVERY: Duration = Duration::from_millis(250);

/// A stream's body: chunks as they come (the end when the sender is
/// gone), and the bytes sent and not yet taken. Dropped (the page went
/// away, or its stream ended), it hangs up the pod connection the chunks
/// come from.
struct Body {
    chunks: mpsc::UnboundedReceiver<Bytes>,
    held: Arc<AtomicUsize>,
    hang_up: Option<CallConnection>,
}

impl Drop for Body {
    fn drop(&mut self) {
        if let Some(hang_up) = &self.hang_up {
            hang_up.hang_up();
        }
    }
}

impl HttpBody for Body {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let body = self.get_mut();
        body.chunks.poll_recv(cx).map(|bytes| {
            bytes.map(|bytes| {
                body.held.fetch_sub(bytes.len(), Ordering::Relaxed);
                Ok(Frame::data(bytes))
            })
        })
    }
}

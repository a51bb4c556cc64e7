//! JSON-RPC on stdin and stdout, one message a line, answering what is not
//! a message as the JSON-RPC specification asks: a line that is not JSON
//! with -32700 (parse error), a request of a method this server serves
//! whose `params` do not fit it with -32602 (invalid params), a line over
//! [`MAX_LINE_BYTES`] or any other JSON that is no message with -32600
//! (invalid request), each with the request's id when it has one (`null`
//! otherwise). The next line is read at once: a bad line never keeps a
//! client waiting. (The SDK's own transport drops all of these silently.)
//! Every line goes out through the one JSON line encoder.
//!
//! Calls of [`HEAVY`] tools, whose answers are up to a few MiB, take turns:
//! at most [`HEAVY_AT_ONCE`] are being answered (made, then written) at a
//! time, and a further one waits, with stdin left unread meanwhile, until
//! an answer is written. The server's memory is then bounded by what those
//! answers hold, however many calls a client sends at once.

use std::collections::HashMap;
use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::model::{CallToolRequestParams, ClientRequest, JsonRpcMessage};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use serde_json::{Value, json};

use omnidev_core::text::json_line;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Stdin, Stdout};
use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

/// The longest line read (a request of any tool is a few KiB); a longer
/// one is skipped to its end and refused.
pub const MAX_LINE_BYTES: usize = 1024 * 1024;

/// How much of an over-long line is kept to find its id.
const KEPT_OF_LONG: usize = 4096;

/// The methods this server answers, whose `params` the SDK, when they do
/// not fit, takes for an unknown method's (-32601).
const SERVED: &[&str] = &["initialize", "ping", "server/discover", "tools/list", "tools/call"];

/// The tools whose answers take turns.
const HEAVY: &[&str] = &["logs", "events"];

/// Answers of [`HEAVY`] tools made or written at once.
const HEAVY_AT_ONCE: usize = 2;

/// The transport of `omnidev mcp`.
#[derive(Debug)]
pub struct Framing {
    read: BufReader<Stdin>,
    /// The line read so far (a cancelled read resumes it).
    line: Vec<u8>,
    /// The bytes of an over-long line, while it is skipped (its start is
    /// kept in `line`).
    skipped: Option<usize>,
    write: Arc<Mutex<Stdout>>,
    /// Error answers being written.
    answering: Vec<JoinHandle<()>>,
    /// The turns of [`HEAVY`] calls.
    heavy: Arc<Semaphore>,
    /// A heavy call read, waiting for its turn, with its id's JSON.
    waiting: Option<(RxJsonRpcMessage<RoleServer>, String)>,
    /// The turns taken, by the JSON of their call's id, held until its
    /// answer is written (or the client cancels the call).
    turns: HashMap<String, OwnedSemaphorePermit>,
}

impl Framing {
    /// The transport on this process's stdin and stdout.
    pub fn stdio() -> Self {
        Self {
            read: BufReader::new(tokio::io::stdin()),
            line: Vec::new(),
            skipped: None,
            write: Arc::new(Mutex::new(tokio::io::stdout())),
            answering: Vec::new(),
            heavy: Arc::new(Semaphore::new(HEAVY_AT_ONCE)),
            waiting: None,
            turns: HashMap::new(),
        }
    }

    /// Writes `line` (from the one JSON line encoder, [`json_line`]: DEL, C1
    /// and bidi controls as `\u` escapes, whatever a service printed)
    /// whole, after any line being written.
    fn write_line(&self, line: String) -> impl Future<Output = std::io::Result<()>> + use<> {
        let write = Arc::clone(&self.write);
        async move {
            let mut write = write.lock().await;
            write.write_all(line.as_bytes()).await?;
            write.flush().await
        }
    }

    /// Answers a line that is no message with the error `code` and
    /// `message`, for the request `id`.
    fn refuse(&mut self, id: &Value, code: i32, message: &str) {
        let answer =
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
        let written = self.write_line(json_line(&answer));
        self.answering.retain(|task| !task.is_finished());
        self.answering.push(tokio::spawn(async move {
            let _ = written.await;
        }));
    }

    /// The message of a whole line, with its id's JSON when it is a call
    /// of a [`HEAVY`] tool; or `None` (refused, or nothing to answer: an
    /// empty line, a notification that is none). A cancelled call gives
    /// its turn back.
    fn message(&mut self, line: &[u8]) -> Option<(RxJsonRpcMessage<RoleServer>, Option<String>)> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        let value: Value = match serde_json::from_slice(line) {
            Ok(value) => value,
            Err(e) => {
                self.refuse(
                    &Value::Null,
                    -32700,
                    &format!("Parse error: the line is not JSON ({e})"),
                );
                return None;
            }
        };
        let id = value.get("id").filter(|id| id.is_string() || id.is_number()).cloned();
        let method = value.get("method").and_then(Value::as_str).unwrap_or("").to_owned();
        let served = SERVED.contains(&method.as_str());
        let params = || value.get("params").cloned().unwrap_or(Value::Null);
        let invalid_params = |why: String| (-32602, format!("Invalid params of `{method}`: {why}"));
        let refusal = match serde_json::from_value::<RxJsonRpcMessage<RoleServer>>(value.clone()) {
            Ok(JsonRpcMessage::Request(request))
                if served && matches!(request.request, ClientRequest::CustomRequest(_)) =>
            {
                let why = match serde_json::from_value::<CallToolRequestParams>(params()) {
                    Err(e) if method == "tools/call" => e.to_string(),
                    _ => format!("{} does not fit it", params()),
                };
                invalid_params(why)
            }
            Ok(message) => {
                let tool = value.pointer("/params/name").and_then(Value::as_str);
                let heavy = method == "tools/call" && tool.is_some_and(|t| HEAVY.contains(&t));
                if method == "notifications/cancelled"
                    && let Some(called) = value.pointer("/params/requestId")
                {
                    // The SDK writes no answer to a cancelled call.
                    self.turns.remove(&called.to_string());
                }
                return Some((message, id.filter(|_| heavy).map(|id| id.to_string())));
            }
            // A notification is never answered.
            Err(_) if id.is_none() && !method.is_empty() => return None,
            Err(e) if served => invalid_params(e.to_string()),
            Err(e) => (-32600, format!("Invalid Request: {e}")),
        };
        self.refuse(&id.unwrap_or(Value::Null), refusal.0, &refusal.1);
        None
    }
}

impl rmcp::transport::Transport<RoleServer> for Framing {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = std::io::Result<()>> + Send + 'static {
        let id = match &item {
            JsonRpcMessage::Response(response) => serde_json::to_string(&response.id).ok(),
            JsonRpcMessage::Error(error) => serde_json::to_string(&error.id).ok(),
            _ => None,
        };
        let turn = id.and_then(|id| self.turns.remove(&id));
        let written = self.write_line(json_line(&item));
        async move {
            let written = written.await;
            drop(turn);
            written
        }
    }

    /// Cancel-safe (the service polls it beside its answers): what was
    /// read stays in `self` until its line is whole.
    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            if self.waiting.is_some() {
                // Cancelled here, the call stays waiting.
                let Ok(turn) = Arc::clone(&self.heavy).acquire_owned().await else {
                    return None;
                };
                let (message, id) = self.waiting.take().expect("checked above");
                self.turns.insert(id, turn);
                return Some(message);
            }
            let available = match self.read.fill_buf().await {
                Ok([]) | Err(_) => {
                    // The client left: what it is owed is written first.
                    for task in self.answering.drain(..) {
                        let _ = task.await;
                    }
                    return None;
                }
                Ok(available) => available,
            };
            let end = available.iter().position(|&b| b == b'\n');
            let take = end.map_or(available.len(), |at| at + 1);
            if let Some(skipped) = &mut self.skipped {
                *skipped += take;
            } else if self.line.len() + take > MAX_LINE_BYTES {
                self.skipped = Some(self.line.len() + take);
                let keep = KEPT_OF_LONG.saturating_sub(self.line.len()).min(take);
                self.line.extend_from_slice(&available[..keep]);
                self.line.truncate(KEPT_OF_LONG);
            } else {
                self.line.extend_from_slice(&available[..take]);
            }
            self.read.consume(take);
            if end.is_none() {
                continue;
            }
            let line = std::mem::take(&mut self.line);
            if let Some(size) = self.skipped.take() {
                let message = format!(
                    "Invalid Request: the message is {size} bytes, over the {MAX_LINE_BYTES} this \
                     server reads; it was not read"
                );
                self.refuse(&leading_id(&line), -32600, &message);
            } else if let Some((message, heavy)) = self.message(&line) {
                match heavy {
                    Some(id) => self.waiting = Some((message, id)),
                    None => return Some(message),
                }
            }
        }
    }

    async fn close(&mut self) -> std::io::Result<()> {
        self.write.lock().await.flush().await
    }
}

/// The id of the request whose line starts with `start` (as clients write
/// it: `{"jsonrpc":"2.0","id":7,…`), when it is there; `null` otherwise.
fn leading_id(start: &[u8]) -> Value {
    let (mut depth, mut at) = (0, 0);
    while at < start.len() {
        match start[at] {
            b'"' => {
                let mut end = at + 1;
                while end < start.len() && start[end] != b'"' {
                    end += if start[end] == b'\\' { 2 } else { 1 };
                }
                let key = start.get(at + 1..end);
                at = end + 1;
                let rest = start.get(at..).unwrap_or_default().trim_ascii_start();
                if depth == 1
                    && key == Some(&b"id"[..])
                    && let Some(value) = rest.strip_prefix(b":")
                {
                    let mut values = serde_json::Deserializer::from_slice(value).into_iter();
                    return match values.next() {
                        Some(Ok(id @ (Value::Number(_) | Value::String(_)))) => id,
                        _ => Value::Null,
                    };
                }
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth -= 1,
            _ => {}
        }
        at += 1;
    }
    Value::Null
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_of_a_long_line_is_found_in_its_start() {
        for (start, id) in [
            (&br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"#[..], json!(7)),
            (br#"{ "method" : "id", "id" : "a,\"b}" , "params": "#, json!("a,\"b}")),
            (br#"{"params":{"id":1,"x":"#, Value::Null),
            (br#"{"params":{"id":1},"id":-2,"#, json!(-2)),
            (br#"{"jsonrpc":"2.0","id":{"#, Value::Null),
            (br#"{"jsonrpc":"2.0","i"#, Value::Null),
        ] {
            assert_eq!(leading_id(start), id, "{}", String::from_utf8_lossy(start));
        }
    }
}

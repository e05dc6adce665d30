//! Streamable HTTP in front of a stdio MCP server, for clients that speak only HTTP: the
//! conformance suite runs its server scenarios through it against `tutti mcp-stdio`
//! (`tests/tests/conformance.rs`, `docs/CONFORMANCE.md`).
//!
//! - A 2025-era `initialize` (no `Mcp-Session-Id`) starts a stdio server of its own: the
//!   session. Its answer names the session's id; requests carrying the id go to that process,
//!   an unknown id gets 404, `DELETE` with it closes the process's stdin (how a stdio client
//!   ends) and `GET` with it opens a stream for the lines no request claims.
//! - Every other request (2026-07-28, stateless) goes to one shared stdio server, as one stdio
//!   client would send them.
//! - A request's body is written as one line; the lines that belong to it (`child.rs`) are
//!   its answer: the answer alone as JSON, or, when something comes first, an event stream
//!   ending with the answer. A client that drops the response withdraws the request with
//!   `notifications/cancelled`. Notifications and answers to the server's requests get 202.
//! - HTTP statuses of 2026-07-28 errors follow the HTTP transport: -32601 is 404; -32600,
//!   -32020, -32021 and -32022 are 400, and so is -32602 for a request whose `_meta` lacks its
//!   protocol version or client capabilities. Headers are not forwarded (stdio has none), and
//!   `Host`/`Origin` are not checked.

mod child;

use std::collections::HashMap;
use std::ffi::OsString;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue};
use axum::http::{Method, Response, StatusCode};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::support::{Listening, bin};
use child::{Exchange, StdioServer, is_answer};

const SESSION_ID: &str = "mcp-session-id";
const EVENT_STREAM: &str = "text/event-stream";

struct Adapter {
    command: Vec<OsString>,
    sessions: Mutex<HashMap<String, Arc<StdioServer>>>,
    /// The stdio server of every request outside a session, started at the first.
    shared: tokio::sync::Mutex<Option<Arc<StdioServer>>>,
    next_session: AtomicU64,
}

/// Serves the adapter on `listener`, starting `command` for each stdio server, until the
/// future is dropped or the listener fails.
pub async fn serve(listener: TcpListener, command: Vec<OsString>) -> std::io::Result<()> {
    let adapter = Arc::new(Adapter {
        command,
        sessions: Mutex::new(HashMap::new()),
        shared: tokio::sync::Mutex::new(None),
        next_session: AtomicU64::new(1),
    });
    let router = axum::Router::new().fallback(handle).with_state(adapter);
    axum::serve(listener, router).await
}

async fn handle(State(adapter): State<Arc<Adapter>>, request: Request) -> Response<Body> {
    let (parts, body) = request.into_parts();
    let session = parts
        .headers
        .get(SESSION_ID)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let known = session.as_ref().map(|id| adapter.session(id));
    match (parts.method, known) {
        (_, Some(None)) => refusal(StatusCode::NOT_FOUND, "Session not found"),
        (Method::POST, known) => {
            let Ok(body) = axum::body::to_bytes(body, 64 << 20).await else {
                return refusal(StatusCode::BAD_REQUEST, "unreadable body");
            };
            post(&adapter, known.flatten(), &parts.headers, &body).await
        }
        (Method::GET, Some(Some(server))) => {
            let mut lines = server.stream();
            event_stream(futures_util::stream::poll_fn(move |cx| lines.poll_recv(cx)))
        }
        (Method::DELETE, Some(Some(server))) => {
            if let (Some(id), Ok(mut sessions)) = (&session, adapter.sessions.lock()) {
                sessions.remove(id);
            }
            server.end(Duration::from_secs(5)).await;
            plain(StatusCode::OK, Body::empty())
        }
        _ => plain(StatusCode::METHOD_NOT_ALLOWED, Body::empty()),
    }
}

impl Adapter {
    fn session(&self, id: &str) -> Option<Arc<StdioServer>> {
        self.sessions.lock().ok()?.get(id).cloned()
    }

    async fn shared(&self) -> std::io::Result<Arc<StdioServer>> {
        let mut shared = self.shared.lock().await;
        if let Some(server) = shared.as_ref() {
            return Ok(server.clone());
        }
        let server = StdioServer::start(&self.command)?;
        *shared = Some(server.clone());
        Ok(server)
    }
}

async fn post(
    adapter: &Adapter,
    session: Option<Arc<StdioServer>>,
    headers: &HeaderMap,
    body: &Bytes,
) -> Response<Body> {
    let Ok(message) = serde_json::from_slice::<Value>(body) else {
        return refusal(StatusCode::BAD_REQUEST, "Parse error");
    };
    let modern = session.is_none() && names_2026_07_28(headers, &message);
    let initialize = !modern && message.get("method").and_then(Value::as_str) == Some("initialize");
    let started = match session {
        Some(server) => Ok(server),
        None if initialize => StdioServer::start(&adapter.command),
        None => adapter.shared().await,
    };
    let server = match started {
        Ok(server) => server,
        Err(e) => return refusal(StatusCode::BAD_GATEWAY, &format!("cannot start: {e}")),
    };
    if message.get("method").is_none() || message.get("id").is_none() {
        return match server.write(&message.to_string()).await {
            Ok(()) => plain(StatusCode::ACCEPTED, Body::empty()),
            Err(e) => refusal(StatusCode::BAD_GATEWAY, &format!("stdin: {e}")),
        };
    }
    let Some(exchange) = server.request(&message).await else {
        return refusal(StatusCode::CONFLICT, "a request with this id is in flight");
    };
    let sse = headers
        .get(ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains(EVENT_STREAM));
    let mut response = answer(exchange, sse, |answer| {
        if modern {
            status(&message, answer)
        } else {
            StatusCode::OK
        }
    })
    .await;
    if initialize && response.status() == StatusCode::OK {
        let id = adapter.new_session(server);
        if let Ok(value) = HeaderValue::from_str(&id) {
            response.headers_mut().insert(SESSION_ID, value);
        }
    }
    response
}

impl Adapter {
    fn new_session(&self, server: Arc<StdioServer>) -> String {
        let n = self.next_session.fetch_add(1, Ordering::Relaxed);
        let id = format!("stdio-http-{}-{n}", std::process::id());
        if let Ok(mut sessions) = self.sessions.lock() {
            sessions.insert(id.clone(), server);
        }
        id
    }
}

/// The response to a request: its answer as JSON when nothing comes before it, else an
/// event stream of its lines (JSON with the answer alone when the client takes no stream).
async fn answer(
    mut exchange: Exchange,
    sse: bool,
    status: impl FnOnce(&str) -> StatusCode,
) -> Response<Body> {
    let Some(first) = exchange.next().await else {
        return refusal(StatusCode::BAD_GATEWAY, "the stdio server gave no answer");
    };
    if is_answer(&first) {
        return json(status(&first), first);
    }
    if !sse {
        while let Some(line) = exchange.next().await {
            if is_answer(&line) {
                return json(status(&line), line);
            }
        }
        return refusal(StatusCode::BAD_GATEWAY, "the stdio server gave no answer");
    }
    let lines = futures_util::stream::unfold(
        (Some(first), exchange),
        |(first, mut exchange)| async move {
            let line = match first {
                Some(line) => line,
                None => exchange.next().await?,
            };
            Some((line, (None, exchange)))
        },
    );
    event_stream(lines)
}

/// Whether a request outside a session is a 2026-07-28 one: its `_meta` or its
/// `MCP-Protocol-Version` header names a revision, not a dated 2024 or 2025 one. A 2025-era
/// `initialize` names none.
fn names_2026_07_28(headers: &HeaderMap, message: &Value) -> bool {
    let in_meta = message
        .pointer("/params/_meta/io.modelcontextprotocol~1protocolVersion")
        .is_some();
    let header = headers
        .get("mcp-protocol-version")
        .and_then(|v| v.to_str().ok());
    in_meta || header.is_some_and(|v| !v.starts_with("2024-") && !v.starts_with("2025-"))
}

/// The HTTP status of a 2026-07-28 answer (see the module's notes).
fn status(request: &Value, answer: &str) -> StatusCode {
    let code = serde_json::from_str::<Value>(answer)
        .ok()
        .and_then(|a| a.pointer("/error/code").and_then(Value::as_i64));
    let meta = request.pointer("/params/_meta");
    let incomplete = [
        "io.modelcontextprotocol/protocolVersion",
        "io.modelcontextprotocol/clientCapabilities",
    ]
    .iter()
    .any(|key| meta.and_then(|m| m.get(key)).is_none());
    match code {
        Some(-32601) => StatusCode::NOT_FOUND,
        Some(-32600 | -32020 | -32021 | -32022) => StatusCode::BAD_REQUEST,
        Some(-32602) if incomplete => StatusCode::BAD_REQUEST,
        _ => StatusCode::OK,
    }
}

fn event_stream(
    lines: impl futures_util::Stream<Item = String> + Send + 'static,
) -> Response<Body> {
    let events = futures_util::StreamExt::map(lines, |line| {
        let event = format!("event: message\ndata: {line}\n\n");
        Ok::<_, std::convert::Infallible>(Bytes::from(event))
    });
    let mut response = plain(StatusCode::OK, Body::from_stream(events));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(EVENT_STREAM));
    response
}

fn json(status: StatusCode, line: String) -> Response<Body> {
    let mut response = plain(status, Body::from(line));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn plain(status: StatusCode, body: Body) -> Response<Body> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response
}

/// An HTTP-level refusal: a JSON-RPC error without an id.
fn refusal(status: StatusCode, message: &str) -> Response<Body> {
    let error = json!({"jsonrpc": "2.0", "id": null,
        "error": {"code": -32000, "message": format!("tutti-stdio-http: {message}")}});
    json(status, error.to_string())
}

/// A running `tutti-stdio-http` child. Dropping it closes the child's stdin (which makes it
/// exit), then kills and reaps it.
pub struct StdioHttp {
    _process: Listening,
    /// The adapter's port on 127.0.0.1.
    pub port: u16,
}

impl StdioHttp {
    /// Starts `tutti-stdio-http -- <command>` and waits for `listening <port>`.
    pub fn start(command: &[OsString]) -> StdioHttp {
        let mut adapter = Command::new(bin("tutti-stdio-http"));
        adapter.arg("--").args(command);
        let process = Listening::start(adapter, "tutti-stdio-http", None);
        StdioHttp {
            port: process.port,
            _process: process,
        }
    }

    /// The MCP URL: `http://127.0.0.1:<port>/mcp`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_follow_the_2026_07_28_http_transport() {
        let meta = json!({"params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}}});
        let error = |code: i64| json!({"jsonrpc": "2.0", "id": 1, "error": {"code": code}});
        let answer = |code| error(code).to_string();
        assert_eq!(status(&meta, &answer(-32601)), StatusCode::NOT_FOUND);
        assert_eq!(status(&meta, &answer(-32021)), StatusCode::BAD_REQUEST);
        assert_eq!(status(&meta, &answer(-32602)), StatusCode::OK);
        assert_eq!(status(&json!({}), &answer(-32602)), StatusCode::BAD_REQUEST);
        let ok = json!({"jsonrpc": "2.0", "id": 1, "result": {}}).to_string();
        assert_eq!(status(&meta, &ok), StatusCode::OK);
    }
}

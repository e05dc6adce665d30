//! One HTTP exchange with the frontend: a client message POSTed as it came, the answer (JSON
//! or an event stream) written back as JSON lines, and the few headers the bridge must add
//! (bearer token, session id, protocol version, the 2026-07-28 request headers).

use base64::Engine as _;
use futures_util::StreamExt as _;
use http_body_util::BodyExt as _;
use hyper::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, StatusCode};
use serde::de::IgnoredAny;
use serde_json::{Value, json};
use sse_stream::SseStream;
use tokio::sync::mpsc::UnboundedSender;

use super::conn::{Answer, Connections, Endpoint, Failure};

/// The 2025-06-18 session id header.
pub(super) const SESSION_ID: &str = "mcp-session-id";
const PROTOCOL_VERSION: &str = "mcp-protocol-version";
const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const EVENT_STREAM: &str = "text/event-stream";

/// What the bridge reads of a client message to forward it: nothing else is parsed.
#[derive(Debug, Default)]
pub(super) struct Peek {
    pub(super) id: Option<Value>,
    pub(super) method: Option<String>,
    /// `params._meta`'s protocol version: a 2026-07-28 request.
    pub(super) modern_version: Option<String>,
    /// `Mcp-Name` of a 2026-07-28 request (`params.name` or `params.uri`).
    pub(super) name: Option<String>,
    /// `Mcp-Param-*` headers of a 2026-07-28 `tools/call` (name, value).
    pub(super) params: Vec<(String, String)>,
}

impl Peek {
    pub(super) fn of(line: &str) -> Peek {
        let Ok(value) = serde_json::from_str::<Value>(line) else {
            return Peek::default();
        };
        let method = value
            .get("method")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let params = value.get("params");
        let modern_version = params
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get(META_PROTOCOL_VERSION))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let field = match method.as_deref() {
            Some("tools/call" | "prompts/get") => Some("name"),
            Some("resources/read") => Some("uri"),
            _ => None,
        };
        let name = field
            .and_then(|f| params.and_then(|p| p.get(f)))
            .and_then(Value::as_str)
            .map(str::to_owned);
        Peek {
            id: value.get("id").filter(|_| method.is_some()).cloned(),
            method,
            modern_version,
            name,
            params: Vec::new(),
        }
    }
}

/// Where and as whom to send: the frontend's endpoint and this bridge's session.
#[derive(Clone, Debug)]
pub(super) struct Target {
    pub(super) endpoint: Endpoint,
    pub(super) token: String,
    pub(super) session_id: Option<String>,
    /// The version the 2025-06-18 `initialize` settled on.
    pub(super) legacy_version: Option<String>,
}

/// The headers of one request to the frontend.
pub(super) fn headers(target: &Target, peek: &Peek) -> HeaderMap {
    let mut h = HeaderMap::new();
    let mut put = |name: &'static str, value: &str| {
        if let Ok(v) = HeaderValue::from_str(&header_value(value)) {
            h.insert(name, v);
        }
    };
    put(AUTHORIZATION.as_str(), &format!("Bearer {}", target.token));
    put(CONTENT_TYPE.as_str(), "application/json");
    put(ACCEPT.as_str(), "application/json, text/event-stream");
    if let Some(version) = &peek.modern_version {
        put(PROTOCOL_VERSION, version);
        if let Some(method) = &peek.method {
            put("mcp-method", method);
        }
        if let Some(name) = &peek.name {
            put("mcp-name", name);
        }
        for (name, value) in &peek.params {
            let name = HeaderName::from_bytes(name.as_bytes());
            if let (Ok(name), Ok(value)) = (name, HeaderValue::from_str(&header_value(value))) {
                h.insert(name, value);
            }
        }
        return h;
    }
    if let Some(version) = target.legacy_version.as_deref() {
        put(PROTOCOL_VERSION, version);
    }
    if let Some(id) = target.session_id.as_deref() {
        put(SESSION_ID, id);
    }
    h
}

/// A header value as the 2026-07-28 transport carries text that is not plain visible ASCII:
/// `=?base64?…?=`.
fn header_value(value: &str) -> String {
    let plain = value.bytes().all(|b| (0x20..0x7f).contains(&b)) && value.trim() == value;
    if plain {
        value.to_owned()
    } else {
        let encoded = base64::engine::general_purpose::STANDARD.encode(value);
        format!("=?base64?{encoded}?=")
    }
}

/// One JSON message as one line: raw line ends only occur between tokens in JSON text, so
/// they become spaces and every other byte stays as the frontend wrote it.
pub(super) fn one_line(json: &str) -> String {
    json.replace(['\r', '\n'], " ")
}

/// A JSON-RPC error answering `id`.
pub(super) fn rpc_error(id: &Value, code: i64, message: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string()
}

/// What [`relay`] checks of a JSON answer: whether it is JSON-RPC, and an error without an
/// id (`None` when absent or `null`). The members' contents are skipped, not built.
#[derive(serde::Deserialize)]
struct Envelope {
    jsonrpc: Option<IgnoredAny>,
    id: Option<IgnoredAny>,
    error: Option<IgnoredAny>,
}

/// POSTs one client message (`line`, as it came) with `headers`.
pub(super) async fn post(
    connections: &Connections,
    target: &Target,
    headers: HeaderMap,
    line: String,
) -> Result<Answer, Failure> {
    connections
        .send(&target.endpoint, Method::POST, headers, line)
        .await
}

/// Whether an answer is an event stream.
pub(super) fn is_event_stream(answer: &Answer) -> bool {
    answer
        .response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with(EVENT_STREAM))
}

/// Writes a response's messages to the client: a JSON body as one line, an event stream
/// event by event. Returns every line written (the caller reads `initialize` results). An
/// answer read to its end leaves its connection open for the next message.
pub(super) async fn relay(
    answer: Answer,
    peek: &Peek,
    out: &UnboundedSender<String>,
) -> Vec<String> {
    let event_stream = is_event_stream(&answer);
    let (response, lease) = answer.into_parts();
    let status = response.status();
    let mut written = Vec::new();
    if event_stream {
        let mut events = SseStream::new(response.into_body());
        loop {
            match events.next().await {
                Some(Ok(event)) => {
                    if let Some(data) = event.data.filter(|d| !d.trim().is_empty()) {
                        let line = one_line(&data);
                        let _ = out.send(line.clone());
                        written.push(line);
                    }
                }
                Some(Err(_)) => return written,
                None => break,
            }
        }
        lease.reuse();
        return written;
    }
    let body = match response.into_body().collect().await {
        Ok(body) => {
            lease.reuse();
            String::from_utf8_lossy(&body.to_bytes()).into_owned()
        }
        Err(_) => String::new(),
    };
    // Checked, not built: a tool's result can be megabytes and passes through as it came.
    let envelope = serde_json::from_str::<Envelope>(&body)
        .ok()
        .filter(|e| e.jsonrpc.is_some());
    let line = match (envelope, peek.id.as_ref()) {
        // An HTTP-level refusal (401, 404, …) answers with `id: null`: the client's request
        // gets it under its own id, or it would wait for an answer forever.
        (Some(e), Some(id)) if e.id.is_none() && e.error.is_some() => {
            let mut error = serde_json::from_str::<Value>(&body).unwrap_or_default();
            error["id"] = id.clone();
            error.to_string()
        }
        (Some(_), _) => one_line(&body),
        _ => return relay_refusal(status, &body, peek, out, written),
    };
    let _ = out.send(line.clone());
    written.push(line);
    written
}

/// A non-JSON-RPC answer to a request: a JSON-RPC error naming the HTTP status.
fn relay_refusal(
    status: StatusCode,
    body: &str,
    peek: &Peek,
    out: &UnboundedSender<String>,
    mut written: Vec<String>,
) -> Vec<String> {
    let line = if let Some(id) = peek.id.as_ref().filter(|_| !status.is_success()) {
        let message = format!(
            "the Tutti frontend answered HTTP {status}: {}",
            body.chars().take(200).collect::<String>().trim()
        );
        rpc_error(id, -32603, &message)
    } else {
        return written;
    };
    let _ = out.send(line.clone());
    written.push(line);
    written
}

/// The protocol version and session id of a 2025-06-18 `initialize` answer.
pub(super) fn settle(target: &mut Target, session: Option<String>, lines: &[String]) {
    for line in lines {
        let version = serde_json::from_str::<Value>(line).ok().and_then(|v| {
            v.pointer("/result/protocolVersion")
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
        if version.is_some() {
            target.legacy_version = version;
            target.session_id = session.clone();
        }
    }
}

/// The session id header of an answer.
pub(super) fn session_of(answer: &Answer) -> Option<String> {
    answer
        .response
        .headers()
        .get(SESSION_ID)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Opens the 2025-06-18 notification stream of `target`.
pub(super) async fn open_stream(
    connections: &Connections,
    target: &Target,
) -> Result<Answer, Failure> {
    let mut h = headers(target, &Peek::default());
    h.remove(CONTENT_TYPE);
    h.insert(ACCEPT, HeaderValue::from_static(EVENT_STREAM));
    connections
        .send(&target.endpoint, Method::GET, h, String::new())
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_modern_request_gets_its_headers_and_a_legacy_one_its_session() {
        let line = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"gh_ünï","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        let peek = Peek::of(line);
        assert!(peek.id.is_some());
        let Some(endpoint) = Endpoint::of("http://127.0.0.1:1/mcp/connector") else {
            panic!("an http URL")
        };
        let target = Target {
            endpoint,
            token: "tts_x".into(),
            session_id: Some("sid".into()),
            legacy_version: Some("2025-06-18".into()),
        };
        let h = headers(&target, &peek);
        assert_eq!(h["mcp-protocol-version"], "2026-07-28");
        assert_eq!(h["mcp-method"], "tools/call");
        assert!(
            h["mcp-name"]
                .to_str()
                .is_ok_and(|v| v.starts_with("=?base64?"))
        );
        assert!(h.get(SESSION_ID).is_none());
        let legacy = headers(&target, &Peek::of(r#"{"jsonrpc":"2.0","method":"x"}"#));
        assert_eq!(legacy["mcp-protocol-version"], "2025-06-18");
        assert_eq!(legacy[SESSION_ID], "sid");
        assert!(
            Peek::of(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#)
                .id
                .is_none()
        );
    }

    #[test]
    fn the_envelope_tells_an_id_less_error_from_an_answer_and_from_other_json() {
        let read = |text: &str| {
            serde_json::from_str::<Envelope>(text)
                .ok()
                .filter(|e| e.jsonrpc.is_some())
                .map(|e| (e.id.is_none(), e.error.is_some()))
        };
        let refusal = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"x"}}"#;
        assert_eq!(read(refusal), Some((true, true)));
        let answer =
            r#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"a"}]}}"#;
        assert_eq!(read(answer), Some((false, false)));
        assert_eq!(read(r#"{"error":"unauthorized"}"#), None);
        assert_eq!(read("not json"), None);
    }

    #[test]
    fn line_ends_between_tokens_become_spaces_and_numbers_stay_exact() {
        let text = "{\"a\": 9007199254740993,\r\n \"f\": 1.50}";
        assert_eq!(one_line(text), "{\"a\": 9007199254740993,   \"f\": 1.50}");
    }
}

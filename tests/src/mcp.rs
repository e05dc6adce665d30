//! A raw JSON-RPC client of an MCP Streamable HTTP endpoint (the frontend, or the fixture in
//! `--http` mode), for both eras. It shows tests the exact status, headers and body.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::{Map, Value, json};

use crate::support::{LEGACY_VERSION, MODERN_VERSION};

/// Per-request timeout of ordinary requests (SSE streams have none).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Which MCP era a client speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Era {
    /// 2025-06-18: `initialize`, `MCP-Protocol-Version` after it, `Mcp-Session-Id` if issued.
    Legacy,
    /// 2026-07-28: per-request `_meta`, `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`.
    Modern,
}

/// A raw MCP client over HTTP.
pub struct Mcp {
    http: reqwest::Client,
    url: String,
    token: Option<String>,
    era: Era,
    next_id: AtomicU64,
    session: Mutex<Option<String>>,
}

/// `(status, headers, body)`: the body is the JSON-RPC message (for an SSE response, the
/// response message among its events), `Value::Null` when empty, a string when not JSON.
pub type Reply = (u16, HeaderMap, Value);

impl Mcp {
    /// A legacy-era client. `token` is sent as `Authorization: Bearer <token>`; `""` sends none.
    pub fn legacy(url: &str, token: &str) -> Mcp {
        Self::new(url, token, Era::Legacy)
    }

    /// A modern-era client. `token` as in [`Mcp::legacy`].
    pub fn modern(url: &str, token: &str) -> Mcp {
        Self::new(url, token, Era::Modern)
    }

    fn new(url: &str, token: &str, era: Era) -> Mcp {
        let http = reqwest::Client::builder()
            .no_proxy()
            .build()
            .unwrap_or_else(|e| panic!("cannot build an HTTP client: {e}"));
        Mcp {
            http,
            url: url.to_owned(),
            token: (!token.is_empty()).then(|| token.to_owned()),
            era,
            next_id: AtomicU64::new(1),
            session: Mutex::new(None),
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn era(&self) -> Era {
        self.era
    }

    /// The bearer token this client sends, if any.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// The `Mcp-Session-Id` captured at `initialize`, if the server issued one.
    pub fn session_id(&self) -> Option<String> {
        self.session.lock().ok().and_then(|s| s.clone())
    }

    /// Drops the `Mcp-Session-Id` captured at `initialize` (after a 404 that ended it).
    pub fn forget_session(&self) {
        if let Ok(mut slot) = self.session.lock() {
            *slot = None;
        }
    }

    fn fresh_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::SeqCst)
    }

    /// The JSON-RPC message this client would send (modern: `_meta` added unless present).
    pub fn message(&self, id: Option<Value>, method: &str, params: Value) -> Value {
        let params = match self.era {
            Era::Legacy => params,
            Era::Modern => with_modern_meta(params),
        };
        let mut msg = json!({"jsonrpc": "2.0", "method": method});
        if let Some(obj) = msg.as_object_mut() {
            if let Some(id) = id {
                obj.insert("id".to_owned(), id);
            }
            if !params.is_null() {
                obj.insert("params".to_owned(), params);
            }
        }
        msg
    }

    /// The standard headers this client adds for `msg` (besides auth and content type).
    pub fn standard_headers(&self, msg: &Value) -> Vec<(String, String)> {
        let method = msg["method"].as_str().unwrap_or("");
        let mut h = Vec::new();
        match self.era {
            Era::Legacy => {
                if method != "initialize" {
                    h.push(("MCP-Protocol-Version".to_owned(), LEGACY_VERSION.to_owned()));
                }
                if let Some(s) = self.session_id() {
                    h.push(("Mcp-Session-Id".to_owned(), s));
                }
            }
            Era::Modern => {
                h.push(("MCP-Protocol-Version".to_owned(), MODERN_VERSION.to_owned()));
                h.push(("Mcp-Method".to_owned(), method.to_owned()));
                let name = match method {
                    "tools/call" | "prompts/get" => msg["params"]["name"].as_str(),
                    "resources/read" => msg["params"]["uri"].as_str(),
                    _ => None,
                };
                if let Some(n) = name {
                    h.push(("Mcp-Name".to_owned(), n.to_owned()));
                }
            }
        }
        h
    }

    /// Sends a request with a fresh id and returns `(status, headers, body)`.
    pub async fn request(&self, method: &str, params: Value) -> Reply {
        self.request_with_headers(method, params, &[]).await
    }

    /// [`Mcp::request`] with extra headers (e.g. `Mcp-Param-*`), added after the standard ones.
    pub async fn request_with_headers(
        &self,
        method: &str,
        params: Value,
        extra: &[(&str, &str)],
    ) -> Reply {
        let msg = self.message(Some(json!(self.fresh_id())), method, params);
        let mut headers = self.standard_headers(&msg);
        headers.extend(
            extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        let body = serde_json::to_vec(&msg).unwrap_or_default();
        self.post_raw(body, &headers).await
    }

    /// Sends a notification (no id); expect 202 and no body.
    pub async fn notify(&self, method: &str, params: Value) -> Reply {
        let msg = self.message(None, method, params);
        let headers = self.standard_headers(&msg);
        let body = serde_json::to_vec(&msg).unwrap_or_default();
        self.post_raw(body, &headers).await
    }

    /// POSTs `body` as-is with `Content-Type: application/json`, `Accept` for both types, the
    /// bearer token (if any) and `headers` (which win over those defaults). For wire tests.
    pub async fn post_raw(&self, body: Vec<u8>, headers: &[(String, String)]) -> Reply {
        self.try_post_raw(body, headers)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Mcp::request`] that returns a failure to connect, send or read (the server went
    /// away mid-request, say) as an `Err` naming it instead of panicking: for clients that
    /// expect the server to die now and then (`tutti-soak`).
    pub async fn try_request(&self, method: &str, params: Value) -> Result<Reply, String> {
        let msg = self.message(Some(json!(self.fresh_id())), method, params);
        let headers = self.standard_headers(&msg);
        let body = serde_json::to_vec(&msg).unwrap_or_default();
        self.try_post_raw(body, &headers).await
    }

    /// [`Mcp::notify`] with a transport failure as an `Err`.
    pub async fn try_notify(&self, method: &str, params: Value) -> Result<Reply, String> {
        let msg = self.message(None, method, params);
        let headers = self.standard_headers(&msg);
        let body = serde_json::to_vec(&msg).unwrap_or_default();
        self.try_post_raw(body, &headers).await
    }

    /// [`Mcp::post_raw`] with a transport failure as an `Err`.
    async fn try_post_raw(
        &self,
        body: Vec<u8>,
        headers: &[(String, String)],
    ) -> Result<Reply, String> {
        let resp = self
            .builder(reqwest::Method::POST, headers)
            .timeout(REQUEST_TIMEOUT)
            .body(body)
            .send()
            .await
            .map_err(|e| format!("POST {} failed: {}", self.url, error_chain(&e)))?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        if let Some(s) = headers.get("mcp-session-id").and_then(|v| v.to_str().ok())
            && let Ok(mut slot) = self.session.lock()
        {
            *slot = Some(s.to_owned());
        }
        let bytes = resp.bytes().await.map_err(|e| {
            format!(
                "reading the body from {} failed: {}",
                self.url,
                error_chain(&e)
            )
        })?;
        let is_sse = content_type(&headers).starts_with("text/event-stream");
        Ok((status, headers, parse_body(&bytes, is_sse)))
    }

    /// Sends any method (GET, DELETE, …) with the default headers; body parsed as in
    /// [`Mcp::post_raw`].
    pub async fn send_method(
        &self,
        method: reqwest::Method,
        headers: &[(String, String)],
    ) -> Reply {
        let resp = self
            .builder(method.clone(), headers)
            .timeout(REQUEST_TIMEOUT)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {} failed: {e}", self.url));
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let bytes = resp.bytes().await.unwrap_or_default();
        let is_sse = content_type(&headers).starts_with("text/event-stream");
        (status, headers, parse_body(&bytes, is_sse))
    }

    fn builder(
        &self,
        method: reqwest::Method,
        headers: &[(String, String)],
    ) -> reqwest::RequestBuilder {
        let mut b = self
            .http
            .request(method, &self.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream");
        if let Some(t) = &self.token {
            b = b.header("Authorization", format!("Bearer {t}"));
        }
        let mut hm = HeaderMap::new();
        for (k, v) in headers {
            match (
                reqwest::header::HeaderName::from_bytes(k.as_bytes()),
                reqwest::header::HeaderValue::from_str(v),
            ) {
                (Ok(name), Ok(value)) => {
                    hm.insert(name, value);
                }
                _ => panic!("invalid test header {k}: {v}"),
            }
        }
        // `headers()` replaces same-named defaults set above.
        b.headers(hm)
    }

    /// Legacy: `initialize` (then `notifications/initialized`); modern: `server/discover`.
    /// Returns the `result`; panics on anything else.
    pub async fn initialize(&self) -> Value {
        let (method, params) = match self.era {
            Era::Legacy => (
                "initialize",
                json!({"protocolVersion": LEGACY_VERSION, "capabilities": {},
                       "clientInfo": {"name": "tutti-tests", "version": "0"}}),
            ),
            Era::Modern => ("server/discover", json!({})),
        };
        let (status, _, body) = self.request(method, params).await;
        let result = expect_result(method, status, &body);
        if self.era == Era::Legacy {
            let (status, _, body) = self.notify("notifications/initialized", Value::Null).await;
            assert_eq!(status, 202, "notifications/initialized: {body}");
        }
        result
    }

    /// Pages through `tools/list` and returns every tool. Panics on an error.
    pub async fn list_tools(&self) -> Vec<Value> {
        let mut tools = Vec::new();
        let mut cursor: Option<Value> = None;
        for _ in 0..10_000 {
            let params = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => json!({}),
            };
            let (status, _, body) = self.request("tools/list", params).await;
            let result = expect_result("tools/list", status, &body);
            tools.extend(result["tools"].as_array().cloned().unwrap_or_default());
            match result.get("nextCursor") {
                Some(c) if !c.is_null() => cursor = Some(c.clone()),
                _ => return tools,
            }
        }
        panic!("tools/list did not end after 10000 pages");
    }

    /// Calls a tool; returns the whole reply so tests can check `result` or `error`.
    pub async fn call_tool(&self, name: &str, args: Value) -> Reply {
        self.request("tools/call", json!({"name": name, "arguments": args}))
            .await
    }

    /// Calls a tool and returns its `result`; panics on a JSON-RPC error or a non-200.
    pub async fn call_tool_ok(&self, name: &str, args: Value) -> Value {
        let (status, _, body) = self.call_tool(name, args).await;
        expect_result(&format!("tools/call {name}"), status, &body)
    }

    /// Opens a streaming request (e.g. modern `subscriptions/listen`, or a `tools/call` whose
    /// stream the test will drop to cancel) and returns the open stream.
    pub async fn stream(&self, method: &str, params: Value, extra: &[(&str, &str)]) -> SseStream {
        let msg = self.message(Some(json!(self.fresh_id())), method, params);
        let mut headers = self.standard_headers(&msg);
        headers.extend(
            extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        let body = serde_json::to_vec(&msg).unwrap_or_default();
        let resp = self
            .builder(reqwest::Method::POST, &headers)
            .body(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {} failed: {e}", self.url));
        SseStream {
            status: resp.status().as_u16(),
            headers: resp.headers().clone(),
            id: msg["id"].clone(),
            resp,
            buf: Vec::new(),
            comments: 0,
        }
    }

    /// The legacy notification stream (SPEC §11): `GET` with `Accept: text/event-stream`, and
    /// the `Mcp-Session-Id` captured at `initialize` when there was one.
    pub async fn get_stream(&self) -> SseStream {
        let session = self.session_id();
        let extra: Vec<(&str, &str)> = session
            .as_deref()
            .map(|s| ("Mcp-Session-Id", s))
            .into_iter()
            .collect();
        self.get_stream_with(&extra).await
    }

    /// [`Mcp::get_stream`] with exactly the extra headers given (no captured session id).
    pub async fn get_stream_with(&self, extra: &[(&str, &str)]) -> SseStream {
        let mut b = self
            .http
            .get(&self.url)
            .header("Accept", "text/event-stream");
        if let Some(t) = &self.token {
            b = b.header("Authorization", format!("Bearer {t}"));
        }
        for (name, value) in extra {
            b = b.header(*name, *value);
        }
        let resp = b
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {} failed: {e}", self.url));
        SseStream {
            status: resp.status().as_u16(),
            headers: resp.headers().clone(),
            id: Value::Null,
            resp,
            buf: Vec::new(),
            comments: 0,
        }
    }

    /// Modern `subscriptions/listen` with the given `notifications` object, e.g.
    /// `json!({"toolsListChanged": true})`.
    pub async fn listen(&self, notifications: Value) -> SseStream {
        self.stream(
            "subscriptions/listen",
            json!({"notifications": notifications}),
            &[],
        )
        .await
    }
}

/// An error with its sources, `: `-joined (reqwest's own message hides the cause:
/// "connection refused", "connection closed before message completed").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

fn expect_result(what: &str, status: u16, body: &Value) -> Value {
    assert_eq!(status, 200, "{what}: HTTP {status}, body {body}");
    match body.get("result") {
        Some(r) => r.clone(),
        None => panic!("{what}: no result in {body}"),
    }
}

/// Adds the required modern `_meta` unless `params` already has a `_meta`.
fn with_modern_meta(params: Value) -> Value {
    let mut obj = match params {
        Value::Object(m) => m,
        Value::Null => Map::new(),
        other => return other,
    };
    obj.entry("_meta").or_insert_with(|| {
        json!({
            "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "tutti-tests", "version": "0"},
        })
    });
    Value::Object(obj)
}

fn content_type(headers: &HeaderMap) -> String {
    headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase()
}

fn parse_body(bytes: &[u8], is_sse: bool) -> Value {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Value::Null;
    }
    if is_sse {
        let events = sse_events(bytes);
        let response = events
            .iter()
            .rev()
            .find(|e| e.get("result").is_some() || e.get("error").is_some());
        return match response.or(events.last()) {
            Some(v) => v.clone(),
            None => Value::String(String::from_utf8_lossy(bytes).into_owned()),
        };
    }
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

/// The JSON `data` of every event in a complete SSE body.
fn sse_events(bytes: &[u8]) -> Vec<Value> {
    let text = String::from_utf8_lossy(bytes).replace("\r\n", "\n");
    text.split("\n\n")
        .filter_map(|block| match parse_frame(block) {
            Frame::Data(v) => Some(v),
            _ => None,
        })
        .collect()
}

enum Frame {
    Data(Value),
    Comment,
    Empty,
}

fn parse_frame(block: &str) -> Frame {
    let mut data = Vec::new();
    let mut comment = false;
    for line in block.lines() {
        if let Some(rest) = line.strip_prefix("data:") {
            data.push(rest.strip_prefix(' ').unwrap_or(rest));
        } else if line.starts_with(':') {
            comment = true;
        }
    }
    if data.is_empty() {
        return if comment {
            Frame::Comment
        } else {
            Frame::Empty
        };
    }
    let joined = data.join("\n");
    Frame::Data(serde_json::from_str(&joined).unwrap_or(Value::String(joined)))
}

/// An open `text/event-stream` response. Dropping it closes the connection (which, for a
/// modern `tools/call`, cancels the call).
pub struct SseStream {
    /// HTTP status of the response.
    pub status: u16,
    /// Response headers.
    pub headers: HeaderMap,
    /// The JSON-RPC id of the request that opened the stream.
    pub id: Value,
    resp: reqwest::Response,
    buf: Vec<u8>,
    comments: usize,
}

impl SseStream {
    /// The next event's JSON data; `None` when the stream ends or `timeout` passes first.
    /// Comment frames (keep-alives) are counted in [`SseStream::comments`] and skipped.
    pub async fn next_event(&mut self, timeout: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(frame) = self.take_frame() {
                match parse_frame(&frame) {
                    Frame::Data(v) => return Some(v),
                    Frame::Comment => self.comments += 1,
                    Frame::Empty => {}
                }
                continue;
            }
            let chunk = tokio::time::timeout_at(deadline, self.resp.chunk()).await;
            match chunk {
                Ok(Ok(Some(bytes))) => self.buf.extend_from_slice(&bytes),
                Ok(Ok(None)) | Ok(Err(_)) | Err(_) => return None,
            }
        }
    }

    /// Keep-alive comment frames seen so far.
    pub fn comments(&self) -> usize {
        self.comments
    }

    fn take_frame(&mut self) -> Option<String> {
        // Normalise CRLF lazily: search for a blank line in either form.
        let text = String::from_utf8_lossy(&self.buf).into_owned();
        let (pos, sep) = [("\r\n\r\n", 4), ("\n\n", 2)]
            .iter()
            .filter_map(|(s, n)| text.find(s).map(|p| (p, *n)))
            .min_by_key(|(p, _)| *p)?;
        let frame = text[..pos].replace("\r\n", "\n");
        let consumed = text[..pos + sep].len();
        self.buf.drain(..consumed.min(self.buf.len()));
        Some(frame)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modern_messages_carry_meta_and_headers() {
        let m = Mcp::modern("http://127.0.0.1:1/mcp/connector", "t");
        let msg = m.message(
            Some(json!(1)),
            "tools/call",
            json!({"name": "x_echo", "arguments": {}}),
        );
        assert_eq!(
            msg["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"],
            json!(MODERN_VERSION)
        );
        let h = m.standard_headers(&msg);
        assert!(h.contains(&("Mcp-Method".to_owned(), "tools/call".to_owned())));
        assert!(h.contains(&("Mcp-Name".to_owned(), "x_echo".to_owned())));
        assert!(h.contains(&("MCP-Protocol-Version".to_owned(), MODERN_VERSION.to_owned())));
        // A caller-provided _meta is left alone.
        let msg = m.message(Some(json!(2)), "tools/list", json!({"_meta": {}}));
        assert_eq!(msg["params"]["_meta"], json!({}));
    }

    #[test]
    fn legacy_messages_are_plain() {
        let m = Mcp::legacy("http://127.0.0.1:1/mcp/connector", "");
        let msg = m.message(Some(json!(1)), "initialize", json!({}));
        assert!(msg["params"].get("_meta").is_none());
        assert!(m.standard_headers(&msg).is_empty());
        let msg = m.message(None, "notifications/initialized", Value::Null);
        assert!(msg.get("params").is_none() && msg.get("id").is_none());
        assert_eq!(
            m.standard_headers(&msg),
            vec![("MCP-Protocol-Version".to_owned(), LEGACY_VERSION.to_owned())]
        );
    }

    #[test]
    fn sse_bodies_yield_the_response() {
        let body = b": keep-alive\n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n";
        assert_eq!(
            parse_body(body, true),
            json!({"jsonrpc": "2.0", "id": 1, "result": {}})
        );
        assert_eq!(parse_body(b"", false), Value::Null);
        assert_eq!(parse_body(b"nope", false), json!("nope"));
    }
}

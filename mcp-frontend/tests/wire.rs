//! Wire-level tests: the real HTTP server on 127.0.0.1:0 with a fake kernel and fake
//! workers behind the `Backend` trait, driven with reqwest.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tutti_mcp_frontend::{Backend, Error, Identity, RouteStream, ServeOptions, serve};
use tutti_proto::kernel::{
    ConnectorRemoved, ConnectorRoute, RouteEvent, RouteSnapshot, RoutedTool, RuntimeShutdown,
    SessionsRevoked, route_event,
};
use tutti_proto::worker::{
    CallError, CallToolReply, CallToolRequest, CancelRequest, call_tool_reply,
};

const WAIT: Duration = Duration::from_secs(10);
const TOKEN: &str = "tts_good";
const OTHER_TOKEN: &str = "tts_other";

// === fake backend ===

struct Fake {
    tokens: Mutex<HashMap<String, Identity>>,
    verifications: AtomicUsize,
    routes: Mutex<Option<mpsc::UnboundedReceiver<RouteEvent>>>,
    calls: mpsc::UnboundedSender<CallToolRequest>,
    cancels: mpsc::UnboundedSender<CancelRequest>,
    /// For the tool `race`: a route event the fake sends (through the kernel's stream) while
    /// it answers, so that the fence and the answer are both there at the frontend's next poll.
    race_event: Mutex<Option<(mpsc::UnboundedSender<RouteEvent>, RouteEvent)>>,
}

impl Fake {
    fn revoke(&self, token: &str) {
        self.tokens.lock().expect("lock").remove(token);
    }
}

impl Backend for Fake {
    fn verify_session<'a>(
        &'a self,
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<Identity>, Error>> {
        self.verifications.fetch_add(1, Ordering::SeqCst);
        let found = self.tokens.lock().expect("lock").get(token).cloned();
        Box::pin(async move { Ok(found) })
    }

    fn watch_routes(&self) -> BoxFuture<'_, Result<RouteStream, Error>> {
        let rx = self.routes.lock().expect("lock").take();
        Box::pin(async move {
            match rx {
                Some(rx) => Ok(futures_util::stream::unfold(rx, |mut rx| async move {
                    rx.recv().await.map(|event| (Ok(event), rx))
                })
                .boxed()),
                None => Err(Error::KernelUnavailable {
                    detail: "fake kernel is gone".into(),
                }),
            }
        })
    }

    fn call_tool<'a>(
        &'a self,
        endpoint: &'a str,
        request: CallToolRequest,
    ) -> BoxFuture<'a, Result<CallToolReply, Error>> {
        let _ = self.calls.send(request.clone());
        let race_event = self.race_event.lock().expect("lock").take();
        Box::pin(async move {
            let generation = request.generation;
            match request.tool.as_str() {
                "hang" => std::future::pending().await,
                "race" => {
                    if let Some((routes, event)) = race_event {
                        let _ = routes.send(event);
                        // Let the route watcher apply it (a current-thread runtime runs every
                        // other ready task before a yielded one) before the answer is ready.
                        tokio::task::yield_now().await;
                    }
                    Ok(CallToolReply {
                        outcome: Some(call_tool_reply::Outcome::ResultJson(
                            r#"{"content":[{"type":"text","text":"answered"}]}"#.into(),
                        )),
                        generation,
                    })
                }
                "boom" => Ok(CallToolReply {
                    outcome: Some(call_tool_reply::Outcome::Error(CallError {
                        code: -32001,
                        message: "boom happened".into(),
                        data_json: r#"{"detail":1}"#.into(),
                        reason: "upstream_error".into(),
                    })),
                    generation,
                }),
                "dead" => Err(Error::WorkerUnavailable {
                    endpoint: endpoint.to_owned(),
                    detail: "connection reset".into(),
                }),
                _ => {
                    let args: Value =
                        serde_json::from_str(&request.arguments_json).unwrap_or(Value::Null);
                    let result = json!({
                        "content": [{"type": "text", "text": format!("called {}", request.tool)}],
                        "structuredContent": args,
                        "isError": false,
                    });
                    Ok(CallToolReply {
                        outcome: Some(call_tool_reply::Outcome::ResultJson(result.to_string())),
                        generation,
                    })
                }
            }
        })
    }

    fn cancel<'a>(
        &'a self,
        _endpoint: &'a str,
        request: CancelRequest,
    ) -> BoxFuture<'a, Result<(), Error>> {
        let _ = self.cancels.send(request);
        Box::pin(async { Ok(()) })
    }

    fn retain_endpoints(&self, _live: &HashSet<String>) {}
}

// === route fixtures ===

fn tool(local: &str, upstream: &str, def: Value) -> RoutedTool {
    RoutedTool {
        name: local.into(),
        upstream_name: upstream.into(),
        definition_json: def.to_string(),
        risk: "medium".into(),
    }
}

fn demo(generation: u64, extra: Vec<RoutedTool>) -> ConnectorRoute {
    let mut tools = vec![
        tool(
            "demo_echo",
            "echo",
            json!({"name":"echo","description":"Echo text","inputSchema":{"type":"object",
                "properties":{"text":{"type":"string"},"count":{"type":"integer"}},"required":["text"]}}),
        ),
        tool(
            "demo_hang",
            "hang",
            json!({"name":"hang","inputSchema":{"type":"object"}}),
        ),
        tool(
            "demo_boom",
            "boom",
            json!({"name":"boom","inputSchema":{"type":"object"}}),
        ),
        tool(
            "demo_dead",
            "dead",
            json!({"name":"dead","inputSchema":{"type":"object"}}),
        ),
        tool(
            "demo_region",
            "region",
            json!({"name":"region","description":"Regional","inputSchema":{"type":"object","properties":{
                "region":{"type":"string","x-mcp-header":"Region"},
                "n":{"type":"integer","x-mcp-header":"N"}},"required":["region"]}}),
        ),
    ];
    tools.extend(extra);
    ConnectorRoute {
        key: "demo".into(),
        name: "Demo".into(),
        generation,
        worker_endpoint: format!("/tmp/w-demo-{generation}.sock"),
        call_timeout_ms: 30_000,
        tools,
        has_cli: false,
        has_mcp: true,
        ..Default::default()
    }
}

fn other() -> ConnectorRoute {
    ConnectorRoute {
        key: "other".into(),
        name: "Other".into(),
        generation: 1,
        worker_endpoint: "/tmp/w-other-1.sock".into(),
        call_timeout_ms: 0,
        tools: vec![tool(
            "other_b",
            "b",
            json!({"name":"b","title":"Bee","description":"","inputSchema":{"type":"object"},
                   "outputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}),
        )],
        has_cli: true,
        has_mcp: true,
        ..Default::default()
    }
}

fn slowpoke() -> ConnectorRoute {
    ConnectorRoute {
        key: "slowpoke".into(),
        name: "Slowpoke".into(),
        generation: 4,
        worker_endpoint: "/tmp/w-slowpoke-4.sock".into(),
        call_timeout_ms: 50,
        tools: vec![tool(
            "slowpoke_hang",
            "hang",
            json!({"name":"hang","inputSchema":{"type":"object"}}),
        )],
        has_cli: false,
        has_mcp: true,
        ..Default::default()
    }
}

fn event(revision: u64, event: route_event::Event) -> RouteEvent {
    RouteEvent {
        revision,
        event: Some(event),
    }
}

// === harness ===

struct Harness {
    base: String,
    url: String,
    client: reqwest::Client,
    fake: Arc<Fake>,
    routes: Option<mpsc::UnboundedSender<RouteEvent>>,
    revision: u64,
    calls: mpsc::UnboundedReceiver<CallToolRequest>,
    cancels: mpsc::UnboundedReceiver<CancelRequest>,
    stop: Option<oneshot::Sender<()>>,
    server: JoinHandle<Result<(), Error>>,
}

async fn start_with(page_size: usize) -> Harness {
    let (routes_tx, routes_rx) = mpsc::unbounded_channel();
    let (calls_tx, calls) = mpsc::unbounded_channel();
    let (cancels_tx, cancels) = mpsc::unbounded_channel();
    let mut tokens = HashMap::new();
    tokens.insert(
        TOKEN.to_owned(),
        Identity {
            workspace: "w1".into(),
            session: "s1".into(),
            tools: tutti_proto::kernel::ToolsMode::All,
            confirm_high: false,
            confirm_via: Default::default(),
        },
    );
    tokens.insert(
        OTHER_TOKEN.to_owned(),
        Identity {
            workspace: "w1".into(),
            session: "s2".into(),
            tools: tutti_proto::kernel::ToolsMode::All,
            confirm_high: false,
            confirm_via: Default::default(),
        },
    );
    let fake = Arc::new(Fake {
        tokens: Mutex::new(tokens),
        verifications: AtomicUsize::new(0),
        routes: Mutex::new(Some(routes_rx)),
        calls: calls_tx,
        cancels: cancels_tx,
        race_event: Mutex::new(None),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let backend: Arc<dyn Backend> = fake.clone();
    let server = tokio::spawn(serve(
        listener,
        backend,
        ServeOptions {
            page_size,
            session_id_key: None,
        },
        async move {
            let _ = stop_rx.await;
        },
    ));
    routes_tx
        .send(event(
            1,
            route_event::Event::Snapshot(RouteSnapshot {
                connectors: vec![demo(1, vec![]), other(), slowpoke()],
            }),
        ))
        .expect("send snapshot");
    Harness {
        base: format!("http://127.0.0.1:{port}"),
        url: format!("http://127.0.0.1:{port}/mcp/connector"),
        client: reqwest::Client::new(),
        fake,
        routes: Some(routes_tx),
        revision: 1,
        calls,
        cancels,
        stop: Some(stop_tx),
        server,
    }
}

async fn start() -> Harness {
    start_with(1000).await
}

impl Harness {
    fn send(&mut self, e: route_event::Event) {
        self.revision += 1;
        self.routes
            .as_ref()
            .expect("route stream open")
            .send(event(self.revision, e))
            .expect("send route event");
    }

    fn post(&self) -> reqwest::RequestBuilder {
        self.client
            .post(&self.url)
            .header("authorization", format!("Bearer {TOKEN}"))
    }

    async fn legacy(&self, body: Value) -> (StatusCode, Value) {
        let r = self.post().json(&body).send().await.expect("send");
        let status = r.status();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    async fn legacy_call(&self, id: Value, name: &str, arguments: Value) -> Value {
        let (status, body) = self
            .legacy(json!({"jsonrpc":"2.0","id":id,"method":"tools/call",
                "params":{"name":name,"arguments":arguments}}))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }

    /// A conformant modern request: `_meta` in the body and the standard headers.
    fn modern_request(&self, id: Value, method: &str, params: Value) -> reqwest::RequestBuilder {
        let mut params = params;
        params["_meta"] = modern_meta();
        let mut builder = self
            .post()
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", method);
        if method == "tools/call" {
            builder = builder.header("mcp-name", params["name"].as_str().unwrap_or_default());
        }
        builder.json(&json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}))
    }

    async fn modern(&self, id: Value, method: &str, params: Value) -> (StatusCode, Value) {
        let r = self
            .modern_request(id, method, params)
            .send()
            .await
            .expect("send");
        let status = r.status();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    async fn listen(&self, id: Value, notifications: Value) -> Sse {
        let r = self
            .modern_request(
                id,
                "subscriptions/listen",
                json!({"notifications": notifications}),
            )
            .send()
            .await
            .expect("listen");
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(
            r.headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok()),
            Some("text/event-stream")
        );
        assert_eq!(
            r.headers()
                .get("x-accel-buffering")
                .and_then(|v| v.to_str().ok()),
            Some("no")
        );
        Sse {
            response: r,
            buffer: String::new(),
        }
    }

    async fn next_call(&mut self) -> CallToolRequest {
        tokio::time::timeout(WAIT, self.calls.recv())
            .await
            .expect("a call reached the worker")
            .expect("call channel open")
    }

    async fn next_cancel(&mut self) -> CancelRequest {
        tokio::time::timeout(WAIT, self.cancels.recv())
            .await
            .expect("a cancel reached the worker")
            .expect("cancel channel open")
    }

    /// Sends a route event that changes the visible tool list and waits until it is live.
    async fn change_tools(&mut self, e: route_event::Event) {
        let mut sse = self
            .listen(json!("sync"), json!({"toolsListChanged": true}))
            .await;
        let ack = sse.next().await.expect("ack");
        assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
        self.send(e);
        let note = sse.next().await.expect("list_changed");
        assert_eq!(note["method"], "notifications/tools/list_changed");
    }

    async fn stop(mut self) -> Result<(), Error> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(WAIT, &mut self.server)
            .await
            .expect("server stops in time")
            .expect("server task")
    }
}

fn modern_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "wire-test", "version": "1"},
    })
}

struct Sse {
    response: reqwest::Response,
    buffer: String,
}

impl Sse {
    /// The next `data:` event, or `None` when the stream ended.
    async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let data: Vec<&str> = block
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(str::trim)
                    .collect();
                if data.is_empty() {
                    continue;
                }
                return Some(serde_json::from_str(&data.join("\n")).expect("event is JSON"));
            }
            let chunk = tokio::time::timeout(WAIT, self.response.chunk())
                .await
                .expect("stream produced data in time")
                .expect("stream readable");
            match chunk {
                Some(bytes) => self
                    .buffer
                    .push_str(std::str::from_utf8(&bytes).expect("utf-8")),
                None => return None,
            }
        }
    }
}

fn no_session_or_cors(headers: &reqwest::header::HeaderMap) {
    assert!(headers.get("mcp-session-id").is_none());
    no_cors(headers);
}

fn no_cors(headers: &reqwest::header::HeaderMap) {
    assert!(
        !headers
            .keys()
            .any(|k| k.as_str().starts_with("access-control-"))
    );
}

// === SPEC §5: the HTTP edge ===

#[tokio::test]
async fn host_origin_and_bearer_are_checked_in_order() {
    let h = start().await;
    let ping = json!({"jsonrpc":"2.0","id":1,"method":"ping"});

    // Bad Host, no token: 403 (Host comes first).
    let r = h
        .client
        .post(&h.url)
        .header("host", "evil.example.com")
        .json(&ping)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), StatusCode::FORBIDDEN);

    // Good Host, bad Origin, no token: 403.
    let r = h
        .client
        .post(&h.url)
        .header("origin", "http://evil.example.com")
        .json(&ping)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = h
        .post()
        .header("origin", "https://localhost")
        .json(&ping)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), StatusCode::FORBIDDEN);

    // No token / unknown token: 401 + WWW-Authenticate: Bearer.
    for auth in [None, Some("Bearer tts_nope"), Some("Basic abc")] {
        let mut req = h.client.post(&h.url).json(&ping);
        if let Some(auth) = auth {
            req = req.header("authorization", auth);
        }
        let r = req.send().await.expect("send");
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{auth:?}");
        assert_eq!(
            r.headers()
                .get("www-authenticate")
                .and_then(|v| v.to_str().ok()),
            Some("Bearer")
        );
        no_session_or_cors(r.headers());
    }

    // Loopback Host variants and a loopback Origin with a token pass.
    for (host, origin) in [
        ("localhost:1", "http://localhost:3000"),
        ("[::1]:80", "http://127.0.0.1"),
    ] {
        let r = h
            .post()
            .header("host", host)
            .header("origin", origin)
            .json(&ping)
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), StatusCode::OK, "{host} {origin}");
        no_session_or_cors(r.headers());
    }
    h.stop().await.expect("clean stop");
}

#[tokio::test]
async fn every_request_is_verified_and_revocation_holds() {
    let h = start().await;
    let ping = json!({"jsonrpc":"2.0","id":1,"method":"ping"});
    let before = h.fake.verifications.load(Ordering::SeqCst);
    assert_eq!(h.legacy(ping.clone()).await.0, StatusCode::OK);
    assert_eq!(h.legacy(ping.clone()).await.0, StatusCode::OK);
    assert_eq!(h.fake.verifications.load(Ordering::SeqCst), before + 2);
    h.fake.revoke(TOKEN);
    assert_eq!(h.legacy(ping).await.0, StatusCode::UNAUTHORIZED);
    h.stop().await.expect("clean stop");
}

/// Small bodies are read while the token is verified: nothing in them may act or answer
/// before the verdict.
#[tokio::test]
async fn an_early_read_body_is_never_acted_on_without_a_valid_token() {
    let mut h = start().await;
    let call = json!({"jsonrpc":"2.0","id":1,"method":"tools/call",
        "params":{"name":"demo_echo","arguments":{"text":"hi","count":2}}});
    for body in [call.to_string(), "{not json".to_owned(), "[1,2]".to_owned()] {
        let r = h
            .client
            .post(&h.url)
            .header("authorization", "Bearer tts_nope")
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{body}");
    }
    assert!(h.calls.try_recv().is_err(), "no call reached a worker");
    h.legacy_call(json!(2), "demo_echo", json!({"text":"hi","count":2}))
        .await;
    assert_eq!(h.next_call().await.tool, "echo");
    h.stop().await.expect("clean stop");
}

/// A request with a wrong token and a small declared body that never comes is
/// answered 401 at once and its connection closed; the body is not waited for.
#[tokio::test]
async fn a_wrong_token_is_answered_without_waiting_for_the_body() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let h = start().await;
    let addr = h.base.trim_start_matches("http://").to_owned();
    let mut conn = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    let head = format!(
        "POST /mcp/connector HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer tts_nope\r\n\
         Content-Type: application/json\r\nContent-Length: 60000\r\n\r\n{{"
    );
    conn.write_all(head.as_bytes()).await.expect("headers");
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), conn.read_to_end(&mut answer))
        .await
        .expect("answered and closed without the body")
        .expect("read");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 401 "), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );
    h.stop().await.expect("clean stop");
}

#[tokio::test]
async fn methods_paths_content_type_and_size() {
    let h = start().await;
    for method in [
        reqwest::Method::GET,
        reqwest::Method::DELETE,
        reqwest::Method::PUT,
    ] {
        let r = h
            .client
            .request(method.clone(), &h.url)
            .header("authorization", format!("Bearer {TOKEN}"))
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED, "{method}");
        assert_eq!(
            r.headers().get("allow").and_then(|v| v.to_str().ok()),
            Some("POST")
        );
    }
    for path in OTHER_PATHS {
        let r = h
            .client
            .post(format!("{}{path}", h.base))
            .header("authorization", format!("Bearer {TOKEN}"))
            .json(&json!({}))
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "{path}");
    }
    let r = h
        .post()
        .header("content-type", "text/plain")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let r = h
        .post()
        .header("content-type", "application/json; charset=utf-8")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), StatusCode::OK);

    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{}"}}}}"#,
        "x".repeat(4 * 1024 * 1024 + 1)
    );
    let r = h
        .post()
        .header("content-type", "application/json")
        .body(big)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    h.stop().await.expect("clean stop");
}

/// Paths other than the MCP endpoint (SPEC §5: 404 once authenticated).
const OTHER_PATHS: [&str; 4] = [
    "/",
    "/mcp",
    "/mcp/connector/x",
    "/.well-known/oauth-protected-resource",
];

/// An oversized body is drained and answered 413, repeatedly on one client (the drain ends;
/// it never hangs). The connection-reset race the drain prevents shows up against the real
/// binary (tests/tests/e2e/calls/frontend.rs `status_codes_on_the_wire`), not reliably in-process.
#[tokio::test]
async fn oversized_bodies_always_get_413() {
    let h = start().await;
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{}"}}}}"#,
        "x".repeat(6 * 1024 * 1024)
    );
    for attempt in 0..5 {
        let r = h
            .post()
            .header("content-type", "application/json")
            .body(big.clone())
            .send()
            .await
            .unwrap_or_else(|e| panic!("attempt {attempt}: {e}"));
        assert_eq!(
            r.status(),
            StatusCode::PAYLOAD_TOO_LARGE,
            "attempt {attempt}"
        );
    }
    h.stop().await.expect("clean stop");
}

/// SPEC §5 "every request, in this order": the bearer check precedes the path and method
/// checks, so an unauthenticated request is 401 on any path and with any method.
#[tokio::test]
async fn bearer_is_checked_before_path_and_method() {
    let h = start().await;
    for path in OTHER_PATHS {
        let r = h
            .client
            .post(format!("{}{path}", h.base))
            .json(&json!({}))
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{path}");
        assert_eq!(
            r.headers()
                .get("www-authenticate")
                .and_then(|v| v.to_str().ok()),
            Some("Bearer"),
            "{path}"
        );
    }
    let r = h.client.get(&h.url).send().await.expect("send");
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    // With a valid token, another path is still 404 (never 405), and names the endpoint.
    let r = h
        .client
        .get(format!("{}/mcp", h.base))
        .header("authorization", format!("Bearer {TOKEN}"))
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let body: Value = r.json().await.expect("json");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("/mcp/connector")),
        "{body}"
    );
    h.stop().await.expect("clean stop");
}

#[tokio::test]
async fn framing_errors_batches_and_notifications() {
    let h = start().await;
    let (status, body) = h
        .legacy(json!([{"jsonrpc":"2.0","id":1,"method":"ping"}]))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["code"], -32600);

    let r = h
        .post()
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let body: Value = r.json().await.expect("json");
    assert_eq!(body["error"]["code"], -32700);
    assert!(body.get("id").is_some_and(Value::is_null), "{body}");

    for note in [
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
        json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":99}}),
        json!({"jsonrpc":"2.0","method":"notifications/initialized","params":{"_meta":modern_meta()}}),
    ] {
        let r = h.post().json(&note).send().await.expect("send");
        assert_eq!(r.status(), StatusCode::ACCEPTED);
        no_session_or_cors(r.headers());
        assert!(r.bytes().await.expect("body").is_empty());
    }
    h.stop().await.expect("clean stop");
}

// === legacy surface ===

#[tokio::test]
async fn legacy_initialize_and_simple_methods() {
    let h = start().await;
    let mut session_ids = std::collections::BTreeSet::new();
    for (asked, answered) in [
        ("2025-06-18", "2025-06-18"),
        ("2025-03-26", "2025-03-26"),
        ("2025-11-25", "2025-11-25"),
        ("2024-11-05", "2025-06-18"),
    ] {
        let r = h
            .post()
            .json(&json!({"jsonrpc":"2.0","id":"i","method":"initialize","params":{
                "protocolVersion":asked,"capabilities":{},"clientInfo":{"name":"t","version":"1"}}}))
            .send()
            .await
            .expect("send");
        assert_eq!(r.status(), StatusCode::OK);
        // Every initialize with one token names the same session id (SPEC §11).
        let id = r.headers().get("mcp-session-id").expect("Mcp-Session-Id");
        session_ids.insert(id.to_str().expect("visible ASCII").to_owned());
        no_cors(r.headers());
        let body: Value = r.json().await.expect("json");
        assert_eq!(body["id"], "i");
        assert_eq!(body["result"]["protocolVersion"], answered);
        assert_eq!(
            body["result"]["capabilities"],
            json!({"tools":{"listChanged":true},"resources":{"subscribe":true,"listChanged":true},
                "prompts":{"listChanged":true},"logging":{},
                "extensions":{"io.modelcontextprotocol/skills":{}}})
        );
        assert_eq!(
            body["result"]["serverInfo"],
            json!({"name":"connector","version":env!("CARGO_PKG_VERSION")})
        );
    }
    assert_eq!(session_ids.len(), 1, "one token, one id: {session_ids:?}");
    let (_, body) = h
        .legacy(json!({"jsonrpc":"2.0","id":2,"method":"ping"}))
        .await;
    assert_eq!(body, json!({"jsonrpc":"2.0","id":2,"result":{}}));
    for (method, field) in [
        ("resources/list", "resources"),
        ("resources/templates/list", "resourceTemplates"),
        ("prompts/list", "prompts"),
    ] {
        let (status, body) = h
            .legacy(json!({"jsonrpc":"2.0","id":3,"method":method}))
            .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body["result"], json!({ field: [] }));
    }
    let (status, body) = h
        .legacy(json!({"jsonrpc":"2.0","id":4,"method":"no/such"}))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["error"]["code"], -32601);
    assert_eq!(body["id"], 4);

    // MCP-Protocol-Version header on the legacy surface.
    let ping = json!({"jsonrpc":"2.0","id":5,"method":"ping"});
    let r = h
        .post()
        .header("mcp-protocol-version", "2025-06-18")
        .json(&ping)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), StatusCode::OK);
    let r = h
        .post()
        .header("mcp-protocol-version", "1999-01-01")
        .json(&ping)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    h.stop().await.expect("clean stop");
}

#[tokio::test]
async fn tools_list_projection_and_order() {
    let h = start().await;
    let (status, body) = h
        .legacy(json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}))
        .await;
    assert_eq!(status, StatusCode::OK);
    let tools = body["result"]["tools"].as_array().expect("tools");
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(
        names,
        vec![
            "demo_boom",
            "demo_dead",
            "demo_echo",
            "demo_hang",
            "demo_region",
            "other_b",
            "slowpoke_hang"
        ]
    );
    assert!(body["result"].get("nextCursor").is_none());
    assert_eq!(
        tools[5],
        json!({"name":"other_b","title":"Bee","description":"Other: b","inputSchema":{"type":"object"},
               "outputSchema":{"type":"object"},"annotations":{"readOnlyHint":true},
               "_meta":{"tutti/connector":"other","tutti/upstreamName":"b","tutti/risk":"medium"}})
    );
    assert_eq!(tools[2]["description"], "Echo text");
    h.stop().await.expect("clean stop");
}

#[tokio::test]
async fn pagination_and_stale_cursor() {
    let mut h = start_with(3).await;
    let list = |cursor: Option<&str>| {
        let mut params = json!({});
        if let Some(c) = cursor {
            params["cursor"] = json!(c);
        }
        json!({"jsonrpc":"2.0","id":1,"method":"tools/list","params":params})
    };
    let (_, first) = h.legacy(list(None)).await;
    assert_eq!(first["result"]["tools"].as_array().map(Vec::len), Some(3));
    let cursor = first["result"]["nextCursor"]
        .as_str()
        .expect("cursor")
        .to_owned();
    let (_, second) = h.legacy(list(Some(&cursor))).await;
    assert_eq!(second["result"]["tools"][0]["name"], "demo_hang");
    let cursor2 = second["result"]["nextCursor"]
        .as_str()
        .expect("cursor")
        .to_owned();
    let (_, third) = h.legacy(list(Some(&cursor2))).await;
    assert_eq!(third["result"]["tools"].as_array().map(Vec::len), Some(1));
    assert!(third["result"].get("nextCursor").is_none());

    let (status, bad) = h.legacy(list(Some("not-a-cursor!"))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(bad["error"]["code"], -32602);

    // The tool list changes: the old cursor is stale.
    h.change_tools(route_event::Event::Upsert(demo(
        2,
        vec![tool(
            "demo_new",
            "new",
            json!({"name":"new","inputSchema":{"type":"object"}}),
        )],
    )))
    .await;
    let (_, stale) = h.legacy(list(Some(&cursor))).await;
    assert_eq!(stale["error"]["code"], -32602, "{stale}");
    h.stop().await.expect("clean stop");
}

// === tools/call and its error table ===

#[tokio::test]
async fn call_success_passes_the_result_unchanged() {
    let mut h = start().await;
    let body = h
        .legacy_call(json!(1), "demo_echo", json!({"text":"hi","count":2}))
        .await;
    assert_eq!(
        body["result"],
        json!({"content":[{"type":"text","text":"called echo"}],
               "structuredContent":{"text":"hi","count":2},"isError":false})
    );
    let call = h.next_call().await;
    assert_eq!(call.tool, "echo");
    assert_eq!(call.generation, 1);
    assert_eq!(call.timeout_ms, 30_000);
    assert!(!call.call_id.is_empty());
    h.stop().await.expect("clean stop");
}

#[tokio::test]
async fn unknown_tool_is_invalid_params() {
    let h = start().await;
    let body = h.legacy_call(json!(1), "nope_tool", json!({})).await;
    assert_eq!(body["error"]["code"], -32602);
    assert_eq!(body["error"]["message"], "Unknown tool: nope_tool");
    assert_eq!(
        body["error"]["data"],
        json!({"tutti": {"reason": "unknown_tool"}})
    );
    h.stop().await.expect("clean stop");
}

#[tokio::test]
async fn invalid_arguments_never_echo_values() {
    let mut h = start().await;
    let secret = "SECRET-ZEBRA-991-do-not-echo";
    let body = h
        .legacy_call(json!(1), "demo_echo", json!({"text": 5, "count": secret}))
        .await;
    let result = &body["result"];
    assert_eq!(result["isError"], true, "{body}");
    let text = result["content"][0]["text"].as_str().expect("text");
    assert!(text.starts_with("invalid_arguments: "), "{text}");
    assert!(
        text.contains("/count: must be integer, got string (schema /properties/count/type)"),
        "{text}"
    );
    assert!(!body.to_string().contains(secret), "{body}");
    // Nothing was sent upstream.
    assert!(h.calls.try_recv().is_err());
    h.stop().await.expect("clean stop");
}

#[tokio::test]
async fn upstream_errors_keep_code_message_and_data() {
    let h = start().await;
    let body = h.legacy_call(json!(1), "demo_boom", json!({})).await;
    assert_eq!(body["error"]["code"], -32001);
    assert_eq!(body["error"]["message"], "boom happened");
    assert_eq!(body["error"]["data"]["detail"], 1);
    assert_eq!(
        body["error"]["data"]["tutti"],
        json!({"reason":"upstream_error","connector":"demo","generation":1})
    );
    h.stop().await.expect("clean stop");
}

#[tokio::test]
async fn dead_worker_is_unavailable_at_once() {
    let h = start().await;
    let body = h.legacy_call(json!(1), "demo_dead", json!({})).await;
    assert_eq!(body["error"]["code"], -32603);
    assert_eq!(
        body["error"]["message"],
        "[MCP_UNAVAILABLE] demo: worker unavailable"
    );
    assert_eq!(body["error"]["data"]["tutti"]["reason"], "unavailable");
    assert_eq!(body["error"]["data"]["tutti"]["connector"], "demo");
    h.stop().await.expect("clean stop");
}

/// The worker's answer and the fence of its generation arrive together (the worker answered,
/// then went away): the answer is given, not "fenced" (the frontend's select is biased to the
/// reply). Repeated, because an unbiased select picks either branch at random.
#[tokio::test]
async fn an_answer_that_is_there_wins_over_a_fence_seen_in_the_same_poll() {
    let mut h = start().await;
    for round in 0..12u64 {
        let generation = 10 + round;
        let race = tool(
            "demo_race",
            "race",
            json!({"name":"race","inputSchema":{"type":"object"}}),
        );
        h.change_tools(route_event::Event::Upsert(demo(generation, vec![race])))
            .await;
        h.revision += 1;
        let removed = event(
            h.revision,
            route_event::Event::Removed(ConnectorRemoved {
                key: "demo".into(),
                generation,
                reason: "worker exited".into(),
                deliberate: false,
            }),
        );
        let routes = h.routes.clone().expect("route stream open");
        *h.fake.race_event.lock().expect("lock") = Some((routes, removed));
        let body = h.legacy_call(json!(round), "demo_race", json!({})).await;
        assert_eq!(
            body["result"]["content"][0]["text"], "answered",
            "round {round}: {body}"
        );
        // The fence did land: the name is gone now.
        let body = h.legacy_call(json!("after"), "demo_race", json!({})).await;
        assert_eq!(body["error"]["code"], -32602, "round {round}: {body}");
    }
    h.stop().await.expect("clean stop");
}

#[tokio::test]
async fn fencing_ends_in_flight_calls_and_removed_names_say_list_again() {
    let mut h = start().await;
    let url = h.url.clone();
    let client = h.client.clone();
    let in_flight = tokio::spawn(async move {
        client
            .post(url)
            .header("authorization", format!("Bearer {TOKEN}"))
            .json(&json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"demo_hang"}}))
            .send()
            .await
            .expect("send")
            .json::<Value>()
            .await
            .expect("json")
    });
    let call = h.next_call().await;
    assert_eq!(call.tool, "hang");
    h.send(route_event::Event::Removed(ConnectorRemoved {
        key: "demo".into(),
        generation: 1,
        reason: "uninstalled".into(),
        deliberate: false,
    }));
    let body = tokio::time::timeout(WAIT, in_flight)
        .await
        .expect("answered at once")
        .expect("task");
    assert_eq!(body["id"], 7);
    assert_eq!(body["error"]["code"], -32603);
    assert_eq!(
        body["error"]["message"],
        "[MCP_UNAVAILABLE] demo: generation 1 was fenced"
    );
    assert_eq!(
        body["error"]["data"]["tutti"],
        json!({"reason":"fenced","connector":"demo","generation":1})
    );
    let body = h
        .legacy_call(json!(8), "demo_echo", json!({"text":"x"}))
        .await;
    assert_eq!(body["error"]["code"], -32602);
    assert_eq!(
        body["error"]["message"],
        "tool demo_echo is not available now (its connector was removed, stopped, or is \
         restarting); list tools again"
    );
    h.stop().await.expect("clean stop");
}

#[tokio::test]
async fn calls_time_out_with_mcp_timeout_and_cancel_upstream() {
    let mut h = start().await;
    let started = std::time::Instant::now();
    let body = h.legacy_call(json!(1), "slowpoke_hang", json!({})).await;
    assert!(started.elapsed() >= Duration::from_millis(2_000));
    assert_eq!(body["error"]["code"], -32603);
    let message = body["error"]["message"].as_str().expect("message");
    assert!(message.starts_with("[MCP_TIMEOUT] slowpoke: "), "{message}");
    assert_eq!(body["error"]["data"]["tutti"]["reason"], "timeout");
    let call = h.next_call().await;
    assert_eq!(call.timeout_ms, 50);
    let cancel = h.next_cancel().await;
    assert_eq!(cancel.call_id, call.call_id);
    assert_eq!(cancel.generation, 4);
    h.stop().await.expect("clean stop");
}

#[tokio::test]
async fn legacy_cancelled_notification_cancels_the_call() {
    let mut h = start().await;
    let url = h.url.clone();
    let client = h.client.clone();
    let in_flight = tokio::spawn(async move {
        client
            .post(url)
            .header("authorization", format!("Bearer {TOKEN}"))
            .json(&json!({"jsonrpc":"2.0","id":"c-1","method":"tools/call","params":{"name":"demo_hang","arguments":{}}}))
            .send()
            .await
            .expect("send")
            .json::<Value>()
            .await
            .expect("json")
    });
    let call = h.next_call().await;
    // Another session cannot cancel it.
    let r = h
        .client
        .post(&h.url)
        .header("authorization", format!("Bearer {OTHER_TOKEN}"))
        .json(&json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"c-1"}}))
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    assert!(!in_flight.is_finished());
    let r = h
        .post()
        .json(&json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"c-1","reason":"user"}}))
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let body = tokio::time::timeout(WAIT, in_flight)
        .await
        .expect("answered at once")
        .expect("task");
    assert_eq!(body["id"], "c-1");
    assert_eq!(body["error"]["code"], -32800);
    assert_eq!(body["error"]["message"], "Request cancelled");
    assert_eq!(body["error"]["data"]["tutti"]["reason"], "cancelled");
    let cancel = h.next_cancel().await;
    assert_eq!(cancel.call_id, call.call_id);
    h.stop().await.expect("clean stop");
}

// === era dispatch and the modern surface ===

#[tokio::test]
async fn era_dispatch() {
    let h = start().await;
    // No version header, no _meta: legacy ping works.
    let (status, _) = h
        .legacy(json!({"jsonrpc":"2.0","id":1,"method":"ping"}))
        .await;
    assert_eq!(status, StatusCode::OK);
    // The modern header selects the modern surface: ping does not exist there.
    let (status, body) = h.modern(json!(2), "ping", json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["code"], -32601);
    assert_eq!(body["id"], 2);
    // _meta alone selects it too (and then the header is required).
    let (status, body) = h
        .legacy(
            json!({"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"_meta":modern_meta()}}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["code"], -32020);
    h.stop().await.expect("clean stop");
}

#[tokio::test]
async fn modern_discover_lists_and_removed_methods() {
    let h = start().await;
    let (status, body) = h.modern(json!("d"), "server/discover", json!({})).await;
    assert_eq!(status, StatusCode::OK);
    let r = &body["result"];
    assert_eq!(r["resultType"], "complete");
    assert_eq!(r["supportedVersions"], json!(["2026-07-28"]));
    assert_eq!(
        r["capabilities"],
        json!({"tools":{"listChanged":true},"resources":{},"prompts":{},
            "extensions":{"io.modelcontextprotocol/skills":{}}})
    );
    assert!(r["ttlMs"].is_u64());
    assert_eq!(r["cacheScope"], "private");
    assert_eq!(
        r["_meta"]["io.modelcontextprotocol/serverInfo"],
        json!({"name":"connector","version":env!("CARGO_PKG_VERSION")})
    );

    let (_, body) = h.modern(json!(1), "tools/list", json!({})).await;
    let r = &body["result"];
    assert_eq!(r["resultType"], "complete");
    assert_eq!(r["tools"].as_array().map(Vec::len), Some(7));
    assert!(r["ttlMs"].is_u64());
    assert_eq!(r["cacheScope"], "private");
    assert!(r["_meta"]["io.modelcontextprotocol/serverInfo"].is_object());

    for (method, field) in [
        ("resources/list", "resources"),
        ("resources/templates/list", "resourceTemplates"),
        ("prompts/list", "prompts"),
    ] {
        let (status, body) = h.modern(json!(1), method, json!({})).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body["result"][field], json!([]));
        assert_eq!(body["result"]["resultType"], "complete");
        assert_eq!(body["result"]["cacheScope"], "private");
        assert!(body["result"]["ttlMs"].is_u64());
    }
    for method in [
        "initialize",
        "ping",
        "logging/setLevel",
        "resources/subscribe",
        "unknown/method",
    ] {
        let (status, body) = h.modern(json!(500), method, json!({})).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method}");
        assert_eq!(body["error"]["code"], -32601, "{method}");
        assert_eq!(body["id"], 500);
    }
    h.stop().await.expect("clean stop");
}

#[tokio::test]
async fn nothing_to_read_or_get_in_either_era() {
    let h = start().await;
    let uri = "test://nonexistent";
    let read = |name: &'static str| {
        h.modern_request(json!(7), "resources/read", json!({"uri": uri}))
            .header("mcp-name", name)
    };
    let r = read(uri).send().await.expect("send");
    assert_eq!(r.status(), StatusCode::OK);
    let body: Value = r.json().await.expect("json");
    assert_eq!(body["id"], 7);
    assert_eq!(body["error"]["code"], -32602, "{body}");
    assert_eq!(body["error"]["data"], json!({"uri": uri}));
    // Mcp-Name must carry params.uri (SEP-2243).
    let r = read("test://other").send().await.expect("send");
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let body: Value = r.json().await.expect("json");
    assert_eq!(body["error"]["code"], -32020, "{body}");

    let r = h
        .modern_request(json!(8), "prompts/get", json!({"name": "p"}))
        .header("mcp-name", "p")
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), StatusCode::OK);
    let body: Value = r.json().await.expect("json");
    assert_eq!(body["error"]["code"], -32602, "{body}");
    assert_eq!(body["error"]["message"], "Unknown prompt: p");
    let (status, body) = h.modern(json!(9), "prompts/get", json!({})).await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (StatusCode::OK, json!(-32602))
    );

    let (status, body) = h
        .legacy(json!({"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":uri}}))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["error"]["code"], -32002, "{body}");
    assert_eq!(body["error"]["data"], json!({"uri": uri}));
    let (_, body) = h
        .legacy(json!({"jsonrpc":"2.0","id":2,"method":"prompts/get","params":{"name":"p"}}))
        .await;
    assert_eq!(body["error"]["code"], -32602, "{body}");
    h.stop().await.expect("clean stop");
}

#[tokio::test]
async fn modern_meta_and_version_rules() {
    let h = start().await;
    let post = |meta: Option<Value>, header: Option<&str>| {
        let mut params = json!({});
        if let Some(meta) = meta {
            params["_meta"] = meta;
        }
        let mut b = h.post().header("mcp-method", "server/discover");
        if let Some(header) = header {
            b = b.header("mcp-protocol-version", header);
        }
        b.json(&json!({"jsonrpc":"2.0","id":101,"method":"server/discover","params":params}))
            .send()
    };
    // Missing _meta or its required fields: 400 / -32602.
    let without_caps = json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28"});
    let without_version = json!({"io.modelcontextprotocol/clientCapabilities":{}});
    for meta in [None, Some(without_caps), Some(without_version)] {
        let r = post(meta.clone(), Some("2026-07-28")).await.expect("send");
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{meta:?}");
        let body: Value = r.json().await.expect("json");
        assert_eq!(body["error"]["code"], -32602, "{meta:?}");
        assert_eq!(body["id"], 101);
    }
    // clientInfo is optional.
    let minimal = json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28",
                         "io.modelcontextprotocol/clientCapabilities":{}});
    let r = post(Some(minimal), Some("2026-07-28")).await.expect("send");
    assert_eq!(r.status(), StatusCode::OK);
    // Header and _meta differ: -32020 (compared before support).
    let mut v999 = modern_meta();
    v999["io.modelcontextprotocol/protocolVersion"] = json!("v999.0.0");
    let r = post(Some(v999.clone()), Some("2026-07-28"))
        .await
        .expect("send");
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let body: Value = r.json().await.expect("json");
    assert_eq!(body["error"]["code"], -32020);
    // Same but unsupported: -32022 with supported + requested.
    let r = post(Some(v999), Some("v999.0.0")).await.expect("send");
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let body: Value = r.json().await.expect("json");
    assert_eq!(body["error"]["code"], -32022);
    assert_eq!(
        body["error"]["data"],
        json!({"supported":["2026-07-28"],"requested":"v999.0.0"})
    );
    assert_eq!(body["id"], 101);
    h.stop().await.expect("clean stop");
}

/// Extra request headers of one case.
type Headers = &'static [(&'static str, &'static str)];

/// Sends `body` on the modern surface (the version header and `headers`) and checks that it is
/// served (`ok`) or refused as a header mismatch (400, -32020, the request's id).
async fn expect_header_check(h: &Harness, headers: Headers, body: &Value, ok: bool) {
    let mut req = h.post().header("mcp-protocol-version", "2026-07-28");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = req.json(body).send().await.expect("send");
    expect_served_or_mismatch(r, ok).await;
}

/// The answer is a result (`ok`) or the -32020 header mismatch for request id 9.
async fn expect_served_or_mismatch(r: reqwest::Response, ok: bool) {
    let status = r.status();
    let v: Value = r.json().await.expect("json");
    if ok {
        assert_eq!(status, StatusCode::OK, "{v}");
        assert!(v.get("result").is_some(), "{v}");
    } else {
        assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
        assert_eq!(v["error"]["code"], -32020, "{v}");
        assert_eq!(v["id"], 9);
    }
}

/// A modern request with id 9 and the modern `_meta`.
fn modern_request(method: &str, params: Value) -> Value {
    let mut params = params;
    params["_meta"] = modern_meta();
    json!({"jsonrpc":"2.0","id":9,"method":method,"params":params})
}

#[tokio::test]
async fn modern_method_and_name_headers() {
    let h = start().await;
    let list = modern_request("tools/list", json!({}));
    let list_cases: [(Headers, bool); 5] = [
        (&[], false),
        (&[("mcp-method", "prompts/list")], false),
        (&[("mcp-method", "TOOLS/LIST")], false),
        (&[("mcp-method", "  tools/list ")], true),
        (&[("MCP-METHOD", "tools/list")], true),
    ];
    for (headers, ok) in list_cases {
        expect_header_check(&h, headers, &list, ok).await;
    }
    // Title-cased header names on the wire.
    let title = reqwest::Client::builder()
        .http1_title_case_headers()
        .build()
        .expect("client");
    let r = title
        .post(&h.url)
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/list")
        .json(&list)
        .send()
        .await
        .expect("send");
    expect_served_or_mismatch(r, true).await;

    let call = modern_request(
        "tools/call",
        json!({"name":"demo_echo","arguments":{"text":"a"}}),
    );
    const M: (&str, &str) = ("mcp-method", "tools/call");
    let call_cases: [(Headers, bool); 4] = [
        (&[M], false),
        (&[M, ("mcp-name", "wrong_tool_name")], false),
        (&[M, ("mcp-name", "  demo_echo  ")], true),
        (&[M, ("mcp-name", "=?base64?ZGVtb19lY2hv?=")], true),
    ];
    for (headers, ok) in call_cases {
        expect_header_check(&h, headers, &call, ok).await;
    }
    h.stop().await.expect("clean stop");
}

/// Calls `demo_region` on the modern surface with `region` (and `n`) as arguments and
/// `headers`; checks that it completes (`ok`) or is refused as a header mismatch (-32020).
async fn check_region_call(
    h: &Harness,
    (region, n, headers, ok): (Value, Option<i64>, Headers, bool),
) {
    let mut args = json!({"region": region});
    if let Some(n) = n {
        args["n"] = json!(n);
    }
    let mut req = h
        .post()
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "demo_region");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = req
        .json(&json!({"jsonrpc":"2.0","id":11,"method":"tools/call",
            "params":{"name":"demo_region","arguments":args,"_meta":modern_meta()}}))
        .send()
        .await
        .expect("send");
    let status = r.status();
    let v: Value = r.json().await.expect("json");
    if ok {
        assert_eq!(status, StatusCode::OK, "{v}");
        assert_eq!(v["result"]["resultType"], "complete", "{v}");
        assert_eq!(v["result"]["isError"], false, "{v}");
    } else {
        assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
        assert_eq!(v["error"]["code"], -32020, "{v}");
    }
}

#[tokio::test]
async fn modern_param_headers_and_base64() {
    let h = start().await;
    let hello = || json!("Hello");
    let cases: Vec<(Value, Option<i64>, Headers, bool)> = vec![
        (hello(), None, &[("mcp-param-region", "Hello")], true),
        (
            hello(),
            None,
            &[("Mcp-Param-Region", "=?base64?SGVsbG8=?=")],
            true,
        ),
        (
            hello(),
            None,
            &[("mcp-param-region", "=?base64?SGVsbG8?=")],
            false,
        ),
        (
            hello(),
            None,
            &[("mcp-param-region", "=?base64?SGVs!!!bG8=?=")],
            false,
        ),
        (hello(), None, &[("mcp-param-region", "hello")], false),
        (hello(), None, &[], false),
        // Only the prefix or only the suffix: literal values.
        (
            json!("=?base64?SGVsbG8="),
            None,
            &[("mcp-param-region", "=?base64?SGVsbG8=")],
            true,
        ),
        (
            json!("SGVsbG8=?="),
            None,
            &[("mcp-param-region", "SGVsbG8=?=")],
            true,
        ),
        // Non-ASCII travels base64-encoded.
        (
            json!("é"),
            None,
            &[("mcp-param-region", "=?base64?w6k=?=")],
            true,
        ),
        // Integers compare numerically.
        (
            hello(),
            Some(42),
            &[("mcp-param-region", "Hello"), ("mcp-param-n", "042")],
            true,
        ),
        (
            hello(),
            Some(42),
            &[("mcp-param-region", "Hello"), ("mcp-param-n", "43")],
            false,
        ),
        (hello(), Some(42), &[("mcp-param-region", "Hello")], false),
    ];
    for case in cases {
        check_region_call(&h, case).await;
    }
    h.stop().await.expect("clean stop");
}

#[tokio::test]
async fn modern_call_results_and_errors() {
    let h = start().await;
    let (status, body) = h
        .modern(
            json!(1),
            "tools/call",
            json!({"name":"demo_echo","arguments":{"text":"x"}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body["result"],
        json!({"content":[{"type":"text","text":"called echo"}],"structuredContent":{"text":"x"},
               "isError":false,"resultType":"complete",
               "_meta":{"io.modelcontextprotocol/serverInfo":
                            {"name":"connector","version":env!("CARGO_PKG_VERSION")}}}),
        "a modern result carries the runtime's serverInfo (ARCHITECTURE.md, Era hygiene)"
    );
    let (status, body) = h
        .modern(
            json!(2),
            "tools/call",
            json!({"name":"demo_echo","arguments":{}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["result"]["isError"], true);
    assert_eq!(body["result"]["resultType"], "complete");
    let (status, body) = h
        .modern(
            json!(3),
            "tools/call",
            json!({"name":"missing_tool","arguments":{}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["error"]["code"], -32602);
    assert_eq!(body["error"]["message"], "Unknown tool: missing_tool");
    h.stop().await.expect("clean stop");
}

#[tokio::test]
async fn modern_stream_close_cancels_the_call() {
    let mut h = start().await;
    let request = h.modern_request(
        json!(5),
        "tools/call",
        json!({"name":"demo_hang","arguments":{}}),
    );
    let in_flight = tokio::spawn(async move { request.send().await });
    let call = h.next_call().await;
    in_flight.abort();
    let cancel = h.next_cancel().await;
    assert_eq!(cancel.call_id, call.call_id);
    assert_eq!(cancel.generation, 1);
    h.stop().await.expect("clean stop");
}

/// A call that asked for progress (answered as an event stream) is cancelled like any other:
/// by `notifications/cancelled` (legacy; the stream ends with -32800) and by closing it.
#[tokio::test]
async fn a_call_that_asked_for_progress_is_cancelled_like_any_other() {
    let mut h = start().await;
    let request = h
        .post()
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc":"2.0","id":"p-1","method":"tools/call",
            "params":{"name":"demo_hang","arguments":{},"_meta":{"progressToken":"t"}}}));
    let in_flight = tokio::spawn(async move {
        let r = request.send().await.expect("send");
        let kind = r
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        (kind, r.text().await.expect("body"))
    });
    h.next_call().await;
    let r = h
        .post()
        .json(&json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"p-1"}}))
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let (kind, text) = tokio::time::timeout(WAIT, in_flight)
        .await
        .expect("answered at once")
        .expect("task");
    assert_eq!(kind.as_deref(), Some("text/event-stream"));
    let last: Value = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .next_back()
        .and_then(|d| serde_json::from_str(d).ok())
        .unwrap_or(Value::Null);
    assert_eq!(last["id"], "p-1", "{text}");
    assert_eq!(last["error"]["code"], -32800, "{text}");
    h.next_cancel().await;

    // Closing the stream (modern surface) cancels it at the worker.
    let mut params = json!({"name":"demo_hang","arguments":{}});
    params["_meta"] = modern_meta();
    params["_meta"]["progressToken"] = json!(9);
    let request = h
        .post()
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "demo_hang")
        .json(&json!({"jsonrpc":"2.0","id":10,"method":"tools/call","params":params}));
    let in_flight = tokio::spawn(async move { request.send().await });
    let call = h.next_call().await;
    in_flight.abort();
    let cancel = h.next_cancel().await;
    assert_eq!(cancel.call_id, call.call_id);
    h.stop().await.expect("clean stop");
}

// === subscriptions/listen ===

#[tokio::test]
async fn listen_ack_list_changed_and_final_result_on_revocation() {
    let mut h = start().await;
    let mut sse = h
        .listen(
            json!("listen-1"),
            json!({"toolsListChanged": true, "promptsListChanged": true}),
        )
        .await;
    let ack = sse.next().await.expect("ack");
    assert_eq!(
        ack,
        json!({"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged",
               "params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"listen-1"},
                         "notifications":{"toolsListChanged":true,"promptsListChanged":true}}})
    );
    // Another session's revocation does not end this stream.
    h.send(route_event::Event::SessionsRevoked(SessionsRevoked {
        all: false,
        workspace: "w1".into(),
        session: "s2".into(),
    }));
    // A change of the visible tool set is announced.
    h.send(route_event::Event::Upsert(demo(
        2,
        vec![tool(
            "demo_more",
            "more",
            json!({"name":"more","inputSchema":{"type":"object"}}),
        )],
    )));
    let note = sse.next().await.expect("list_changed");
    assert_eq!(
        note,
        json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed",
               "params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"listen-1"}}})
    );
    // A new generation with the same tools is not a visible change.
    h.send(route_event::Event::Upsert(demo(
        3,
        vec![tool(
            "demo_more",
            "more",
            json!({"name":"more","inputSchema":{"type":"object"}}),
        )],
    )));
    // This session's revocation ends the stream with the final result.
    h.send(route_event::Event::SessionsRevoked(SessionsRevoked {
        all: false,
        workspace: "w1".into(),
        session: "s1".into(),
    }));
    let done = sse.next().await.expect("final result");
    assert_eq!(
        done,
        json!({"jsonrpc":"2.0","id":"listen-1","result":{"resultType":"complete",
               "_meta":{"io.modelcontextprotocol/subscriptionId":"listen-1",
                        "io.modelcontextprotocol/serverInfo":
                            {"name":"connector","version":env!("CARGO_PKG_VERSION")}}}})
    );
    assert!(
        sse.next().await.is_none(),
        "the stream ends after the final result"
    );
    h.stop().await.expect("clean stop");
}

#[tokio::test]
async fn listen_honours_only_requested_kinds() {
    let mut h = start().await;
    let mut prompts_only = h
        .listen(json!(77), json!({"promptsListChanged": true}))
        .await;
    let ack = prompts_only.next().await.expect("ack");
    // Prompt list changes are honoured (SPEC §11); tool list changes were
    // not asked for and must not leak.
    assert_eq!(
        ack["params"]["notifications"],
        json!({"promptsListChanged": true})
    );
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        77
    );
    h.change_tools(route_event::Event::Removed(ConnectorRemoved {
        key: "other".into(),
        generation: 1,
        reason: "gone".into(),
        deliberate: false,
    }))
    .await;
    h.send(route_event::Event::SessionsRevoked(SessionsRevoked {
        all: true,
        workspace: String::new(),
        session: String::new(),
    }));
    // No list_changed leaked: the next event is the final result.
    let done = prompts_only.next().await.expect("final result");
    assert_eq!(done["id"], 77);
    assert_eq!(done["result"]["resultType"], "complete");
    h.stop().await.expect("clean stop");
}

// === lifecycle ===

#[tokio::test]
async fn stop_signal_ends_listen_streams_and_returns_ok() {
    let mut h = start().await;
    let mut sse = h
        .listen(json!("bye"), json!({"toolsListChanged": true}))
        .await;
    assert!(sse.next().await.is_some());
    let stop = h.stop.take().expect("stop");
    let _ = stop.send(());
    let done = sse.next().await.expect("final result");
    assert_eq!(done["id"], "bye");
    assert_eq!(done["result"]["resultType"], "complete");
    h.stop().await.expect("clean stop");
}

#[tokio::test]
async fn kernel_shutdown_event_stops_the_frontend() {
    let mut h = start().await;
    let mut sse = h.listen(json!("k"), json!({})).await;
    assert!(sse.next().await.is_some());
    h.send(route_event::Event::Shutdown(RuntimeShutdown {}));
    let done = sse.next().await.expect("final result");
    assert_eq!(done["id"], "k");
    let outcome = tokio::time::timeout(WAIT, &mut h.server)
        .await
        .expect("stops")
        .expect("task");
    assert!(outcome.is_ok());
}

#[tokio::test]
async fn lost_route_stream_is_an_error_after_retrying() {
    let mut h = start().await;
    // Make sure the snapshot was applied, then the kernel goes away for good.
    let (status, _) = h
        .legacy(json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}))
        .await;
    assert_eq!(status, StatusCode::OK);
    h.routes = None;
    let started = std::time::Instant::now();
    let outcome = tokio::time::timeout(WAIT, &mut h.server)
        .await
        .expect("gives up in time")
        .expect("task");
    assert!(
        matches!(outcome, Err(Error::RoutesLost { .. })),
        "{outcome:?}"
    );
    assert!(started.elapsed() >= Duration::from_secs(4));
}

//! End-to-end: the real `tutti-upstream-worker` binary against an in-process fake kernel and
//! a tiny Python stdio MCP server written into a temp state directory.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};
use tutti_proto::kernel::workers_server::{Workers, WorkersServer};
use tutti_proto::kernel::{self as k, LaunchSpec};
use tutti_proto::transport;
use tutti_proto::worker::worker_client::WorkerClient;
use tutti_proto::worker::{
    CallError, CallToolReply, CallToolRequest, CancelRequest, GenerationRequest, call_tool_reply,
};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const KEY: &str = "fixture";
const GENERATION: u64 = (7 << 32) | 3;
const TOKEN: &str = "wtok-0123456789";
const SECRET: &str = "s3cr3t-upstream-value";
const WAIT: Duration = Duration::from_secs(30);

/// newline-delimited JSON-RPC over stdio, MCP 2025-06-18.
const SERVER_PY: &str = r#"
import json, os, sys

sys.stderr.write("fixture starting, key=" + os.environ.get("UPSTREAM_SECRET", "") + "\n")
sys.stderr.flush()
print("Fixture MCP server v1 (this banner is not JSON)", flush=True)

cancelled = []
pending = set()
extra = []

def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()

def tool(name):
    return {"name": name, "description": name + " tool",
            "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}}}

for line in sys.stdin:
    line = line.strip()
    if not line:
        continue
    msg = json.loads(line)
    method = msg.get("method")
    mid = msg.get("id")
    params = msg.get("params") or {}
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "fixture", "version": "1.0.0"}}})
    elif method == "tools/list":
        if params.get("cursor") is None:
            send({"jsonrpc": "2.0", "id": mid, "result": {"tools": [tool("echo")], "nextCursor": "page2"}})
        else:
            page = [tool("sleep"), tool("cancelled"), tool("exit")] + [tool(n) for n in extra]
            if os.environ.get("FIXTURE_BARE_TOOL"):
                # Not a valid MCP Tool (no inputSchema), plus a member rmcp does not model.
                page.append({"name": "bare", "description": "no schema", "vendorHint": 7})
            send({"jsonrpc": "2.0", "id": mid, "result": {"tools": page}})
    elif method == "tools/call":
        name = params.get("name")
        args = params.get("arguments") or {}
        if name == "echo":
            # A member outside the schema and a number spelled its own way: passed on as sent.
            sys.stdout.write('{"jsonrpc": "2.0", "id": %s, "result": {"content": %s, '
                '"structuredContent": {"echoed": %s, "price": 1.50}, "vendorNote": "kept"}}\n'
                % (json.dumps(mid), json.dumps([{"type": "text", "text": args.get("message", "")}]),
                   json.dumps(args.get("message", ""))))
            sys.stdout.flush()
        elif name == "sleep":
            pending.add(mid)  # never answers; only a cancellation ends it
        elif name == "pending":
            send({"jsonrpc": "2.0", "id": mid, "result": {
                "content": [{"type": "text", "text": str(len(pending))}]}})
        elif name == "cancelled":
            send({"jsonrpc": "2.0", "id": mid, "result": {
                "content": [{"type": "text", "text": json.dumps(cancelled)}]}})
        elif name == "grow":
            extra.append("grown")
            send({"jsonrpc": "2.0", "id": mid, "result": {"content": []}})
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        elif name == "pid":
            send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": str(os.getpid())}]}})
        elif name == "leak":
            key = os.environ.get("UPSTREAM_SECRET", "")
            send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32001,
                "message": "key " + key + " refused", "data": {"key": key, "n": 1}}})
        elif name == "exit":
            sys.stderr.write("exiting on request\n")
            sys.exit(3)
        else:
            send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32602, "message": "Unknown tool: " + str(name), "data": {"tool": name}}})
    elif method == "notifications/cancelled":
        cancelled.append(params.get("requestId"))
        pending.discard(params.get("requestId"))
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "Method not found"}})
"#;

/// A Streamable HTTP MCP server that wants a bearer token: legacy (2025-06-18 with a session)
/// or, with `modern` as its second argument, stateless 2026-07-28 (`server/discover`).
const HTTP_SERVER_PY: &str = r#"
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

TOKEN = sys.argv[1]
MODERN = len(sys.argv) > 2 and sys.argv[2] == "modern"
COMPLETE = {"resultType": "complete"} if MODERN else {}

class H(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, status, body=None, headers=()):
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.reply(405, headers=[("Allow", "POST")])

    def do_DELETE(self):
        self.reply(405, headers=[("Allow", "POST")])

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.headers.get("Authorization") != "Bearer " + TOKEN:
            self.reply(401, {"error": "unauthorized"}, [("WWW-Authenticate", "Bearer")])
            return
        msg = json.loads(body)
        mid = msg.get("id")
        method = msg.get("method")
        if MODERN and method != "server/discover":
            meta = (msg.get("params") or {}).get("_meta") or {}
            if self.headers.get("MCP-Protocol-Version") != "2026-07-28" or \
                    meta.get("io.modelcontextprotocol/protocolVersion") != "2026-07-28":
                self.reply(400, {"jsonrpc": "2.0", "id": mid, "error": {"code": -32602, "message": "missing modern metadata"}})
                return
        if mid is None:
            self.reply(202)
        elif method == "server/discover" and MODERN:
            self.reply(200, {"jsonrpc": "2.0", "id": mid, "result": {
                "resultType": "complete", "supportedVersions": ["2026-07-28"],
                "capabilities": {"tools": {}}, "ttlMs": 0, "cacheScope": "public",
                "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "http-fixture", "version": "1"}}}})
        elif method == "initialize" and not MODERN:
            self.reply(200, {"jsonrpc": "2.0", "id": mid, "result": {
                "protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                "serverInfo": {"name": "http-fixture", "version": "1"}}},
                [("Mcp-Session-Id", "session-1")])
        elif method == "tools/list":
            self.reply(200, {"jsonrpc": "2.0", "id": mid, "result": dict(COMPLETE, tools=[
                {"name": "echo", "inputSchema": {"type": "object"}}])})
        elif method == "tools/call":
            args = msg["params"].get("arguments") or {}
            self.reply(200, {"jsonrpc": "2.0", "id": mid, "result": dict(COMPLETE,
                content=[{"type": "text", "text": args.get("message", "")}])})
        else:
            self.reply(200, {"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "Method not found"}})

server = HTTPServer(("127.0.0.1", 0), H)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

// === fake kernel ===

#[derive(Debug)]
enum Seen {
    Register(k::RegisterWorkerRequest),
    Offer(k::OfferToolsRequest),
    Report(k::WorkerReport),
}

struct FakeKernel {
    launch: LaunchSpec,
    commit: bool,
    seen: mpsc::UnboundedSender<Seen>,
}

type Res<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl Workers for FakeKernel {
    async fn register_worker(
        &self,
        request: Request<k::RegisterWorkerRequest>,
    ) -> Res<k::RegisterWorkerReply> {
        let req = request.into_inner();
        if req.key != KEY || req.generation != GENERATION || req.worker_token != TOKEN {
            return Err(Status::permission_denied("unknown worker"));
        }
        let _ = self.seen.send(Seen::Register(req));
        Ok(Response::new(k::RegisterWorkerReply {
            launch: Some(self.launch.clone()),
        }))
    }
    async fn offer_tools(&self, request: Request<k::OfferToolsRequest>) -> Res<k::OfferToolsReply> {
        let _ = self.seen.send(Seen::Offer(request.into_inner()));
        Ok(Response::new(k::OfferToolsReply {
            committed: self.commit,
            error: if self.commit {
                String::new()
            } else {
                "tool name collision".to_owned()
            },
        }))
    }
    async fn report_worker(&self, request: Request<k::WorkerReport>) -> Res<k::Empty> {
        let _ = self.seen.send(Seen::Report(request.into_inner()));
        Ok(Response::new(k::Empty {}))
    }
    async fn refresh_worker_token(
        &self,
        _: Request<k::RefreshWorkerTokenRequest>,
    ) -> Res<k::RefreshWorkerTokenReply> {
        Err(Status::unimplemented("refresh_worker_token"))
    }
}

// === harness ===

/// A short temp directory (socket paths must stay under ~100 bytes), removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> std::io::Result<Self> {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tuw-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)?;
        Ok(Self(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The real interpreter (not a shim), so it runs with a minimal environment.
fn python() -> Result<String, Box<dyn std::error::Error>> {
    let out = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()?;
    let path = String::from_utf8(out.stdout)?.trim().to_owned();
    if !out.status.success() || path.is_empty() {
        return Err("python3 is not available".into());
    }
    Ok(path)
}

fn stdio_spec(dir: &Path, command: String) -> LaunchSpec {
    let script = dir.join("server.py");
    let mut env = HashMap::new();
    env.insert("PATH".to_owned(), std::env::var("PATH").unwrap_or_default());
    env.insert("UPSTREAM_SECRET".to_owned(), SECRET.to_owned());
    LaunchSpec {
        transport: k::Transport::Stdio.into(),
        command,
        args: vec!["-u".to_owned(), script.to_string_lossy().into_owned()],
        cwd: dir.to_string_lossy().into_owned(),
        env,
        start_timeout_ms: 20_000,
        call_timeout_ms: 10_000,
        redact: vec![SECRET.to_owned(), TOKEN.to_owned()],
        ..Default::default()
    }
}

struct Harness {
    dir: TempDir,
    seen: mpsc::UnboundedReceiver<Seen>,
    /// Events already received but not yet asked for.
    backlog: Vec<Seen>,
    worker: Child,
    kernel: tokio::task::JoinHandle<()>,
}

impl Harness {
    async fn start(
        launch: impl FnOnce(&Path) -> Result<LaunchSpec, Box<dyn std::error::Error>>,
        commit: bool,
    ) -> Result<Self, Box<dyn std::error::Error>> {
        let dir = TempDir::new()?;
        std::fs::write(dir.0.join("server.py"), SERVER_PY)?;
        let launch = launch(&dir.0)?;
        let (tx, seen) = mpsc::unbounded_channel();
        transport::run_dir(&dir.0)?;
        let incoming = transport::bind(&transport::kernel_endpoint(&dir.0))?;
        let fake = FakeKernel {
            launch,
            commit,
            seen: tx,
        };
        let kernel = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(WorkersServer::new(fake))
                .serve_with_incoming(incoming)
                .await;
        });
        let stderr = std::fs::File::create(dir.0.join("worker.log"))?;
        let worker = Command::new(env!("CARGO_BIN_EXE_tutti-upstream-worker"))
            .arg("--state-dir")
            .arg(&dir.0)
            .env("TUTTI_WORKER_KEY", KEY)
            .env("TUTTI_WORKER_GENERATION", GENERATION.to_string())
            .env("TUTTI_WORKER_TOKEN", TOKEN)
            .env(
                "RUST_LOG",
                // rmcp=trace checks that the worker caps rmcp at warn.
                "debug,rmcp=trace,h2=info,hyper=info,hyper_util=info,tower=info,tonic=info",
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(stderr))
            .kill_on_drop(true)
            .spawn()?;
        Ok(Self {
            dir,
            seen,
            backlog: Vec::new(),
            worker,
            kernel,
        })
    }

    async fn next(&mut self) -> Result<Seen, Box<dyn std::error::Error>> {
        if !self.backlog.is_empty() {
            return Ok(self.backlog.remove(0));
        }
        self.receive().await
    }

    async fn receive(&mut self) -> Result<Seen, Box<dyn std::error::Error>> {
        match tokio::time::timeout(WAIT, self.seen.recv()).await {
            Ok(Some(seen)) => Ok(seen),
            Ok(None) => Err("fake kernel stopped".into()),
            Err(_) => Err(format!("nothing reached the kernel; log:\n{}", self.log()).into()),
        }
    }

    /// The first event (received earlier or next) that `pick` accepts; others stay queued.
    async fn find<T>(
        &mut self,
        pick: impl Fn(&Seen) -> bool,
        take: impl Fn(Seen) -> Option<T>,
    ) -> Result<T, Box<dyn std::error::Error>> {
        if let Some(i) = self.backlog.iter().position(&pick) {
            let seen = self.backlog.remove(i);
            return take(seen).ok_or_else(|| "event mismatch".into());
        }
        loop {
            let seen = self.receive().await?;
            if pick(&seen) {
                return take(seen).ok_or_else(|| "event mismatch".into());
            }
            self.backlog.push(seen);
        }
    }

    async fn offer(&mut self) -> Result<k::OfferToolsRequest, Box<dyn std::error::Error>> {
        self.find(
            |s| matches!(s, Seen::Offer(_)),
            |s| match s {
                Seen::Offer(offer) => Some(offer),
                _ => None,
            },
        )
        .await
    }

    async fn report(&mut self, kind: &str) -> Result<k::WorkerReport, Box<dyn std::error::Error>> {
        self.find(
            |s| matches!(s, Seen::Report(r) if r.kind().label() == kind),
            |s| match s {
                Seen::Report(report) => Some(report),
                _ => None,
            },
        )
        .await
    }

    async fn client(
        &self,
    ) -> Result<WorkerClient<tonic::transport::Channel>, Box<dyn std::error::Error>> {
        let endpoint = transport::worker_endpoint(&self.dir.0, GENERATION);
        Ok(WorkerClient::new(transport::connect(&endpoint).await?))
    }

    async fn exit_code(&mut self) -> Result<Option<i32>, Box<dyn std::error::Error>> {
        match tokio::time::timeout(WAIT, self.worker.wait()).await {
            Ok(status) => Ok(status?.code()),
            Err(_) => Err(format!("worker did not exit; log:\n{}", self.log()).into()),
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.0.join("worker.log")).unwrap_or_default()
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.kernel.abort();
    }
}

fn call(tool: &str, call_id: &str, arguments: &str) -> CallToolRequest {
    CallToolRequest {
        generation: GENERATION,
        call_id: call_id.to_owned(),
        tool: tool.to_owned(),
        arguments_json: arguments.to_owned(),
        timeout_ms: 0,
        meta_json: String::new(),
        ..CallToolRequest::default()
    }
}

fn result_of(reply: CallToolReply) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    match reply.outcome {
        Some(call_tool_reply::Outcome::ResultBytes(json)) => Ok(serde_json::from_slice(&json)?),
        other => Err(format!("expected a result, got {other:?}").into()),
    }
}

fn error_of(reply: CallToolReply) -> Result<CallError, Box<dyn std::error::Error>> {
    match reply.outcome {
        Some(call_tool_reply::Outcome::Error(e)) => Ok(e),
        other => Err(format!("expected an error, got {other:?}").into()),
    }
}

/// How many `sleep` calls the fixture holds (neither answered nor cancelled).
async fn pending_count(
    client: &mut WorkerClient<tonic::transport::Channel>,
) -> Result<usize, Box<dyn std::error::Error>> {
    let reply = client
        .call_tool(call("pending", "", ""))
        .await?
        .into_inner();
    let result = result_of(reply)?;
    Ok(result["content"][0]["text"]
        .as_str()
        .unwrap_or("x")
        .parse()?)
}

/// The request ids the fixture saw in `notifications/cancelled`.
async fn cancelled_ids(
    client: &mut WorkerClient<tonic::transport::Channel>,
    call_id: &str,
) -> Result<Vec<serde_json::Value>, Box<dyn std::error::Error>> {
    let reply = client
        .call_tool(call("cancelled", call_id, ""))
        .await?
        .into_inner();
    let result = result_of(reply)?;
    let text = result["content"][0]["text"].as_str().unwrap_or("[]");
    Ok(serde_json::from_str(text)?)
}

// === tests ===

/// The worker's gRPC client.
type Client = WorkerClient<tonic::transport::Channel>;

/// RegisterWorker comes first; then one offer with every page of tools/list, and the
/// non-JSON banner line reported.
async fn registers_then_offers(h: &mut Harness) -> TestResult {
    let Seen::Register(register) = h.next().await? else {
        return Err("RegisterWorker must come first".into());
    };
    assert_eq!(
        register.endpoint,
        transport::worker_endpoint(&h.dir.0, GENERATION).as_str()
    );
    assert!(register.pid > 0);

    // Every page of tools/list, each tool's JSON unchanged, in one offer.
    let offer = h.offer().await?;
    assert_eq!(offer.key, KEY);
    assert_eq!(offer.generation, GENERATION);
    assert_eq!(offer.worker_token, TOKEN);
    assert_eq!(offer.protocol_version, "2025-06-18");
    let names: Vec<&str> = offer
        .tools
        .iter()
        .map(|t| t.upstream_name.as_str())
        .collect();
    assert_eq!(names, ["echo", "sleep", "cancelled", "exit"]);
    let echo: serde_json::Value = serde_json::from_str(&offer.tools[0].definition_json)?;
    assert_eq!(echo["description"], "echo tool");
    assert_eq!(
        echo["inputSchema"]["properties"]["message"]["type"],
        "string"
    );

    // The banner line was counted and reported.
    let report = h.report("non_json_stdout").await?;
    assert_eq!(report.count, 1);
    assert_eq!(report.worker_token, TOKEN);
    Ok(())
}

/// Results pass unchanged; upstream errors pass with their code, message and data, secrets
/// masked; another generation is refused.
async fn answers_results_errors_and_refusals(client: &mut Client) -> TestResult {
    // A call: the upstream's CallToolResult comes back unchanged.
    let reply = client
        .call_tool(call("echo", "c1", r#"{"message":"hello"}"#))
        .await?
        .into_inner();
    assert_eq!(reply.generation, GENERATION);
    // The worker sends a result as the upstream's bytes.
    let Some(call_tool_reply::Outcome::ResultBytes(bytes)) = reply.outcome.clone() else {
        return Err(format!("not a result: {reply:?}").into());
    };
    let text = std::str::from_utf8(&bytes)?;
    // Exactly the upstream's text: its spacing, its number spelling, its extra member.
    assert_eq!(
        text,
        r#"{"content": [{"type": "text", "text": "hello"}], "structuredContent": {"echoed": "hello", "price": 1.50}, "vendorNote": "kept"}"#
    );
    let result = result_of(reply)?;
    assert_eq!(result["content"][0]["text"], "hello");
    assert_eq!(result["structuredContent"]["echoed"], "hello");

    // An upstream JSON-RPC error passes through with its code, message and data.
    let e = error_of(client.call_tool(call("nope", "c2", "")).await?.into_inner())?;
    assert_eq!(
        (e.code, e.message.as_str(), e.reason.as_str()),
        (-32602, "Unknown tool: nope", "upstream_error")
    );
    assert_eq!(e.data_json, r#"{"tool":"nope"}"#);
    // … except a stored secret in it, which the agent never sees (SPEC §9).
    let e = error_of(
        client
            .call_tool(call("leak", "c2b", ""))
            .await?
            .into_inner(),
    )?;
    assert_eq!((e.code, e.message.as_str()), (-32001, "key *** refused"));
    assert_eq!(e.data_json, r#"{"key":"***","n":1}"#);

    // Another generation is refused.
    let mut stale = call("echo", "c3", r#"{"message":"x"}"#);
    stale.generation = GENERATION - 1;
    let e = error_of(client.call_tool(stale).await?.into_inner())?;
    assert_eq!((e.code, e.reason.as_str()), (-32602, "fenced"));
    assert_eq!(
        e.message,
        format!(
            "tool is not available now (generation {} of {KEY} is fenced); list tools again",
            GENERATION - 1
        )
    );
    Ok(())
}

/// A timeout and a Cancel each answer the call and cancel the upstream request.
async fn times_out_and_cancels(client: &mut Client) -> TestResult {
    // A timeout answers [MCP_TIMEOUT] and cancels the upstream request.
    let mut slow = call("sleep", "c4", "");
    slow.timeout_ms = 300;
    let e = error_of(client.call_tool(slow).await?.into_inner())?;
    assert_eq!(e.code, -32603);
    assert_eq!(e.reason, "timeout");
    assert_eq!(
        e.message,
        format!("[MCP_TIMEOUT] {KEY}: tool call exceeded 300 ms")
    );
    assert_eq!(cancelled_ids(client, "c5").await?.len(), 1);

    // Cancel: the pending call answers -32800 and the upstream hears notifications/cancelled.
    let mut pending = {
        let mut client = client.clone();
        tokio::spawn(async move { client.call_tool(call("sleep", "c6", "")).await })
    };
    // The call registers asynchronously; repeat the (idempotent) Cancel until it lands.
    let reply = loop {
        client
            .cancel(CancelRequest {
                generation: GENERATION,
                call_id: "c6".to_owned(),
            })
            .await?;
        tokio::select! {
            done = &mut pending => break done??.into_inner(),
            () = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
    };
    let e = error_of(reply)?;
    assert_eq!(
        (e.code, e.message.as_str(), e.reason.as_str()),
        (-32800, "Request cancelled", "cancelled")
    );
    assert_eq!(cancelled_ids(client, "c7").await?.len(), 2);
    Ok(())
}

/// The caller going away cancels the upstream request too.
async fn cancels_an_abandoned_call(client: &mut Client) -> TestResult {
    // The caller going away (its gRPC stream is reset) cancels the upstream request too.
    // Nothing signals these steps to the test, so it polls the fixture (bounded).
    let abandoned = {
        let mut client = client.clone();
        tokio::spawn(async move { client.call_tool(call("sleep", "c7b", "")).await })
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    while pending_count(client).await? == 0 {
        if tokio::time::Instant::now() > deadline {
            return Err("the call never reached the upstream".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    abandoned.abort();
    while cancelled_ids(client, "c7c").await?.len() < 3 {
        if tokio::time::Instant::now() > deadline {
            return Err("an abandoned call was not cancelled upstream".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(pending_count(client).await?, 0);
    Ok(())
}

#[tokio::test]
async fn serves_offers_calls_and_exits_when_fenced() -> TestResult {
    let py = python()?;
    let mut h = Harness::start(|dir| Ok(stdio_spec(dir, py)), true).await?;
    registers_then_offers(&mut h).await?;
    let mut client = h.client().await?;
    answers_results_errors_and_refusals(&mut client).await?;
    times_out_and_cancels(&mut client).await?;
    cancels_an_abandoned_call(&mut client).await?;

    // Fencing another generation is refused; our own makes the worker exit 0.
    let wrong = client
        .fence(GenerationRequest {
            generation: GENERATION + 1,
        })
        .await;
    assert_eq!(
        wrong.err().map(|s| s.code()),
        Some(tonic::Code::FailedPrecondition)
    );
    let in_flight = {
        let mut client = client.clone();
        tokio::spawn(async move { client.call_tool(call("sleep", "c8", "")).await })
    };
    client
        .fence(GenerationRequest {
            generation: GENERATION,
        })
        .await?;
    let e = error_of(in_flight.await??.into_inner())?;
    assert_eq!(e.reason, "fenced");
    assert_eq!(h.exit_code().await?, Some(0));

    // The upstream's stderr reached the log with the secret masked; no secret anywhere.
    let log = h.log();
    assert!(log.contains("fixture starting, key=***"), "{log}");
    assert!(!log.contains(SECRET), "{log}");
    assert!(!log.contains(TOKEN), "{log}");
    assert!(log.contains("non-JSON"), "{log}");
    assert!(
        !log.lines()
            .any(|l| l.contains(" rmcp::") && (l.contains(" DEBUG ") || l.contains(" TRACE "))),
        "{log}"
    );
    Ok(())
}

#[tokio::test]
async fn upstream_exit_is_reported_and_ends_the_worker() -> TestResult {
    let py = python()?;
    let mut h = Harness::start(|dir| Ok(stdio_spec(dir, py)), true).await?;
    h.offer().await?;
    let mut client = h.client().await?;
    let e = error_of(client.call_tool(call("exit", "x1", "")).await?.into_inner())?;
    assert_eq!(e.code, -32603);
    assert_eq!(e.reason, "unavailable");
    assert_eq!(
        e.message,
        format!("[MCP_UNAVAILABLE] {KEY}: upstream connection closed")
    );
    let report = h.report("upstream_exited").await?;
    assert_eq!(report.message, "exited with status 3");
    assert_eq!(h.exit_code().await?, Some(5));
    Ok(())
}

#[tokio::test]
async fn start_failure_is_reported() -> TestResult {
    let mut h = Harness::start(
        |dir| {
            Ok(stdio_spec(
                dir,
                dir.join("no-such-program").to_string_lossy().into_owned(),
            ))
        },
        true,
    )
    .await?;
    let report = h.report("start_failed").await?;
    assert!(
        report.message.contains("no-such-program"),
        "{}",
        report.message
    );
    assert_eq!(h.exit_code().await?, Some(3));
    Ok(())
}

#[tokio::test]
async fn start_timeout_names_the_limit() -> TestResult {
    let py = python()?;
    let mut h = Harness::start(
        |dir| {
            let mut spec = stdio_spec(dir, py);
            // A server that never answers initialize.
            spec.args = vec!["-c".to_owned(), "import time; time.sleep(60)".to_owned()];
            spec.start_timeout_ms = 400;
            Ok(spec)
        },
        true,
    )
    .await?;
    let report = h.report("start_failed").await?;
    assert_eq!(
        report.message,
        "timed out after 400 ms (startMs) waiting for the MCP handshake and tools/list"
    );
    assert_eq!(h.exit_code().await?, Some(3));
    Ok(())
}

#[tokio::test]
async fn refused_offer_ends_the_worker() -> TestResult {
    let py = python()?;
    let mut h = Harness::start(|dir| Ok(stdio_spec(dir, py)), false).await?;
    h.offer().await?;
    assert_eq!(h.exit_code().await?, Some(4));
    Ok(())
}

/// Runs the HTTP fixture; returns it and its URL once it listens.
async fn http_fixture(
    py: &str,
    token: &str,
    era: &str,
) -> Result<(Child, String), Box<dyn std::error::Error>> {
    use tokio::io::AsyncBufReadExt as _;
    let mut child = Command::new(py)
        .args(["-u", "-c", HTTP_SERVER_PY, token, era])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let port = tokio::time::timeout(WAIT, lines.next_line())
        .await??
        .ok_or("the HTTP fixture did not start")?;
    Ok((child, format!("http://127.0.0.1:{}/mcp", port.trim())))
}

fn http_spec(url: String, bearer: &str) -> LaunchSpec {
    let mut headers = HashMap::new();
    headers.insert("Authorization".to_owned(), format!("Bearer {bearer}"));
    LaunchSpec {
        transport: k::Transport::Http.into(),
        url,
        headers,
        start_timeout_ms: 20_000,
        call_timeout_ms: 10_000,
        redact: vec![bearer.to_owned()],
        ..Default::default()
    }
}

#[tokio::test]
async fn http_upstream_falls_back_to_the_legacy_era() -> TestResult {
    let py = python()?;
    let (_server, url) = http_fixture(&py, "good-token-123", "legacy").await?;
    let mut h = Harness::start(|_| Ok(http_spec(url, "good-token-123")), true).await?;
    let offer = h.offer().await?;
    assert_eq!(offer.protocol_version, "2025-06-18");
    let names: Vec<&str> = offer
        .tools
        .iter()
        .map(|t| t.upstream_name.as_str())
        .collect();
    assert_eq!(names, ["echo"]);
    let mut client = h.client().await?;
    let reply = client
        .call_tool(call("echo", "h1", r#"{"message":"over http"}"#))
        .await?
        .into_inner();
    assert_eq!(result_of(reply)?["content"][0]["text"], "over http");
    client
        .fence(GenerationRequest {
            generation: GENERATION,
        })
        .await?;
    assert_eq!(h.exit_code().await?, Some(0));
    assert!(!h.log().contains("good-token-123"), "{}", h.log());
    Ok(())
}

#[tokio::test]
async fn http_401_is_an_auth_failure() -> TestResult {
    let py = python()?;
    let (_server, url) = http_fixture(&py, "good-token-123", "legacy").await?;
    let mut h = Harness::start(|_| Ok(http_spec(url, "wrong-token-456")), true).await?;
    let report = h.report("auth_failed").await?;
    assert_eq!(
        report.message,
        "the upstream refused the credentials (HTTP 401 Unauthorized)"
    );
    assert_eq!(h.exit_code().await?, Some(6));
    assert!(!h.log().contains("wrong-token-456"), "{}", h.log());
    Ok(())
}

#[tokio::test]
async fn http_upstream_speaks_the_modern_era() -> TestResult {
    let py = python()?;
    let (_server, url) = http_fixture(&py, "good-token-789", "modern").await?;
    let mut h = Harness::start(|_| Ok(http_spec(url, "good-token-789")), true).await?;
    let offer = h.offer().await?;
    assert_eq!(offer.protocol_version, "2026-07-28");
    let mut client = h.client().await?;
    let reply = client
        .call_tool(call("echo", "m1", r#"{"message":"stateless"}"#))
        .await?
        .into_inner();
    let result = result_of(reply)?;
    assert_eq!(result["content"][0]["text"], "stateless");
    client
        .fence(GenerationRequest {
            generation: GENERATION,
        })
        .await?;
    assert_eq!(h.exit_code().await?, Some(0));
    Ok(())
}

#[tokio::test]
async fn list_changed_offers_the_new_tool_set() -> TestResult {
    let py = python()?;
    let mut h = Harness::start(|dir| Ok(stdio_spec(dir, py)), true).await?;
    let first = h.offer().await?;
    assert_eq!(first.tools.len(), 4);
    let mut client = h.client().await?;
    let reply = client.call_tool(call("grow", "g1", "")).await?.into_inner();
    assert!(result_of(reply).is_ok());
    let second = h.offer().await?;
    assert_eq!(second.generation, GENERATION);
    let names: Vec<&str> = second
        .tools
        .iter()
        .map(|t| t.upstream_name.as_str())
        .collect();
    assert_eq!(names, ["echo", "sleep", "cancelled", "exit", "grown"]);
    Ok(())
}

/// A tool rmcp cannot type (no `inputSchema`) does not fail the list: the page is offered as
/// the upstream sent it, and judging it is the kernel's job (SPEC §5.1 names the field).
#[tokio::test]
async fn a_tool_without_an_input_schema_is_offered_as_sent() -> TestResult {
    let py = python()?;
    let mut h = Harness::start(
        |dir| {
            let mut spec = stdio_spec(dir, py);
            spec.env
                .insert("FIXTURE_BARE_TOOL".to_owned(), "1".to_owned());
            Ok(spec)
        },
        true,
    )
    .await?;
    let offer = h.offer().await?;
    let names: Vec<&str> = offer
        .tools
        .iter()
        .map(|t| t.upstream_name.as_str())
        .collect();
    assert_eq!(names, ["echo", "sleep", "cancelled", "exit", "bare"]);
    let bare: serde_json::Value = serde_json::from_str(&offer.tools[4].definition_json)?;
    assert_eq!(
        bare,
        serde_json::json!({"name": "bare", "description": "no schema", "vendorHint": 7})
    );
    Ok(())
}

#[tokio::test]
async fn shutdown_stops_the_upstream_and_exits() -> TestResult {
    let py = python()?;
    let mut h = Harness::start(|dir| Ok(stdio_spec(dir, py)), true).await?;
    h.offer().await?;
    let mut client = h.client().await?;
    client
        .shutdown(tutti_proto::worker::ShutdownRequest {
            generation: GENERATION,
            grace_ms: 1_000,
        })
        .await?;
    assert_eq!(h.exit_code().await?, Some(0));
    // The upstream saw its stdin close and exited by itself.
    assert!(
        h.log()
            .contains("upstream stopped upstream=exited with status 0"),
        "{}",
        h.log()
    );
    Ok(())
}

/// Whether `pid` is still a live (not zombie) process.
#[cfg(target_os = "linux")]
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the first field after the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X')),
        Err(_) => false,
    }
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn worker_and_upstream_end_when_the_parent_goes() -> TestResult {
    let py = python()?;
    let dir = TempDir::new()?;
    std::fs::write(dir.0.join("server.py"), SERVER_PY)?;
    let (tx, mut seen) = mpsc::unbounded_channel();
    transport::run_dir(&dir.0)?;
    let incoming = transport::bind(&transport::kernel_endpoint(&dir.0))?;
    let fake = FakeKernel {
        launch: stdio_spec(&dir.0, py.clone()),
        commit: true,
        seen: tx,
    };
    let kernel = tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(WorkersServer::new(fake))
            .serve_with_incoming(incoming)
            .await;
    });
    // An intermediate parent that starts the worker and exits when its stdin closes.
    let parent_py = "import subprocess, sys\n\
        p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n\
        sys.stdin.read()\n";
    let mut parent = Command::new(&py)
        .arg("-c")
        .arg(parent_py)
        .arg(env!("CARGO_BIN_EXE_tutti-upstream-worker"))
        .arg("--state-dir")
        .arg(&dir.0)
        .env("TUTTI_WORKER_KEY", KEY)
        .env("TUTTI_WORKER_GENERATION", GENERATION.to_string())
        .env("TUTTI_WORKER_TOKEN", TOKEN)
        .stdin(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let worker_pid = loop {
        match tokio::time::timeout(WAIT, seen.recv()).await? {
            Some(Seen::Register(r)) => break r.pid,
            Some(_) => {}
            None => return Err("fake kernel stopped".into()),
        }
    };
    loop {
        if let Some(Seen::Offer(_)) = tokio::time::timeout(WAIT, seen.recv()).await? {
            break;
        }
    }
    let endpoint = transport::worker_endpoint(&dir.0, GENERATION);
    let mut client = WorkerClient::new(transport::connect(&endpoint).await?);
    let reply = client.call_tool(call("pid", "p1", "")).await?.into_inner();
    let upstream_pid: u32 = result_of(reply)?["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .parse()?;
    assert!(alive(worker_pid) && alive(upstream_pid));

    drop(parent.stdin.take());
    assert!(tokio::time::timeout(WAIT, parent.wait()).await?.is_ok());
    // No exit signal reaches us from a process that is not our child: poll /proc.
    let deadline = tokio::time::Instant::now() + WAIT;
    while alive(worker_pid) || alive(upstream_pid) {
        if tokio::time::Instant::now() > deadline {
            return Err("worker or upstream outlived the parent".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    kernel.abort();
    Ok(())
}

#[tokio::test]
async fn no_kernel_means_exit_2() -> TestResult {
    let dir = TempDir::new()?;
    let status = tokio::time::timeout(
        WAIT,
        Command::new(env!("CARGO_BIN_EXE_tutti-upstream-worker"))
            .arg("--state-dir")
            .arg(&dir.0)
            .env("TUTTI_WORKER_KEY", KEY)
            .env("TUTTI_WORKER_GENERATION", GENERATION.to_string())
            .env("TUTTI_WORKER_TOKEN", TOKEN)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status(),
    )
    .await??;
    assert_eq!(status.code(), Some(2));
    Ok(())
}

#[tokio::test]
async fn a_refused_token_means_exit_2() -> TestResult {
    let py = python()?;
    let mut h = Harness::start(|dir| Ok(stdio_spec(dir, py)), true).await?;
    // The harness' fake kernel accepts only TOKEN; start a second worker with another one.
    let status = tokio::time::timeout(
        WAIT,
        Command::new(env!("CARGO_BIN_EXE_tutti-upstream-worker"))
            .arg("--state-dir")
            .arg(&h.dir.0)
            .env("TUTTI_WORKER_KEY", KEY)
            .env("TUTTI_WORKER_GENERATION", (GENERATION + 1).to_string())
            .env("TUTTI_WORKER_TOKEN", "forged")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status(),
    )
    .await??;
    assert_eq!(status.code(), Some(2));
    h.offer().await?;
    Ok(())
}

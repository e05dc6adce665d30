//! The stdio bridge (`tutti mcp-stdio`, SPEC §18) with the official Python SDK's stdio client
//! (mcp 2.3.0): it lists and calls tools, gets progress, answers an upstream's elicitation,
//! hears a list change after an install, and goes on across a kernel restart (`tutti down`,
//! then `tutti up`) without noticing, its notification stream (2025-06-18) or
//! `subscriptions/listen` stream (2026-07-28) included; a call whose frontend died under it is
//! answered `[MCP_UNAVAILABLE]` and not sent again; with no runtime, `initialize` gets an error
//! naming `tutti up`.
#![cfg(unix)]

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};
use tutti_tests::{
    PySdk, Runtime, RuntimeOptions, Server, bin, everything_http_manifest, fixture_connector,
    result_texts,
};

const READY: Duration = Duration::from_secs(30);

/// Runs the bridge as its client would, then steps through what the test asks for: each
/// step waits for the file `<root>/go-<step>` the test creates.
const PY_CLIENT: &str = r#"
import asyncio, json, os, sys
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from sdk_prelude import out, dump, run

async def wait_go(root, step):
    while not os.path.exists(os.path.join(root, "go-" + step)):
        await asyncio.sleep(0.05)

async def main():
    mode, entry, root = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    params = StdioServerParameters(command=entry["command"], args=entry["args"])

    async def on_message(m):
        method = getattr(m, "method", None)
        if method:
            out(event="note", method=method)

    async def on_elicit(ctx, params):
        out(event="asked", message=params.message)
        return types.ElicitResult(action="accept", content={
            "name": "Ada Lovelace", "check": True, "firstLine": "It was a dark night.",
            "email": "ada@example.com", "homepage": "https://example.com",
            "birthdate": "1815-12-10", "integer": 7, "number": 1.5, "untitledSingleSelectEnum": "Option 1"})

    async with Client(params, mode=mode, message_handler=on_message, elicitation_callback=on_elicit) as c:
        out(event="connected", protocolVersion=str(c.protocol_version))
        tools = (await c.list_tools()).tools
        out(event="listed", tools=sorted(t.name for t in tools))
        r = await c.call_tool("fx_echo", {"message": "over the bridge"})
        out(event="called", result=dump(r))
        seen = []
        async def on_progress(progress, total, message):
            seen.append(progress)
        r = await c.call_tool("fx_tool_with_progress", {}, progress_callback=on_progress)
        out(event="progress", progress=seen, result=dump(r))
        r = await c.call_tool("ev_trigger-elicitation-request", {})
        out(event="elicited", result=dump(r))
        if mode != "legacy":
            r = await c.call_tool("fx_param_header", {"region": "eu-west"})
            out(event="param-header", result=dump(r))
            # Held open for the rest of the run, across the restart.
            asyncio.get_running_loop().create_task(listen_for_changes(c))
        await wait_go(root, "restarted")
        r = await c.call_tool("fx_echo", {"message": "after the restart"})
        out(event="called-again", result=dump(r))
        # Stays connected: the test installs a connector and waits for the change.
        await asyncio.Event().wait()

async def listen_for_changes(c):
    try:
        async with c.listen(tools_list_changed=True) as sub:
            out(event="listening")
            async for event in sub:
                out(event="listen-event", kind=type(event).__name__)
        out(event="listen-ended")
    except Exception as e:
        out(event="listen-lost", error=repr(e))

run(main)
"#;

fn runtime_with_connectors() -> (Runtime, Server) {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let (server, url) = Server::everything_http(rt.root(), "everything.stderr", READY);
    rt.install_ok(&everything_http_manifest("ev", &url), &[]);
    rt.install_ok(
        &fixture_connector("fx", &["--tools", "echo,conformance,param_header"]),
        &[],
    );
    rt.wait_status("ev", "ready", READY);
    rt.wait_status("fx", "ready", READY);
    (rt, server)
}

/// The entry `session issue --via stdio --format claude` writes: a command, no token.
fn stdio_entry(rt: &Runtime, session: &str) -> Value {
    let text = rt.tutti_ok(&[
        "session",
        "issue",
        "--workspace",
        "w",
        "--session",
        session,
        "--via",
        "stdio",
        "--format",
        "claude",
    ]);
    assert!(
        !text.contains("tts_"),
        "a stdio binding holds no token: {text}"
    );
    let binding: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let entry = binding["mcpServers"]["connector"].clone();
    assert_eq!(entry["type"], "stdio", "{binding}");
    assert_eq!(entry["args"][0], "mcp-stdio", "{binding}");
    entry
}

fn bridge_client(rt: &Runtime, mode: &str) -> PySdk {
    let entry = stdio_entry(rt, &format!("bridge-{mode}")).to_string();
    let root = rt.root().display().to_string();
    let stderr = rt.root().join(format!("bridge-{mode}.stderr"));
    PySdk::spawn_inline(
        rt.root(),
        "bridge_client.py",
        PY_CLIENT,
        &[mode, &entry, &root],
        "",
        stderr,
    )
}

/// The client's next `event` line; the end of its listen stream on the way fails the test.
fn next_event(py: &PySdk, event: &str) -> Value {
    py.until(event, Duration::from_secs(90), |v| {
        let ended = matches!(v["event"].as_str(), Some("listen-ended" | "listen-lost"));
        assert!(!ended, "the listen stream ended (waiting for {event}): {v}");
        v["event"] == event
    })
}

/// The calls before the restart: list, call, progress, elicitation.
fn lists_calls_and_answers(py: &PySdk, mode: &str) {
    let listed = next_event(py, "listed");
    let tools = listed["tools"].to_string();
    assert!(
        tools.contains("\"fx_echo\"") && tools.contains("\"ev_echo\""),
        "mode={mode}: {listed}"
    );
    let called = next_event(py, "called");
    assert!(
        result_texts(&called["result"]).contains("over the bridge"),
        "mode={mode}: {called}"
    );
    let progress = next_event(py, "progress");
    assert!(
        progress["progress"]
            .as_array()
            .is_some_and(|p| !p.is_empty()),
        "mode={mode}: no progress over the bridge: {progress}"
    );
    let elicited = next_event(py, "elicited");
    let text = result_texts(&elicited["result"]);
    assert!(
        text.contains("Ada Lovelace") && text.contains("accept"),
        "mode={mode}: the upstream did not get the client's answer: {text}"
    );
}

/// `tutti down`, then `tutti up` on the same state dir; the client's next call must work.
fn restart_and_call_again(rt: &mut Runtime, py: &PySdk, mode: &str) {
    rt.tutti_ok(&["down"]);
    rt.stop();
    rt.restart();
    // Both back, so that no list change of their own comes after this point.
    rt.wait_status("fx", "ready", READY);
    rt.wait_status("ev", "ready", READY);
    std::fs::write(rt.root().join("go-restarted"), b"")
        .unwrap_or_else(|e| panic!("cannot write the go file: {e}"));
    let again = next_event(py, "called-again");
    assert!(
        result_texts(&again["result"]).contains("after the restart"),
        "mode={mode}: {again}"
    );
    assert_ne!(again["result"]["isError"], true, "mode={mode}: {again}");
}

#[test]
fn the_python_sdk_over_the_stdio_bridge_in_2025_06_18_mode_hears_changes_and_outlives_a_restart() {
    let (mut rt, _everything) = runtime_with_connectors();
    let py = bridge_client(&rt, "legacy");
    let connected = next_event(&py, "connected");
    assert!(
        connected["protocolVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("2025-")),
        "{connected}"
    );
    lists_calls_and_answers(&py, "legacy");
    rt.install_ok(&fixture_connector("late", &["--tools", "echo"]), &[]);
    py.until("list_changed after an install", READY, |v| {
        v["event"] == "note" && v["method"] == "notifications/tools/list_changed"
    });
    restart_and_call_again(&mut rt, &py, "legacy");
    // The notification stream was opened again for the new token.
    rt.install_ok(&fixture_connector("later", &["--tools", "echo"]), &[]);
    py.until(
        "list_changed after an install after the restart",
        READY,
        |v| v["event"] == "note" && v["method"] == "notifications/tools/list_changed",
    );
}

#[test]
fn the_python_sdk_over_the_stdio_bridge_in_2026_07_28_mode_calls_listens_and_outlives_a_restart() {
    let (mut rt, _everything) = runtime_with_connectors();
    let py = bridge_client(&rt, "2026-07-28");
    let connected = next_event(&py, "connected");
    assert_eq!(connected["protocolVersion"], "2026-07-28", "{connected}");
    lists_calls_and_answers(&py, "2026-07-28");
    // The tool declares `x-mcp-header`: the bridge adds the `Mcp-Param-Region` header.
    let param = next_event(&py, "param-header");
    assert!(
        result_texts(&param["result"]).contains("eu-west"),
        "{param}"
    );
    next_event(&py, "listening");
    rt.install_ok(&fixture_connector("late", &["--tools", "echo"]), &[]);
    hears_a_tool_list_change(&py, "before the restart");
    restart_and_call_again(&mut rt, &py, "2026-07-28");
    // The listen stream goes on for the new token: a change after the restart reaches it.
    rt.install_ok(&fixture_connector("later", &["--tools", "echo"]), &[]);
    hears_a_tool_list_change(&py, "after the restart");
}

/// The next event of the client's `subscriptions/listen` stream is a tool list change (not
/// its end).
fn hears_a_tool_list_change(py: &PySdk, when: &str) {
    let event = py.until("a listen event", READY, |v| {
        v["event"]
            .as_str()
            .is_some_and(|e| e.starts_with("listen-"))
    });
    assert_eq!(
        (&event["event"], &event["kind"]),
        (&json!("listen-event"), &json!("ToolsListChanged")),
        "the listen stream {when}: {event}"
    );
}

#[test]
fn without_a_runtime_initialize_gets_an_error_naming_tutti_up_and_the_bridge_exits() {
    let root = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let mut child = Command::new(bin("tutti"))
        .arg("--state-dir")
        .arg(root.path().join("state"))
        .arg("mcp-stdio")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run tutti mcp-stdio: {e}"));
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}});
    let mut stdin = child.stdin.take().unwrap_or_else(|| panic!("no stdin"));
    writeln!(stdin, "{initialize}").unwrap_or_else(|e| panic!("write: {e}"));
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .unwrap_or_else(|e| panic!("read: {e}"));
    let answer: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(answer["id"], 1, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("tutti up"), "{answer}");
    let status = child.wait().unwrap_or_else(|e| panic!("wait: {e}"));
    assert!(!status.success(), "the bridge should exit non-zero");
}

#[test]
fn the_frontend_keeps_its_port_across_restarts_and_moves_when_it_is_taken() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let first = rt.frontend_url().to_owned();
    rt.stop();
    rt.restart();
    assert_eq!(
        rt.frontend_url(),
        first,
        "a later `tutti up` reuses the last port"
    );
    let port: u16 = first
        .trim_start_matches("http://127.0.0.1:")
        .split('/')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {first}"));
    rt.stop();
    let _holder = std::net::TcpListener::bind(("127.0.0.1", port))
        .unwrap_or_else(|e| panic!("cannot hold port {port}: {e}"));
    rt.restart();
    assert_ne!(
        rt.frontend_url(),
        first,
        "the port is taken: the frontend moves"
    );
    let log = rt.log("kernel.log");
    assert!(
        log.contains("last port is taken"),
        "the kernel says so: {log}"
    );
}

/// A bridge spoken to line by line: its stdin, and its stdout lines as JSON.
struct RawBridge {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl RawBridge {
    fn start(rt: &Runtime, session: &str) -> RawBridge {
        let mut cmd = rt.tutti_cmd(&["mcp-stdio", "--workspace", "w", "--session", session]);
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run tutti mcp-stdio: {e}"));
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        RawBridge {
            child,
            stdin,
            lines,
        }
    }

    /// Writes `message` without waiting for anything.
    fn write(&mut self, message: &Value) {
        let stdin = self
            .stdin
            .as_mut()
            .unwrap_or_else(|| panic!("stdin closed"));
        writeln!(stdin, "{message}").unwrap_or_else(|e| panic!("write: {e}"));
    }

    /// Sends `message`; the next line when it is a request.
    fn send(&mut self, message: &Value) -> Option<Value> {
        self.write(message);
        message.get("id")?;
        self.next(READY)
    }

    /// The answer to request `id` within `READY` (notifications before it are skipped).
    fn answer(&self, id: u64) -> Option<Value> {
        loop {
            let message = self.next(READY)?;
            if message["id"] == json!(id) {
                return Some(message);
            }
        }
    }

    /// The next line within `timeout`, `None` when there is none.
    fn next(&self, timeout: Duration) -> Option<Value> {
        let line = self.lines.recv_timeout(timeout).ok()?;
        Some(serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}")))
    }
}

#[test]
fn a_revoked_bridge_session_stays_revoked_and_closing_stdin_revokes_the_token() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    rt.install_ok(&fixture_connector("fx", &["--tools", "echo"]), &[]);
    rt.wait_status("fx", "ready", READY);
    let mut bridge = RawBridge::start(&rt, "raw");
    let init = bridge.send(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}}),
    );
    assert!(init.is_some_and(|v| v["result"]["protocolVersion"] == "2025-06-18"));
    bridge.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let listed = bridge.send(&list).unwrap_or_default();
    assert_eq!(listed["result"]["tools"][0]["name"], "fx_echo", "{listed}");

    rt.tutti_ok(&["session", "revoke", "--workspace", "w", "--session", "raw"]);
    let refused = bridge.send(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}));
    let refused = refused.unwrap_or_default();
    assert_eq!(refused["id"], 3, "{refused}");
    assert!(
        refused.get("error").is_some(),
        "a revoked session must not be renewed: {refused}"
    );
    drop(bridge);

    let mut second = RawBridge::start(&rt, "closing");
    second.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}));
    second.stdin = None;
    let status = second.child.wait().unwrap_or_else(|e| panic!("wait: {e}"));
    assert!(status.success(), "the bridge exits 0 when stdin closes");
    let left = rt.tutti_ok(&[
        "session",
        "revoke",
        "--workspace",
        "w",
        "--session",
        "closing",
        "--json",
    ]);
    assert!(
        left.contains("\"revoked\":0"),
        "stdin's end revoked the token: {left}"
    );
}

/// The `tools/call` lines an upstream started with `--record FILE` received for `tool`.
fn recorded_calls(file: &std::path::Path, tool: &str) -> usize {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|m| m["method"] == "tools/call" && m["params"]["name"] == tool)
        .count()
}

#[test]
fn a_call_in_flight_when_the_frontend_dies_is_answered_unavailable_and_not_sent_again() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let record = rt.root().join("fx.calls");
    let record_arg = record.to_string_lossy().into_owned();
    rt.install_ok(
        &fixture_connector("fx", &["--tools", "sleep,echo", "--record", &record_arg]),
        &[],
    );
    rt.wait_status("fx", "ready", READY);
    let mut bridge = RawBridge::start(&rt, "mid-call");
    bridge.send(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}}),
    );
    bridge.write(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));

    bridge.write(&json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "fx_sleep", "arguments": {"ms": 4000}}}));
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while recorded_calls(&record, "sleep") == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the call never reached the upstream"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let frontend = rt
        .frontend_pid()
        .unwrap_or_else(|| panic!("no frontend pid"));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(frontend).unwrap_or(i32::MAX)),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap_or_else(|e| panic!("cannot kill the frontend: {e}"));

    // The answer was lost with the frontend; the call may have run, so it is not repeated.
    let answer = bridge
        .answer(7)
        .unwrap_or_else(|| panic!("the bridge ended"));
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("[MCP_UNAVAILABLE]"), "{answer}");
    assert!(
        message.starts_with("[MCP_UNAVAILABLE] fx: "),
        "names the connector: {answer}"
    );
    // The bridge goes on with the restarted frontend, and the upstream got the call once.
    let echo = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
        "params": {"name": "fx_echo", "arguments": {"message": "after"}}});
    bridge.write(&echo);
    let echoed = bridge
        .answer(8)
        .unwrap_or_else(|| panic!("the bridge ended"));
    assert_eq!(result_texts(&echoed["result"]), "after", "{echoed}");
    assert_eq!(
        recorded_calls(&record, "sleep"),
        1,
        "the call was sent again"
    );
}

const LISTEN_ID: &str = "listen-7";

/// A 2026-07-28 `subscriptions/listen` request for tool list changes.
fn listen_request() -> Value {
    json!({"jsonrpc": "2.0", "id": LISTEN_ID, "method": "subscriptions/listen", "params": {
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"}},
        "notifications": {"toolsListChanged": true}}})
}

/// The next line of the listen stream: a notification naming the listen request as its
/// subscription. The request's own answer (the stream's end) fails the test.
fn next_on_listen(bridge: &RawBridge, what: &str) -> Value {
    let line = bridge
        .next(Duration::from_secs(90))
        .unwrap_or_else(|| panic!("no line on the listen stream ({what})"));
    assert_ne!(
        line["id"], LISTEN_ID,
        "the listen stream ended ({what}): {line}"
    );
    assert_eq!(
        line["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], LISTEN_ID,
        "{what}: {line}"
    );
    line
}

/// Lines that are already there or come within `quiet`, read and dropped; each must still
/// belong to the listen stream.
fn drain_listen(bridge: &RawBridge, quiet: Duration) {
    while let Some(line) = bridge.next(quiet) {
        assert_ne!(line["id"], LISTEN_ID, "the listen stream ended: {line}");
    }
}

/// After a restart: the bridge asks again under the same id, so the new stream's
/// acknowledgement arrives on the client's stream, which never got an answer; then a
/// connector `key` installed now reaches it as a list change.
fn listen_goes_on(rt: &mut Runtime, bridge: &RawBridge, key: &str) {
    rt.wait_status("fx", "ready", READY);
    let again = next_on_listen(bridge, "after the restart");
    assert_eq!(
        again["method"], "notifications/subscriptions/acknowledged",
        "{again}"
    );
    drain_listen(bridge, Duration::from_secs(2));
    rt.install_ok(&fixture_connector(key, &["--tools", "echo"]), &[]);
    let change = next_on_listen(bridge, "an install after the restart");
    assert_eq!(
        change["method"], "notifications/tools/list_changed",
        "{change}"
    );
}

#[test]
fn a_2026_07_28_listen_stream_through_the_bridge_goes_on_across_kernel_restarts() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    rt.install_ok(&fixture_connector("fx", &["--tools", "echo"]), &[]);
    rt.wait_status("fx", "ready", READY);
    let mut bridge = RawBridge::start(&rt, "listen");
    // Before any `initialize`, a request whose `_meta` names no revision is a 2026-07-28
    // request missing its `_meta`: refused as such (not answered by the 2025 surface).
    let discover = json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}});
    let refused = bridge
        .send(&discover)
        .unwrap_or_else(|| panic!("no answer to server/discover"));
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    bridge.write(&listen_request());
    let ack = next_on_listen(&bridge, "opened");
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    rt.install_ok(&fixture_connector("before", &["--tools", "echo"]), &[]);
    let change = next_on_listen(&bridge, "an install");
    assert_eq!(
        change["method"], "notifications/tools/list_changed",
        "{change}"
    );

    // `tutti down`: the frontend ends the stream with its final result.
    rt.tutti_ok(&["down"]);
    rt.stop();
    rt.restart();
    listen_goes_on(&mut rt, &bridge, "later");
    // The kernel killed: the stream breaks off without an answer.
    rt.kill();
    rt.restart();
    listen_goes_on(&mut rt, &bridge, "last");

    // Calls go on beside it with the new token.
    let meta = listen_request()["params"]["_meta"].clone();
    bridge.write(&json!({"jsonrpc": "2.0", "id": 8, "method": "tools/list",
        "params": {"_meta": meta}}));
    let listed = loop {
        let line = bridge
            .next(READY)
            .unwrap_or_else(|| panic!("no answer to tools/list"));
        assert_ne!(line["id"], LISTEN_ID, "the listen stream ended: {line}");
        if line["id"] == 8 {
            break line;
        }
    };
    assert!(
        listed.to_string().contains("last_echo"),
        "tools/list after the restarts: {listed}"
    );
    a_cancelled_listen_stays_gone_and_revoking_ends_the_first(&rt, &mut bridge);
}

/// A second listen, cancelled by the client, is gone for good; revoking the session ends the
/// first with its answer (asked again, the frontend refuses the token).
fn a_cancelled_listen_stays_gone_and_revoking_ends_the_first(rt: &Runtime, bridge: &mut RawBridge) {
    let mut second = listen_request();
    second["id"] = json!("listen-8");
    bridge.write(&second);
    let ack = bridge
        .next(READY)
        .unwrap_or_else(|| panic!("no acknowledgement of the second listen"));
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "listen-8",
        "{ack}"
    );
    bridge.write(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": "listen-8"}}),
    );
    rt.tutti_ok(&[
        "session",
        "revoke",
        "--workspace",
        "w",
        "--session",
        "listen",
    ]);
    let end = bridge
        .next(READY)
        .unwrap_or_else(|| panic!("no answer to the listen request after the revocation"));
    assert_eq!(end["id"], LISTEN_ID, "{end}");
    assert_eq!(end["result"]["resultType"], "complete", "{end}");
    let after = bridge.next(Duration::from_secs(2));
    assert!(
        after.is_none(),
        "the cancelled listen was answered: {after:?}"
    );
}

/// `initialize`, then a `tools/call` of `fx_echo`, over a bridge's stdin and stdout; the
/// echoed text.
fn initialize_and_echo(
    input: &mut impl std::io::Write,
    output: &mut impl std::io::BufRead,
) -> String {
    let mut exchange = |message: Value| {
        writeln!(input, "{message}").unwrap_or_else(|e| panic!("write: {e}"));
        message.get("id")?;
        let mut line = String::new();
        output
            .read_line(&mut line)
            .unwrap_or_else(|e| panic!("read: {e}"));
        Some(serde_json::from_str::<Value>(&line).unwrap_or_else(|e| panic!("{e}: {line}")))
    };
    let init = exchange(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}}),
    );
    assert!(
        init.as_ref()
            .is_some_and(|v| v["result"]["protocolVersion"] == "2025-06-18"),
        "{init:?}"
    );
    exchange(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "fx_echo", "arguments": {"message": "through the descriptors"}}});
    result_texts(&exchange(call).unwrap_or_default()["result"])
}

fn nonblocking(fd: &std::os::fd::OwnedFd) -> bool {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    let flags = fcntl(fd, FcntlArg::F_GETFL).unwrap_or_else(|e| panic!("F_GETFL: {e}"));
    OFlag::from_bits_truncate(flags).contains(OFlag::O_NONBLOCK)
}

/// Node's `child_process` gives its children socket pairs, most other clients pipes: the
/// bridge answers on both. A pipe it shares with another process (as in a shell pipeline)
/// is non-blocking while the bridge reads it, and blocking again once the bridge exits.
#[test]
fn the_bridge_serves_clients_on_socket_pairs_and_on_pipes_and_leaves_shared_pipes_blocking() {
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;
    let mut rt = Runtime::start(RuntimeOptions::default());
    rt.install_ok(&fixture_connector("fx", &["--tools", "echo"]), &[]);
    rt.wait_status("fx", "ready", READY);
    let pair = || UnixStream::pair().unwrap_or_else(|e| panic!("socketpair: {e}"));
    let ((mut to_bridge, its_stdin), (from_bridge, its_stdout)) = (pair(), pair());
    let mut sockets = rt
        .tutti_cmd(&["mcp-stdio", "--workspace", "w", "--session", "sockets"])
        .stdin(Stdio::from(OwnedFd::from(its_stdin)))
        .stdout(Stdio::from(OwnedFd::from(its_stdout)))
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run tutti mcp-stdio: {e}"));
    let text = initialize_and_echo(&mut to_bridge, &mut BufReader::new(from_bridge));
    assert_eq!(text, "through the descriptors");
    drop(to_bridge);
    let status = sockets.wait().unwrap_or_else(|e| panic!("wait: {e}"));
    assert!(status.success(), "the bridge exits 0 when stdin closes");

    // Pipes whose bridge ends this test holds too, as a shell pipeline would.
    let pipe =
        || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap_or_else(|e| panic!("pipe: {e}"));
    let ((its_stdin, to_bridge), (from_bridge, its_stdout)) = (pipe(), pipe());
    let dup = |fd: &OwnedFd| fd.try_clone().unwrap_or_else(|e| panic!("dup: {e}"));
    let (shared_in, shared_out) = (dup(&its_stdin), dup(&its_stdout));
    let mut pipes = rt
        .tutti_cmd(&["mcp-stdio", "--workspace", "w", "--session", "pipes"])
        .stdin(Stdio::from(its_stdin))
        .stdout(Stdio::from(its_stdout))
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run tutti mcp-stdio: {e}"));
    let mut to_bridge = std::fs::File::from(to_bridge);
    let mut from_bridge = BufReader::new(std::fs::File::from(from_bridge));
    let text = initialize_and_echo(&mut to_bridge, &mut from_bridge);
    assert_eq!(text, "through the descriptors");
    assert!(
        nonblocking(&shared_in) && nonblocking(&shared_out),
        "the bridge reads and writes its pipes without blocking"
    );
    drop(to_bridge);
    let status = pipes.wait().unwrap_or_else(|e| panic!("wait: {e}"));
    assert!(status.success(), "the bridge exits 0 when stdin closes");
    assert!(
        !nonblocking(&shared_in) && !nonblocking(&shared_out),
        "the pipes are blocking again after the bridge"
    );
}

//! The stdio bridge (`tutti mcp-stdio`, SPEC §18) with the official Python SDK's stdio client
//! (mcp 2.3.0): it lists and calls tools, gets progress, answers an upstream's elicitation,
//! hears a list change after an install, and goes on across a kernel restart (`tutti down`,
//! then `tutti up`) without noticing; a call whose frontend died under it is answered
//! `[MCP_UNAVAILABLE]` and not sent again; with no runtime, `initialize` gets an error naming
//! `tutti up`.
#![cfg(unix)]

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Command, Stdio};
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
        await wait_go(root, "restarted")
        r = await c.call_tool("fx_echo", {"message": "after the restart"})
        out(event="called-again", result=dump(r))

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

fn next_event(py: &PySdk, event: &str) -> Value {
    py.until(event, Duration::from_secs(90), |v| v["event"] == event)
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
    rt.wait_status("fx", "ready", READY);
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
}

#[test]
fn the_python_sdk_over_the_stdio_bridge_in_2026_07_28_mode_calls_and_outlives_a_restart() {
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
    restart_and_call_again(&mut rt, &py, "2026-07-28");
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
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
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
        RawBridge {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
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

    /// The answer to request `id` (notifications before it are skipped); `None` at EOF.
    fn answer(&mut self, id: u64) -> Option<Value> {
        loop {
            let line = self.lines.next()?.unwrap_or_else(|e| panic!("read: {e}"));
            let message: Value =
                serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
            if message["id"] == json!(id) {
                return Some(message);
            }
        }
    }

    /// Sends `message`; the next line when it is a request.
    fn send(&mut self, message: &Value) -> Option<Value> {
        let stdin = self
            .stdin
            .as_mut()
            .unwrap_or_else(|| panic!("stdin closed"));
        writeln!(stdin, "{message}").unwrap_or_else(|e| panic!("write: {e}"));
        message.get("id")?;
        let line = self.lines.next()?.unwrap_or_else(|e| panic!("read: {e}"));
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

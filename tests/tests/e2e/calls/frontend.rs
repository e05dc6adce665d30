//! The frontend over the real runtime (`tutti up`): real MCP clients (the official
//! Python SDK `mcp` 2.3.0 in both eras, with `subscriptions/listen`; the MCP Inspector v2 CLI
//! in both eras), argument validation that never echoes a value, cancellation in both eras
//! down to the upstream, and the status-code and error tables of SPEC §5 on the wire.
//! (`mcp-frontend/tests/wire.rs` covers every row in-process with a fake backend; these prove
//! them end to end through the kernel, a worker and the fixture upstream.)

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tutti_tests::{
    LEGACY_VERSION, MODERN_VERSION, Mcp, Runtime, RuntimeOptions, fixture_connector, npm_package,
    require_node22, require_python,
};

const READY: Duration = Duration::from_secs(20);
/// Upper bound for anything that should happen "at once".
const AT_ONCE: Duration = Duration::from_secs(1);
/// Upper bound for a fixture upstream to record a message.
const RECORDED: Duration = Duration::from_secs(5);
/// Upper bound for one external client process.
const CLIENT_RUN: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------
// helpers

/// A runtime with fixture connector `key` (`--tools TOOLS --record <root>/<key>.jsonl`),
/// ready, and a token for workspace `w`, session `s`. Returns the record path too.
fn runtime_with(key: &str, tools: &str) -> (Runtime, String, PathBuf) {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let record = rt.root().join(format!("{key}.jsonl"));
    install_recorded(&mut rt, key, tools, &record, None);
    let token = rt.issue_token("w", "s");
    (rt, token, record)
}

fn install_recorded(
    rt: &mut Runtime,
    key: &str,
    tools: &str,
    record: &Path,
    extra: Option<(&str, Value)>,
) {
    let record = record.to_string_lossy().into_owned();
    let mut manifest = fixture_connector(key, &["--tools", tools, "--record", &record]);
    if let (Some((field, value)), Some(obj)) = (extra, manifest.as_object_mut()) {
        obj.insert(field.to_owned(), value);
    }
    rt.install_ok(&manifest, &[]);
    rt.wait_status(key, "ready", READY);
}

/// Every message the fixture recorded so far.
fn recorded(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Waits until the record holds a message matching `pred`; returns it.
fn wait_recorded(path: &Path, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + RECORDED;
    loop {
        if let Some(m) = recorded(path).into_iter().find(|m| pred(m)) {
            return m;
        }
        assert!(
            Instant::now() < deadline,
            "the upstream did not record {what} within {RECORDED:?}; record: {:?}",
            recorded(path)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn tool_calls(path: &Path) -> Vec<Value> {
    recorded(path)
        .into_iter()
        .filter(|m| m["method"] == "tools/call")
        .collect()
}

fn error_of(body: &Value) -> &Value {
    let e = &body["error"];
    assert!(e.is_object(), "expected a JSON-RPC error, got {body}");
    e
}

/// The SPEC §5 `error.data.tutti` of an error, with its reason checked.
fn tutti_data<'a>(body: &'a Value, reason: &str) -> &'a Value {
    let t = &error_of(body)["data"]["tutti"];
    assert_eq!(t["reason"], reason, "error.data.tutti of {body}");
    t
}

fn assert_tutti(body: &Value, reason: &str, key: &str) {
    let t = tutti_data(body, reason);
    assert_eq!(t["connector"], key, "{body}");
    assert!(t["generation"].as_u64().is_some_and(|g| g > 0), "{body}");
}

// --- the Python SDK client ---

/// The official Python SDK client, driven by argv; prints one JSON object per line.
const PY_CLIENT: &str = r#"
import asyncio, json, os, sys
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import SubscriptionLost

def out(**kw):
    print(json.dumps(kw), flush=True)

def dump(model):
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)

async def main():
    what, url, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    headers = {"Authorization": "Bearer " + os.environ["TUTTI_TEST_TOKEN"]}
    async with httpx2.AsyncClient(headers=headers) as hc:
        async with Client(streamable_http_client(url, http_client=hc), mode=mode) as c:
            out(event="connected", protocolVersion=c.protocol_version)
            if what == "list-call":
                tools = await c.list_tools()
                out(event="tools", tools=[t.name for t in tools.tools])
                for name, args in json.loads(sys.argv[4]):
                    r = await c.call_tool(name, args)
                    out(event="called", name=name, result=dump(r))
            elif what == "progress":
                seen = []
                async def on_progress(progress, total, message):
                    seen.append({"progress": progress, "total": total, "message": message})
                r = await c.call_tool(sys.argv[4], {}, progress_callback=on_progress)
                out(event="called", progress=seen, result=dump(r))
            elif what == "listen":
                try:
                    async with c.listen(tools_list_changed=True) as sub:
                        out(event="acked", honored=dump(sub.honored))
                        async for ev in sub:
                            out(event="change", kind=type(ev).__name__)
                    out(event="ended")
                except SubscriptionLost as e:
                    out(event="lost", error=str(e))

try:
    asyncio.run(main())
except Exception as e:
    out(event="error", error=repr(e))
    sys.exit(1)
"#;

/// A running Python client: its stdout lines arrive on `lines` as JSON.
struct PyClient {
    child: Child,
    lines: Receiver<Value>,
    stderr: PathBuf,
}

impl PyClient {
    fn spawn(rt: &Runtime, token: &str, args: &[&str]) -> PyClient {
        let script = rt.root().join("mcp_client.py");
        std::fs::write(&script, PY_CLIENT).unwrap_or_else(|e| panic!("write script: {e}"));
        let stderr = rt.root().join(format!(
            "py-{}-{}.stderr",
            args[0],
            args.get(2).unwrap_or(&"")
        ));
        let err_file =
            std::fs::File::create(&stderr).unwrap_or_else(|e| panic!("py stderr file: {e}"));
        let mut child = Command::new(require_python())
            .arg(&script)
            .args(args)
            .env("TUTTI_TEST_TOKEN", token)
            .env_remove("HTTP_PROXY")
            .env_remove("http_proxy")
            .env_remove("ALL_PROXY")
            .env_remove("all_proxy")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(err_file)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run the Python client: {e}"));
        let stdout = child
            .stdout
            .take()
            .unwrap_or_else(|| panic!("no stdout pipe"));
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let v = serde_json::from_str(&line).unwrap_or(Value::String(line));
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        PyClient {
            child,
            lines,
            stderr,
        }
    }

    /// The next line within `timeout`; panics (with the client's stderr) otherwise.
    fn next(&self, what: &str, timeout: Duration) -> Value {
        match self.lines.recv_timeout(timeout) {
            Ok(v) => {
                assert_ne!(
                    v["event"],
                    "error",
                    "Python client failed while waiting for {what}: {v}\n{}",
                    self.stderr_text()
                );
                v
            }
            Err(RecvTimeoutError::Timeout) => panic!(
                "Python client: no {what} within {timeout:?}\nstderr: {}",
                self.stderr_text()
            ),
            Err(RecvTimeoutError::Disconnected) => panic!(
                "Python client ended before {what}\nstderr: {}",
                self.stderr_text()
            ),
        }
    }

    fn stderr_text(&self) -> String {
        tutti_tests::file_tail(&self.stderr, 30)
    }

    /// Waits for the process to exit; its status.
    fn wait(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the Python client did not exit within {timeout:?}\n{}",
                self.stderr_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for PyClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(unix)]
fn sigkill(pid: u32) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let pid = i32::try_from(pid).unwrap_or_else(|e| panic!("pid {pid}: {e}"));
    kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap_or_else(|e| panic!("kill {pid}: {e}"));
}

#[cfg(windows)]
fn sigkill(pid: u32) {
    let status = Command::new("taskkill")
        .args(["/F", "/PID", &pid.to_string()])
        .status()
        .unwrap_or_else(|e| panic!("taskkill: {e}"));
    assert!(status.success(), "taskkill {pid}");
}

// ---------------------------------------------------------------------------------------
// real clients

#[test]
fn python_sdk_lists_and_calls_in_both_eras() {
    let (rt, token, _) = runtime_with("fx", "echo,add");
    let calls = json!([["fx_echo", {"message": "hi"}], ["fx_add", {"a": 2, "b": 3}]]).to_string();
    for (mode, modern) in [("legacy", false), ("auto", true)] {
        let mut py = PyClient::spawn(&rt, &token, &["list-call", rt.frontend_url(), mode, &calls]);
        let connected = py.next("connected", CLIENT_RUN);
        let version = connected["protocolVersion"].as_str().unwrap_or_default();
        if modern {
            assert_eq!(
                version, MODERN_VERSION,
                "mode=auto must pick the modern era"
            );
        } else {
            assert!(
                version.starts_with("2025-"),
                "mode=legacy negotiated {version}"
            );
        }
        let tools = py.next("tools", CLIENT_RUN);
        assert_eq!(tools["tools"], json!(["fx_add", "fx_echo"]), "mode={mode}");
        let echo = py.next("echo result", CLIENT_RUN);
        assert_eq!(
            echo["result"]["content"][0]["text"], "hi",
            "mode={mode}: {echo}"
        );
        assert_ne!(echo["result"]["isError"], true);
        let add = py.next("add result", CLIENT_RUN);
        assert_eq!(
            add["result"]["structuredContent"],
            json!({"sum": 5}),
            "mode={mode}: {add}"
        );
        assert!(
            py.wait(CLIENT_RUN).success(),
            "mode={mode}: {}",
            py.stderr_text()
        );
    }
}

#[test]
fn python_sdk_sees_the_upstreams_progress_in_both_eras() {
    let (rt, token, _) = runtime_with("fx", "tool_with_progress,echo");
    for mode in ["legacy", "auto"] {
        let mut py = PyClient::spawn(
            &rt,
            &token,
            &["progress", rt.frontend_url(), mode, "fx_tool_with_progress"],
        );
        py.next("connected", CLIENT_RUN);
        let called = py.next("the call with progress", CLIENT_RUN);
        // The fixture reports 0, 50 and 100 of 100 before it answers.
        let progress: Vec<(f64, f64)> = called["progress"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|p| Some((p["progress"].as_f64()?, p["total"].as_f64()?)))
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(
            progress,
            [(0.0, 100.0), (50.0, 100.0), (100.0, 100.0)],
            "mode={mode}: {called}"
        );
        assert_eq!(
            called["progress"][1]["message"], "Completed step 50 of 100",
            "mode={mode}: {called}"
        );
        assert_ne!(called["result"]["isError"], true, "mode={mode}: {called}");
        assert!(
            py.wait(CLIENT_RUN).success(),
            "mode={mode}: {}",
            py.stderr_text()
        );
    }
}

#[test]
fn python_sdk_listen_sees_an_install_at_once_and_ends_on_revoke() {
    let (mut rt, token, _) = runtime_with("fx", "echo");
    let mut py = PyClient::spawn(&rt, &token, &["listen", rt.frontend_url(), "auto"]);
    let connected = py.next("connected", CLIENT_RUN);
    assert_eq!(connected["protocolVersion"], MODERN_VERSION);
    let acked = py.next("the acknowledgement", CLIENT_RUN);
    assert_eq!(acked["event"], "acked", "{acked}");
    assert_eq!(acked["honored"], json!({"toolsListChanged": true}));
    assert!(
        py.lines.try_recv().is_err(),
        "no change may be announced before one happens"
    );

    let started = Instant::now();
    rt.install_ok(&fixture_connector("late", &["--tools", "echo"]), &[]);
    let change = py.next(
        "tools/list_changed",
        AT_ONCE.saturating_sub(started.elapsed()),
    );
    assert_eq!(change["event"], "change", "{change}");
    assert_eq!(change["kind"], "ToolsListChanged");
    let after = started.elapsed();
    assert!(
        after <= AT_ONCE,
        "list_changed came {after:?} after the install started"
    );

    rt.tutti_ok(&["session", "revoke", "--workspace", "w", "--session", "s"]);
    let revoked = Instant::now();
    let end = py.next("the end of the stream", Duration::from_secs(5));
    assert_eq!(
        end["event"], "ended",
        "the stream must end with its final result: {end}"
    );
    assert!(
        revoked.elapsed() <= AT_ONCE,
        "ended {:?} after revoke",
        revoked.elapsed()
    );
    assert!(
        py.wait(Duration::from_secs(10)).success(),
        "{}",
        py.stderr_text()
    );
    // The revoked token is refused from now on.
    let url = rt.frontend_url().to_owned();
    let status = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"))
        .block_on(async move {
            Mcp::legacy(&url, &token)
                .post_raw(PING.to_vec(), &[])
                .await
                .0
        });
    assert_eq!(status, 401, "a revoked token must be refused");
}

#[tokio::test(flavor = "multi_thread")]
async fn listen_stream_on_the_wire_ends_with_a_final_result_at_shutdown() {
    let (mut rt, token, _) = runtime_with("fx", "echo");
    let modern = Mcp::modern(rt.frontend_url(), &token);
    let mut stream = modern
        .listen(json!({"toolsListChanged": true, "promptsListChanged": true}))
        .await;
    assert_eq!(stream.status, 200);
    assert!(
        header(&stream.headers, "content-type").is_some_and(|c| c.starts_with("text/event-stream")),
        "{:?}",
        stream.headers
    );
    let id = stream.id.clone();
    let meta = json!({"io.modelcontextprotocol/subscriptionId": id});
    let ack = stream.next_event(CLIENT_RUN).await.unwrap_or(Value::Null);
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    // What the runtime honours is acknowledged: prompt list changes too (SPEC §11);
    // a connector without prompts (below) changes only the tool list.
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true, "promptsListChanged": true}),
        "{ack}"
    );
    assert_eq!(ack["params"]["_meta"], meta, "{ack}");

    let started = Instant::now();
    tokio::task::block_in_place(|| {
        rt.install_ok(&fixture_connector("late", &["--tools", "echo"]), &[]);
    });
    let change = stream.next_event(AT_ONCE).await.unwrap_or(Value::Null);
    assert_eq!(
        change["method"], "notifications/tools/list_changed",
        "{change}"
    );
    assert_eq!(change["params"]["_meta"], meta, "{change}");
    assert!(started.elapsed() <= AT_ONCE, "{:?}", started.elapsed());

    tokio::task::block_in_place(|| rt.stop());
    let done = stream
        .next_event(Duration::from_secs(5))
        .await
        .unwrap_or(Value::Null);
    assert_eq!(done["id"], id, "{done}");
    // A modern result names the runtime (serverInfo is always the runtime's).
    let mut final_meta = meta.clone();
    final_meta["io.modelcontextprotocol/serverInfo"] =
        json!({"name": "connector", "version": env!("CARGO_PKG_VERSION")});
    assert_eq!(
        done["result"],
        json!({"resultType": "complete", "_meta": final_meta}),
        "the stream must end with its final result: {done}"
    );
    assert_eq!(
        stream.next_event(Duration::from_secs(5)).await,
        None,
        "then it closes"
    );
}

async fn inspector(rt: &Runtime, token: &str, era: &str, args: &[&str]) -> Value {
    let node = require_node22();
    let package = npm_package("@modelcontextprotocol/inspector").unwrap_or_else(|| {
        panic!("this test needs @modelcontextprotocol/inspector: run scripts/install-test-tools")
    });
    let launcher = package
        .join("clients")
        .join("launcher")
        .join("build")
        .join("index.js");
    let home = rt.root().join("inspector-home");
    std::fs::create_dir_all(&home).unwrap_or_else(|e| panic!("{e}"));
    let node_dir = node.parent().map(Path::to_path_buf).unwrap_or_default();
    let path = format!(
        "{}:{}",
        node_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let auth = format!("Authorization: Bearer {token}");
    let run = tokio::process::Command::new(&node)
        .arg(&launcher)
        .args([
            "--cli",
            rt.frontend_url(),
            "--transport",
            "http",
            "--protocol-era",
            era,
        ])
        .args(["--header", &auth])
        .args(args)
        .args(["--format", "json", "-q"])
        .env("HOME", &home)
        .env("PATH", path)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(CLIENT_RUN, run)
        .await
        .unwrap_or_else(|_| panic!("the Inspector CLI ({era} {args:?}) did not finish"))
        .unwrap_or_else(|e| panic!("cannot run the Inspector CLI: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "Inspector CLI {era} {args:?} failed with {}\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("Inspector CLI printed no JSON ({e}): {stdout}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn inspector_cli_lists_and_calls_in_both_eras() {
    let (rt, token, _) = runtime_with("fx", "echo,add");
    for era in ["legacy", "modern"] {
        let listed = inspector(&rt, &token, era, &["--method", "tools/list"]).await;
        let names: Vec<&str> = listed["result"]["tools"]
            .as_array()
            .map(|t| t.iter().filter_map(|t| t["name"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(names, ["fx_add", "fx_echo"], "{era}: {listed}");
        let called = inspector(
            &rt,
            &token,
            era,
            &[
                "--method",
                "tools/call",
                "--tool-name",
                "fx_echo",
                "--tool-arg",
                "message=hi",
            ],
        )
        .await;
        assert_eq!(
            called["result"]["content"][0]["text"], "hi",
            "{era}: {called}"
        );
        assert_ne!(called["result"]["isError"], true, "{era}: {called}");
    }
}

// ---------------------------------------------------------------------------------------
// validation and cancellation

#[tokio::test(flavor = "multi_thread")]
async fn invalid_arguments_are_reported_without_the_value() {
    let (rt, token, record) = runtime_with("fx", "echo,add");
    let distinctive = "tutti-DISTINCTIVE-7f3a9c-do-not-echo";
    for mcp in [
        Mcp::legacy(rt.frontend_url(), &token),
        Mcp::modern(rt.frontend_url(), &token),
    ] {
        let era = mcp.era();
        let (status, headers, body) = mcp
            .call_tool("fx_add", json!({"a": distinctive, "b": 2}))
            .await;
        assert_eq!(status, 200, "{era:?}: {body}");
        let result = &body["result"];
        assert_eq!(result["isError"], true, "{era:?}: {body}");
        let text = result["content"][0]["text"].as_str().unwrap_or_default();
        assert_eq!(
            text, "invalid_arguments: /a: must be integer, got string (schema /properties/a/type)",
            "{era:?}"
        );
        assert!(
            !body.to_string().contains(distinctive),
            "{era:?} echoed the value: {body}"
        );
        for (name, value) in &headers {
            assert!(
                !value
                    .as_bytes()
                    .windows(distinctive.len())
                    .any(|w| w == distinctive.as_bytes()),
                "{era:?}: header {name} echoes the value"
            );
        }
        // A missing property: the instance path is the root.
        let (_, _, body) = mcp.call_tool("fx_add", json!({"a": 1})).await;
        assert_eq!(
            body["result"]["content"][0]["text"],
            "invalid_arguments: /: missing required property \"b\" (schema /required)",
            "{era:?}: {body}"
        );
    }
    // Nothing was sent upstream, and the value reached no log.
    assert!(tool_calls(&record).is_empty(), "{:?}", recorded(&record));
    for log in ["frontend.log", "kernel.log", "connector-fx.log"] {
        assert!(
            !rt.log(log).contains(distinctive),
            "{log} contains the value"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn cancellation_reaches_the_upstream_in_both_eras() {
    let (rt, token, record) = runtime_with("cx", "sleep,echo");
    let url = rt.frontend_url().to_owned();

    // Legacy: notifications/cancelled for the in-flight request id.
    let legacy = Mcp::legacy(&url, &token);
    legacy.initialize().await;
    let caller = Mcp::legacy(&url, &token);
    let in_flight = tokio::spawn(async move {
        let body = json!({"jsonrpc": "2.0", "id": "cancel-me", "method": "tools/call",
                          "params": {"name": "cx_sleep", "arguments": {"ms": 60_000}}});
        caller
            .post_raw(
                body.to_string().into_bytes(),
                &[("MCP-Protocol-Version".to_owned(), LEGACY_VERSION.to_owned())],
            )
            .await
    });
    let first = tokio::task::block_in_place(|| {
        wait_recorded(&record, "the legacy tools/call", |m| {
            m["method"] == "tools/call"
        })
    });
    let cancelled_at = Instant::now();
    let (status, _, body) = legacy
        .notify(
            "notifications/cancelled",
            json!({"requestId": "cancel-me", "reason": "test"}),
        )
        .await;
    assert_eq!((status, body), (202, Value::Null));
    let (status, _, body) = tokio::time::timeout(AT_ONCE, in_flight)
        .await
        .unwrap_or_else(|_| panic!("the cancelled call was not answered at once"))
        .unwrap_or_else(|e| panic!("task: {e}"));
    assert!(cancelled_at.elapsed() <= AT_ONCE);
    assert_eq!(status, 200);
    assert_eq!(body["id"], "cancel-me", "{body}");
    assert_eq!(error_of(&body)["code"], -32800, "{body}");
    assert_tutti(&body, "cancelled", "cx");
    tokio::task::block_in_place(|| {
        wait_recorded(&record, "notifications/cancelled of the legacy call", |m| {
            m["method"] == "notifications/cancelled" && m["params"]["requestId"] == first["id"]
        })
    });

    // Modern: closing the response stream is the cancellation.
    let caller = Mcp::modern(&url, &token);
    let in_flight =
        tokio::spawn(async move { caller.call_tool("cx_sleep", json!({"ms": 60_000})).await });
    let second = tokio::task::block_in_place(|| {
        wait_recorded(&record, "the modern tools/call", |m| {
            m["method"] == "tools/call" && m["id"] != first["id"]
        })
    });
    in_flight.abort();
    tokio::task::block_in_place(|| {
        wait_recorded(&record, "notifications/cancelled of the modern call", |m| {
            m["method"] == "notifications/cancelled" && m["params"]["requestId"] == second["id"]
        })
    });

    // Neither sleep ran to its end, and the frontend serves the next call at once.
    let modern = Mcp::modern(&url, &token);
    let started = Instant::now();
    let echo = modern
        .call_tool_ok("cx_echo", json!({"message": "after"}))
        .await;
    assert_eq!(echo["content"][0]["text"], "after");
    assert!(started.elapsed() <= AT_ONCE);
    let log = rt.log("connector-cx.log");
    assert_eq!(
        log.matches("cancelled; no response sent").count(),
        2,
        "{log}"
    );
}

// ---------------------------------------------------------------------------------------
// the wire: SPEC §5 status codes and error rows

fn h(name: &str, value: &str) -> (String, String) {
    (name.to_owned(), value.to_owned())
}

fn header<'a>(headers: &'a reqwest::header::HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

const PING: &[u8] = br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;

/// An answer without a session id and without CORS headers.
fn assert_no_session_no_cors(headers: &reqwest::header::HeaderMap, what: &str) {
    assert!(
        header(headers, "mcp-session-id").is_none(),
        "{what}: Mcp-Session-Id"
    );
    assert_no_cors(headers, what);
}

fn assert_no_cors(headers: &reqwest::header::HeaderMap, what: &str) {
    for (name, _) in headers {
        assert!(
            !name.as_str().starts_with("access-control-"),
            "{what}: CORS header {name}"
        );
    }
}

/// The HTTP rows: 401 without a valid token, 403 for a foreign Host or Origin, 405 for other
/// methods, 404 for other paths, 415 for another content type, 413 over 4 MiB.
async fn http_status_rows(url: &str, token: &str, mcp: &Mcp) {
    // 401 without a token or with an unknown one, with WWW-Authenticate: Bearer.
    for bad in ["", "tts_not-a-live-token"] {
        let (status, headers, _) = Mcp::legacy(url, bad).post_raw(PING.to_vec(), &[]).await;
        assert_eq!(status, 401, "token {bad:?}");
        assert_eq!(header(&headers, "www-authenticate"), Some("Bearer"));
    }
    // 403 for a foreign Host or Origin (checked before the token).
    let (status, _, _) = Mcp::legacy(url, "")
        .post_raw(PING.to_vec(), &[h("Host", "evil.example.com")])
        .await;
    assert_eq!(status, 403, "foreign Host");
    for origin in ["http://evil.example.com", "https://localhost"] {
        let (status, _, _) = mcp.post_raw(PING.to_vec(), &[h("Origin", origin)]).await;
        assert_eq!(status, 403, "Origin {origin}");
    }
    let (status, _, body) = mcp
        .post_raw(PING.to_vec(), &[h("Origin", "http://localhost:9")])
        .await;
    assert_eq!(
        (status, &body["result"]),
        (200, &json!({})),
        "loopback Origin"
    );
    // 405 for other methods, with Allow: POST (GET only opens the legacy notification
    // stream when it accepts `text/event-stream`, SPEC §11: e2e/relay/mod.rs).
    for method in [
        reqwest::Method::GET,
        reqwest::Method::DELETE,
        reqwest::Method::PUT,
    ] {
        let json_only = [h("Accept", "application/json")];
        let (status, headers, _) = mcp.send_method(method.clone(), &json_only).await;
        assert_eq!(status, 405, "{method}");
        assert_eq!(header(&headers, "allow"), Some("POST"), "{method}");
    }
    // 404 for other paths.
    let other = Mcp::legacy(&url.replace("/mcp/connector", "/mcp/other"), token);
    let (status, _, _) = other.post_raw(PING.to_vec(), &[]).await;
    assert_eq!(status, 404);
    // 415 for another content type.
    let (status, _, _) = mcp
        .post_raw(PING.to_vec(), &[h("Content-Type", "text/plain")])
        .await;
    assert_eq!(status, 415);
    // 413 over 4 MiB.
    let mut big = br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":""#.to_vec();
    big.extend(std::iter::repeat_n(b'x', 4 * 1024 * 1024));
    big.extend_from_slice(br#""}}"#);
    let (status, _, _) = mcp.post_raw(big, &[]).await;
    assert_eq!(status, 413);
}

#[tokio::test(flavor = "multi_thread")]
async fn status_codes_on_the_wire() {
    let (rt, token, _) = runtime_with("fx", "echo");
    let url = rt.frontend_url().to_owned();
    let mcp = Mcp::legacy(&url, &token);

    http_status_rows(&url, &token, &mcp).await;

    // 400 / -32600 for a batch, 400 / -32700 (id null) for a parse error.
    let (status, headers, body) = mcp
        .post_raw(
            format!("[{}]", String::from_utf8_lossy(PING)).into_bytes(),
            &[],
        )
        .await;
    assert_eq!(status, 400);
    assert_eq!(error_of(&body)["code"], -32600, "{body}");
    assert_no_session_no_cors(&headers, "batch");
    let (status, _, body) = mcp.post_raw(b"{\"jsonrpc\": \"2.0\", ".to_vec(), &[]).await;
    assert_eq!(status, 400);
    assert_eq!(error_of(&body)["code"], -32700, "{body}");
    assert_eq!(body["id"], Value::Null);
    assert!(
        body.get("id").is_some(),
        "\"id\": null must be present: {body}"
    );
    // 202 and no body for notifications, in both eras.
    let (status, headers, body) = mcp.notify("notifications/initialized", Value::Null).await;
    assert_eq!((status, body), (202, Value::Null));
    assert_no_session_no_cors(&headers, "notification");
    let modern = Mcp::modern(&url, &token);
    let (status, _, body) = modern
        .notify("notifications/cancelled", json!({"requestId": 99}))
        .await;
    assert_eq!((status, body), (202, Value::Null));
    // initialize names the token's session id (SPEC §11); an unsupported legacy version
    // header is 400.
    let init = mcp.initialize().await;
    assert_eq!(init["protocolVersion"], LEGACY_VERSION);
    let (status, headers, _) = mcp.request("initialize", json!({"protocolVersion": LEGACY_VERSION, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}})).await;
    assert_eq!(status, 200);
    assert!(
        header(&headers, "mcp-session-id").is_some(),
        "initialize: {headers:?}"
    );
    assert_no_cors(&headers, "initialize");
    let (status, _, _) = mcp
        .post_raw(PING.to_vec(), &[h("MCP-Protocol-Version", "1999-01-01")])
        .await;
    assert_eq!(status, 400, "unsupported MCP-Protocol-Version");
    // Modern: initialize and ping are 404 / -32601; a version mismatch 400 / -32020.
    for method in ["initialize", "ping"] {
        let (status, _, body) = modern.request(method, json!({})).await;
        assert_eq!(status, 404, "{method}");
        assert_eq!(error_of(&body)["code"], -32601, "{method}");
    }
    let (status, _, body) = modern
        .request_with_headers(
            "tools/list",
            json!({}),
            &[("MCP-Protocol-Version", "2099-01-01")],
        )
        .await;
    assert_eq!(status, 400);
    assert_eq!(error_of(&body)["code"], -32020, "{body}");
}

/// The rows of one era: an unknown tool, the upstream's JSON-RPC error, `timeouts.callMs`
/// exceeded (and the upstream call cancelled).
async fn unknown_tool_upstream_error_and_timeout_rows(mcp: &Mcp, slow_record: &Path) {
    let era = mcp.era();
    // Unknown tool: -32602 "Unknown tool: <name>".
    let (status, _, body) = mcp.call_tool("fx_nope", json!({})).await;
    assert_eq!(status, 200, "{era:?}");
    let e = error_of(&body);
    assert_eq!(
        (e["code"].clone(), e["message"].clone()),
        (json!(-32602), json!("Unknown tool: fx_nope")),
        "{era:?}"
    );
    tutti_data(&body, "unknown_tool");
    // The upstream's JSON-RPC error: same code and message, its data kept.
    let (_, _, body) = mcp.call_tool("fx_rpc_error", json!({})).await;
    let e = error_of(&body);
    assert_eq!(e["code"], -32001, "{era:?}: {body}");
    assert_eq!(e["message"], "fixture rpc error", "{era:?}: {body}");
    assert_eq!(e["data"]["detail"], "x", "{era:?}: {body}");
    assert_tutti(&body, "upstream_error", "fx");
    // timeouts.callMs exceeded: -32603 [MCP_TIMEOUT], and the upstream call is cancelled.
    let earlier: Vec<Value> = tool_calls(slow_record)
        .iter()
        .map(|c| c["id"].clone())
        .collect();
    let started = Instant::now();
    let (_, _, body) = mcp.call_tool("slow_sleep", json!({"ms": 30_000})).await;
    let took = started.elapsed();
    let e = error_of(&body);
    assert_eq!(e["code"], -32603, "{era:?}: {body}");
    assert!(
        e["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("[MCP_TIMEOUT] slow: ")),
        "{era:?}: {body}"
    );
    assert_tutti(&body, "timeout", "slow");
    assert!(
        took >= Duration::from_millis(300) && took <= Duration::from_millis(300) + AT_ONCE,
        "{era:?}: the timeout took {took:?} (callMs 300)"
    );
    let call = tokio::task::block_in_place(|| {
        wait_recorded(slow_record, "the timed-out call", |m| {
            m["method"] == "tools/call" && !earlier.contains(&m["id"])
        })
    });
    tokio::task::block_in_place(|| {
        wait_recorded(
            slow_record,
            "notifications/cancelled of the timed-out call",
            |m| m["method"] == "notifications/cancelled" && m["params"]["requestId"] == call["id"],
        )
    });
}

/// Uninstalled while a call is in flight: the call ends at once with [MCP_UNAVAILABLE]
/// (fenced), and the name then says "not available now; list tools again" (-32602).
async fn fenced_rows(rt: &mut Runtime, url: &str, token: &str) {
    let gone_record = rt.root().join("gone.jsonl");
    install_recorded(rt, "gone", "sleep", &gone_record, None);
    let caller = Mcp::modern(url, token);
    let in_flight =
        tokio::spawn(async move { caller.call_tool("gone_sleep", json!({"ms": 60_000})).await });
    tokio::task::block_in_place(|| {
        wait_recorded(&gone_record, "the call to be fenced", |m| {
            m["method"] == "tools/call"
        })
    });
    let uninstalled = Instant::now();
    tokio::task::block_in_place(|| rt.tutti_ok(&["connector", "uninstall", "gone"]));
    let (status, _, body) = tokio::time::timeout(Duration::from_secs(5), in_flight)
        .await
        .unwrap_or_else(|_| panic!("the fenced call was not answered"))
        .unwrap_or_else(|e| panic!("task: {e}"));
    assert!(
        uninstalled.elapsed() <= Duration::from_secs(2),
        "{:?}",
        uninstalled.elapsed()
    );
    assert_eq!(status, 200);
    let e = error_of(&body);
    assert_eq!(e["code"], -32603, "{body}");
    assert!(
        e["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("[MCP_UNAVAILABLE] gone: ")),
        "{body}"
    );
    assert_tutti(&body, "fenced", "gone");
    let legacy = Mcp::legacy(url, token);
    let (_, _, body) = legacy.call_tool("gone_sleep", json!({"ms": 1})).await;
    let e = error_of(&body);
    assert_eq!(e["code"], -32602, "{body}");
    let message = e["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("not available now") && message.contains("list tools again"),
        "{body}"
    );
    assert_tutti(&body, "fenced", "gone");
}

/// The worker process dies mid-call (SIGKILL): -32603 [MCP_UNAVAILABLE] at once.
async fn worker_death_row(rt: &mut Runtime, url: &str, token: &str) {
    let sl_record = rt.root().join("sl.jsonl");
    install_recorded(rt, "sl", "sleep", &sl_record, None);
    let caller = Mcp::legacy(url, token);
    let in_flight =
        tokio::spawn(async move { caller.call_tool("sl_sleep", json!({"ms": 60_000})).await });
    tokio::task::block_in_place(|| {
        wait_recorded(&sl_record, "the call whose worker dies", |m| {
            m["method"] == "tools/call"
        })
    });
    let worker = rt
        .workers()
        .into_iter()
        .find(|w| w.key == "sl")
        .unwrap_or_else(|| panic!("no worker for sl: {:?}", rt.workers()));
    sigkill(worker.pid);
    let killed = Instant::now();
    let (status, _, body) = tokio::time::timeout(Duration::from_secs(5), in_flight)
        .await
        .unwrap_or_else(|_| panic!("the call of a dead worker was not answered"))
        .unwrap_or_else(|e| panic!("task: {e}"));
    assert!(killed.elapsed() <= AT_ONCE, "{:?}", killed.elapsed());
    assert_eq!(status, 200);
    let e = error_of(&body);
    assert_eq!(e["code"], -32603, "{body}");
    assert!(
        e["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("[MCP_UNAVAILABLE] sl: ")),
        "{body}"
    );
    // Two events race here and both are this row (SPEC §5 "worker died mid-call"): the broken
    // gRPC connection ("unavailable") and the kernel fencing the dead worker's generation,
    // which ends every call still waiting on it ("fenced"). Either way: at once, -32603.
    let reason = error_of(&body)["data"]["tutti"]["reason"].clone();
    assert!(
        reason == "unavailable" || reason == "fenced",
        "error.data.tutti.reason of {body}"
    );
    assert_tutti(&body, reason.as_str().unwrap_or_default(), "sl");
}

#[tokio::test(flavor = "multi_thread")]
async fn error_rows_on_the_wire() {
    let (mut rt, token, _) = runtime_with("fx", "echo,rpc_error");
    let slow_record = rt.root().join("slow.jsonl");
    install_recorded(
        &mut rt,
        "slow",
        "sleep",
        &slow_record,
        Some(("timeouts", json!({"callMs": 300}))),
    );
    rt.install_ok(
        &fixture_connector("dies", &["--tools", "echo", "--exit-after-calls", "0"]),
        &[],
    );
    rt.wait_status("dies", "ready", READY);
    let url = rt.frontend_url().to_owned();

    for mcp in [Mcp::legacy(&url, &token), Mcp::modern(&url, &token)] {
        unknown_tool_upstream_error_and_timeout_rows(&mcp, &slow_record).await;
    }

    fenced_rows(&mut rt, &url, &token).await;

    worker_death_row(&mut rt, &url, &token).await;
    let legacy = Mcp::legacy(&url, &token);

    // The worker's upstream dies mid-call: -32603 [MCP_UNAVAILABLE] at once.
    let started = Instant::now();
    let (status, _, body) = legacy.call_tool("dies_echo", json!({"message": "x"})).await;
    let took = started.elapsed();
    assert_eq!(status, 200);
    let e = error_of(&body);
    assert_eq!(e["code"], -32603, "{body}");
    assert!(
        e["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("[MCP_UNAVAILABLE] dies: ")),
        "{body}"
    );
    assert_tutti(&body, "unavailable", "dies");
    assert!(
        took < Duration::from_secs(5),
        "MCP_UNAVAILABLE took {took:?}"
    );
}

/// The tool names on one `tools/list` page.
fn page_tool_names(page: &Value) -> Vec<String> {
    page["result"]["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|t| t["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn pagination_is_stable_and_a_stale_cursor_is_refused() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let args = ["--tools", "trigger_tool_change,echo", "--many", "1200"];
    // The upstream adds a tool below: trusted, so it commits without review (SPEC §12).
    rt.install_trusted(&fixture_connector("pg", &args), &[]);
    rt.wait_status("pg", "ready", READY);
    let token = rt.issue_token("w", "s");
    for mcp in [
        Mcp::legacy(rt.frontend_url(), &token),
        Mcp::modern(rt.frontend_url(), &token),
    ] {
        let era = mcp.era();
        let (_, _, first) = mcp.request("tools/list", json!({})).await;
        let cursor = first["result"]["nextCursor"].clone();
        assert!(
            cursor.is_string(),
            "{era:?}: 1202 tools need more than one page"
        );
        let names = page_tool_names;
        // Every tool exactly once, sorted by name, across the pages.
        let all: Vec<String> = mcp
            .list_tools()
            .await
            .iter()
            .filter_map(|t| t["name"].as_str().map(str::to_owned))
            .collect();
        let mut sorted = all.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(all, sorted, "{era:?}");
        assert!(all.len() >= 1202, "{era:?}: {}", all.len());
        assert_eq!(names(&first), all[..names(&first).len()], "{era:?}");
        // The tool set changes (the upstream adds a tool): the old cursor is stale.
        let before = all.len();
        mcp.call_tool_ok("pg_trigger_tool_change", json!({})).await;
        let deadline = Instant::now() + RECORDED;
        loop {
            // Page through; a stale cursor mid-way (the change landing) restarts the walk.
            let mut count = 0;
            let mut cursor: Option<Value> = None;
            let complete = loop {
                let params = cursor.as_ref().map_or(json!({}), |c| json!({"cursor": c}));
                let (_, _, page) = mcp.request("tools/list", params).await;
                if page.get("error").is_some() {
                    break false;
                }
                count += names(&page).len();
                match page["result"].get("nextCursor") {
                    Some(c) if c.is_string() => cursor = Some(c.clone()),
                    _ => break true,
                }
            };
            if complete && count > before {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{era:?}: the new tool never appeared"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (status, _, body) = mcp.request("tools/list", json!({"cursor": cursor})).await;
        assert_eq!(status, 200, "{era:?}");
        let e = error_of(&body);
        assert_eq!(e["code"], -32602, "{era:?}: {body}");
        assert!(
            e["message"]
                .as_str()
                .is_some_and(|m| m.contains("list tools again")),
            "{era:?}: {body}"
        );
    }
}

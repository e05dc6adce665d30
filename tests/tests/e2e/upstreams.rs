//! Upstreams, end to end over the real binaries (SPEC §3, §4, §9): remote Streamable
//! HTTP upstreams (server-everything, the Python `mcp` SDK's `MCPServer`, the fixture with a
//! bearer token), credentials and `auth_*` states, secret hygiene across every output of the
//! runtime, the exact environment and cwd of a stdio upstream, stdout banners, a hanging
//! handshake, `tutti connector probe`, and the install trust step.
#![cfg(unix)]

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{BuildHasher, Hasher};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};
use tutti_tests::{
    Mcp, Runtime, RuntimeOptions, Server, fixture_bin, free_port, proc_tree, require_python_venv,
    result_texts, secret_scan,
};

/// Starting workers and upstreams on a loaded 2-core machine.
const READY: Duration = Duration::from_secs(30);
/// How long an external server (Node, Python) may take to listen.
const LISTEN: Duration = Duration::from_secs(30);

// === helpers ===

fn tool_names(tools: &[Value]) -> BTreeSet<String> {
    tools
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

/// A legacy and a modern client of the runtime's frontend, both initialized.
async fn clients(rt: &Runtime, token: &str) -> [Mcp; 2] {
    let legacy = Mcp::legacy(rt.frontend_url(), token);
    legacy.initialize().await;
    let modern = Mcp::modern(rt.frontend_url(), token);
    modern.initialize().await;
    [legacy, modern]
}

/// A random hex string (no external crate: the std hasher is seeded from the OS).
fn random_hex() -> String {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

/// An `http` connector manifest.
fn http_connector(key: &str, url: &str, auth: Option<Value>) -> Value {
    let mut mcp = json!({"transport": "http", "url": url});
    if let Some(auth) = auth {
        mcp["auth"] = auth;
    }
    json!({
        "key": key,
        "name": format!("Remote {key}"),
        "description": format!("Remote MCP server {key}"),
        "version": "1.0.0",
        "mcp": mcp,
    })
}

fn bearer(secret: &str) -> Value {
    json!({"kind": "bearer", "secret": secret})
}

/// `@modelcontextprotocol/server-everything` in `streamableHttp` mode (stateful, legacy).
fn start_everything(rt: &Runtime) -> (Server, String) {
    Server::everything_http(rt.root(), "everything.stderr", LISTEN)
}

/// A Python `mcp` 2.3.0 `MCPServer` over streamable-http (dual era).
const PY_SERVER: &str = r#"
import sys
from mcp.server import MCPServer

mcp = MCPServer("tutti-py")

@mcp.tool()
def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b

@mcp.tool()
def greet(name: str) -> str:
    """Greets someone by name."""
    return "hello " + name

mcp.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
"#;

fn start_python_server(rt: &Runtime) -> (Server, String) {
    let venv = require_python_venv();
    let script = rt.root().join("py_server.py");
    std::fs::write(&script, PY_SERVER).unwrap_or_else(|e| panic!("cannot write py_server.py: {e}"));
    let port = free_port();
    let mut cmd = Command::new(venv.join("bin").join("python"));
    cmd.arg(&script)
        .arg(port.to_string())
        .current_dir(rt.root());
    let server = Server::spawn(
        "the Python MCPServer",
        cmd,
        port,
        rt.root().join("py_server.stderr"),
        LISTEN,
    );
    (server, format!("http://127.0.0.1:{port}/mcp"))
}

/// The fixture in `--http` mode on a given port (so a test can restart it in place).
struct FixtureAt {
    child: Child,
    port: u16,
}

impl FixtureAt {
    fn start(port: u16, args: &[&str]) -> FixtureAt {
        let mut child = Command::new(fixture_bin())
            .args(["--http", &port.to_string()])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn the fixture server: {e}"));
        let stdout = child
            .stdout
            .take()
            .unwrap_or_else(|| panic!("no stdout pipe for the fixture"));
        let mut lines = BufReader::new(stdout).lines();
        match lines.next() {
            Some(Ok(line)) if line.starts_with("listening ") => {}
            other => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the fixture did not listen on {port}: {other:?}");
            }
        }
        std::thread::spawn(move || for _ in lines {});
        FixtureAt { child, port }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for FixtureAt {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `tutti connector probe TARGET --json`, parsed (whatever the exit status).
fn probe_json(rt: &Runtime, target: &str) -> (Output, Value) {
    let out = rt.tutti(&["connector", "probe", target, "--json", "--yes"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "`tutti connector probe {target} --json` printed no JSON ({e}); status {}\nstdout: {stdout}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out, v)
}

fn probe_tool_names(probe: &Value, field: &str) -> BTreeSet<String> {
    probe["tools"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|t| t[field].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn worker_of(rt: &Runtime, key: &str) -> tutti_tests::WorkerProc {
    let workers: Vec<_> = rt.workers().into_iter().filter(|w| w.key == key).collect();
    assert_eq!(
        workers.len(),
        1,
        "expected one worker of {key}, found {workers:?}"
    );
    workers[0].clone()
}

fn lines_of(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

// === remote HTTP upstreams ===

#[tokio::test(flavor = "multi_thread")]
async fn server_everything_over_streamable_http_works_in_both_eras() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let (_everything, url) = start_everything(&rt);
    rt.install_ok(&http_connector("everything", &url, None), &[]);
    let status = rt.wait_status("everything", "ready", READY);
    assert!(
        status["toolCount"].as_u64().unwrap_or(0) >= 10,
        "server-everything has 13 tools: {status}"
    );

    // A stateful legacy server: the worker talks 2025-06-18 with it.
    let (_, probe) = probe_json(&rt, "everything");
    assert_eq!(probe["protocolVersion"], "2025-06-18", "{probe}");
    assert!(
        probe["serverName"]
            .as_str()
            .is_some_and(|n| n.contains("everything")),
        "{probe}"
    );
    assert!(
        probe_tool_names(&probe, "upstreamName").contains("get-sum"),
        "{probe}"
    );

    let token = rt.issue_token("ws", "everything");
    for mcp in clients(&rt, &token).await {
        let era = mcp.era();
        let tools = mcp.list_tools().await;
        let names = tool_names(&tools);
        for want in ["everything_echo", "everything_get-sum"] {
            assert!(names.contains(want), "{era:?}: {want} not in {names:?}");
        }
        let echo = tools
            .iter()
            .find(|t| t["name"] == "everything_echo")
            .cloned()
            .unwrap_or_default();
        assert_eq!(echo["_meta"]["tutti/upstreamName"], "echo", "{echo}");
        assert_eq!(echo["_meta"]["tutti/connector"], "everything", "{echo}");

        let message = format!("hello from {era:?}");
        let result = mcp
            .call_tool_ok("everything_echo", json!({"message": message}))
            .await;
        assert_eq!(
            result_texts(&result),
            format!("Echo: {message}"),
            "{result}"
        );
        let result = mcp
            .call_tool_ok("everything_get-sum", json!({"a": 20, "b": 22}))
            .await;
        assert!(result_texts(&result).contains("42"), "{era:?}: {result}");
    }
    assert_eq!(
        rt.connector_status("everything")
            .map(|c| c["restarts"].clone()),
        Some(json!(0))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn python_mcp_server_over_streamable_http_works_in_both_eras() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let (_py, url) = start_python_server(&rt);
    rt.install_ok(
        &http_connector("py", &url, Some(json!({"kind": "none"}))),
        &[],
    );
    let status = rt.wait_status("py", "ready", READY);
    assert_eq!(status["toolCount"], 2, "{status}");

    // A dual-era server: the worker prefers the modern era.
    let (_, probe) = probe_json(&rt, "py");
    assert_eq!(probe["protocolVersion"], "2026-07-28", "{probe}");
    assert_eq!(probe["serverName"], "tutti-py", "{probe}");
    assert_eq!(
        probe_tool_names(&probe, "localName"),
        BTreeSet::from(["py_add".to_owned(), "py_greet".to_owned()]),
        "{probe}"
    );

    let token = rt.issue_token("ws", "py");
    for mcp in clients(&rt, &token).await {
        let era = mcp.era();
        let tools = mcp.list_tools().await;
        let names = tool_names(&tools);
        assert!(
            names.contains("py_add") && names.contains("py_greet"),
            "{era:?}: {names:?}"
        );
        let add = tools
            .iter()
            .find(|t| t["name"] == "py_add")
            .cloned()
            .unwrap_or_default();
        assert_eq!(add["description"], "Adds two integers.", "{add}");
        assert_eq!(add["inputSchema"]["type"], "object", "{add}");

        let result = mcp.call_tool_ok("py_add", json!({"a": 40, "b": 2})).await;
        assert_eq!(result_texts(&result), "42", "{era:?}: {result}");
        assert_eq!(
            result["structuredContent"],
            json!({"result": 42}),
            "{result}"
        );
        assert_ne!(result["isError"], json!(true), "{result}");
        let result = mcp
            .call_tool_ok("py_greet", json!({"name": format!("{era:?}")}))
            .await;
        assert_eq!(result_texts(&result), format!("hello {era:?}"), "{result}");

        // Arguments are validated against the upstream's schema before anything is sent.
        let result = mcp
            .call_tool_ok("py_add", json!({"a": "not a number", "b": 2}))
            .await;
        assert_eq!(result["isError"], json!(true), "{era:?}: {result}");
        assert!(
            result_texts(&result).starts_with("invalid_arguments: "),
            "{result}"
        );
    }
}

// === credentials ===

/// No secret yet: auth_required, and nothing of it is routable.
fn install_without_its_secret_is_auth_required(rt: &mut Runtime, url: &str) {
    // No secret yet: auth_required, and nothing of it is routable.
    let out = rt.install_dir(
        &http_connector("remote", url, Some(bearer("API_TOKEN"))),
        &[],
    );
    let (stdout, stderr) = lines_of(&out);
    assert!(out.status.success(), "install failed: {stdout}{stderr}");
    assert!(stdout.contains("auth_required"), "install says: {stdout}");
    rt.wait_status("remote", "auth_required", READY);
    assert!(
        rt.workers().iter().all(|w| w.key != "remote"),
        "a worker runs for remote before connect"
    );
    let available = rt.tutti_ok(&["connector", "available", "--json"]);
    let available: Value = serde_json::from_str(available.trim()).unwrap_or_default();
    let remote = available["connectors"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["key"] == "remote"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        remote["interfaces"][0]["status"], "auth_required",
        "{available}"
    );
}

/// A wrong secret: the upstream answers 401 → auth_failed, with the way out in the status.
async fn a_wrong_secret_is_auth_failed_without_a_restart_loop(
    rt: &Runtime,
    modern: &Mcp,
    wrong: &str,
) {
    rt.connect_from_env("remote", "API_TOKEN", wrong);
    let failed = rt.wait_status("remote", "auth_failed", READY);
    let last_error = failed["lastError"].as_str().unwrap_or("");
    assert!(
        last_error.contains("tutti connector connect remote"),
        "lastError does not say to connect again: {failed}"
    );
    assert!(!last_error.contains(wrong), "{failed}");
    let text = rt.tutti_ok(&["status"]);
    assert!(
        text.contains("auth_failed") && text.contains("tutti connector connect remote"),
        "{text}"
    );
    let names = tool_names(&modern.list_tools().await);
    assert!(!names.iter().any(|n| n.starts_with("remote_")), "{names:?}");
    // It stays auth_failed: no restart loop against a server that refuses the credentials.
    std::thread::sleep(Duration::from_millis(1500));
    let still = rt.connector_status("remote").unwrap_or_default();
    assert_eq!(still["status"], "auth_failed", "{still}");
    assert!(
        rt.workers().iter().all(|w| w.key != "remote"),
        "a worker of remote still runs after auth_failed"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bearer_upstream_goes_from_auth_required_to_auth_failed_to_ready() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let right = format!("right-{}", random_hex());
    let wrong = format!("wrong-{}", random_hex());
    let fixture = FixtureAt::start(
        free_port(),
        &["--tools", "echo", "--require-bearer", &right],
    );
    let url = format!("http://127.0.0.1:{}/mcp", fixture.port);

    // Another connector that must not be disturbed by anything below.
    let other = rt.private_fixture_connector("other", &["--tools", "echo"]);
    rt.install_ok(&other, &[]);
    rt.wait_status("other", "ready", READY);
    let other_before = worker_of(&rt, "other");

    install_without_its_secret_is_auth_required(&mut rt, &url);

    let token = rt.issue_token("ws", "auth");
    let [legacy, modern] = clients(&rt, &token).await;
    let names = tool_names(&legacy.list_tools().await);
    assert!(names.contains("other_echo"), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("remote_")), "{names:?}");

    a_wrong_secret_is_auth_failed_without_a_restart_loop(&rt, &modern, &wrong).await;

    // The right secret: ready, routable in both eras.
    rt.connect_from_env("remote", "API_TOKEN", &right);
    let ready = rt.wait_status("remote", "ready", READY);
    assert_eq!(ready["lastError"], Value::Null, "{ready}");
    for mcp in [&legacy, &modern] {
        let names = tool_names(&mcp.list_tools().await);
        assert!(
            names.contains("remote_echo") && names.contains("other_echo"),
            "{names:?}"
        );
        let result = mcp
            .call_tool_ok("remote_echo", json!({"message": "through the bearer"}))
            .await;
        assert_eq!(result_texts(&result), "through the bearer", "{result}");
        let result = mcp
            .call_tool_ok("other_echo", json!({"message": "still here"}))
            .await;
        assert_eq!(result_texts(&result), "still here", "{result}");
    }

    // `auth.kind` header: the secret is the whole value of the named header.
    let header_auth = json!({"kind": "header", "header": "Authorization", "secret": "AUTH_HEADER"});
    rt.install_ok(&http_connector("hdr", &url, Some(header_auth)), &[]);
    rt.wait_status("hdr", "auth_required", READY);
    rt.connect_from_env("hdr", "AUTH_HEADER", &format!("Bearer {right}"));
    rt.wait_status("hdr", "ready", READY);
    let result = modern
        .call_tool_ok("hdr_echo", json!({"message": "through a header"}))
        .await;
    assert_eq!(result_texts(&result), "through a header", "{result}");

    // Nothing else was restarted.
    let other_after = worker_of(&rt, "other");
    assert_eq!(
        other_after, other_before,
        "the other connector's worker changed"
    );
    let other_status = rt.connector_status("other").unwrap_or_default();
    assert_eq!(other_status["restarts"], 0, "{other_status}");
    assert_eq!(other_status["status"], "ready", "{other_status}");
    drop(fixture);
}

/// A call to a vanished upstream fails at once with [MCP_UNAVAILABLE], never hangs.
async fn assert_unavailable_at_once(legacy: &Mcp) {
    let t0 = Instant::now();
    let (status, _, body) = legacy
        .call_tool("remote_echo", json!({"message": "nobody home"}))
        .await;
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "a call to a vanished upstream took {:?}",
        t0.elapsed()
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["error"]["code"], -32603, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("[MCP_UNAVAILABLE] remote")),
        "{body}"
    );
}

/// Once the upstream is back, so is the connector: a call answers again.
async fn wait_answered_again(rt: &Runtime, modern: &Mcp) {
    let deadline = Instant::now() + READY;
    loop {
        let (_, _, body) = modern
            .call_tool("remote_echo", json!({"message": "back again"}))
            .await;
        if result_texts(&body["result"]) == "back again" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the connector did not recover after its upstream came back: {body}\n{}",
            rt.log_tail("connector-remote.log", 30)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Refused credentials (401): auth_failed, routes removed, and the status says how to get out.
async fn assert_refused_credentials_are_auth_failed(rt: &Runtime, legacy: &Mcp, modern: &Mcp) {
    let (status, _, body) = legacy
        .call_tool("remote_echo", json!({"message": "refused"}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.get("error").is_some() || body["result"]["isError"] == json!(true),
        "a call with refused credentials succeeded: {body}"
    );
    let failed = rt.wait_status("remote", "auth_failed", READY);
    assert!(
        failed["lastError"]
            .as_str()
            .unwrap_or("")
            .contains("tutti connector connect remote"),
        "{failed}"
    );
    let names = tool_names(&modern.list_tools().await);
    assert!(!names.iter().any(|n| n.starts_with("remote_")), "{names:?}");
    let (_, _, body) = modern
        .call_tool("remote_echo", json!({"message": "gone"}))
        .await;
    assert_eq!(body["error"]["code"], -32602, "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn remote_upstream_restarts_large_results_and_revoked_credentials() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let first = format!("first-{}", random_hex());
    let second = format!("second-{}", random_hex());
    let start =
        |token: &str| FixtureAt::start(port, &["--tools", "echo,big", "--require-bearer", token]);
    let mut fixture = start(&first);
    rt.install_ok(
        &http_connector("remote", &url, Some(bearer("API_TOKEN"))),
        &[],
    );
    rt.connect_from_env("remote", "API_TOKEN", &first);
    let ready = rt.wait_status("remote", "ready", READY);
    let generation = ready["generation"].clone();

    let token = rt.issue_token("ws", "remote");
    let [legacy, modern] = clients(&rt, &token).await;

    // A result of several MiB comes back whole.
    let big = 6 * 1024 * 1024;
    let result = legacy
        .call_tool_ok("remote_big", json!({"bytes": big}))
        .await;
    assert_eq!(
        result_texts(&result).len(),
        big,
        "a {big}-byte result was cut"
    );

    // The remote server restarts and forgets its sessions (404 for the old Mcp-Session-Id):
    // the worker initializes again and the call goes through, with no new generation.
    drop(fixture);
    fixture = start(&first);
    for mcp in [&modern, &legacy] {
        let (status, _, body) = mcp
            .call_tool("remote_echo", json!({"message": "after a restart"}))
            .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            result_texts(&body["result"]),
            "after a restart",
            "{:?}: the call after the upstream lost its session failed: {body}\n{}",
            mcp.era(),
            rt.log_tail("connector-remote.log", 30)
        );
    }
    let st = rt.connector_status("remote").unwrap_or_default();
    assert_eq!(st["status"], "ready", "{st}");
    assert_eq!(st["generation"], generation, "{st}");

    // The remote server goes away: a call fails at once with [MCP_UNAVAILABLE], never hangs;
    // once it is back, so is the connector.
    drop(fixture);
    assert_unavailable_at_once(&legacy).await;

    fixture = start(&first);
    wait_answered_again(&rt, &modern).await;

    rt.wait_status("remote", "ready", READY);

    // The remote server now refuses our credentials (401): auth_failed, routes removed, and
    // the status says how to get out of it.
    drop(fixture);
    fixture = start(&second);
    assert_refused_credentials_are_auth_failed(&rt, &legacy, &modern).await;

    // New credentials: ready again.
    rt.connect_from_env("remote", "API_TOKEN", &second);
    rt.wait_status("remote", "ready", READY);
    let result = modern
        .call_tool_ok("remote_echo", json!({"message": "welcome back"}))
        .await;
    assert_eq!(result_texts(&result), "welcome back", "{result}");
    drop(fixture);
}

// === secret hygiene ===

/// Every `tutti` run of a test, with its output kept for the secret scan.
struct Transcript {
    runs: Vec<(String, Vec<u8>)>,
}

impl Transcript {
    fn run(&mut self, rt: &Runtime, args: &[&str], env: &[(&str, &str)], stdin: &[u8]) -> Output {
        let mut cmd = rt.tutti_cmd(args);
        cmd.envs(env.iter().copied());
        if !stdin.is_empty() {
            cmd.stdin(Stdio::piped());
        }
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run tutti {}: {e}", args.join(" ")));
        if let Some(mut input) = child.stdin.take() {
            input
                .write_all(stdin)
                .unwrap_or_else(|e| panic!("cannot write stdin of tutti {}: {e}", args.join(" ")));
        }
        let out = child
            .wait_with_output()
            .unwrap_or_else(|e| panic!("tutti {}: {e}", args.join(" ")));
        let mut all = out.stdout.clone();
        all.extend_from_slice(&out.stderr);
        self.runs.push((format!("tutti {}", args.join(" ")), all));
        out
    }

    fn ok(&mut self, rt: &Runtime, args: &[&str], env: &[(&str, &str)], stdin: &[u8]) -> String {
        let out = self.run(rt, args, env, stdin);
        let (stdout, stderr) = lines_of(&out);
        assert!(
            out.status.success(),
            "tutti {} failed: {stdout}{stderr}",
            args.join(" ")
        );
        stdout
    }

    fn status(&mut self, rt: &Runtime, key: &str) -> Value {
        let out = self.ok(rt, &["status", "--json"], &[], b"");
        let v: Value = serde_json::from_str(out.trim()).unwrap_or_default();
        v["connectors"]
            .as_array()
            .and_then(|a| a.iter().find(|c| c["key"] == key))
            .cloned()
            .unwrap_or(Value::Null)
    }

    fn wait(
        &mut self,
        rt: &Runtime,
        key: &str,
        what: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + READY;
        loop {
            let st = self.status(rt, key);
            if pred(&st) {
                return st;
            }
            assert!(
                Instant::now() < deadline,
                "{key} did not reach {what}: {st}\n{}",
                rt.log_tail(&format!("connector-{key}.log"), 30)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// ... connect: a wrong value first (auth_failed), then the right ones, one from stdin.
fn connect_wrong_then_right(
    t: &mut Transcript,
    rt: &Runtime,
    env: &[(&str, &str)],
    wrong_secret: &str,
    stdio_secret: &str,
) {
    t.ok(
        rt,
        &["connector", "connect", "remote", "--from-env", "API_TOKEN"],
        &[("API_TOKEN", wrong_secret)],
        b"",
    );
    let failed = t.wait(rt, "remote", "auth_failed", |c| {
        c["status"] == "auth_failed"
    });
    assert!(
        failed["lastError"]
            .as_str()
            .is_some_and(|e| e.contains("tutti connector connect remote")),
        "{failed}"
    );
    t.ok(
        rt,
        &["connector", "connect", "remote", "--from-env", "API_TOKEN"],
        env,
        b"",
    );
    let stdin = format!("{stdio_secret}\n");
    t.ok(
        rt,
        &["connector", "connect", "leaky", "--stdin", "LEAKY_TOKEN"],
        env,
        stdin.as_bytes(),
    );
    t.wait(rt, "leaky", "ready", |c| c["status"] == "ready");
    t.wait(rt, "remote", "ready", |c| c["status"] == "ready");
}

/// ... calls in both eras ...
async fn calls_in_both_eras_carry_no_secret(rt: &Runtime, needles: &[&str]) {
    let token = rt.issue_token("ws", "secrets");
    for mcp in clients(rt, &token).await {
        for key in ["leaky", "remote"] {
            let result = mcp
                .call_tool_ok(&format!("{key}_echo"), json!({"message": "ping"}))
                .await;
            assert_eq!(result_texts(&result), "ping", "{result}");
        }
        // An invalid call's error text must not carry anything either.
        let (_, _, body) = mcp.call_tool("leaky_echo", json!({"message": 5})).await;
        let body = body.to_string();
        assert!(
            !needles
                .iter()
                .any(|n| secret_scan::contains(body.as_bytes(), n)),
            "{body}"
        );
    }
}

/// ... status, available, probe (key and dir) ...
fn status_available_and_probes(
    t: &mut Transcript,
    rt: &Runtime,
    env: &[(&str, &str)],
    leaky_dir: &str,
) {
    t.ok(rt, &["status"], &[], b"");
    t.ok(rt, &["status", "--json"], &[], b"");
    t.ok(rt, &["connector", "available"], &[], b"");
    t.ok(rt, &["connector", "available", "--json"], &[], b"");
    t.ok(rt, &["connector", "probe", "leaky"], env, b"");
    t.ok(rt, &["connector", "probe", "leaky", "--json"], env, b"");
    t.ok(rt, &["connector", "probe", "remote"], env, b"");
    t.ok(
        rt,
        &["connector", "probe", leaky_dir, "--json", "--yes"],
        env,
        b"",
    );
}

/// The upstream did print the value to stderr, and the log shows *** in its place.
fn assert_masked_in_the_log_and_stored(
    state: &Path,
    secrets_dir: &Path,
    [stdio_core, http_core, wrong_core]: [&str; 3],
) {
    let log =
        std::fs::read_to_string(state.join("logs").join("connector-leaky.log")).unwrap_or_default();
    assert!(
        log.lines().any(|l| l.trim_end() == "LEAKY_TOKEN=***"),
        "the env dump is not in connector-leaky.log with *** for the value:\n{log}"
    );

    // The values are where they belong.
    let mut secret_files = Vec::new();
    secret_scan::files_under(secrets_dir, &[], &mut secret_files);
    let stored: Vec<u8> = secret_files
        .iter()
        .flat_map(|f| std::fs::read(f).unwrap_or_default())
        .collect();
    assert!(
        secret_scan::contains(&stored, stdio_core) && secret_scan::contains(&stored, http_core),
        "the secrets are not stored under secrets/"
    );
    assert!(
        !secret_scan::contains(&stored, wrong_core),
        "the replaced value is still stored"
    );
}

/// install (the caller's environment holds the values already) ...
fn install_both(t: &mut Transcript, rt: &mut Runtime, url: &str, env: &[(&str, &str)]) -> String {
    let mut leaky = rt.private_fixture_connector("leaky", &["--tools", "echo", "--stderr-env"]);
    leaky["mcp"]["secrets"] = json!(["LEAKY_TOKEN"]);
    let leaky_dir = rt.write_release(&leaky, &[]);
    let leaky_dir = leaky_dir.to_string_lossy().into_owned();
    let remote_dir = rt.write_release(
        &http_connector("remote", url, Some(bearer("API_TOKEN"))),
        &[],
    );
    let remote_dir = remote_dir.to_string_lossy().into_owned();
    t.ok(rt, &["connector", "install", &leaky_dir, "--yes"], env, b"");
    t.ok(
        rt,
        &["connector", "install", &remote_dir, "--yes"],
        env,
        b"",
    );
    t.wait(rt, "leaky", "auth_required", |c| {
        c["status"] == "auth_required"
    });
    leaky_dir
}

/// Every file of the stopped state dir except secrets/, and the runtime's stdout/stderr.
fn files_to_scan(state: &Path, secrets_dir: &Path, root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    secret_scan::files_under(state, &[secrets_dir.to_path_buf()], &mut files);
    files.push(root.join("up.stdout"));
    files.push(root.join("up.stderr"));
    assert!(
        files.iter().any(|f| f.ends_with("logs/kernel.log"))
            && files
                .iter()
                .any(|f| f.ends_with("logs/connector-leaky.log"))
            && files
                .iter()
                .any(|f| f.ends_with("logs/connector-remote.log"))
            && files.iter().any(|f| f.ends_with("registry.json")),
        "the state dir lacks expected files: {files:?}"
    );
    files
}

#[tokio::test(flavor = "multi_thread")]
async fn secret_values_appear_nowhere_but_secrets() {
    // Each value has its own random core: any output holding a core holds (part of) that
    // secret, even escaped (JSON, Debug) or cut off around it. The stdio value also has
    // characters that escaping would change; a header value must be visible ASCII.
    let (stdio_core, http_core, wrong_core) = (random_hex(), random_hex(), random_hex());
    let stdio_secret = format!("S3cr3t \"q\" \\ \u{fc} {stdio_core}");
    let http_secret = format!("S3cr3t-{http_core}");
    let wrong_secret = format!("S3cr3t-{wrong_core}");
    let needles = [stdio_core.as_str(), http_core.as_str(), wrong_core.as_str()];

    let mut rt = Runtime::start(RuntimeOptions::default());
    let mut t = Transcript { runs: Vec::new() };
    // The remote server is the test's, not the runtime's: its argv holds the expected token.
    let remote_server = FixtureAt::start(
        free_port(),
        &["--tools", "echo", "--require-bearer", &http_secret],
    );
    let url = format!("http://127.0.0.1:{}/mcp", remote_server.port);

    let env = [
        ("LEAKY_TOKEN", stdio_secret.as_str()),
        ("API_TOKEN", http_secret.as_str()),
    ];
    let leaky_dir = install_both(&mut t, &mut rt, &url, &env);

    connect_wrong_then_right(&mut t, &rt, &env, &wrong_secret, &stdio_secret);

    calls_in_both_eras_carry_no_secret(&rt, &needles).await;

    status_available_and_probes(&mut t, &rt, &env, &leaky_dir);

    // ... and a crash: SIGKILL the worker; the kernel restarts it (the new upstream dumps its
    // environment again).
    let victim = worker_of(&rt, "leaky");
    kill(Pid::from_raw(victim.pid as i32), Signal::SIGKILL)
        .unwrap_or_else(|e| panic!("cannot kill worker {}: {e}", victim.pid));
    let back = t.wait(&rt, "leaky", "a restart after the crash", |c| {
        c["status"] == "ready" && c["restarts"].as_u64().unwrap_or(0) >= 1
    });
    assert_ne!(back["generation"], json!(victim.generation), "{back}");
    t.ok(&rt, &["status"], &[], b"");
    t.ok(&rt, &["status", "--json"], &[], b"");

    // /proc/*/cmdline of every process (the remote server is the test's own and excluded),
    // and the environment of every runtime process except the upstreams that declared it.
    let fixture_path = rt.private_fixture().to_string_lossy().into_owned();
    let mut leaks = secret_scan::cmdline_leaks(&needles, &[remote_server.pid()]);
    leaks.extend(secret_scan::environ_leaks(
        &needles,
        &rt.process_set(),
        // the upstream: its declared secret is in its environment by design
        |p| p.cmdline.starts_with(&fixture_path),
    ));

    // Every file of the state dir except secrets/ (stopping first flushes every log), the
    // runtime's own stdout/stderr, and every command's output.
    let root = rt.root().to_path_buf();
    let state = rt.state_dir().to_path_buf();
    let secrets_dir = state.join("secrets");
    assert!(secrets_dir.is_dir(), "no secrets/ in {}", state.display());
    rt.stop();
    let files = files_to_scan(&state, &secrets_dir, &root);

    leaks.extend(secret_scan::file_leaks(&needles, &files));
    leaks.extend(secret_scan::output_leaks(&needles, &t.runs));
    assert!(t.runs.len() >= 15, "only {} commands ran", t.runs.len());
    assert!(
        leaks.is_empty(),
        "a secret value leaked into:\n{}",
        leaks.join("\n")
    );

    assert_masked_in_the_log_and_stored(
        &state,
        &secrets_dir,
        [&stdio_core, &http_core, &wrong_core],
    );

    drop(remote_server);
}

// === launch hygiene ===

/// The upstream's environment is exactly the declared set, and it runs in `<release>/work`.
async fn assert_exact_environment_and_cwd(
    mcp: &Mcp,
    expected: &BTreeMap<String, String>,
    release: &Path,
) {
    let result = mcp.call_tool_ok("envy_env", json!({})).await;
    let report: Value = serde_json::from_str(&result_texts(&result))
        .unwrap_or_else(|e| panic!("the env tool's text is not JSON ({e}): {result}"));
    let got: BTreeMap<String, String> = report["env"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_owned()))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        &got,
        expected,
        "{:?}: the upstream's environment is not exactly the declared set",
        mcp.era()
    );
    let cwd = PathBuf::from(report["cwd"].as_str().unwrap_or(""));
    let want = release.join("work");
    assert_eq!(
        cwd.canonicalize().ok(),
        want.canonicalize().ok(),
        "the upstream runs in {} instead of {}",
        cwd.display(),
        want.display()
    );
}

/// Installs and connects `envy` from another working directory with marker variables set,
/// which the upstream must not see; returns the API key given.
fn install_and_connect_from(rt: &mut Runtime, manifest: &Value, caller_cwd: &Path) -> String {
    let dir = rt.write_release(manifest, &[("work/marker.txt", b"marker\n")]);
    let dir = dir.to_string_lossy().into_owned();
    let out = rt
        .tutti_cmd(&["connector", "install", &dir, "--yes"])
        .current_dir(caller_cwd)
        .env("TUTTI_E2E_INSTALL_MARKER", "from the install command")
        .output()
        .unwrap_or_else(|e| panic!("cannot run tutti connector install: {e}"));
    assert!(out.status.success(), "install: {:?}", lines_of(&out));
    let api_key = format!("key-{}", random_hex());
    let out = rt
        .tutti_cmd(&["connector", "connect", "envy", "--from-env", "API_KEY"])
        .current_dir(caller_cwd)
        .env("API_KEY", &api_key)
        .env("TUTTI_E2E_CONNECT_MARKER", "from the connect command")
        .output()
        .unwrap_or_else(|e| panic!("cannot run tutti connector connect: {e}"));
    assert!(out.status.success(), "connect: {:?}", lines_of(&out));
    api_key
}

#[tokio::test(flavor = "multi_thread")]
async fn stdio_upstream_gets_exactly_the_declared_environment_and_cwd() {
    let scratch = tempfile::Builder::new()
        .prefix("tutti-e2e-env-")
        .tempdir()
        .unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}"));
    let up_cwd = scratch.path().join("up-cwd");
    let caller_cwd = scratch.path().join("caller-cwd");
    let tmpdir = scratch.path().join("tmp");
    for d in [&up_cwd, &caller_cwd, &tmpdir] {
        std::fs::create_dir_all(d).unwrap_or_else(|e| panic!("mkdir {}: {e}", d.display()));
    }
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".to_owned());
    let home = scratch.path().join("home").to_string_lossy().into_owned();
    let base = [
        ("PATH", path.clone()),
        ("HOME", home.clone()),
        ("LANG", "C.UTF-8".to_owned()),
        ("TMPDIR", tmpdir.to_string_lossy().into_owned()),
    ];
    let mut env: Vec<(String, String)> = base
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect();
    env.push(("TUTTI_E2E_UP_MARKER".into(), "from tutti up".into()));
    env.push(("LC_ALL".into(), "C".into()));
    env.push(("PYTHONPATH".into(), "/nowhere".into()));
    let mut rt = Runtime::start(RuntimeOptions {
        env,
        cwd: Some(up_cwd.clone()),
        ..RuntimeOptions::default()
    });

    let mut manifest = rt.private_fixture_connector("envy", &["--tools", "env,echo"]);
    manifest["mcp"]["cwd"] = json!("${release}/work");
    manifest["mcp"]["env"] = json!({
        "DATA_DIR": "${state}/data",
        "MARKER_FILE": "${release}/work/marker.txt",
        "PLAIN": "plain value",
    });
    manifest["mcp"]["secrets"] = json!(["API_KEY"]);
    let api_key = install_and_connect_from(&mut rt, &manifest, &caller_cwd);

    rt.wait_status("envy", "ready", READY);

    let releases = rt.state_dir().join("releases").join("envy");
    let release = std::fs::read_dir(&releases)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", releases.display()))
        .flatten()
        .map(|e| e.path())
        .next()
        .unwrap_or_else(|| panic!("no release under {}", releases.display()));
    let state = rt.state_dir().to_string_lossy().into_owned();
    let release_s = release.to_string_lossy().into_owned();

    let mut expected: BTreeMap<String, String> = base
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect();
    expected.insert("DATA_DIR".into(), format!("{state}/data"));
    expected.insert("MARKER_FILE".into(), format!("{release_s}/work/marker.txt"));
    expected.insert("PLAIN".into(), "plain value".into());
    expected.insert("API_KEY".into(), api_key.clone());

    let token = rt.issue_token("ws", "env");
    for mcp in clients(&rt, &token).await {
        assert_exact_environment_and_cwd(&mcp, &expected, &release).await;
    }
    // Also true of the live process itself.
    let fixture = rt.private_fixture().to_string_lossy().into_owned();
    let upstream = proc_tree::snapshot()
        .into_iter()
        .find(|p| !p.is_zombie() && p.cmdline.starts_with(&fixture))
        .unwrap_or_else(|| panic!("no upstream process"));
    let cwd = std::fs::read_link(format!("/proc/{}/cwd", upstream.pid)).ok();
    assert_eq!(
        cwd.and_then(|c| c.canonicalize().ok()),
        release.join("work").canonicalize().ok()
    );
}

/// The banner's three lines are counted and logged; the other connector counts none.
fn assert_banner_lines_counted_and_logged(rt: &Runtime) {
    let counted = rt.wait_connector("banner", READY, "nonJsonStdoutLines >= 3", |c| {
        c["nonJsonStdoutLines"].as_u64().unwrap_or(0) >= 3
    });
    assert_eq!(counted["status"], "ready", "{counted}");
    assert_eq!(counted["restarts"], 0, "{counted}");
    let log = rt.log("connector-banner.log");
    for i in 0..3 {
        assert!(
            log.contains(&format!("fixture banner line {i}")),
            "banner line {i} is not logged:\n{log}"
        );
    }
    let steady_status = rt.connector_status("steady").unwrap_or_default();
    assert_eq!(steady_status["nonJsonStdoutLines"], 0, "{steady_status}");
}

/// A probe of it ends after startMs as well, with one line saying so.
fn assert_probe_ends_after_start_ms(rt: &Runtime) {
    let t0 = Instant::now();
    let out = rt.tutti(&["connector", "probe", "hang"]);
    let probe_took = t0.elapsed();
    let (_, stderr) = lines_of(&out);
    assert!(
        !out.status.success(),
        "the probe of a hanging upstream succeeded"
    );
    assert!(
        probe_took < Duration::from_secs(10),
        "the probe took {probe_took:?}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("1000 ms") && stderr.contains("startMs"),
        "the probe does not say why it failed: {stderr}"
    );
}

/// The handshake was given up after startMs, not before and not much later, while status and
/// the other connectors answered; the error names startMs; nothing of it is listed.
async fn assert_gave_up_after_start_ms(
    ended: (Duration, Value),
    calls: usize,
    slowest_status: Duration,
    legacy: &Mcp,
) {
    let (elapsed, entry) = ended;
    assert!(
        elapsed >= Duration::from_millis(1000),
        "failed after {elapsed:?}, before startMs: {entry}"
    );
    assert!(
        elapsed < Duration::from_secs(10),
        "took {elapsed:?} to give up on a 1000 ms startMs: {entry}"
    );
    assert!(calls >= 2, "only {calls} calls ran while the upstream hung");
    assert!(
        slowest_status < Duration::from_secs(2),
        "`tutti status` took {slowest_status:?} while an upstream hung"
    );
    let status = entry["status"].as_str().unwrap_or("");
    assert!(
        ["restarting", "crash_loop", "failed"].contains(&status),
        "unexpected status of a hanging upstream: {entry}"
    );
    let last_error = entry["lastError"].as_str().unwrap_or("");
    assert!(
        last_error.contains("1000 ms") && last_error.contains("startMs"),
        "lastError does not say the handshake exceeded startMs: {entry}"
    );
    assert!(
        !last_error.starts_with("exited"),
        "lastError blames the upstream's exit rather than the timeout: {entry}"
    );
    assert_eq!(entry["generation"], Value::Null, "{entry}");
    let names = tool_names(&legacy.list_tools().await);
    assert!(!names.iter().any(|n| n.starts_with("hang_")), "{names:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn banner_lines_are_counted_and_a_hanging_handshake_ends_after_start_ms() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let steady = rt.private_fixture_connector("steady", &["--tools", "echo"]);
    rt.install_ok(&steady, &[]);
    let banner = rt.private_fixture_connector("banner", &["--tools", "echo", "--banner", "3"]);
    rt.install_ok(&banner, &[]);
    rt.wait_status("steady", "ready", READY);
    rt.wait_status("banner", "ready", READY);

    let token = rt.issue_token("ws", "banner");
    let [legacy, modern] = clients(&rt, &token).await;
    for mcp in [&legacy, &modern] {
        let result = mcp
            .call_tool_ok("banner_echo", json!({"message": "after the banner"}))
            .await;
        assert_eq!(result_texts(&result), "after the banner", "{result}");
    }
    assert_banner_lines_counted_and_logged(&rt);

    // An upstream that never answers the handshake, with startMs = 1000.
    let mut hang = rt.private_fixture_connector("hang", &["--hang-at-start"]);
    hang["timeouts"] = json!({"startMs": 1000});
    let started = Instant::now();
    rt.install_ok(&hang, &[]);
    let mut first_upstream = None;
    let mut slowest_status = Duration::ZERO;
    let mut calls = 0;
    let fixture = rt.private_fixture().to_string_lossy().into_owned();
    let ended = loop {
        let t0 = Instant::now();
        let status = rt.status_json();
        slowest_status = slowest_status.max(t0.elapsed());
        let entry = status["connectors"]
            .as_array()
            .and_then(|a| a.iter().find(|c| c["key"] == "hang"))
            .cloned()
            .unwrap_or_default();
        if first_upstream.is_none() {
            first_upstream = proc_tree::snapshot()
                .into_iter()
                .find(|p| p.cmdline.starts_with(&fixture) && p.cmdline.contains("--hang-at-start"))
                .map(|p| p.pid);
        }
        if entry["lastError"].as_str().is_some_and(|e| !e.is_empty()) {
            break (started.elapsed(), entry);
        }
        // Meanwhile the other connectors answer.
        let result = modern
            .call_tool_ok("steady_echo", json!({"message": "meanwhile"}))
            .await;
        assert_eq!(result_texts(&result), "meanwhile", "{result}");
        calls += 1;
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the hanging upstream shows no error after 20 s: {entry}"
        );
    };
    assert_gave_up_after_start_ms(ended, calls, slowest_status, &legacy).await;

    // The hung upstream was stopped.
    let first = first_upstream.unwrap_or_else(|| panic!("never saw the hanging upstream"));
    let survivors = proc_tree::wait_gone(&[first], Duration::from_secs(10));
    assert!(
        survivors.is_empty(),
        "the hanging upstream still runs:\n{}",
        proc_tree::describe(&survivors)
    );
    assert_probe_ends_after_start_ms(&rt);

    // And the runtime still answers everything else.
    let result = legacy
        .call_tool_ok("banner_echo", json!({"message": "still fine"}))
        .await;
    assert_eq!(result_texts(&result), "still fine", "{result}");
}

// === probe ===

fn recorded_methods(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["method"].as_str().map(str::to_owned))
        .collect()
}

/// Stored credentials go only to the installed release. A folder that merely claims an
/// installed key (same key, any URL) is probed without them, so it cannot collect them; the
/// installed release, probed by key, gets them.
#[test]
fn a_probed_folder_claiming_an_installed_key_gets_no_stored_credentials() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let right = format!("right-{}", random_hex());
    let fixture = FixtureAt::start(
        free_port(),
        &["--tools", "echo", "--require-bearer", &right],
    );
    let url = format!("http://127.0.0.1:{}/mcp", fixture.port);
    let manifest = http_connector("remote", &url, Some(bearer("API_TOKEN")));
    rt.install_ok(&manifest, &[]);
    rt.connect_from_env("remote", "API_TOKEN", &right);
    rt.wait_status("remote", "ready", READY);

    // By key: the installed release, with its stored token, lists the tools.
    let (out, probe) = probe_json(&rt, "remote");
    assert!(out.status.success(), "probe remote: {:?}", lines_of(&out));
    assert!(
        probe_tool_names(&probe, "upstreamName").contains("echo"),
        "{probe}"
    );

    // The same manifest in another folder gets no token: the upstream refuses it, and the
    // answer says how to probe the installed release.
    let dir = rt.write_release(&manifest, &[]);
    let out = rt.tutti(&["connector", "probe", &dir.to_string_lossy(), "--yes"]);
    let (stdout, stderr) = lines_of(&out);
    assert!(
        !out.status.success(),
        "a folder claiming key remote was probed with the stored token: {stdout}{stderr}"
    );
    assert!(
        stderr.contains("given only to its installed release")
            && stderr.contains("tutti connector probe remote"),
        "{stderr}"
    );
    assert!(!stdout.contains(&right) && !stderr.contains(&right));
}

/// `probe DIR --json`: both names of every tool and the one schema problem.
fn assert_probe_names_tools_and_the_problem(probe: &Value) {
    assert_eq!(probe["key"], "probed", "{probe}");
    assert_eq!(
        probe_tool_names(probe, "upstreamName"),
        BTreeSet::from(["echo", "add", "bad_schema"].map(str::to_owned)),
        "{probe}"
    );
    assert_eq!(
        probe_tool_names(probe, "localName"),
        BTreeSet::from(["probed_echo", "probed_add", "probed_bad_schema"].map(str::to_owned)),
        "{probe}"
    );
    let problems: Vec<String> = probe["problems"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| p.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(problems.len(), 1, "{probe}");
    assert!(
        problems[0].contains("bad_schema") && problems[0].contains("inputSchema"),
        "{probe}"
    );
}

/// Nothing installed by a probe; the probed upstream is gone; no tool was called.
fn assert_probe_left_nothing(
    rt: &Runtime,
    registry_before: &[u8],
    record: &std::path::Path,
    record_s: &str,
) {
    assert_eq!(
        std::fs::read(rt.state_dir().join("registry.json")).unwrap_or_default(),
        registry_before
    );
    assert!(rt.connector_status("probed").is_none());
    assert!(!rt.state_dir().join("releases").join("probed").exists());
    let left = proc_tree::live_matching(&[record_s]);
    let left = proc_tree::wait_gone(&left, Duration::from_secs(10));
    assert!(
        left.is_empty(),
        "probe left:\n{}",
        proc_tree::describe(&left)
    );
    let methods = recorded_methods(record);
    assert!(methods.iter().any(|m| m == "tools/list"), "{methods:?}");
    assert!(
        methods.iter().filter(|m| *m == "initialize").count() == 2,
        "two probes, two handshakes: {methods:?}"
    );
    assert!(!methods.iter().any(|m| m == "tools/call"), "{methods:?}");
}

#[test]
fn probe_lists_tools_and_schema_problems_and_calls_nothing() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let record = rt.root().join("probe-record.jsonl");
    let record_s = record.to_string_lossy().into_owned();
    let manifest = rt.private_fixture_connector(
        "probed",
        &["--tools", "echo,add", "--bad-schema", "--record", &record_s],
    );
    let dir = rt.write_release(&manifest, &[]);
    let dir_s = dir.to_string_lossy().into_owned();
    let registry_before = std::fs::read(rt.state_dir().join("registry.json")).unwrap_or_default();

    // probe DIR --json
    let (out, probe) = probe_json(&rt, &dir_s);
    assert_probe_names_tools_and_the_problem(&probe);
    assert!(!out.status.success(), "a probe with problems exits 0");

    // The table form: tools on stdout, one line per problem on stderr.
    let out = rt.tutti(&["connector", "probe", &dir_s, "--yes"]);
    let (stdout, stderr) = lines_of(&out);
    for name in ["probed_echo", "probed_add", "probed_bad_schema"] {
        assert!(stdout.contains(name), "{name} not in:\n{stdout}");
    }
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("bad_schema") && l.contains("inputSchema")),
        "no problem line on stderr:\n{stderr}"
    );

    assert_probe_left_nothing(&rt, &registry_before, &record, &record_s);
    // probe KEY of an installed connector (its bad schema keeps it from committing).
    rt.install_ok(&manifest, &[]);
    let failed = rt.wait_status("probed", "failed", READY);
    assert!(
        failed["lastError"]
            .as_str()
            .unwrap_or("")
            .contains("bad_schema"),
        "{failed}"
    );
    let (_, by_key) = probe_json(&rt, "probed");
    assert_eq!(
        probe_tool_names(&by_key, "upstreamName"),
        probe_tool_names(&probe, "upstreamName"),
        "{by_key}"
    );
    assert_eq!(by_key["problems"], probe["problems"], "{by_key}");
    let methods = recorded_methods(&record);
    assert!(!methods.iter().any(|m| m == "tools/call"), "{methods:?}");

    // An unknown target fails with one line.
    let out = rt.tutti(&["connector", "probe", "no-such-key"]);
    assert!(!out.status.success());
    let (_, stderr) = lines_of(&out);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}

// === install trust step ===

/// The install confirmation shows the exact argv, the cwd and the secret names, never a value.
fn assert_plan_shown(what: &str, out: &Output, argv: &str, state: &str, api_value: &str) {
    let (stdout, stderr) = lines_of(out);
    let all = format!("{stdout}{stderr}");
    assert!(
        all.lines().any(|l| l.trim() == format!("runs: {argv}")),
        "{what}: the exact argv is not shown:\n{all}"
    );
    assert!(
        all.lines().any(|l| l.trim() == format!("in:   {state}")),
        "{what}: the cwd is not shown:\n{all}"
    );
    assert!(
        all.contains("API_KEY") && all.contains("OTHER_KEY"),
        "{what}: the secret names are not shown:\n{all}"
    );
    assert!(!all.contains(api_value), "{what}: a secret value is shown");
}

/// An http connector shows its URL and secret name.
fn an_http_connector_shows_its_url_and_secret_name(rt: &mut Runtime) {
    let url = "http://127.0.0.1:9/mcp";
    let dir = rt.write_release(
        &http_connector("remote", url, Some(bearer("API_TOKEN"))),
        &[],
    );
    let dir = dir.to_string_lossy().into_owned();
    let out = rt.tutti(&["connector", "install", &dir]);
    assert!(!out.status.success(), "installed without confirmation");
    let (stdout, stderr) = lines_of(&out);
    let all = format!("{stdout}{stderr}");
    assert!(
        all.lines().any(|l| l.trim() == format!("url:  {url}")),
        "the URL is not shown:\n{all}"
    );
    assert!(all.contains("API_TOKEN"), "{all}");
    assert!(rt.connector_status("remote").is_none());
}

/// Refused: nothing written, nothing ran.
fn assert_nothing_installed_or_run(rt: &Runtime, registry_before: &[u8], state: &str) {
    assert_eq!(
        std::fs::read(rt.state_dir().join("registry.json")).unwrap_or_default(),
        registry_before
    );
    assert!(!rt.state_dir().join("releases").join("trusted").exists());
    assert!(rt.connector_status("trusted").is_none());
    assert!(
        proc_tree::live_matching(&[&format!("{state}/calls.jsonl")]).is_empty(),
        "something ran before the trust step"
    );
}

#[test]
fn install_confirmation_shows_the_exact_launch_and_secret_names_only() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let state = rt.state_dir().to_string_lossy().into_owned();
    // A relative argument naming an existing file in cwd is resolved against it.
    std::fs::write(rt.state_dir().join("calls.jsonl"), b"")
        .unwrap_or_else(|e| panic!("cannot write calls.jsonl: {e}"));
    let mut manifest =
        rt.private_fixture_connector("trusted", &["--tools", "echo", "--record", "calls.jsonl"]);
    manifest["mcp"]["cwd"] = json!("${state}");
    manifest["mcp"]["secrets"] = json!(["API_KEY", "OTHER_KEY"]);
    let dir = rt.write_release(&manifest, &[]);
    let dir = dir.to_string_lossy().into_owned();
    let fixture = rt.private_fixture().to_string_lossy().into_owned();
    let argv = format!("{fixture} --tools echo --record {state}/calls.jsonl");
    let api_value = format!("value-{}", random_hex());
    let registry_before = std::fs::read(rt.state_dir().join("registry.json")).unwrap_or_default();
    let check_plan =
        |what: &str, out: &Output| assert_plan_shown(what, out, &argv, &state, &api_value);

    // Without --yes and with stdin not a terminal: refused, nothing written.
    let out = rt
        .tutti_cmd(&["connector", "install", &dir])
        .env("API_KEY", &api_value)
        .output()
        .unwrap_or_else(|e| panic!("cannot run tutti: {e}"));
    assert!(!out.status.success(), "installed without confirmation");
    check_plan("without --yes", &out);
    let (_, stderr) = lines_of(&out);
    assert!(
        stderr.contains("--yes"),
        "the refusal does not mention --yes:\n{stderr}"
    );
    assert_nothing_installed_or_run(&rt, &registry_before, &state);

    // With --yes: the same plan, installed (waiting for its secrets).
    let out = rt
        .tutti_cmd(&["connector", "install", &dir, "--yes"])
        .env("API_KEY", &api_value)
        .output()
        .unwrap_or_else(|e| panic!("cannot run tutti: {e}"));
    assert!(out.status.success(), "{:?}", lines_of(&out));
    check_plan("with --yes", &out);
    rt.wait_status("trusted", "auth_required", READY);

    // What runs is exactly what was shown.
    let out = rt
        .tutti_cmd(&[
            "connector",
            "connect",
            "trusted",
            "--from-env",
            "API_KEY",
            "--from-env",
            "OTHER_KEY",
        ])
        .env("API_KEY", &api_value)
        .env("OTHER_KEY", "other value")
        .output()
        .unwrap_or_else(|e| panic!("cannot run tutti: {e}"));
    assert!(out.status.success(), "{:?}", lines_of(&out));
    rt.wait_status("trusted", "ready", READY);
    let running: Vec<String> = proc_tree::snapshot()
        .into_iter()
        .filter(|p| !p.is_zombie() && p.cmdline.starts_with(&fixture))
        .map(|p| p.cmdline)
        .collect();
    assert_eq!(
        running,
        vec![argv.clone()],
        "the running upstream differs from the plan"
    );

    an_http_connector_shows_its_url_and_secret_name(&mut rt);
}

#[tokio::test(flavor = "multi_thread")]
async fn command_and_args_inside_the_release_are_expanded_and_resolved() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    // The release's own launcher (a script may use a shell; the runtime never does).
    let script = format!(
        "#!/bin/sh\nexec '{}' \"$@\"\n",
        rt.private_fixture().display()
    );
    let manifest = json!({
        "key": "inrel",
        "name": "In release",
        "description": "A release that runs a program of its own",
        "version": "1.0.0",
        "mcp": {
            "transport": "stdio",
            "command": "${release}/bin/server",
            "args": ["--tools", "echo", "--record", "data/calls.jsonl"],
        },
    });
    let dir = rt.write_release(
        &manifest,
        &[("bin/server", script.as_bytes()), ("data/calls.jsonl", b"")],
    );
    let dir = dir.to_string_lossy().into_owned();
    let out = rt.tutti(&["connector", "install", &dir, "--yes", "--json"]);
    let (stdout, stderr) = lines_of(&out);
    assert!(out.status.success(), "install failed:\n{stdout}{stderr}");
    let reply: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("install --json printed no JSON ({e}): {stdout}"));
    let sha = reply["sha256"].as_str().unwrap_or("");
    let release = rt.state_dir().join("releases").join("inrel").join(sha);
    let release = release.to_string_lossy().into_owned();
    // `${release}` expanded, and the relative argument naming a release file resolved
    // against the cwd (default `${release}`), in what the trust step shows.
    let argv = format!("{release}/bin/server --tools echo --record {release}/data/calls.jsonl");
    assert!(
        stderr.lines().any(|l| l.trim() == format!("runs: {argv}")),
        "the confirmation does not show {argv:?}:\n{stderr}"
    );
    assert!(
        stderr
            .lines()
            .any(|l| l.trim() == format!("in:   {release}")),
        "{stderr}"
    );

    rt.wait_status("inrel", "ready", READY);
    let token = rt.issue_token("ws", "inrel");
    let [legacy, _] = clients(&rt, &token).await;
    let result = legacy
        .call_tool_ok("inrel_echo", json!({"message": "from the release"}))
        .await;
    assert_eq!(result_texts(&result), "from the release", "{result}");
    let methods = recorded_methods(Path::new(&format!("{release}/data/calls.jsonl")));
    assert!(
        methods.iter().any(|m| m == "tools/call"),
        "the upstream did not record into the release's file: {methods:?}"
    );
}

/// Lines of `stderr` that report a problem of `connector.json`.
fn problem_lines(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter(|l| l.contains("connector.json: "))
        .map(str::to_owned)
        .collect()
}

fn assert_refused_with(rt: &mut Runtime, manifest: &Value, fields: &[&str]) {
    let registry = rt.state_dir().join("registry.json");
    let registry_before = std::fs::read(&registry).unwrap_or_default();
    let key = manifest["key"].as_str().unwrap_or("").to_owned();
    let dir = rt.write_release(manifest, &[]);
    let dir = dir.to_string_lossy().into_owned();
    for args in [
        vec!["connector", "install", dir.as_str(), "--yes"],
        vec!["connector", "install", dir.as_str()],
    ] {
        let out = rt.tutti(&args);
        let (stdout, stderr) = lines_of(&out);
        assert!(!out.status.success(), "installed: {stdout}{stderr}");
        let lines = problem_lines(&stderr);
        for field in fields {
            let naming: Vec<&String> = lines
                .iter()
                .filter(|l| l.contains(&format!("connector.json: {field}: ")))
                .collect();
            assert_eq!(
                naming.len(),
                1,
                "expected one line naming {field}, got {naming:?} in:\n{stderr}"
            );
        }
        assert_eq!(
            lines.len(),
            fields.len(),
            "one line per problem expected ({fields:?}):\n{stderr}"
        );
        assert!(
            !stderr.contains("Install connector"),
            "a bad manifest was offered for confirmation:\n{stderr}"
        );
        assert_eq!(
            std::fs::read(&registry).unwrap_or_default(),
            registry_before,
            "registry.json changed"
        );
        let releases = rt.state_dir().join("releases");
        let written: Vec<PathBuf> = std::fs::read_dir(&releases)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        assert!(written.is_empty(), "release dirs written: {written:?}");
        if !key.is_empty() {
            assert!(rt.connector_status(&key).is_none());
        }
    }
}

#[test]
fn manifest_problems_are_listed_one_per_line_and_nothing_is_written() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let manifest = json!({
        "key": "Bad_Key",
        "version": 3,
        "mcp": {
            "transport": "stdio",
            "command": "node server.js",
            "env": {"1BAD": "x"},
        },
        "timeouts": {"startMs": -1},
        "toolRisk": {"echo": "extreme"},
    });
    assert_refused_with(
        &mut rt,
        &manifest,
        &[
            "key",
            "name",
            "description",
            "version",
            "mcp.command",
            "mcp.env.1BAD",
            "timeouts.startMs",
            "toolRisk.echo",
        ],
    );
    let manifest = json!({
        "key": "remote",
        "name": "Remote",
        "description": "d",
        "version": "1",
        "mcp": {"transport": "http", "url": "ftp://example.com/mcp",
                "auth": {"kind": "header", "secret": "not a name"}},
    });
    assert_refused_with(
        &mut rt,
        &manifest,
        &["mcp.url", "mcp.auth.header", "mcp.auth.secret"],
    );
}

#[test]
fn manifest_problems_of_fields_and_launch_are_listed_together() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let manifest = json!({
        "key": "launchy",
        "version": "1",
        "mcp": {
            "transport": "stdio",
            "command": "no-such-program-tutti-e2e",
            "cwd": "rel/dir",
        },
    });
    assert_refused_with(
        &mut rt,
        &manifest,
        &["name", "description", "mcp.command", "mcp.cwd"],
    );
}

//! HTTP upstream fidelity, end to end over the real binaries: an HTTP upstream that loses
//! our session (forgets it, answers 400 / 404 / 500 / 502, goes away and comes back) never
//! makes a call wait for `callMs` (SPEC §5: an unavailable upstream is answered at once), and
//! `status` and the audit log show the re-initialization or the restart; tools/call results
//! come back byte for byte through stdio and HTTP upstreams, in both client eras.
#![cfg(unix)]

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tutti_tests::fixture::EXACT_TEXT;
use tutti_tests::{FixtureHttp, Mcp, Runtime, RuntimeOptions, Server, free_port, result_texts};

/// Starting workers and upstreams on a loaded 2-core machine.
const READY: Duration = Duration::from_secs(30);
/// The connectors' `callMs`: a call that waits for it is a hang.
const CALL_MS: u64 = 60_000;
/// A call answered later than this waited for something it should not have.
const AT_ONCE: Duration = Duration::from_secs(10);
/// How long the connector may take to serve again after a fault.
const RECOVER: Duration = Duration::from_secs(40);

// === helpers ===

/// An `http` connector with a long `callMs`, so that a hang is told apart from an answer.
fn http_connector(key: &str, url: &str) -> Value {
    json!({
        "key": key,
        "name": format!("Remote {key}"),
        "description": format!("Remote MCP server {key}"),
        "version": "1.0.0",
        "mcp": {"transport": "http", "url": url},
        "timeouts": {"startMs": 30000, "callMs": CALL_MS},
    })
}

/// How one call ended.
#[derive(Debug)]
enum Answer {
    Ok(String),
    Unavailable(String),
    /// SPEC §5's answer while the connector's generation is fenced (it is restarting).
    Restarting(String),
}

/// One `tools/call` that must be answered well before `callMs`: with a result, with
/// `[MCP_UNAVAILABLE]`, or (while the kernel restarts the connector) with SPEC §5's -32602 for
/// a fenced generation. Anything else (a hang, a timeout, another error) fails the test.
async fn call_at_once(rt: &Runtime, mcp: &Mcp, tool: &str, args: Value, case: &str) -> Answer {
    let started = Instant::now();
    let reply = tokio::time::timeout(AT_ONCE, mcp.call_tool(tool, args)).await;
    let elapsed = started.elapsed();
    let Ok((status, _, body)) = reply else {
        panic!(
            "{case}: tools/call {tool} was not answered within {AT_ONCE:?} (callMs is \
             {CALL_MS} ms: a hang)\n{}",
            rt.log_tail("connector-remote.log", 40)
        );
    };
    assert!(elapsed < AT_ONCE, "{case}: answered after {elapsed:?}");
    assert_eq!(status, 200, "{case}: {body}");
    if body.get("result").is_some() {
        return Answer::Ok(result_texts(&body["result"]));
    }
    let message = body["error"]["message"].as_str().unwrap_or_default();
    if body["error"]["code"] == -32602 && body["error"]["data"]["tutti"]["reason"] == "fenced" {
        return Answer::Restarting(message.to_owned());
    }
    assert!(
        body["error"]["code"] == -32603 && message.starts_with("[MCP_UNAVAILABLE] remote: "),
        "{case}: tools/call {tool} ended with neither a result nor [MCP_UNAVAILABLE] after \
         {elapsed:?}: {body}\n{}",
        rt.log_tail("connector-remote.log", 40)
    );
    Answer::Unavailable(message.to_owned())
}

/// Calls `remote_echo` until it succeeds (every answer at once), within [`RECOVER`].
async fn until_served(rt: &Runtime, mcp: &Mcp, case: &str) -> Vec<Answer> {
    let deadline = Instant::now() + RECOVER;
    let mut answers = Vec::new();
    loop {
        let answer = call_at_once(rt, mcp, "remote_echo", json!({"message": case}), case).await;
        // server-everything answers "Echo: <message>".
        let done = matches!(&answer, Answer::Ok(text) if text.ends_with(case));
        answers.push(answer);
        if done {
            return answers;
        }
        assert!(
            Instant::now() < deadline,
            "{case}: not served again within {RECOVER:?}: {answers:?}\n{}",
            rt.log_tail("connector-remote.log", 40)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Audit records of `remote` that say its upstream session was re-initialized or its worker
/// was fenced (before a restart).
fn recoveries(rt: &Runtime) -> Vec<Value> {
    rt.log("audit.jsonl")
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["connector"] == "remote")
        .filter(|r| r["event"] == "reinit" || r["event"] == "fence")
        .collect()
}

/// What `status --json` says of `remote`: (re-initializations, restarts).
fn remote_status(rt: &Runtime) -> (u64, u64) {
    let c = rt.connector_status("remote").unwrap_or_default();
    (
        c["reinitializations"].as_u64().unwrap_or(0),
        c["restarts"].as_u64().unwrap_or(0),
    )
}

/// What status and the audit log said before a fault.
struct Before {
    audit: usize,
    reinits: u64,
    restarts: u64,
}

fn before(rt: &Runtime) -> Before {
    let (reinits, restarts) = remote_status(rt);
    Before {
        audit: recoveries(rt).len(),
        reinits,
        restarts,
    }
}

/// After a fault: the connector serves again, every call on the way answered at once, and
/// `status` and the audit log show a re-initialization or a restart that was not there before
/// the fault, with its reason.
async fn expect_recovery(rt: &Runtime, mcp: &Mcp, case: &str, before: Before) {
    let Before {
        audit: audit_before,
        reinits: reinits_before,
        restarts: restarts_before,
    } = before;
    let answers = until_served(rt, mcp, case).await;
    let deadline = Instant::now() + READY;
    loop {
        let (reinits, restarts) = remote_status(rt);
        let audit = recoveries(rt);
        let shown_in_status = reinits > reinits_before || restarts > restarts_before;
        if shown_in_status && audit.len() > audit_before {
            let reason = audit[audit_before]["reason"].as_str().unwrap_or_default();
            assert!(!reason.is_empty(), "{case}: no reason: {audit:?}");
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{case}: neither status (re-initializations {reinits_before} → {reinits}, restarts \
             {restarts_before} → {restarts}) nor the audit log ({audit:?}) shows the recovery; \
             answers: {answers:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn legacy_client(rt: &Runtime) -> Mcp {
    let token = rt.issue_token("ws", "fidelity");
    let mcp = Mcp::legacy(rt.frontend_url(), &token);
    mcp.initialize().await;
    mcp
}

// === sessions that recover ===

/// The stateful fixture (2025-06-18, sessions; a session it does not know is answered like
/// server-everything does: 400 with a JSON-RPC error whose id is null) through every fault.
#[tokio::test(flavor = "multi_thread")]
async fn stateful_http_upstream_recovers_from_every_fault_without_a_hang() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let args = ["--tools", "echo", "--unknown-session", "400"];
    let mut fixture = FixtureHttp::start(&args);
    let port = fixture.port;
    rt.install_ok(&http_connector("remote", &fixture.url), &[]);
    rt.wait_status("remote", "ready", READY);
    let mcp = legacy_client(&rt).await;
    let _ = until_served(&rt, &mcp, "first").await;

    // It forgets our session: 400, id null.
    let b = before(&rt);
    fixture.control(&json!({"forget": true}));
    expect_recovery(&rt, &mcp, "forgotten session", b).await;

    // Its next answers are failures of each kind.
    for status in [400, 404, 500, 502] {
        let b = before(&rt);
        fixture.control(&json!({"fail": {"status": status, "count": 1}}));
        expect_recovery(&rt, &mcp, &format!("one HTTP {status}"), b).await;
    }

    // It fails for long enough that re-initializing fails too: the kernel restarts it.
    let b = before(&rt);
    fixture.control(&json!({"fail": {"status": 500, "count": 1000}}));
    let case = "HTTP 500 until further notice";
    let answer = call_at_once(&rt, &mcp, "remote_echo", json!({"message": case}), case).await;
    assert!(
        matches!(&answer, Answer::Unavailable(m) if m.contains("HTTP 500")),
        "the answer does not say why: {answer:?}"
    );
    fixture.control(&json!({"fail": null}));
    expect_recovery(&rt, &mcp, case, b).await;

    // It goes away and comes back on the same port.
    let b = before(&rt);
    fixture.kill();
    let case = "gone";
    let answer = call_at_once(&rt, &mcp, "remote_echo", json!({"message": case}), case).await;
    assert!(
        matches!(&answer, Answer::Unavailable(m) if m.contains("did not answer")),
        "the answer does not say why: {answer:?}"
    );
    fixture = FixtureHttp::start_on(port, &args);
    expect_recovery(&rt, &mcp, "back on the same port", b).await;
    drop(fixture);
    rt.stop();
}

/// The stateless fixture (2026-07-28, no session to re-initialize): a failed request is
/// answered at once and the kernel restarts the connector, which serves again.
#[tokio::test(flavor = "multi_thread")]
async fn stateless_http_upstream_recovers_from_every_fault_without_a_hang() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let args = ["--tools", "echo", "--stateless"];
    let mut fixture = FixtureHttp::start(&args);
    let port = fixture.port;
    rt.install_ok(&http_connector("remote", &fixture.url), &[]);
    let ready = rt.wait_status("remote", "ready", READY);
    let mcp = legacy_client(&rt).await;
    let _ = until_served(&rt, &mcp, "first").await;
    let log = rt.log("connector-remote.log");
    assert!(
        log.contains("protocol_version=2026-07-28"),
        "the fixture was not spoken to in 2026-07-28: {ready}\n{log}"
    );

    for status in [400, 500, 502] {
        let b = before(&rt);
        fixture.control(&json!({"fail": {"status": status, "count": 1}}));
        let case = format!("one HTTP {status}");
        let answer = call_at_once(&rt, &mcp, "remote_echo", json!({"message": case}), &case).await;
        assert!(
            matches!(&answer, Answer::Unavailable(m) if m.contains(&format!("HTTP {status}"))),
            "{case}: the answer does not say why: {answer:?}"
        );
        expect_recovery(&rt, &mcp, &case, b).await;
    }

    let b = before(&rt);
    fixture.kill();
    let case = "gone";
    let answer = call_at_once(&rt, &mcp, "remote_echo", json!({"message": case}), case).await;
    assert!(
        matches!(&answer, Answer::Unavailable(m) | Answer::Restarting(m) if !m.is_empty()),
        "{answer:?}"
    );
    fixture = FixtureHttp::start_on(port, &args);
    expect_recovery(&rt, &mcp, "back on the same port", b).await;
    drop(fixture);
    rt.stop();
}

/// The issue's own steps: server-everything (stateful, answers a stale session with
/// `400 {"id":null,…}`) stopped and started again on the same port, for real.
#[tokio::test(flavor = "multi_thread")]
async fn server_everything_restarted_on_the_same_port_is_served_again_without_a_hang() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let port = free_port();
    let root = rt.root().to_path_buf();
    let everything = || Server::everything_http_on(port, &root, "everything.stderr", READY);
    let mut server = everything();
    let url = format!("http://127.0.0.1:{port}/mcp");
    rt.install_ok(&http_connector("remote", &url), &[]);
    rt.wait_status("remote", "ready", READY);
    let mcp = legacy_client(&rt).await;
    let _ = until_served(&rt, &mcp, "first").await;

    for round in 0..2 {
        let b = before(&rt);
        server.kill();
        server = everything();
        expect_recovery(&rt, &mcp, &format!("restarted ({round})"), b).await;
    }
    drop(server);
    rt.stop();
}

// === byte-exact results ===

/// The fixture's `exact` result as the frontend must pass it on: `structuredContent` raw,
/// and the same text JSON-escaped in `content`.
fn exact_fragments() -> [String; 2] {
    [
        format!(r#""structuredContent":{EXACT_TEXT}"#),
        format!(r#""text":{}"#, Value::from(EXACT_TEXT)),
    ]
}

/// One tools/call through the frontend, the response body as the bytes it sent.
async fn raw_call(rt: &Runtime, mcp: &Mcp, token: &str, tool: &str) -> String {
    let msg = mcp.message(
        Some(json!(7001)),
        "tools/call",
        json!({"name": tool, "arguments": {}}),
    );
    let mut request = reqwest::Client::new()
        .post(rt.frontend_url())
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("Authorization", format!("Bearer {token}"));
    for (name, value) in mcp.standard_headers(&msg) {
        request = request.header(name, value);
    }
    let response = request
        .body(msg.to_string())
        .timeout(AT_ONCE)
        .send()
        .await
        .unwrap_or_else(|e| panic!("tools/call {tool} failed: {e}"));
    let bytes = response
        .bytes()
        .await
        .unwrap_or_else(|e| panic!("reading the answer to tools/call {tool} failed: {e}"));
    String::from_utf8(bytes.to_vec())
        .unwrap_or_else(|e| panic!("the answer to tools/call {tool} is not UTF-8: {e}"))
}

/// `{"z":1,"a":9007199254740993,"f":1.50,"s":"é"}` keeps its key order, its large integer,
/// its number spelling and its character through a stdio upstream and HTTP upstreams (JSON
/// body, SSE `data:`, stateful 2025-06-18 and stateless 2026-07-28), to clients of both eras.
#[tokio::test(flavor = "multi_thread")]
async fn results_come_back_byte_for_byte_through_every_transport_and_era() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let json_http = FixtureHttp::start(&["--tools", "exact"]);
    let sse_http = FixtureHttp::start(&["--tools", "exact", "--sse"]);
    let modern_http = FixtureHttp::start(&["--tools", "exact", "--stateless", "--sse"]);
    let stdio = rt.private_fixture_connector("exstdio", &["--tools", "exact"]);
    rt.install_ok(&stdio, &[]);
    for (key, fixture) in [
        ("exjson", &json_http),
        ("exsse", &sse_http),
        ("exmodern", &modern_http),
    ] {
        rt.install_ok(&http_connector(key, &fixture.url), &[]);
    }
    for key in ["exstdio", "exjson", "exsse", "exmodern"] {
        rt.wait_status(key, "ready", READY);
    }
    // `ps` tells the workers apart: each names its connector key on its command line.
    for worker in rt.workers() {
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", worker.pid)).unwrap_or_default();
        let argv: Vec<String> = String::from_utf8_lossy(&cmdline)
            .split('\0')
            .map(str::to_owned)
            .collect();
        assert!(
            argv.windows(2)
                .any(|w| w[0] == "--key" && w[1] == worker.key),
            "worker {} of {} has no `--key {}` on its command line: {argv:?}",
            worker.pid,
            worker.key,
            worker.key
        );
    }
    assert_eq!(rt.workers().len(), 4, "{:?}", rt.workers());
    let token = rt.issue_token("ws", "exact");
    let legacy = Mcp::legacy(rt.frontend_url(), &token);
    legacy.initialize().await;
    let modern = Mcp::modern(rt.frontend_url(), &token);
    modern.initialize().await;
    for key in ["exstdio", "exjson", "exsse", "exmodern"] {
        for mcp in [&legacy, &modern] {
            let body = raw_call(&rt, mcp, &token, &format!("{key}_exact")).await;
            for fragment in exact_fragments() {
                assert!(
                    body.contains(&fragment),
                    "{key}, {:?} client: the answer does not carry {fragment} byte for byte:\n{body}",
                    mcp.era()
                );
            }
        }
    }
    drop((json_http, sse_http, modern_http));
    rt.stop();
}

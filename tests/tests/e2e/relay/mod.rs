//! Requests and log messages from upstreams over the real runtime: requests from an upstream to the
//! client during a call (`elicitation/create`, `sampling/createMessage`, `roots/list`) reach
//! the official Python SDK client (mcp 2.3.0) in both eras and its answers go back to the
//! upstream (server-everything over Streamable HTTP); log messages arrive only after the
//! client asked for them, tagged `<key>/…`; a client without the capability gets what SPEC
//! §11 says; the call's audit record names the relayed kinds and outcomes.

mod input_response_keys;
mod modern_upstream;
mod own_input_responses;
mod prompts;
mod session_ids;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tutti_tests::{PySdk, Runtime, RuntimeOptions, Server, everything_http_manifest};

const READY: Duration = Duration::from_secs(30);

/// The Python SDK client, driven by argv; prints one JSON object per line.
const PY_CLIENT: &str = r#"
import asyncio, json, sys
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from sdk_prelude import out, dump, auth_headers, run

async def main():
    what, url, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    headers = auth_headers()
    asked = []
    logs = []

    async def on_elicit(ctx, params):
        asked.append({"kind": "elicitation", "message": params.message})
        if what == "decline":
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content={
            "name": "Ada Lovelace", "check": True, "firstLine": "It was a dark night.",
            "email": "ada@example.com", "homepage": "https://example.com",
            "birthdate": "1815-12-10", "integer": 7, "number": 1.5, "untitledSingleSelectEnum": "Option 1"})

    async def on_sample(ctx, params):
        asked.append({"kind": "sampling"})
        return types.CreateMessageResult(role="assistant",
            content=types.TextContent(type="text", text="sampled by the relay test"),
            model="relay-test-model")

    async def on_roots(ctx):
        asked.append({"kind": "roots"})
        return types.ListRootsResult(roots=[types.Root(uri="file:///relay-test-root", name="relay-root")])

    async def on_log(params):
        logs.append({"level": params.level, "logger": params.logger})

    kw = {}
    if what == "logs" and mode != "legacy":
        # 2026-07-28: the level travels in each request's _meta; none, then debug.
        for level in (None, "debug"):
            async with httpx2.AsyncClient(headers=headers, timeout=60) as hc:
                async with Client(streamable_http_client(url, http_client=hc), mode=mode,
                                  logging_callback=on_log, log_level=level) as c:
                    if level is None:
                        out(event="connected", protocolVersion=c.protocol_version)
                    r = await c.call_tool(sys.argv[4], {})
                    out(event="called", logs=list(logs), result=dump(r))
                    logs.clear()
        return
    if what in ("answer", "decline"):
        kw = dict(elicitation_callback=on_elicit, sampling_callback=on_sample,
                  list_roots_callback=on_roots)
    if what == "logs":
        kw = dict(logging_callback=on_log, list_roots_callback=on_roots)
    async with httpx2.AsyncClient(headers=headers, timeout=60) as hc:
        async with Client(streamable_http_client(url, http_client=hc), mode=mode, **kw) as c:
            out(event="connected", protocolVersion=c.protocol_version)
            if what == "logs":
                r = await c.call_tool(sys.argv[4], {})
                out(event="called", logs=list(logs), result=dump(r))
                logs.clear()
                await c.set_logging_level("debug")
                r = await c.call_tool(sys.argv[4], {})
                out(event="called", logs=list(logs), result=dump(r))
                return
            for name, args in json.loads(sys.argv[4]):
                try:
                    r = await c.call_tool(name, args)
                    out(event="called", name=name, asked=list(asked), result=dump(r))
                except Exception as e:
                    out(event="failed", name=name, asked=list(asked), error=str(e),
                        code=getattr(getattr(e, "error", None), "code", None))
                asked.clear()

run(main)
"#;

/// The client script with `args`; its stderr under the runtime's root.
fn py_client(rt: &Runtime, token: &str, args: &[&str]) -> PySdk {
    let stderr = rt.root().join(format!("py-{}-{}.stderr", args[0], args[2]));
    PySdk::spawn_inline(rt.root(), "relay_client.py", PY_CLIENT, args, token, stderr)
}

/// A runtime with server-everything installed as connector `ev`, ready, and a token.
fn runtime_with_everything() -> (Runtime, Server, String) {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let (server, url) = Server::everything_http(rt.root(), "everything.stderr", READY);
    rt.install_ok(&everything_http_manifest("ev", &url), &[]);
    rt.wait_status("ev", "ready", READY);
    let token = rt.issue_token("w", "relay");
    (rt, server, token)
}

fn text_of(result: &Value) -> String {
    tutti_tests::result_texts(result)
}

/// The audit `call` records of `tool`.
fn call_records(rt: &Runtime, tool: &str) -> Vec<Value> {
    rt.audit_lines()
        .into_iter()
        .filter(|l| l["event"] == "call" && l["tool"] == tool)
        .collect()
}

fn wait_call_records(rt: &Runtime, tool: &str, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let records = call_records(rt, tool);
        if records.len() >= n || Instant::now() > deadline {
            return records;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn python_sdk_answers_the_upstreams_elicitation_sampling_and_roots_in_both_eras() {
    let (rt, _everything, token) = runtime_with_everything();
    let calls = json!([
        ["ev_trigger-elicitation-request", {}],
        ["ev_trigger-sampling-request", {"prompt": "say hi", "maxTokens": 20}],
        ["ev_get-roots-list", {}],
    ])
    .to_string();
    for mode in ["legacy", "auto"] {
        let py = py_client(&rt, &token, &["answer", rt.frontend_url(), mode, &calls]);
        py.next("connected");
        let elicit = py.next("the elicitation call");
        assert_eq!(elicit["event"], "called", "mode={mode}: {elicit}");
        assert_eq!(
            elicit["asked"][0]["kind"], "elicitation",
            "mode={mode}: {elicit}"
        );
        let text = text_of(&elicit["result"]);
        assert!(
            text.contains("Ada Lovelace") && text.contains("accept"),
            "mode={mode}: the upstream got the client's answer: {text}"
        );
        let sample = py.next("the sampling call");
        assert_eq!(
            sample["asked"][0]["kind"], "sampling",
            "mode={mode}: {sample}"
        );
        assert!(
            text_of(&sample["result"]).contains("sampled by the relay test"),
            "mode={mode}: {sample}"
        );
        let roots = py.next("the roots call");
        assert!(
            text_of(&roots["result"]).contains("file:///relay-test-root"),
            "mode={mode}: {roots}"
        );
    }
    let records = wait_call_records(&rt, "ev_trigger-elicitation-request", 2);
    assert_eq!(records.len(), 2, "{records:?}");
    for record in &records {
        assert_eq!(
            record["relayed"],
            json!(["elicitation/create:answered"]),
            "{record}"
        );
        assert!(
            !record.to_string().contains("Ada"),
            "never the contents: {record}"
        );
    }
    let sampling = wait_call_records(&rt, "ev_trigger-sampling-request", 2);
    assert!(
        sampling
            .iter()
            .all(|r| r["relayed"] == json!(["sampling/createMessage:answered"])),
        "{sampling:?}"
    );
}

#[test]
fn a_declined_elicitation_reaches_the_upstream_as_a_decline_in_both_eras() {
    let (rt, _everything, token) = runtime_with_everything();
    let calls = json!([["ev_trigger-elicitation-request", {}]]).to_string();
    for mode in ["legacy", "auto"] {
        let py = py_client(&rt, &token, &["decline", rt.frontend_url(), mode, &calls]);
        py.next("connected");
        let called = py.next("the elicitation call");
        assert_eq!(called["event"], "called", "mode={mode}: {called}");
        assert!(
            text_of(&called["result"]).contains("declined"),
            "mode={mode}: {called}"
        );
    }
}

#[test]
fn a_client_without_the_capability_gets_what_each_era_prescribes() {
    let (rt, _everything, token) = runtime_with_everything();
    let calls =
        json!([["ev_trigger-sampling-request", {"prompt": "hi", "maxTokens": 5}]]).to_string();
    // Legacy: the upstream receives an error (server-everything then fails its tool).
    let py = py_client(&rt, &token, &["plain", rt.frontend_url(), "legacy", &calls]);
    py.next("connected");
    let legacy = py.next("the legacy call");
    assert!(
        legacy["asked"].as_array().is_some_and(Vec::is_empty),
        "{legacy}"
    );
    let said = legacy.to_string();
    assert!(
        said.contains("did not declare the capability"),
        "the upstream got our error and reported it: {legacy}"
    );
    drop(py);
    // Modern: -32021 before anything of the client reaches the upstream.
    let py = py_client(&rt, &token, &["plain", rt.frontend_url(), "auto", &calls]);
    py.next("connected");
    let modern = py.next("the modern call");
    assert_eq!(modern["event"], "failed", "{modern}");
    assert_eq!(modern["code"], -32021, "{modern}");
}

#[test]
fn log_messages_arrive_only_after_set_level_tagged_with_the_connector() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    // The fixture's logging_tool logs three `info` messages (logger tutti-fixture) per call.
    let manifest = tutti_tests::fixture_connector("fx", &["--tools", "logging_tool"]);
    rt.install_ok(&manifest, &[]);
    rt.wait_status("fx", "ready", READY);
    let token = rt.issue_token("w", "logs");
    for mode in ["legacy", "auto"] {
        let py = py_client(
            &rt,
            &token,
            &["logs", rt.frontend_url(), mode, "fx_logging_tool"],
        );
        py.next("connected");
        let before = py.next("the call before a level was set");
        assert_eq!(
            before["logs"],
            json!([]),
            "mode={mode}: no level, no messages: {before}"
        );
        let after = py.next("the call after a level was set");
        let logs = after["logs"].as_array().cloned().unwrap_or_default();
        assert_eq!(logs.len(), 3, "mode={mode}: the call's messages: {after}");
        for log in &logs {
            assert_eq!(log["logger"], "fx/tutti-fixture", "tagged <key>/: {log}");
            assert_eq!(log["level"], "info", "{log}");
        }
    }
}

// ---------------------------------------------------------------------------------------
// the 2025-06-18 notification stream (GET)

/// Upper bound for anything that should happen "at once".
const AT_ONCE: Duration = Duration::from_secs(1);

/// Runs blocking runtime commands from an async test.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// Waits until the stream ends; how long that took (panics after 5 s).
async fn ends(stream: &mut tutti_tests::SseStream) -> Duration {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(5) {
        let left = Duration::from_secs(5).saturating_sub(started.elapsed());
        if stream.next_event(left).await.is_none() {
            return started.elapsed();
        }
    }
    panic!("the stream did not end within 5 s");
}

fn list_changed(event: Option<Value>, what: &str) {
    let event = event.unwrap_or_else(|| panic!("no tools/list_changed within 1 s of {what}"));
    assert_eq!(
        event["method"], "notifications/tools/list_changed",
        "{what}: {event}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_legacy_get_stream_announces_installs_upgrades_and_uninstalls_and_ends_on_revoke() {
    let mut rt = blocking(|| Runtime::start(RuntimeOptions::default()));
    let fixture = |tools: &str, version: &str| {
        let mut m = tutti_tests::fixture_connector("gx", &["--tools", tools]);
        m["version"] = json!(version);
        m
    };
    let token = blocking(|| rt.issue_token("w", "get"));
    let client = tutti_tests::Mcp::legacy(rt.frontend_url(), &token);
    let init = client.initialize().await;
    let caps = &init["capabilities"];
    assert_eq!(caps["tools"]["listChanged"], true, "{init}");
    assert_eq!(caps["resources"]["subscribe"], true, "{init}");
    assert!(caps["logging"].is_object(), "{init}");
    let mut stream = client.get_stream().await;
    assert_eq!(stream.status, 200);
    assert_eq!(
        stream
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("text/event-stream")
    );
    assert!(stream.headers.get("mcp-session-id").is_none());

    blocking(|| {
        rt.install_ok(&fixture("echo", "1.0.0"), &[]);
        rt.wait_status("gx", "ready", READY);
    });
    list_changed(stream.next_event(AT_ONCE).await, "an install");

    blocking(|| {
        rt.install_ok(&fixture("echo,add", "1.0.1"), &[]);
        let deadline = Instant::now() + READY;
        while rt
            .connector_status("gx")
            .map(|s| s["version"] != "1.0.1" || s["status"] != "ready")
            .unwrap_or(true)
        {
            assert!(Instant::now() < deadline, "the upgrade did not commit");
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    list_changed(stream.next_event(AT_ONCE).await, "an upgrade");

    blocking(|| rt.tutti_ok(&["connector", "uninstall", "gx"]));
    list_changed(stream.next_event(AT_ONCE).await, "an uninstall");

    blocking(|| rt.tutti_ok(&["session", "revoke", "--workspace", "w", "--session", "get"]));
    let took = ends(&mut stream).await;
    assert!(
        took <= AT_ONCE,
        "the stream ended {took:?} after the revoke"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reissued_tokens_old_get_stream_ends_and_get_without_event_stream_stays_405() {
    let rt = blocking(|| Runtime::start(RuntimeOptions::default()));
    let old = blocking(|| rt.issue_token("w", "re"));
    let mut stream = tutti_tests::Mcp::legacy(rt.frontend_url(), &old)
        .get_stream()
        .await;
    assert_eq!(stream.status, 200);
    let opened = Instant::now();
    assert!(
        stream
            .next_event(Duration::from_millis(500))
            .await
            .is_none()
    );
    assert!(
        opened.elapsed() >= Duration::from_millis(450),
        "the stream must stay open until something ends it"
    );
    let new = blocking(|| rt.issue_token("w", "re"));
    let took = ends(&mut stream).await;
    assert!(
        took <= AT_ONCE,
        "the old token's stream ended {took:?} after the reissue"
    );
    // The new token's stream stays open; GET without `Accept: text/event-stream` stays 405.
    let mut fresh = tutti_tests::Mcp::legacy(rt.frontend_url(), &new)
        .get_stream()
        .await;
    assert_eq!(fresh.status, 200);
    let waited = Instant::now();
    assert!(
        fresh
            .next_event(Duration::from_millis(1500))
            .await
            .is_none()
    );
    assert!(
        waited.elapsed() >= Duration::from_millis(1400),
        "the new token's stream must stay open"
    );
    let status = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap_or_else(|e| panic!("{e}"))
        .get(rt.frontend_url())
        .header("Authorization", format!("Bearer {new}"))
        .header("Accept", "application/json")
        .send()
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0);
    assert_eq!(status, 405);
}

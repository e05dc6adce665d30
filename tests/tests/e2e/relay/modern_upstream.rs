//! A 2026-07-28 upstream's `input_required` results (SPEC §11): a 2026-07-28 upstream asks its client during a call with
//! an `input_required` result (SEP-2322) instead of a request on the call's stream. Through
//! the real runtime, the official Python SDK client (mcp 2.3.0) in both eras gets the
//! upstream's elicitation and its answer goes back: accept gives the upstream's final result,
//! decline gives the upstream's answer to a decline. The upstream's `requestState` never
//! reaches the agent, an upstream that keeps asking is ended after a bounded number of rounds,
//! and the call's audit record names the relayed kinds.
//!
//! The upstream is the fixture server over `--http --stateless` with its `mrtr_confirm` tool.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tutti_tests::fixture::MRTR_STATE_MARK;
use tutti_tests::{FixtureHttp, PySdk, Runtime, RuntimeOptions, result_texts};

const READY: Duration = Duration::from_secs(30);
/// The tool as the agent sees it (connector `up`).
const TOOL: &str = "up_mrtr_confirm";

/// The Python SDK client: `<answer|decline> <url> <legacy|auto> <calls JSON>`; one JSON
/// object per line.
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

    async def on_elicit(ctx, params):
        asked.append(dump(params))
        if what == "hang":
            await asyncio.sleep(120)
        if what == "decline":
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content={"confirmed": True})

    async with httpx2.AsyncClient(headers=headers, timeout=60) as hc:
        async with Client(streamable_http_client(url, http_client=hc), mode=mode,
                          elicitation_callback=on_elicit) as c:
            out(event="connected", protocolVersion=c.protocol_version)
            for name, args in json.loads(sys.argv[4]):
                try:
                    r = await c.call_tool(name, args)
                    out(event="called", name=name, asked=list(asked), result=dump(r))
                except Exception as e:
                    out(event="failed", name=name, asked=list(asked), error=str(e))
                asked.clear()

run(main)
"#;

/// The client script with `args`; its stderr under the runtime's root.
fn py_client(rt: &Runtime, token: &str, args: &[&str]) -> PySdk {
    let stderr = rt.root().join(format!("py-{}-{}.stderr", args[0], args[2]));
    PySdk::spawn_inline(rt.root(), "mrtr_client.py", PY_CLIENT, args, token, stderr)
}

/// A runtime with the stateless fixture (2026-07-28) installed as connector `up`, and a token.
fn runtime_with_modern_upstream() -> (Runtime, FixtureHttp, String) {
    runtime_with_call_timeout(60_000)
}

/// [`runtime_with_modern_upstream`] with the connector's call timeout `call_ms`.
fn runtime_with_call_timeout(call_ms: u64) -> (Runtime, FixtureHttp, String) {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let fixture = FixtureHttp::start(&["--tools", "echo,mrtr_confirm", "--stateless"]);
    let manifest = json!({
        "key": "up",
        "name": "Modern upstream",
        "description": "The fixture speaking 2026-07-28 over Streamable HTTP",
        "version": "1.0.0",
        "mcp": {"transport": "http", "url": fixture.url},
        "timeouts": {"startMs": 30000, "callMs": call_ms},
    });
    rt.install_ok(&manifest, &[]);
    rt.wait_status("up", "ready", READY);
    let token = rt.issue_token("w", "modern-upstream-relay");
    (rt, fixture, token)
}

/// Runs the calls with a client of each era; returns each era's call events, in order.
fn run_both_eras(rt: &Runtime, token: &str, what: &str, calls: &Value) -> Vec<(String, Value)> {
    let calls_json = calls.to_string();
    let n = calls.as_array().map_or(0, Vec::len);
    let mut events = Vec::new();
    for mode in ["legacy", "auto"] {
        let py = py_client(rt, token, &[what, rt.frontend_url(), mode, &calls_json]);
        let connected = py.next("connected");
        if mode == "auto" {
            assert_eq!(connected["protocolVersion"], "2026-07-28", "{connected}");
        }
        for i in 0..n {
            events.push((mode.to_owned(), py.next(&format!("call {i}"))));
        }
    }
    events
}

/// The audit `call` records of the tool.
fn wait_call_records(rt: &Runtime, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let records: Vec<Value> = rt
            .audit_lines()
            .into_iter()
            .filter(|l| l["event"] == "call" && l["tool"] == TOOL)
            .collect();
        if records.len() >= n || Instant::now() > deadline {
            return records;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn an_accepting_client_of_either_era_gets_the_modern_upstreams_final_result() {
    let (rt, _fixture, token) = runtime_with_modern_upstream();
    let calls = json!([[TOOL, {"rounds": 2}], ["up_echo", {"message": "after"}]]);
    let events = run_both_eras(&rt, &token, "answer", &calls);
    for (mode, event) in events.iter().step_by(2) {
        assert_eq!(event["event"], "called", "mode={mode}: {event}");
        let text = result_texts(&event["result"]);
        assert!(
            text.starts_with("confirmed 2 step(s)") && text.contains("\"confirmed\":true"),
            "mode={mode}: the upstream got both answers and finished: {event}"
        );
        let asked: Vec<&str> = event["asked"]
            .as_array()
            .map(|a| a.iter().filter_map(|p| p["message"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(
            asked,
            ["Confirm step 1?", "Confirm step 2?"],
            "mode={mode}: {event}"
        );
        assert!(
            !event.to_string().contains(MRTR_STATE_MARK),
            "mode={mode}: the upstream's requestState reached the agent: {event}"
        );
    }
    for (mode, event) in events.iter().skip(1).step_by(2) {
        assert_eq!(
            result_texts(&event["result"]),
            "after",
            "mode={mode}: a later call is unaffected: {event}"
        );
    }
    let records = wait_call_records(&rt, 2);
    assert_eq!(records.len(), 2, "{records:?}");
    for record in &records {
        assert_eq!(
            record["relayed"],
            json!(["elicitation/create:answered", "elicitation/create:answered"]),
            "{record}"
        );
        assert!(
            !record.to_string().contains(MRTR_STATE_MARK),
            "never the upstream's state: {record}"
        );
    }
}

#[test]
fn a_declining_client_of_either_era_gets_the_upstreams_answer_to_a_decline() {
    let (rt, _fixture, token) = runtime_with_modern_upstream();
    let calls = json!([[TOOL, {}]]);
    for (mode, event) in run_both_eras(&rt, &token, "decline", &calls) {
        assert_eq!(event["event"], "called", "mode={mode}: {event}");
        assert_eq!(
            result_texts(&event["result"]),
            "the client answered decline at step 1: nothing was done",
            "mode={mode}: {event}"
        );
    }
}

#[test]
fn an_upstream_that_keeps_asking_is_ended_after_a_bounded_number_of_rounds() {
    let (rt, _fixture, token) = runtime_with_modern_upstream();
    let calls = json!([[TOOL, {"rounds": 50}]]);
    for (mode, event) in run_both_eras(&rt, &token, "answer", &calls) {
        let shown = match event["event"].as_str() {
            Some("failed") => event["error"].to_string(),
            _ => result_texts(&event["result"]),
        };
        assert!(
            shown.contains("still asked for input") && shown.contains("10 rounds"),
            "mode={mode}: a clear error: {event}"
        );
        let asked = event["asked"].as_array().map_or(0, Vec::len);
        assert_eq!(asked, 10, "mode={mode}: one question per round: {event}");
    }
}

#[test]
fn an_unanswered_question_ends_with_the_calls_timeout() {
    const CALL_MS: u64 = 3_000;
    let (rt, _fixture, token) = runtime_with_call_timeout(CALL_MS);
    let calls = json!([[TOOL, {}]]).to_string();
    let py = py_client(&rt, &token, &["hang", rt.frontend_url(), "legacy", &calls]);
    py.next("connected");
    let started = Instant::now();
    let event = py.next("the call's end");
    let took = started.elapsed();
    assert_eq!(event["event"], "failed", "{event}");
    assert_eq!(
        event["asked"].as_array().map_or(0, Vec::len),
        1,
        "the question was asked: {event}"
    );
    assert!(
        event["error"]
            .as_str()
            .unwrap_or("")
            .contains("MCP_TIMEOUT"),
        "the call's timeout ended it: {event}"
    );
    // Generous margin for a loaded machine, far below the client's 120 s wait.
    assert!(took < Duration::from_secs(60), "took {took:?}");
}

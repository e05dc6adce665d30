//! Relayed prompts (SPEC §11): an upstream that asks its client during `prompts/get`
//! (the conformance suite's `input_required_result_prompt`: an `elicitation/create` for the
//! context to use) is relayed exactly as during `tools/call`, through the real runtime, to the
//! official Python SDK client (mcp 2.3.0) in both eras:
//!
//! - a 2025-era upstream (`old`: the fixture over `--http --sse` with sessions) sends the
//!   request on the `prompts/get` response stream;
//! - a 2026-07-28 upstream (`new`: the fixture over `--http --stateless`) answers
//!   `input_required` and gets the answer with the request again.
//!
//! A legacy client gets an SSE request on the `prompts/get` response stream, a modern client
//! an `input_required` result with the runtime's own `requestState`; the answer reaches the
//! upstream, whose prompt names it. A decline comes back as the upstream's answer to a
//! decline, the audit record names the relayed kind, and a client that never answers gets the
//! call timeout's error, not a hang.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tutti_tests::{FixtureHttp, PySdk, Runtime, RuntimeOptions};

const READY: Duration = Duration::from_secs(30);
const PROMPT: &str = "input_required_result_prompt";
const ASKED: &str = "What context should the prompt use?";

/// `<answer|decline|hang> <url> <legacy|auto> <prompt names JSON>`; one JSON line per get.
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
        return types.ElicitResult(action="accept", content={"context": "from the agent"})

    async with httpx2.AsyncClient(headers=headers, timeout=60) as hc:
        async with Client(streamable_http_client(url, http_client=hc), mode=mode,
                          elicitation_callback=on_elicit) as c:
            out(event="connected", protocolVersion=c.protocol_version)
            for name in json.loads(sys.argv[4]):
                started = asyncio.get_running_loop().time()
                try:
                    r = await c.get_prompt(name)
                    out(event="got", name=name, asked=list(asked), result=dump(r))
                except Exception as e:
                    took = asyncio.get_running_loop().time() - started
                    out(event="failed", name=name, asked=list(asked), error=str(e), took=took)
                asked.clear()

run(main)
"#;

/// A runtime with both upstreams (`old`, `new`) offering the asking prompt, and a token.
fn runtime(call_ms: u64) -> (Runtime, Vec<FixtureHttp>, String) {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let old = FixtureHttp::start(&["--sse", "--conformance-catalog"]);
    let new = FixtureHttp::start(&["--stateless", "--conformance-catalog"]);
    for (key, fixture) in [("old", &old), ("new", &new)] {
        let manifest = json!({
            "key": key,
            "name": format!("Upstream {key}"),
            "description": "The fixture with a prompt that asks its client",
            "version": "1.0.0",
            "mcp": {"transport": "http", "url": fixture.url},
            "timeouts": {"startMs": 30000, "callMs": call_ms},
        });
        rt.install_ok(&manifest, &[]);
    }
    rt.wait_status("old", "ready", READY);
    rt.wait_status("new", "ready", READY);
    let token = rt.issue_token("w", "prompt-relay");
    (rt, vec![old, new], token)
}

fn prompts() -> Value {
    json!([format!("old_{PROMPT}"), format!("new_{PROMPT}")])
}

/// Gets both prompts with a client of each era; returns `(mode, event)` per get, in order.
fn get_both_eras(rt: &Runtime, token: &str, what: &str) -> Vec<(String, Value)> {
    let mut events = Vec::new();
    for mode in ["legacy", "auto"] {
        let stderr = rt.root().join(format!("py-{what}-{mode}.stderr"));
        let names = prompts().to_string();
        let args = [what, rt.frontend_url(), mode, names.as_str()];
        let py = PySdk::spawn_inline(
            rt.root(),
            "prompt_client.py",
            PY_CLIENT,
            &args,
            token,
            stderr,
        );
        let connected = py.next("connected");
        let era = if mode == "auto" {
            "2026-07-28"
        } else {
            "2025-11-25"
        };
        assert_eq!(connected["protocolVersion"], era, "{connected}");
        for i in 0..2 {
            events.push((mode.to_owned(), py.next(&format!("get {i}"))));
        }
    }
    events
}

fn prompt_text(event: &Value) -> &str {
    event["result"]["messages"][0]["content"]["text"]
        .as_str()
        .unwrap_or_default()
}

fn asked_messages(event: &Value) -> Vec<&str> {
    event["asked"]
        .as_array()
        .map(|a| a.iter().filter_map(|p| p["message"].as_str()).collect())
        .unwrap_or_default()
}

/// The audit records of relayed prompt gets.
fn prompt_records(rt: &Runtime, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let records: Vec<Value> = rt
            .audit_lines()
            .into_iter()
            .filter(|l| l["event"] == "call" && l["kind"] == "prompt")
            .collect();
        if records.len() >= n || Instant::now() > deadline {
            return records;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_prompt_whose_upstream_asks_is_answered_by_a_client_of_either_era() {
    let (rt, _fixtures, token) = runtime(60_000);
    let events = get_both_eras(&rt, &token, "answer");
    assert_eq!(events.len(), 4);
    for (mode, event) in &events {
        assert_eq!(event["event"], "got", "mode={mode}: {event}");
        assert_eq!(asked_messages(event), [ASKED], "mode={mode}: {event}");
        assert_eq!(
            prompt_text(event),
            "Prompt with context: from the agent",
            "mode={mode}: the answer reached the upstream: {event}"
        );
    }
    let records = prompt_records(&rt, 4);
    assert_eq!(records.len(), 4, "{records:?}");
    for record in &records {
        assert_eq!(
            record["relayed"],
            json!(["elicitation/create:answered"]),
            "{record}"
        );
        assert_eq!(record["outcome"], "ok", "{record}");
    }
}

#[test]
fn a_declined_question_gets_the_upstreams_answer_to_a_decline() {
    let (rt, _fixtures, token) = runtime(60_000);
    for (mode, event) in get_both_eras(&rt, &token, "decline") {
        assert_eq!(event["event"], "got", "mode={mode}: {event}");
        assert_eq!(
            prompt_text(&event),
            "the client answered decline: the prompt has no context",
            "mode={mode}: {event}"
        );
    }
}

#[test]
fn a_legacy_client_that_never_answers_gets_the_call_timeout_not_a_hang() {
    let (rt, _fixtures, token) = runtime(3_000);
    let stderr = rt.root().join("py-hang.stderr");
    let names = prompts().to_string();
    let args = ["hang", rt.frontend_url(), "legacy", names.as_str()];
    let py = PySdk::spawn_inline(
        rt.root(),
        "prompt_client.py",
        PY_CLIENT,
        &args,
        &token,
        stderr,
    );
    py.next("connected");
    for i in 0..2 {
        let event = py.next(&format!("get {i}"));
        assert_eq!(event["event"], "failed", "{event}");
        assert_eq!(asked_messages(&event), [ASKED], "{event}");
        let took = event["took"].as_f64().unwrap_or(f64::MAX);
        // 3 s call timeout (+ the frontend's 2 s grace); far below the client's 120 s wait.
        assert!(
            took < 30.0,
            "the get was bounded by the call timeout: {event}"
        );
        let error = event["error"].as_str().unwrap_or_default().to_lowercase();
        assert!(
            error.contains("timed out") || error.contains("timeout"),
            "{event}"
        );
    }
}

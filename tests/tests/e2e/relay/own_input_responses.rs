//! A client's own input responses (SPEC §11): a 2026-07-28 client's own `inputResponses`, sent without a
//! `requestState`, are its input to a 2026-07-28 upstream: the runtime passes them on with the
//! first round, and the upstream verifies them as it would from a direct client (completes
//! with the answer it needs and ignores unknown keys, refuses a malformed one, asks again when
//! its key is missing). A `requestState` the runtime issued stays verified exactly as before,
//! and a 2025-era upstream keeps today's behaviour: nothing a client sends unasked is taken as
//! an answer, the call starts afresh and asks.
//!
//! Upstreams: the fixture's asking tools (`--tools conformance_relay`) over `--http
//! --stateless --sse` (2026-07-28, connector `new`) and over `--http --sse` with sessions
//! (2025-06-18, connector `old`); tool `input_required_result_elicitation`, which asks for
//! the user's name under the key `user_name`.

use std::time::Duration;

use serde_json::{Value, json};
use tutti_tests::{FixtureHttp, Mcp, Runtime, RuntimeOptions};

const MODERN: &str = "2026-07-28";

fn call_params(tool: &str, extra: Value) -> Value {
    let mut params = json!({
        "name": tool,
        "arguments": {},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
            "io.modelcontextprotocol/clientInfo": {"name": "own-input-responses", "version": "0"},
        },
    });
    if let (Some(p), Value::Object(extra)) = (params.as_object_mut(), extra) {
        p.extend(extra);
    }
    params
}

fn accept(name: &str) -> Value {
    json!({"action": "accept", "content": {"name": name}})
}

fn text(body: &Value) -> &str {
    body["result"]["content"][0]["text"].as_str().unwrap_or("")
}

/// A runtime with the connectors `new` (2026-07-28) and `old` (2025-06-18) and a token.
fn runtime() -> (Runtime, [FixtureHttp; 2], String) {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let tools = ["--tools", "conformance_relay"];
    let new = FixtureHttp::start(&[tools[0], tools[1], "--stateless", "--sse"]);
    let old = FixtureHttp::start(&[tools[0], tools[1], "--sse"]);
    for (key, fixture) in [("new", &new), ("old", &old)] {
        let manifest = json!({
            "key": key,
            "name": format!("Asking upstream {key}"),
            "description": "The fixture's asking tools over Streamable HTTP",
            "version": "1.0.0",
            "mcp": {"transport": "http", "url": fixture.url},
        });
        rt.install_ok(&manifest, &[]);
        rt.wait_status(key, "ready", Duration::from_secs(30));
    }
    let token = rt.issue_token("w", "own-input-responses");
    (rt, [new, old], token)
}

#[tokio::test(flavor = "multi_thread")]
async fn own_input_responses_reach_a_modern_upstream_and_nothing_else() {
    let (rt, _fixtures, token) = tokio::task::block_in_place(runtime);
    let mcp = Mcp::modern(rt.frontend_url(), &token);
    let tool = "new_input_required_result_elicitation";

    // The client's own answer, with keys the upstream does not know: the upstream completes.
    let own = json!({"inputResponses": {"user_name": accept("Alice"),
        "unknown_extra_key": {"action": "accept", "content": {"foo": "bar"}}}});
    let (status, _, done) = mcp.request("tools/call", call_params(tool, own)).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert_eq!(text(&done), "Hello, Alice!", "{done}");

    // A malformed answer is the upstream's to refuse, as from a direct client.
    let bad = json!({"inputResponses": {"user_name": 12345}});
    let (_, _, refused) = mcp.request("tools/call", call_params(tool, bad)).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");

    // Without the key it needs the upstream asks again; the runtime's requestState for that
    // question stays verified exactly as before.
    let wrong = json!({"inputResponses": {"wrong_key": accept("Mallory")}});
    let (_, _, asked) = mcp.request("tools/call", call_params(tool, wrong)).await;
    let result = &asked["result"];
    assert_eq!(result["resultType"], "input_required", "{asked}");
    assert_eq!(
        result["inputRequests"]["user_name"]["method"], "elicitation/create",
        "{asked}"
    );
    let state = result["requestState"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(state.len() >= 40, "the runtime's own requestState: {asked}");
    let answer = json!({"user_name": accept("Bob")});
    let tampered = json!({"inputResponses": answer, "requestState": format!("{state}x")});
    let (_, _, refused) = mcp.request("tools/call", call_params(tool, tampered)).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let retry = json!({"inputResponses": answer, "requestState": state});
    let (_, _, done) = mcp.request("tools/call", call_params(tool, retry)).await;
    assert_eq!(text(&done), "Hello, Bob!", "{done}");

    // A 2025-era upstream has no inputResponses: the same unasked answer is taken by nobody,
    // the call starts afresh and its request reaches the client.
    let own = json!({"inputResponses": {"user_name": accept("Alice")}});
    let tool = "old_input_required_result_elicitation";
    let (status, _, asked) = mcp.request("tools/call", call_params(tool, own)).await;
    assert_eq!(status, 200, "{asked}");
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    let keys: Vec<&String> = asked["result"]["inputRequests"]
        .as_object()
        .map(|m| m.keys().collect())
        .unwrap_or_default();
    assert!(
        keys.len() == 1 && keys[0].starts_with("tutti-"),
        "a 2025-era request keyed by the runtime: {asked}"
    );
}

/// A 2026-07-28 upstream's `input_required` request that the client declared no capability
/// for ends the call with -32021 and HTTP 400, as a 2025-era upstream's request during the
/// call does (SPEC §11; the conformance run's `server-stateless` checks this through the
/// `test` connector).
#[tokio::test(flavor = "multi_thread")]
async fn a_modern_upstreams_request_the_client_cannot_answer_is_missing_capability() {
    let (rt, _fixtures, token) = tokio::task::block_in_place(runtime);
    let mcp = Mcp::modern(rt.frontend_url(), &token);
    for key in ["new", "old"] {
        let mut params = call_params(&format!("{key}_missing_capability"), json!({}));
        params["_meta"]["io.modelcontextprotocol/clientCapabilities"] = json!({});
        let (status, _, refused) = mcp.request("tools/call", params).await;
        assert_eq!(refused["error"]["code"], -32021, "{key}: {refused}");
        assert_eq!(status, 400, "{key}: {refused}");
    }
}

/// The same refusal when the client also asked for progress (a `progressToken`, an event stream
/// accepted): no progress came before it, so it is still HTTP 400, not a one-event stream.
#[tokio::test(flavor = "multi_thread")]
async fn missing_capability_is_http_400_with_a_progress_token_too() {
    let (rt, _fixtures, token) = tokio::task::block_in_place(runtime);
    let mcp = Mcp::modern(rt.frontend_url(), &token);
    for key in ["new", "old"] {
        let mut params = call_params(&format!("{key}_missing_capability"), json!({}));
        params["_meta"]["io.modelcontextprotocol/clientCapabilities"] = json!({});
        params["_meta"]["progressToken"] = json!("p1");
        let (status, _, refused) = mcp.request("tools/call", params).await;
        assert_eq!(refused["error"]["code"], -32021, "{key}: {refused}");
        assert_eq!(status, 400, "{key}: {refused}");
    }
}

//! Input response keys (SPEC §11): a 2026-07-28 upstream that asks three things in one
//! `input_required` round (an elicitation, a sampling request and `roots/list`) reaches a
//! 2026-07-28 client as ONE `input_required` result under the upstream's own keys
//! (`confirm`, `greeting`, `client_roots`), with a `requestState` of the runtime's own; the
//! client's answers by those keys go back to the upstream, which builds its result from them.
//! A `requestState` the runtime did not issue is refused and runs nothing.
//!
//! The upstream is the fixture server over `--http --stateless`, tool `mrtr_confirm` with
//! `all: true`.

use std::time::Duration;

use serde_json::{Value, json};
use tutti_tests::fixture::MRTR_STATE_MARK;
use tutti_tests::{FixtureHttp, Mcp, Runtime, RuntimeOptions};

const MODERN: &str = "2026-07-28";
const TOOL: &str = "up_mrtr_confirm";

fn call_params(extra: Value) -> Value {
    let mut params = json!({
        "name": TOOL,
        "arguments": {"all": true},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities":
                {"elicitation": {}, "sampling": {}, "roots": {}},
            "io.modelcontextprotocol/clientInfo": {"name": "input-keys", "version": "0"},
        },
    });
    if let (Some(p), Value::Object(extra)) = (params.as_object_mut(), extra) {
        p.extend(extra);
    }
    params
}

#[tokio::test(flavor = "multi_thread")]
async fn one_round_of_a_modern_upstream_is_one_input_required_result_under_its_own_keys() {
    let (rt, _fixture, token) = tokio::task::block_in_place(|| {
        let mut rt = Runtime::start(RuntimeOptions::default());
        let fixture = FixtureHttp::start(&["--tools", "echo,mrtr_confirm", "--stateless"]);
        let manifest = json!({
            "key": "up",
            "name": "Modern upstream",
            "description": "The fixture speaking 2026-07-28 over Streamable HTTP",
            "version": "1.0.0",
            "mcp": {"transport": "http", "url": fixture.url},
        });
        rt.install_ok(&manifest, &[]);
        rt.wait_status("up", "ready", Duration::from_secs(30));
        let token = rt.issue_token("w", "input-keys");
        (rt, fixture, token)
    });
    let mcp = Mcp::modern(rt.frontend_url(), &token);

    let (status, _, first) = mcp.request("tools/call", call_params(json!({}))).await;
    assert_eq!(status, 200, "{first}");
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    let requests = result["inputRequests"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let mut keys: Vec<&str> = requests.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        ["client_roots", "confirm", "greeting"],
        "the whole round in one result, under the upstream's keys: {first}"
    );
    assert_eq!(requests["confirm"]["method"], "elicitation/create");
    assert_eq!(requests["greeting"]["method"], "sampling/createMessage");
    assert_eq!(requests["client_roots"]["method"], "roots/list");
    let state = result["requestState"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(state.len() >= 40, "an unguessable requestState: {state:?}");
    assert!(
        !first.to_string().contains(MRTR_STATE_MARK),
        "the upstream's requestState reached the client: {first}"
    );

    let answers = json!({
        "confirm": {"action": "accept", "content": {"confirmed": true}},
        "greeting": {"role": "assistant", "model": "m", "stopReason": "endTurn",
                     "content": {"type": "text", "text": "Hello from input-keys"}},
        "client_roots": {"roots": [{"uri": "file:///input-keys", "name": "root"}]},
        "not_asked": {"action": "accept", "content": {}},
    });
    // A requestState the runtime did not issue names nothing.
    let mut altered = state.clone();
    altered.replace_range(0..1, if altered.starts_with('A') { "B" } else { "A" });
    let forged = json!({"requestState": altered, "inputResponses": answers});
    let (_, _, body) = mcp.request("tools/call", call_params(forged)).await;
    assert_eq!(body["error"]["code"], -32602, "{body}");

    let retry = json!({"requestState": state, "inputResponses": answers});
    let (status, _, done) = mcp.request("tools/call", call_params(retry)).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    let text = done["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    for want in [
        "confirmed 1 step(s)",
        "\"confirmed\":true",
        "Hello from input-keys",
        "file:///input-keys",
    ] {
        assert!(
            text.contains(want),
            "each answer reached the upstream by its key: {done}"
        );
    }
}

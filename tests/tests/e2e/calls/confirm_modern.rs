//! Confirmed high-risk calls on the modern surface (SPEC §12 with §11's input-required
//! results): a `--confirm high` session's high-risk `tools/call` from a 2026-07-28 client that
//! declares elicitation is answered with an `input_required` result carrying the person's
//! question; the retry with the answer runs the call on accept and returns `isError`
//! `declined:` on decline or cancel, with nothing sent upstream (the fixture records every
//! message it gets); a client without elicitation gets "could not be asked"; a forged,
//! replayed or other-session `requestState` is refused (-32602) and runs nothing; the audit
//! log holds each decision.

use serde_json::{Value, json};
use tutti_tests::Mcp;
use tutti_tests::confirm::RiskyFixture;

const MODERN: &str = "2026-07-28";

/// The Python SDK client calls `fx_destroy` once in 2026-07-28 mode (`Client(mode="auto")`
/// against a server that speaks only 2026-07-28 on this token's requests), answering a
/// question with `answer` (`accept`, `decline`, `cancel`, or `none`: no elicitation
/// capability).
fn run_client(fx: &RiskyFixture, token: &str, answer: &str) -> Value {
    let v = fx.run_client("auto", token, answer);
    assert_eq!(v["version"], MODERN, "the client spoke 2026-07-28: {v}");
    v
}

#[test]
fn a_modern_client_is_asked_through_input_required_and_each_answer_is_honoured() {
    let fx = RiskyFixture::start(None);
    let token = fx.token("confirmed", true);

    let declined = run_client(&fx, &token, "decline");
    let asked = declined["asked"].as_array().cloned().unwrap_or_default();
    assert_eq!(asked.len(), 1, "the person was asked once: {declined}");
    let question = asked[0].as_str().unwrap_or_default();
    for part in ["fx_destroy", "connector fx", "risk high"] {
        assert!(
            question.contains(part),
            "the question names {part}: {question}"
        );
    }
    assert_eq!(declined["result"]["isError"], true, "{declined}");
    let text = tutti_tests::result_texts(&declined["result"]);
    assert!(text.starts_with("declined:"), "{declined}");
    assert_eq!(fx.upstream_calls(), 0, "a declined call is not sent");

    let cancelled = run_client(&fx, &token, "cancel");
    assert_eq!(cancelled["result"]["isError"], true, "{cancelled}");
    let text = tutti_tests::result_texts(&cancelled["result"]);
    assert!(
        text.starts_with("declined:") && text.contains("cancelled"),
        "{cancelled}"
    );
    assert_eq!(fx.upstream_calls(), 0, "a cancelled call is not sent");

    let accepted = run_client(&fx, &token, "accept");
    assert_eq!(
        accepted["asked"].as_array().map(Vec::len),
        Some(1),
        "{accepted}"
    );
    assert_ne!(accepted["result"]["isError"], true, "{accepted}");
    assert_eq!(fx.upstream_calls(), 1, "the accepted call ran once");

    let unable = run_client(&fx, &token, "none");
    assert_eq!(unable["result"]["isError"], true, "{unable}");
    let text = tutti_tests::result_texts(&unable["result"]);
    assert!(text.contains("could not be asked"), "{unable}");
    assert_eq!(fx.upstream_calls(), 1, "nothing sent for the unasked call");

    assert_eq!(
        fx.decisions(4),
        ["declined", "cancelled", "accepted", "not_asked"],
        "the audit log holds every decision"
    );
}

/// A modern `tools/call` of `fx_destroy` with `extra` params, declaring elicitation.
async fn call_destroy(mcp: &Mcp, extra: Value) -> (u16, Value) {
    let mut params = json!({
        "name": "fx_destroy",
        "arguments": {},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
            "io.modelcontextprotocol/clientInfo": {"name": "confirm-modern", "version": "0"},
        },
    });
    if let (Some(p), Value::Object(extra)) = (params.as_object_mut(), extra) {
        p.extend(extra);
    }
    let (status, _, body) = mcp.request("tools/call", params).await;
    (status, body)
}

fn assert_refused_state(status: u16, body: &Value, what: &str) {
    assert_eq!(body["error"]["code"], -32602, "{what}: {status} {body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("requestState"), "{what}: {body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_forged_replayed_or_other_session_request_state_runs_nothing() {
    let (fx, token, other) = tokio::task::block_in_place(|| {
        let fx = RiskyFixture::start(None);
        let token = fx.token("mine", true);
        let other = fx.token("theirs", true);
        (fx, token, other)
    });
    let mine = Mcp::modern(fx.rt.frontend_url(), &token);
    let theirs = Mcp::modern(fx.rt.frontend_url(), &other);

    let (status, first) = call_destroy(&mine, json!({})).await;
    assert_eq!(status, 200, "{first}");
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    let requests = result["inputRequests"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    assert_eq!(requests.len(), 1, "one question: {first}");
    let (key, question) = requests
        .iter()
        .next()
        .map(|(k, v)| (k.clone(), v.clone()))
        .unwrap_or_default();
    assert_eq!(question["method"], "elicitation/create", "{question}");
    assert!(
        question["params"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("fx_destroy")),
        "{question}"
    );
    let state = result["requestState"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(state.len() >= 40, "an unguessable requestState: {state:?}");
    let accept = json!({ key.clone(): {"action": "accept", "content": {}} });

    // Another session's token cannot use it, an altered one names nothing.
    let stolen = json!({"requestState": state, "inputResponses": accept});
    let (status, body) = call_destroy(&theirs, stolen).await;
    assert_refused_state(status, &body, "another session's token");
    let mut altered = state.clone();
    altered.replace_range(0..1, if altered.starts_with('A') { "B" } else { "A" });
    let forged = json!({"requestState": altered, "inputResponses": accept});
    let (status, body) = call_destroy(&mine, forged).await;
    assert_refused_state(status, &body, "an altered requestState");
    assert_eq!(
        fx.upstream_calls(),
        0,
        "nothing ran for the refused retries"
    );

    // The owner's retry with the answer runs the call, once.
    let retry = json!({"requestState": state, "inputResponses": accept});
    let (status, body) = call_destroy(&mine, retry.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["resultType"], "complete", "{body}");
    assert_ne!(body["result"]["isError"], true, "{body}");
    assert_eq!(fx.upstream_calls(), 1, "the accepted call ran");
    let (status, body) = call_destroy(&mine, retry).await;
    assert_refused_state(status, &body, "a replayed requestState");
    assert_eq!(fx.upstream_calls(), 1, "the replay ran nothing");

    // A low-risk tool is never asked about.
    let (_, _, echo) = mine
        .request(
            "tools/call",
            json!({"name": "fx_echo", "arguments": {"message": "hi"}}),
        )
        .await;
    assert_eq!(echo["result"]["resultType"], "complete", "{echo}");
}

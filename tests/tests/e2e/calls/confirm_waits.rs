//! Confirmed high-risk calls on the legacy surface, the ways a question ends without a yes:
//! the person cancels; the person never answers (the question waits for the
//! tool's call timeout, `timeouts.callMs`); the client closes the call's stream while the
//! question waits. Each call is `isError` (or gone), nothing reaches the upstream (the
//! fixture records every message it gets), the audit log holds the decision, and a later
//! call of the same session is asked again and runs when accepted.

use std::time::Duration;

use serde_json::{Value, json};
use tutti_tests::confirm::RiskyFixture;
use tutti_tests::{Mcp, Runtime};

/// The fixture's call timeout, and so how long the person has to answer.
const CALL_MS: u64 = 3000;
const LEGACY: &str = "2025-06-18";

/// The Python SDK client calls `fx_destroy` once over 2025-06-18, answering the question
/// with `answer` (`cancel`, or `never`: the callback never returns).
fn run_client(fx: &RiskyFixture, token: &str, answer: &str) -> Value {
    fx.run_client("legacy", token, answer)
}

/// The fixture `fx` with a `CALL_MS` call timeout, and a `--confirm high` token.
fn runtime() -> (RiskyFixture, String) {
    let fx = RiskyFixture::start(Some(CALL_MS));
    let token = fx.token("confirmed", true);
    (fx, token)
}

#[test]
fn a_cancelled_or_unanswered_question_sends_nothing_and_is_audited() {
    let (fx, token) = runtime();

    let cancelled = run_client(&fx, &token, "cancel");
    assert_eq!(
        cancelled["asked"].as_array().map(Vec::len),
        Some(1),
        "{cancelled}"
    );
    assert_eq!(cancelled["result"]["isError"], true, "{cancelled}");
    let text = tutti_tests::result_texts(&cancelled["result"]);
    assert!(
        text.starts_with("declined:") && text.contains("(cancelled)"),
        "{cancelled}"
    );
    assert_eq!(fx.upstream_calls(), 0, "a cancelled call is not sent");

    let unanswered = run_client(&fx, &token, "never");
    assert_eq!(
        unanswered["asked"].as_array().map(Vec::len),
        Some(1),
        "{unanswered}"
    );
    assert_eq!(unanswered["result"]["isError"], true, "{unanswered}");
    let text = tutti_tests::result_texts(&unanswered["result"]);
    assert!(
        text.starts_with("declined:") && text.contains("(timeout)"),
        "{unanswered}"
    );
    tutti_tests::confirm::assert_waited_for(&unanswered, CALL_MS);
    assert_eq!(fx.upstream_calls(), 0, "an unanswered call is not sent");

    assert_eq!(fx.decisions(2), ["cancelled", "timeout"]);
}

/// A raw 2025-06-18 client that declared elicitation at `initialize`.
async fn eliciting_client(rt: &Runtime, token: &str) -> Mcp {
    let mcp = Mcp::legacy(rt.frontend_url(), token);
    let params = json!({"protocolVersion": LEGACY, "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "confirm-waits", "version": "0"}});
    let (status, _, body) = mcp.request("initialize", params).await;
    assert_eq!(status, 200, "initialize: {body}");
    let (status, _, body) = mcp.notify("notifications/initialized", Value::Null).await;
    assert_eq!(status, 202, "initialized: {body}");
    mcp
}

/// Opens a `tools/call` of `fx_destroy` as an event stream and returns it with the
/// question's JSON-RPC id.
async fn asked(mcp: &Mcp) -> (tutti_tests::SseStream, Value) {
    let params = json!({"name": "fx_destroy", "arguments": {}});
    let mut stream = mcp.stream("tools/call", params, &[]).await;
    assert_eq!(stream.status, 200, "the call opened an event stream");
    let question = stream.next_event(Duration::from_secs(20)).await;
    let question = question.unwrap_or_else(|| panic!("no question on the call's stream"));
    assert_eq!(question["method"], "elicitation/create", "{question}");
    (stream, question["id"].clone())
}

/// POSTs the client's `accept` answer to question `id`.
async fn accept(mcp: &Mcp, id: &Value) {
    let answer = json!({"jsonrpc": "2.0", "id": id, "result": {"action": "accept", "content": {}}});
    let headers = mcp.standard_headers(&answer);
    let body = serde_json::to_vec(&answer).unwrap_or_default();
    let (status, _, reply) = mcp.post_raw(body, &headers).await;
    assert_eq!(status, 202, "the answer is taken: {reply}");
}

#[tokio::test(flavor = "multi_thread")]
async fn closing_the_stream_while_the_question_waits_drops_it_and_sends_nothing() {
    let (fx, token) = tokio::task::block_in_place(runtime);
    let mcp = eliciting_client(&fx.rt, &token).await;

    // The client closes the call's stream while the person is being asked.
    let (stream, old_id) = asked(&mcp).await;
    drop(stream);
    let words = tokio::task::block_in_place(|| fx.decisions(1));
    assert_eq!(words, ["cancelled"], "the abandoned question is audited");
    // An answer that comes after the stream closed runs nothing.
    accept(&mcp, &old_id).await;

    // A later call is asked again and runs on accept.
    let (mut stream, id) = asked(&mcp).await;
    assert_ne!(id, old_id, "a new question");
    accept(&mcp, &id).await;
    let response = stream.next_event(Duration::from_secs(20)).await;
    let response = response.unwrap_or_else(|| panic!("no response on the call's stream"));
    assert_eq!(response["id"], stream.id, "{response}");
    assert_ne!(response["result"]["isError"], true, "{response}");
    assert_eq!(
        fx.upstream_calls(),
        1,
        "only the accepted call reached the upstream"
    );
    let words = tokio::task::block_in_place(|| fx.decisions(2));
    assert_eq!(words, ["cancelled", "accepted"]);
}

//! Confirmed high-risk calls over the real runtime: a session issued with `--confirm high` has each call
//! of a high-risk tool confirmed by the person through the client's elicitation (the official
//! Python SDK client, mcp 2.3.0, legacy surface) before anything is sent upstream (the fixture
//! records every message it gets). Accept → the call runs; decline → `isError` `declined:`
//! and no `tools/call` upstream; a client without the capability → `isError` "could not be
//! asked"; a session without `--confirm` is never asked; the audit log holds each decision.

use serde_json::{Value, json};
use tutti_tests::confirm::RiskyFixture;

/// The Python SDK client (legacy mode) calls `fx_destroy` once, answering a question with
/// `answer` (`accept`, `decline`, or `none`: no elicitation capability).
fn run_client(fx: &RiskyFixture, token: &str, answer: &str) -> Value {
    fx.run_client("legacy", token, answer)
}

fn text(result: &Value) -> String {
    tutti_tests::result_texts(result)
}

#[test]
fn high_risk_calls_are_confirmed_by_the_person_and_every_decision_is_audited() {
    let fx = RiskyFixture::start(None);

    // Declined: nothing reaches the upstream.
    let confirmed = fx.token("confirmed", true);
    let declined = run_client(&fx, &confirmed, "decline");
    let asked = declined["asked"].as_array().cloned().unwrap_or_default();
    assert_eq!(asked.len(), 1, "the person was asked once: {declined}");
    let question = asked[0].as_str().unwrap_or_default();
    for part in ["fx_destroy", "fx", "high"] {
        assert!(
            question.contains(part),
            "the question names {part}: {question}"
        );
    }
    assert_eq!(declined["result"]["isError"], true, "{declined}");
    assert!(
        text(&declined["result"]).starts_with("declined:"),
        "{declined}"
    );
    assert_eq!(
        fx.upstream_calls(),
        0,
        "a declined call is not sent upstream"
    );

    // Accepted: the call goes through.
    let accepted = run_client(&fx, &confirmed, "accept");
    assert_eq!(
        accepted["asked"].as_array().map(Vec::len),
        Some(1),
        "{accepted}"
    );
    assert_ne!(accepted["result"]["isError"], true, "{accepted}");
    assert_eq!(
        fx.upstream_calls(),
        1,
        "the accepted call reached the upstream"
    );

    // A client that cannot be asked: refused, nothing sent.
    let unable = run_client(&fx, &confirmed, "none");
    assert_eq!(unable["result"]["isError"], true, "{unable}");
    assert!(
        text(&unable["result"]).contains("could not be asked"),
        "{unable}"
    );
    assert_eq!(fx.upstream_calls(), 1, "nothing sent for the unasked call");

    // Without --confirm: never asked, the call runs.
    let plain = fx.token("plain", false);
    let ran = run_client(&fx, &plain, "decline");
    assert_eq!(
        ran["asked"],
        json!([]),
        "a plain session is never asked: {ran}"
    );
    assert_ne!(ran["result"]["isError"], true, "{ran}");
    assert_eq!(fx.upstream_calls(), 2);
    assert_each_decision_audited(&fx);
}

/// The audit log holds the four calls' decisions in order.
fn assert_each_decision_audited(fx: &RiskyFixture) {
    let records = fx.destroy_records(4);
    let decisions: Vec<(&str, &str)> = records
        .iter()
        .map(|r| {
            (
                r["session"].as_str().unwrap_or_default(),
                r["confirmation"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        decisions,
        vec![
            ("confirmed", "declined"),
            ("confirmed", "accepted"),
            ("confirmed", "not_asked"),
            ("plain", ""),
        ],
        "{records:?}"
    );
}

/// The question shows the call's arguments: secret-looking keys masked, a long value cut.
#[test]
fn the_question_shows_the_arguments_with_secret_values_masked() {
    let fx = RiskyFixture::start(None);
    let token = fx.token("shown", true);
    let arguments = json!({
        "path": "/srv/reports/q3.csv",
        "api_token": "tok-5f3a9c2e71",
        "note": "n".repeat(1000),
    });
    let declined = fx.run_client_with("legacy", &token, "decline", &arguments);
    let asked = declined["asked"].as_array().cloned().unwrap_or_default();
    assert_eq!(asked.len(), 1, "the person was asked once: {declined}");
    let question = asked[0].as_str().unwrap_or_default();
    assert!(
        question.starts_with(
            "Allow the call of tool fx_destroy (connector fx, risk high)?\nArguments:\n"
        ),
        "{question}"
    );
    assert!(
        question.contains("\n  path: \"/srv/reports/q3.csv\""),
        "{question}"
    );
    assert!(question.contains("\n  api_token: ***"), "{question}");
    assert!(!question.contains("tok-5f3a9c2e71"), "{question}");
    let note = question.lines().find(|l| l.starts_with("  note: "));
    let note = note.unwrap_or_else(|| panic!("no note line: {question}"));
    assert!(note.ends_with('…') && note.chars().count() < 220, "{note}");
    assert_eq!(
        fx.upstream_calls(),
        0,
        "a declined call is not sent upstream"
    );
}

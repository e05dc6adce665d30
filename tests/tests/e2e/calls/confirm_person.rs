//! Confirmation by the person (`--confirm-via person`, the default, SPEC §12): a high-risk call
//! is held in the kernel and listed by `tutti confirm list` (arguments masked and cut) while
//! the agent's client, the official Python SDK client answering every elicitation with accept,
//! is never asked and cannot make it run; it runs once after `tutti confirm allow`, is
//! refused after `deny` or when nobody answers within the connector's `callMs`, withdrawn when
//! its client goes away, and with both channels the first answer wins. The fixture upstream
//! records every message it gets; the audit log names the channel that answered.

use std::time::Duration;

use serde_json::{Value, json};
use tutti_tests::confirm::{RiskyFixture, assert_waited_for, client_answer};

/// The secret-looking argument the person's views must never show.
const SECRET: &str = "tok-5f3a9c2e71";

fn arguments() -> Value {
    json!({"path": "/srv/reports/q3.csv", "api_token": SECRET, "note": "n".repeat(1000)})
}

fn text(result: &Value) -> String {
    tutti_tests::result_texts(result)
}

/// The one held call's arguments as `confirm list --json` shows them: masked and cut.
fn assert_shown_masked(pending: &Value) {
    let shown: Vec<(&str, &str)> = pending["arguments"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|x| {
                    (
                        x["name"].as_str().unwrap_or(""),
                        x["value"].as_str().unwrap_or(""),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    assert!(shown.contains(&("api_token", "***")), "{pending}");
    assert!(
        shown.contains(&("path", "\"/srv/reports/q3.csv\"")),
        "{pending}"
    );
    let note = shown.iter().find(|(n, _)| *n == "note").map(|(_, v)| *v);
    let note = note.unwrap_or_else(|| panic!("no note: {pending}"));
    assert!(note.ends_with('…') && note.chars().count() < 220, "{note}");
    assert!(!pending.to_string().contains(SECRET), "{pending}");
}

#[test]
fn a_person_channel_call_runs_only_after_the_person_allows_it() {
    let fx = RiskyFixture::start(Some(60_000));
    let token = fx.token_via("held", "person");
    let client = fx.spawn_client("legacy", &token, "accept", &arguments());

    let pending = fx.wait_pending(1);
    assert_eq!(pending.len(), 1, "the call waits: {pending:?}");
    let held = &pending[0];
    for (field, want) in [
        ("connector", "fx"),
        ("tool", "fx_destroy"),
        ("workspace", "w"),
        ("session", "held"),
    ] {
        assert_eq!(held[field], want, "{held}");
    }
    assert!(held["remainingMs"].as_u64().unwrap_or(0) > 30_000, "{held}");
    assert_shown_masked(held);
    let id = held["id"].as_str().unwrap_or_default().to_owned();
    let listed = fx.rt.tutti_ok(&["confirm", "list"]);
    assert!(
        listed.contains(&id) && listed.contains("fx_destroy"),
        "{listed}"
    );
    assert!(
        listed.contains("api_token=***") && !listed.contains(SECRET),
        "{listed}"
    );
    assert_eq!(fx.rt.status_json()["confirmationsWaiting"], 1);

    // The agent's client would accept anything, but it is not asked and nothing runs.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        fx.upstream_calls(),
        0,
        "nothing reaches the upstream before the person allows"
    );

    let allowed = fx.rt.tutti_ok(&["confirm", "allow", &id]);
    assert!(allowed.contains("allowed"), "{allowed}");
    let ran = client_answer("accept", client);
    assert_eq!(
        ran["asked"],
        json!([]),
        "the agent's client is never asked: {ran}"
    );
    assert_ne!(ran["result"]["isError"], true, "{ran}");
    assert_eq!(
        fx.upstream_calls(),
        1,
        "the allowed call reached the upstream once"
    );

    // An answered id is gone: one line that says so.
    let again = fx.rt.tutti(&["confirm", "allow", &id]);
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(!again.status.success(), "a second allow fails");
    assert!(
        stderr.contains("no call waits") && stderr.trim().lines().count() == 1,
        "{stderr}"
    );
    assert_eq!(fx.rt.status_json()["confirmationsWaiting"], 0);

    let states = fx.confirmation_states(2);
    assert_eq!(
        states,
        ["pending", "allowed:person"],
        "the audit names the person"
    );
    let record = &fx.destroy_records(1)[0];
    assert_eq!(
        (
            record["confirmation"].as_str(),
            record["confirmedVia"].as_str()
        ),
        (Some("accepted"), Some("person")),
        "{record}"
    );
}

#[test]
fn a_denied_or_unanswered_person_channel_call_is_refused_and_nothing_is_sent() {
    const CALL_MS: u64 = 4000;
    let fx = RiskyFixture::start(Some(CALL_MS));
    // The person is the default channel.
    let token = fx.rt.issue_token_with("w", "held", &["--confirm", "high"]);

    let client = fx.spawn_client("legacy", &token, "accept", &json!({}));
    let id = fx.answer_pending("deny");
    let denied = client_answer("accept", client);
    assert_eq!(denied["result"]["isError"], true, "{denied}");
    assert!(text(&denied["result"]).starts_with("declined:"), "{denied}");

    let expired = fx.run_client("legacy", &token, "accept");
    assert_eq!(expired["result"]["isError"], true, "{expired}");
    let said = text(&expired["result"]);
    assert!(
        said.starts_with("declined: not confirmed in time"),
        "{said}"
    );
    assert_waited_for(&expired, CALL_MS);

    assert_eq!(fx.upstream_calls(), 0, "neither call reached the upstream");
    assert!(fx.wait_pending(0).is_empty(), "nothing waits any more");
    let unknown = fx.rt.tutti(&["confirm", "deny", &id]);
    assert!(!unknown.status.success());
    let states = ["pending", "denied:person", "pending", "expired"];
    assert_eq!(fx.confirmation_states(4), states);
}

#[test]
fn with_both_channels_the_first_answer_wins_and_the_audit_names_it() {
    let fx = RiskyFixture::start(Some(60_000));
    let token = fx.token_via("both", "person,agent");

    // The agent's client answers first: its accept runs the call.
    let first = fx.run_client_with("legacy", &token, "accept", &arguments());
    let asked = first["asked"].as_array().cloned().unwrap_or_default();
    assert_eq!(asked.len(), 1, "the agent's client was asked: {first}");
    let question = asked[0].as_str().unwrap_or_default();
    assert!(
        question.contains("api_token: ***") && !question.contains(SECRET),
        "{question}"
    );
    assert_ne!(first["result"]["isError"], true, "{first}");
    assert_eq!(fx.upstream_calls(), 1);

    // The agent's client never answers: the person's allow wins.
    let client = fx.spawn_client("legacy", &token, "never", &json!({}));
    fx.answer_pending("allow");
    // The client exits once it printed its result (its callback still waits).
    let second = client_answer("never", client);
    assert_ne!(second["result"]["isError"], true, "{second}");
    assert_eq!(fx.upstream_calls(), 2);

    let states = ["pending", "allowed:agent", "pending", "allowed:person"];
    assert_eq!(
        fx.confirmation_states(4),
        states,
        "the audit names who answered"
    );
    let via: Vec<String> = fx
        .destroy_records(2)
        .iter()
        .map(|r| r["confirmedVia"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(via, ["agent", "person"]);
}

#[test]
fn a_held_call_whose_client_goes_away_is_withdrawn_and_never_sent() {
    let fx = RiskyFixture::start(Some(60_000));
    let token = fx.token_via("gone", "person");
    let mut client = fx.spawn_client("legacy", &token, "accept", &json!({}));
    assert_eq!(fx.wait_pending(1).len(), 1, "the call waits");
    let _ = client.kill();
    let _ = client.wait();
    assert_eq!(fx.confirmation_states(2), ["pending", "withdrawn"]);
    assert!(
        fx.wait_pending(0).is_empty(),
        "the withdrawn call is no longer listed"
    );
    assert_eq!(fx.upstream_calls(), 0, "a withdrawn call is never sent");
}

#[test]
fn a_modern_client_waits_for_the_person_as_well() {
    let fx = RiskyFixture::start(Some(60_000));
    let token = fx.token_via("modern", "person");
    let client = fx.spawn_client("auto", &token, "accept", &json!({}));
    fx.answer_pending("allow");
    let ran = client_answer("accept", client);
    assert_eq!(
        ran["version"], "2026-07-28",
        "the client spoke 2026-07-28: {ran}"
    );
    assert_eq!(ran["asked"], json!([]), "the client is never asked: {ran}");
    assert_ne!(ran["result"]["isError"], true, "{ran}");
    assert_eq!(fx.upstream_calls(), 1);
    assert_eq!(fx.confirmation_states(2), ["pending", "allowed:person"]);
}

//! MCP beyond tools with a real client, "Python SDK client (mcp 2.3.0), both eras, against server-everything as
//! an upstream (stdio and streamable HTTP)": one SDK session per era (`tests/py/everything_sdk.py`)
//! lists and gets server-everything's prompts (`everything_…`), reads its text and binary
//! resources and its templates, completes a prompt argument, answers and declines its
//! elicitation and sampling requests, sees log messages only after asking for them, and gets a
//! subscribed resource's update; against server-everything installed as a stdio connector and
//! as a Streamable HTTP connector (started by the test).
//!
//! Eras: legacy is the SDK's `mode="legacy"` (initialize; `logging/setLevel`;
//! `resources/subscribe` with the runtime's GET stream, opened by the SDK's own, unchanged code
//! once `initialize` named the session id); modern is `mode="auto"`, which discovers 2026-07-28 (the log
//! level in each request's `_meta`; the subscription as a `subscriptions/listen` stream).

use std::time::Duration;

use serde_json::{Value, json};
use tutti_tests::{
    PySdk, Runtime, RuntimeOptions, Server, everything_http_manifest, everything_stdio_manifest,
    py_script, runtime_allowing_node,
};

const READY: Duration = Duration::from_secs(60);
const KEY: &str = "everything";
/// The script's steps, in order.
const STEPS: [&str; 11] = [
    "connected",
    "prompts",
    "resources",
    "completion",
    "logs",
    "subscription",
    "elicitation",
    "sampling",
    "elicitation-declined",
    "sampling-declined",
    "done",
];

/// One SDK session in `mode` (`legacy` or `auto`); each step's line by name.
fn session(rt: &Runtime, token: &str, transport: &str, mode: &str) -> Vec<(String, Value)> {
    let stderr = rt
        .root()
        .join(format!("everything-sdk-{transport}-{mode}.stderr"));
    let py = PySdk::spawn(
        &py_script("everything_sdk.py"),
        &[rt.frontend_url(), mode, KEY],
        token,
        stderr,
    );
    STEPS
        .iter()
        .map(|step| {
            let line = py.next(&format!("step {step} ({transport}, {mode})"));
            assert_eq!(line["event"], *step, "{transport}/{mode}: {line}");
            (step.to_string(), line)
        })
        .collect()
}

fn step<'a>(steps: &'a [(String, Value)], name: &str) -> &'a Value {
    steps
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("no step {name}"))
}

fn strs(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn first_text(prompt: &Value) -> &str {
    prompt["messages"][0]["content"]["text"]
        .as_str()
        .unwrap_or("")
}

fn assert_prompts(p: &Value, ctx: &str) {
    let names = strs(&p["names"]);
    for want in ["simple-prompt", "args-prompt", "completable-prompt"] {
        assert!(
            names.contains(&format!("{KEY}_{want}").as_str()),
            "{ctx}: {names:?}"
        );
    }
    assert!(
        names.iter().all(|n| n.starts_with("everything_")),
        "{ctx}: {names:?}"
    );
    assert!(!first_text(&p["simple"]).is_empty(), "{ctx}: {p}");
    assert!(first_text(&p["args"]).contains("Lyon"), "{ctx}: {p}");
    assert_eq!(
        first_text(&p["team"]),
        "Please promote Alice to the head of the Engineering team.",
        "{ctx}: {p}"
    );
}

fn assert_resources(r: &Value, ctx: &str) {
    let text_uri = r["textUri"].as_str().unwrap_or("");
    assert!(strs(&r["uris"]).contains(&text_uri), "{ctx}: {r}");
    let text = &r["text"]["contents"][0];
    assert_eq!(text["uri"], text_uri, "{ctx}: {r}");
    assert!(
        text["text"].as_str().is_some_and(|t| !t.is_empty()),
        "{ctx}: {r}"
    );
    let blob = &r["blob"]["contents"][0];
    assert!(
        blob["text"].is_null() && blob["uri"] == "demo://resource/dynamic/blob/7",
        "{ctx}: binary content stays a blob: {blob}"
    );
    let decoded = strs(&r["blobDecoded"]);
    assert!(
        decoded.len() == 1 && decoded[0].starts_with("Resource 7: This is a base64 blob"),
        "{ctx}: the blob's bytes: {decoded:?}"
    );
    assert!(
        r["dynamicText"]["contents"][0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("Resource 3:")),
        "{ctx}: {r}"
    );
    let templates = strs(&r["templates"]);
    for want in [
        "demo://resource/dynamic/text/{resourceId}",
        "demo://resource/dynamic/blob/{resourceId}",
    ] {
        assert!(templates.contains(&want), "{ctx}: {templates:?}");
    }
}

fn assert_completion(c: &Value, ctx: &str) {
    assert_eq!(c["department"], json!(["Engineering"]), "{ctx}: {c}");
    assert_eq!(
        c["member"],
        json!(["Alice"]),
        "{ctx}: the context argument reached the upstream: {c}"
    );
    assert_eq!(c["template"], json!(["4"]), "{ctx}: {c}");
}

/// A tool call's step: the client was asked `kind` once; the result's text (the call must have
/// a result).
fn asked_once<'a>(s: &'a Value, kind: &str, ctx: &str) -> &'a str {
    let text = asked(s, kind, ctx);
    assert!(s["failed"].is_null(), "{ctx}: the call failed: {s}");
    text
}

/// Like [`asked_once`], for a call that may have failed.
fn asked<'a>(s: &'a Value, kind: &str, ctx: &str) -> &'a str {
    let kinds: Vec<&str> = s["asked"]
        .as_array()
        .map(|a| a.iter().filter_map(|q| q["kind"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(kinds, [kind], "{ctx}: {s}");
    s["text"].as_str().unwrap_or("")
}

fn assert_requests(steps: &[(String, Value)], legacy: bool, ctx: &str) {
    let e = step(steps, "elicitation");
    let text = asked_once(e, "elicitation", ctx);
    assert!(
        e["isError"] == false && text.contains("accept") && text.contains("Ada Lovelace"),
        "{ctx}: the upstream got the answer: {e}"
    );
    let s = step(steps, "sampling");
    let text = asked_once(s, "sampling", ctx);
    assert!(
        s["isError"] == false && text.contains("sampled by the everything test"),
        "{ctx}: the upstream got the sample: {s}"
    );
    let d = step(steps, "elicitation-declined");
    let text = asked_once(d, "elicitation", ctx);
    assert!(
        text.contains("decline") && !text.contains("Ada Lovelace"),
        "{ctx}: {d}"
    );
    let d = step(steps, "sampling-declined");
    if legacy {
        let text = asked_once(d, "sampling", ctx);
        assert!(
            d["isError"] == true && text.contains("the user declined to sample"),
            "{ctx}: the upstream got the refusal and failed its tool: {d}"
        );
    } else {
        // 2026-07-28 `inputResponses` carry results only: the SDK ends the call at the client
        // with its callback's error (SEP-2322 driver); the runtime's parked call expires.
        asked(d, "sampling", ctx);
        assert!(
            d["failed"] == true && d["code"] == -1 && d["error"] == "the user declined to sample",
            "{ctx}: the refusal ends the call: {d}"
        );
    }
}

fn assert_logs(l: &Value, legacy: bool, ctx: &str) {
    assert_eq!(l["before"], json!([]), "{ctx}: no level, no messages: {l}");
    let after = l["after"].as_array().cloned().unwrap_or_default();
    assert!(!after.is_empty(), "{ctx}: messages after the level: {l}");
    for log in &after {
        assert!(
            log["logger"]
                .as_str()
                .is_some_and(|g| g.starts_with("everything/")),
            "{ctx}: tagged <key>/: {log}"
        );
    }
    if legacy {
        assert_eq!(l["setLevel"], "ok", "{ctx}: {l}");
    } else {
        // 2026-07-28 has no `logging/setLevel`: the level is in each request's `_meta`.
        assert_eq!(l["setLevel"]["code"], -32601, "{ctx}: {l}");
    }
}

fn assert_subscription(s: &Value, text_uri: &Value, legacy: bool, ctx: &str) {
    assert_eq!(
        s["update"], *text_uri,
        "{ctx}: the subscribed URI's update: {s}"
    );
    if legacy {
        assert_eq!(s["via"], "resources/subscribe", "{ctx}: {s}");
        assert_eq!(s["subscribed"], json!({}), "{ctx}: {s}");
    } else {
        assert_eq!(s["via"], "subscriptions/listen", "{ctx}: {s}");
        assert_eq!(
            s["honored"]["resourceSubscriptions"],
            json!([text_uri]),
            "{ctx}: {s}"
        );
    }
}

/// Both eras against the connector `everything` of `rt`.
fn both_eras(rt: &Runtime, transport: &str) {
    let token = rt.issue_token("py", transport);
    for (mode, legacy) in [("legacy", true), ("auto", false)] {
        let ctx = format!("{transport}/{mode}");
        let steps = session(rt, &token, transport, mode);
        let version = step(&steps, "connected")["protocolVersion"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        match legacy {
            true => assert!(version.starts_with("2025-"), "{ctx}: {version}"),
            false => assert_eq!(version, "2026-07-28", "{ctx}"),
        }
        assert_prompts(step(&steps, "prompts"), &ctx);
        let resources = step(&steps, "resources");
        assert_resources(resources, &ctx);
        assert_completion(step(&steps, "completion"), &ctx);
        assert_requests(&steps, legacy, &ctx);
        assert_logs(step(&steps, "logs"), legacy, &ctx);
        assert_subscription(
            step(&steps, "subscription"),
            &resources["textUri"],
            legacy,
            &ctx,
        );
    }
}

#[test]
fn the_python_sdk_uses_everything_over_stdio_in_both_eras() {
    let mut rt = runtime_allowing_node();
    rt.install_ok(&everything_stdio_manifest(KEY), &[]);
    rt.wait_status(KEY, "ready", READY);
    both_eras(&rt, "stdio");
}

#[test]
fn the_python_sdk_uses_everything_over_streamable_http_in_both_eras() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let (_server, url) = Server::everything_http(rt.root(), "everything.stderr", READY);
    rt.install_ok(&everything_http_manifest(KEY, &url), &[]);
    rt.wait_status(KEY, "ready", READY);
    both_eras(&rt, "http");
}

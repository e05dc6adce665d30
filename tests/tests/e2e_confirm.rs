//! Issue 22 item 5 over the real runtime: a session issued with `--confirm high` has each call
//! of a high-risk tool confirmed by the person through the client's elicitation (the official
//! Python SDK client, mcp 2.3.0, legacy surface) before anything is sent upstream (the fixture
//! records every message it gets). Accept → the call runs; decline → `isError` `declined:`
//! and no `tools/call` upstream; a client without the capability → `isError` "could not be
//! asked"; a session without `--confirm` is never asked; the audit log holds each decision.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tutti_tests::{Runtime, RuntimeOptions, require_python_venv};

const READY: Duration = Duration::from_secs(30);

/// Calls `fx_destroy` once (and `fx_echo`), answering a question with `argv[1]`
/// (`accept`, `decline`, or `none`: no elicitation capability); prints one JSON line.
const PY_CLIENT: &str = r#"
import asyncio, json, os, sys
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

async def main():
    answer, url = sys.argv[1], sys.argv[2]
    headers = {"Authorization": "Bearer " + os.environ["TUTTI_TEST_TOKEN"]}
    asked = []

    async def on_elicit(ctx, params):
        asked.append(params.message)
        return types.ElicitResult(action=answer, content={} if answer == "accept" else None)

    kw = {} if answer == "none" else dict(elicitation_callback=on_elicit)
    async with httpx2.AsyncClient(headers=headers, timeout=60) as hc:
        async with Client(streamable_http_client(url, http_client=hc), mode="legacy", **kw) as c:
            r = await c.call_tool("fx_destroy", {})
            d = r.model_dump(mode="json", by_alias=True, exclude_none=True)
            print(json.dumps({"asked": asked, "result": d}), flush=True)

asyncio.run(main())
"#;

fn run_client(rt: &Runtime, token: &str, answer: &str) -> Value {
    let venv = require_python_venv();
    let script = rt.root().join("confirm_client.py");
    std::fs::write(&script, PY_CLIENT).unwrap_or_else(|e| panic!("write script: {e}"));
    let out = Command::new(venv.join("bin").join("python"))
        .arg(&script)
        .args([answer, rt.frontend_url()])
        .env("TUTTI_TEST_TOKEN", token)
        .env("PYTHONWARNINGS", "ignore")
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .env_remove("ALL_PROXY")
        .env_remove("all_proxy")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run the Python client: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "Python client ({answer}) failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("client ({answer}) printed no JSON ({e}): {stdout}"))
}

fn issue(rt: &Runtime, session: &str, confirm: bool) -> String {
    let mut args = vec!["session", "issue", "--workspace", "w", "--session", session];
    if confirm {
        args.extend(["--confirm", "high"]);
    }
    let out = rt.tutti_ok(&args);
    let v: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    let auth = v["mcpServers"][0]["headers"]["Authorization"]
        .as_str()
        .unwrap_or_else(|| panic!("no Authorization header: {v}"));
    auth.trim_start_matches("Bearer ").to_owned()
}

/// How many `tools/call` of `destroy` the fixture got.
fn upstream_calls(record: &Path) -> usize {
    std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|m| m["method"] == "tools/call" && m["params"]["name"] == "destroy")
        .count()
}

fn text(result: &Value) -> String {
    tutti_tests::result_texts(result)
}

/// The audit `call` records of `fx_destroy` by session, waiting for `n` of them.
fn destroy_records(rt: &Runtime, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let records: Vec<Value> = rt
            .audit_lines()
            .into_iter()
            .filter(|l| l["event"] == "call" && l["tool"] == "fx_destroy")
            .collect();
        if records.len() >= n || Instant::now() > deadline {
            return records;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn high_risk_calls_are_confirmed_by_the_person_and_every_decision_is_audited() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let record = rt.root().join("fixture-record.jsonl");
    let record_arg = record.to_string_lossy().into_owned();
    let manifest =
        tutti_tests::fixture_connector("fx", &["--tools", "destroy,echo", "--record", &record_arg]);
    rt.install_ok(&manifest, &[]);
    rt.wait_status("fx", "ready", READY);

    // Declined: nothing reaches the upstream.
    let confirmed = issue(&rt, "confirmed", true);
    let declined = run_client(&rt, &confirmed, "decline");
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
        upstream_calls(&record),
        0,
        "a declined call is not sent upstream"
    );

    // Accepted: the call goes through.
    let accepted = run_client(&rt, &confirmed, "accept");
    assert_eq!(
        accepted["asked"].as_array().map(Vec::len),
        Some(1),
        "{accepted}"
    );
    assert_ne!(accepted["result"]["isError"], true, "{accepted}");
    assert_eq!(
        upstream_calls(&record),
        1,
        "the accepted call reached the upstream"
    );

    // A client that cannot be asked: refused, nothing sent.
    let unable = run_client(&rt, &confirmed, "none");
    assert_eq!(unable["result"]["isError"], true, "{unable}");
    assert!(
        text(&unable["result"]).contains("could not be asked"),
        "{unable}"
    );
    assert_eq!(
        upstream_calls(&record),
        1,
        "nothing sent for the unasked call"
    );

    // Without --confirm: never asked, the call runs.
    let plain = issue(&rt, "plain", false);
    let ran = run_client(&rt, &plain, "decline");
    assert_eq!(
        ran["asked"],
        json!([]),
        "a plain session is never asked: {ran}"
    );
    assert_ne!(ran["result"]["isError"], true, "{ran}");
    assert_eq!(upstream_calls(&record), 2);

    let records = destroy_records(&rt, 4);
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

//! The offer size limits of `tutti_proto::limits` hold for prompts,
//! resources and resource templates as they do for tools. A connector whose upstream offers
//! too many or too large prompts or resources is refused at commit, once, with a `lastError`
//! naming the list, its size and the limits; the other connectors stay ready and serve.
#![cfg(unix)]

use std::time::Duration;

use serde_json::{Value, json};
use tutti_tests::{Mcp, Runtime, RuntimeOptions};

const SETTLE: Duration = Duration::from_secs(90);

/// Waits until `key` settles (ready, failed, or restarted), asserts it was refused with a
/// reason containing every one of `says`, and that it stays refused without restarts.
fn assert_refused(rt: &Runtime, key: &str, says: &[&str]) {
    let entry = rt.wait_connector(key, SETTLE, "ready or failed", |c| {
        c["status"] == "ready"
            || c["status"] == "failed"
            || c["status"] == "crash_loop"
            || c["restarts"].as_u64().unwrap_or(0) > 1
    });
    assert_eq!(entry["status"], "failed", "{key} is refused: {entry}");
    let error = entry["lastError"].as_str().unwrap_or_default();
    for said in says {
        assert!(
            error.contains(said),
            "{key}'s lastError names {said:?}: {entry}"
        );
    }
    std::thread::sleep(Duration::from_secs(2));
    let later = rt.connector_status(key).unwrap_or_default();
    assert_eq!(later["status"], "failed", "{later}");
    assert_eq!(later["restarts"], entry["restarts"], "not retried: {later}");
}

fn result_of<H>(what: &str, (status, _, body): &(u16, H, Value)) -> Value {
    assert_eq!(*status, 200, "{what}: HTTP {status}: {body}");
    match body.get("result") {
        Some(r) => r.clone(),
        None => panic!("{what}: no result in {body}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn too_many_or_too_large_prompts_and_resources_refuse_only_their_connector() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let fixture = |key: &str, extra: &[&str]| {
        let mut args = vec!["--tools", "echo"];
        args.extend_from_slice(extra);
        rt.private_fixture_connector(key, &args)
    };
    // 12,000 prompts and 12,000 resources: over the count limits (each list is ~1 MB, well
    // within one gRPC message, so only the limit refuses them). One resource with a 5 MB
    // description: over the byte limit.
    let prompts = fixture("prompts", &["--many-prompts", "12000"]);
    let resources = fixture("resources", &["--many-resources", "12000"]);
    let wide = fixture("wide", &["--big-resource", "5000000"]);
    let fine = fixture("fine", &["--prompt", "hello", "--resource", "fine://doc"]);
    for manifest in [&prompts, &resources, &wide, &fine] {
        rt.install_ok(manifest, &[]);
    }
    assert_refused(
        &rt,
        "prompts",
        &[
            "the prompt set is too large: 12000 prompts",
            "limits: 10000 prompts",
        ],
    );
    assert_refused(
        &rt,
        "resources",
        &[
            "the resource set is too large: 12000 resources",
            "limits: 10000 resources",
        ],
    );
    assert_refused(
        &rt,
        "wide",
        &[
            "the resource set is too large: 1 resources",
            "limits: 10000 resources, 4194304 bytes",
        ],
    );

    // The others are unaffected: ready, listed, served.
    rt.wait_status("fine", "ready", Duration::from_secs(30));
    let token = rt.issue_token("w", "limits");
    let mcp = Mcp::legacy(rt.frontend_url(), &token);
    mcp.initialize().await;
    let listed = result_of(
        "prompts/list",
        &mcp.request("prompts/list", json!({})).await,
    );
    let names: Vec<&str> = listed["prompts"]
        .as_array()
        .map(|a| a.iter().filter_map(|p| p["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        names,
        ["fine_hello"],
        "only the fine connector's prompt: {listed}"
    );
    let got = result_of(
        "prompts/get",
        &mcp.request("prompts/get", json!({"name": "fine_hello"}))
            .await,
    );
    assert!(got["messages"][0]["content"]["text"].is_string(), "{got}");
    let read = result_of(
        "resources/read",
        &mcp.request("resources/read", json!({"uri": "fine://doc"}))
            .await,
    );
    assert!(read["contents"][0]["text"].is_string(), "{read}");
    let audit = rt.log("audit.jsonl");
    assert!(
        audit.contains("\"refuse\"") && audit.contains("the prompt set is too large"),
        "the refusal is audited: {audit}"
    );
}

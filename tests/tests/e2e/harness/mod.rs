//! Smoke test of the e2e harness itself: a real `tutti up`, one fixture connector, one call
//! through the frontend in each era.

mod fixture;

use std::time::Duration;

use serde_json::json;
use tutti_tests::{Mcp, Runtime, RuntimeOptions, fixture_connector};

#[tokio::test(flavor = "multi_thread")]
async fn runtime_serves_a_fixture_connector() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    assert!(rt.frontend_url().starts_with("http://127.0.0.1:"));
    rt.install_ok(&fixture_connector("fx", &["--tools", "echo,add"]), &[]);
    let entry = rt.wait_status("fx", "ready", Duration::from_secs(20));
    assert_eq!(entry["key"], json!("fx"));

    let token = rt.issue_token("w", "s");
    assert!(token.starts_with("tts_"), "token format");

    let legacy = Mcp::legacy(rt.frontend_url(), &token);
    legacy.initialize().await;
    let names: Vec<String> = legacy
        .list_tools()
        .await
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(names, ["fx_add", "fx_echo"]);
    let sum = legacy.call_tool_ok("fx_add", json!({"a": 2, "b": 3})).await;
    assert_eq!(sum["structuredContent"], json!({"sum": 5}));

    let modern = Mcp::modern(rt.frontend_url(), &token);
    let echo = modern
        .call_tool_ok("fx_echo", json!({"message": "hi"}))
        .await;
    assert_eq!(echo["content"][0]["text"], json!("hi"));

    // The kernel's clean stop (SIGTERM -> exit 0, no process left) belongs to the e2e tests;
    // `Drop` stops the runtime here.
    assert!(rt.pid().is_some());
}

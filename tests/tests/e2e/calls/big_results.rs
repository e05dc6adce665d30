//! Large tool results through the runtime, whose bytes go from the upstream's
//! stdout line to the client's socket as slices (`CallToolReply.result_bytes`, a frame read
//! into a reused buffer, a response body of several pieces). Every result must still arrive
//! whole and exact, with its `Content-Length`, on both data planes, in both eras, on the
//! event-stream answer of a call that asked for progress, one after another on one pooled
//! frame connection (buffer reuse) and side by side on several.
#![cfg(unix)]

use std::time::Duration;

use serde_json::{Value, json};
use tutti_tests::{Mcp, Runtime, RuntimeOptions, fixture_connector};

const READY: Duration = Duration::from_secs(20);
const MIB: usize = 1024 * 1024;

fn runtime(plane: &str) -> (Runtime, String) {
    let mut rt = Runtime::start(RuntimeOptions {
        env: vec![("TUTTI_DATA_PLANE".to_owned(), plane.to_owned())],
        ..RuntimeOptions::default()
    });
    rt.install_ok(
        &fixture_connector("bg", &["--tools", "big,exact,echo"]),
        &[],
    );
    rt.wait_status("bg", "ready", READY);
    let token = rt.issue_token("w", "s");
    (rt, token)
}

/// One legacy `tools/call` of `big` with `bytes`, over a raw HTTP request so that the body
/// is checked byte by byte: the envelope around the upstream's text, its exact length, and
/// the text itself.
async fn big_call(http: &reqwest::Client, url: &str, token: &str, id: u64, bytes: usize) {
    let request = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                         "params": {"name": "bg_big", "arguments": {"bytes": bytes}}});
    let response = http
        .post(url)
        .bearer_auth(token)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2025-06-18")
        .body(request.to_string())
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {url}: {e}"));
    assert_eq!(response.status().as_u16(), 200);
    let length = response
        .headers()
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let body = response.bytes().await.unwrap_or_default();
    assert_eq!(
        length,
        Some(body.len()),
        "Content-Length of a {bytes}-byte result"
    );
    let prefix = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"#);
    assert!(
        body.starts_with(prefix.as_bytes()) && body.ends_with(b"}}"),
        "envelope of a {bytes}-byte result: {}",
        String::from_utf8_lossy(&body[..body.len().min(200)])
    );
    let parsed: Value = serde_json::from_slice(&body).unwrap_or_default();
    let text = parsed["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or("");
    assert_eq!(text.len(), bytes, "the text of a {bytes}-byte result");
    assert!(
        text.bytes().all(|b| b == b'x'),
        "the text of a {bytes}-byte result"
    );
}

/// Results of every size, one after another on the same pooled frame connection (so the
/// reply buffer is used again, and a reply larger than it keeps no allocation) and over the
/// gRPC plane, come back whole with their exact length.
#[tokio::test(flavor = "multi_thread")]
async fn big_results_arrive_whole_one_after_another_on_both_planes() {
    for plane in ["frames", "grpc"] {
        let (rt, token) = runtime(plane);
        let url = rt.frontend_url().to_string();
        let http = reqwest::Client::new();
        let sizes = [MIB, 10, 3 * MIB, MIB, 0, 64 * 1024, 5 * MIB + 7, 100];
        for (n, bytes) in sizes.into_iter().enumerate() {
            big_call(&http, &url, &token, n as u64 + 1, bytes).await;
        }
    }
}

/// Big calls side by side (several frame connections, buffers still held by responses being
/// written while the next replies are read) all arrive whole.
#[tokio::test(flavor = "multi_thread")]
async fn concurrent_big_results_arrive_whole() {
    let (rt, token) = runtime("frames");
    let url = rt.frontend_url().to_string();
    let mut clients = Vec::new();
    for c in 0..4u64 {
        let (url, token) = (url.clone(), token.clone());
        clients.push(tokio::spawn(async move {
            let http = reqwest::Client::new();
            for i in 0..3u64 {
                big_call(&http, &url, &token, c * 10 + i, MIB + (c as usize) * 4099).await;
            }
        }));
    }
    for client in clients {
        assert!(client.await.is_ok(), "a client failed");
    }
}

/// The modern surface gets a big result whole too (its era adds `resultType` and `_meta`
/// around the upstream's members, which are kept as they came), and exact text keeps its
/// bytes (number spelling, non-ASCII) on both surfaces.
#[tokio::test(flavor = "multi_thread")]
async fn the_modern_surface_and_exact_text_keep_every_byte() {
    let (rt, token) = runtime("frames");
    let modern = Mcp::modern(rt.frontend_url(), &token);
    let result = modern
        .call_tool_ok("bg_big", json!({"bytes": 2 * MIB + 1}))
        .await;
    assert_eq!(result["resultType"], "complete");
    let text = result["content"][0]["text"].as_str().unwrap_or("");
    assert_eq!(text.len(), 2 * MIB + 1);
    for client in [
        Mcp::legacy(rt.frontend_url(), &token),
        Mcp::modern(rt.frontend_url(), &token),
    ] {
        let result = client.call_tool_ok("bg_exact", json!({})).await;
        assert_eq!(
            result["content"][0]["text"],
            tutti_tests::fixture::EXACT_TEXT,
            "{result}"
        );
    }
}

/// A call that asks for progress is answered as an event stream (over the worker's
/// streaming call); its big result is the last event, whole.
#[tokio::test(flavor = "multi_thread")]
async fn a_big_result_on_an_event_stream_arrives_whole() {
    let (rt, token) = runtime("frames");
    let legacy = Mcp::legacy(rt.frontend_url(), &token);
    let mut stream = legacy
        .stream(
            "tools/call",
            json!({"name": "bg_big", "arguments": {"bytes": MIB},
                   "_meta": {"progressToken": "p1"}}),
            &[],
        )
        .await;
    assert_eq!(stream.status, 200);
    let mut last = None;
    while let Some(event) = stream.next_event(Duration::from_secs(20)).await {
        let done = event.get("result").is_some() || event.get("error").is_some();
        last = Some(event);
        if done {
            break;
        }
    }
    let last = last.unwrap_or_default();
    let text = last["result"]["content"][0]["text"].as_str().unwrap_or("");
    assert_eq!(
        text.len(),
        MIB,
        "{}",
        &last.to_string()[..200.min(last.to_string().len())]
    );
}

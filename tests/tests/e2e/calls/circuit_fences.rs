//! The circuit breaker with the lifecycle: the circuit breaker counts a connector's
//! failures (worker gone, timeouts, transport errors), not the kernel's own fences. An
//! upgrade under calls drains them; an uninstall under calls ends them at once with
//! `[MCP_UNAVAILABLE]` (SPEC §5); neither opens the circuit, so the connector installed
//! again answers at once, and the audit log has no `circuit` record for it.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tutti_tests::{Mcp, Runtime, RuntimeOptions, fixture_connector};

const READY: Duration = Duration::from_secs(30);
/// Fewer than the calls in flight, so counting the fenced calls would open the circuit.
const FAILURES: u64 = 2;
const IN_FLIGHT: usize = 4;

fn manifest(version: &str, record: &Path) -> Value {
    let record = record.to_string_lossy().into_owned();
    let mut m = fixture_connector("fx", &["--tools", "sleep,echo", "--record", &record]);
    m["version"] = json!(version);
    m["timeouts"] = json!({"callMs": 60_000});
    m["circuit"] = json!({"failures": FAILURES, "windowMs": 60_000, "openMs": 60_000});
    m
}

/// How many `tools/call` of `sleep` the fixture processes got.
fn sleeps_seen(record: &Path) -> usize {
    std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|m| m["method"] == "tools/call" && m["params"]["name"] == "sleep")
        .count()
}

/// Starts `IN_FLIGHT` calls of `fx_sleep` and returns once the upstream got all of them.
async fn calls_in_flight(
    mcp: &Arc<Mcp>,
    record: &Path,
    ms: u64,
) -> Vec<tokio::task::JoinHandle<Value>> {
    let before = sleeps_seen(record);
    let calls: Vec<_> = (0..IN_FLIGHT)
        .map(|_| {
            let mcp = mcp.clone();
            tokio::spawn(async move {
                let (_, _, body) = mcp.call_tool("fx_sleep", json!({"ms": ms})).await;
                body
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    while sleeps_seen(record) < before + IN_FLIGHT {
        assert!(
            Instant::now() < deadline,
            "the calls did not reach the upstream"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    calls
}

async fn answers(calls: Vec<tokio::task::JoinHandle<Value>>) -> Vec<Value> {
    let mut out = Vec::new();
    for call in calls {
        out.push(call.await.unwrap_or_else(|e| panic!("call task: {e}")));
    }
    out
}

fn circuit_records(rt: &Runtime) -> Vec<Value> {
    rt.audit_lines()
        .into_iter()
        .filter(|l| l["event"] == "circuit" && l["connector"] == "fx")
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn upgrades_and_uninstalls_under_calls_do_not_open_the_circuit() {
    let (mut rt, record, token) = tokio::task::block_in_place(|| {
        let mut rt = Runtime::start(RuntimeOptions::default());
        let record = rt.root().join("fixture-record.jsonl");
        rt.install_ok(&manifest("1.0.0", &record), &[]);
        rt.wait_status("fx", "ready", READY);
        let token = rt.issue_token("w", "s");
        (rt, record, token)
    });
    let mcp = Arc::new(Mcp::legacy(rt.frontend_url(), &token));
    mcp.initialize().await;

    // Upgrade under calls: the old generation drains them, each is answered.
    let calls = calls_in_flight(&mcp, &record, 3000).await;
    tokio::task::block_in_place(|| {
        rt.install_ok(&manifest("2.0.0", &record), &[]);
        rt.wait_connector("fx", READY, "2.0.0 ready", |c| {
            c["version"] == "2.0.0" && c["status"] == "ready"
        });
    });
    for body in answers(calls).await {
        assert!(body["result"].is_object(), "drained, answered: {body}");
    }

    // Uninstall under calls: fenced, each ends at once with [MCP_UNAVAILABLE].
    let calls = calls_in_flight(&mcp, &record, 30_000).await;
    tokio::task::block_in_place(|| rt.tutti_ok(&["connector", "uninstall", "fx"]));
    for body in answers(calls).await {
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("[MCP_UNAVAILABLE] fx:") && !message.contains("circuit"),
            "a fenced call: {body}"
        );
    }

    // Installed again: it answers at once; the fences opened no circuit.
    tokio::task::block_in_place(|| {
        rt.install_ok(&manifest("2.0.0", &record), &[]);
        rt.wait_status("fx", "ready", READY);
    });
    mcp.list_tools().await;
    let (_, _, body) = mcp.call_tool("fx_echo", json!({"message": "after"})).await;
    assert!(
        body["result"].is_object(),
        "the reinstalled connector answers, its circuit is closed: {body}"
    );
    tokio::task::block_in_place(|| {
        let status = rt.connector_status("fx").unwrap_or_default();
        assert_ne!(status["circuit"], "open", "{status}");
        assert_eq!(
            circuit_records(&rt),
            Vec::<Value>::new(),
            "no circuit records"
        );
    });
}

//! The circuit breaker (SPEC §12): timeouts open a connector's circuit after N
//! failures; calls then fail at once with the circuit message; after `openMs` one trial call
//! goes through and closes it; `isError` results and JSON-RPC errors never open it; status
//! and the audit log show it.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tutti_tests::{Mcp, Runtime, RuntimeOptions, fixture_connector};

const READY: Duration = Duration::from_secs(20);
const FAILURES: u64 = 3;
const OPEN_MS: u64 = 3000;

fn runtime(key: &str, tools: &str) -> (Runtime, String) {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let mut manifest = fixture_connector(key, &["--tools", tools]);
    manifest["timeouts"] = json!({"callMs": 300});
    manifest["circuit"] = json!({"failures": FAILURES, "windowMs": 60_000, "openMs": OPEN_MS});
    rt.install_ok(&manifest, &[]);
    rt.wait_status(key, "ready", READY);
    let token = rt.issue_token("w", "s");
    (rt, token)
}

fn error_message(body: &Value) -> String {
    body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn circuit_records(rt: &Runtime, key: &str) -> Vec<String> {
    rt.audit_lines()
        .into_iter()
        .filter(|l| l["event"] == "circuit" && l["connector"] == key)
        .map(|l| l["state"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn timeouts_open_the_circuit_calls_fail_at_once_and_a_trial_closes_it() {
    let (rt, token) = tokio::task::block_in_place(|| runtime("slow", "sleep"));
    let mcp = Mcp::legacy(rt.frontend_url(), &token);
    mcp.initialize().await;
    for i in 0..FAILURES {
        let (_, _, body) = mcp.call_tool("slow_sleep", json!({"ms": 5000})).await;
        let msg = error_message(&body);
        assert!(msg.starts_with("[MCP_TIMEOUT] slow:"), "call {i}: {body}");
    }
    // Open: every call fails at once with the circuit message, and nothing waits.
    let mut took = Vec::new();
    for _ in 0..7 {
        let started = Instant::now();
        let (_, _, body) = mcp.call_tool("slow_sleep", json!({"ms": 10})).await;
        took.push(started.elapsed());
        let msg = error_message(&body);
        assert!(
            msg.starts_with(&format!(
                "[MCP_UNAVAILABLE] slow: circuit open after {FAILURES} failures; retry in "
            )) && msg.ends_with(" s"),
            "{body}"
        );
        assert_eq!(body["error"]["data"]["tutti"]["reason"], "circuit_open");
    }
    took.sort();
    // Round trips over loopback HTTP on a loaded machine: the median says what the path
    // costs, the maximum only that nothing waited for the upstream.
    assert!(
        took[3] < Duration::from_millis(5),
        "median {:?} of {took:?}",
        took[3]
    );
    assert!(took[6] < Duration::from_millis(250), "{took:?}");

    let entry = tokio::task::block_in_place(|| {
        rt.wait_connector("slow", Duration::from_secs(5), "circuit open", |c| {
            c["circuit"] == "open"
        })
    });
    let note = entry["circuitNote"].as_str().unwrap_or_default();
    assert!(
        note.starts_with(&format!(
            "slow: circuit open after {FAILURES} failures; retry in "
        )),
        "{entry}"
    );
    let table = tokio::task::block_in_place(|| rt.tutti_ok(&["status"]));
    assert!(table.contains("(circuit open)"), "{table}");

    // After openMs one trial call goes through and closes the circuit.
    tokio::time::sleep(Duration::from_millis(OPEN_MS + 200)).await;
    let result = mcp.call_tool_ok("slow_sleep", json!({"ms": 10})).await;
    assert_ne!(result["isError"], true, "{result}");
    let (_, _, body) = mcp.call_tool("slow_sleep", json!({"ms": 10})).await;
    assert!(body.get("result").is_some(), "closed again: {body}");
    tokio::task::block_in_place(|| {
        rt.wait_connector("slow", Duration::from_secs(5), "circuit closed", |c| {
            c["circuit"] == "closed"
        })
    });
    let states = tokio::task::block_in_place(|| circuit_records(&rt, "slow"));
    assert_eq!(states, ["open", "half_open", "closed"], "audit: {states:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_trial_opens_it_again() {
    let (rt, token) = tokio::task::block_in_place(|| runtime("slow", "sleep"));
    let mcp = Mcp::legacy(rt.frontend_url(), &token);
    mcp.initialize().await;
    for _ in 0..FAILURES {
        mcp.call_tool("slow_sleep", json!({"ms": 5000})).await;
    }
    tokio::time::sleep(Duration::from_millis(OPEN_MS + 200)).await;
    let (_, _, body) = mcp.call_tool("slow_sleep", json!({"ms": 5000})).await;
    assert!(
        error_message(&body).starts_with("[MCP_TIMEOUT]"),
        "the trial: {body}"
    );
    let (_, _, body) = mcp.call_tool("slow_sleep", json!({"ms": 10})).await;
    assert!(
        error_message(&body).contains("circuit open after"),
        "open again: {body}"
    );
    let states = tokio::task::block_in_place(|| {
        rt.wait_connector("slow", Duration::from_secs(5), "circuit open", |c| {
            c["circuit"] == "open"
        });
        circuit_records(&rt, "slow")
    });
    assert_eq!(states, ["open", "half_open", "open"], "audit: {states:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn tool_errors_and_upstream_errors_never_open_it() {
    let (rt, token) = tokio::task::block_in_place(|| runtime("bad", "fail,rpc_error"));
    let mcp = Mcp::legacy(rt.frontend_url(), &token);
    mcp.initialize().await;
    for _ in 0..(FAILURES * 3) {
        let result = mcp.call_tool_ok("bad_fail", json!({})).await;
        assert_eq!(result["isError"], true, "{result}");
        let (_, _, body) = mcp.call_tool("bad_rpc_error", json!({})).await;
        assert_eq!(body["error"]["code"], -32001, "{body}");
    }
    let entry = tokio::task::block_in_place(|| rt.connector_status("bad")).unwrap_or_default();
    assert_eq!(entry["circuit"], "closed", "{entry}");
    assert!(tokio::task::block_in_place(|| circuit_records(&rt, "bad")).is_empty());
}

#[test]
fn bad_circuit_settings_are_refused_at_install() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let mut manifest = fixture_connector("cb", &["--tools", "echo"]);
    manifest["circuit"] = json!({"failures": 0, "openMs": "soon"});
    let out = rt.install_dir(&manifest, &[]);
    assert!(!out.status.success());
    let err = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        err.contains("circuit.failures: must be a positive integer"),
        "{err}"
    );
    assert!(
        err.contains("circuit.openMs: must be a positive integer"),
        "{err}"
    );
}

#[cfg(unix)]
/// Calls `chaos_echo` until `stop` is set; each call's outcome is ignored (calls to a killed
/// worker fail, which is what feeds the breaker).
async fn call_until(mcp: Mcp, stop: std::sync::Arc<std::sync::atomic::AtomicBool>) {
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        let _ = mcp.call_tool("chaos_echo", json!({"message": "x"})).await;
    }
}

/// Worker deaths are the supervisor's business, not the breaker's: three clients call while
/// the worker is SIGKILLed every 1.5 s for 10 s (the failed calls open the circuit of the
/// generation that died), and once the next generation is committed a call succeeds within
/// 2 s: a newly committed generation starts with a closed circuit.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_killed_again_and_again_leaves_no_open_circuit_behind() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let mut rt = Runtime::start(RuntimeOptions::default());
    rt.install_ok(&fixture_connector("chaos", &["--tools", "echo"]), &[]);
    rt.wait_status("chaos", "ready", READY);
    let token = rt.issue_token("w", "s");
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for _ in 0..3 {
        let mcp = Mcp::legacy(rt.frontend_url(), &token);
        mcp.initialize().await;
        clients.push(tokio::spawn(call_until(mcp, stop.clone())));
    }
    for _ in 0..7 {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        for worker in rt.workers().into_iter().filter(|w| w.key == "chaos") {
            if let Ok(pid) = i32::try_from(worker.pid) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
    stop.store(true, Ordering::SeqCst);
    for client in clients {
        let _ = client.await;
    }
    tokio::task::block_in_place(|| rt.wait_status("chaos", "ready", READY));
    let ready = Instant::now();
    let mcp = Mcp::legacy(rt.frontend_url(), &token);
    mcp.initialize().await;
    let mut last = Value::Null;
    while ready.elapsed() < Duration::from_secs(2) {
        let (_, _, body) = mcp
            .call_tool("chaos_echo", json!({"message": "after"}))
            .await;
        if body["result"]["content"][0]["text"] == "after" {
            return;
        }
        last = body;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no call succeeded within 2 s of the new generation being ready: {last}");
}

//! Telemetry export under pressure, over the real runtime: spans an export queue drops are counted and shown
//! (`tutti status`, the kernel's `tutti.telemetry.dropped` metric), and a receiver that never
//! answers does not hold up stopping the runtime.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tutti_tests::otlp::OtlpReceiver;
use tutti_tests::{Mcp, Runtime, RuntimeOptions, fixture_connector};

const READY: Duration = Duration::from_secs(30);

/// A loopback port that takes connections (the kernel's backlog) but never answers: every
/// export to it waits for its timeout. Keep it alive for as long as it should stay stuck.
fn stuck_receiver() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}"));
    let addr = listener
        .local_addr()
        .unwrap_or_else(|e| panic!("local addr: {e}"));
    (listener, format!("http://{addr}"))
}

/// Spans go to `traces` (with a queue of 2 spans, exported one at a time); metrics to
/// `metrics`, every 300 ms.
fn otel_env(traces: &str, metrics: &str) -> Vec<(String, String)> {
    [
        (
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            format!("{traces}/v1/traces"),
        ),
        ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", metrics.to_owned()),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "2".into()),
        ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "1".into()),
        ("OTEL_BSP_SCHEDULE_DELAY", "50".into()),
        ("OTEL_METRIC_EXPORT_INTERVAL", "300".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// A runtime with fixture connector `fx` that has answered `calls` echo calls.
async fn runtime_after_calls(env: Vec<(String, String)>, calls: usize) -> Runtime {
    let mut rt = Runtime::start(RuntimeOptions {
        env,
        ..RuntimeOptions::default()
    });
    rt.install_ok(&fixture_connector("fx", &["--tools", "echo"]), &[]);
    rt.wait_status("fx", "ready", READY);
    let token = rt.issue_token("w", "s");
    let mcp = Mcp::legacy(rt.frontend_url(), &token);
    mcp.initialize().await;
    for i in 0..calls {
        mcp.call_tool_ok("fx_echo", json!({"message": format!("m{i}")}))
            .await;
    }
    rt
}

/// `tutti status --json` once `pred` holds on it (15 s at most).
fn wait_status(rt: &Runtime, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let status = rt.status_json();
        if pred(&status) {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "status never showed {what}: {status}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_dropped_by_a_full_export_queue_are_counted_in_status_and_exported_as_a_metric() {
    // Export off: nothing is counted, and status says nothing about it.
    let rt = runtime_after_calls(Vec::new(), 3).await;
    let status = rt.status_json();
    assert!(
        status.get("telemetryDropped").is_none(),
        "no export, no drop count: {status}"
    );
    assert!(!rt.tutti_ok(&["status"]).contains("telemetry:"));
    drop(rt);

    let (_stuck, traces) = stuck_receiver();
    let metrics = OtlpReceiver::start(0);
    let url = format!("{}/v1/metrics", metrics.endpoint());
    let rt = runtime_after_calls(otel_env(&traces, &url), 30).await;
    // One span is being exported (stuck), two wait in the queue: of each process's 30 spans,
    // at least 20 are dropped (generous: a first export may end before the calls do).
    let status = wait_status(&rt, "telemetry drops of the frontend and of fx", |s| {
        let d = &s["telemetryDropped"];
        d["frontend"].as_u64() >= Some(20) && d["connectors"]["fx"].as_u64() >= Some(20)
    });
    let d = &status["telemetryDropped"];
    assert_eq!(
        d["total"].as_u64(),
        Some(d["frontend"].as_u64().unwrap_or(0) + d["connectors"]["fx"].as_u64().unwrap_or(0)),
        "{d}"
    );
    let table = rt.tutti_ok(&["status"]);
    let lines: Vec<&str> = table
        .lines()
        .filter(|l| l.contains("spans dropped"))
        .collect();
    assert_eq!(lines.len(), 1, "one line in the table: {table}");
    assert!(
        lines[0].starts_with("telemetry: ") && lines[0].contains("OTEL_EXPORTER_OTLP_ENDPOINT"),
        "{table}"
    );
    // The kernel exports the same counts as `tutti.telemetry.dropped`.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let m = metrics.captured().kernel_metric("tutti.telemetry.dropped");
        if m.get("").copied() >= Some(20) && m.get("fx").copied() >= Some(20) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "tutti.telemetry.dropped never arrived with the drops: {m:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_never_answers_does_not_hold_up_stopping_the_runtime() {
    // Every signal of every process goes to a port that never answers; exports are in
    // flight (and spans queued) when the runtime is told to stop.
    let (_stuck, endpoint) = stuck_receiver();
    let env = vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT".to_owned(), endpoint),
        ("OTEL_BSP_SCHEDULE_DELAY".to_owned(), "50".to_owned()),
        ("OTEL_METRIC_EXPORT_INTERVAL".to_owned(), "300".to_owned()),
    ];
    let mut rt = runtime_after_calls(env, 10).await;
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let status = rt.stop();
    let took = started.elapsed();
    assert!(
        status.is_some_and(|s| s.success()),
        "`tutti up` ended with {status:?}"
    );
    // Each process may wait 1 s for its last export (the kernel after its children); the
    // export timeout is 10 s and the SDK's metric reader waits 5 s more. The service stop
    // budget is 30 s; a stop without export takes about 1 s here.
    assert!(
        took < Duration::from_secs(8),
        "stopping took {took:?} with an unreachable receiver"
    );
    eprintln!("stopped in {took:?}");
}

//! The frame data plane: plain tool calls over the worker's frame endpoint (`TUTTI_DATA_PLANE=frames`)
//! and over gRPC (`=grpc`), through the real runtime: both answer the same, each really
//! takes its own socket, and a worker killed mid-call over the frame path answers the client
//! as the gRPC path does (SPEC §5, "worker died mid-call").
#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tutti_tests::{LEGACY_VERSION, Mcp, Runtime, RuntimeOptions, WorkerProc, fixture_connector};

const READY: Duration = Duration::from_secs(20);
/// Upper bound for anything that should happen "at once".
const AT_ONCE: Duration = Duration::from_secs(1);
/// Upper bound for the fixture upstream to record a message.
const RECORDED: Duration = Duration::from_secs(5);

/// A runtime whose frontend uses `plane`, with fixture connector `key` (`--tools TOOLS
/// --record`), ready; its token and record path.
fn runtime(plane: &str, key: &str, tools: &str) -> (Runtime, String, PathBuf) {
    let mut rt = Runtime::start(RuntimeOptions {
        env: vec![("TUTTI_DATA_PLANE".to_owned(), plane.to_owned())],
        ..RuntimeOptions::default()
    });
    let record = rt.root().join(format!("{key}.jsonl"));
    let record_arg = record.to_string_lossy().into_owned();
    rt.install_ok(
        &fixture_connector(key, &["--tools", tools, "--record", &record_arg]),
        &[],
    );
    rt.wait_status(key, "ready", READY);
    let token = rt.issue_token("w", "s");
    (rt, token, record)
}

fn worker(rt: &Runtime, key: &str) -> WorkerProc {
    rt.workers()
        .into_iter()
        .find(|w| w.key == key)
        .unwrap_or_else(|| panic!("no worker for {key}: {:?}", rt.workers()))
}

/// The worker's gRPC socket (`w-<gen>`) or frame socket (`d-<gen>`).
fn socket(rt: &Runtime, stem: &str, generation: u64) -> PathBuf {
    rt.state_dir()
        .join("run")
        .join(format!("{stem}-{generation:x}.sock"))
}

fn error_of(body: &Value) -> &Value {
    let e = &body["error"];
    assert!(e.is_object(), "expected a JSON-RPC error, got {body}");
    e
}

fn wait_recorded(path: &Path, what: &str, pred: impl Fn(&Value) -> bool) {
    let deadline = Instant::now() + RECORDED;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .any(|m| pred(&m))
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the upstream did not record {what} within {RECORDED:?}; record: {text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Each plane answers a call, an upstream tool error and an upstream JSON-RPC error the
/// same, with the *other* plane's socket removed before the first call: so each call
/// provably went over its own plane (the frontend had not dialled the worker yet).
#[tokio::test(flavor = "multi_thread")]
async fn each_data_plane_answers_calls_over_its_own_socket() {
    let mut answers = Vec::new();
    for (plane, other) in [("grpc", "d"), ("frames", "w")] {
        let (rt, token, _) = runtime(plane, "fx", "echo,add,fail,rpc_error");
        let w = worker(&rt, "fx");
        let unused = socket(&rt, other, w.generation);
        std::fs::remove_file(&unused)
            .unwrap_or_else(|e| panic!("{plane}: remove {}: {e}", unused.display()));
        let mcp = Mcp::legacy(rt.frontend_url(), &token);
        let echo = mcp.call_tool_ok("fx_echo", json!({"message": "hi"})).await;
        assert_eq!(echo["content"][0]["text"], "hi", "{plane}: {echo}");
        let add = mcp.call_tool_ok("fx_add", json!({"a": 2, "b": 3})).await;
        let (status, _, failed) = mcp.call_tool("fx_fail", json!({})).await;
        assert_eq!(status, 200, "{plane}: {failed}");
        let (status, _, rpc_error) = mcp.call_tool("fx_rpc_error", json!({})).await;
        assert_eq!(status, 200, "{plane}: {rpc_error}");
        error_of(&rpc_error);
        // A few more on the same (pooled) connection.
        for i in 0..20 {
            let text = format!("m{i}");
            let r = mcp.call_tool_ok("fx_echo", json!({"message": text})).await;
            assert_eq!(r["content"][0]["text"], text.as_str(), "{plane}: {r}");
        }
        answers.push((plane, echo, add, failed, rpc_error));
    }
    let (_, echo, add, failed, rpc_error) = &answers[0];
    for (plane, e, a, f, r) in &answers[1..] {
        assert_eq!(e, echo, "{plane}");
        assert_eq!(a, add, "{plane}");
        // The same error (or result), apart from the generation in error.data.tutti.
        let strip = |v: &Value| {
            let mut v = v.clone();
            if let Some(t) = v.pointer_mut("/error/data/tutti") {
                t["generation"] = Value::Null;
            }
            v["id"] = Value::Null;
            v
        };
        assert_eq!(strip(f), strip(failed), "{plane}");
        assert_eq!(strip(r), strip(rpc_error), "{plane}");
    }
}

/// The worker process dies mid-call over the frame path: -32603 `[MCP_UNAVAILABLE]` at once,
/// as over gRPC (e2e_frontend's `error_table`); the frontend's gRPC socket to the worker is
/// removed first, so nothing but the frame connection carried the call.
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_killed_mid_call_over_frames_answers_unavailable_at_once() {
    let (rt, token, record) = runtime("frames", "sl", "sleep,echo");
    let w = worker(&rt, "sl");
    let grpc = socket(&rt, "w", w.generation);
    std::fs::remove_file(&grpc).unwrap_or_else(|e| panic!("remove {}: {e}", grpc.display()));
    let caller = Mcp::legacy(rt.frontend_url(), &token);
    let in_flight =
        tokio::spawn(async move { caller.call_tool("sl_sleep", json!({"ms": 60_000})).await });
    tokio::task::block_in_place(|| {
        wait_recorded(&record, "the call whose worker dies", |m| {
            m["method"] == "tools/call"
        })
    });
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(w.pid).unwrap_or(i32::MAX)),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap_or_else(|e| panic!("kill {}: {e}", w.pid));
    let killed = Instant::now();
    let (status, _, body) = tokio::time::timeout(Duration::from_secs(5), in_flight)
        .await
        .unwrap_or_else(|_| panic!("the call of a dead worker was not answered"))
        .unwrap_or_else(|e| panic!("task: {e}"));
    assert!(killed.elapsed() <= AT_ONCE, "{:?}", killed.elapsed());
    assert_eq!(status, 200, "{body}");
    let e = error_of(&body);
    assert_eq!(e["code"], -32603, "{body}");
    assert!(
        e["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("[MCP_UNAVAILABLE] sl: ")),
        "{body}"
    );
    // As on the gRPC path, two events race and both are this row: the broken connection
    // ("unavailable") and the kernel fencing the dead worker's generation ("fenced").
    let tutti = &e["data"]["tutti"];
    assert!(
        tutti["reason"] == "unavailable" || tutti["reason"] == "fenced",
        "{body}"
    );
    assert_eq!(tutti["connector"], "sl", "{body}");
}

/// A client's cancel of a call in flight over the frame path: answered -32800 at once, and
/// the upstream gets `notifications/cancelled` with the gRPC socket removed, so it is the
/// dropped frame connection that ends the call in the worker; the worker then still serves.
#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_frame_call_is_cancelled_upstream() {
    let (rt, token, record) = runtime("frames", "cx", "sleep,echo");
    let w = worker(&rt, "cx");
    let grpc = socket(&rt, "w", w.generation);
    std::fs::remove_file(&grpc).unwrap_or_else(|e| panic!("remove {}: {e}", grpc.display()));
    let url = rt.frontend_url().to_owned();
    let mcp = Mcp::legacy(&url, &token);
    mcp.initialize().await;
    let caller = Mcp::legacy(&url, &token);
    let in_flight = tokio::spawn(async move {
        let body = json!({"jsonrpc": "2.0", "id": "cancel-me", "method": "tools/call",
                          "params": {"name": "cx_sleep", "arguments": {"ms": 60_000}}});
        caller
            .post_raw(
                body.to_string().into_bytes(),
                &[("MCP-Protocol-Version".to_owned(), LEGACY_VERSION.to_owned())],
            )
            .await
    });
    tokio::task::block_in_place(|| {
        wait_recorded(&record, "the call to cancel", |m| {
            m["method"] == "tools/call"
        })
    });
    let (status, _, _) = mcp
        .notify(
            "notifications/cancelled",
            json!({"requestId": "cancel-me", "reason": "test"}),
        )
        .await;
    assert_eq!(status, 202);
    let (status, _, body) = tokio::time::timeout(AT_ONCE, in_flight)
        .await
        .unwrap_or_else(|_| panic!("the cancelled call was not answered at once"))
        .unwrap_or_else(|e| panic!("task: {e}"));
    assert_eq!(status, 200, "{body}");
    assert_eq!(error_of(&body)["code"], -32800, "{body}");
    tokio::task::block_in_place(|| {
        wait_recorded(&record, "notifications/cancelled", |m| {
            m["method"] == "notifications/cancelled"
        })
    });
    let echo = mcp
        .call_tool_ok("cx_echo", json!({"message": "after"}))
        .await;
    assert_eq!(echo["content"][0]["text"], "after", "{echo}");
}

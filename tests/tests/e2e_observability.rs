//! Issue 24 (SPEC §14) over the real runtime: per-connector call figures in `tutti status`
//! (fed by calls of the official Python SDK client), `status --watch`, `tutti logs`,
//! `TUTTI_LOG_FORMAT=json` and `tutti doctor`.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tutti_tests::{Runtime, RuntimeOptions, fixture_connector, require_python_venv};

const READY: Duration = Duration::from_secs(20);
/// Upper bound for one external client process.
const CLIENT_RUN: Duration = Duration::from_secs(120);

/// The official Python SDK client: runs `calls` (a JSON list of `[tool, args]`) one after the
/// other over one session and prints one JSON line per call (`ok`, `isError` or `error`).
const PY_CALLS: &str = r#"
import asyncio, json, os, sys
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

async def main():
    url, calls = sys.argv[1], json.loads(sys.argv[2])
    headers = {"Authorization": "Bearer " + os.environ["TUTTI_TEST_TOKEN"]}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as hc:
        async with Client(streamable_http_client(url, http_client=hc), mode="legacy") as c:
            for name, args in calls:
                try:
                    r = await c.call_tool(name, args)
                    print(json.dumps({"name": name, "isError": bool(r.is_error)}), flush=True)
                except Exception as e:
                    print(json.dumps({"name": name, "error": str(e)}), flush=True)

asyncio.run(main())
"#;

/// Runs the Python client with `calls` against the runtime's frontend; its output lines.
fn python_calls(rt: &Runtime, token: &str, calls: &Value) -> Vec<Value> {
    let venv = require_python_venv();
    let script = rt.root().join("py_calls.py");
    std::fs::write(&script, PY_CALLS).unwrap_or_else(|e| panic!("write script: {e}"));
    let mut child = Command::new(venv.join("bin").join("python"))
        .arg(&script)
        .arg(rt.frontend_url())
        .arg(calls.to_string())
        .env("TUTTI_TEST_TOKEN", token)
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .env_remove("ALL_PROXY")
        .env_remove("all_proxy")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run the Python client: {e}"));
    let deadline = Instant::now() + CLIENT_RUN;
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let lines: Vec<Value> = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .map(|l| serde_json::from_str(&l).unwrap_or(Value::String(l)))
        .collect();
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("python: {e}"));
    assert!(Instant::now() < deadline, "the Python client took too long");
    assert!(
        out.status.success(),
        "the Python client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    lines
}

/// A runtime with fixture connector `fx` (`echo`, `sleep`; calls time out after 500 ms) and
/// a token.
fn runtime_with_fixture(opts: RuntimeOptions) -> (Runtime, String) {
    let mut rt = Runtime::start(opts);
    let mut manifest = fixture_connector("fx", &["--tools", "echo,sleep"]);
    manifest["timeouts"] = json!({"callMs": 500});
    rt.install_ok(&manifest, &[]);
    rt.wait_status("fx", "ready", READY);
    let token = rt.issue_token("w", "s");
    (rt, token)
}

/// The `calls` object of connector `key` in `tutti status --json`, once `pred` holds.
fn wait_calls(rt: &Runtime, key: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let status = rt.status_json();
        let calls = status["connectors"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["key"] == key))
            .map(|c| c["calls"].clone())
            .unwrap_or(Value::Null);
        if pred(&calls) {
            return calls;
        }
        assert!(
            Instant::now() < deadline,
            "status never showed the expected call figures for {key}: {calls}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

// ---------------------------------------------------------------------------------------
// 1. call figures

#[test]
fn status_counts_a_hundred_python_sdk_calls_by_outcome_with_percentiles() {
    let (rt, token) = runtime_with_fixture(RuntimeOptions::default());
    let before = wait_calls(&rt, "fx", |c| c.is_object());
    assert_eq!(before["total"], 0, "{before}");
    assert_eq!(before["p50Ms"], Value::Null, "{before}");
    assert_eq!(before["windowSeconds"], 300, "{before}");

    // 80 good calls, 15 with invalid arguments, 5 that time out (sleep 3 s, callMs 500).
    let mut calls = Vec::new();
    for i in 0..100 {
        calls.push(match i % 20 {
            0 => json!(["fx_sleep", {"ms": 3000}]),
            1..=3 => json!(["fx_echo", {"message": 42}]),
            _ => json!(["fx_echo", {"message": format!("m{i}")}]),
        });
    }
    let lines = python_calls(&rt, &token, &Value::Array(calls));
    assert_eq!(lines.len(), 100, "{lines:?}");
    // Invalid arguments come back as tool results with isError (SPEC §5), timeouts as
    // JSON-RPC errors.
    let errors = lines.iter().filter(|l| l.get("error").is_some()).count();
    let is_error = lines.iter().filter(|l| l["isError"] == true).count();
    assert_eq!((errors, is_error), (5, 15), "{lines:?}");

    let calls = wait_calls(&rt, "fx", |c| c["total"] == 100);
    assert_eq!(calls["errors"], 20, "{calls}");
    assert_eq!(calls["errorsByOutcome"]["invalid_arguments"], 15, "{calls}");
    assert_eq!(calls["errorsByOutcome"]["timeout"], 5, "{calls}");
    assert_eq!(calls["errorsByOutcome"]["tool_error"], 0, "{calls}");
    let p50 = calls["p50Ms"].as_f64().unwrap_or(-1.0);
    let p99 = calls["p99Ms"].as_f64().unwrap_or(-1.0);
    // Most calls are answered locally in well under the 500 ms timeout; the slowest 5 % are
    // the timeouts, so p99 is at least the timeout and well under the 3 s sleep.
    assert!(p50 > 0.0 && p50 < 300.0, "p50 {p50} ms: {calls}");
    assert!((450.0..2500.0).contains(&p99), "p99 {p99} ms: {calls}");
    let per_second: u64 = calls["perSecond"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).sum())
        .unwrap_or(0);
    assert!(per_second > 0 && per_second <= 100, "{calls}");

    // The table shows the same figures.
    let table = rt.tutti_ok(&["status"]);
    let header = table.lines().find(|l| l.starts_with("KEY")).unwrap_or("");
    for col in ["CALLS 5m", "P50", "P99"] {
        assert!(header.contains(col), "{col}: {table}");
    }
    let row = table.lines().find(|l| l.starts_with("fx ")).unwrap_or("");
    assert!(row.contains("100 (20 err)"), "{table}");
}

#[test]
fn status_watch_repeats_plain_rounds_when_not_a_terminal_and_json_lines_with_json() {
    let (rt, _token) = runtime_with_fixture(RuntimeOptions::default());
    for json in [false, true] {
        let mut args = vec!["status", "--watch"];
        if json {
            args.push("--json");
        }
        let mut child = rt
            .tutti_cmd(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("tutti status --watch: {e}"));
        let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
        let started = Instant::now();
        let mut reader = BufReader::new(stdout);
        let mut rounds = 0;
        let mut line = String::new();
        while rounds < 3 && reader.read_line(&mut line).unwrap_or(0) > 0 {
            assert!(
                !line.contains('\x1b'),
                "no terminal codes on a pipe: {line:?}"
            );
            if json {
                let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
                assert!(v["connectors"].is_array(), "{line}");
                rounds += 1;
            } else if line.starts_with("kernel: running") {
                rounds += 1;
            }
            line.clear();
        }
        assert_eq!(rounds, 3, "json={json}");
        // Three rounds one second apart: at least ~2 s, far less than 20.
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(1800) && took < Duration::from_secs(20),
            "{took:?}"
        );
        // Ctrl-C ends it with status 0.
        #[cfg(unix)]
        {
            use nix::sys::signal::{Signal, kill};
            use nix::unistd::Pid;
            let pid = Pid::from_raw(i32::try_from(child.id()).unwrap_or(0));
            kill(pid, Signal::SIGINT).unwrap_or_else(|e| panic!("SIGINT: {e}"));
            let status = child.wait().unwrap_or_else(|e| panic!("wait: {e}"));
            assert!(status.success(), "json={json}: {status}");
        }
        #[cfg(not(unix))]
        {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

//! The walking skeleton, end to end over the real binaries: the demo, a fixture
//! connector and `mcp-server-time` driven by the official Python `mcp` SDK client, the
//! frontend's Host/bearer/method checks, one worker per connector, a clean SIGTERM stop with
//! nothing left behind, and one kernel per state dir.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tutti_tests::{Mcp, Runtime, RuntimeOptions, proc_tree, require_python, require_python_venv};

const READY: Duration = Duration::from_secs(20);
const PYTHON_TIMEOUT: Duration = Duration::from_secs(60);

/// The official Python `mcp` SDK client (reference/mcp-protocol.md §4) in legacy mode: lists
/// the tools and calls one, printing one JSON object. The token comes from the environment,
/// never argv.
const PY_CLIENT: &str = r#"
import asyncio, json, os, sys
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

async def main():
    url, tool, args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    hc = httpx2.AsyncClient(headers={"Authorization": "Bearer " + os.environ["TUTTI_TEST_TOKEN"]},
                            timeout=30)
    async with Client(streamable_http_client(url, http_client=hc), mode="legacy") as c:
        tools = (await c.list_tools()).tools
        result = await c.call_tool(tool, args)
        print(json.dumps({
            "protocolVersion": str(c.protocol_version),
            "tools": [t.name for t in tools],
            "result": result.model_dump(mode="json", by_alias=True, exclude_none=True),
        }))

asyncio.run(main())
"#;

/// Runs [`PY_CLIENT`] with the venv's python against the runtime; returns its JSON output.
fn python_list_and_call(rt: &Runtime, token: &str, tool: &str, args: Value) -> Value {
    let python = require_python();
    let script = rt.root().join("client.py");
    std::fs::write(&script, PY_CLIENT).unwrap_or_else(|e| panic!("cannot write client.py: {e}"));
    let mut child = Command::new(&python)
        .arg(&script)
        .arg(rt.frontend_url())
        .arg(tool)
        .arg(args.to_string())
        .env("TUTTI_TEST_TOKEN", token)
        .current_dir(rt.root())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    let deadline = Instant::now() + PYTHON_TIMEOUT;
    while child.try_wait().ok().flatten().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().ok();
            panic!(
                "the Python client did not finish within {PYTHON_TIMEOUT:?}; stderr: {}",
                out.map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
                    .unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("cannot collect the Python client's output: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the Python mcp client failed ({}):\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("the Python client printed no JSON ({e}): {stdout}"))
}

fn texts(result: &Value) -> Vec<String> {
    result["content"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|c| c["text"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn str_list(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn demo_shows_the_frontend_url_and_ready_connectors() {
    let rt = Runtime::start(RuntimeOptions {
        demo: true,
        ..RuntimeOptions::default()
    });
    let hello = rt.wait_status("hello", "ready", READY);
    let clock = rt.wait_status("clock", "ready", READY);
    let status = rt.status_json();
    let url = status["frontendUrl"].as_str().unwrap_or("");
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp/connector"),
        "frontendUrl: {status}"
    );
    for entry in [&hello, &clock] {
        assert!(
            entry["generation"].as_u64().is_some_and(|g| g > 0),
            "a ready connector has a live generation: {entry}"
        );
        assert!(
            entry["toolCount"].as_u64().is_some_and(|n| n > 0),
            "{entry}"
        );
    }
    // `tutti up` prints the URL once ready.
    let deadline = Instant::now() + READY;
    while !rt.up_stdout().contains(url) {
        assert!(
            Instant::now() < deadline,
            "`tutti up --demo` never printed {url}; stdout: {}",
            rt.up_stdout()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Logs to a file (as under systemd or launchd) are plain text: no terminal colour codes.
    let logs = rt.up_stderr();
    assert!(logs.contains("committed"), "kernel log lines: {logs}");
    assert!(
        !logs.contains('\x1b') && !rt.up_stdout().contains('\x1b'),
        "escape codes in output that is not a terminal: {logs}"
    );
}

#[test]
fn python_sdk_lists_and_calls_a_fixture_connector() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    rt.install_ok(
        &rt.private_fixture_connector("fx", &["--tools", "echo,add"]),
        &[],
    );
    rt.wait_status("fx", "ready", READY);
    let token = rt.issue_token("py", "fixture");
    let out = python_list_and_call(&rt, &token, "fx_echo", json!({"message": "hello tutti"}));
    // Legacy mode: an `initialize` era version (the SDK asks for its latest, 2025-11-25).
    let version = out["protocolVersion"].as_str().unwrap_or("");
    assert!(
        ["2025-06-18", "2025-03-26", "2025-11-25"].contains(&version),
        "legacy mode negotiated {version}: {out}"
    );
    assert_eq!(str_list(&out["tools"]), ["fx_add", "fx_echo"], "{out}");
    assert_eq!(texts(&out["result"]), ["hello tutti"], "{out}");
    assert_ne!(out["result"]["isError"], json!(true), "{out}");
}

#[test]
fn python_sdk_calls_mcp_server_time_through_the_runtime() {
    let venv = require_python_venv();
    let server = venv.join("bin").join("mcp-server-time");
    assert!(
        server.is_file(),
        "{} is missing: run scripts/install-test-tools",
        server.display()
    );
    let mut rt = Runtime::start(RuntimeOptions::default());
    rt.install_ok(
        &json!({
            "key": "time",
            "name": "Time",
            "description": "Current time and time zone conversion (mcp-server-time from PyPI)",
            "version": "2026.10.19",
            "mcp": {"transport": "stdio", "command": server.to_string_lossy(), "args": []},
        }),
        &[],
    );
    rt.wait_status("time", "ready", Duration::from_secs(40));
    let token = rt.issue_token("py", "time");
    let out = python_list_and_call(
        &rt,
        &token,
        "time_get_current_time",
        json!({"timezone": "UTC"}),
    );
    let tools = str_list(&out["tools"]);
    assert!(
        tools.contains(&"time_get_current_time".to_owned())
            && tools.contains(&"time_convert_time".to_owned()),
        "{out}"
    );
    assert_ne!(out["result"]["isError"], json!(true), "{out}");
    let text = texts(&out["result"]).join("\n");
    let answer: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("get_current_time did not answer JSON ({e}): {out}"));
    assert_eq!(answer["timezone"], json!("UTC"), "{out}");
    let year = answer["datetime"].as_str().unwrap_or("");
    assert!(year.starts_with("20"), "datetime: {out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn frontend_refuses_missing_token_foreign_host_and_get() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    rt.install_ok(
        &rt.private_fixture_connector("fx", &["--tools", "echo"]),
        &[],
    );
    rt.wait_status("fx", "ready", READY);
    let token = rt.issue_token("w", "s");
    let url = rt.frontend_url().to_owned();

    // The token works, so the refusals below are about what they change.
    let ok = Mcp::legacy(&url, &token);
    ok.initialize().await;
    let (status, _, body) = ok.request("tools/list", json!({})).await;
    assert_eq!(status, 200, "{body}");

    let anonymous = Mcp::legacy(&url, "");
    let (status, headers, body) = anonymous.request("tools/list", json!({})).await;
    assert_eq!(status, 401, "no token: {body}");
    let challenge = headers
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    assert!(
        challenge.starts_with("Bearer"),
        "401 without `WWW-Authenticate: Bearer`: {headers:?}"
    );
    let wrong = Mcp::legacy(&url, "tts_not-a-token");
    assert_eq!(wrong.request("tools/list", json!({})).await.0, 401);

    let body = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .unwrap_or_default();
    let (status, _, reply) = ok
        .post_raw(
            body,
            &[
                ("Host".to_owned(), "evil.example".to_owned()),
                ("MCP-Protocol-Version".to_owned(), "2025-06-18".to_owned()),
            ],
        )
        .await;
    assert_eq!(status, 403, "Host: evil.example: {reply}");

    // SPEC §11: a GET that accepts `text/event-stream` opens the legacy notification stream
    // (e2e/relay/mod.rs); any other GET stays 405.
    let json_only = [("Accept".to_owned(), "application/json".to_owned())];
    let (status, headers, reply) = ok.send_method(reqwest::Method::GET, &json_only).await;
    assert_eq!(status, 405, "GET: {reply}");
    let allow = headers
        .get("allow")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    assert_eq!(
        allow, "POST",
        "GET answered without `Allow: POST`: {headers:?}"
    );
}

#[test]
fn one_worker_per_connector_and_sigterm_leaves_nothing() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    // `two`'s upstream starts a grandchild of its own, as `npx` does.
    rt.install_ok(
        &rt.private_fixture_connector("one", &["--tools", "echo,whoami"]),
        &[],
    );
    rt.install_ok(
        &rt.private_fixture_connector("two", &["--tools", "echo,whoami", "--grandchild"]),
        &[],
    );
    for key in ["one", "two"] {
        rt.wait_status(key, "ready", READY);
    }
    let workers = rt.workers();
    let mut per_key: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for w in &workers {
        per_key.entry(w.key.clone()).or_default().push(w.pid);
    }
    assert_eq!(
        per_key.keys().map(String::as_str).collect::<Vec<_>>(),
        ["one", "two"],
        "workers: {workers:?}"
    );
    assert!(
        per_key.values().all(|pids| pids.len() == 1),
        "one worker process per connector, got {workers:?}\n{}",
        proc_tree::describe(&workers.iter().map(|w| w.pid).collect::<Vec<_>>())
    );
    // Each worker runs its upstream (the private fixture copy) below it.
    let fixture = rt.private_fixture();
    for w in &workers {
        let below = proc_tree::descendants(w.pid);
        assert!(
            below.iter().any(|p| proc_tree::info(*p)
                .is_some_and(|i| i.cmdline.contains(&*fixture.to_string_lossy()))),
            "worker {w:?} has no upstream child: {}",
            proc_tree::describe(&below)
        );
    }

    let set = rt.process_set();
    let kernel = rt.pid().unwrap_or(0);
    assert!(set.contains(&kernel), "the kernel is in the process set");
    // kernel + frontend + shim manager + 2 workers + 2 upstreams + 1 grandchild
    assert!(
        set.len() >= 8,
        "process set too small:\n{}",
        proc_tree::describe(&set)
    );

    let status = rt
        .stop()
        .unwrap_or_else(|| panic!("`tutti up` could not be waited for"));
    assert!(
        status.success(),
        "`tutti up` must exit 0 after SIGTERM, got {status}\n{}",
        rt.diagnostics()
    );
    // The kernel stops and reaps its children before it exits (it does not rely on their
    // own parent-death detection), so everything is gone at once; 500 ms is for a swept
    // upstream that has not been scheduled yet.
    let survivors = proc_tree::wait_gone(&set, Duration::from_millis(500));
    assert!(
        survivors.is_empty(),
        "processes of the set outlived `tutti up`:\n{}",
        proc_tree::describe(&survivors)
    );
    let stray = rt.process_set();
    assert!(
        stray.is_empty(),
        "processes naming this runtime are still alive:\n{}",
        proc_tree::describe(&stray)
    );
}

#[test]
fn a_second_up_on_the_same_state_dir_fails_clearly() {
    let rt = Runtime::start(RuntimeOptions::default());
    let before = rt.status_json();
    let mut second = rt.tutti_cmd(&["up"]);
    second.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = second
        .spawn()
        .unwrap_or_else(|e| panic!("cannot spawn a second `tutti up`: {e}"));
    let deadline = Instant::now() + Duration::from_secs(15);
    while child.try_wait().ok().flatten().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("a second `tutti up` on the same state dir did not exit within 15 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("cannot collect the second `tutti up`: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a second `tutti up` succeeded: {stderr}"
    );
    assert!(
        stderr.contains("already running") && stderr.contains(&*rt.state_dir().to_string_lossy()),
        "the second `tutti up` must say another kernel runs this state dir, got: {stderr}"
    );
    // The first runtime is untouched.
    let after = rt.status_json();
    assert_eq!(after["kernel"]["pid"], before["kernel"]["pid"]);
    assert_eq!(after["frontendUrl"], before["frontendUrl"]);
}

/// `tutti up | head -1`, or a terminal that went away: the banner cannot be written, and the
/// runtime must keep running (it used to panic on the failed write and take the set down).
#[cfg(unix)]
#[test]
fn up_keeps_running_when_nobody_reads_its_output() {
    // Ready = the kernel answers and reports the frontend's URL (the banner comes right after);
    // `Runtime::start` fails the test if `tutti up` exits before that.
    let mut rt = Runtime::start(RuntimeOptions {
        closed_stdout: true,
        ..RuntimeOptions::default()
    });
    // Give the banner write time to fail, then check the runtime is still there.
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        rt.exited().is_none(),
        "tutti up died after its banner could not be written: {:?}\n{}",
        rt.exited(),
        rt.diagnostics()
    );
    assert!(rt.tutti(&["status", "--json"]).status.success());
    let status = rt.stop();
    assert!(
        status.is_some_and(|s| s.success()),
        "tutti up after SIGTERM: {status:?}"
    );
}

/// An installation without the frontend binary: `tutti up` says which file is missing and
/// how to fix it, and exits non-zero at once instead of retrying a frontend forever.
#[test]
fn up_without_a_sibling_binary_names_it_and_exits() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let libexec = dir.path().join("bin");
    std::fs::create_dir_all(&libexec).unwrap_or_else(|e| panic!("mkdir: {e}"));
    for name in [
        "tutti",
        "tutti-kernel",
        "tutti-upstream-worker",
        "tutti-shim-manager",
        "tutti-shim",
    ] {
        let file = format!("{name}{}", std::env::consts::EXE_SUFFIX);
        std::fs::copy(tutti_tests::bin(name), libexec.join(&file))
            .unwrap_or_else(|e| panic!("copying {name}: {e}"));
    }
    let state = dir.path().join("state");
    let started = Instant::now();
    let out =
        std::process::Command::new(libexec.join(format!("tutti{}", std::env::consts::EXE_SUFFIX)))
            .args(["up", "--state-dir"])
            .arg(&state)
            .env_remove("TUTTI_LIBEXEC_DIR")
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run tutti up: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "tutti up without a frontend succeeded: {stderr}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "tutti up took {:?} to give up",
        started.elapsed()
    );
    assert!(
        stderr.contains("cannot find")
            && stderr.contains("tutti-mcp-frontend")
            && stderr.contains("TUTTI_LIBEXEC_DIR"),
        "tutti up must name the missing binary and the fix, got: {stderr}"
    );
}

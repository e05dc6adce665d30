//! Observability (SPEC §14) over the real runtime: per-connector call figures in `tutti status`
//! (fed by calls of the official Python SDK client), `status --watch`, `tutti logs`,
//! `TUTTI_LOG_FORMAT=json` and `tutti doctor`.

mod telemetry_drops;

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

// ---------------------------------------------------------------------------------------
// 2. tutti logs

/// Waits until `pred` holds; panics with `what` and `detail()` otherwise.
fn wait_until(what: &str, timeout: Duration, pred: impl Fn() -> bool, detail: impl Fn() -> String) {
    let deadline = Instant::now() + timeout;
    while !pred() {
        assert!(
            Instant::now() < deadline,
            "{what} within {timeout:?}: {}",
            detail()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

const SECRET: &str = "observe-Secret-Value-9f3k2";

/// A runtime with connector `sec` whose upstream prints its secret `SEC_TOKEN` to stderr.
fn runtime_with_secret_printer(opts: RuntimeOptions) -> Runtime {
    let mut rt = Runtime::start(opts);
    let mut manifest = fixture_connector(
        "sec",
        &["--tools", "echo", "--stderr-secret-env", "SEC_TOKEN"],
    );
    manifest["mcp"]["secrets"] = json!(["SEC_TOKEN"]);
    rt.install_ok(&manifest, &[]);
    rt.wait_status("sec", "auth_required", READY);
    rt.connect_from_env("sec", "SEC_TOKEN", SECRET);
    rt.wait_status("sec", "ready", READY);
    wait_until(
        "the upstream's stderr in its log",
        READY,
        || {
            rt.log("connector-sec.log")
                .contains("the value of SEC_TOKEN follows")
        },
        || rt.log_tail("connector-sec.log", 20),
    );
    rt
}

#[test]
fn logs_show_the_kernel_log_and_a_connector_log_redacted_and_name_an_unknown_key() {
    let rt = runtime_with_secret_printer(RuntimeOptions::default());
    let kernel = rt.tutti_ok(&["logs"]);
    assert!(kernel.contains("committed key=sec"), "{kernel}");
    assert_eq!(
        kernel,
        rt.log("kernel.log").get(..kernel.len()).unwrap_or_default(),
        "the file as written"
    );

    let conn = rt.tutti_ok(&["logs", "sec"]);
    assert!(conn.contains("the value of SEC_TOKEN follows"), "{conn}");
    assert!(conn.contains("***"), "{conn}");
    assert!(!conn.contains(SECRET), "the secret is masked: {conn}");

    // --since: everything here is recent; a day covers it all.
    let since = rt.tutti_ok(&["logs", "--since", "1d"]);
    assert!(since.contains("committed key=sec"), "{since}");

    for bad in ["nope", "../kernel"] {
        let out = rt.tutti(&["logs", bad]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(err.contains("no log for connector"), "{err}");
        assert!(err.contains("tutti status"), "{err}");
    }
    let out = rt.tutti(&["logs", "--since", "yesterday"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("30s, 15m, 2h or 1d"));
}

#[test]
fn logs_follow_prints_new_lines_until_ctrl_c() {
    let (rt, _token) = runtime_with_fixture(RuntimeOptions::default());
    let mut child = rt
        .tutti_cmd(&["logs", "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("tutti logs --follow: {e}"));
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    // Something the kernel logs only now.
    std::thread::sleep(Duration::from_millis(500));
    rt.issue_token("followed-ws", "s2");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let line = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| panic!("--follow never printed the new line"));
        if line.contains("session issued") && line.contains("followed-ws") {
            break;
        }
    }
    #[cfg(unix)]
    {
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        let pid = Pid::from_raw(i32::try_from(child.id()).unwrap_or(0));
        kill(pid, Signal::SIGINT).unwrap_or_else(|e| panic!("SIGINT: {e}"));
        let status = child.wait().unwrap_or_else(|e| panic!("wait: {e}"));
        assert!(status.success(), "{status}");
    }
    #[cfg(not(unix))]
    {
        let _ = child.kill();
        let _ = child.wait();
    }
}

// ---------------------------------------------------------------------------------------
// 4. tutti doctor

/// A place for an agent: a project dir (cwd), a home and a Codex home, all empty.
struct AgentPlace {
    _dir: tempfile::TempDir,
    project: std::path::PathBuf,
    home: std::path::PathBuf,
}

fn agent_place() -> AgentPlace {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let project = dir.path().join("project");
    let home = dir.path().join("home");
    for d in [&project, &home] {
        std::fs::create_dir_all(d).unwrap_or_else(|e| panic!("mkdir: {e}"));
    }
    AgentPlace {
        project,
        home,
        _dir: dir,
    }
}

/// `tutti doctor [--json]` run from the agent's project with its home, and `path` as PATH.
fn doctor(
    rt_state: &std::path::Path,
    place: &AgentPlace,
    path: &str,
    json: bool,
) -> (bool, String, String) {
    let mut cmd = Command::new(tutti_tests::bin("tutti"));
    cmd.arg("--state-dir").arg(rt_state).arg("doctor");
    if json {
        cmd.arg("--json");
    }
    let out = cmd
        .current_dir(&place.project)
        .env("HOME", &place.home)
        .env("CODEX_HOME", place.home.join(".codex"))
        .env("XDG_CONFIG_HOME", place.home.join(".config"))
        .env("PATH", path)
        .env_remove("TUTTI_STATE_DIR")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("tutti doctor: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn path_with(dir: &std::path::Path) -> String {
    let rest = std::env::var("PATH").unwrap_or_default();
    format!("{}:{rest}", dir.display())
}

/// The line of check `name` (asserting there is exactly one).
fn line_of<'a>(out: &'a str, name: &str) -> &'a str {
    let lines: Vec<&str> = out
        .lines()
        .filter(|l| l.contains(&format!(" {name}:")))
        .collect();
    assert_eq!(lines.len(), 1, "one line for {name}: {out}");
    lines[0]
}

/// Every file under `dir` with its length and mtime.
fn tree(dir: &std::path::Path) -> Vec<(std::path::PathBuf, u64, Option<std::time::SystemTime>)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        let meta = std::fs::symlink_metadata(&p).ok();
        if meta.as_ref().is_some_and(|m| m.is_dir()) {
            out.extend(tree(&p));
        }
        out.push((
            p,
            meta.as_ref().map_or(0, |m| m.len()),
            meta.and_then(|m| m.modified().ok()),
        ));
    }
    out.sort();
    out
}

/// Clean: nothing fails; the binding and PATH are seen; nothing is written; `--json` agrees.
fn assert_doctor_clean(rt: &Runtime, place: &AgentPlace, bin: &std::path::Path, token: &str) {
    let before = (
        tree(&place.home),
        tree(&place.project),
        tree(&rt.state_dir().join("run")),
    );
    let (ok, out, err) = doctor(rt.state_dir(), place, &path_with(bin), false);
    assert!(ok, "{out}{err}");
    assert!(!out.contains("FAIL"), "{out}");
    for name in [
        "kernel",
        "state dir permissions",
        "socket path length",
        "bin dir on PATH",
        "launch commands",
        "clock",
    ] {
        assert!(line_of(&out, name).starts_with("OK "), "{name}: {out}");
    }
    assert!(line_of(&out, "service").starts_with("WARN"), "{out}");
    let agent = line_of(&out, "agent config");
    assert!(
        agent.starts_with("OK ") && agent.contains("points at the live URL"),
        "{out}"
    );
    assert!(!out.contains(token), "doctor never prints the token");
    let after = (
        tree(&place.home),
        tree(&place.project),
        tree(&rt.state_dir().join("run")),
    );
    assert_eq!(before, after, "doctor wrote nothing");

    // --json: the same checks.
    let (ok, out, _) = doctor(rt.state_dir(), place, &path_with(bin), true);
    let v: Value = serde_json::from_str(&out).unwrap_or(Value::Null);
    assert!(ok && v["ok"] == true, "{out}");
    assert!(
        v["checks"]
            .as_array()
            .is_some_and(|c| c.iter().all(|c| c["level"] != "fail")),
        "{out}"
    );
}

#[test]
fn doctor_is_clean_in_a_bound_environment_and_names_a_stale_mcp_json_and_a_missing_path() {
    let (rt, _token) = runtime_with_fixture(RuntimeOptions::default());
    let place = agent_place();
    let binding = rt.tutti_ok(&[
        "session",
        "issue",
        "--workspace",
        "w",
        "--session",
        "doc",
        "--format",
        "claude",
    ]);
    let token = serde_json::from_str::<Value>(&binding).unwrap_or(Value::Null)["mcpServers"]["connector"]["headers"]["Authorization"]
        .as_str()
        .unwrap_or_default()
        .trim_start_matches("Bearer ")
        .to_owned();
    assert!(!token.is_empty(), "{binding}");
    std::fs::write(place.project.join(".mcp.json"), &binding).unwrap_or_else(|e| panic!("{e}"));
    let bin = rt.state_dir().join("bin");

    assert_doctor_clean(&rt, &place, &bin, &token);

    // Broken 1: the bin dir is not on PATH.
    let (ok, out, _) = doctor(
        rt.state_dir(),
        &place,
        &std::env::var("PATH").unwrap_or_default(),
        false,
    );
    assert!(ok, "a WARN does not fail: {out}");
    let line = line_of(&out, "bin dir on PATH");
    assert!(
        line.starts_with("WARN") && line.contains("is not on PATH"),
        "{line}"
    );
    assert!(
        line.contains(&format!(
            "fix: add `export PATH=\"{}:$PATH\"`",
            bin.display()
        )),
        "{line}"
    );

    // Broken 2: .mcp.json points at yesterday's port.
    let port = rt
        .frontend_url()
        .split(':')
        .nth(2)
        .and_then(|p| p.split('/').next())
        .unwrap_or("0");
    let stale_port = if port == "1" { "2" } else { "1" };
    let stale = binding.replace(&format!(":{port}/"), &format!(":{stale_port}/"));
    std::fs::write(place.project.join(".mcp.json"), &stale).unwrap_or_else(|e| panic!("{e}"));
    let (ok, out, err) = doctor(rt.state_dir(), &place, &path_with(&bin), false);
    assert!(!ok, "{out}");
    let line = line_of(&out, "agent config");
    assert!(line.starts_with("FAIL"), "{line}");
    assert!(
        line.contains(&format!("127.0.0.1:{stale_port}/mcp/connector"))
            && line.contains(rt.frontend_url()),
        "{line}"
    );
    assert!(
        line.contains("fix: update it with the output of `tutti session issue"),
        "{line}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("1 check(s) failed"), "{err}");
    assert!(!out.contains(&token) && !err.contains(&token));
}

#[test]
fn doctor_names_a_state_dir_over_the_socket_limit_and_writes_nothing() {
    let place = agent_place();
    let long = place.home.join("d".repeat(110));
    let (ok, out, _) = doctor(
        &long,
        &place,
        &std::env::var("PATH").unwrap_or_default(),
        false,
    );
    assert!(!ok, "{out}");
    let line = line_of(&out, "socket path length");
    assert!(
        line.starts_with("FAIL") && line.contains("over the system's limit"),
        "{line}"
    );
    assert!(
        line.contains("fix: use a state dir path at least"),
        "{line}"
    );
    assert!(line_of(&out, "kernel").starts_with("FAIL"), "{out}");
    assert!(!long.exists(), "doctor created nothing");
}

#[test]
fn doctor_names_an_installed_connector_whose_command_is_gone() {
    let (mut rt, _token) = runtime_with_fixture(RuntimeOptions::default());
    let manifest = rt.private_fixture_connector("gone", &["--tools", "echo"]);
    rt.install_ok(&manifest, &[]);
    rt.wait_status("gone", "ready", READY);
    let program = rt.private_fixture();
    std::fs::remove_file(&program).unwrap_or_else(|e| panic!("rm: {e}"));
    let place = agent_place();
    let (ok, out, _) = doctor(
        rt.state_dir(),
        &place,
        &path_with(&rt.state_dir().join("bin")),
        false,
    );
    assert!(!ok, "{out}");
    let line = line_of(&out, "connector gone");
    assert!(line.starts_with("FAIL"), "{line}");
    assert!(
        line.contains(&format!("its command {} is gone", program.display())),
        "{line}"
    );
    assert!(
        line.contains("fix: reinstall the program")
            && line.contains("tutti connector uninstall gone"),
        "{line}"
    );
    assert!(
        !out.contains("connector fx:"),
        "fx's command is there: {out}"
    );
}

// ---------------------------------------------------------------------------------------
// 3. TUTTI_LOG_FORMAT=json

/// Every non-empty line of `text` as a JSON object with `timestamp` and `level`; panics
/// naming `what` and the first line that is not.
fn json_lines(what: &str, text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("{what}: not a JSON line ({e}): {l:?}"));
            assert!(
                v["timestamp"].is_string() && v["level"].is_string(),
                "{what}: {l}"
            );
            v
        })
        .collect()
}

#[test]
fn log_format_json_gives_json_lines_from_every_process_and_logs_json_passes_them_through() {
    let opts = RuntimeOptions {
        env: vec![("TUTTI_LOG_FORMAT".into(), "json".into())],
        ..RuntimeOptions::default()
    };
    let rt = runtime_with_secret_printer(opts);
    // A call, so the frontend and the worker log something of it too.
    let token = rt.issue_token("w", "s");
    let lines = python_calls(&rt, &token, &json!([["sec_echo", {"message": "hi"}]]));
    assert_eq!(lines.len(), 1, "{lines:?}");

    let kernel = json_lines("kernel.log", &rt.log("kernel.log"));
    assert!(
        kernel.iter().any(|v| v["fields"]["message"] == "committed"),
        "{kernel:?}"
    );
    let stderr = std::fs::read_to_string(rt.root().join("up.stderr")).unwrap_or_default();
    json_lines("the kernel's stderr", &stderr);
    for name in ["frontend.log", "shim-manager.log"] {
        let text = rt.log(name);
        assert!(!json_lines(name, &text).is_empty(), "{name} is empty");
    }
    let conn_text = rt.log("connector-sec.log");
    assert!(!conn_text.contains(SECRET), "masked");
    let conn = json_lines("connector-sec.log", &conn_text);
    let messages: Vec<&str> = conn
        .iter()
        .filter_map(|v| v["fields"]["message"].as_str())
        .collect();
    assert!(
        messages
            .iter()
            .any(|m| m.contains("the value of SEC_TOKEN follows")),
        "the upstream's stderr, as records: {messages:?}"
    );
    assert!(messages.contains(&"***"), "{messages:?}");
    assert!(
        messages.contains(&"registered"),
        "the worker's own: {messages:?}"
    );

    // `tutti logs --json` passes the lines through as written.
    let shown = rt.tutti_ok(&["logs", "sec", "--json"]);
    let written: Vec<&str> = conn_text.lines().filter(|l| !l.trim().is_empty()).collect();
    let shown: Vec<&str> = shown.lines().collect();
    assert_eq!(
        &shown[..written.len().min(shown.len())],
        &written[..written.len().min(shown.len())]
    );
    assert!(shown.len() >= written.len());
}

// ---------------------------------------------------------------------------------------
// 5. OpenTelemetry export

use tutti_tests::otlp::{Captured, OtlpReceiver, point_value};

/// The sum of the `tutti.calls` data points exported last (a cumulative counter).
fn calls_metric(c: &Captured) -> i64 {
    c.metric_points(None, "tutti.calls")
        .last()
        .map_or(0, |points| points.iter().map(point_value).sum())
}

/// A frontend `tools/call` span and the worker span that is its child.
fn linked_spans(c: &Captured) -> Option<(Value, Value)> {
    let all = c.spans();
    all.iter().find_map(|(svc, parent)| {
        if svc != "tutti-mcp-frontend" || parent["name"] != "tools/call" {
            return None;
        }
        all.iter()
            .find(|(svc, child)| {
                svc == "tutti-upstream-worker"
                    && child["parentSpanId"] == parent["spanId"]
                    && child["traceId"] == parent["traceId"]
            })
            .map(|(_, child)| (parent.clone(), child.clone()))
    })
}

fn otel_env(endpoint: &str) -> Vec<(String, String)> {
    vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT".into(), endpoint.into()),
        ("OTEL_BSP_SCHEDULE_DELAY".into(), "100".into()),
        ("OTEL_METRIC_EXPORT_INTERVAL".into(), "300".into()),
    ]
}

/// A frontend span and its worker child, per call; the upstream received the same trace in
/// `_meta.traceparent`, naming the worker's span.
fn assert_spans_linked_and_the_trace_sent_upstream(
    receiver: &OtlpReceiver,
    record: &std::path::Path,
) {
    wait_until(
        "linked frontend and worker spans",
        Duration::from_secs(20),
        || linked_spans(&receiver.captured()).is_some(),
        || {
            format!(
                "{:?}",
                receiver
                    .captured()
                    .spans()
                    .iter()
                    .map(|(s, sp)| (s.clone(), sp["name"].clone()))
                    .collect::<Vec<_>>()
            )
        },
    );
    let (parent, child) =
        linked_spans(&receiver.captured()).unwrap_or_else(|| panic!("no linked spans"));
    // The upstream received the same trace in `_meta.traceparent`, naming the worker's span.
    let want = format!(
        "00-{}-{}-",
        parent["traceId"].as_str().unwrap_or("?"),
        child["spanId"].as_str().unwrap_or("?")
    );
    let seen: Vec<String> = std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|m| m["method"] == "tools/call")
        .filter_map(|m| {
            m["params"]["_meta"]["traceparent"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert!(
        seen.iter().any(|t| t.starts_with(&want)),
        "want {want}…, the upstream saw {seen:?}"
    );
}

#[test]
fn otel_export_links_the_frontend_and_worker_spans_and_the_upstream_sees_the_trace() {
    let receiver = OtlpReceiver::start(0);
    let mut rt = Runtime::start(RuntimeOptions {
        env: otel_env(&receiver.endpoint()),
        ..RuntimeOptions::default()
    });
    let record = rt.root().join("fx.jsonl");
    let record_arg = record.to_string_lossy().into_owned();
    let mut manifest = fixture_connector(
        "fx",
        &[
            "--tools",
            "echo",
            "--stderr-secret-env",
            "FX_TOKEN",
            "--record",
            &record_arg,
        ],
    );
    manifest["mcp"]["secrets"] = json!(["FX_TOKEN"]);
    rt.install_ok(&manifest, &[]);
    rt.wait_status("fx", "auth_required", READY);
    rt.connect_from_env("fx", "FX_TOKEN", SECRET);
    rt.wait_status("fx", "ready", READY);
    let token = rt.issue_token("w", "s");
    let calls: Vec<Value> = (0..3)
        .map(|i| json!(["fx_echo", {"message": format!("m{i}")}]))
        .collect();
    let lines = python_calls(&rt, &token, &Value::Array(calls));
    assert_eq!(lines.len(), 3, "{lines:?}");

    assert_spans_linked_and_the_trace_sent_upstream(&receiver, &record);

    // Metrics with the call counts.
    wait_until(
        "tutti.calls = 3",
        Duration::from_secs(20),
        || calls_metric(&receiver.captured()) >= 3,
        || {
            let c = receiver.captured();
            format!(
                "{} metric exports, tutti.calls = {}",
                c.metrics.len(),
                calls_metric(&c)
            )
        },
    );
    // No secret or token in anything exported.
    let all = receiver.captured().text();
    assert!(!all.contains(SECRET), "a secret was exported");
    assert!(!all.contains(&token), "the session token was exported");
    // The SPEC §9 scan, extended to the receiver's capture: the state dir (logs included),
    // the runtime's output, every live process's argv.
    let scan = tutti_tests::secret_scan::Scan {
        files: vec![
            receiver.capture_file().to_path_buf(),
            rt.root().join("up.stdout"),
            rt.root().join("up.stderr"),
        ],
        ..Default::default()
    };
    let leaks = tutti_tests::secret_scan::leaks(&[SECRET, token.as_str()], rt.state_dir(), &scan);
    assert!(leaks.is_empty(), "leaked into:\n{}", leaks.join("\n"));
    // Export runs on each process's own runtime: the frontend and the worker stay
    // single-threaded with export on (the SDK's threads made every call pay; PERFORMANCE.md).
    #[cfg(target_os = "linux")]
    for name in ["tutti-mcp-frontend", "tutti-upstream-worker"] {
        let pids = runtime_processes(&rt, name);
        assert!(!pids.is_empty(), "no {name} process under the runtime");
        for pid in pids {
            let threads = thread_names(pid);
            assert_eq!(
                threads.len(),
                1,
                "{name} ({pid}) runs threads {threads:?} with export on"
            );
        }
    }
}

/// Pids of the runtime's processes whose command is `name`.
#[cfg(target_os = "linux")]
fn runtime_processes(rt: &Runtime, name: &str) -> Vec<u32> {
    let kernel = rt
        .pid()
        .unwrap_or_else(|| panic!("the runtime is not running"));
    tutti_tests::proc_tree::descendants(kernel)
        .into_iter()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| name.starts_with(comm.trim()))
        })
        .collect()
}

/// The names of `pid`'s threads.
#[cfg(target_os = "linux")]
fn thread_names(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|tasks| {
            tasks
                .filter_map(|t| t.ok())
                .map(|t| {
                    std::fs::read_to_string(t.path().join("comm"))
                        .unwrap_or_default()
                        .trim()
                        .to_owned()
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn otel_without_variables_sends_nothing_and_an_unreachable_receiver_slows_no_call() {
    // Nothing set: the default OTLP/HTTP port hears nothing.
    let default_port = OtlpReceiver::start(4318);
    let (rt, token) = runtime_with_fixture(RuntimeOptions::default());
    let calls: Vec<Value> = (0..5)
        .map(|i| json!(["fx_echo", {"message": format!("m{i}")}]))
        .collect();
    assert_eq!(
        python_calls(&rt, &token, &Value::Array(calls.clone())).len(),
        5
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        default_port.captured().hits,
        0,
        "something was exported with no variable set"
    );
    drop(rt);
    drop(default_port);

    // The receiver is gone: calls are answered as usual, at their usual speed.
    let gone = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    let endpoint = format!(
        "http://{}",
        gone.local_addr().unwrap_or_else(|e| panic!("{e}"))
    );
    drop(gone);
    let (rt, token) = runtime_with_fixture(RuntimeOptions {
        env: otel_env(&endpoint),
        ..RuntimeOptions::default()
    });
    let many: Vec<Value> = (0..40)
        .map(|i| json!(["fx_echo", {"message": format!("m{i}")}]))
        .collect();
    let lines = python_calls(&rt, &token, &Value::Array(many));
    assert!(lines.iter().all(|l| l["isError"] == false), "{lines:?}");
    let figures = wait_calls(&rt, "fx", |c| c["total"] == 40);
    let p99 = figures["p99Ms"].as_f64().unwrap_or(f64::MAX);
    assert!(
        p99 < 500.0,
        "calls stay fast with the receiver unreachable: {figures}"
    );
}

/// Waits until the kernel's exported `name` for `key` satisfies `pred`.
fn wait_kernel_metric(receiver: &OtlpReceiver, name: &str, key: &str, pred: impl Fn(i64) -> bool) {
    wait_until(
        &format!("kernel metric {name}[{key:?}]"),
        Duration::from_secs(30),
        || {
            receiver
                .captured()
                .kernel_metric(name)
                .get(key)
                .copied()
                .is_some_and(&pred)
        },
        || format!("{name} = {:?}", receiver.captured().kernel_metric(name)),
    );
}

#[test]
fn otel_exports_the_kernels_restarts_fences_commits_circuits_sessions_and_audit_drops() {
    let receiver = OtlpReceiver::start(0);
    let mut rt = Runtime::start(RuntimeOptions {
        env: otel_env(&receiver.endpoint()),
        ..RuntimeOptions::default()
    });
    let mut manifest = fixture_connector(
        "fx",
        &["--tools", "echo,sleep", "--stderr-secret-env", "FX_TOKEN"],
    );
    manifest["mcp"]["secrets"] = json!(["FX_TOKEN"]);
    manifest["timeouts"] = json!({"callMs": 300});
    manifest["circuit"] = json!({"failures": 2, "windowMs": 60_000, "openMs": 600_000});
    rt.install_ok(&manifest, &[]);
    rt.wait_status("fx", "auth_required", READY);
    rt.connect_from_env("fx", "FX_TOKEN", SECRET);
    rt.wait_status("fx", "ready", READY);
    let token = rt.issue_token("obs-ws-7", "obs-sess-7");

    // The first generation is live, one session, nothing restarted, dropped or open.
    wait_kernel_metric(&receiver, "tutti.commits", "fx", |n| n >= 1);
    wait_kernel_metric(&receiver, "tutti.sessions.live", "", |n| n == 1);
    wait_kernel_metric(&receiver, "tutti.worker.restarts", "fx", |n| n == 0);
    wait_kernel_metric(&receiver, "tutti.circuits.open", "fx", |n| n == 0);
    wait_kernel_metric(&receiver, "tutti.audit.dropped", "", |n| n == 0);
    let commits = receiver.captured().kernel_metric("tutti.commits")["fx"];

    // SIGKILL the worker: a fence, a restart, and the next generation's commit.
    let workers = rt.workers();
    let worker = workers
        .iter()
        .find(|w| w.key == "fx")
        .unwrap_or_else(|| panic!("no worker for fx: {workers:?}"));
    #[cfg(unix)]
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(worker.pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap_or_else(|e| panic!("kill {}: {e}", worker.pid));
    #[cfg(not(unix))]
    let _ = worker;
    wait_kernel_metric(&receiver, "tutti.fences", "fx", |n| n >= 1);
    wait_kernel_metric(&receiver, "tutti.worker.restarts", "fx", |n| n >= 1);
    wait_kernel_metric(&receiver, "tutti.commits", "fx", |n| n > commits);
    rt.wait_status("fx", "ready", READY);

    // Two timeouts open the circuit.
    let slow = json!([["fx_sleep", {"ms": 3000}], ["fx_sleep", {"ms": 3000}]]);
    assert_eq!(python_calls(&rt, &token, &slow).len(), 2);
    wait_kernel_metric(&receiver, "tutti.circuits.open", "fx", |n| n == 1);

    // Revoking the session leaves none live.
    rt.tutti_ok(&[
        "session",
        "revoke",
        "--workspace",
        "obs-ws-7",
        "--session",
        "obs-sess-7",
    ]);
    wait_kernel_metric(&receiver, "tutti.sessions.live", "", |n| n == 0);

    let all = receiver.captured().text();
    assert!(!all.contains(SECRET), "a secret was exported");
    assert!(!all.contains(&token), "the session token was exported");
    assert!(
        !all.contains("obs-ws-7") && !all.contains("obs-sess-7"),
        "a workspace or session name was exported"
    );
}

//! The fixture MCP server, driven directly over stdio and HTTP.

use std::time::Duration;

use serde_json::{Value, json};
use tutti_tests::{FixtureHttp, Mcp, StdioClient, proc_tree};

const SHORT: Duration = Duration::from_millis(400);
const LONG: Duration = Duration::from_secs(10);

fn tool_names(list_response: &Value) -> Vec<String> {
    list_response["result"]["tools"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|t| t["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn text_of(response: &Value) -> String {
    response["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text content in {response}"))
        .to_owned()
}

fn call(c: &mut StdioClient, name: &str, args: Value) -> Value {
    c.request("tools/call", json!({"name": name, "arguments": args}))
}

#[test]
fn initialize_list_and_call() {
    let mut c = StdioClient::fixture(&[]);
    let init = c.request(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
    );
    assert_eq!(init["jsonrpc"], json!("2.0"));
    assert_eq!(init["result"]["protocolVersion"], json!("2025-11-25"));
    assert_eq!(
        init["result"]["capabilities"],
        json!({"tools": {"listChanged": true}})
    );
    assert_eq!(init["result"]["serverInfo"]["name"], json!("tutti-fixture"));
    c.notify("notifications/initialized", json!({}));

    let unsupported = c.request("initialize", json!({"protocolVersion": "1999-01-01"}));
    assert_eq!(
        unsupported["result"]["protocolVersion"],
        json!("2025-06-18")
    );

    assert_eq!(c.request("ping", json!({}))["result"], json!({}));

    let list = c.request("tools/list", json!({}));
    assert_eq!(tool_names(&list), ["echo", "add"]);
    assert!(list["result"].get("nextCursor").is_none());
    let add = &list["result"]["tools"][1];
    assert_eq!(
        add["outputSchema"]["properties"]["sum"]["type"],
        json!("integer")
    );

    assert_eq!(
        text_of(&call(&mut c, "echo", json!({"message": "héllo"}))),
        "héllo"
    );
    let sum = call(&mut c, "add", json!({"a": 40, "b": 2}));
    assert_eq!(text_of(&sum), "42");
    assert_eq!(sum["result"]["structuredContent"], json!({"sum": 42}));

    let unknown = call(&mut c, "nope", json!({}));
    assert_eq!(unknown["error"]["code"], json!(-32602));
    assert_eq!(unknown["error"]["message"], json!("Unknown tool: nope"));

    let method = c.request("resources/list", json!({}));
    assert_eq!(method["error"]["code"], json!(-32601));

    // EOF on stdin ends the server cleanly.
    c.close_stdin();
    let status = c
        .wait_exit(LONG)
        .unwrap_or_else(|| panic!("no exit after EOF"));
    assert!(status.success(), "{status}");
}

#[test]
fn tools_list_is_paginated() {
    let mut c = StdioClient::fixture(&["--tools", "echo", "--many", "25", "--page-size", "10"]);
    c.initialize();
    let mut names = Vec::new();
    let mut cursor: Option<Value> = None;
    let mut pages = 0;
    loop {
        let params = match &cursor {
            Some(cur) => json!({"cursor": cur}),
            None => json!({}),
        };
        let page = c.request("tools/list", params);
        pages += 1;
        names.extend(tool_names(&page));
        match page["result"].get("nextCursor") {
            Some(cur) => cursor = Some(cur.clone()),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(names.len(), 26);
    assert_eq!(names[0], "echo");
    assert_eq!(names[1], "tool_0000");
    assert_eq!(names[25], "tool_0024");
    let bad = c.request("tools/list", json!({"cursor": "bogus"}));
    assert_eq!(bad["error"]["code"], json!(-32602));
    assert_eq!(
        text_of(&call(&mut c, "tool_0007", json!({"p0007": "x"}))),
        "tool_0007"
    );
}

#[test]
fn calls_run_concurrently_and_cancel_ends_a_sleep() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let record = dir.path().join("record.jsonl");
    let record_arg = record.to_string_lossy().into_owned();
    let mut c = StdioClient::fixture(&["--tools", "echo,sleep", "--record", &record_arg]);
    c.initialize();

    let sleep_id = c.start_request(
        "tools/call",
        json!({"name": "sleep", "arguments": {"ms": 60000}}),
    );
    // A call made after the sleep is answered while the sleep is still running.
    let echo = call(&mut c, "echo", json!({"message": "still here"}));
    assert_eq!(text_of(&echo), "still here");

    c.notify(
        "notifications/cancelled",
        json!({"requestId": sleep_id, "reason": "test"}),
    );
    // The server keeps working, and the cancelled call never gets a response.
    assert_eq!(c.request("ping", json!({}))["result"], json!({}));
    // The sleep ended early (the server says so on stderr) and was never answered.
    let deadline = std::time::Instant::now() + LONG;
    while !c.stderr().contains(&format!("call {sleep_id} cancelled")) {
        assert!(
            std::time::Instant::now() < deadline,
            "the sleep was not cancelled; stderr:\n{}",
            c.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        c.response(&sleep_id, SHORT).is_none(),
        "a cancelled call was answered"
    );

    let lines: Vec<Value> = std::fs::read_to_string(&record)
        .unwrap_or_else(|e| panic!("cannot read the record: {e}"))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad record line {l}: {e}")))
        .collect();
    let methods: Vec<&str> = lines.iter().filter_map(|l| l["method"].as_str()).collect();
    assert_eq!(
        methods,
        [
            "initialize",
            "notifications/initialized",
            "tools/call",
            "tools/call",
            "notifications/cancelled",
            "ping"
        ]
    );
    assert_eq!(lines[4]["params"]["requestId"], sleep_id);
    assert_eq!(lines[2]["params"]["name"], json!("sleep"));
    assert!(lines[1].get("id").is_none());
}

#[test]
fn ignore_cancel_answers_anyway() {
    let mut c = StdioClient::fixture(&["--tools", "sleep", "--ignore-cancel"]);
    c.initialize();
    let id = c.start_request(
        "tools/call",
        json!({"name": "sleep", "arguments": {"ms": 200}}),
    );
    c.notify("notifications/cancelled", json!({"requestId": id}));
    let r = c
        .response(&id, LONG)
        .unwrap_or_else(|| panic!("no response with --ignore-cancel"));
    assert_eq!(text_of(&r), "slept 200 ms");
}

#[test]
fn error_results_and_rpc_errors() {
    let mut c = StdioClient::fixture(&["--tools", "fail,rpc_error,big,whoami,env"]);
    c.initialize();
    let fail = call(&mut c, "fail", json!({}));
    assert_eq!(fail["result"]["isError"], json!(true));
    assert_eq!(text_of(&fail), "fixture failure");
    let rpc = call(&mut c, "rpc_error", json!({}));
    assert_eq!(
        rpc["error"],
        json!({"code": -32001, "message": "fixture rpc error", "data": {"detail": "x"}})
    );
    assert_eq!(
        text_of(&call(&mut c, "big", json!({"bytes": 100_000}))).len(),
        100_000
    );

    let who: Value = serde_json::from_str(&text_of(&call(&mut c, "whoami", json!({}))))
        .unwrap_or_else(|e| panic!("whoami is not JSON: {e}"));
    assert_eq!(who["pid"], json!(c.pid()));
    #[cfg(unix)]
    assert_eq!(who["ppid"], json!(std::process::id()));

    let env: Value = serde_json::from_str(&text_of(&call(&mut c, "env", json!({}))))
        .unwrap_or_else(|e| panic!("env is not JSON: {e}"));
    assert!(
        env["env"]
            .as_object()
            .is_some_and(|m| m.contains_key("PATH"))
    );
    assert!(env["cwd"].as_str().is_some_and(|s| !s.is_empty()));
}

#[test]
fn conformance_tools_notify_progress_and_logs() {
    let mut c = StdioClient::fixture(&["--tools", "conformance"]);
    c.initialize();
    let names = tool_names(&c.request("tools/list", json!({})));
    assert_eq!(
        names,
        [
            "simple_text",
            "image_content",
            "audio_content",
            "embedded_resource",
            "multiple_content_types",
            "error_handling",
            "tool_with_logging",
            "tool_with_progress"
        ]
    );
    let r = c.request(
        "tools/call",
        json!({"name": "tool_with_progress", "arguments": {}, "_meta": {"progressToken": "p1"}}),
    );
    assert_eq!(text_of(&r), "p1");
    let mut progress = Vec::new();
    while let Some(n) = c.wait_for(SHORT, |m| m["method"] == "notifications/progress") {
        assert_eq!(n["params"]["progressToken"], json!("p1"));
        progress.push(n["params"]["progress"].as_i64().unwrap_or(-1));
    }
    assert_eq!(progress, [0, 50, 100]);

    let r = call(&mut c, "tool_with_logging", json!({}));
    assert_eq!(text_of(&r), "Tool with logging executed successfully");
    let mut logs = 0;
    while c
        .wait_for(SHORT, |m| m["method"] == "notifications/message")
        .is_some()
    {
        logs += 1;
    }
    assert_eq!(logs, 3);

    let err = call(&mut c, "error_handling", json!({}));
    assert_eq!(err["result"]["isError"], json!(true));
    let image = call(&mut c, "image_content", json!({}));
    assert_eq!(
        image["result"]["content"][0]["mimeType"],
        json!("image/png")
    );
    let res = call(&mut c, "embedded_resource", json!({}));
    assert_eq!(
        res["result"]["content"][0]["resource"]["uri"],
        json!("test://embedded-resource")
    );
}

#[test]
fn banner_lines_come_first() {
    let mut c = StdioClient::fixture(&["--banner", "3"]);
    for _ in 0..3 {
        let line = c.recv(LONG).unwrap_or_else(|| panic!("no banner line"));
        assert!(line.is_string(), "banner line was JSON: {line}");
    }
    c.initialize();
}

#[test]
fn crash_and_hang_at_start() {
    let mut crash = StdioClient::fixture(&["--crash-at-start"]);
    let status = crash
        .wait_exit(LONG)
        .unwrap_or_else(|| panic!("did not exit"));
    assert_eq!(status.code(), Some(1));

    let mut hang = StdioClient::fixture(&["--hang-at-start"]);
    let id = hang.start_request("initialize", json!({"protocolVersion": "2025-06-18"}));
    assert!(
        hang.response(&id, SHORT).is_none(),
        "--hang-at-start answered"
    );
    assert!(proc_tree::is_alive(hang.pid()) || cfg!(not(target_os = "linux")));
}

#[test]
fn exit_after_calls() {
    let mut c = StdioClient::fixture(&["--exit-after-calls", "1"]);
    c.initialize();
    assert_eq!(
        text_of(&call(&mut c, "echo", json!({"message": "last"}))),
        "last"
    );
    let status = c.wait_exit(LONG).unwrap_or_else(|| panic!("did not exit"));
    assert_eq!(status.code(), Some(1));

    let mut c = StdioClient::fixture(&["--exit-after-calls", "0"]);
    c.initialize();
    let id = c.start_request(
        "tools/call",
        json!({"name": "echo", "arguments": {"message": "x"}}),
    );
    let status = c.wait_exit(LONG).unwrap_or_else(|| panic!("did not exit"));
    assert_eq!(status.code(), Some(1));
    assert!(c.response(&id, SHORT).is_none());
}

#[test]
fn schema_faults_and_list_changed() {
    let mut c = StdioClient::fixture(&[
        "--tools",
        "echo",
        "--bad-schema",
        "--collide",
        "--list-changed-after-ms",
        "50",
    ]);
    c.initialize();
    let list = c.request("tools/list", json!({}));
    assert_eq!(tool_names(&list), ["echo", "bad_schema", "a.b", "a_b"]);
    assert_eq!(
        list["result"]["tools"][1]["inputSchema"],
        json!({"type": "string"})
    );
    let changed = c
        .wait_for(LONG, |m| m["method"] == "notifications/tools/list_changed")
        .unwrap_or_else(|| panic!("no list_changed notification"));
    assert!(changed.get("id").is_none());
    let list = c.request("tools/list", json!({}));
    assert!(tool_names(&list).contains(&"late".to_owned()));
    assert_eq!(text_of(&call(&mut c, "late", json!({}))), "late ok");
}

#[test]
fn stderr_env_prints_the_environment() {
    let mut cmd = std::process::Command::new(tutti_tests::fixture_bin());
    cmd.arg("--stderr-env").env("FIXTURE_MARKER", "m4rk3r");
    let mut c = StdioClient::spawn_cmd(cmd);
    c.initialize();
    assert!(
        c.stderr().contains("FIXTURE_MARKER=m4rk3r"),
        "{}",
        c.stderr()
    );
}

#[cfg(target_os = "linux")]
#[test]
fn grandchild_survives_its_parent() {
    let mut c = StdioClient::fixture(&["--grandchild", "--tools", "whoami"]);
    c.initialize();
    let who: Value = serde_json::from_str(&text_of(&call(&mut c, "whoami", json!({}))))
        .unwrap_or_else(|e| panic!("whoami is not JSON: {e}"));
    let gc = who["grandchild"]
        .as_u64()
        .and_then(|p| u32::try_from(p).ok())
        .unwrap_or_else(|| panic!("no grandchild pid in {who}"));
    assert!(proc_tree::descendants(c.pid()).contains(&gc));
    let gc_info = proc_tree::info(gc).unwrap_or_else(|| panic!("grandchild {gc} not found"));
    assert!(
        gc_info.cmdline.contains("--sleep-forever"),
        "{}",
        gc_info.cmdline
    );
    drop(c); // SIGKILL to the fixture only
    assert!(
        proc_tree::is_alive(gc),
        "the grandchild died with its parent"
    );
    // Clean up the orphan ourselves.
    if let Ok(pid) = i32::try_from(gc) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    assert!(proc_tree::wait_gone(&[gc], LONG).is_empty());
}

#[tokio::test]
async fn http_mode_sessions_and_bearer() {
    let server = FixtureHttp::start(&["--tools", "echo,add", "--require-bearer", "s3cret"]);

    let anon = Mcp::legacy(&server.url, "");
    let (status, headers, _) = anon.request("ping", json!({})).await;
    assert_eq!(status, 401);
    assert_eq!(
        headers
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok()),
        Some("Bearer")
    );
    let wrong = Mcp::legacy(&server.url, "nope");
    assert_eq!(wrong.request("ping", json!({})).await.0, 401);

    let mcp = Mcp::legacy(&server.url, "s3cret");
    // Before initialize there is no session: refused.
    assert_eq!(mcp.request("tools/list", json!({})).await.0, 400);
    let init = mcp.initialize().await;
    assert_eq!(init["serverInfo"]["name"], json!("tutti-fixture"));
    assert!(mcp.session_id().is_some());
    let tools = mcp.list_tools().await;
    assert_eq!(tools.len(), 2);
    let sum = mcp.call_tool_ok("add", json!({"a": 1, "b": 2})).await;
    assert_eq!(sum["structuredContent"], json!({"sum": 3}));

    let (status, _, _) = mcp.send_method(reqwest::Method::GET, &[]).await;
    assert_eq!(status, 405);
}

#[tokio::test]
async fn http_mode_exit_after_calls() {
    let mut server = FixtureHttp::start(&["--exit-after-calls", "1"]);
    let mcp = Mcp::legacy(&server.url, "");
    mcp.initialize().await;
    let r = mcp.call_tool_ok("echo", json!({"message": "bye"})).await;
    assert_eq!(r["content"][0]["text"], json!("bye"));
    let status = server
        .wait_exit(LONG)
        .unwrap_or_else(|| panic!("the HTTP fixture did not exit"));
    assert_eq!(status.code(), Some(1));
}

//! Governance: risk levels on tools and the launch allowlist, over the real runtime.
#![cfg(unix)]

use std::time::Duration;

use serde_json::{Value, json};
use tutti_tests::{Mcp, Runtime, RuntimeOptions, fixture_bin, fixture_connector};

const READY: Duration = Duration::from_secs(20);

fn risks(tools: &[Value]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = tools
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap_or_default().to_string(),
                t["_meta"]["tutti/risk"]
                    .as_str()
                    .unwrap_or("MISSING")
                    .to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread")]
async fn risk_levels_come_from_hints_verbs_and_overrides_in_both_eras() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let tools = ["--tools", "read_only,destroy,delete_item,plain"];
    rt.install_ok(&fixture_connector("gov", &tools), &[]);
    let mut over = fixture_connector("ovr", &tools);
    over["toolRisk"] = json!({"plain": "high", "destroy": "low"});
    rt.install_ok(&over, &[]);
    rt.wait_status("gov", "ready", READY);
    rt.wait_status("ovr", "ready", READY);
    let token = rt.issue_token("w", "gov");

    let expected = vec![
        ("gov_delete_item".to_string(), "high".to_string()),
        ("gov_destroy".to_string(), "high".to_string()),
        ("gov_plain".to_string(), "medium".to_string()),
        ("gov_read_only".to_string(), "low".to_string()),
        ("ovr_delete_item".to_string(), "high".to_string()),
        ("ovr_destroy".to_string(), "low".to_string()),
        ("ovr_plain".to_string(), "high".to_string()),
        ("ovr_read_only".to_string(), "low".to_string()),
    ];
    let legacy = Mcp::legacy(rt.frontend_url(), &token);
    assert_eq!(
        risks(&legacy.list_tools().await),
        expected,
        "legacy tools/list _meta"
    );
    let modern = Mcp::modern(rt.frontend_url(), &token);
    assert_eq!(
        risks(&modern.list_tools().await),
        expected,
        "modern tools/list _meta"
    );

    let status = rt.status_json();
    let gov = status["connectors"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["key"] == "gov"))
        .cloned()
        .expect("gov in status");
    assert_eq!(gov["risk"]["low"], json!(1), "{gov}");
    assert_eq!(gov["risk"]["medium"], json!(1), "{gov}");
    assert_eq!(gov["risk"]["high"], json!(2), "{gov}");
    let mut high: Vec<String> = gov["risk"]["highTools"]
        .as_array()
        .expect("highTools")
        .iter()
        .filter_map(|t| t.as_str().map(str::to_string))
        .collect();
    high.sort();
    assert_eq!(high, ["gov_delete_item", "gov_destroy"]);
}

/// A release whose command is `/bin/sh` running a script of the release.
fn sh_connector(rt: &mut Runtime) -> (Value, String) {
    let manifest = json!({
        "key": "shell",
        "name": "Shell wrapper",
        "description": "An upstream started through /bin/sh",
        "version": "1.0.0",
        "mcp": {"transport": "stdio", "command": "/bin/sh", "args": ["run.sh"]},
    });
    let script = format!("exec {} --tools echo\n", fixture_bin().display());
    let dir = rt.write_release(&manifest, &[("run.sh", script.as_bytes())]);
    (manifest, dir.to_string_lossy().into_owned())
}

#[test]
fn commands_outside_the_release_need_the_allowlist() {
    // No owner allowlist beyond the defaults for this runtime.
    let mut rt = Runtime::start(RuntimeOptions {
        env: vec![("TUTTI_ALLOW_COMMANDS".into(), String::new())],
        ..RuntimeOptions::default()
    });
    let (_, dir) = sh_connector(&mut rt);
    let refused = rt.tutti(&["connector", "install", &dir, "--yes"]);
    assert!(!refused.status.success(), "/bin/sh must be refused");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("mcp.command") && stderr.contains("--allow-command sh"),
        "the refusal must name the field and say how to allow it: {stderr}"
    );
    assert!(
        !rt.state_dir().join("releases/shell").exists(),
        "a refused install wrote a release"
    );

    let ok = rt.tutti(&[
        "connector",
        "install",
        &dir,
        "--yes",
        "--allow-command",
        "sh",
    ]);
    let stderr = String::from_utf8_lossy(&ok.stderr);
    assert!(
        ok.status.success(),
        "install with --allow-command sh failed: {stderr}"
    );
    assert!(
        stderr.contains("allowed commands") && stderr.contains("sh"),
        "the confirmation must show the allowed command: {stderr}"
    );
    rt.wait_status("shell", "ready", READY);
    let registry: Value = serde_json::from_slice(
        &std::fs::read(rt.state_dir().join("registry.json")).expect("registry"),
    )
    .expect("registry json");
    assert_eq!(
        registry["connectors"]["shell"]["allowCommands"],
        json!(["sh"]),
        "the allowance is recorded in the registry"
    );

    // Bundled binaries (next to the kernel) and commands inside the release need nothing.
    rt.install_ok(&fixture_connector("bundled", &["--tools", "echo"]), &[]);
    rt.wait_status("bundled", "ready", READY);
}

fn wait_audit(rt: &Runtime, what: &str, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let lines = rt.audit_lines();
        if pred(&lines) {
            return lines;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "audit.jsonl never showed {what}: {lines:#?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The launch (argv, environment names, cwd), the commit and the session records.
fn assert_launch_commit_and_session_records(lines: &[Value]) {
    let find = |event: &str| {
        lines
            .iter()
            .find(|e| e["event"] == event)
            .unwrap_or_else(|| panic!("no {event} record in {lines:#?}"))
            .clone()
    };
    let launch = find("launch");
    assert_eq!(launch["connector"], json!("aud"));
    assert!(
        launch["argv"][0]
            .as_str()
            .is_some_and(|a| a.ends_with("tutti-fixture-server")),
        "{launch}"
    );
    let env: Vec<&str> = launch["env"]
        .as_array()
        .expect("env names")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        env.contains(&"AUD_KEY") && env.contains(&"PATH"),
        "env names: {env:?}"
    );
    assert!(
        launch["cwd"]
            .as_str()
            .is_some_and(|c| c.contains("releases/aud")),
        "{launch}"
    );
    let commit = find("commit");
    assert_eq!(commit["generation"], launch["generation"]);
    assert_eq!(commit["tools"], json!(4));
    let issue = find("session_issue");
    assert_eq!(
        (issue["workspace"].as_str(), issue["session"].as_str()),
        (Some("ws-audit"), Some("s-audit"))
    );
    let revoke = find("session_revoke");
    assert_eq!(revoke["revoked"], json!(1));
}

/// One call record per outcome, each naming workspace, session, connector, tool, risk and
/// duration; every record has its time.
fn assert_call_records(lines: &[Value]) {
    let calls: Vec<&Value> = lines.iter().filter(|e| e["event"] == "call").collect();
    let outcomes: Vec<&str> = calls.iter().filter_map(|e| e["outcome"].as_str()).collect();
    for want in [
        "ok",
        "tool_error",
        "invalid_arguments",
        "rpc_error",
        "timeout",
        "cancelled",
    ] {
        assert!(
            outcomes.contains(&want),
            "no {want} call record in {outcomes:?}"
        );
    }
    for c in &calls {
        assert_eq!(c["workspace"], json!("ws-audit"), "{c}");
        assert_eq!(c["session"], json!("s-audit"), "{c}");
        assert_eq!(c["connector"], json!("aud"), "{c}");
        assert!(
            c["tool"].as_str().is_some_and(|t| t.starts_with("aud_")),
            "{c}"
        );
        assert!(
            c["risk"]
                .as_str()
                .is_some_and(|r| ["low", "medium", "high"].contains(&r)),
            "{c}"
        );
        assert!(c["durationUs"].as_u64().is_some(), "{c}");
    }
    let rpc = calls
        .iter()
        .find(|c| c["outcome"] == "rpc_error")
        .expect("rpc_error record");
    assert_eq!(rpc["errorCode"], json!(-32001));
    for e in lines {
        assert!(
            e["time"].as_str().is_some_and(|t| t.ends_with('Z')),
            "record without time: {e}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn audit_log_records_launches_commits_fences_and_sessions_without_values() {
    const SECRET: &str = "Audit-S3cret-9f2c41";
    const ARG: &str = "distinctive-argument-77aa";
    let mut rt = Runtime::start(RuntimeOptions::default());
    let mut m = fixture_connector("aud", &["--tools", "echo,fail,rpc_error,sleep"]);
    m["timeouts"] = json!({"callMs": 400});
    m["mcp"]["secrets"] = json!(["AUD_KEY"]);
    rt.install_ok(&m, &[]);
    rt.connect_from_env("aud", "AUD_KEY", SECRET);
    rt.wait_status("aud", "ready", READY);
    let token = rt.issue_token("ws-audit", "s-audit");
    let legacy = Mcp::legacy(rt.frontend_url(), &token);
    let echo = legacy
        .call_tool_ok("aud_echo", json!({"message": ARG}))
        .await;
    assert_eq!(echo["content"][0]["text"], json!(ARG));
    let failed = legacy.call_tool_ok("aud_fail", json!({})).await;
    assert_eq!(failed["isError"], json!(true));
    let invalid = legacy
        .call_tool_ok("aud_echo", json!({"message": 7, "extra": ARG}))
        .await;
    assert_eq!(invalid["isError"], json!(true));
    let (_, _, body) = legacy.call_tool("aud_rpc_error", json!({})).await;
    assert_eq!(body["error"]["code"], json!(-32001), "{body}");
    let (_, _, body) = legacy.call_tool("aud_sleep", json!({"ms": 3000})).await;
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("[MCP_TIMEOUT]")),
        "{body}"
    );
    // Cancelled: legacy notifications/cancelled for an in-flight call.
    let long = Mcp::legacy(rt.frontend_url(), &token);
    let cancel_me = tokio::spawn(async move {
        let body = json!({"jsonrpc": "2.0", "id": "audit-cancel", "method": "tools/call",
                          "params": {"name": "aud_sleep", "arguments": {"ms": 3000}}});
        long.post_raw(body.to_string().into_bytes(), &[]).await
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    legacy
        .notify(
            "notifications/cancelled",
            json!({"requestId": "audit-cancel"}),
        )
        .await;
    let (_, _, body) = cancel_me.await.expect("join");
    assert_eq!(body["error"]["code"], json!(-32800), "{body}");
    rt.tutti_ok(&[
        "session",
        "revoke",
        "--workspace",
        "ws-audit",
        "--session",
        "s-audit",
    ]);
    rt.tutti_ok(&["connector", "uninstall", "aud"]);

    // Call records travel frontend → kernel asynchronously: wait for all six.
    let lines = wait_audit(&rt, "the uninstall fence and six call records", |l| {
        l.iter()
            .any(|e| e["event"] == "fence" && e["reason"] == "uninstalled")
            && l.iter().filter(|e| e["event"] == "call").count() >= 6
    });
    assert_launch_commit_and_session_records(&lines);
    assert_call_records(&lines);
    let raw = std::fs::read_to_string(rt.state_dir().join("logs/audit.jsonl")).expect("audit");
    for needle in [SECRET, ARG, token.as_str(), "tts_"] {
        assert!(!raw.contains(needle), "audit.jsonl contains {needle:?}");
    }
}

/// Latency of `n` sequential echo calls (p50).
async fn echo_p50(mcp: &Mcp, tool: &str, n: usize) -> Duration {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let t = std::time::Instant::now();
        mcp.call_tool_ok(tool, json!({"message": "x"})).await;
        v.push(t.elapsed());
    }
    v.sort();
    v[n / 2]
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stalled_audit_writer_drops_records_instead_of_slowing_calls() {
    // Baseline runtime, then one whose audit writer sleeps 200 ms per record.
    let mut base = Runtime::start(RuntimeOptions::default());
    base.install_ok(&fixture_connector("fast", &["--tools", "echo"]), &[]);
    base.wait_status("fast", "ready", READY);
    let token = base.issue_token("w", "s");
    let mcp = Mcp::legacy(base.frontend_url(), &token);
    echo_p50(&mcp, "fast_echo", 50).await;
    let unstalled = echo_p50(&mcp, "fast_echo", 300).await;
    drop(base);

    let mut rt = Runtime::start(RuntimeOptions {
        env: vec![("TUTTI_AUDIT_STALL_MS".into(), "200".into())],
        ..RuntimeOptions::default()
    });
    rt.install_ok(&fixture_connector("fast", &["--tools", "echo"]), &[]);
    rt.wait_status("fast", "ready", READY);
    let token = rt.issue_token("w", "s");
    let mcp = Mcp::legacy(rt.frontend_url(), &token);
    // Fill the kernel's queue and the frontend's: 4096 + 4096 + in-flight records.
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let m = Mcp::legacy(rt.frontend_url(), &token);
        tasks.push(tokio::spawn(async move {
            for _ in 0..1200 {
                m.call_tool_ok("fast_echo", json!({"message": "x"})).await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("load task");
    }
    let stalled = echo_p50(&mcp, "fast_echo", 300).await;
    // Within 2x of the unstalled run (plus a small floor for timer noise on a busy machine).
    assert!(
        stalled <= unstalled * 2 + Duration::from_micros(300),
        "calls slowed down with a stalled audit writer: p50 {stalled:?} vs {unstalled:?}"
    );
    let status = rt.status_json();
    let dropped = status["auditDropped"].as_u64().unwrap_or(0);
    assert!(
        dropped > 0,
        "status must show dropped audit records: {status}"
    );
}

//! Tool search (SPEC §15): sessions issued with `--tools search|auto`.
//!
//! The official Python SDK client (`mcp` 2.3.0, both eras) with a search-mode token over a
//! 400-tool fixture sees exactly `tutti_search_tools` and `tutti_call_tool`, finds tools by
//! keyword and by `select:`, calls one with the same answer a direct session gets, gets
//! `invalid_arguments` and, after an uninstall, the fenced tool's error inside an `isError`
//! result; the audit log names the real tool. `auto` switches at 80 tools both ways.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tutti_tests::{Mcp, Runtime, RuntimeOptions, fixture_connector, require_python_venv};

const READY: Duration = Duration::from_secs(30);
/// Upper bound for one Python client run.
const CLIENT_RUN: Duration = Duration::from_secs(90);

/// The official Python SDK client: runs the JSON list of operations in argv[4] in one
/// session and prints one JSON line per operation.
const PY_CLIENT: &str = r#"
import asyncio, json, os, sys
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

def out(**kw):
    print(json.dumps(kw), flush=True)

def dump(model):
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)

async def main():
    url, mode, ops = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    headers = {"Authorization": "Bearer " + os.environ["TUTTI_TEST_TOKEN"]}
    async with httpx2.AsyncClient(headers=headers) as hc:
        async with Client(streamable_http_client(url, http_client=hc), mode=mode) as c:
            for op in ops:
                if op[0] == "list":
                    tools = await c.list_tools()
                    out(op="list", tools=[dump(t) for t in tools.tools])
                else:
                    try:
                        r = await c.call_tool(op[1], op[2])
                        out(op="call", result=dump(r))
                    except MCPError as e:
                        out(op="call", error={"code": e.error.code, "message": e.error.message})

asyncio.run(main())
"#;

/// Runs `ops` with the Python SDK in `mode` (`legacy` or `auto`: modern); one JSON value per op.
fn python(rt: &Runtime, token: &str, mode: &str, ops: &Value) -> Vec<Value> {
    let venv = require_python_venv();
    let script = rt.root().join("search_client.py");
    std::fs::write(&script, PY_CLIENT).unwrap_or_else(|e| panic!("write script: {e}"));
    let mut child = Command::new(venv.join("bin").join("python"))
        .arg(&script)
        .args([rt.frontend_url(), mode, &ops.to_string()])
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
    while child.try_wait().ok().flatten().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the Python client did not finish within {CLIENT_RUN:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("python: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "Python client ({mode}) failed: {}\nstdout: {stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("line {l}: {e}")))
        .collect();
    assert_eq!(
        lines.len(),
        ops.as_array().map_or(0, Vec::len),
        "one line per op: {stdout}"
    );
    lines
}

/// Issues a token with `--tools MODE`; checks the binding carries the mode.
fn issue(rt: &Runtime, session: &str, mode: &str) -> String {
    let out = rt.tutti_ok(&[
        "session",
        "issue",
        "--workspace",
        "w",
        "--session",
        session,
        "--tools",
        mode,
    ]);
    let binding: Value = serde_json::from_str(out.trim()).unwrap_or(Value::Null);
    let headers = &binding["mcpServers"][0]["headers"];
    let expected = if mode == "all" {
        Value::Null
    } else {
        json!(mode)
    };
    assert_eq!(headers["X-Tutti-Tools"], expected, "binding: {binding}");
    headers["Authorization"]
        .as_str()
        .and_then(|a| a.strip_prefix("Bearer "))
        .unwrap_or_else(|| panic!("no bearer in {binding}"))
        .to_owned()
}

fn names(listed: &Value) -> Vec<String> {
    listed["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

fn found(call: &Value) -> Vec<String> {
    let result = &call["result"];
    assert_ne!(result["isError"], true, "search failed: {call}");
    names(&result["structuredContent"])
}

fn text(call: &Value) -> &str {
    call["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
}

/// The audit log names the real tool and the search session.
fn assert_audit_names_the_real_tool(rt: &Runtime) {
    let audit = rt.audit_lines();
    let of = |tool: &str, outcome: &str| {
        audit.iter().any(|r| {
            r["event"] == "call"
                && r["tool"] == tool
                && r["session"] == "searcher"
                && r["outcome"] == outcome
                && r["connector"] == "fx"
        })
    };
    assert!(of("fx_echo", "ok"), "audit: {audit:?}");
    assert!(of("fx_tool_0123", "invalid_arguments"), "audit: {audit:?}");
    assert!(
        !audit
            .iter()
            .any(|r| r["tool"].as_str().is_some_and(|t| t.starts_with("tutti_"))),
        "the search tools are not connector calls: {audit:?}"
    );
}

/// After an uninstall: the direct call's error text, inside an isError result.
fn after_an_uninstall_the_direct_error_inside_a_result(rt: &Runtime, search: &str, direct: &str) {
    rt.tutti_ok(&["connector", "uninstall", "fx"]);
    for mode in ["legacy", "auto"] {
        let call = json!([["call", "fx_echo", {"message": "hi"}]]);
        let direct_error = python(rt, direct, mode, &call);
        let message = direct_error[0]["error"]["message"]
            .as_str()
            .unwrap_or_else(|| panic!("direct call after uninstall: {}", direct_error[0]))
            .to_owned();
        assert!(message.contains("not available"), "{message}");
        let ops = json!([
            ["call", "tutti_call_tool", {"name": "fx_echo", "arguments": {"message": "hi"}}],
            ["call", "tutti_call_tool", {"name": "fx_never_was", "arguments": {}}],
            ["call", "tutti_search_tools", {"query": "echo"}],
        ]);
        let got = python(rt, search, mode, &ops);
        assert_eq!(got[0]["result"]["isError"], true, "{}", got[0]);
        assert_eq!(text(&got[0]), message, "{mode}");
        assert_eq!(
            got[0]["result"]["_meta"]["tutti/error"]["data"]["tutti"]["connector"],
            "fx"
        );
        assert_eq!(text(&got[1]), "Unknown tool: fx_never_was");
        assert!(found(&got[2]).is_empty(), "{}", got[2]);
    }
}

#[test]
fn python_sdk_search_session_finds_calls_and_is_fenced_like_a_direct_one() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    rt.install_ok(
        &fixture_connector("fx", &["--tools", "echo,add", "--many", "400"]),
        &[],
    );
    rt.wait_status("fx", "ready", READY);
    let search = issue(&rt, "searcher", "search");
    let direct = issue(&rt, "direct", "all");

    for mode in ["legacy", "auto"] {
        let ops = json!([
            ["list"],
            ["call", "tutti_search_tools", {"query": "generated fixture tool number 123"}],
            ["call", "tutti_search_tools", {"query": "echo the message back", "limit": 3}],
            ["call", "tutti_search_tools", {"query": "select:fx_tool_0123,fx_echo,fx_nope"}],
            ["call", "tutti_call_tool", {"name": "fx_echo", "arguments": {"message": "hi"}}],
            ["call", "tutti_call_tool", {"name": "fx_tool_0123", "arguments": {"p0123": 7}}],
            ["call", "tutti_search_tools", {"query": "x", "limit": 50}],
        ]);
        let got = python(&rt, &search, mode, &ops);
        assert_eq!(
            names(&got[0]),
            ["tutti_call_tool", "tutti_search_tools"],
            "{mode}"
        );
        for tool in got[0]["tools"].as_array().into_iter().flatten() {
            assert_eq!(tool["inputSchema"]["type"], "object", "{tool}");
            assert!(
                tool["description"].as_str().is_some_and(|d| d.len() > 100),
                "{tool}"
            );
        }
        let by_keyword = found(&got[1]);
        assert!(
            by_keyword.iter().take(3).any(|n| n == "fx_tool_0123"),
            "{mode}: not in the top 3: {by_keyword:?}"
        );
        assert!(by_keyword.len() <= 5, "default limit 5: {by_keyword:?}");
        let echo = found(&got[2]);
        assert_eq!(
            echo.first().map(String::as_str),
            Some("fx_echo"),
            "{echo:?}"
        );
        assert!(echo.len() <= 3);
        assert_eq!(found(&got[3]), ["fx_tool_0123", "fx_echo"], "{mode}");
        let selected = &got[3]["result"]["structuredContent"];
        assert_eq!(selected["notFound"], json!(["fx_nope"]));
        assert_eq!(selected["tools"][1]["risk"], "medium", "{selected}");
        assert_eq!(
            selected["tools"][0]["inputSchema"]["required"],
            json!(["p0123"])
        );

        // The same answer as a direct session's call of the tool.
        let direct_echo = python(
            &rt,
            &direct,
            mode,
            &json!([["call", "fx_echo", {"message": "hi"}]]),
        );
        assert_eq!(got[4]["result"], direct_echo[0]["result"], "{mode}");
        assert_eq!(text(&got[4]), "hi");

        assert_eq!(got[5]["result"]["isError"], true, "{}", got[5]);
        assert!(
            text(&got[5]).starts_with("invalid_arguments: /p0123: "),
            "{}",
            got[5]
        );
        assert!(!text(&got[5]).contains('7'), "never echoes a value");
        assert_eq!(got[6]["result"]["isError"], true);
        assert!(text(&got[6]).starts_with("invalid_arguments: /limit"));
    }

    assert_audit_names_the_real_tool(&rt);
    after_an_uninstall_the_direct_error_inside_a_result(&rt, &search, &direct);
}

async fn listed_names(url: &str, token: &str) -> Vec<String> {
    Mcp::modern(url, token)
        .list_tools()
        .await
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

/// Waits until `pred` holds for the names an `auto` session lists, in both eras.
async fn wait_listed(url: &str, token: &str, what: &str, pred: impl Fn(&[String]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let modern = listed_names(url, token).await;
        let legacy: Vec<String> = Mcp::legacy(url, token)
            .list_tools()
            .await
            .iter()
            .filter_map(|t| t["name"].as_str().map(str::to_owned))
            .collect();
        if pred(&modern) && pred(&legacy) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: listed {} (modern) / {} (legacy) tools: {:?}",
            modern.len(),
            legacy.len(),
            modern.iter().take(5).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn is_search(names: &[String]) -> bool {
    names == ["tutti_call_tool", "tutti_search_tools"]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_switches_at_eighty_tools_both_ways() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    // 78 generated + echo + add = 80 tools: not above the threshold.
    rt.install_ok(
        &fixture_connector("fx", &["--tools", "echo,add", "--many", "78"]),
        &[],
    );
    rt.wait_status("fx", "ready", READY);
    let auto = issue(&rt, "auto", "auto");
    let search = issue(&rt, "search", "search");
    let url = rt.frontend_url().to_owned();
    wait_listed(&url, &auto, "80 tools: the full list", |n| n.len() == 80).await;
    wait_listed(&url, &search, "search is search at any size", is_search).await;

    let mut listen = Mcp::modern(&url, &auto)
        .listen(json!({"toolsListChanged": true}))
        .await;
    let acked = listen.next_event(Duration::from_secs(5)).await;
    assert!(acked.is_some(), "listen acknowledged");

    // One more tool: 81, above the threshold.
    rt.install_ok(&fixture_connector("gx", &["--tools", "echo"]), &[]);
    rt.wait_status("gx", "ready", READY);
    wait_listed(&url, &auto, "81 tools: the search pair", is_search).await;
    let changed = listen.next_event(Duration::from_secs(5)).await;
    assert_eq!(
        changed.as_ref().map(|c| c["method"].clone()),
        Some(json!("notifications/tools/list_changed")),
        "list_changed still fires for an auto session: {changed:?}"
    );
    // The search pair works for the new tool.
    let result = Mcp::modern(&url, &auto)
        .call_tool_ok(
            "tutti_call_tool",
            json!({"name": "gx_echo", "arguments": {"message": "auto"}}),
        )
        .await;
    assert_eq!(result["content"][0]["text"], "auto", "{result}");

    // And back: 80 tools, the full list again.
    rt.tutti_ok(&["connector", "uninstall", "gx"]);
    wait_listed(&url, &auto, "back to 80 tools: the full list", |n| {
        n.len() == 80 && n.iter().any(|t| t == "fx_echo")
    })
    .await;
}

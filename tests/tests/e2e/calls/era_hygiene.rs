//! Era hygiene of the frontend and of tool definitions, end to end over the real binaries: each surface
//! answers in its own era's shape whatever the upstream spoke (SPEC §5; ARCHITECTURE.md "Era
//! hygiene"), tool definitions reach clients with every field their revision defines and the
//! upstream's own `_meta` keys next to ours, and the worker declares no client capability.
#![cfg(unix)]

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tutti_tests::{
    Mcp, Runtime, RuntimeOptions, Server, fixture_connector, free_port, repo_root,
    require_python_venv,
};

/// Starting workers and upstreams on a loaded 2-core machine.
const READY: Duration = Duration::from_secs(40);
/// How long the Python server may take to listen.
const LISTEN: Duration = Duration::from_secs(30);
const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// The Python `MCPServer` script (a 2026-07-28 upstream).
fn era_server_script() -> PathBuf {
    repo_root().join("tests").join("py").join("era_server.py")
}

/// The Python server over streamable HTTP on a free loopback port; killed on drop.
struct PyServer {
    _server: Server,
    url: String,
}

impl PyServer {
    fn start(rt: &Runtime) -> PyServer {
        let python = require_python_venv().join("bin").join("python");
        let port = free_port();
        let mut cmd = Command::new(python);
        cmd.arg(era_server_script())
            .arg(port.to_string())
            .current_dir(rt.root());
        let stderr = rt.root().join("era_server.stderr");
        PyServer {
            _server: Server::spawn("the Python MCPServer", cmd, port, stderr, LISTEN),
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }
}

/// Installs the Python server as a stdio connector: the script, copied into the release
/// with the venv's Python in its `#!` line, is the command (inside the release, so allowed).
fn install_python_stdio(rt: &mut Runtime, key: &str) {
    let python = require_python_venv().join("bin").join("python");
    let source = std::fs::read_to_string(era_server_script())
        .unwrap_or_else(|e| panic!("cannot read era_server.py: {e}"));
    let script = format!("#!{}\n{source}", python.display());
    let manifest = json!({
        "key": key,
        "name": "Python era server (stdio)",
        "description": "The Python SDK's MCPServer over stdio",
        "version": "1.0.0",
        "mcp": {"transport": "stdio", "command": "${release}/era_server.py", "args": ["stdio"]},
    });
    let dir = rt.write_release(&manifest, &[("era_server.py", script.as_bytes())]);
    let path = dir.join("era_server.py");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("cannot chmod {}: {e}", path.display()));
    let dir = dir.to_string_lossy().into_owned();
    rt.tutti_ok(&["connector", "install", &dir, "--yes"]);
}

fn http_connector(key: &str, url: &str) -> Value {
    json!({
        "key": key,
        "name": format!("Remote {key}"),
        "description": format!("Remote MCP server {key}"),
        "version": "1.0.0",
        "mcp": {"transport": "http", "url": url, "auth": {"kind": "none"}},
    })
}

/// The `result` of a 200 reply, or a panic naming `what`.
fn result_of(what: &str, (status, _, body): (u16, reqwest::header::HeaderMap, Value)) -> Value {
    assert_eq!(status, 200, "{what}: {body}");
    assert!(body.get("error").is_none(), "{what}: {body}");
    body["result"].clone()
}

/// What a legacy client must never see: a `resultType`, or an upstream's `serverInfo`.
fn assert_legacy_shape(what: &str, result: &Value) {
    assert!(
        result.get("resultType").is_none(),
        "{what}: resultType leaked: {result}"
    );
    assert!(
        result
            .pointer(&format!("/_meta/{}", SERVER_INFO.replace('/', "~1")))
            .is_none(),
        "{what}: serverInfo leaked: {result}"
    );
    assert!(
        !result.to_string().contains("tutti-py-era"),
        "{what}: the upstream's name leaked: {result}"
    );
}

/// What a modern client must see: `resultType` and the runtime's `serverInfo`.
fn assert_modern_shape(what: &str, result: &Value) {
    assert_eq!(result["resultType"], "complete", "{what}: {result}");
    assert_eq!(
        result["_meta"][SERVER_INFO]["name"], "connector",
        "{what}: serverInfo is not the runtime's: {result}"
    );
    assert!(
        !result.to_string().contains("tutti-py-era"),
        "{what}: the upstream's name leaked: {result}"
    );
}

/// Calls `<key>_measure` and lists tools in every revision a client may speak, checking
/// each answer's shape.
async fn check_every_era(rt: &Runtime, key: &str) {
    let token = rt.issue_token("ws", key);
    let tool = format!("{key}_measure");
    let args = json!({"label": "era"});

    let legacy = Mcp::legacy(rt.frontend_url(), &token);
    legacy.initialize().await;
    for version in ["2025-06-18", "2025-11-25"] {
        let header = [("MCP-Protocol-Version", version)];
        let what = format!("{key} legacy {version} tools/call");
        let call = json!({"name": tool, "arguments": args});
        let result = result_of(
            &what,
            legacy
                .request_with_headers("tools/call", call, &header)
                .await,
        );
        assert!(
            result["content"][0]["text"]
                .as_str()
                .is_some_and(|t| t.contains("era")),
            "{what}: {result}"
        );
        assert_legacy_shape(&what, &result);
        let what = format!("{key} legacy {version} tools/list");
        let list = result_of(
            &what,
            legacy
                .request_with_headers("tools/list", json!({}), &header)
                .await,
        );
        assert!(list.get("resultType").is_none(), "{what}: {list}");
    }

    let modern = Mcp::modern(rt.frontend_url(), &token);
    let discover = modern.initialize().await;
    assert_modern_shape(&format!("{key} server/discover"), &discover);
    let what = format!("{key} modern tools/call");
    let result = modern.call_tool_ok(&tool, args).await;
    assert!(
        result["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("era")),
        "{what}: {result}"
    );
    assert_modern_shape(&what, &result);
    let list = result_of(
        "modern tools/list",
        modern.request("tools/list", json!({})).await,
    );
    assert_modern_shape(&format!("{key} modern tools/list"), &list);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_2026_upstream_over_http_answers_each_era_in_its_own_shape() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let py = PyServer::start(&rt);
    rt.install_ok(&http_connector("pyhttp", &py.url), &[]);
    rt.wait_status("pyhttp", "ready", READY);
    check_every_era(&rt, "pyhttp").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_2026_upstream_over_stdio_answers_each_era_in_its_own_shape() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    install_python_stdio(&mut rt, "pystdio");
    rt.wait_status("pystdio", "ready", READY);
    check_every_era(&rt, "pystdio").await;
}

/// The `rich_def` tool as one revision's client lists it.
async fn rich_def(mcp: &Mcp, version: Option<&str>) -> Value {
    let header: Vec<(&str, &str)> = version
        .map(|v| vec![("MCP-Protocol-Version", v)])
        .unwrap_or_default();
    let list = result_of(
        "tools/list",
        mcp.request_with_headers("tools/list", json!({}), &header)
            .await,
    );
    list["tools"]
        .as_array()
        .and_then(|tools| tools.iter().find(|t| t["name"] == "rich_rich_def"))
        .cloned()
        .unwrap_or_else(|| panic!("rich_rich_def is not listed: {list}"))
}

/// The worker declares exactly the client capabilities it serves: roots, sampling and
/// elicitation are relayed to the calling client (SPEC §11).
fn assert_client_capabilities_declared(record: &std::path::Path) {
    let file = std::fs::File::open(record)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", record.display()));
    let initialize = BufReader::new(file)
        .lines()
        .map_while(Result::ok)
        .filter_map(|line| serde_json::from_str::<Value>(&line).ok())
        .find(|m| m["method"] == "initialize")
        .unwrap_or_else(|| panic!("the fixture recorded no initialize"));
    assert_eq!(
        initialize["params"]["capabilities"],
        json!({"elicitation": {"form": {}, "url": {}}, "roots": {}, "sampling": {}}),
        "{initialize}"
    );
}

/// A re-listing after the upstream's list_changed offers the definitions as sent too.
async fn relisted_after_list_changed(
    legacy: &Mcp,
    common: &dyn Fn(&Value, &str),
    execution: &Value,
) {
    legacy
        .call_tool_ok("rich_trigger_tool_change", json!({}))
        .await;
    let deadline = Instant::now() + READY;
    loop {
        let header = [("MCP-Protocol-Version", "2025-11-25")];
        let list = result_of(
            "tools/list",
            legacy
                .request_with_headers("tools/list", json!({}), &header)
                .await,
        );
        let tools = list["tools"].as_array().cloned().unwrap_or_default();
        if tools.iter().any(|t| t["name"] == "rich_changed_1") {
            let tool = tools
                .iter()
                .find(|t| t["name"] == "rich_rich_def")
                .cloned()
                .unwrap_or_default();
            common(&tool, "2025-11-25 after list_changed");
            assert_eq!(&tool["execution"], execution, "after list_changed: {tool}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the changed tool set never arrived: {list}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rich_definition_is_listed_with_every_field_its_revision_defines() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let record = rt.root().join("rich.record");
    let record_arg = record.to_string_lossy().into_owned();
    // The upstream adds a tool below: trusted, so it commits without review (SPEC §12).
    rt.install_trusted(
        &fixture_connector(
            "rich",
            &[
                "--tools",
                "rich_def,trigger_tool_change",
                "--record",
                &record_arg,
            ],
        ),
        &[],
    );
    rt.wait_status("rich", "ready", READY);
    let token = rt.issue_token("ws", "rich");
    let legacy = Mcp::legacy(rt.frontend_url(), &token);
    legacy.initialize().await;
    let modern = Mcp::modern(rt.frontend_url(), &token);

    let meta = json!({
        "ui/resourceUri": "ui://fixture/rich",
        "openai/outputTemplate": "ui://fixture/rich.html",
        "tutti/connector": "rich",
        "tutti/upstreamName": "rich_def",
        // The runtime's own rating (the spoofed `tutti/risk` is replaced): no verb in the
        // name, and `readOnlyHint` never lowers a level (SPEC §12), so `medium`.
        "tutti/risk": "medium",
    });
    let icons = json!([{"src": "https://example.com/rich.png", "mimeType": "image/png", "sizes": ["48x48"]}]);
    let execution = json!({"taskSupport": "required"});
    let common = |tool: &Value, who: &str| {
        assert_eq!(tool["title"], "Rich definition", "{who}: {tool}");
        assert_eq!(
            tool["annotations"],
            json!({"readOnlyHint": true, "vendorHint": "kept"}),
            "{who}: {tool}"
        );
        assert_eq!(
            tool["outputSchema"]["properties"]["ok"]["type"], "boolean",
            "{who}: {tool}"
        );
        assert_eq!(tool["_meta"], meta, "{who}: {tool}");
    };

    // 2025-11-25 defines both icons and execution.
    let tool = rich_def(&legacy, Some("2025-11-25")).await;
    common(&tool, "2025-11-25");
    assert_eq!(tool["icons"], icons, "2025-11-25: {tool}");
    assert_eq!(tool["execution"], execution, "2025-11-25: {tool}");

    // 2025-06-18 defines neither.
    let tool = rich_def(&legacy, None).await;
    common(&tool, "2025-06-18");
    assert!(
        tool.get("icons").is_none() && tool.get("execution").is_none(),
        "2025-06-18: {tool}"
    );

    // 2026-07-28 defines icons; task support is an extension there, not a tool field.
    let tool = rich_def(&modern, None).await;
    common(&tool, "2026-07-28");
    assert_eq!(tool["icons"], icons, "2026-07-28: {tool}");
    assert!(tool.get("execution").is_none(), "2026-07-28: {tool}");

    relisted_after_list_changed(&legacy, &common, &execution).await;

    assert_client_capabilities_declared(&record);
}

/// The same definitions through an HTTP upstream (JSON bodies and an event stream): the
/// worker's HTTP transport shows every message it reads to the definition observer, so
/// `execution`, unknown annotation keys and the upstream's `_meta` survive there too.
#[tokio::test(flavor = "multi_thread")]
async fn a_rich_definition_from_an_http_upstream_keeps_every_field() {
    for mode in [&[][..], &["--sse"][..]] {
        let mut args = vec!["--tools", "rich_def"];
        args.extend_from_slice(mode);
        let fixture = tutti_tests::FixtureHttp::start(&args);
        let mut rt = Runtime::start(RuntimeOptions::default());
        rt.install_ok(&http_connector("rich", &fixture.url), &[]);
        rt.wait_status("rich", "ready", READY);
        let token = rt.issue_token("ws", "rich");
        let legacy = Mcp::legacy(rt.frontend_url(), &token);
        legacy.initialize().await;
        let tool = rich_def(&legacy, Some("2025-11-25")).await;
        let who = format!("http {mode:?}");
        assert_eq!(
            tool["execution"],
            json!({"taskSupport": "required"}),
            "{who}: {tool}"
        );
        assert_eq!(
            tool["annotations"],
            json!({"readOnlyHint": true, "vendorHint": "kept"}),
            "{who}: {tool}"
        );
        assert_eq!(
            tool["_meta"]["ui/resourceUri"], "ui://fixture/rich",
            "{who}: {tool}"
        );
        assert_eq!(tool["_meta"]["tutti/connector"], "rich", "{who}: {tool}");
    }
}

//! MCP beyond tools (SPEC §11), end to end over the real binaries: prompts, resources,
//! resource templates and completion of `@modelcontextprotocol/server-everything` (a stdio
//! upstream) through the runtime, driven by the official Python `mcp` SDK client in both eras;
//! a resource subscription's updates on a `subscriptions/listen` stream; the same "not
//! available now" answer as tools/call for a fenced generation; and a URI that two connectors
//! claim, served by neither and shown by `tutti status`.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tutti_tests::{
    Mcp, Runtime, RuntimeOptions, Server, npm_package, require_node22, require_python,
};

const READY: Duration = Duration::from_secs(60);
const PYTHON_TIMEOUT: Duration = Duration::from_secs(90);

/// The Python `mcp` 2.3.0 client: lists and gets prompts, lists and reads resources (text and
/// binary) and templates, completes a prompt argument, asks for an unknown prompt, and (modern
/// era) listens to one resource's updates while `toggle-subscriber-updates` makes some; legacy
/// era: subscribes with `resources/subscribe`. Prints one JSON object.
const PY_CLIENT: &str = r#"
import asyncio, json, os, sys
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import PromptReference, ResourceTemplateReference

def dump(model):
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)

async def main():
    url, mode = sys.argv[1], sys.argv[2]
    hc = httpx2.AsyncClient(headers={"Authorization": "Bearer " + os.environ["TUTTI_TEST_TOKEN"]},
                            timeout=60)
    out = {}
    async with Client(streamable_http_client(url, http_client=hc), mode=mode) as c:
        out["protocolVersion"] = str(c.protocol_version)
        out["prompts"] = [dump(p) for p in (await c.list_prompts()).prompts]
        out["simple"] = dump(await c.get_prompt("everything_simple-prompt", {}))
        out["args"] = dump(await c.get_prompt("everything_args-prompt", {"city": "Lyon"}))
        out["resources"] = [dump(r) for r in (await c.list_resources()).resources]
        out["templates"] = [dump(t) for t in (await c.list_resource_templates()).resource_templates]
        text_uri = next(r["uri"] for r in out["resources"] if r.get("mimeType", "").startswith("text/"))
        out["text"] = dump(await c.read_resource(text_uri))
        out["blob"] = dump(await c.read_resource("demo://resource/dynamic/blob/7"))
        out["dynamicText"] = dump(await c.read_resource("demo://resource/dynamic/text/3"))
        ref = PromptReference(type="ref/prompt", name="everything_completable-prompt")
        out["completion"] = dump(await c.complete(ref, {"name": "department", "value": "Eng"}))
        tref = ResourceTemplateReference(type="ref/resource", uri="demo://resource/dynamic/text/{resourceId}")
        out["templateCompletion"] = dump(await c.complete(tref, {"name": "resourceId", "value": "4"}))
        try:
            await c.get_prompt("everything_no-such-prompt", {})
            out["unknownPrompt"] = None
        except MCPError as e:
            out["unknownPrompt"] = {"code": e.code, "message": e.error.message}
        try:
            await c.read_resource("nowhere://x")
            out["unknownResource"] = None
        except MCPError as e:
            out["unknownResource"] = {"code": e.code, "message": e.error.message}
        if mode == "legacy":
            out["subscribed"] = dump(await c.subscribe_resource(text_uri))
        else:
            async with c.listen(resource_subscriptions=[text_uri]) as sub:
                out["honored"] = dump(sub.honored)
                await c.call_tool("everything_toggle-subscriber-updates", {})
                event = await asyncio.wait_for(sub.__anext__(), 30)
                out["update"] = {"uri": getattr(event, "uri", None), "type": type(event).__name__}
                await c.call_tool("everything_toggle-subscriber-updates", {})
    print(json.dumps(out))

asyncio.run(main())
"#;

/// A stdio connector running server-everything under Node 22.
fn everything_manifest(key: &str) -> Value {
    let node = require_node22();
    let pkg = npm_package("@modelcontextprotocol/server-everything").unwrap_or_else(|| {
        panic!(
            "this test needs @modelcontextprotocol/server-everything under .tools/npm: run \
             scripts/install-test-tools"
        )
    });
    let entry = pkg.join("dist").join("index.js");
    json!({
        "key": key,
        "name": "Everything",
        "description": "The MCP reference server with every primitive",
        "version": "2026.8.31",
        "mcp": {"transport": "stdio", "command": node.to_string_lossy(),
                "args": [entry.to_string_lossy(), "stdio"]},
    })
}

fn runtime_for_node() -> Runtime {
    let node: PathBuf = require_node22();
    let probe = Runtime::start(RuntimeOptions::default());
    let allow = format!("{},{}", probe.allowed_commands(), node.display());
    drop(probe);
    Runtime::start(RuntimeOptions {
        env: vec![("TUTTI_ALLOW_COMMANDS".into(), allow)],
        ..RuntimeOptions::default()
    })
}

fn run_python(rt: &Runtime, token: &str, mode: &str) -> Value {
    let python = require_python();
    let script = rt.root().join(format!("client-{mode}.py"));
    std::fs::write(&script, PY_CLIENT).unwrap_or_else(|e| panic!("cannot write client.py: {e}"));
    let mut child = Command::new(&python)
        .arg(&script)
        .arg(rt.frontend_url())
        .arg(mode)
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
                "the Python client ({mode}) did not finish within {PYTHON_TIMEOUT:?}; stderr: {}\n{}",
                out.map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
                    .unwrap_or_default(),
                rt.diagnostics()
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
        "the Python mcp client ({mode}) failed ({}):\nstdout: {stdout}\nstderr: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        rt.diagnostics()
    );
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("the Python client printed no JSON ({e}): {stdout}"))
}

fn names(items: &Value, field: &str) -> Vec<String> {
    items
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|i| i[field].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// What both eras must see of server-everything's prompts, resources and templates.
fn assert_everything(out: &Value, mode: &str) {
    assert_prompts(out, mode);
    assert_resources(out, mode);
}

/// The prompts listed with their `_meta`, and two of them got.
fn assert_prompts(out: &Value, mode: &str) {
    let prompts = names(&out["prompts"], "name");
    for want in [
        "everything_simple-prompt",
        "everything_args-prompt",
        "everything_completable-prompt",
    ] {
        assert!(prompts.contains(&want.to_owned()), "{mode}: {prompts:?}");
    }
    let simple = &out["prompts"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == "everything_simple-prompt"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(simple["_meta"]["tutti/connector"], "everything", "{simple}");
    assert_eq!(
        simple["_meta"]["tutti/upstreamName"], "simple-prompt",
        "{simple}"
    );
    let text = |v: &Value| {
        v["messages"][0]["content"]["text"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    assert!(
        !text(&out["simple"]).is_empty(),
        "{mode}: {}",
        out["simple"]
    );
    assert!(
        text(&out["args"]).contains("Lyon"),
        "{mode}: {}",
        out["args"]
    );
}

/// Resources, templates, their contents, completion and the unknown names.
fn assert_resources(out: &Value, mode: &str) {
    let resources = out["resources"].as_array().cloned().unwrap_or_default();
    assert!(!resources.is_empty(), "{mode}: no resources");
    for r in &resources {
        assert_eq!(r["_meta"]["tutti/connector"], "everything", "{r}");
    }
    let templates = names(&out["templates"], "uriTemplate");
    assert!(
        templates.contains(&"demo://resource/dynamic/text/{resourceId}".to_owned())
            && templates.contains(&"demo://resource/dynamic/blob/{resourceId}".to_owned()),
        "{mode}: {templates:?}"
    );
    assert!(
        out["text"]["contents"][0]["text"]
            .as_str()
            .is_some_and(|t| !t.is_empty()),
        "{mode}: {}",
        out["text"]
    );
    let blob = &out["blob"]["contents"][0];
    assert_eq!(
        blob["uri"], "demo://resource/dynamic/blob/7",
        "{mode}: {blob}"
    );
    assert!(
        blob["blob"].as_str().is_some_and(|b| !b.is_empty()) && blob["text"].is_null(),
        "{mode}: binary content passes through as a blob: {blob}"
    );
    assert!(
        out["dynamicText"]["contents"][0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("Resource 3")),
        "{mode}: {}",
        out["dynamicText"]
    );
    assert_eq!(
        out["completion"]["completion"]["values"],
        json!(["Engineering"]),
        "{mode}: {}",
        out["completion"]
    );
    assert_eq!(
        out["templateCompletion"]["completion"]["values"],
        json!(["4"]),
        "{mode}: {}",
        out["templateCompletion"]
    );
    assert_eq!(out["unknownPrompt"]["code"], -32602, "{mode}: {out}");
    assert!(
        out["unknownPrompt"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("everything_no-such-prompt")),
        "{mode}: {out}"
    );
    let not_found = if mode == "legacy" { -32002 } else { -32602 };
    assert_eq!(out["unknownResource"]["code"], not_found, "{mode}: {out}");
}

#[test]
fn python_sdk_sees_server_everythings_prompts_resources_and_completion_in_both_eras() {
    let mut rt = runtime_for_node();
    rt.install_ok(&everything_manifest("everything"), &[]);
    let status = rt.wait_status("everything", "ready", READY);
    assert!(
        status["promptCount"].as_u64().is_some_and(|n| n >= 3)
            && status["resourceTemplateCount"].as_u64() == Some(2),
        "status counts prompts and templates: {status}"
    );
    let token = rt.issue_token("py", "everything");

    let legacy = run_python(&rt, &token, "legacy");
    // The SDK asks for the newest version with `initialize`; the legacy surface echoes it.
    assert!(
        legacy["protocolVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("2025-")),
        "{legacy}"
    );
    assert_everything(&legacy, "legacy");
    assert_eq!(legacy["subscribed"], json!({}), "{legacy}");

    let modern = run_python(&rt, &token, "2026-07-28");
    assert_everything(&modern, "modern");
    let text_uri = modern["text"]["contents"][0]["uri"].clone();
    assert_eq!(
        modern["honored"]["resourceSubscriptions"],
        json!([text_uri]),
        "{modern}"
    );
    assert_eq!(modern["update"]["uri"], text_uri, "{modern}");

    // prompts/get and resources/read are audited like tool calls, with their kind.
    let audit = rt.audit_lines();
    let kinds: Vec<&str> = audit
        .iter()
        .filter(|l| l["event"] == "call")
        .filter_map(|l| l["kind"].as_str())
        .collect();
    for kind in ["prompt", "resource", "completion"] {
        assert!(kinds.contains(&kind), "no {kind} call record: {audit:?}");
    }
}

/// Legacy `initialize` through the raw client: the capabilities beyond tools.
#[tokio::test(flavor = "multi_thread")]
async fn capabilities_declare_completions_only_while_a_connector_offers_it() {
    let mut rt = runtime_for_node();
    let token = rt.issue_token("w", "caps");
    let mcp = Mcp::legacy(rt.frontend_url(), &token);
    let init = mcp.initialize().await;
    let caps = &init["capabilities"];
    assert!(
        caps["prompts"].is_object() && caps["resources"].is_object(),
        "{init}"
    );
    assert!(
        caps["completions"].is_null(),
        "no connector, no completions: {init}"
    );

    rt.install_ok(&everything_manifest("everything"), &[]);
    rt.wait_status("everything", "ready", READY);
    let init = mcp.initialize().await;
    assert!(init["capabilities"]["completions"].is_object(), "{init}");
    // The modern surface declares the same.
    let modern = Mcp::modern(rt.frontend_url(), &token).initialize().await;
    let caps = &modern["capabilities"];
    assert!(
        caps["completions"].is_object() && caps["prompts"].is_object(),
        "{modern}"
    );
}

/// The fixture as a connector offering `--resource` URIs and `--prompt` names.
fn fixture_with(rt: &Runtime, key: &str, extra: &[&str]) -> Value {
    let mut args = vec!["--tools", "echo"];
    args.extend_from_slice(extra);
    rt.private_fixture_connector(key, &args)
}

/// The `error` of a JSON-RPC reply, or a panic naming what came instead.
fn error_of<H>(what: &str, (status, _, body): &(u16, H, Value)) -> Value {
    assert_eq!(*status, 200, "{what}: HTTP {status}: {body}");
    match body.get("error") {
        Some(e) => e.clone(),
        None => panic!("{what}: no error in {body}"),
    }
}

fn result_of<H>(what: &str, (status, _, body): &(u16, H, Value)) -> Value {
    assert_eq!(*status, 200, "{what}: HTTP {status}: {body}");
    match body.get("result") {
        Some(r) => r.clone(),
        None => panic!("{what}: no result in {body}"),
    }
}

async fn read(mcp: &Mcp, uri: &str) -> (u16, impl Sized, Value) {
    mcp.request("resources/read", json!({"uri": uri})).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_uri_two_connectors_claim_is_served_by_neither_and_status_shows_it() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let one = fixture_with(
        &rt,
        "one",
        &["--resource", "shared://doc", "--resource", "one://own"],
    );
    let two = fixture_with(&rt, "two", &["--resource", "shared://doc"]);
    rt.install_ok(&one, &[]);
    rt.install_ok(&two, &[]);
    rt.wait_status("one", "ready", READY);
    rt.wait_status("two", "ready", READY);

    let status = rt.status_json();
    assert_eq!(
        status["resourceClashes"],
        json!([{"uri": "shared://doc", "kind": "resource", "connectors": ["one", "two"]}]),
        "{status}"
    );
    let table = rt.tutti_ok(&["status"]);
    assert!(
        table.contains("resource clash: resource shared://doc is claimed by one, two"),
        "{table}"
    );

    let token = rt.issue_token("w", "clash");
    for mcp in [
        Mcp::legacy(rt.frontend_url(), &token),
        Mcp::modern(rt.frontend_url(), &token),
    ] {
        let e = error_of("clashing read", &read(&mcp, "shared://doc").await);
        assert_eq!(e["code"], -32602, "{e}");
        let message = e["message"].as_str().unwrap_or("");
        assert!(
            message.contains("shared://doc") && message.contains("one, two"),
            "the error names the URI and both connectors: {e}"
        );
        assert_eq!(e["data"]["tutti"]["reason"], "resource_clash", "{e}");
        let own = result_of("own read", &read(&mcp, "one://own").await);
        let text: Value = serde_json::from_str(own["contents"][0]["text"].as_str().unwrap_or(""))
            .unwrap_or_default();
        assert_eq!(text["uri"], "one://own", "{own}");
        let listed = result_of("list", &mcp.request("resources/list", json!({})).await);
        let owners: Vec<String> = listed["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| r["uri"] == "shared://doc")
            .filter_map(|r| r["_meta"]["tutti/connector"].as_str().map(str::to_owned))
            .collect();
        assert_eq!(owners, ["one", "two"], "{listed}");
    }

    // Once one of them is gone, the other serves the URI.
    tokio::task::block_in_place(|| rt.tutti_ok(&["connector", "uninstall", "two"]));
    let mcp = Mcp::legacy(rt.frontend_url(), &token);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let reply = read(&mcp, "shared://doc").await;
        if reply.2.get("result").is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "still refused: {}", reply.2);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(rt.status_json()["resourceClashes"], json!([]));
}

/// A prompt and a resource of the removed generation fail as a tool call of it does.
async fn assert_answered_like_tools_call(mcp: &Mcp) {
    let tool = error_of(
        "tools/call",
        &mcp.call_tool("fx_echo", json!({"message": "x"})).await,
    );
    let prompt = error_of(
        "prompts/get",
        &mcp.request("prompts/get", json!({"name": "fx_hello"}))
            .await,
    );
    let resource = error_of("resources/read", &read(mcp, "fx://doc").await);
    for (what, e) in [("prompt", &prompt), ("resource", &resource)] {
        assert_eq!(e["code"], tool["code"], "{what}: {e} vs tool {tool}");
        assert_eq!(
            e["data"]["tutti"], tool["data"]["tutti"],
            "{what}: {e} vs {tool}"
        );
        let message = e["message"].as_str().unwrap_or("");
        assert!(
            message.contains("not available now") && message.contains("again"),
            "{what}: {e}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn prompts_and_resources_of_a_removed_generation_answer_like_tools_call() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let fx = fixture_with(&rt, "fx", &["--prompt", "hello", "--resource", "fx://doc"]);
    rt.install_ok(&fx, &[]);
    rt.wait_status("fx", "ready", READY);
    let token = rt.issue_token("w", "fence");
    let legacy = Mcp::legacy(rt.frontend_url(), &token);
    let modern = Mcp::modern(rt.frontend_url(), &token);

    let prompts = result_of(
        "prompts/list",
        &legacy.request("prompts/list", json!({})).await,
    );
    assert_eq!(prompts["prompts"][0]["name"], "fx_hello", "{prompts}");
    let got = result_of(
        "prompts/get",
        &legacy
            .request("prompts/get", json!({"name": "fx_hello"}))
            .await,
    );
    let text: Value =
        serde_json::from_str(got["messages"][0]["content"]["text"].as_str().unwrap_or(""))
            .unwrap_or_default();
    assert_eq!(
        text["prompt"], "hello",
        "the upstream got its own name: {got}"
    );
    result_of("read", &read(&legacy, "fx://doc").await);

    let mut listen = modern
        .listen(json!({"promptsListChanged": true, "resourcesListChanged": true}))
        .await;
    let ack = listen.next_event(Duration::from_secs(10)).await;
    assert_eq!(
        ack.as_ref().map(|a| &a["params"]["notifications"]),
        Some(&json!({"promptsListChanged": true, "resourcesListChanged": true})),
        "{ack:?}"
    );

    tokio::task::block_in_place(|| rt.tutti_ok(&["connector", "uninstall", "fx"]));

    // Both list changes are announced on the listen stream.
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let Some(event) = listen.next_event(Duration::from_secs(10)).await else {
            panic!("no list_changed after the uninstall (seen {seen:?})");
        };
        seen.push(event["method"].as_str().unwrap_or("").to_owned());
    }
    seen.sort();
    assert_eq!(
        seen,
        [
            "notifications/prompts/list_changed",
            "notifications/resources/list_changed"
        ]
    );

    for mcp in [&legacy, &modern] {
        assert_answered_like_tools_call(mcp).await;
    }
    let audit = rt.audit_lines();
    assert!(
        audit
            .iter()
            .any(|l| l["kind"] == "prompt" && l["tool"] == "fx_hello" && l["outcome"] == "ok"),
        "{audit:?}"
    );
}

/// server-everything over streamable HTTP (its `streamableHttp` mode): prompts, a binary
/// resource through a template, and completion reach it through the remote worker too.
#[tokio::test(flavor = "multi_thread")]
async fn server_everything_over_streamable_http_serves_prompts_resources_and_completion() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let (server, url) =
        Server::everything_http(rt.root(), "everything-http.stderr", Duration::from_secs(20));
    let manifest = json!({
        "key": "remote", "name": "Remote everything", "description": "server-everything over HTTP",
        "version": "1.0.0",
        "mcp": {"transport": "http", "url": url},
    });
    tokio::task::block_in_place(|| {
        rt.install_ok(&manifest, &[]);
        rt.wait_status("remote", "ready", READY);
    });
    let token = rt.issue_token("w", "remote");
    for mcp in [
        Mcp::legacy(rt.frontend_url(), &token),
        Mcp::modern(rt.frontend_url(), &token),
    ] {
        let got = result_of(
            "prompts/get",
            &mcp.request(
                "prompts/get",
                json!({"name": "remote_args-prompt", "arguments": {"city": "Oslo"}}),
            )
            .await,
        );
        assert!(got.to_string().contains("Oslo"), "{got}");
        let blob = result_of("read", &read(&mcp, "demo://resource/dynamic/blob/2").await);
        assert!(blob["contents"][0]["blob"].is_string(), "{blob}");
        let done = result_of(
            "complete",
            &mcp.request(
                "completion/complete",
                json!({"ref": {"type": "ref/prompt", "name": "remote_completable-prompt"},
                       "argument": {"name": "department", "value": "Sa"}}),
            )
            .await,
        );
        assert_eq!(done["completion"]["values"], json!(["Sales"]), "{done}");
    }
    drop(server);
}

/// SPEC §11: a 2025-06-18 client that subscribed to a resource with `resources/subscribe`
/// gets `notifications/resources/updated` for it on its GET notification stream (the token
/// is the session), and nothing for a resource it did not subscribe to.
#[tokio::test(flavor = "multi_thread")]
async fn a_legacy_subscription_gets_its_updates_on_the_get_stream() {
    let mut rt = runtime_for_node();
    tokio::task::block_in_place(|| {
        rt.install_ok(&everything_manifest("everything"), &[]);
        rt.wait_status("everything", "ready", READY);
    });
    let token = tokio::task::block_in_place(|| rt.issue_token("w", "legacy-sub"));
    let mcp = Mcp::legacy(rt.frontend_url(), &token);
    mcp.initialize().await;
    let uri = "demo://resource/static/document/architecture.md";
    let (status, _, body) = mcp
        .request("resources/subscribe", json!({"uri": uri}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.get("error").is_none(), "subscribe: {body}");
    let mut stream = mcp.get_stream().await;
    assert_eq!(stream.status, 200);
    let toggled = mcp
        .call_tool_ok("everything_toggle-subscriber-updates", json!({}))
        .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut update = None;
    while Instant::now() < deadline {
        let left = deadline.saturating_duration_since(Instant::now());
        match stream.next_event(left).await {
            Some(ev) if ev["method"] == "notifications/resources/updated" => {
                update = Some(ev);
                break;
            }
            Some(_) => {}
            None => break,
        }
    }
    mcp.call_tool_ok("everything_toggle-subscriber-updates", json!({}))
        .await;
    let update = update.unwrap_or_else(|| {
        panic!("no resources/updated on the GET stream within 30 s (toggle answered {toggled})")
    });
    assert_eq!(update["params"]["uri"], uri, "{update}");
}

//! Subscriptions, unclaimed logs and offer limits beyond tools, over the real binaries:
//! resource subscriptions that outlive a generation (a SIGKILLed worker, an upgrade) on both
//! surfaces; subscriptions to a 2026-07-28 upstream (its `subscriptions/listen`); log messages
//! that no call claims on the legacy GET stream; offer limits for prompts and resources.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tutti_tests::{
    Mcp, Runtime, RuntimeOptions, Server, SseStream, free_port, repo_root, require_python_venv,
};

const READY: Duration = Duration::from_secs(60);
/// How long an expected notification may take on a loaded machine.
const ARRIVES: Duration = Duration::from_secs(30);
/// How long a Python server may take to listen on a loaded machine.
const LISTEN: Duration = Duration::from_secs(90);

/// The next notification on `stream` with `method` for which `pred` holds, within `within`.
async fn wait_note(
    stream: &mut SseStream,
    method: &str,
    within: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Option<Value> {
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.checked_duration_since(Instant::now())?;
        let event = stream.next_event(left).await?;
        if event["method"] == method && pred(&event) {
            return Some(event);
        }
    }
}

/// The pid of the fixture process that sent a `resources/updated` (its ticker names it).
fn sender(update: &Value) -> u64 {
    update["params"]["_meta"]["tutti-fixture/pid"]
        .as_u64()
        .unwrap_or_else(|| panic!("an update without the fixture's pid: {update}"))
}

fn generation(entry: &Value) -> u64 {
    entry["generation"].as_u64().unwrap_or(0)
}

fn ticking_fixture(version: &str) -> Value {
    let mut manifest =
        tutti_tests::fixture_connector("tick", &["--resource", "tick://note", "--tick-ms", "200"]);
    manifest["version"] = json!(version);
    manifest
}

/// Waits on both streams for a `resources/updated` of `uri` sent by a process other than
/// `not_from` (so by the generation that came after it); returns its sender.
async fn update_from_a_new_process(
    legacy: &mut SseStream,
    modern: &mut SseStream,
    uri: &str,
    not_from: Option<u64>,
    what: &str,
) -> u64 {
    let fresh = |e: &Value| e["params"]["uri"] == uri && Some(sender(e)) != not_from;
    let method = "notifications/resources/updated";
    let on_legacy = wait_note(legacy, method, ARRIVES, fresh).await;
    let on_legacy = on_legacy
        .unwrap_or_else(|| panic!("{what}: no resources/updated on the legacy GET stream"));
    let on_modern = wait_note(modern, method, ARRIVES, fresh).await;
    let on_modern =
        on_modern.unwrap_or_else(|| panic!("{what}: no resources/updated on the listen stream"));
    assert!(
        on_modern["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"].is_string()
            || on_modern["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"].is_number(),
        "tagged with the subscription: {on_modern}"
    );
    sender(&on_legacy)
}

/// `uri` subscribed on both surfaces with `token`: a legacy client's `resources/subscribe`
/// and its GET stream, and a modern client's `subscriptions/listen` (its acknowledgement
/// read). Returns (legacy client, GET stream, modern client, listen stream).
async fn subscribed(rt: &Runtime, token: &str, uri: &str) -> (Mcp, SseStream, Mcp, SseStream) {
    let legacy = Mcp::legacy(rt.frontend_url(), token);
    legacy.initialize().await;
    let (status, _, body) = legacy
        .request("resources/subscribe", json!({"uri": uri}))
        .await;
    assert!(
        status == 200 && body.get("error").is_none(),
        "subscribe: {body}"
    );
    let get = legacy.get_stream().await;
    assert_eq!(get.status, 200, "the GET stream opened");
    let modern = Mcp::modern(rt.frontend_url(), token);
    let mut listen = modern.listen(json!({"resourceSubscriptions": [uri]})).await;
    let ack = listen.next_event(ARRIVES).await.unwrap_or_default();
    assert_eq!(
        ack["params"]["notifications"]["resourceSubscriptions"],
        json!([uri]),
        "honoured: {ack}"
    );
    (legacy, get, modern, listen)
}

/// Point 1: a client holding a subscription keeps getting `resources/updated` after its
/// connector's worker is SIGKILLed (the kernel starts a new generation) and after an upgrade:
/// the new generation's upstream is subscribed again, on both surfaces.
#[tokio::test(flavor = "multi_thread")]
async fn subscriptions_survive_a_sigkilled_worker_and_an_upgrade_on_both_surfaces() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let first = tokio::task::block_in_place(|| {
        rt.install_ok(&ticking_fixture("1.0.0"), &[]);
        rt.wait_status("tick", "ready", READY)
    });
    let token = tokio::task::block_in_place(|| rt.issue_token("w", "subs"));
    let uri = "tick://note";
    let (_legacy, mut get, _modern, mut listen) = subscribed(&rt, &token, uri).await;
    let before = update_from_a_new_process(&mut get, &mut listen, uri, None, "at first").await;

    let worker = rt
        .workers()
        .into_iter()
        .find(|w| w.key == "tick")
        .unwrap_or_else(|| panic!("no worker of tick"));
    kill_now(worker.pid);
    let restarted = tokio::task::block_in_place(|| {
        rt.wait_connector("tick", READY, "a new generation", |c| {
            c["status"] == "ready" && generation(c) > generation(&first)
        })
    });
    let after_kill =
        update_from_a_new_process(&mut get, &mut listen, uri, Some(before), "after SIGKILL").await;

    tokio::task::block_in_place(|| {
        rt.install_ok(&ticking_fixture("1.0.1"), &[]);
        rt.wait_connector("tick", READY, "the upgrade", |c| {
            c["status"] == "ready" && generation(c) > generation(&restarted)
        })
    });
    update_from_a_new_process(
        &mut get,
        &mut listen,
        uri,
        Some(after_kill),
        "after upgrade",
    )
    .await;
}

#[cfg(unix)]
fn kill_now(pid: u32) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let pid = i32::try_from(pid).unwrap_or_else(|_| panic!("pid {pid} out of range"));
    kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap_or_else(|e| panic!("kill {pid}: {e}"));
}

#[cfg(windows)]
fn kill_now(pid: u32) {
    panic!("this test SIGKILLs worker {pid}: Unix only");
}

/// A Python `MCPServer` script of `tests/py` over streamable HTTP on a free loopback port;
/// killed on drop.
struct PyServer {
    _server: Server,
    url: String,
}

impl PyServer {
    fn start(rt: &Runtime, script: &str) -> PyServer {
        let python = require_python_venv().join("bin").join("python");
        let port = free_port();
        let mut cmd = Command::new(python);
        cmd.arg(repo_root().join("tests").join("py").join(script))
            .arg(port.to_string())
            .current_dir(rt.root());
        let stderr = rt.root().join(format!("{script}.stderr"));
        PyServer {
            _server: Server::spawn(script, cmd, port, stderr, LISTEN),
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }
}

/// Point 2: an upstream that speaks 2026-07-28 has no `resources/subscribe`; the worker
/// subscribes through the upstream's `subscriptions/listen`, and its updates reach a legacy
/// client's GET stream and a modern client's listen stream like a legacy upstream's.
#[tokio::test(flavor = "multi_thread")]
async fn a_modern_upstreams_resource_updates_reach_both_surfaces() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let server = PyServer::start(&rt, "modern_resources_server.py");
    let manifest = json!({
        "key": "py", "name": "Modern resources", "version": "1.0.0",
        "description": "A 2026-07-28 upstream whose resource changes",
        "mcp": {"transport": "http", "url": server.url},
    });
    tokio::task::block_in_place(|| {
        rt.install_ok(&manifest, &[]);
        rt.wait_status("py", "ready", READY)
    });
    let log = rt.log("connector-py.log");
    assert!(
        log.contains("upstream initialized") && log.contains("2026-07-28"),
        "the worker speaks 2026-07-28 to this upstream:\n{log}"
    );
    let token = tokio::task::block_in_place(|| rt.issue_token("w", "modern-upstream"));
    let uri = "note://counter";
    let (legacy, mut get, _modern, mut listen) = subscribed(&rt, &token, uri).await;
    let touched = legacy.call_tool_ok("py_touch", json!({})).await;
    let method = "notifications/resources/updated";
    let on_uri = |e: &Value| e["params"]["uri"] == uri;
    let update = wait_note(&mut get, method, ARRIVES, on_uri).await;
    let update = update.unwrap_or_else(|| panic!("no update on the GET stream ({touched})"));
    assert!(
        update["params"]["_meta"]
            .get("io.modelcontextprotocol/subscriptionId")
            .is_none(),
        "the worker's own listen id stays inside: {update}"
    );
    let update = wait_note(&mut listen, method, ARRIVES, on_uri).await;
    assert!(update.is_some(), "no update on the listen stream");
}

/// Every `notifications/message` on `stream` within `within`.
async fn log_messages(stream: &mut SseStream, within: Duration) -> Vec<Value> {
    let deadline = Instant::now() + within;
    let mut logs = Vec::new();
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match stream.next_event(left).await {
            Some(e) if e["method"] == "notifications/message" => logs.push(e),
            Some(_) => {}
            None => break,
        }
    }
    logs
}

/// Point 3: log messages an upstream sends outside any call (the fixture's ticker, with no
/// call in flight) reach the legacy GET stream of each token whose `logging/setLevel` admits
/// them, tagged `<key>/…`; nothing arrives before `setLevel`.
#[tokio::test(flavor = "multi_thread")]
async fn unclaimed_log_messages_reach_get_streams_only_after_set_level() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    tokio::task::block_in_place(|| {
        rt.install_ok(&ticking_fixture("1.0.0"), &[]);
        rt.wait_status("tick", "ready", READY);
    });
    let (warn_token, debug_token) =
        tokio::task::block_in_place(|| (rt.issue_token("w", "warn"), rt.issue_token("w", "debug")));
    let warn = Mcp::legacy(rt.frontend_url(), &warn_token);
    warn.initialize().await;
    let mut warn_stream = warn.get_stream().await;
    assert_eq!(warn_stream.status, 200);
    // The ticker logs every 200 ms: ten messages go by before any level is set.
    let before = log_messages(&mut warn_stream, Duration::from_secs(2)).await;
    assert!(
        before.is_empty(),
        "log messages before setLevel: {before:?}"
    );

    let debug = Mcp::legacy(rt.frontend_url(), &debug_token);
    debug.initialize().await;
    let mut debug_stream = debug.get_stream().await;
    for (mcp, level) in [(&warn, "warning"), (&debug, "debug")] {
        let (status, _, body) = mcp
            .request("logging/setLevel", json!({"level": level}))
            .await;
        assert!(status == 200 && body.get("error").is_none(), "{body}");
    }
    let warned = log_messages(&mut warn_stream, Duration::from_secs(3)).await;
    assert!(!warned.is_empty(), "no log message after setLevel warning");
    for log in &warned {
        assert_eq!(log["params"]["level"], "warning", "only at or above: {log}");
        assert_eq!(
            log["params"]["logger"], "tick/ticker",
            "tagged <key>/: {log}"
        );
        assert!(
            log["params"]["data"]
                .as_str()
                .is_some_and(|d| d.starts_with("tick "))
        );
    }
    let all = log_messages(&mut debug_stream, Duration::from_secs(3)).await;
    let levels: std::collections::BTreeSet<&str> = all
        .iter()
        .filter_map(|l| l["params"]["level"].as_str())
        .collect();
    assert_eq!(
        levels,
        ["debug", "warning"].into(),
        "a debug token gets both: {all:?}"
    );
}

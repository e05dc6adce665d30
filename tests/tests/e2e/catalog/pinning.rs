//! Pinned definitions (SPEC §12): a "rug pull" (an upstream that changes a
//! tool's description after it was installed, then adds a tool) is held; agents keep the
//! pinned set; `review` shows exactly the change; `approve` commits it and listeners hear of
//! it; a worker killed meanwhile comes back with the pinned set; `--trust-updates` opts out.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tutti_tests::fixture::{RUG_PULL_DESCRIPTION, RUG_PULL_UI};
use tutti_tests::{Mcp, Runtime, RuntimeOptions, fixture_connector, require_python_venv};

const READY: Duration = Duration::from_secs(20);
/// The rug pull happens this long after the upstream is initialized.
const PULL_AFTER_MS: &str = "1500";
const HELD: Duration = Duration::from_secs(20);
const ECHO_DESCRIPTION: &str = "Echoes the message back";

/// The official Python SDK lists the tools: one JSON line `{"name": description}`.
const PY_LIST: &str = r#"
import asyncio, json, os, sys
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

async def main():
    headers = {"Authorization": "Bearer " + os.environ["TUTTI_TEST_TOKEN"]}
    async with httpx2.AsyncClient(headers=headers) as hc:
        async with Client(streamable_http_client(sys.argv[1], http_client=hc), mode="legacy") as c:
            tools = await c.list_tools()
            print(json.dumps({t.name: t.description for t in tools.tools}), flush=True)

asyncio.run(main())
"#;

/// `{local name: description}` as the Python SDK sees it.
fn python_tools(rt: &Runtime, token: &str) -> Value {
    let venv = require_python_venv();
    let script = rt.root().join("pin_list.py");
    std::fs::write(&script, PY_LIST).unwrap_or_else(|e| panic!("write script: {e}"));
    let out = Command::new(venv.join("bin").join("python"))
        .arg(&script)
        .arg(rt.frontend_url())
        .env("TUTTI_TEST_TOKEN", token)
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run the Python client: {e}"));
    assert!(
        out.status.success(),
        "Python client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "Python client printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// A runtime with connector `rp` whose upstream pulls the rug after [`PULL_AFTER_MS`];
/// returns it with a token once it is ready.
fn held_rug_pull(install_flags: &[&str]) -> (Runtime, String) {
    rug_pull_of("echo,add", install_flags)
}

/// As [`held_rug_pull`], with the fixture's `tools` (returns before the pull).
fn rug_pull_of(tools: &str, install_flags: &[&str]) -> (Runtime, String) {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let state = rt.root().join("rug-pulled").to_string_lossy().into_owned();
    let manifest = fixture_connector(
        "rp",
        &[
            "--tools",
            tools,
            "--rug-pull-after-ms",
            PULL_AFTER_MS,
            "--rug-pull-state",
            &state,
        ],
    );
    let dir = rt.write_release(&manifest, &[]);
    let dir = dir.to_string_lossy().into_owned();
    let mut args = vec!["connector", "install", dir.as_str(), "--yes"];
    args.extend_from_slice(install_flags);
    rt.tutti_ok(&args);
    rt.wait_status("rp", "ready", READY);
    let token = rt.issue_token("w", "s");
    (rt, token)
}

fn wait_held(rt: &Runtime) -> Value {
    rt.wait_connector("rp", HELD, "changes await review", |c| {
        c["changesAwaitReview"] == true && c["review"] == "added exfiltrate; changed echo"
    })
}

fn audit_events(rt: &Runtime, event: &str) -> Vec<Value> {
    rt.audit_lines()
        .into_iter()
        .filter(|l| l["event"] == event && l["connector"] == "rp")
        .collect()
}

fn pinned_hash(state: &Path) -> String {
    let text = std::fs::read_to_string(state.join("registry.json")).unwrap_or_default();
    let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    v["connectors"]["rp"]["pin"]["hash"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Review shows exactly the change: `echo`'s description and the added `exfiltrate`.
fn assert_review_shows_the_change(rt: &Runtime) {
    let review: Value =
        serde_json::from_str(&rt.tutti_ok(&["connector", "review", "rp", "--json"]))
            .unwrap_or(Value::Null);
    assert_eq!(review["awaiting"], true, "{review}");
    assert_eq!(review["removed"], json!([]), "{review}");
    let added: Vec<&Value> = review["added"].as_array().into_iter().flatten().collect();
    assert_eq!(added.len(), 1, "{review}");
    assert_eq!(added[0]["name"], "exfiltrate", "{review}");
    assert_eq!(
        added[0]["definition"]["description"],
        "Uploads a file to a remote host"
    );
    let changed = &review["changed"];
    assert_eq!(changed.as_array().map(Vec::len), Some(1), "{review}");
    assert_eq!(changed[0]["name"], "echo");
    assert_eq!(
        changed[0]["fields"],
        json!({"description": [
            format!("- {ECHO_DESCRIPTION}"),
            format!("+ {RUG_PULL_DESCRIPTION}")
        ]}),
        "only the description changed: {review}"
    );
    let text = rt.tutti_ok(&["connector", "review", "rp"]);
    assert!(text.contains("changed tool echo"), "{text}");
    assert!(text.contains(&format!("- {ECHO_DESCRIPTION}")), "{text}");
    assert!(
        text.contains(&format!("+ {RUG_PULL_DESCRIPTION}")),
        "{text}"
    );
    assert!(text.contains("added tool exfiltrate"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rug_pull_is_held_shown_and_committed_only_when_approved() {
    let (rt, token) = tokio::task::block_in_place(|| held_rug_pull(&[]));
    let before = tokio::task::block_in_place(|| pinned_hash(rt.state_dir()));
    assert!(before.starts_with("sha256:"), "pinned at install: {before}");
    let entry = tokio::task::block_in_place(|| wait_held(&rt));
    assert_eq!(entry["status"], "ready", "{entry}");

    // The agent keeps the pinned set.
    let tools = tokio::task::block_in_place(|| python_tools(&rt, &token));
    assert_eq!(
        tools,
        json!({"rp_add": "Adds two integers", "rp_echo": ECHO_DESCRIPTION}),
        "the pinned definitions serve"
    );
    let table = tokio::task::block_in_place(|| rt.tutti_ok(&["status"]));
    assert!(table.contains("changes await review"), "{table}");

    tokio::task::block_in_place(|| assert_review_shows_the_change(&rt));

    // A listener hears of the approval within 1 s.
    let modern = Mcp::modern(rt.frontend_url(), &token);
    let mut stream = modern.listen(json!({"toolsListChanged": true})).await;
    let ack = stream.next_event(Duration::from_secs(10)).await;
    assert!(
        ack.as_ref()
            .is_some_and(|a| a["method"] == "notifications/subscriptions/acknowledged"),
        "{ack:?}"
    );
    let started = Instant::now();
    let approved = tokio::task::block_in_place(|| rt.tutti_ok(&["connector", "approve", "rp"]));
    assert!(approved.contains("approved rp"), "{approved}");
    let change = stream.next_event(Duration::from_secs(5)).await;
    let elapsed = started.elapsed();
    assert!(
        change
            .as_ref()
            .is_some_and(|c| c["method"] == "notifications/tools/list_changed"),
        "{change:?}"
    );
    assert!(
        elapsed <= Duration::from_secs(1),
        "list_changed {elapsed:?} after approve"
    );

    let tools = tokio::task::block_in_place(|| python_tools(&rt, &token));
    assert_eq!(tools["rp_echo"], RUG_PULL_DESCRIPTION, "{tools}");
    assert_eq!(tools["rp_exfiltrate"], "Uploads a file to a remote host");
    let entry = tokio::task::block_in_place(|| rt.connector_status("rp")).unwrap_or_default();
    assert_eq!(entry["changesAwaitReview"], false, "{entry}");
    let after = tokio::task::block_in_place(|| pinned_hash(rt.state_dir()));
    assert!(
        after.starts_with("sha256:") && after != before,
        "{before} → {after}"
    );

    let holds = tokio::task::block_in_place(|| audit_events(&rt, "hold"));
    assert!(!holds.is_empty(), "a hold record");
    assert_eq!(holds[0]["pinned"], before.as_str(), "{}", holds[0]);
    let approvals = tokio::task::block_in_place(|| audit_events(&rt, "approve"));
    assert_eq!(approvals.len(), 1, "{approvals:?}");
    assert_eq!(approvals[0]["pinned"], after.as_str());
    assert_eq!(approvals[0]["changes"], "added exfiltrate; changed echo");
}

#[cfg(unix)]
#[test]
fn a_worker_killed_while_changes_are_held_comes_back_with_the_pinned_set() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;

    let (rt, token) = held_rug_pull(&[]);
    wait_held(&rt);
    let before = pinned_hash(rt.state_dir());
    let worker = rt
        .workers()
        .into_iter()
        .find(|w| w.key == "rp")
        .unwrap_or_else(|| panic!("no worker of rp"));
    kill(Pid::from_raw(worker.pid as i32), Signal::SIGKILL)
        .unwrap_or_else(|e| panic!("kill {}: {e}", worker.pid));
    // The restarted upstream offers the changed set at once (its state file says it was
    // pulled): the pinned set is what commits.
    let entry = rt.wait_connector("rp", READY, "a new generation", |c| {
        c["status"] == "ready"
            && c["generation"]
                .as_u64()
                .is_some_and(|g| g != worker.generation)
    });
    assert_eq!(entry["changesAwaitReview"], true, "still held: {entry}");
    assert_eq!(
        python_tools(&rt, &token),
        json!({"rp_add": "Adds two integers", "rp_echo": ECHO_DESCRIPTION}),
        "the pinned set came back, not the new one"
    );
    assert_eq!(pinned_hash(rt.state_dir()), before, "the pin is unchanged");
    // The change is still there to approve.
    wait_held(&rt);
    rt.tutti_ok(&["connector", "approve", "rp"]);
    let tools = python_tools(&rt, &token);
    assert_eq!(tools["rp_echo"], RUG_PULL_DESCRIPTION, "{tools}");
}

#[test]
fn trust_updates_commits_changes_at_once_and_is_recorded() {
    let (rt, token) = held_rug_pull(&["--trust-updates"]);
    let deadline = Instant::now() + HELD;
    let tools = loop {
        let tools = python_tools(&rt, &token);
        if tools.get("rp_exfiltrate").is_some() || Instant::now() > deadline {
            break tools;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(tools["rp_echo"], RUG_PULL_DESCRIPTION, "{tools}");
    assert_eq!(tools["rp_exfiltrate"], "Uploads a file to a remote host");
    let entry = rt.connector_status("rp").unwrap_or_default();
    assert_eq!(entry["changesAwaitReview"], false, "{entry}");
    let registry: Value = serde_json::from_str(
        &std::fs::read_to_string(rt.state_dir().join("registry.json")).unwrap_or_default(),
    )
    .unwrap_or(Value::Null);
    assert_eq!(registry["connectors"]["rp"]["trustUpdates"], true);
    let opt_outs = audit_events(&rt, "trust_updates");
    assert_eq!(opt_outs.len(), 1, "{opt_outs:?}");
    assert!(audit_events(&rt, "hold").is_empty());
    // Nothing awaits review, and approve says so.
    let out = rt.tutti(&["connector", "approve", "rp"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no changes of rp await review"), "{err}");
}

/// `rich_def`'s `_meta` changes (another UI resource for the host): held for review like a
/// description, `review` shows the field, and agents keep the pinned `_meta`.
#[tokio::test(flavor = "multi_thread")]
async fn a_changed_meta_is_held_and_the_pinned_one_serves() {
    let (rt, token) = tokio::task::block_in_place(|| rug_pull_of("rich_def", &[]));
    tokio::task::block_in_place(|| {
        rt.wait_connector("rp", HELD, "changes await review", |c| {
            c["changesAwaitReview"] == true && c["review"] == "added exfiltrate; changed rich_def"
        })
    });
    let review: Value = serde_json::from_str(&tokio::task::block_in_place(|| {
        rt.tutti_ok(&["connector", "review", "rp", "--json"])
    }))
    .unwrap_or(Value::Null);
    let changed = &review["changed"];
    assert_eq!(changed[0]["name"], "rich_def", "{review}");
    let fields = changed[0]["fields"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        fields.keys().collect::<Vec<_>>(),
        ["_meta"],
        "only _meta changed: {review}"
    );
    assert!(
        fields["_meta"].to_string().contains(RUG_PULL_UI),
        "{review}"
    );
    let client = Mcp::legacy(rt.frontend_url(), &token);
    client.initialize().await;
    let tools = client.list_tools().await;
    let rich = tools.iter().find(|t| t["name"] == "rp_rich_def");
    let rich = rich.unwrap_or_else(|| panic!("no rp_rich_def in {tools:?}"));
    assert_eq!(
        rich["_meta"]["ui/resourceUri"], "ui://fixture/rich",
        "the pinned _meta serves: {rich}"
    );
}

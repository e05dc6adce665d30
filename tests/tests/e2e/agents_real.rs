//! Real agent CLIs against the real runtime, their model replaced by a scripted endpoint
//! (`tests/py/scripted_model.py`, the OpenAI Responses API): what a user of the agent sees.
//!
//! Codex is the pinned `@openai/codex` of `scripts/install-test-tools` (`.tools/npm-agents`),
//! run as `codex app-server` (one process, one thread, several turns over stdio), with
//! `CODEX_HOME` a fresh folder whose config is what `tutti session issue --format codex
//! --codex-home` wrote plus the scripted model provider.
#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toml_edit::{DocumentMut, value};
use tutti_tests::{
    PySdk, Runtime, RuntimeOptions, StdioClient, fixture_connector, py_script, require_node22,
    tools_dir,
};

use crate::codex_binding_refresh::issue_codex_into;

/// The pinned Codex release (`scripts/install-test-tools`).
const CODEX_VERSION: &str = "0.171.0";
/// One agent turn: the agent, the runtime and the upstream on a loaded 2-core machine.
const TURN: Duration = Duration::from_secs(120);
/// Starting the connector's worker and upstream.
const READY: Duration = Duration::from_secs(30);
/// The connector installed between the turns and the local name of its tool (SPEC §5.1).
const LATE: &str = "late";
const LATE_TOOL: &str = "late_echo";
/// The argument the scripted model passes; `echo` answers with it.
const MESSAGE: &str = "called by the scripted model";

/// The pinned Codex's `.bin` folder (holding `codex`); a missing install fails the test with
/// the line that installs it.
fn require_codex() -> PathBuf {
    let prefix = tools_dir().join("npm-agents");
    let bin = prefix.join("node_modules").join(".bin");
    let package = prefix.join("node_modules/@openai/codex/package.json");
    let version = std::fs::read_to_string(&package)
        .ok()
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        .and_then(|v| v["version"].as_str().map(str::to_owned));
    assert!(
        version.as_deref() == Some(CODEX_VERSION) && bin.join("codex").is_file(),
        "this test needs @openai/codex@{CODEX_VERSION} in {} (found {version:?}): run \
         scripts/install-test-tools",
        prefix.display()
    );
    bin
}

/// PATH for Codex and for `tutti session issue` (which asks `codex features list`): the
/// pinned Codex, Node 22 (its launcher is a Node script), the system.
fn agent_path(codex_bin: &Path) -> String {
    let node = require_node22();
    let node_dir = node
        .parent()
        .unwrap_or_else(|| panic!("{}", node.display()));
    format!(
        "{}:{}:/usr/bin:/bin",
        codex_bin.display(),
        node_dir.display()
    )
}

/// The scripted model endpoint, calling the tool whose name ends in [`LATE_TOOL`] once
/// offered; returns it and its base URL.
fn scripted_model(root: &Path) -> (PySdk, String) {
    let script = py_script("scripted_model.py");
    let log = root.join("model.jsonl").display().to_string();
    let model = PySdk::spawn(&script, &[LATE_TOOL, &log], "", root.join("model.err"));
    let listening = model.next("the scripted model's port");
    let port = listening["port"]
        .as_u64()
        .unwrap_or_else(|| panic!("no port from the scripted model: {listening}"));
    (model, format!("http://127.0.0.1:{port}/v1"))
}

/// The requests the scripted model answered, one JSON object each.
fn model_log(root: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(root.join("model.jsonl")).unwrap_or_default();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// Issues the Codex binding into `home` (as a user would) and adds the scripted model
/// provider; returns the written config as the binding left it.
fn bind_codex(rt: &Runtime, home: &Path, path: &str, model_url: &str) -> DocumentMut {
    std::fs::create_dir_all(home).unwrap_or_else(|e| panic!("{e}"));
    let (_, _, written) = issue_codex_into(rt, "codex", home, Path::new(path));
    let config = home.join("config.toml");
    let bound: DocumentMut = written
        .parse()
        .unwrap_or_else(|e| panic!("config.toml is not TOML ({e}):\n{written}"));
    let mut doc = bound.clone();
    doc["model"] = value("scripted");
    doc["model_provider"] = value("scripted");
    doc["approval_policy"] = value("never");
    // What a user who trusts the connector sets: its tools run without Codex's own prompt.
    doc["mcp_servers"]["connector"]["default_tools_approval_mode"] = value("approve");
    let provider = &mut doc["model_providers"]["scripted"];
    provider["name"] = value("scripted");
    provider["base_url"] = value(model_url);
    provider["env_key"] = value("SCRIPTED_MODEL_KEY");
    provider["wire_api"] = value("responses");
    std::fs::write(&config, doc.to_string()).unwrap_or_else(|e| panic!("{e}"));
    bound
}

/// `codex app-server` on stdio, initialized, with CODEX_HOME `home` and cwd `work`.
fn codex_app_server(codex_bin: &Path, path: &str, home: &Path, work: &Path) -> StdioClient {
    let mut cmd = Command::new(codex_bin.join("codex"));
    cmd.arg("app-server")
        .current_dir(work)
        .env_clear()
        .env("PATH", path)
        .env("HOME", home)
        .env("CODEX_HOME", home)
        .env("SCRIPTED_MODEL_KEY", "scripted");
    let mut codex = StdioClient::spawn_cmd(cmd);
    let init = codex.request(
        "initialize",
        json!({"clientInfo": {"name": "tutti-tests", "version": "0"}}),
    );
    assert!(init.get("result").is_some(), "initialize failed: {init}");
    codex.notify("initialized", json!({}));
    codex
}

/// Runs one turn of `thread` with `text`; returns the agent's messages of that turn.
fn turn(codex: &mut StdioClient, thread: &str, text: &str) -> Vec<String> {
    let input = json!([{"type": "text", "text": text}]);
    let started = codex.request("turn/start", json!({"threadId": thread, "input": input}));
    assert!(
        started.get("result").is_some(),
        "turn/start failed: {started}"
    );
    let deadline = Instant::now() + TURN;
    let mut said = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(msg) = codex.recv(left) else {
            panic!(
                "the turn did not end within {TURN:?}; said {said:?}; stderr:\n{}",
                codex.stderr()
            );
        };
        let method = msg["method"].as_str().unwrap_or_default();
        assert!(
            msg.get("id").is_none() || method.is_empty(),
            "Codex asked the client something: {msg}"
        );
        let item = &msg["params"]["item"];
        if method == "item/completed" && item["type"] == "agentMessage" {
            said.push(item["text"].as_str().unwrap_or_default().to_owned());
        }
        if method == "turn/completed" {
            return said;
        }
    }
}

#[test]
fn codex_calls_a_connector_installed_after_its_first_turn_in_its_second_turn() {
    let codex_bin = require_codex();
    let mut rt = Runtime::start(RuntimeOptions::default());
    let path = agent_path(&codex_bin);
    let (home, work) = (rt.root().join("codex-home"), rt.root().join("work"));
    std::fs::create_dir_all(&work).unwrap_or_else(|e| panic!("{e}"));
    let (_model, model_url) = scripted_model(rt.root());
    let bound = bind_codex(&rt, &home, &path, &model_url);
    let url = bound
        .get("mcp_servers")
        .and_then(|m| m.get("connector")?.get("url"));
    assert!(
        url.is_some_and(|u| u.is_str()),
        "no connector bound:\n{bound}"
    );
    let flag = bound
        .get("features")
        .and_then(|f| f.get("mcp_tool_list_changed"));
    assert_eq!(
        flag.and_then(|f| f.as_bool()),
        Some(true),
        "the binding must turn on Codex's list-changed feature:\n{bound}"
    );

    let mut codex = codex_app_server(&codex_bin, &path, &home, &work);
    let thread = codex.request(
        "thread/start",
        json!({"cwd": work, "approvalPolicy": "never"}),
    );
    let thread = thread["result"]["thread"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("thread/start gave no thread id: {thread}"))
        .to_owned();
    let first = turn(&mut codex, &thread, "Say what tools you have.");
    assert!(
        first.iter().any(|t| t.contains("no tool ending in")),
        "turn 1: {first:?}; model saw {:?}",
        model_log(rt.root())
    );

    let record = rt.root().join("late-calls.jsonl");
    let record_arg = record.display().to_string();
    let late = fixture_connector(LATE, &["--tools", "echo", "--record", &record_arg]);
    rt.install_ok(&late, &[]);
    rt.wait_status(LATE, "ready", READY);
    // Codex hears `notifications/tools/list_changed` on its GET stream and lists again; the
    // runtime sends it when the generation commits, so a moment is enough.
    std::thread::sleep(Duration::from_secs(3));

    let second = turn(&mut codex, &thread, "Use the new tool.");
    let log = model_log(rt.root());
    assert!(
        log.iter()
            .any(|r| r["call"].as_str().is_some_and(|c| c.ends_with(LATE_TOOL))),
        "turn 2: the model was never offered {LATE_TOOL}: {log:?}"
    );
    let calls = std::fs::read_to_string(&record).unwrap_or_default();
    assert!(
        calls
            .lines()
            .any(|l| l.contains("tools/call") && l.contains(MESSAGE)),
        "the upstream never received the call; its record:\n{calls}\nmodel: {log:?}"
    );
    assert!(
        second
            .iter()
            .any(|t| t.contains("tool answered:") && t.contains(MESSAGE)),
        "Codex's answer lacks the tool's answer: {second:?}; model: {log:?}; stderr:\n{}",
        codex.stderr()
    );
}

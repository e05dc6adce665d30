//! Real agent CLIs against the real runtime, their model replaced by a scripted endpoint
//! (`tests/py/scripted_model.py`: the OpenAI Responses API and the Anthropic Messages API):
//! what a user of the agent sees. The agents are the pinned releases of
//! `scripts/install-test-tools` (`.tools/npm-agents`).
//!
//! Codex runs as `codex app-server` (one process, one thread, several turns over stdio), with
//! `CODEX_HOME` a fresh folder whose config is what `tutti session issue --format codex
//! --codex-home` wrote plus the scripted model provider: once the URL entry, once (with
//! `--via stdio`) the `command` entry running the stdio bridge `tutti mcp-stdio`.
//!
//! Claude Code runs as `claude -p` with stream-json input (one process, one session, several
//! user messages over stdin), its MCP config what `tutti session issue --format claude --via
//! stdio` wrote: the connector reached through the stdio bridge `tutti mcp-stdio`.
#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toml_edit::{DocumentMut, TableLike, value};
use tutti_tests::{
    PySdk, Runtime, RuntimeOptions, StdioClient, fixture_connector, py_script, require_node22,
    tools_dir,
};

use crate::codex_binding_refresh::issue_codex_into;

/// The pinned Codex release (`scripts/install-test-tools`).
const CODEX_VERSION: &str = "0.171.0";
/// The pinned Claude Code release (`scripts/install-test-tools`).
const CLAUDE_VERSION: &str = "2.1.332";
/// One agent turn: the agent, the runtime and the upstream on a loaded 2-core machine.
const TURN: Duration = Duration::from_secs(120);
/// Starting the connector's worker and upstream.
const READY: Duration = Duration::from_secs(30);
/// The connector installed between the turns and the local name of its tool (SPEC §5.1).
const LATE: &str = "late";
const LATE_TOOL: &str = "late_echo";
/// The argument the scripted model passes; `echo` answers with it.
const MESSAGE: &str = "called by the scripted model";

/// The `.bin` folder of the pinned agent `package` at `version` holding `command`; a missing
/// install fails the test with the line that installs it.
fn require_agent(package: &str, version: &str, command: &str) -> PathBuf {
    let prefix = tools_dir().join("npm-agents");
    let bin = prefix.join("node_modules").join(".bin");
    let manifest = prefix
        .join("node_modules")
        .join(package)
        .join("package.json");
    let found = std::fs::read_to_string(&manifest)
        .ok()
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        .and_then(|v| v["version"].as_str().map(str::to_owned));
    assert!(
        found.as_deref() == Some(version) && bin.join(command).is_file(),
        "this test needs {package}@{version} in {} (found {found:?}): run \
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
/// offered; returns it and its origin (`http://127.0.0.1:<port>`).
fn scripted_model(root: &Path) -> (PySdk, String) {
    let script = py_script("scripted_model.py");
    let log = root.join("model.jsonl").display().to_string();
    let model = PySdk::spawn(&script, &[LATE_TOOL, &log], "", root.join("model.err"));
    let listening = model.next("the scripted model's port");
    let port = listening["port"]
        .as_u64()
        .unwrap_or_else(|| panic!("no port from the scripted model: {listening}"));
    (model, format!("http://127.0.0.1:{port}"))
}

/// The requests the scripted model answered, one JSON object each.
fn model_log(root: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(root.join("model.jsonl")).unwrap_or_default();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// Issues the Codex binding (with `via`, e.g. `--via stdio`) into `home` (as a user would)
/// and adds the scripted model provider; returns the written config as the binding left it.
fn bind_codex(rt: &Runtime, home: &Path, path: &str, via: &[&str], model_url: &str) -> DocumentMut {
    std::fs::create_dir_all(home).unwrap_or_else(|e| panic!("{e}"));
    let (_, _, written) = issue_codex_into(rt, "codex", home, Path::new(path), via);
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
    codex_calls_the_late_connector_in_its_second_turn(&[], |entry, bound| {
        assert!(
            entry.get("url").is_some_and(|u| u.is_str()),
            "no connector bound by URL:\n{bound}"
        );
    });
}

#[test]
fn codex_calls_a_connector_installed_after_its_first_turn_through_the_stdio_bridge() {
    codex_calls_the_late_connector_in_its_second_turn(&["--via", "stdio"], |entry, bound| {
        let runs_bridge = entry.get("command").is_some_and(|c| c.is_str())
            && entry
                .get("args")
                .and_then(|a| a.as_array()?.get(0)?.as_str().map(str::to_owned))
                .as_deref()
                == Some("mcp-stdio");
        assert!(runs_bridge, "not the stdio bridge:\n{bound}");
        let text = bound.to_string();
        for http in ["url", "http_headers", "bearer_token_env_var"] {
            assert!(
                entry.get(http).is_none(),
                "`{http}` in the bridge entry:\n{text}"
            );
        }
        assert!(
            !text.contains("Bearer") && !text.contains("tts_"),
            "a token in config.toml:\n{text}"
        );
    });
}

/// Codex bound by `tutti session issue --format codex --codex-home` plus `via` (the written
/// `[mcp_servers.connector]` judged by `check_entry`, with the whole file) has no tool to
/// call in its first turn and calls the connector installed after it in its second.
fn codex_calls_the_late_connector_in_its_second_turn(
    via: &[&str],
    check_entry: fn(&dyn TableLike, &DocumentMut),
) {
    let codex_bin = require_agent("@openai/codex", CODEX_VERSION, "codex");
    let mut rt = Runtime::start(RuntimeOptions::default());
    let path = agent_path(&codex_bin);
    let (home, work) = (rt.root().join("codex-home"), rt.root().join("work"));
    std::fs::create_dir_all(&work).unwrap_or_else(|e| panic!("{e}"));
    let (_model, model_origin) = scripted_model(rt.root());
    let bound = bind_codex(&rt, &home, &path, via, &format!("{model_origin}/v1"));
    let entry = bound
        .get("mcp_servers")
        .and_then(|m| m.get("connector")?.as_table_like())
        .unwrap_or_else(|| panic!("no connector bound:\n{bound}"));
    check_entry(entry, &bound);
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
    assert_no_late_tool_yet(&rt, &first);

    // Codex hears `notifications/tools/list_changed` (on its GET stream, or through the
    // bridge) and lists again.
    let record = install_late(&mut rt);
    let second = turn(&mut codex, &thread, "Use the new tool.");
    assert_late_called(&rt, &record, &second, &codex.stderr());
}

/// The agent's first turn (`said`) ended without any tool to call.
fn assert_no_late_tool_yet(rt: &Runtime, said: &[String]) {
    assert!(
        said.iter().any(|t| t.contains("no tool ending in")),
        "turn 1: {said:?}; model saw {:?}",
        model_log(rt.root())
    );
}

/// Installs the [`LATE`] connector (the fixture's `echo`, recording what it receives) and
/// waits until it is ready plus a moment for the agent to hear the list change (the runtime
/// sends it when the generation commits); returns the upstream's record file.
fn install_late(rt: &mut Runtime) -> PathBuf {
    let record = rt.root().join("late-calls.jsonl");
    let record_arg = record.display().to_string();
    let late = fixture_connector(LATE, &["--tools", "echo", "--record", &record_arg]);
    rt.install_ok(&late, &[]);
    rt.wait_status(LATE, "ready", READY);
    std::thread::sleep(Duration::from_secs(3));
    record
}

/// The model was offered [`LATE_TOOL`] and called it, the upstream received the call, and
/// the agent's answer (`said`) carries the tool's answer.
fn assert_late_called(rt: &Runtime, record: &Path, said: &[String], stderr: &str) {
    let log = model_log(rt.root());
    assert!(
        log.iter()
            .any(|r| r["call"].as_str().is_some_and(|c| c.ends_with(LATE_TOOL))),
        "the model was never offered {LATE_TOOL}: {log:?}"
    );
    let calls = std::fs::read_to_string(record).unwrap_or_default();
    assert!(
        calls
            .lines()
            .any(|l| l.contains("tools/call") && l.contains(MESSAGE)),
        "the upstream never received the call; its record:\n{calls}\nmodel: {log:?}"
    );
    assert!(
        said.iter()
            .any(|t| t.contains("tool answered:") && t.contains(MESSAGE)),
        "the agent's answer lacks the tool's answer: {said:?}; model: {log:?}; stderr:\n{stderr}"
    );
}

/// Writes what `tutti session issue --format claude --via stdio` prints (the stdio bridge
/// entry, as a user would paste it) to `file`; returns it.
fn bind_claude(rt: &Runtime, file: &Path) -> Value {
    let args = [
        "session",
        "issue",
        "--workspace",
        "w",
        "--session",
        "claude",
    ];
    let out = rt
        .tutti_cmd(&args)
        .args(["--format", "claude", "--via", "stdio"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run tutti: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "session issue failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(file, &stdout).unwrap_or_else(|e| panic!("{e}"));
    serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("--format claude is not JSON ({e}): {stdout}"))
}

/// `claude -p` taking user messages as stream-json on stdin, in `work`, with a fresh config
/// folder, the scripted model at `model_origin`, only the MCP servers of `mcp_config`, the
/// connector's tools allowed without a prompt and no traffic beyond the model.
fn claude_session(
    claude_bin: &Path,
    rt: &Runtime,
    mcp_config: &Path,
    model_origin: &str,
) -> StdioClient {
    let (home, work) = (rt.root().join("claude-home"), rt.root().join("work"));
    for dir in [&home, &work] {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{e}"));
    }
    let mut cmd = Command::new(claude_bin.join("claude"));
    cmd.args(["-p", "--verbose", "--input-format", "stream-json"])
        .args([
            "--output-format",
            "stream-json",
            "--strict-mcp-config",
            "--mcp-config",
        ])
        .arg(mcp_config)
        .args(["--allowedTools", "mcp__connector"])
        .current_dir(&work)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", &home)
        .env("CLAUDE_CONFIG_DIR", home.join(".claude"))
        .env("ANTHROPIC_BASE_URL", model_origin)
        .env("ANTHROPIC_API_KEY", "scripted")
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
    StdioClient::spawn_cmd(cmd)
}

/// Sends `text` as the next user message; returns the assistant's texts and the result of
/// that turn.
fn claude_turn(claude: &mut StdioClient, text: &str) -> Vec<String> {
    claude.send(&json!({"type": "user", "message": {"role": "user", "content": text}}));
    let deadline = Instant::now() + TURN;
    let mut said = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(msg) = claude.recv(left) else {
            panic!(
                "the turn did not end within {TURN:?}; said {said:?}; stderr:\n{}",
                claude.stderr()
            );
        };
        let blocks = msg["message"]["content"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if msg["type"] == "assistant" {
            said.extend(
                blocks
                    .iter()
                    .filter_map(|b| b["text"].as_str().map(str::to_owned)),
            );
        }
        if msg["type"] == "result" {
            said.push(msg["result"].as_str().unwrap_or_default().to_owned());
            return said;
        }
    }
}

#[test]
fn claude_code_calls_a_connector_installed_after_its_first_turn_through_the_stdio_bridge() {
    let claude_bin = require_agent("@anthropic-ai/claude-code", CLAUDE_VERSION, "claude");
    let mut rt = Runtime::start(RuntimeOptions::default());
    let (_model, model_origin) = scripted_model(rt.root());
    let mcp_config = rt.root().join("mcp.json");
    let bound = bind_claude(&rt, &mcp_config);
    let entry = &bound["mcpServers"]["connector"];
    assert!(
        entry["command"].is_string() && entry["args"][0] == "mcp-stdio",
        "not the stdio bridge: {bound}"
    );

    let mut claude = claude_session(&claude_bin, &rt, &mcp_config, &model_origin);
    let first = claude_turn(&mut claude, "Say what tools you have.");
    assert_no_late_tool_yet(&rt, &first);

    // Claude Code hears `notifications/tools/list_changed` through the bridge and lists again.
    let record = install_late(&mut rt);
    let second = claude_turn(&mut claude, "Use the new tool.");
    assert_late_called(&rt, &record, &second, &claude.stderr());
}

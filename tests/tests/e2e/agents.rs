//! Agent-facing pieces end to end over the real runtime (SPEC §4, §6, §7, §8): the published
//! `tutti-connector-<key>` shims and their passthrough, skills, `tutti connector available`,
//! the agent bindings of `tutti session issue`, and the subcommands that must not exist.
//!
//! The fixture connector `tool` has all three interfaces: an `mcp` upstream (the fixture MCP
//! server), a `cli` entrypoint (a python3 script written by the test that reports what it
//! received and writes a marker file when it runs), and a skill. Both interfaces declare the
//! secret `API_TOKEN`, so the connector is `auth_required` until `tutti connector connect`.
#![cfg(unix)]

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};
use toml_edit::DocumentMut;
use tutti_tests::{Mcp, Runtime, RuntimeOptions, bin, fixture_connector};

/// SPEC §8: a shim follows its connector's live generation within one second.
const WITHIN: Duration = Duration::from_secs(1);
/// Starting workers and upstreams on a loaded 2-core machine.
const READY: Duration = Duration::from_secs(30);
/// How long one shim or command run may take.
const RUN: Duration = Duration::from_secs(30);

/// The value of `API_TOKEN`. Contains no `http` (the `available` output is searched for it).
const SECRET: &str = "sekr1t-Value_42 \u{fc}";

/// The cli entrypoint of `tool`. `@VERSION@` is replaced per release. It appends its version
/// to `$TOOL_MARKER` (if set) as the first thing it does. With `TOOL_MODE=wait` it prints
/// `ready <pid>` and waits for SIGTERM (then prints `got SIGTERM` and exits 43); otherwise it
/// prints a JSON report of its argv (hex bytes), stdin (hex), environment and pid on stdout,
/// one line on stderr, and exits 7.
const ENTRYPOINT: &str = r#"#!/usr/bin/env python3
import json, os, signal, sys

VERSION = "@VERSION@"
marker = os.environ.get("TOOL_MARKER")
if marker:
    with open(marker, "a") as f:
        f.write(VERSION + "\n")

if os.environ.get("TOOL_MODE") == "wait":
    def on_term(signum, frame):
        sys.stdout.write("got SIGTERM\n")
        sys.stdout.flush()
        os._exit(43)
    signal.signal(signal.SIGTERM, on_term)
    sys.stdout.write("ready %d\n" % os.getpid())
    sys.stdout.flush()
    while True:
        signal.pause()

data = sys.stdin.buffer.read()
sys.stdout.write(json.dumps({
    "version": VERSION,
    "args": [os.fsencode(a).hex() for a in sys.argv[1:]],
    "stdin": data.hex(),
    "api_token": os.environ.get("API_TOKEN"),
    "key": os.environ.get("TUTTI_CONNECTOR_KEY"),
    "caller": os.environ.get("CALLER_VAR"),
    "cwd": os.getcwd(),
    "pid": os.getpid(),
}))
sys.stdout.flush()
sys.stderr.write("to stderr " + VERSION + "\n")
sys.stderr.flush()
sys.exit(7)
"#;

const TOOL_SKILL: &str = "---\nname: tool-workflow\ntitle: Tool Workflow\n\
description: Work with the tool connector from the command line\n---\n\n# Tool workflow\n\n\
Run `tutti-connector-tool --help`.\n";

const NOTES_SKILL: &str =
    "---\nname: notes-basics\ndescription: Keep short notes\n---\nWrite notes.\n";

const LOCKED_SKILL: &str =
    "---\nname: locked-help\ntitle: Locked Help\ndescription: Needs a key first\n---\n";

// === connectors ===

/// `tool`: mcp (fixture server) + cli + one skill, both interfaces need `API_TOKEN`.
fn tool_manifest(version: &str) -> Value {
    let mut m = fixture_connector("tool", &["--tools", "echo"]);
    m["name"] = json!("Tool");
    m["description"] = json!("Tool connector for the agent tests");
    m["version"] = json!(version);
    m["mcp"]["secrets"] = json!(["API_TOKEN"]);
    m["cli"] = json!({"entrypoint": "bin/tool-cli", "secrets": ["API_TOKEN"]});
    m["skills"] = json!(["skills/tool-workflow"]);
    m
}

fn entrypoint(version: &str) -> Vec<u8> {
    ENTRYPOINT.replace("@VERSION@", version).into_bytes()
}

fn install_tool(rt: &mut Runtime, version: &str, script_version: &str) {
    let script = entrypoint(script_version);
    rt.install_ok(
        &tool_manifest(version),
        &[
            ("bin/tool-cli", script.as_slice()),
            ("skills/tool-workflow/SKILL.md", TOOL_SKILL.as_bytes()),
        ],
    );
}

/// `notes`: cli + skill, no secrets (ready at install).
fn install_notes(rt: &mut Runtime) {
    let manifest = json!({
        "key": "notes",
        "name": "Notes",
        "description": "Plain notes on disk",
        "version": "0.3.0",
        "cli": {"entrypoint": "notes.py"},
        "skills": ["skills/notes-basics"],
    });
    let script = entrypoint("notes");
    rt.install_ok(
        &manifest,
        &[
            ("notes.py", script.as_slice()),
            ("skills/notes-basics/SKILL.md", NOTES_SKILL.as_bytes()),
        ],
    );
}

/// `locked`: cli + skill with a secret that is never given (stays `auth_required`).
fn install_locked(rt: &mut Runtime) {
    let manifest = json!({
        "key": "locked",
        "name": "Locked",
        "description": "Never connected",
        "version": "1.0.0",
        "cli": {"entrypoint": "bin/locked", "secrets": ["LOCKED_KEY"]},
        "skills": ["skills/locked-help"],
    });
    let script = entrypoint("locked");
    rt.install_ok(
        &manifest,
        &[
            ("bin/locked", script.as_slice()),
            ("skills/locked-help/SKILL.md", LOCKED_SKILL.as_bytes()),
        ],
    );
}

/// `tutti connector connect tool --from-env API_TOKEN`.
fn connect_tool(rt: &Runtime) {
    rt.connect_from_env("tool", "API_TOKEN", SECRET);
}

/// `tool` connected and ready, `notes` ready, `locked` waiting for its secret.
fn three_connectors(rt: &mut Runtime) {
    install_tool(rt, "1.0.0", "v1");
    connect_tool(rt);
    install_notes(rt);
    install_locked(rt);
    rt.wait_status("tool", "ready", READY);
    rt.wait_status("notes", "ready", READY);
    rt.wait_status("locked", "auth_required", READY);
}

/// SPEC §7 lists every installed connector, also one whose installed release can no longer be
/// read: it is there, says so, offers no interface, and the others are unaffected.
#[test]
fn available_lists_a_connector_whose_release_cannot_be_read() {
    use std::os::unix::fs::PermissionsExt;

    let mut rt = Runtime::start(RuntimeOptions::default());
    install_tool(&mut rt, "1.0.0", "v1");
    connect_tool(&rt);
    install_notes(&mut rt);
    rt.wait_status("notes", "ready", READY);
    rt.stop();
    // Break the release of `notes`: its manifest is gone.
    let releases = rt.state_dir().join("releases").join("notes");
    let mut broken = 0;
    for entry in std::fs::read_dir(&releases).expect("releases/notes") {
        let dir = entry.expect("release entry").path();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
            .expect("make the release dir writable");
        std::fs::remove_file(dir.join("connector.json")).expect("remove connector.json");
        broken += 1;
    }
    assert_eq!(broken, 1, "one release of notes");
    rt.restart();
    rt.wait_status("tool", "ready", READY);

    let text = rt.tutti_ok(&["connector", "available", "--json"]);
    let v: Value = serde_json::from_str(&text).expect("available --json");
    let connectors = v["connectors"].as_array().expect("connectors");
    let keys: Vec<&str> = connectors
        .iter()
        .filter_map(|c| c["key"].as_str())
        .collect();
    assert_eq!(keys, ["notes", "tool"], "{text}");
    let notes = &connectors[0];
    assert_eq!(notes["interfaces"], json!([]), "{text}");
    assert_eq!(notes["skills"], json!([]), "{text}");
    assert!(
        notes["description"]
            .as_str()
            .is_some_and(|d| d.contains("cannot be read") && d.contains("tutti status")),
        "{text}"
    );
    assert!(
        connectors[1]["interfaces"]
            .as_array()
            .is_some_and(|i| !i.is_empty()),
        "{text}"
    );
    assert!(
        !text.contains(&rt.state_dir().to_string_lossy().to_string()),
        "{text}"
    );
    let status = rt.connector_status("notes").expect("notes in status");
    assert!(
        status["lastError"]
            .as_str()
            .is_some_and(|e| e.contains("unreadable")),
        "{status}"
    );
}

// === helpers ===

fn shim(rt: &Runtime, key: &str) -> PathBuf {
    rt.state_dir()
        .join("bin")
        .join(format!("tutti-connector-{key}"))
}

/// Polls `cond` every 5 ms; returns how long it took; panics after `within`.
fn wait_until(what: &str, within: Duration, mut cond: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    loop {
        if cond() {
            return start.elapsed();
        }
        assert!(start.elapsed() < within, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Asserts that `cond` stays false during the whole `window` (a negative check: no event
/// would tell us that something did not happen).
fn never_during(what: &str, window: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while start.elapsed() < window {
        assert!(!cond(), "{what} after {:?}", start.elapsed());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Our files in `bin/`: shims, sidecars and temp files.
fn our_bin_files(rt: &Runtime) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(rt.state_dir().join("bin"))
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.trim_start_matches('.').starts_with("tutti-connector-"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn signal(pid: u32, sig: Signal) {
    let pid = i32::try_from(pid).unwrap_or_else(|e| panic!("pid {pid}: {e}"));
    kill(Pid::from_raw(pid), sig).unwrap_or_else(|e| panic!("kill {pid} {sig}: {e}"));
}

/// Waits for a child in a thread, so a hung child fails the test instead of hanging it.
fn wait_child(child: Child, what: &str) -> std::process::Output {
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(RUN) {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => panic!("{what}: cannot wait: {e}"),
        Err(_) => {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
            panic!("{what}: did not finish within {RUN:?}");
        }
    }
}

struct Ran {
    pid: u32,
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: String,
}

/// Runs `cmd` with `stdin` piped in and stdout/stderr captured separately.
fn run(mut cmd: Command, stdin: &[u8]) -> Ran {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let what = format!("{cmd:?}");
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot spawn {what}: {e}"));
    let pid = child.id();
    let mut input = child
        .stdin
        .take()
        .unwrap_or_else(|| panic!("{what}: no stdin pipe"));
    let data = stdin.to_vec();
    // The program may exit without reading (exit 69): a broken pipe is fine.
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&data);
    });
    let out = wait_child(child, &what);
    let _ = writer.join();
    Ran {
        pid,
        status: out.status,
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A shim run from a caller's point of view: its own cwd and environment.
fn shim_cmd(program: &Path, args: &[OsString], cwd: &Path, marker: &Path) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(cwd)
        .env("CALLER_VAR", "from the caller")
        .env("TOOL_MARKER", marker)
        .env_remove("API_TOKEN")
        .env_remove("TOOL_MODE");
    cmd
}

fn tricky_args() -> Vec<OsString> {
    vec![
        "two words".into(),
        "it's \"quoted\" $HOME `id` ; | * 'single'".into(),
        "\u{fc}n\u{ef}c\u{f8}d\u{e9} \u{2713} \u{65e5}\u{672c}\u{8a9e}".into(),
        "".into(),
        "  leading and trailing  ".into(),
        "--flag=a b".into(),
        "\\back\\slash\n2nd line\ttab".into(),
        OsString::from_vec(b"raw\xff\xfe bytes".to_vec()),
    ]
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn report_of(ran: &Ran) -> Value {
    serde_json::from_slice(&ran.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not exactly the entrypoint's JSON report ({e}): {:?}\nstderr: {}",
            String::from_utf8_lossy(&ran.stdout),
            ran.stderr
        )
    })
}

/// Lines of a child's stdout, read in a thread.
struct Lines(mpsc::Receiver<String>);

impl Lines {
    fn of(out: impl Read + Send + 'static) -> Lines {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Lines(rx)
    }

    fn next(&self, what: &str) -> String {
        self.0
            .recv_timeout(RUN)
            .unwrap_or_else(|e| panic!("{what}: no line within {RUN:?} ({e})"))
    }
}

/// The only release directory of `key` (`<state>/releases/<key>/<sha256>`).
fn release_dir(rt: &Runtime, key: &str) -> PathBuf {
    let dir = rt.state_dir().join("releases").join(key);
    let entries: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(entries.len(), 1, "releases of {key}: {entries:?}");
    entries.into_iter().next().unwrap_or_default()
}

fn issue(rt: &Runtime, session: &str, format: &str, extra: &[&str]) -> (String, String) {
    let mut args = vec![
        "session",
        "issue",
        "--workspace",
        "w",
        "--session",
        session,
        "--format",
        format,
    ];
    args.extend_from_slice(extra);
    let out = rt.tutti(&args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "`tutti {}` failed with {}: {stderr}",
        args.join(" "),
        out.status
    );
    (stdout, stderr)
}

fn parse_json(what: &str, text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{what} is not JSON ({e}): {text}"))
}

fn bearer_of(what: &str, authorization: &str) -> String {
    let token = authorization.strip_prefix("Bearer ").unwrap_or_else(|| {
        panic!("{what}: Authorization is not `Bearer <token>`: {authorization}")
    });
    assert!(token.starts_with("tts_"), "{what}: token format: {token}");
    token.to_owned()
}

/// `tools/list` with `token`: the HTTP status.
async fn tools_list_status(url: &str, token: &str) -> u16 {
    Mcp::modern(url, token)
        .request("tools/list", json!({}))
        .await
        .0
}

async fn assert_token_works(url: &str, token: &str, what: &str) {
    let (status, _, body) = Mcp::modern(url, token)
        .request("tools/list", json!({}))
        .await;
    assert_eq!(status, 200, "{what}: tools/list with its token: {body}");
    let names: Vec<&str> = body["result"]["tools"]
        .as_array()
        .map(|tools| tools.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default();
    assert!(names.contains(&"tool_echo"), "{what}: tools {names:?}");
}

/// Checks that a TOML binding is exactly the `[mcp_servers.connector]` table of SPEC §6 and
/// returns its token.
fn codex_table_token(what: &str, doc: &DocumentMut, url: &str) -> String {
    let servers = doc["mcp_servers"]
        .as_table_like()
        .unwrap_or_else(|| panic!("{what}: no [mcp_servers] table: {doc}"));
    let conn = servers
        .get("connector")
        .and_then(|c| c.as_table_like())
        .unwrap_or_else(|| panic!("{what}: no [mcp_servers.connector] table: {doc}"));
    let keys: Vec<&str> = conn.iter().map(|(k, _)| k).collect();
    assert_eq!(keys, ["url", "http_headers"], "{what}: {doc}");
    assert_eq!(
        conn.get("url").and_then(|v| v.as_str()),
        Some(url),
        "{what}: {doc}"
    );
    let headers = conn
        .get("http_headers")
        .and_then(|h| h.as_table_like())
        .unwrap_or_else(|| panic!("{what}: http_headers is not a table: {doc}"));
    let header_names: Vec<&str> = headers.iter().map(|(k, _)| k).collect();
    assert_eq!(header_names, ["Authorization"], "{what}: {doc}");
    let auth = headers
        .get("Authorization")
        .and_then(|v| v.as_str())
        .unwrap_or_else(|| panic!("{what}: Authorization is not a string: {doc}"));
    bearer_of(what, auth)
}

// === shims ===

/// Passthrough: argv verbatim, stdin, the declared secret and the caller's environment and cwd,
/// stderr apart, the exit status, and the entrypoint's own pid (exec).
fn assert_passthrough(tool: &Path, cwd: &Path, marker: &Path) {
    let args = tricky_args();
    let stdin = "line one\nzwei \u{2713}\n\0binary\u{ff}\n".as_bytes();
    let ran = run(shim_cmd(tool, &args, cwd, marker), stdin);
    assert_eq!(ran.status.code(), Some(7), "stderr: {}", ran.stderr);
    assert_eq!(ran.stderr, "to stderr v1\n", "stderr stays separate");
    let report = report_of(&ran);
    let want_args: Vec<String> = args.iter().map(|a| hex(a.as_encoded_bytes())).collect();
    assert_eq!(report["args"], json!(want_args), "argv verbatim");
    assert_eq!(report["stdin"], json!(hex(stdin)), "stdin piped through");
    assert_eq!(report["api_token"], json!(SECRET), "declared secret in env");
    assert_eq!(report["key"], json!("tool"), "TUTTI_CONNECTOR_KEY");
    assert_eq!(report["caller"], json!("from the caller"), "caller's env");
    assert_eq!(report["cwd"], json!(cwd.to_string_lossy()), "caller's cwd");
    assert_eq!(report["version"], json!("v1"));
    assert_eq!(
        report["pid"],
        json!(ran.pid),
        "exec: the shim's pid is the entrypoint's"
    );
    assert_eq!(std::fs::read_to_string(marker).unwrap_or_default(), "v1\n");
}

/// --- SIGTERM to the shim's pid reaches the entrypoint ---
fn sigterm_reaches_the_entrypoint(tool: &Path) {
    let mut child = Command::new(tool)
        .env("TOOL_MODE", "wait")
        .env_remove("TOOL_MARKER")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run the shim: {e}"));
    let pid = child.id();
    let lines = Lines::of(
        child
            .stdout
            .take()
            .unwrap_or_else(|| panic!("no stdout pipe")),
    );
    assert_eq!(lines.next("entrypoint ready"), format!("ready {pid}"));
    signal(pid, Signal::SIGTERM);
    assert_eq!(lines.next("SIGTERM handled"), "got SIGTERM");
    let out = wait_child(child, "shim in wait mode");
    assert_eq!(
        out.status.code(),
        Some(43),
        "exit status is the entrypoint's"
    );
}

/// --- upgrade: the shim runs the new release's entrypoint, and never disappears ---
fn upgrade_runs_the_new_entrypoint_and_keeps_the_shim(
    rt: &mut Runtime,
    tool: &Path,
    cwd: &Path,
    marker: &Path,
) {
    let before = rt
        .connector_status("tool")
        .and_then(|c| c["generation"].as_u64())
        .unwrap_or(0);
    assert!(before > 0, "tool has a live generation");
    let vanished = Arc::new(AtomicBool::new(false));
    let watching = Arc::new(AtomicBool::new(true));
    let watcher = {
        let (tool, vanished, watching) = (tool.to_path_buf(), vanished.clone(), watching.clone());
        std::thread::spawn(move || {
            while watching.load(Ordering::SeqCst) {
                if !tool.exists() {
                    vanished.store(true, Ordering::SeqCst);
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    install_tool(rt, "2.0.0", "v2");
    rt.wait_connector("tool", READY, "version 2.0.0 live", |c| {
        c["version"] == "2.0.0"
            && c["status"] == "ready"
            && c["generation"].as_u64().is_some_and(|g| g > before)
    });
    let ran = run(shim_cmd(tool, &[], cwd, marker), b"");
    watching.store(false, Ordering::SeqCst);
    let _ = watcher.join();
    assert_eq!(ran.status.code(), Some(7), "stderr: {}", ran.stderr);
    assert_eq!(
        report_of(&ran)["version"],
        json!("v2"),
        "the new entrypoint"
    );
    assert_eq!(ran.stderr, "to stderr v2\n");
    assert!(
        !vanished.load(Ordering::SeqCst),
        "the shim disappeared during the upgrade"
    );
}

/// Shims appear on connect, pass everything through, follow an upgrade, and disappear on
/// disconnect and uninstall; a stale copy exits 69 and runs nothing.
#[test]
fn shims_follow_the_connector_and_pass_everything_through() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let tool = shim(&rt, "tool");
    install_tool(&mut rt, "1.0.0", "v1");
    rt.wait_status("tool", "auth_required", READY);
    never_during(
        "the shim exists while tool is auth_required",
        WITHIN,
        || tool.exists(),
    );

    // --- connect: the shim appears within one second. ---
    connect_tool(&rt);
    let took = wait_until("shim published after connect", WITHIN, || tool.exists());
    eprintln!("shim appeared {took:?} after connect returned");
    rt.wait_status("tool", "ready", READY);

    // --- passthrough ---
    let root = rt.root().to_path_buf();
    let cwd = root.join("caller cwd \u{fc}");
    std::fs::create_dir_all(&cwd).unwrap_or_else(|e| panic!("{e}"));
    let marker = root.join("marker-pass");
    assert_passthrough(&tool, &cwd, &marker);

    sigterm_reaches_the_entrypoint(&tool);

    upgrade_runs_the_new_entrypoint_and_keeps_the_shim(&mut rt, &tool, &cwd, &marker);

    // --- disconnect: gone within one second; a copy says why ---
    let copies = root.join("copies");
    std::fs::create_dir_all(&copies).unwrap_or_else(|e| panic!("{e}"));
    let copy = copies.join("tutti-connector-tool");
    std::fs::copy(&tool, &copy).unwrap_or_else(|e| panic!("cannot copy the shim: {e}"));
    rt.tutti_ok(&["connector", "disconnect", "tool"]);
    wait_until("shim removed after disconnect", WITHIN, || !tool.exists());
    let marker_off = root.join("marker-disconnected");
    let ran = run(shim_cmd(&copy, &[], &cwd, &marker_off), b"");
    assert_eq!(ran.status.code(), Some(69), "stderr: {}", ran.stderr);
    assert_eq!(
        ran.stderr,
        "tutti-connector-tool: connector tool is not available (auth_required)\n"
    );
    assert!(ran.stdout.is_empty());
    assert!(
        !marker_off.exists(),
        "the entrypoint ran while disconnected"
    );

    // --- reconnect, take a copy, uninstall ---
    connect_tool(&rt);
    wait_until("shim published after reconnect", WITHIN, || tool.exists());
    std::fs::copy(&tool, &copy).unwrap_or_else(|e| panic!("cannot copy the shim: {e}"));
    rt.tutti_ok(&["connector", "uninstall", "tool"]);
    wait_until("shim removed after uninstall", WITHIN, || !tool.exists());
    assert_eq!(our_bin_files(&rt), Vec::<String>::new());

    let marker_gone = root.join("marker-uninstalled");
    let ran = run(shim_cmd(&copy, &tricky_args(), &cwd, &marker_gone), b"x");
    assert_eq!(ran.status.code(), Some(69), "stderr: {}", ran.stderr);
    let line = ran.stderr.strip_suffix('\n').unwrap_or(&ran.stderr);
    assert!(
        line.starts_with("tutti-connector-tool: connector tool is not available (")
            && line.ends_with(')')
            && !line.contains('\n'),
        "exactly the SPEC §8 line: {:?}",
        ran.stderr
    );
    assert!(ran.stdout.is_empty(), "{:?}", ran.stdout);
    assert!(!marker_gone.exists(), "the entrypoint ran after uninstall");
    assert!(!ran.stderr.contains(SECRET));
}

/// SPEC §8: at runtime shutdown no connector has a live generation, so no shim is left.
#[test]
fn shutdown_removes_every_shim() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    install_notes(&mut rt);
    install_tool(&mut rt, "1.0.0", "v1");
    connect_tool(&rt);
    let (notes, tool) = (shim(&rt, "notes"), shim(&rt, "tool"));
    wait_until("both shims published", READY, || {
        notes.exists() && tool.exists()
    });
    let status = rt.stop();
    assert!(
        status.is_some_and(|s| s.success()),
        "`tutti up` after SIGTERM: {status:?}"
    );
    assert_eq!(
        our_bin_files(&rt),
        Vec::<String>::new(),
        "shims left after shutdown; shim-manager.log:\n{}",
        rt.log_tail("shim-manager.log", 20)
    );
}

// === skills ===

/// One line of the refusal names the skill file and, after it, the problem.
fn assert_line_names_the_problem(case: &str, stderr: &str, problem: &str) {
    let line = stderr
        .lines()
        .find(|l| l.contains("skills/broken/SKILL.md"))
        .unwrap_or_else(|| panic!("{case}: no line names skills/broken/SKILL.md:\n{stderr}"));
    let after_file = line
        .split_once("skills/broken/SKILL.md")
        .map(|(_, rest)| rest)
        .unwrap_or_default();
    assert!(
        after_file.contains(problem),
        "{case}: the line does not name the problem ({problem}): {line}"
    );
}

/// Nothing written: no registry entry, no release dir, not listed anywhere.
fn assert_nothing_written(rt: &Runtime, case: &str, registry_before: &[u8]) {
    assert_eq!(
        std::fs::read(rt.state_dir().join("registry.json")).unwrap_or_default(),
        registry_before,
        "{case}: registry.json changed"
    );
    assert!(
        !rt.state_dir().join("releases").join("badskill").exists(),
        "{case}: a release dir was written"
    );
    assert!(
        rt.connector_status("badskill").is_none(),
        "{case}: in status"
    );
    let available = rt.tutti_ok(&["connector", "available", "--json"]);
    assert!(!available.contains("badskill"), "{case}: {available}");
    assert!(!shim(rt, "badskill").exists(), "{case}: shim published");
}

/// A bad SKILL.md refuses the install with a line naming the file and the problem, and
/// nothing is written.
#[test]
fn bad_skill_refuses_the_install_and_writes_nothing() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let registry_before = std::fs::read(rt.state_dir().join("registry.json")).unwrap_or_default();
    let cases: [(&str, Option<&str>, &str); 6] = [
        ("no front matter", Some("# Just a title\n"), "front matter"),
        (
            "missing description",
            Some("---\nname: bad\n---\nbody\n"),
            "description",
        ),
        (
            "empty name",
            Some("---\nname: \"\"\ndescription: d\n---\n"),
            "name",
        ),
        (
            "invalid YAML",
            Some("---\nname: [unclosed\ndescription: d\n---\n"),
            "front matter",
        ),
        (
            "unclosed front matter",
            Some("---\nname: bad\ndescription: d\n"),
            "front matter",
        ),
        ("no SKILL.md", None, "cannot read"),
    ];
    for (case, content, problem) in cases {
        let manifest = json!({
            "key": "badskill",
            "name": "Bad skill",
            "description": "A release with a broken skill",
            "version": "1.0.0",
            "cli": {"entrypoint": "run.py"},
            "skills": ["skills/broken"],
        });
        let script = entrypoint("bad");
        let mut files: Vec<(&str, &[u8])> = vec![("run.py", script.as_slice())];
        if let Some(content) = content {
            files.push(("skills/broken/SKILL.md", content.as_bytes()));
        } else {
            files.push(("skills/broken/README.md", b"no skill file here\n"));
        }
        let out = rt.install_dir(&manifest, &files);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{case}: install succeeded: {stderr}");
        assert_line_names_the_problem(case, &stderr, problem);
        assert_nothing_written(&rt, case, &registry_before);
    }

    // The same release with a good SKILL.md installs (the refusals were about the skill).
    let manifest = json!({
        "key": "badskill",
        "name": "Bad skill",
        "description": "Now fixed",
        "version": "1.0.1",
        "cli": {"entrypoint": "run.py"},
        "skills": ["skills/broken"],
    });
    let script = entrypoint("fixed");
    rt.install_ok(
        &manifest,
        &[
            ("run.py", script.as_slice()),
            (
                "skills/broken/SKILL.md",
                b"---\nname: fixed\ndescription: fixed now\n---\n",
            ),
        ],
    );
    rt.wait_status("badskill", "ready", READY);
}

// === available ===

/// A JSON Schema of SPEC §7 (`tutti connector available --json`).
fn available_schema() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "additionalProperties": false,
        "required": ["connectors"],
        "properties": {
            "connectors": {"type": "array", "items": {"$ref": "#/$defs/connector"}}
        },
        "$defs": {
            "key": {"type": "string", "pattern": "^[a-z][a-z0-9-]{0,23}$"},
            "status": {"enum": ["ready", "starting", "unavailable", "auth_required"]},
            "connector": {
                "type": "object",
                "additionalProperties": false,
                "required": ["key", "name", "description", "skills", "interfaces"],
                "properties": {
                    "key": {"$ref": "#/$defs/key"},
                    "name": {"type": "string", "minLength": 1},
                    "description": {"type": "string", "minLength": 1},
                    "skills": {"type": "array", "items": {"$ref": "#/$defs/skill"}},
                    "interfaces": {
                        "type": "array",
                        "items": {"oneOf": [{"$ref": "#/$defs/mcp"}, {"$ref": "#/$defs/cli"}]}
                    }
                }
            },
            "skill": {
                "type": "object",
                "additionalProperties": false,
                "required": ["name", "description"],
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "title": {"type": "string", "minLength": 1},
                    "description": {"type": "string", "minLength": 1}
                }
            },
            "mcp": {
                "type": "object",
                "additionalProperties": false,
                "required": ["kind", "serverName", "toolPrefix", "status"],
                "properties": {
                    "kind": {"const": "mcp"},
                    "serverName": {"const": "connector"},
                    "toolPrefix": {"type": "string", "pattern": "^[a-z][a-z0-9-]{0,23}_$"},
                    "status": {"$ref": "#/$defs/status"}
                }
            },
            "cli": {
                "type": "object",
                "additionalProperties": false,
                "required": ["kind", "command", "status"],
                "properties": {
                    "kind": {"const": "cli"},
                    "command": {
                        "type": "string",
                        "pattern": "^tutti-connector-[a-z][a-z0-9-]{0,23}$"
                    },
                    "status": {"$ref": "#/$defs/status"}
                }
            }
        }
    })
}

fn schema_errors(validator: &jsonschema::Validator, instance: &Value) -> Vec<String> {
    validator
        .iter_errors(instance)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

/// Nothing private, in the JSON or in the table.
fn assert_nothing_private(rt: &Runtime, token: &str, text: &str) {
    let table = rt.tutti_ok(&["connector", "available"]);
    for key in ["locked", "notes", "tool"] {
        assert!(table.contains(key), "the table lists {key}:\n{table}");
    }
    let state = rt.state_dir().to_string_lossy().into_owned();
    let root = rt.root().to_string_lossy().into_owned();
    let releases = rt.state_dir().join("releases");
    let release = release_dir(rt, "tool").to_string_lossy().into_owned();
    let forbidden = [
        ("the token", token),
        ("the token prefix", "tts_"),
        ("the secret value", SECRET),
        ("the loopback address", "127.0.0.1"),
        ("a URL scheme", "http"),
        ("the state dir", state.as_str()),
        ("the temporary root", root.as_str()),
        ("a release path", release.as_str()),
        ("the releases dir", &*releases.to_string_lossy()),
        ("a release path fragment", "releases/"),
    ];
    for (output, label) in [(text, "available --json"), (table.as_str(), "available")] {
        for (what, needle) in forbidden {
            assert!(
                !output.contains(needle),
                "`tutti connector {label}` contains {what} ({needle:?}):\n{output}"
            );
        }
    }
    // The frontend port is not there either.
    let port = rt
        .frontend_url()
        .rsplit_once(':')
        .and_then(|(_, rest)| rest.split('/').next())
        .unwrap_or_default()
        .to_owned();
    assert!(!port.is_empty());
    assert!(
        !text.contains(&port),
        "available --json contains the port {port}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn available_matches_spec_and_leaks_nothing() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    three_connectors(&mut rt);
    let token = rt.issue_token("w", "available");

    let text = rt.tutti_ok(&["connector", "available", "--json"]);
    let value = parse_json("available --json", &text);
    let schema = available_schema();
    let validator = jsonschema::validator_for(&schema)
        .unwrap_or_else(|e| panic!("the SPEC §7 schema does not compile: {e}"));
    let errors = schema_errors(&validator, &value);
    assert!(errors.is_empty(), "SPEC §7 schema: {errors:?}\n{text}");

    // The schema can fail: each of these deviations is refused.
    let mut deviations = Vec::new();
    let mut v = value.clone();
    v["connectors"][0]["url"] = json!("x");
    deviations.push(("extra connector field", v));
    let mut v = value.clone();
    v["connectors"][0]["interfaces"][0]["status"] = json!("crash_loop");
    deviations.push(("status outside the interface enum", v));
    let mut v = value.clone();
    v["connectors"][2]["interfaces"][0]["headers"] = json!({});
    deviations.push(("extra interface field", v));
    let mut v = value.clone();
    if let Some(c) = v["connectors"][1].as_object_mut() {
        c.remove("skills");
    }
    deviations.push(("no skills", v));
    for (what, instance) in deviations {
        assert!(
            !schema_errors(&validator, &instance).is_empty(),
            "the schema accepts {what}: {instance}"
        );
    }

    // Exactly SPEC §7: all installed connectors, sorted by key, statuses per interface,
    // skills with name/title/description.
    assert_eq!(
        value,
        json!({"connectors": [
            {
                "key": "locked",
                "name": "Locked",
                "description": "Never connected",
                "skills": [{"name": "locked-help", "title": "Locked Help",
                            "description": "Needs a key first"}],
                "interfaces": [
                    {"kind": "cli", "command": "tutti-connector-locked", "status": "auth_required"}
                ]
            },
            {
                "key": "notes",
                "name": "Notes",
                "description": "Plain notes on disk",
                "skills": [{"name": "notes-basics", "description": "Keep short notes"}],
                "interfaces": [
                    {"kind": "cli", "command": "tutti-connector-notes", "status": "ready"}
                ]
            },
            {
                "key": "tool",
                "name": "Tool",
                "description": "Tool connector for the agent tests",
                "skills": [{"name": "tool-workflow", "title": "Tool Workflow",
                            "description": "Work with the tool connector from the command line"}],
                "interfaces": [
                    {"kind": "mcp", "serverName": "connector", "toolPrefix": "tool_",
                     "status": "ready"},
                    {"kind": "cli", "command": "tutti-connector-tool", "status": "ready"}
                ]
            }
        ]}),
        "{text}"
    );

    assert_nothing_private(&rt, &token, &text);
}

// === bindings ===

/// One stable skills root, kept by the shim manager: the skills of the
/// ready connectors, each as the live release's copy; the locked connector's is absent.
fn assert_one_stable_skills_root(rt: &Runtime, v: &Value) {
    let root = rt.state_dir().join("skills");
    assert_eq!(
        v["skillRoots"],
        json!([root.to_string_lossy()]),
        "skillRoots = the one stable skills root"
    );
    for (key, name) in [("notes", "notes-basics"), ("tool", "tool-workflow")] {
        let published = root.join(name).join("SKILL.md");
        let release = release_dir(rt, key)
            .join("skills")
            .join(name)
            .join("SKILL.md");
        wait_until(&format!("{name} under the skills root"), RUN, || {
            std::fs::read(&published).ok() == std::fs::read(&release).ok()
        });
    }
    assert!(
        !root.join("locked-help").exists(),
        "a connector that is not ready has no skills under the root"
    );
}

/// `--format acp` (with `args`) for `session`: exactly the ACP shape; its token.
fn acp_binding_token(rt: &Runtime, url: &str, session: &str, args: &[&str]) -> String {
    let (out, _) = issue(rt, session, "acp", args);
    let what = format!("--format acp {args:?}");
    let v = parse_json(&what, &out);
    let token = bearer_of(
        &what,
        v["mcpServers"][0]["headers"][0]["value"]
            .as_str()
            .unwrap_or_default(),
    );
    assert_eq!(
        v,
        json!({"mcpServers": [{
            "name": "connector",
            "type": "http",
            "url": url,
            "headers": [{"name": "Authorization", "value": format!("Bearer {token}")}]
        }]})
    );
    token
}

/// `--format claude`: exactly Claude Code's `.mcp.json` shape; its token.
fn claude_binding_token(rt: &Runtime, url: &str) -> String {
    let (out, _) = issue(rt, "s-claude", "claude", &[]);
    let v = parse_json("--format claude", &out);
    let token = bearer_of(
        "claude",
        v["mcpServers"]["connector"]["headers"]["Authorization"]
            .as_str()
            .unwrap_or_default(),
    );
    assert_eq!(
        v,
        json!({"mcpServers": {"connector": {
            "type": "http",
            "url": url,
            "headers": {"Authorization": format!("Bearer {token}")}
        }}})
    );
    token
}

/// codex and tutti: the same TOML table, nothing else
fn codex_and_tutti_binding_tokens(rt: &Runtime, url: &str) -> [String; 2] {
    ["codex", "tutti"].map(|format| {
        let (out, _) = issue(rt, &format!("s-{format}"), format, &[]);
        let doc: DocumentMut = out
            .parse()
            .unwrap_or_else(|e| panic!("--format {format} is not TOML ({e}):\n{out}"));
        let top: Vec<&str> = doc.iter().map(|(k, _)| k).collect();
        assert_eq!(top, ["mcp_servers"], "--format {format}:\n{out}");
        let servers: Vec<&str> = doc["mcp_servers"]
            .as_table_like()
            .map(|t| t.iter().map(|(k, _)| k).collect())
            .unwrap_or_default();
        assert_eq!(servers, ["connector"], "--format {format}:\n{out}");
        codex_table_token(format, &doc, url)
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn every_binding_format_matches_spec_and_its_token_works() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    three_connectors(&mut rt);
    let url = rt.frontend_url().to_owned();
    let bin_dir = rt.state_dir().join("bin").to_string_lossy().into_owned();
    let mut tokens = BTreeSet::new();

    // runtime (also the default format)
    let (out, _) = issue(&rt, "s-runtime", "runtime", &[]);
    let v = parse_json("--format runtime", &out);
    let token = bearer_of(
        "runtime",
        v["mcpServers"][0]["headers"]["Authorization"]
            .as_str()
            .unwrap_or_default(),
    );
    assert_one_stable_skills_root(&rt, &v);

    assert_eq!(
        v,
        json!({
            "mcpServers": [{
                "name": "connector",
                "type": "http",
                "url": url,
                "headers": {"Authorization": format!("Bearer {token}")}
            }],
            "skillRoots": v["skillRoots"].clone(),
            "path": [bin_dir]
        })
    );
    tokens.insert(token);

    let out = rt.tutti_ok(&[
        "session",
        "issue",
        "--workspace",
        "w",
        "--session",
        "s-default",
    ]);
    let v = parse_json("default format", &out);
    let token = bearer_of(
        "default",
        v["mcpServers"][0]["headers"]["Authorization"]
            .as_str()
            .unwrap_or_default(),
    );
    assert_eq!(v["path"], json!([bin_dir]), "the default format is runtime");
    tokens.insert(token);

    tokens.insert(acp_binding_token(&rt, &url, "s-acp", &[]));

    tokens.insert(claude_binding_token(&rt, &url));

    tokens.extend(codex_and_tutti_binding_tokens(&rt, &url));

    // Every token is distinct and works against the frontend; a made-up one does not.
    assert_eq!(tokens.len(), 6, "{tokens:?}");
    for token in &tokens {
        assert_token_works(&url, token, "issued token").await;
    }
    assert_eq!(tools_list_status(&url, "tts_not-a-real-token").await, 401);
}

/// A refusal: `{"mcpServers":[]}`, exit 0, a reason on stderr, no token anywhere.
fn assert_refused_without_a_token(rt: &Runtime, what: &str, file: &str) {
    let out = rt.tutti(&[
        "session",
        "issue",
        "--workspace",
        "w",
        "--session",
        "s-acp",
        "--format",
        "acp",
        "--acp-initialize",
        file,
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{what}: exit 0 expected; stderr: {stderr}"
    );
    assert_eq!(
        parse_json(what, &stdout),
        json!({"mcpServers": []}),
        "{what}: {stdout}"
    );
    assert!(!stderr.trim().is_empty(), "{what}: no reason on stderr");
    assert!(
        !stdout.contains("tts_") && !stderr.contains("tts_"),
        "{what}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn acp_gate_binds_only_http_capable_agents_and_issues_no_token_otherwise() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    three_connectors(&mut rt);
    let url = rt.frontend_url().to_owned();
    let dir = rt.root().join("acp");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let write = |name: &str, content: &str| {
        let path = dir.join(name);
        std::fs::write(&path, content).unwrap_or_else(|e| panic!("{e}"));
        path.to_string_lossy().into_owned()
    };

    // A token for (w, s-acp) issued the ordinary way.
    let first = rt.issue_token("w", "s-acp");
    assert_token_works(&url, &first, "first token").await;

    // http: true binds (a new token for the same session, which revokes the first: so a
    // token issued by a refusal below would show up as the revocation of `bound`).
    let yes = write(
        "yes.json",
        r#"{"protocolVersion":1,"agentCapabilities":{"loadSession":true,"mcpCapabilities":{"http":true,"sse":false}}}"#,
    );
    let bound = acp_binding_token(&rt, &url, "s-acp", &["--acp-initialize", &yes]);
    assert_token_works(&url, &bound, "ACP-bound token").await;
    assert_eq!(
        tools_list_status(&url, &first).await,
        401,
        "issuing again for the same session revokes the previous token"
    );

    // Refusals: {"mcpServers":[]}, exit 0, a reason on stderr, no token.
    let no = write(
        "no.json",
        r#"{"protocolVersion":1,"agentCapabilities":{"mcpCapabilities":{"http":false,"sse":true}}}"#,
    );
    let missing_field = write(
        "missing.json",
        r#"{"protocolVersion":1,"agentCapabilities":{"loadSession":true}}"#,
    );
    let not_json = write("garbage.json", "this is not JSON {");
    let absent = dir
        .join("does-not-exist.json")
        .to_string_lossy()
        .into_owned();
    let a_directory = dir.to_string_lossy().into_owned();
    for (what, file) in [
        ("http: false", no),
        ("http missing", missing_field),
        ("not JSON", not_json),
        ("no such file", absent),
        ("a directory", a_directory),
    ] {
        assert_refused_without_a_token(&rt, what, &file);

        assert_token_works(&url, &bound, &format!("after the refusal ({what})")).await;
    }
}

/// The unrelated settings are intact, formatting and comments included.
fn assert_unrelated_settings_intact(
    doc: &DocumentMut,
    original: &DocumentMut,
    before: &str,
    written: &str,
) {
    assert_eq!(
        doc["model"].to_string(),
        original["model"].to_string(),
        "[model]:\n{written}"
    );
    assert_eq!(
        doc["mcp_servers"]["x"].to_string(),
        original["mcp_servers"]["x"].to_string(),
        "[mcp_servers.x]:\n{written}"
    );
    for line in before.lines().filter(|l| !l.is_empty()) {
        assert!(
            written.lines().any(|w| w == line),
            "line {line:?} lost:\n{written}"
        );
    }
    let top: BTreeSet<&str> = doc.iter().map(|(k, _)| k).collect();
    assert_eq!(top, BTreeSet::from(["model", "mcp_servers"]), "{written}");
    let servers: BTreeSet<&str> = doc["mcp_servers"]
        .as_table_like()
        .map(|t| t.iter().map(|(k, _)| k).collect())
        .unwrap_or_default();
    assert_eq!(servers, BTreeSet::from(["x", "connector"]), "{written}");
}

#[tokio::test(flavor = "multi_thread")]
async fn codex_home_merge_keeps_everything_else() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    three_connectors(&mut rt);
    let url = rt.frontend_url().to_owned();
    let home = rt.root().join("codex home");
    std::fs::create_dir_all(&home).unwrap_or_else(|e| panic!("{e}"));
    let config = home.join("config.toml");
    let before = "# my codex config\n\
                  [model]\n\
                  name = \"gpt-5\"   # keep me\n\
                  reasoning_effort = \"high\"\n\
                  \n\
                  [mcp_servers.x]\n\
                  command = \"npx\"\n\
                  args = [\"-y\", \"x-server\"]\n\
                  env = { X_LEVEL = \"2\" }\n";
    std::fs::write(&config, before).unwrap_or_else(|e| panic!("{e}"));
    let original: DocumentMut = before
        .parse()
        .unwrap_or_else(|e| panic!("the test's own TOML: {e}"));

    let home_arg = home.to_string_lossy().into_owned();
    let (out, _) = issue(&rt, "s-codex", "codex", &["--codex-home", &home_arg]);
    let printed: DocumentMut = out
        .parse()
        .unwrap_or_else(|e| panic!("--format codex is not TOML ({e}):\n{out}"));
    let printed_token = codex_table_token("printed", &printed, &url);

    let written = std::fs::read_to_string(&config).unwrap_or_else(|e| panic!("{e}"));
    let doc: DocumentMut = written
        .parse()
        .unwrap_or_else(|e| panic!("the merged config.toml is not TOML ({e}):\n{written}"));
    let token = codex_table_token("config.toml", &doc, &url);
    assert_eq!(
        token, printed_token,
        "the file and stdout carry one binding"
    );

    assert_unrelated_settings_intact(&doc, &original, before, &written);
    assert_token_works(&url, &token, "the merged token").await;

    // Merging again (a new token) replaces only the connector table.
    let (_, _) = issue(&rt, "s-codex", "codex", &["--codex-home", &home_arg]);
    let again = std::fs::read_to_string(&config).unwrap_or_else(|e| panic!("{e}"));
    let doc2: DocumentMut = again
        .parse()
        .unwrap_or_else(|e| panic!("re-merged config.toml is not TOML ({e}):\n{again}"));
    let token2 = codex_table_token("config.toml again", &doc2, &url);
    assert_ne!(token2, token);
    assert_eq!(
        again.matches("[mcp_servers.connector]").count(),
        1,
        "{again}"
    );
    assert_eq!(doc2["model"].to_string(), original["model"].to_string());
    assert_eq!(
        doc2["mcp_servers"]["x"].to_string(),
        original["mcp_servers"]["x"].to_string()
    );
    assert_token_works(&url, &token2, "the re-merged token").await;
    assert_eq!(
        tools_list_status(&url, &token).await,
        401,
        "old token revoked"
    );
}

// === removed commands ===

/// The subcommand names listed in a clap help text's `Commands:` section.
fn listed_subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| l.trim() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

#[test]
fn removed_connector_subcommands_do_not_exist() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let tutti = |args: &[&str]| {
        Command::new(bin("tutti"))
            .args(args)
            .env("TUTTI_STATE_DIR", tmp.path())
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run tutti: {e}"))
    };
    for args in [
        &["connector", "invoke", "tool", "echo"][..],
        &["connector", "invoke"],
        &["connector", "capabilities"],
        &["connector", "capabilities", "tool"],
        &["connector", "skills"],
        &["connector", "skills", "tool"],
        &["connector", "skill", "read", "tool", "tool-workflow"],
        &["connector", "skill"],
    ] {
        let out = tutti(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "`tutti {}` succeeded",
            args.join(" ")
        );
        assert!(
            stderr.contains("unrecognized subcommand"),
            "`tutti {}`: {stderr}",
            args.join(" ")
        );
        assert!(
            out.stdout.is_empty(),
            "`tutti {}` printed to stdout",
            args.join(" ")
        );
    }

    let removed = ["capabilities", "skills", "skill", "invoke"];
    let mut saw_available = false;
    for args in [
        &["--help"][..],
        &["-h"],
        &["help"],
        &["connector", "--help"],
        &["connector", "-h"],
        &["help", "connector"],
        &["connector", "help"],
    ] {
        let out = tutti(args);
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "`tutti {}` failed", args.join(" "));
        let listed = listed_subcommands(&help);
        assert!(
            !listed.is_empty(),
            "`tutti {}` lists no commands:\n{help}",
            args.join(" ")
        );
        saw_available |= listed.iter().any(|c| c == "available");
        for name in removed {
            assert!(
                !listed.iter().any(|c| c == name),
                "`tutti {}` lists {name}:\n{help}",
                args.join(" ")
            );
        }
        for word in ["invoke", "capabilities", "skill read"] {
            assert!(
                !help.contains(word),
                "`tutti {}` mentions {word}:\n{help}",
                args.join(" ")
            );
        }
    }
    assert!(saw_available, "the connector help lists `available`");
}

/// An upgrade whose new generation is refused at commit leaves the old generation live: the
/// shim keeps running the live release's entrypoint, `skillRoots` name the live release, and
/// status shows the live version (not the newest installed one).
#[test]
fn a_refused_upgrade_keeps_the_live_release_for_shims_skills_and_status() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    install_tool(&mut rt, "1.0.0", "v1");
    connect_tool(&rt);
    rt.wait_status("tool", "ready", READY);
    // The shim manager publishes on the commit event, asynchronously (SPEC: within 1 s).
    wait_until("the tool shim", RUN, || shim(&rt, "tool").exists());
    let live_dir = release_dir(&rt, "tool");
    let dir = tempfile::tempdir().expect("tempdir");
    let ran = run(
        shim_cmd(&shim(&rt, "tool"), &[], dir.path(), &dir.path().join("m1")),
        b"",
    );
    assert_eq!(report_of(&ran)["version"], json!("v1"));

    // v2's upstream offers a tool with a bad schema: its generation is refused.
    let mut v2 = tool_manifest("2.0.0");
    v2["mcp"]["args"] = json!(["--tools", "echo", "--bad-schema"]);
    let script = entrypoint("v2");
    rt.install_ok(
        &v2,
        &[
            ("bin/tool-cli", script.as_slice()),
            ("skills/tool-workflow/SKILL.md", TOOL_SKILL.as_bytes()),
        ],
    );
    let entry = rt.wait_connector("tool", READY, "the refusal of generation 2", |c| {
        c["lastError"]
            .as_str()
            .is_some_and(|e| e.contains("refused"))
    });
    assert_eq!(entry["status"], json!("ready"), "{entry}");
    assert_eq!(
        entry["version"],
        json!("1.0.0"),
        "status must show the live version: {entry}"
    );

    let ran = run(
        shim_cmd(&shim(&rt, "tool"), &[], dir.path(), &dir.path().join("m2")),
        b"",
    );
    assert_eq!(
        report_of(&ran)["version"],
        json!("v1"),
        "the shim must run the live release, not the refused one"
    );
    let (binding, _) = issue(&rt, "refused", "runtime", &[]);
    let binding = parse_json("runtime binding", &binding);
    assert_eq!(
        binding["skillRoots"],
        json!([rt.state_dir().join("skills").to_string_lossy()])
    );
    let published = rt.state_dir().join("skills/tool-workflow/SKILL.md");
    let live = live_dir.join("skills/tool-workflow/SKILL.md");
    wait_until(
        "the live release's skill under the skills root",
        RUN,
        || std::fs::read(&published).ok() == std::fs::read(&live).ok(),
    );
    never_during(
        "the skills root showing the refused release",
        Duration::from_millis(500),
        || std::fs::read(&published).ok() != std::fs::read(&live).ok(),
    );
}

/// A connector that declares no secrets comes back after `disconnect` with a bare `connect`.
#[test]
fn a_connector_without_secrets_reconnects_with_a_bare_connect() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    install_notes(&mut rt);
    rt.wait_status("notes", "ready", READY);
    rt.tutti_ok(&["connector", "disconnect", "notes"]);
    rt.wait_status("notes", "auth_required", READY);
    wait_until("the notes shim to go", RUN, || !shim(&rt, "notes").exists());
    rt.tutti_ok(&["connector", "connect", "notes"]);
    rt.wait_status("notes", "ready", READY);
    wait_until("the notes shim to return", RUN, || {
        shim(&rt, "notes").exists()
    });
}

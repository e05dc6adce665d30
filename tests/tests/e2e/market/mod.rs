//! The connector market end to end (SPEC §17) over the real binaries: `tutti registry
//! list|add|remove`, `tutti connector search` against `tutti-registry-fixture`, and
//! `tutti connector install registry:…` / `./server.json` of a remote (the HTTP fixture) that
//! comes up ready and answers through the frontend; every refusal is one line and leaves
//! nothing behind, and no secret value shows up in the state, the logs or the confirmation.
#![cfg(unix)]

mod doctor;
mod import;
mod lock;
mod packages;
mod refusals;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use tutti_tests::oauth::OAuthServer;
use tutti_tests::{FixtureHttp, Mcp, Runtime, RuntimeOptions, bin, free_port, repo_root};

const READY: Duration = Duration::from_secs(30);

/// `tutti-registry-fixture` over `tests/fixtures/registry`, killed on drop.
pub(crate) struct Registry {
    child: Child,
    url: String,
}

impl Registry {
    fn start(remote_url: &str) -> Registry {
        let documents = repo_root().join("tests/fixtures/registry");
        let mut child = Command::new(bin("tutti-registry-fixture"))
            .arg("--documents")
            .arg(documents)
            .args(["--remote-url", remote_url])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start tutti-registry-fixture: {e}"));
        let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let port = line.trim().strip_prefix("listening ").unwrap_or_else(|| {
            panic!("tutti-registry-fixture printed {line:?}, not `listening <port>`")
        });
        let url = format!("http://127.0.0.1:{port}");
        Registry { child, url }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A runtime whose only registry is the fixture (`TUTTI_REGISTRIES`), a remote for it.
pub(crate) fn market() -> (Runtime, Registry, FixtureHttp) {
    let remote = FixtureHttp::start(&["--tools", "echo"]);
    let registry = Registry::start(&remote.url);
    let rt = Runtime::start(RuntimeOptions {
        env: vec![("TUTTI_REGISTRIES".into(), format!("fix={}", registry.url))],
        ..Default::default()
    });
    (rt, registry, remote)
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

/// The refusal of a command: exit non-zero, exactly one stderr line, returned.
fn one_line_failure(out: &Output, what: &str) -> String {
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{what} succeeded: {stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{what}: not one line: {stderr}");
    lines[0].to_owned()
}

/// Nothing of a market install is left: no connector, no release, no staged folder.
fn nothing_left(rt: &Runtime) {
    let available = rt.tutti_ok(&["connector", "available", "--json"]);
    let v: Value = serde_json::from_str(&available).unwrap_or_else(|e| panic!("{e}: {available}"));
    assert_eq!(v["connectors"], json!([]), "{available}");
    for dir in ["releases", "staging"] {
        let left: Vec<_> = std::fs::read_dir(rt.state_dir().join(dir))
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{dir}/ holds {left:?}");
    }
}

#[test]
fn search_prints_a_table_and_a_json_array_across_pages() {
    let (rt, _registry, _remote) = market();
    let json = rt.tutti_ok(&["connector", "search", "remote", "--json"]);
    let hits: Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
    let names: Vec<&str> = hits
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|h| h["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "io.example/fixture-remote",
            "io.example/gone-remote",
            "io.example/old-remote",
            "io.example/port-remote"
        ],
        "the latest version of each, over pages of 2: {json}"
    );
    assert_eq!(
        hits[0],
        json!({"name": "io.example/fixture-remote", "version": "1.1.0",
            "description": "The test fixture over streamable HTTP", "transport": "http",
            "packages": [], "registry": "fix", "status": "active"})
    );
    let npm = rt.tutti_ok(&[
        "connector",
        "search",
        "everything",
        "--registry",
        "fix",
        "--json",
    ]);
    let npm: Value = serde_json::from_str(&npm).unwrap_or_else(|e| panic!("{e}: {npm}"));
    assert_eq!(npm[0]["packages"], json!(["npm"]));
    assert_eq!(npm[0]["transport"], "stdio");
    assert_eq!(npm[0]["version"], "2026.8.31");

    let table = rt.tutti_ok(&["connector", "search", "time"]);
    let mut lines = table.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "VERSION", "TRANSPORT", "PACKAGES", "DESCRIPTION"]
    );
    let row = lines.next().unwrap_or_default();
    for cell in [
        "io.github.modelcontextprotocol/mcp-server-time",
        "2026.10.19",
        "stdio",
        "pypi",
    ] {
        assert!(row.contains(cell), "{cell} missing from {row:?}");
    }
    let unknown = rt.tutti(&["connector", "search", "x", "--registry", "nope"]);
    let line = one_line_failure(&unknown, "search of an unknown registry");
    assert!(line.contains("no registry named \"nope\""), "{line}");
}

#[test]
fn registries_are_added_listed_and_removed_in_the_state() {
    let rt = Runtime::start(RuntimeOptions::default());
    let list = rt.tutti_ok(&["registry", "list", "--json"]);
    assert_eq!(
        serde_json::from_str::<Value>(&list).ok(),
        Some(json!([{"name": "official", "url": "https://registry.modelcontextprotocol.io"}]))
    );
    // Never the real registry from a test: it goes first.
    rt.tutti_ok(&["registry", "remove", "official"]);
    let dead = format!("http://127.0.0.1:{}", free_port());
    rt.tutti_ok(&["registry", "add", "dead", &format!("{dead}/")]);
    let refused = rt.tutti(&["registry", "add", "far", "http://registry.example"]);
    let line = one_line_failure(&refused, "a plain-http registry off loopback");
    assert!(line.contains("must be https://"), "{line}");
    let taken = rt.tutti(&["registry", "add", "dead", "https://r.example"]);
    assert!(one_line_failure(&taken, "a taken name").contains("exists already"));

    let file = rt.state_dir().join("registries.json");
    let saved: Value = serde_json::from_slice(&std::fs::read(&file).unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        saved,
        json!({"registries": [{"name": "dead", "url": dead}]})
    );
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&file)
        .map(|m| m.permissions().mode() & 0o777)
        .ok();
    assert_eq!(mode, Some(0o600));
    let table = rt.tutti_ok(&["registry", "list"]);
    assert!(table.contains("dead") && table.contains(&dead), "{table}");

    let search = rt.tutti(&["connector", "search", "x"]);
    let line = one_line_failure(&search, "search of an unreachable registry");
    assert!(
        line.contains(&format!("registry {dead} is unreachable")),
        "{line}"
    );
    let install = rt.tutti(&["connector", "install", "registry:io.example/x", "--yes"]);
    let line = one_line_failure(&install, "install from an unreachable registry");
    assert!(
        line.contains(&format!("registry {dead} is unreachable")),
        "{line}"
    );
    nothing_left(&rt);

    rt.tutti_ok(&["registry", "remove", "dead"]);
    assert_eq!(rt.tutti_ok(&["registry", "list", "--json"]).trim(), "[]");
    let gone = rt.tutti(&["registry", "remove", "dead"]);
    assert!(one_line_failure(&gone, "removing twice").contains("no registry named"));
}

/// One message of the frontend's `echo` through the installed remote.
async fn echo_through_frontend(rt: &Runtime, key: &str) -> String {
    let token = rt.issue_token("ws", "market");
    let mcp = Mcp::legacy(rt.frontend_url(), &token);
    mcp.initialize().await;
    let result = mcp
        .call_tool_ok(
            &format!("{key}_echo"),
            json!({"message": "from the market"}),
        )
        .await;
    tutti_tests::result_texts(&result)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_registry_remote_installs_and_answers_through_the_frontend() {
    let (rt, _registry, _remote) = market();
    let out = rt.tutti(&[
        "connector",
        "install",
        "registry:io.example/fixture-remote",
        "--yes",
    ]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    for line in [
        "Install connector fixture-remote 1.1.0",
        "  source: registry fix: io.example/fixture-remote",
        "  resolved version: 1.1.0",
        "  artefacts: 0 (0 bytes)",
        "  install scripts: refused",
    ] {
        assert!(
            stderr.contains(line),
            "{line:?} missing from the confirmation:\n{stderr}"
        );
    }
    rt.wait_status("fixture-remote", "ready", READY);
    assert!(
        echo_through_frontend(&rt, "fixture-remote")
            .await
            .contains("from the market")
    );

    // An older version by name, with progress as JSON lines.
    let args = [
        "connector",
        "install",
        "registry:io.example/fixture-remote@1.0.0",
        "--yes",
        "--json",
    ];
    let stdout = rt.tutti_ok(&args);
    let events: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(events.len(), 2, "{stdout}");
    assert_eq!(events[0]["event"], "staged");
    assert_eq!(events[0]["version"], "1.0.0");
    assert_eq!(events[1]["key"], "fixture-remote");
    assert_eq!(events[1]["version"], "1.0.0");
    let staged: Vec<_> = std::fs::read_dir(rt.state_dir().join("staging"))
        .map(|d| d.flatten().collect())
        .unwrap_or_default();
    assert!(
        staged.is_empty(),
        "the staged release stays after the install"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_json_file_installs_with_its_secret_header_given_later() {
    let (rt, _registry, remote) = market();
    let doc = json!({"name": "io.example/Keyed Remote", "description": "A keyed remote", "version": "3.0.0",
        "remotes": [{"type": "streamable-http", "url": remote.url,
            "headers": [{"name": "X-Api-Key", "isSecret": true, "isRequired": true}]}]});
    let path = write_document(&rt, &doc);
    let secret = "market-secret-value-4711";
    let leaked = rt.tutti(&[
        "connector",
        "install",
        &path,
        "--set",
        &format!("X-Api-Key={secret}"),
        "--yes",
    ]);
    let line = one_line_failure(&leaked, "--set of a secret");
    assert!(
        line.contains("is a secret") && !line.contains(secret),
        "{line}"
    );

    let out = rt.tutti(&["connector", "install", &path, "--key", "keyed", "--yes"]);
    let confirmation = text(&out.stderr);
    assert!(out.status.success(), "{confirmation}");
    assert!(
        confirmation.contains("secrets asked for after the install: X_API_KEY"),
        "{confirmation}"
    );
    assert!(
        confirmation.contains(&format!("source: server.json {path}")),
        "{confirmation}"
    );
    rt.wait_status("keyed", "auth_required", READY);
    rt.connect_from_env("keyed", "X_API_KEY", secret);
    rt.wait_status("keyed", "ready", READY);
    assert!(
        echo_through_frontend(&rt, "keyed")
            .await
            .contains("from the market")
    );
    let mut files = Vec::new();
    let skip = [rt.state_dir().join("secrets")];
    tutti_tests::secret_scan::files_under(rt.state_dir(), &skip, &mut files);
    let leaks = tutti_tests::secret_scan::file_leaks(&[secret], &files);
    assert!(leaks.is_empty(), "the secret value leaked: {leaks:?}");
    assert!(!confirmation.contains(secret));
}

/// A `server.json` in the test's folder; its absolute path.
fn write_document(rt: &Runtime, doc: &Value) -> String {
    let path = rt.root().join("server.json");
    std::fs::write(&path, doc.to_string()).unwrap_or_else(|e| panic!("{e}"));
    path.display().to_string()
}

#[test]
fn a_remote_that_asks_for_a_login_installs_as_an_oauth_connector() {
    let (rt, _registry, remote) = market();
    let server = OAuthServer::start(&remote.url, &[], &[], &rt.root().join("provider.stderr"));
    let doc = json!({"name": "io.example/guarded", "description": "Behind a login",
        "version": "1.0.0", "remotes": [{"type": "streamable-http", "url": server.mcp_url}]});
    let path = write_document(&rt, &doc);
    let out = rt.tutti(&["connector", "install", &path, "--yes"]);
    let confirmation = text(&out.stderr);
    assert!(out.status.success(), "{confirmation}");
    assert!(
        confirmation.contains("login: OAuth; a browser login follows"),
        "the 401 with protected-resource metadata makes it auth.kind oauth:\n{confirmation}"
    );
    rt.wait_status("guarded", "auth_required", READY);
}

#[test]
fn market_failures_are_one_line_and_leave_nothing_behind() {
    let (rt, _registry, _remote) = market();
    let cases = [
        (
            "registry:io.example/nope",
            "no server \"io.example/nope\" in the registries (fix); find its name with `tutti connector search WORDS`",
        ),
        (
            "registry:io.example/fixture-remote@9.9.9",
            "server \"io.example/fixture-remote\" has no version \"9.9.9\" in registry fix",
        ),
        (
            "registry:io.example/rusty",
            "server.json: package type \"cargo\" is not supported (npm, pypi, mcpb and oci are)",
        ),
        (
            "registry:io.example/port-remote",
            "server.json: the remote's URL (variable port) needs a value: give it with --set port=…",
        ),
        (
            "registry:io.example/gone-remote",
            "server \"io.example/gone-remote\" 2.0.0 is deleted in its registry and cannot be installed",
        ),
    ];
    for (source, expected) in cases {
        let out = rt.tutti(&["connector", "install", source, "--yes"]);
        let line = one_line_failure(&out, source);
        assert!(
            line.starts_with("tutti: ") && line.contains(expected),
            "{source}: {line}"
        );
        nothing_left(&rt);
    }
}

#[test]
fn a_deprecated_server_is_warned_and_installs_only_when_confirmed() {
    let (rt, _registry, _remote) = market();
    let source = "registry:io.example/old-remote";
    let out = rt.tutti(&["connector", "install", source]);
    let stderr = text(&out.stderr);
    assert!(
        !out.status.success(),
        "installed without a confirmation: {stderr}"
    );
    assert!(
        stderr.contains("warning: io.example/old-remote 0.9.0 is deprecated in registry fix"),
        "{stderr}"
    );
    assert!(stderr.contains("confirmation needed"), "{stderr}");
    nothing_left(&rt);

    let out = rt.tutti(&["connector", "install", source, "--yes"]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("is deprecated"), "{stderr}");
    rt.wait_status("old-remote", "ready", READY);
}

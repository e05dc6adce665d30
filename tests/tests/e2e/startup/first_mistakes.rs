//! The mistakes a newcomer makes first each get the error that leads to the fix:
//! a command line in `mcp.command`, an upstream that dies before `initialize` (status quotes
//! its most telling stderr line and points at `tutti logs KEY`), `install --probe` of an
//! upstream that cannot start, and a workspace path that does not exist.

use std::time::Duration;

use serde_json::json;
use tutti_tests::{Runtime, RuntimeOptions};

/// An upstream that fails as `npx` does for a misspelled package: npm's lines on stderr,
/// the cause in the middle and "A complete log …" last, then exit 1.
const NPM_404: &[u8] = b"#!/bin/sh\n\
echo 'npm error code E404' >&2\n\
echo 'npm error 404 Not Found - GET https://registry.npmjs.org/@modelcontextprotocol%2fserver-memoryy - Not found' >&2\n\
echo 'npm error 404' >&2\n\
echo 'npm error A complete log of this run can be found in: /root/.npm/_logs/debug-0.log' >&2\n\
exit 1\n";

fn failing_release(key: &str) -> serde_json::Value {
    json!({
        "key": key, "name": "Misspelled", "description": "an npx package that does not exist",
        "version": "1.0.0",
        "mcp": {"transport": "stdio", "command": "${release}/npx-404.sh"},
    })
}

#[test]
fn a_command_line_in_command_is_refused_with_the_fields_to_write() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let manifest = json!({
        "key": "memory", "name": "Memory", "description": "d", "version": "1",
        "mcp": {"transport": "stdio", "command": "npx -y @modelcontextprotocol/server-memory"},
    });
    let out = rt.install_dir(&manifest, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            r#"put the program in "command" and each argument in "args": "command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"]"#
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("${release}/npx"), "{stderr}");
}

#[test]
fn an_upstream_dying_before_initialize_shows_its_telling_stderr_line_and_where_the_rest_is() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    rt.install_ok(&failing_release("misspelled"), &[("npx-404.sh", NPM_404)]);
    let entry = rt.wait_connector("misspelled", Duration::from_secs(20), "an exit", |c| {
        c["lastError"]
            .as_str()
            .is_some_and(|e| e.contains("stderr"))
    });
    let error = entry["lastError"].as_str().unwrap_or_default();
    assert!(
        error.contains("404 Not Found - GET https://registry.npmjs.org/"),
        "{error}"
    );
    assert!(!error.contains("A complete log"), "{error}");
    assert!(
        error.contains("`tutti logs misspelled` has the rest"),
        "{error}"
    );
}

#[test]
fn install_with_probe_installs_nothing_when_the_upstream_does_not_start() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let dir = rt.write_release(&failing_release("probed"), &[("npx-404.sh", NPM_404)]);
    let dir = dir.to_string_lossy().into_owned();
    let out = rt.tutti(&["connector", "install", &dir, "--yes", "--probe"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("probed not installed: the probe found"),
        "{stderr}"
    );
    assert!(stderr.contains("404 Not Found"), "{stderr}");
    assert!(rt.connector_status("probed").is_none(), "installed anyway");

    let good = rt.private_fixture_connector("good", &["--tools", "echo"]);
    let dir = rt.write_release(&good, &[]);
    let dir = dir.to_string_lossy().into_owned();
    let out = rt.tutti(&["connector", "install", &dir, "--yes", "--probe"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("good_echo"),
        "the probe's tools are shown: {stderr}"
    );
}

#[test]
fn a_workspace_that_looks_like_a_missing_path_is_accepted_with_a_note() {
    let rt = Runtime::start(RuntimeOptions::default());
    let out = rt.tutti(&[
        "session",
        "issue",
        "--workspace",
        "./no-such-project",
        "--session",
        "s",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("workspace ./no-such-project looks like a path but does not exist"),
        "{stderr}"
    );
    let named = rt.tutti(&[
        "session",
        "issue",
        "--workspace",
        "myproj",
        "--session",
        "s",
    ]);
    assert!(named.status.success());
    assert!(String::from_utf8_lossy(&named.stderr).trim().is_empty());
}

//! Issue 19 (hardening), the install-time findings: F4 the launch allowlist judged by real
//! paths, F5 injection variables in `mcp.env` and secret names, F8 manifest and skill files
//! opened without following links and with size caps, F9 field size limits, F12 escapes of
//! format and control characters in the install confirmation, `status` and `available`.
//! Each test runs the attack of the security review against the real runtime.
#![cfg(unix)]

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use serde_json::{Value, json};
use tutti_tests::{Runtime, RuntimeOptions, fixture_bin, fixture_connector};

const READY: Duration = Duration::from_secs(20);

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `tutti connector install DIR --yes EXTRA…`.
fn install(rt: &Runtime, dir: &Path, extra: &[&str]) -> Output {
    let dir = dir.to_string_lossy().into_owned();
    let mut args = vec!["connector", "install", dir.as_str(), "--yes"];
    args.extend_from_slice(extra);
    rt.tutti(&args)
}

/// Asserts `out` is a refusal naming `needles`, and that nothing of `key` was installed.
fn assert_refused(rt: &Runtime, out: &Output, key: &str, needles: &[&str]) {
    let err = stderr(out);
    assert!(
        !out.status.success(),
        "the install must be refused\nstderr: {err}"
    );
    for needle in needles {
        assert!(err.contains(needle), "missing {needle:?} in:\n{err}");
    }
    assert!(
        !rt.state_dir().join("releases").join(key).exists(),
        "a refused install wrote a release copy"
    );
    assert!(
        rt.connector_status(key).is_none(),
        "a refused install registered {key}"
    );
}

fn script_running_the_fixture() -> String {
    format!("#!/bin/sh\nexec {} --tools echo\n", fixture_bin().display())
}

fn registry(rt: &Runtime) -> Value {
    let text = std::fs::read(rt.state_dir().join("registry.json")).expect("registry.json");
    serde_json::from_slice(&text).expect("registry JSON")
}

fn audit_records(rt: &Runtime, kind: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(rt.state_dir().join("logs/audit.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["event"] == kind)
        .collect()
}

// === F4: the launch allowlist ===

#[test]
fn dot_dot_out_of_the_release_is_judged_where_it_really_leads() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    // Enough `..` to reach `/` from any release copy, then /bin/sh: "inside the release" by
    // its prefix only.
    let command = format!("${{release}}/{}bin/sh", "../".repeat(40));
    let manifest = json!({
        "key": "dotdot", "name": "Dot dot", "description": "escapes its release",
        "version": "1.0.0",
        "mcp": {"transport": "stdio", "command": command, "args": ["run.sh"]},
    });
    let out = rt.install_dir(
        &manifest,
        &[("run.sh", script_running_the_fixture().as_bytes())],
    );
    assert_refused(
        &rt,
        &out,
        "dotdot",
        &["connector.json: mcp.command: ", "launch allowlist"],
    );
}

#[test]
fn a_path_into_the_source_folder_never_runs() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let script = script_running_the_fixture();
    let placeholder = json!({"key": "srcpath"});
    let dir = rt.write_release(&placeholder, &[("bin/server", script.as_bytes())]);
    // The source file by its absolute path: edited after install, the edit would run.
    let manifest = json!({
        "key": "srcpath", "name": "Source path", "description": "runs its source folder",
        "version": "1.0.0",
        "mcp": {"transport": "stdio", "command": dir.join("bin/server").to_string_lossy(), "args": []},
    });
    std::fs::write(dir.join("connector.json"), manifest.to_string()).expect("write manifest");
    let out = install(&rt, &dir, &[]);
    assert_refused(
        &rt,
        &out,
        "srcpath",
        &["launch allowlist", "${release}/bin/server"],
    );
    // Not even an explicit allowance of that file makes the source folder run.
    let by_path = dir.join("bin/server").to_string_lossy().into_owned();
    let out = install(&rt, &dir, &["--allow-command", &by_path]);
    assert_refused(&rt, &out, "srcpath", &["launch allowlist"]);

    // Written as `${release}/bin/server` it installs and runs from the hashed copy.
    let manifest = json!({
        "key": "srcpath", "name": "Source path", "description": "runs its copy",
        "version": "1.0.0",
        "mcp": {"transport": "stdio", "command": "${release}/bin/server", "args": []},
    });
    std::fs::write(dir.join("connector.json"), manifest.to_string()).expect("write manifest");
    let out = install(&rt, &dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let copy = rt.state_dir().join("releases/srcpath");
    assert!(
        stderr(&out).contains(&copy.to_string_lossy().into_owned()),
        "the confirmation must show the copy's path: {}",
        stderr(&out)
    );
    rt.wait_status("srcpath", "ready", READY);
}

#[test]
fn a_file_merely_named_like_an_allowlisted_program_is_not_allowlisted() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let evil = rt.root().join("evil");
    std::fs::create_dir_all(&evil).expect("mkdir");
    let node = evil.join("node");
    std::fs::write(&node, script_running_the_fixture()).expect("write");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let manifest = json!({
        "key": "fakenode", "name": "Fake node", "description": "a program named node",
        "version": "1.0.0",
        "mcp": {"transport": "stdio", "command": node.to_string_lossy(), "args": []},
    });
    let out = rt.install_dir(&manifest, &[]);
    assert_refused(
        &rt,
        &out,
        "fakenode",
        &["launch allowlist", "\"node\" stands only for"],
    );
}

#[test]
fn allowlisted_programs_still_install_and_run() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    // A bare name, allowed for this install, found on PATH and run by that path.
    let manifest = json!({
        "key": "baresh", "name": "Bare sh", "description": "sh from PATH",
        "version": "1.0.0",
        "mcp": {"transport": "stdio", "command": "sh", "args": ["run.sh"]},
    });
    let dir = rt.write_release(
        &manifest,
        &[("run.sh", script_running_the_fixture().as_bytes())],
    );
    let refused = install(&rt, &dir, &[]);
    assert_refused(&rt, &refused, "baresh", &["--allow-command sh"]);
    let out = install(&rt, &dir, &["--allow-command", "sh"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // The shipped fixture (runtime dir) and an owner-allowed file by path.
    rt.install_ok(&fixture_connector("shipped", &["--tools", "echo"]), &[]);
    let private = rt.private_fixture_connector("private", &["--tools", "echo"]);
    rt.install_ok(&private, &[]);
    for key in ["baresh", "shipped", "private"] {
        rt.wait_status(key, "ready", READY);
    }
}

// === F5: injection variables ===

#[test]
fn an_injection_variable_in_env_needs_allow_env_and_is_shown() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let mut manifest = fixture_connector("pyenv", &["--tools", "env"]);
    manifest["mcp"]["env"] = json!({"PYTHONPATH": "/tmp/elsewhere", "LOG_LEVEL": "warn"});
    let dir = rt.write_release(&manifest, &[]);
    let out = install(&rt, &dir, &[]);
    assert_refused(
        &rt,
        &out,
        "pyenv",
        &["mcp.env.PYTHONPATH", "--allow-env PYTHONPATH"],
    );

    let out = install(&rt, &dir, &["--allow-env", "PYTHONPATH"]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    for shown in [
        "env:  LOG_LEVEL=warn",
        "env:  PYTHONPATH=/tmp/elsewhere",
        "allowed injection variables: PYTHONPATH",
    ] {
        assert!(err.contains(shown), "the confirmation lacks {shown:?}:\n{err}");
    }
    assert_eq!(
        registry(&rt)["connectors"]["pyenv"]["allowEnv"],
        json!(["PYTHONPATH"])
    );
    rt.wait_status("pyenv", "ready", READY);
    // The audit writer is asynchronous: its install record is there by the time the worker
    // was launched and committed, but give it a moment.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let installs = audit_records(&rt, "install");
        if installs
            .iter()
            .any(|r| r["connector"] == "pyenv" && r["allowEnv"] == json!(["PYTHONPATH"]))
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the audit install record must carry allowEnv: {installs:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_secret_named_like_a_loader_variable_is_refused() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let mut manifest = fixture_connector("preload", &["--tools", "echo"]);
    manifest["mcp"]["secrets"] = json!(["API_TOKEN", "LD_PRELOAD"]);
    let out = rt.install_dir(&manifest, &[]);
    assert_refused(
        &rt,
        &out,
        "preload",
        &["mcp.secrets[1]", "LD_PRELOAD", "--allow-env LD_PRELOAD"],
    );
    let mut manifest = fixture_connector("clipath", &["--tools", "echo"]);
    manifest["cli"] = json!({"entrypoint": "run.sh", "secrets": ["PATH"]});
    let out = rt.install_dir(
        &manifest,
        &[("run.sh", script_running_the_fixture().as_bytes())],
    );
    assert_refused(&rt, &out, "clipath", &["cli.secrets[0]", "--allow-env PATH"]);
}

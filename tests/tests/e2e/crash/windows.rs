//! Each state a kill between two writes of one command leaves, built on a stopped runtime,
//! and what the next start makes of it: the uninstall and the disconnect finished (their
//! secrets and copies deleted), a connect's stored secret counted, the temp files of atomic
//! writes removed, a torn audit record cut off, a disconnected OAuth login revoked at its
//! server. The random loop (`mod.rs`) reaches these
//! windows by real kills, but not on every run; here each is certain.

use std::path::Path;

use serde_json::{Value, json};
use tutti_tests::oauth::oauth_connector;
use tutti_tests::{Runtime, RuntimeOptions};

use super::model::SECRET;
use super::wait_listening;
use crate::oauth::{Remote, audit_events, log_in};

fn cli_connector(key: &str) -> Value {
    json!({
        "key": key,
        "name": format!("Window {key}"),
        "description": "A CLI connector with one secret",
        "version": "1.0.0",
        "cli": {"entrypoint": "bin/tool", "secrets": [SECRET]},
    })
}

fn value(key: &str) -> String {
    format!("window-secret-of-{key}")
}

/// Rewrites `registry.json` as `edit` says (on a stopped runtime).
fn edit_registry(state: &Path, edit: impl FnOnce(&mut Value)) {
    let path = state.join("registry.json");
    let text = std::fs::read(&path).unwrap_or_else(|e| panic!("registry.json: {e}"));
    let mut registry: Value = serde_json::from_slice(&text).unwrap_or_else(|e| panic!("{e}"));
    edit(&mut registry);
    let text = serde_json::to_vec_pretty(&registry).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("registry.json: {e}"));
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// Leaves, for each of four connectors, what a kill between two writes of one command
/// leaves; returns the temp files and worker sockets the kills left.
fn cut_short(state: &Path) -> Vec<std::path::PathBuf> {
    // `un`: uninstall killed after the registry forgot it (naming it in `uninstalling`),
    // before its secrets and release copies were deleted (the copies half deleted).
    edit_registry(state, |r| {
        if let Some(c) = r["connectors"].as_object_mut() {
            c.remove("un");
        }
        r["uninstalling"] = json!(["un"]);
    });
    let un = state.join("releases/un");
    for copy in std::fs::read_dir(&un).into_iter().flatten().flatten() {
        let _ = std::fs::remove_file(copy.path().join("connector.json"));
    }
    // `dis`: disconnect killed after the registry write, before the secrets were deleted.
    // `con`: connect killed after the secret was stored, before the registry write.
    edit_registry(state, |r| {
        r["connectors"]["dis"]["connected"] = json!(false);
        r["connectors"]["dis"]["auth"] = json!("required");
        r["connectors"]["con"]["auth"] = json!("required");
    });
    // Kills between an atomic write's temp file and its rename; one held a secret.
    let temps = vec![
        state.join("secrets/.con.json.tutti-4242.tmp"),
        state.join(".registry.json.tutti-4242.tmp"),
        state.join("run/.frontend.port.tutti-4242.tmp"),
    ];
    for t in &temps {
        write(t, &format!(r#"{{"{SECRET}":"half-written-secret"}}"#));
    }
    // A worker killed with the kernel leaves its sockets, the frame data plane's too.
    let mut temps = temps;
    for name in ["run/w-7fff0.sock", "run/d-7fff0.sock"] {
        write(&state.join(name), "");
        temps.push(state.join(name));
    }
    // What the registry does not name stays (a registry moved away to be fixed, say).
    std::fs::create_dir_all(state.join("releases/moved/0123")).unwrap_or_else(|e| panic!("{e}"));
    write(&state.join("secrets/moved.json"), r#"{"TOKEN":"kept"}"#);
    // A kill in the middle of a batch of audit records.
    let audit = state.join("logs/audit.jsonl");
    let mut text = std::fs::read_to_string(&audit).unwrap_or_default();
    text.push_str(r#"{"connector":"un","event":"unin"#);
    write(&audit, &text);
    temps
}

fn status_of(rt: &Runtime, key: &str) -> String {
    rt.connector_status(key)
        .map(|c| c["status"].as_str().unwrap_or("").to_owned())
        .unwrap_or_else(|| "not listed".into())
}

/// What the start after [`cut_short`] must have done; one line per problem.
fn problems_after_start(rt: &mut Runtime, temps: &[std::path::PathBuf]) -> Vec<String> {
    let state = rt.state_dir().to_path_buf();
    let mut problems = Vec::new();
    let mut expect = |ok: bool, what: &str| {
        if !ok {
            problems.push(what.to_owned());
        }
    };
    expect(
        !state.join("secrets/un.json").exists(),
        "the uninstalled un kept its secrets",
    );
    expect(
        !state.join("releases/un").exists(),
        "the uninstalled un kept its copies",
    );
    expect(
        !state.join("secrets/dis.json").exists(),
        "the disconnected dis kept its secrets",
    );
    expect(
        state.join("secrets/moved.json").is_file() && state.join("releases/moved/0123").is_dir(),
        "what the registry does not name was deleted",
    );
    expect(
        status_of(rt, "con") != "auth_required",
        "con's stored secret is not counted",
    );
    for t in temps {
        expect(!t.exists(), &format!("{} left", t.display()));
    }
    // A connector installed again under the uninstalled key starts without credentials.
    rt.install_ok(
        &cli_connector("un"),
        &[("bin/tool", b"#!/bin/sh\necho un\n")],
    );
    let un = status_of(rt, "un");
    expect(
        un == "auth_required",
        &format!("un installed again is {un}, not auth_required"),
    );
    rt.stop();
    let audit = std::fs::read_to_string(state.join("logs/audit.jsonl")).unwrap_or_default();
    for line in audit.lines() {
        if serde_json::from_str::<Value>(line).is_err() {
            problems.push(format!("audit line does not parse: {line}"));
        }
    }
    problems
}

#[test]
fn every_state_a_kill_between_two_writes_leaves_is_finished_at_start() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    for key in ["un", "dis", "con", "kept"] {
        rt.install_ok(
            &cli_connector(key),
            &[("bin/tool", b"#!/bin/sh\necho tool\n")],
        );
        rt.connect_from_env(key, SECRET, &value(key));
    }
    rt.stop();
    let temps = cut_short(rt.state_dir());
    rt.restart();
    let kept = rt.state_dir().join("secrets/kept.json");
    let kept_value = std::fs::read_to_string(&kept).unwrap_or_default();
    let problems = problems_after_start(&mut rt, &temps);
    assert!(
        problems.is_empty(),
        "after the start:\n  {}\nkernel log:\n{}",
        problems.join("\n  "),
        rt.log_tail("kernel.log", 30)
    );
    // The connector no command touched kept its secret.
    assert!(kept_value.contains(&value("kept")), "kept lost its secret");
}

/// A disconnect killed after its registry write, before it revoked the OAuth login and
/// deleted it: the next start deletes the login and revokes it at the server.
#[tokio::test(flavor = "multi_thread")]
async fn a_login_a_cut_short_disconnect_left_is_revoked_and_deleted_at_start() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let remote = Remote::start(&rt, &["--ttl", "300"]);
    let manifest = oauth_connector("remote", &remote.server.mcp_url, json!({}));
    rt.install_ok(&manifest, &[]);
    let (_, _, (ok, stdout, stderr)) = log_in(&rt, "remote").await;
    assert!(ok, "the login failed: {stdout}{stderr}");
    let secrets = rt.state_dir().join("secrets/remote.json");
    assert!(secrets.is_file(), "no login stored");
    tokio::task::block_in_place(|| rt.stop());
    edit_registry(rt.state_dir(), |r| {
        r["connectors"]["remote"]["connected"] = json!(false);
        r["connectors"]["remote"]["auth"] = json!("required");
    });
    tokio::task::block_in_place(|| rt.restart());
    assert!(
        !secrets.exists(),
        "the disconnected connector kept its login"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while audit_events(&rt, "oauth_revoke", "remote").is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the login was not revoked after the start\n{}",
            rt.diagnostics()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let revoked = audit_events(&rt, "oauth_revoke", "remote");
    assert_eq!(revoked[0]["outcome"], "revoked", "{revoked:?}");
    let seen = remote.server.seen("revocation").await;
    assert!(
        seen.len() == 2 && seen.iter().all(|e| e["status"] == 200),
        "the access and refresh tokens were not both revoked: {seen:?}"
    );
    assert_eq!(status_of(&rt, "remote"), "auth_required");
}

/// A kernel killed while it started a child leaves its locked `run/kernel.lock` descriptor in
/// that child until the child's exec or death: the next kernel, started at once, waits for it
/// (the file names a kernel that is gone) instead of refusing to run. The random loop
/// reaches this window seldom; here it is certain.
#[test]
fn a_lock_still_held_for_a_killed_kernel_is_waited_for() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    rt.kill();
    // The file names the killed kernel; the test holds the lock as its child would.
    let path = rt.state_dir().join("run/kernel.lock");
    let holder = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    holder
        .try_lock()
        .unwrap_or_else(|e| panic!("the killed kernel's lock is not free: {e}"));
    rt.restart_unwaited();
    // The new kernel has opened the lock file: it has met the held lock (or is past it).
    let kernel = rt.pid().unwrap_or_else(|| panic!("no kernel pid"));
    let path = std::fs::canonicalize(&path).unwrap_or(path);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !holds_open(kernel, &path) && rt.exited().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "the kernel never opened {}",
            path.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // A kernel that refuses exits at once; one that waits does so for up to 2 s: 1 s held
    // gives the first time to show on a loaded machine and leaves the second slack.
    std::thread::sleep(std::time::Duration::from_secs(1));
    assert!(
        rt.exited().is_none(),
        "the kernel gave up while a gone kernel's lock was held:\n{}",
        rt.up_stderr()
    );
    drop(holder);
    wait_listening(&mut rt);
    rt.status_json();
}

/// Whether process `pid` has `path` open (one of its `/proc/PID/fd` links names it).
fn holds_open(pid: u32, path: &std::path::Path) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.filter_map(Result::ok)
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target == path))
}

//! Hardening of files and logs: multi-line secrets in connector logs, owner-only logs and
//! registry, the audit trail when it cannot be written, crash leftovers, oversized tool sets, escapes from an upstream's stderr in
//! connector logs, and the lowercase `bearer` scheme. Each test runs the attack
//! against the real runtime.
#![cfg(unix)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use tutti_tests::{Mcp, Runtime, RuntimeOptions, fixture_connector};

const READY: Duration = Duration::from_secs(30);

/// Permission bits of `path` (not following a link); panics if it is missing.
fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
}

/// Waits until `cond` holds, polling; panics with `what` and `diag()` after `timeout`.
fn wait_until(timeout: Duration, what: &str, cond: impl Fn() -> bool, diag: impl Fn() -> String) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "{what} did not happen within {timeout:?}\n{}",
            diag()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A PEM-like private key that appears nowhere else: five lines, the last base64 line short.
fn pem_secret() -> String {
    let seed = format!(
        "{:x}{:x}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default()
    );
    let line = |n: usize| {
        format!("MII{n}{seed}")
            .chars()
            .cycle()
            .take(64)
            .collect::<String>()
    };
    format!(
        "-----BEGIN PRIVATE KEY-----\n{}\n{}\n{}\nQ==\n-----END PRIVATE KEY-----",
        line(1),
        line(2),
        line(3)
    )
}

#[test]
fn every_line_of_a_multi_line_secret_is_masked_and_logs_are_owner_only() {
    let pem = pem_secret();
    let mut rt = Runtime::start(RuntimeOptions::default());
    let mut manifest = rt.private_fixture_connector(
        "pem",
        &["--tools", "echo", "--stderr-secret-env", "PEM_KEY"],
    );
    manifest["mcp"]["secrets"] = json!(["PEM_KEY"]);
    rt.install_ok(&manifest, &[]);
    rt.wait_status("pem", "auth_required", READY);
    // `--from-env` carries the newlines of the key into the store.
    let out = rt
        .tutti_cmd(&["connector", "connect", "pem", "--from-env", "PEM_KEY"])
        .env("PEM_KEY", &pem)
        .output()
        .expect("run tutti connector connect");
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Connect says what it saved (names only).
    assert_eq!(said.trim(), "connected pem (saved PEM_KEY)");
    rt.wait_status("pem", "ready", READY);
    let marker = "the value of PEM_KEY follows";
    wait_until(
        READY,
        "the upstream's stderr in connector-pem.log",
        || {
            let log = rt.log("connector-pem.log");
            log.contains(marker)
                && log
                    .split(marker)
                    .nth(1)
                    .is_some_and(|t| t.lines().count() > 6)
        },
        || rt.log_tail("connector-pem.log", 40),
    );
    let log = rt.log("connector-pem.log");
    for line in pem.lines() {
        assert!(
            !log.contains(line),
            "a line of the secret is in the log in clear: {line:?}\n{log}"
        );
    }
    let after: Vec<&str> = log
        .split(marker)
        .nth(1)
        .unwrap_or_default()
        .lines()
        .skip(1)
        .take(pem.lines().count())
        .collect();
    assert_eq!(
        after,
        vec!["***"; pem.lines().count()],
        "every line of the key is masked:\n{log}"
    );

    // Owner-only: the directory, every log, the audit trail and the registry.
    let state = rt.state_dir().to_path_buf();
    let logs = state.join("logs");
    assert_eq!(mode(&logs), 0o700, "logs/");
    for name in [
        "connector-pem.log",
        "kernel.log",
        "frontend.log",
        "shim-manager.log",
        "audit.jsonl",
    ] {
        assert_eq!(mode(&logs.join(name)), 0o600, "logs/{name}");
    }
    assert_eq!(mode(&state.join("registry.json")), 0o600, "registry.json");
}

#[test]
fn crash_leftovers_are_swept_and_open_logs_tightened_at_start() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    rt.install_ok(&fixture_connector("left", &["--tools", "echo"]), &[]);
    rt.wait_status("left", "ready", READY);
    rt.kill();
    let state = rt.state_dir().to_path_buf();
    let (logs, releases, run) = (
        state.join("logs"),
        state.join("releases/left"),
        state.join("run"),
    );

    // What a kill during an install and a killed worker leave, and files made readable by
    // an older version (or by hand).
    let tmp = releases.join(".tmp-4242-0123abcd");
    std::fs::create_dir_all(tmp.join("node_modules/pkg")).expect("mkdir tmp copy");
    std::fs::write(tmp.join("node_modules/pkg/big.bin"), vec![0u8; 1 << 20]).expect("write");
    let aside = releases.join("0123abcd.damaged-4242");
    std::fs::create_dir_all(&aside).expect("mkdir aside");
    let sock = run.join("w-7fff0.sock");
    drop(std::os::unix::net::UnixListener::bind(&sock).expect("bind a stale socket"));
    assert!(sock.exists(), "a dropped listener leaves its socket file");
    set_mode(&logs, 0o755);
    for name in ["kernel.log", "connector-left.log", "audit.jsonl"] {
        set_mode(&logs.join(name), 0o644);
    }
    set_mode(&state.join("registry.json"), 0o644);

    rt.restart();
    assert!(
        !tmp.exists(),
        "temporary release copy left: {}",
        tmp.display()
    );
    assert!(!aside.exists(), "damaged copy left: {}", aside.display());
    assert!(
        !sock.exists(),
        "stale worker socket left: {}",
        sock.display()
    );
    assert_eq!(mode(&logs), 0o700, "logs/ after restart");
    for name in ["kernel.log", "connector-left.log", "audit.jsonl"] {
        assert_eq!(mode(&logs.join(name)), 0o600, "logs/{name} after restart");
    }
    assert_eq!(mode(&state.join("registry.json")), 0o600, "registry.json");
    // The installed release itself was not touched.
    rt.wait_status("left", "ready", READY);
}

fn audit_dropped(rt: &Runtime) -> u64 {
    rt.status_json()["auditDropped"].as_u64().unwrap_or(0)
}

#[test]
fn audit_write_failures_are_counted_and_the_file_is_reopened() {
    let rt = Runtime::start(RuntimeOptions::default());
    let audit = rt.state_dir().join("logs/audit.jsonl");
    rt.issue_token("w", "before");
    wait_until(
        READY,
        "the first audit record",
        || std::fs::read_to_string(&audit).is_ok_and(|t| t.contains("session_issue")),
        || rt.diagnostics(),
    );
    assert_eq!(audit_dropped(&rt), 0);

    // The file is replaced by something that cannot be written (a directory). The kernel
    // still holds the old file open: appending there would lose every record unseen.
    std::fs::remove_file(&audit).expect("remove audit.jsonl");
    std::fs::create_dir(&audit).expect("mkdir audit.jsonl");
    for n in 0..3 {
        rt.issue_token("w", &format!("lost-{n}"));
        std::thread::sleep(Duration::from_millis(200));
    }
    wait_until(
        READY,
        "auditDropped > 0 in status --json",
        || audit_dropped(&rt) >= 3,
        || format!("status: {}\n{}", rt.status_json(), rt.diagnostics()),
    );
    let errors = rt
        .log("kernel.log")
        .matches("cannot write the audit log")
        .count();
    assert_eq!(
        errors,
        1,
        "one error line per failure burst\n{}",
        rt.diagnostics()
    );

    // Writable again: the next record goes to a new file at the path.
    std::fs::remove_dir(&audit).expect("rmdir audit.jsonl");
    rt.issue_token("w", "after");
    wait_until(
        READY,
        "records written to the reopened audit.jsonl",
        || std::fs::read_to_string(&audit).is_ok_and(|t| t.contains("\"after\"")),
        || rt.diagnostics(),
    );
    assert_eq!(mode(&audit), 0o600, "the reopened audit.jsonl");
    let dropped = audit_dropped(&rt);
    assert!(dropped >= 3, "auditDropped {dropped}");
    assert!(
        rt.log("kernel.log")
            .contains("the audit log is written again"),
        "{}",
        rt.diagnostics()
    );
}

#[test]
fn escapes_from_an_upstreams_stderr_are_written_out_in_its_log() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    rt.install_ok(
        &fixture_connector("esc", &["--tools", "echo", "--stderr-hostile"]),
        &[],
    );
    rt.wait_status("esc", "ready", READY);
    wait_until(
        READY,
        "the hostile line in connector-esc.log",
        || rt.log("connector-esc.log").contains("hostile:"),
        || rt.log_tail("connector-esc.log", 40),
    );
    let log = rt.log("connector-esc.log");
    let raw: Vec<char> = log
        .chars()
        .filter(|c| {
            (c.is_control() && *c != '\n' && *c != '\t') || matches!(c, '\u{202e}' | '\u{200b}')
        })
        .collect();
    assert!(
        raw.is_empty(),
        "raw control/format characters in the log: {raw:?}\n{log}"
    );
    let line = log
        .lines()
        .find(|l| l.contains("hostile:"))
        .unwrap_or_default();
    for shown in [
        "\\x1b]52;c;ZXZpbA==\\x07",
        "\\x1b[31mred",
        "\\u{202e}txt.exe",
        "\\u{200b}zw",
        "\\x08bs",
    ] {
        assert!(line.contains(shown), "{shown} not in {line:?}");
    }
}

/// A bearer token whose scheme is written `bearer` (RFC 9110: schemes are case-insensitive)
/// is accepted, with extra spaces around it.
#[tokio::test(flavor = "multi_thread")]
async fn the_bearer_scheme_is_case_insensitive() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    rt.install_ok(&fixture_connector("case", &["--tools", "echo"]), &[]);
    rt.wait_status("case", "ready", READY);
    let token = rt.issue_token("w", "case");
    let mcp = Mcp::legacy(rt.frontend_url(), &token);
    mcp.initialize().await;
    let body = mcp.message(Some(json!(1)), "tools/list", json!({}));
    for auth in [format!("bearer {token}"), format!("  BEARER   {token}  ")] {
        let mut headers: Vec<(String, String)> = mcp
            .standard_headers(&body)
            .into_iter()
            .filter(|(k, _)| !k.eq_ignore_ascii_case("authorization"))
            .collect();
        headers.push(("Authorization".into(), auth.clone()));
        let (status, _, reply) = mcp.post_raw(body.to_string().into_bytes(), &headers).await;
        assert_eq!(status, 200, "{auth:?} → {status}: {reply}");
        assert!(reply["result"]["tools"].is_array(), "{reply}");
    }
}

/// Waits for `key` to be refused by the size of its tool set; then checks it stays `failed`
/// (no restarts, no crash loop) for a while and returns its status entry.
fn assert_refused_by_size(rt: &Runtime, key: &str) -> serde_json::Value {
    let entry = rt.wait_connector(key, Duration::from_secs(90), "failed by size", |c| {
        c["status"] == "failed"
            || c["status"] == "crash_loop"
            || c["restarts"].as_u64().unwrap_or(0) > 1
    });
    let error = entry["lastError"].as_str().unwrap_or_default().to_owned();
    assert_eq!(entry["status"], "failed", "{entry}");
    assert!(
        error.contains("the tool set is too large") && error.contains("limits: 10000 tools"),
        "the reason names the limit: {entry}"
    );
    // Refused once, not retried: no restarts while we watch.
    std::thread::sleep(Duration::from_secs(3));
    let later = rt.connector_status(key).unwrap_or_default();
    assert_eq!(later["status"], "failed", "{later}");
    assert_eq!(later["restarts"], entry["restarts"], "{later}");
    assert!(later["restarts"].as_u64().unwrap_or(0) <= 1, "{later}");
    later
}

#[test]
fn a_tool_set_over_the_limits_is_refused_at_commit_without_a_crash_loop() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    // 50,000 tools (~12 MB of definitions) and one 5 MB schema: both over the 4 MiB
    // gRPC message limit that used to crash the worker (exit 4) again and again.
    rt.install_ok(
        &fixture_connector("many", &["--tools", "echo", "--many", "50000"]),
        &[],
    );
    rt.install_ok(
        &fixture_connector("wide", &["--tools", "echo", "--big-schema", "5000000"]),
        &[],
    );
    rt.install_ok(&fixture_connector("fine", &["--tools", "echo"]), &[]);
    assert_refused_by_size(&rt, "many");
    assert_refused_by_size(&rt, "wide");
    rt.wait_status("fine", "ready", READY);
    // `probe` reports the same refusal as a problem.
    let probe = rt.tutti(&["connector", "probe", "many"]);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&probe.stdout),
        String::from_utf8_lossy(&probe.stderr)
    );
    assert!(said.contains("the tool set is too large"), "{said}");
    let audit = rt.log("audit.jsonl");
    assert!(
        audit.contains("\"refuse\"") && audit.contains("the tool set is too large"),
        "{audit}"
    );
}

/// `available` answers for 30 connectors whose skills add up to more than the 4 MiB that
/// a gRPC client decodes by default (40 skills of ~4 KB each per connector).
#[test]
fn available_answers_with_thirty_connectors_whatever_their_size() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let long = "d".repeat(3900);
    for c in 0..30 {
        let key = format!("sk{c:02}");
        let mut files: Vec<(String, Vec<u8>)> = Vec::new();
        let mut skills = Vec::new();
        for s in 0..40 {
            let rel = format!("skills/s{s:02}");
            let md = format!("---\nname: s{s:02}\ndescription: {long} {key}-{s}\n---\nbody\n");
            files.push((format!("{rel}/SKILL.md"), md.into_bytes()));
            skills.push(rel);
        }
        let manifest = json!({
            "key": key,
            "name": format!("Skills {key}"),
            "description": format!("Only skills ({key})"),
            "version": "1.0.0",
            "skills": skills,
        });
        let files: Vec<(&str, &[u8])> = files
            .iter()
            .map(|(p, b)| (p.as_str(), b.as_slice()))
            .collect();
        rt.install_ok(&manifest, &files);
    }
    let out = rt.tutti(&["connector", "available", "--json"]);
    assert!(
        out.status.success(),
        "`connector available` failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stdout.len() > 4 * 1024 * 1024,
        "{} bytes",
        out.stdout.len()
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let listed = v["connectors"]
        .as_array()
        .or_else(|| v.as_array())
        .map_or(0, Vec::len);
    assert_eq!(listed, 30, "connectors listed");
}

/// A kernel killed while it copies a release leaves a temporary copy; the next start removes
/// it.
#[test]
fn a_kill_during_install_leaves_nothing_after_the_next_start() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    // Many small files: the copy takes long enough to be caught in the middle.
    let names: Vec<String> = (0..6000)
        .map(|i| format!("data/d{}/f{i}.txt", i / 500))
        .collect();
    let body = vec![b'x'; 2048];
    let files: Vec<(&str, &[u8])> = names
        .iter()
        .map(|n| (n.as_str(), body.as_slice()))
        .collect();
    let dir = rt.write_release(&fixture_connector("bulk", &["--tools", "echo"]), &files);
    let mut install = rt
        .tutti_cmd(&["connector", "install", &dir.to_string_lossy(), "--yes"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start tutti connector install");
    let key_dir = rt.state_dir().join("releases/bulk");
    let temporary = || {
        std::fs::read_dir(&key_dir)
            .map(|rd| {
                rd.flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with(".tmp-"))
                    .map(|e| e.path())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while temporary().is_empty() {
        assert!(
            Instant::now() < deadline,
            "no temporary copy seen during the install\n{}",
            rt.diagnostics()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    rt.kill();
    let _ = install.wait();
    let left = temporary();
    assert!(
        !left.is_empty(),
        "the kill left a temporary copy (the attack)"
    );

    rt.restart();
    assert!(
        temporary().is_empty(),
        "temporary copies after the restart: {:?}",
        temporary()
    );
}

//! One connector lifecycle: a connector without MCP commits through the same
//! commit as one with a worker, so its commit is in the audit log like every other.

use std::time::Duration;

use serde_json::{Value, json};
use tutti_tests::{Runtime, RuntimeOptions};

#[test]
fn a_connector_without_mcp_records_its_commit_like_any_other() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let manifest = json!({
        "key": "notes",
        "name": "Notes",
        "description": "Plain notes on disk",
        "version": "0.3.0",
        "cli": {"entrypoint": "notes.sh"},
    });
    rt.install_ok(
        &manifest,
        &[("notes.sh", b"#!/bin/sh\necho notes\n".as_slice())],
    );
    let status = rt.wait_status("notes", "ready", Duration::from_secs(10));
    let generation = status["generation"].as_u64().unwrap_or(0);
    assert!(generation > 0, "a live generation: {status}");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let lines = rt.audit_lines();
        let commit = lines.iter().find(|l| {
            l["event"] == "commit" && l["connector"] == "notes" && l["generation"] == generation
        });
        if let Some(commit) = commit {
            assert_eq!(commit["tools"], 0, "{commit}");
            assert_eq!(commit["superseded"], Value::Null, "{commit}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no commit record for notes generation {generation}: {lines:#?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

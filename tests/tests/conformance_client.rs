//! The official MCP conformance suite (`@modelcontextprotocol/conformance@0.2.0-alpha.12`) in
//! client mode against our upstream side: `tutti-conformance-client`, built on the worker's
//! own upstream client (`tutti_upstream_worker::client`) and `tutti_oauth`, run by
//! `conformance client --command … --requirements <revision>` for both frozen requirement sets
//! (the `auth/*` scenarios included) with `tests/conformance/expected-failures-client.yml`.
//!
//! The suite fails the run on any scored failure or warning outside that file and on any
//! scored entry of it that passes; this test holds every scenario to the same rule, the
//! not-scored ones (extensions) included: a failure not listed fails it, and so does a listed
//! scenario that passes (a stale entry). Results: docs/CONFORMANCE.md.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use tutti_tests::{bin_dir, npm_package, repo_root, require_node22};

const REVISIONS: [&str; 2] = ["2026-07-28", "2025-11-25"];

fn expected_failures() -> PathBuf {
    repo_root()
        .join("tests")
        .join("conformance")
        .join("expected-failures-client.yml")
}

/// The scenarios of the expected-failures file with their one-line reasons.
fn baseline_entries() -> Vec<(String, String)> {
    let path = expected_failures();
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("- "))
        .map(|rest| {
            let (entry, reason) = rest
                .split_once(" # ")
                .unwrap_or_else(|| panic!("entry without a one-line reason: {rest}"));
            assert!(!reason.trim().is_empty(), "empty reason: {rest}");
            (entry.trim().to_owned(), reason.trim().to_owned())
        })
        .collect()
}

/// `-` plus the suite's result-directory timestamp `2026-11-29T15-24-10-075Z`.
const TIMESTAMP_SUFFIX: usize = 25;

/// One row per scenario: `(scenario, passed checks, failed checks, warnings)`. The suite
/// writes `<out>/<scenario>-<timestamp>/checks.json`, `auth/…` scenarios one level deeper.
fn results(out_dir: &Path) -> Vec<(String, usize, usize, usize)> {
    let mut rows = Vec::new();
    collect(out_dir, "", &mut rows);
    rows.sort();
    rows
}

fn collect(dir: &Path, prefix: &str, rows: &mut Vec<(String, usize, usize, usize)>) {
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("no results in {}: {e}", dir.display()));
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(text) = std::fs::read_to_string(path.join("checks.json")) else {
            if path.is_dir() {
                collect(&path, &format!("{prefix}{name}/"), rows);
            }
            continue;
        };
        let checks: Vec<Value> = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{}/checks.json: {e}", path.display()));
        let count = |s: &str| checks.iter().filter(|c| c["status"] == s).count();
        let scenario = if name.ends_with('Z') && name.len() > TIMESTAMP_SUFFIX {
            &name[..name.len() - TIMESTAMP_SUFFIX]
        } else {
            name.as_str()
        };
        rows.push((
            format!("{prefix}{scenario}"),
            count("SUCCESS"),
            count("FAILURE"),
            count("WARNING"),
        ));
    }
}

fn run_suite(node: &Path, suite: &Path, client: &Path, revision: &str, out_dir: &Path) -> String {
    // The suite splits --command at spaces (and runs it through a shell).
    let command = client.to_string_lossy().into_owned();
    assert!(
        !command.contains(char::is_whitespace),
        "the client path must not contain spaces: {command}"
    );
    let out = Command::new(node)
        .arg(suite.join("dist").join("index.js"))
        .args(["client", "--command", &command, "--requirements", revision])
        .arg("--expected-failures")
        .arg(expected_failures())
        .arg("-o")
        .arg(out_dir)
        .env("NO_COLOR", "1")
        .output()
        .unwrap_or_else(|e| panic!("cannot run the conformance suite: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let summary = stdout
        .find("=== SUITE SUMMARY ===")
        .map_or(stdout.as_str(), |i| &stdout[i..]);
    assert!(
        out.status.success(),
        "conformance client --requirements {revision} failed ({}):\n{summary}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("Baseline check passed"),
        "no baseline verdict for {revision}:\n{summary}"
    );
    summary.to_owned()
}

/// Every failing scenario is listed and every listed scenario that ran fails; the table row.
fn judge(
    revision: &str,
    rows: &[(String, usize, usize, usize)],
    baseline: &[(String, String)],
) -> String {
    let mut table = format!("\n### `--requirements {revision}`\n\n");
    table.push_str("| scenario | checks passed / failed / warnings | result | reason |\n");
    table.push_str("|---|---|---|---|\n");
    for (scenario, ok, failed, warned) in rows {
        let reason = baseline
            .iter()
            .find(|(entry, _)| entry == scenario)
            .map(|(_, reason)| reason.as_str());
        let failing = failed + warned > 0;
        match (failing, reason) {
            (true, None) => panic!(
                "{scenario} fails at {revision} ({failed} failed, {warned} warnings) and is not \
                 in expected-failures-client.yml: {rows:?}"
            ),
            (false, Some(_)) => panic!(
                "{scenario} passes at {revision} but is listed in expected-failures-client.yml: \
                 remove the stale entry"
            ),
            _ => {}
        }
        let result = if failing { "expected failure" } else { "pass" };
        table.push_str(&format!(
            "| {scenario} | {ok} / {failed} / {warned} | {result} | {} |\n",
            reason.unwrap_or_default()
        ));
    }
    table
}

#[test]
fn client_conformance_suite_passes_both_requirement_sets() {
    let node = require_node22();
    let suite = npm_package("@modelcontextprotocol/conformance").unwrap_or_else(|| {
        panic!("this test needs @modelcontextprotocol/conformance: run scripts/install-test-tools")
    });
    let client = bin_dir().join(format!(
        "tutti-conformance-client{}",
        std::env::consts::EXE_SUFFIX
    ));
    assert!(
        client.is_file(),
        "{} is missing: run cargo build --workspace --bins",
        client.display()
    );
    let baseline = baseline_entries();
    let root = tempfile::tempdir().expect("temp dir");
    let mut report = String::new();
    for revision in REVISIONS {
        let out_dir = root.path().join(format!("client-{revision}"));
        let summary = run_suite(&node, &suite, &client, revision, &out_dir);
        let rows = results(&out_dir);
        assert!(
            rows.len() >= 20,
            "too few scenarios ran for {revision}: {rows:?}\n{summary}"
        );
        // The connector's life really ran: handshake, calls, the login and its step-up.
        for scenario in [
            "tools_call",
            "auth/metadata-default",
            "auth/scope-step-up",
            "auth/pre-registration",
        ] {
            assert!(
                rows.iter().any(|(s, ok, failed, warned)| s == scenario
                    && *ok > 0
                    && *failed == 0
                    && *warned == 0),
                "{scenario} did not pass for {revision}: {rows:?}"
            );
        }
        report.push_str(&judge(revision, &rows, &baseline));
        eprintln!("{summary}");
    }
    // The per-run table (for docs/CONFORMANCE.md); `--nocapture` shows it.
    println!("{report}");

    // Every expected failure is explained in the docs.
    let docs = repo_root().join("docs").join("CONFORMANCE.md");
    let docs_text = std::fs::read_to_string(&docs)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", docs.display()));
    for (entry, _) in &baseline {
        assert!(
            docs_text.contains(entry.as_str()),
            "docs/CONFORMANCE.md does not explain the expected failure {entry}"
        );
    }
}

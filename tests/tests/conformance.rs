//! The official MCP conformance suite (`@modelcontextprotocol/conformance@0.2.0-alpha.12`)
//! against the real runtime: `tutti up`, a fixture connector with key `test` whose upstream
//! tools project to the names the suite calls (`simple_text` → `test_simple_text`, …), and
//! the loopback `tutti-auth-proxy` that only adds the bearer token (the suite cannot send
//! one). Both frozen requirement sets run with `tests/conformance/expected-failures.yml`; the
//! suite itself fails the run on any failure or warning outside that file and on any entry of
//! it that passes. The same two runs go through the stdio bridge too (`tutti mcp-stdio` behind
//! the test adapter `tutti-stdio-http`), with `expected-failures-bridge.yml` added for what
//! only the adapter changes. Results: docs/CONFORMANCE.md.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use tutti_tests::{
    AuthProxy, FixtureHttp, Mcp, Runtime, RuntimeOptions, StdioHttp, bin, fixture_connector,
    npm_package, repo_root, require_node22,
};

/// The upstream tools of the `test` connector: the suite's tool scenarios, the diagnostic
/// tools of `server-stateless` (`logging_tool`, `streaming_elicitation`,
/// `trigger_tool_change`), one `x-mcp-header` tool (`param_header`) and the tools of the relay
/// scenarios, which ask their client during the call (`conformance_relay`: `test_sampling`,
/// `test_elicitation`, `test_missing_capability`, `test_input_required_result_*`, …).
const TEST_TOOLS: &str = "conformance,logging_tool,streaming_elicitation,trigger_tool_change,\
     param_header,conformance_relay";
/// The legacy set runs first: the modern set's `input-required-result-*` scenarios leave
/// calls parked behind `input_required` answers they never resume, each pending at the
/// upstream until the call timeout. Over HTTP (`http_connector`) their requests name their
/// call, so they no longer disturb later scenarios; the order keeps the legacy run free of
/// them all the same.
const REVISIONS: [&str; 2] = ["2025-11-25", "2026-07-28"];

/// The `test` connector: the fixture over Streamable HTTP as a 2026-07-28 upstream
/// (`--stateless --sse`): what a call sends while it runs (progress, logs) travels on
/// that call's own response stream, list changes on its `subscriptions/listen` streams, and
/// its tools that ask answer `input_required` under their own keys (`user_name`, …), so the
/// runtime keeps those keys and relays a whole round in one answer (SPEC §11). A fixture with sessions
/// would be the 2025-era alternative, whose requests during a call name their call.
fn http_connector(key: &str, url: &str) -> Value {
    json!({
        "key": key,
        "name": format!("Fixture {key}"),
        "description": format!("Fixture MCP server {key} over Streamable HTTP"),
        "version": "1.0.0",
        "mcp": {"transport": "http", "url": url},
    })
}

fn expected_failures() -> PathBuf {
    repo_root()
        .join("tests")
        .join("conformance")
        .join("expected-failures.yml")
}

/// What differs through the stdio bridge only because of the HTTP adapter in front of it.
fn bridge_expected_failures() -> PathBuf {
    repo_root()
        .join("tests")
        .join("conformance")
        .join("expected-failures-bridge.yml")
}

/// The entries (`scenario` or `scenario:check`) of an expected-failures file with their
/// one-line reasons (the comment after the entry).
fn baseline_entries(path: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(path)
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

/// The scenarios a requirement set runs but does not score (`not_scored:` entries).
fn not_scored(suite: &Path, revision: &str) -> Vec<String> {
    let path = suite.join("requirements").join(format!("{revision}.yaml"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("- scenario: "))
        .map(|s| s.trim().to_owned())
        .collect()
}

/// `-` plus the suite's result-directory timestamp `2026-11-29T15-24-10-075Z`.
const TIMESTAMP_SUFFIX: usize = 25;

/// One row per scenario: `(scenario, passed checks, failed checks, warnings)`.
fn results(out_dir: &Path) -> Vec<(String, usize, usize, usize)> {
    let mut rows = Vec::new();
    let entries = std::fs::read_dir(out_dir)
        .unwrap_or_else(|e| panic!("no results in {}: {e}", out_dir.display()));
    for entry in entries.filter_map(Result::ok) {
        let dir = entry.path();
        let Ok(text) = std::fs::read_to_string(dir.join("checks.json")) else {
            continue;
        };
        let checks: Vec<Value> = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{}/checks.json: {e}", dir.display()));
        let count = |s: &str| checks.iter().filter(|c| c["status"] == s).count();
        // `server-<scenario>-<YYYY-MM-DDTHH-MM-SS-mmmZ>`.
        let name = entry.file_name().to_string_lossy().into_owned();
        let scenario = name
            .strip_prefix("server-")
            .filter(|n| n.ends_with('Z') && n.len() > TIMESTAMP_SUFFIX)
            .map(|n| n[..n.len() - TIMESTAMP_SUFFIX].to_owned())
            .unwrap_or(name);
        rows.push((
            scenario,
            count("SUCCESS"),
            count("FAILURE"),
            count("WARNING"),
        ));
    }
    rows.sort();
    rows
}

fn run_suite(
    node: &Path,
    suite: &Path,
    url: &str,
    revision: &str,
    out_dir: &Path,
    baseline: &Path,
) -> String {
    let out = Command::new(node)
        .arg(suite.join("dist").join("index.js"))
        .args(["server", "--url", url, "--requirements", revision])
        .arg("--expected-failures")
        .arg(baseline)
        .arg("-o")
        .arg(out_dir)
        .env("NO_COLOR", "1")
        .output()
        .unwrap_or_else(|e| panic!("cannot run the conformance suite: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let summary = stdout
        .find("=== SUMMARY ===")
        .map_or(stdout.as_str(), |i| &stdout[i..]);
    assert!(
        out.status.success(),
        "conformance --requirements {revision} failed ({}):\n{summary}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("Baseline check passed"),
        "no baseline verdict for {revision}:\n{summary}"
    );
    summary.to_owned()
}

/// The proxy adds the token and nothing else: without it the frontend refuses, through it
/// the same request is served, and a foreign Host still gets 403 through the proxy.
async fn assert_the_proxy_adds_only_the_token(rt: &Runtime, proxy: &AuthProxy) {
    let list = |mcp: Mcp| async move { mcp.request("tools/list", json!({})).await };
    let (status, _, _) = list(Mcp::legacy(rt.frontend_url(), "")).await;
    assert_eq!(status, 401, "the frontend must require the bearer token");
    let (status, _, body) = list(Mcp::legacy(&proxy.url(), "")).await;
    assert_eq!(status, 200, "through the proxy: {body}");
    assert!(
        body["result"]["tools"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["name"] == "test_simple_text")),
        "{body}"
    );
    let evil = Mcp::legacy(&proxy.url(), "");
    let (status, _, _) = evil
        .post_raw(
            br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#.to_vec(),
            &[("Host".to_owned(), "evil.example.com".to_owned())],
        )
        .await;
    assert_eq!(status, 403, "the proxy must preserve Host");
}

/// The results table of one requirement set, each expected failure with its reason.
fn report_rows(
    report: &mut String,
    revision: &str,
    rows: &[(String, usize, usize, usize)],
    baseline: &[(String, String)],
    unscored: &[String],
) {
    report.push_str(&format!("\n### `--requirements {revision}`\n\n"));
    report.push_str("| scenario | checks passed / failed / warnings | result | reason |\n");
    report.push_str("|---|---|---|---|\n");
    for (scenario, ok, failed, warned) in rows {
        let reasons: Vec<String> = baseline
            .iter()
            .filter_map(|(entry, reason)| {
                if entry == scenario {
                    Some(reason.clone())
                } else {
                    let check = entry.strip_prefix(&format!("{scenario}:"))?;
                    Some(format!("`{check}`: {reason}"))
                }
            })
            .collect();
        let (result, reason) = if unscored.contains(scenario) {
            let result = if failed + warned == 0 {
                "pass (not scored)"
            } else {
                "fail (not scored)"
            };
            (result, String::new())
        } else if failed + warned == 0 {
            ("pass", String::new())
        } else {
            ("expected failure", reasons.join("; "))
        };
        report.push_str(&format!(
            "| {scenario} | {ok} / {failed} / {warned} | {result} | {reason} |\n"
        ));
    }
}

/// The `test` connector really was a 2026-07-28 upstream: discovered, never initialized,
/// subscribed to with `subscriptions/listen`, and given inputResponses by key.
fn assert_the_upstream_was_spoken_to_as_2026_07_28(record: &Path) {
    let sent = std::fs::read_to_string(record).unwrap_or_default();
    let methods: Vec<Value> = sent
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect();
    let sent_method = |m: &str| methods.iter().any(|v| v["method"] == m);
    assert!(sent_method("server/discover"), "no server/discover: {sent}");
    assert!(!sent_method("initialize"), "the upstream was initialized");
    assert!(
        sent_method("subscriptions/listen"),
        "no subscriptions/listen"
    );
    assert!(
        methods
            .iter()
            .any(|v| v["params"]["inputResponses"]["user_name"].is_object()),
        "no inputResponses by the upstream's key user_name"
    );
}

/// Every expected failure is explained in the docs.
fn assert_every_expected_failure_is_explained(baseline: &[(String, String)]) {
    let docs = repo_root().join("docs").join("CONFORMANCE.md");
    let docs_text = std::fs::read_to_string(&docs)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", docs.display()));
    for (entry, _) in baseline {
        assert!(
            docs_text.contains(entry.as_str()),
            "docs/CONFORMANCE.md does not explain the expected failure {entry}"
        );
    }
}

/// The suite's two requirement sets against `url` with `baseline`: each run's verdict, then
/// its results table (returned) with the reasons of `entries`.
fn run_both(
    rt: &Runtime,
    url: &str,
    name: &str,
    baseline: &Path,
    entries: &[(String, String)],
) -> String {
    let node = require_node22();
    let suite = npm_package("@modelcontextprotocol/conformance").unwrap_or_else(|| {
        panic!("this test needs @modelcontextprotocol/conformance: run scripts/install-test-tools")
    });
    let mut report = String::new();
    for revision in REVISIONS {
        let out_dir = rt.root().join(format!("{name}-{revision}"));
        let summary = run_suite(&node, &suite, url, revision, &out_dir, baseline);
        let rows = results(&out_dir);
        assert!(
            rows.len() >= 20,
            "too few scenarios ran for {revision}: {rows:?}"
        );
        // Tool calls really reached the upstream through the gateway.
        for scenario in [
            "tools-call-simple-text",
            "tools-call-image",
            "tools-call-error",
        ] {
            assert!(
                rows.iter().any(|(s, ok, failed, warned)| s == scenario
                    && *ok > 0
                    && *failed == 0
                    && *warned == 0),
                "{scenario} did not pass for {revision}: {rows:?}"
            );
        }
        let unscored = not_scored(&suite, revision);
        report_rows(&mut report, revision, &rows, entries, &unscored);
        eprintln!("{summary}");
    }
    // The per-run table (for docs/CONFORMANCE.md); `--nocapture` shows it.
    println!("{report}");
    let _ = std::fs::write(rt.root().join(format!("{name}-results.md")), &report);
    report
}

/// `tutti up` with the `test` connector (see [`http_connector`]), its upstream, and the file
/// where the upstream records what it was sent.
fn runtime_with_test_connector() -> (Runtime, FixtureHttp, PathBuf) {
    let mut rt = Runtime::start(RuntimeOptions::default());
    // The suite's prompts, resources, template and completion too.
    // A 2026-07-28 upstream (`--stateless --sse`); its record shows what it was sent.
    let record = rt.root().join("test-upstream.jsonl");
    let record_arg = record.display().to_string();
    let fixture = FixtureHttp::start(&[
        "--tools",
        TEST_TOOLS,
        "--conformance-catalog",
        "--stateless",
        "--sse",
        "--record",
        &record_arg,
    ]);
    // The suite makes the upstream add tools: trusted, so they commit without review.
    rt.install_trusted(&http_connector("test", &fixture.url), &[]);
    rt.wait_status("test", "ready", Duration::from_secs(20));
    (rt, fixture, record)
}

#[tokio::test(flavor = "multi_thread")]
async fn conformance_suite_passes_both_requirement_sets() {
    let baseline = baseline_entries(&expected_failures());
    let (rt, _fixture, record) = runtime_with_test_connector();
    let token = rt.issue_token("conformance", "suite");
    let proxy = AuthProxy::start(rt.frontend_url(), &token);

    assert_the_proxy_adds_only_the_token(&rt, &proxy).await;

    run_both(
        &rt,
        &proxy.url(),
        "conformance",
        &expected_failures(),
        &baseline,
    );
    assert_the_upstream_was_spoken_to_as_2026_07_28(&record);
    assert_every_expected_failure_is_explained(&baseline);

    drop(proxy);
}

/// The same two runs through the stdio bridge: `tutti-stdio-http` (`tests/src/stdio_http/`)
/// serves HTTP and runs `tutti mcp-stdio` per 2025-era session and one for all 2026-07-28
/// requests, carrying bodies and lines only. The baseline is the frontend's plus
/// `expected-failures-bridge.yml`, whose every entry is a check of HTTP itself (headers,
/// `Host`) that the adapter does not imitate; the bridge's own failures are fixed, not listed.
#[test]
fn conformance_suite_passes_both_requirement_sets_through_the_stdio_bridge() {
    let (rt, _fixture, record) = runtime_with_test_connector();
    let bridge = [
        bin("tutti").into_os_string(),
        "--state-dir".into(),
        rt.state_dir().as_os_str().to_owned(),
        "mcp-stdio".into(),
        "--workspace".into(),
        "conformance-bridge".into(),
    ];
    let adapter = StdioHttp::start(&bridge);
    let own = baseline_entries(&bridge_expected_failures());
    assert!(
        own.iter()
            .all(|(_, reason)| reason.starts_with("adapter: ")),
        "every entry of the bridge's baseline is the adapter's: {own:?}"
    );
    let mut entries = baseline_entries(&expected_failures());
    entries.extend(own.iter().cloned());
    let merged = rt.root().join("expected-failures-through-the-bridge.yml");
    let mut text = String::from("server:\n");
    for (entry, reason) in &entries {
        text.push_str(&format!("  - {entry} # {reason}\n"));
    }
    if entries.is_empty() {
        text = String::from("server: []\n");
    }
    std::fs::write(&merged, text).unwrap_or_else(|e| panic!("cannot write the baseline: {e}"));

    run_both(&rt, &adapter.url(), "bridge", &merged, &entries);
    assert_the_upstream_was_spoken_to_as_2026_07_28(&record);
    assert_every_expected_failure_is_explained(&own);
    drop(adapter);
}

/// The skills extension scenarios (SEP-2640; not part of either frozen requirement set, so
/// they run by name) against a connector with a skill, in both eras: every check passes or
/// is skipped as not applicable (`sep-2640-skills-directory`: `directoryRead` is not
/// declared; the cache attributes before 2026-07-28), with no warning.
#[test]
fn skills_extension_scenarios_pass_against_a_connector_with_skills() {
    let node = require_node22();
    let suite = npm_package("@modelcontextprotocol/conformance").unwrap_or_else(|| {
        panic!("this test needs @modelcontextprotocol/conformance: run scripts/install-test-tools")
    });
    let mut rt = Runtime::start(RuntimeOptions::default());
    let mut manifest = fixture_connector("docs", &["--tools", "echo"]);
    manifest["skills"] = json!(["skills/pdf-processing"]);
    let skill_md: &[u8] = b"---\nname: pdf-processing\ndescription: Extract, fill, and assemble PDF documents\nmetadata:\n  owner: docs-team\n---\n# PDF processing\n\nSee references/FORMS.md.\n";
    rt.install_ok(
        &manifest,
        &[
            ("skills/pdf-processing/SKILL.md", skill_md),
            ("skills/pdf-processing/references/FORMS.md", b"# Forms\n"),
        ],
    );
    rt.wait_status("docs", "ready", Duration::from_secs(20));
    let token = rt.issue_token("conformance", "skills");
    let proxy = AuthProxy::start(rt.frontend_url(), &token);
    let scenarios = [
        "sep-2640-skills-enumeration",
        "sep-2640-skills-manifest",
        "sep-2640-skills-directory",
    ];
    for version in REVISIONS {
        for scenario in scenarios {
            let out_dir = rt.root().join(format!("skills-{version}-{scenario}"));
            let out = Command::new(&node)
                .arg(suite.join("dist").join("index.js"))
                .args(["server", "--url", &proxy.url(), "--scenario", scenario])
                // Extension scenarios are on no spec timeline: `--force` runs them at `version`.
                .args(["--spec-version", version, "--force"])
                .arg("-o")
                .arg(&out_dir)
                .env("NO_COLOR", "1")
                .output()
                .unwrap_or_else(|e| panic!("cannot run the conformance suite: {e}"));
            let stdout = String::from_utf8_lossy(&out.stdout);
            let rows = results(&out_dir);
            assert_eq!(rows.len(), 1, "{scenario} {version}: {rows:?}\n{stdout}");
            let (_, passed, failed, warned) = &rows[0];
            println!("| {scenario} | {version} | {passed} / {failed} / {warned} |");
            assert_eq!(
                (*failed, *warned),
                (0, 0),
                "{scenario} at {version}: {rows:?}\n{stdout}"
            );
            if scenario != "sep-2640-skills-directory" {
                assert!(*passed >= 5, "{scenario} at {version}: {rows:?}\n{stdout}");
            }
        }
    }
    drop(proxy);
}

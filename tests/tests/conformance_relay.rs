//! The official conformance suite's `input-required-result-*` scenarios
//! (2026-07-28), each run alone against a runtime of its own whose `test` connector is the
//! stdio fixture with the relay tools (`--tools conformance_relay`): the upstream sends its
//! `elicitation/create`, `sampling/createMessage` or `roots/list` during the call, the
//! frontend answers the suite with an `input_required` result and a `requestState` of its own,
//! and the suite's retry with `inputResponses` reaches the upstream as the answer.
//!
//! Why alone: a stdio upstream's request names no call, so while more than one call is in
//! flight the worker refuses to guess whose it is (SPEC §11); in the full run the suite leaves
//! calls parked behind `input_required` answers it never resumes. The full run
//! (tests/tests/conformance.rs) therefore uses the fixture over HTTP (`--http --sse`), where each
//! request travels on its call's stream; this test keeps the stdio relay path covered, one
//! scenario per runtime. Those that fail here too are checked below to fail for exactly their
//! documented reason.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use tutti_tests::{
    AuthProxy, Runtime, RuntimeOptions, fixture_connector, npm_package, require_node22,
};

/// Scenarios that pass when run alone.
const PASS_ALONE: [&str; 10] = [
    "input-required-result-basic-sampling",
    "input-required-result-basic-list-roots",
    "input-required-result-request-state",
    "input-required-result-multi-round",
    "input-required-result-missing-input-response",
    "input-required-result-result-type",
    "input-required-result-tampered-state",
    "input-required-result-capability-check",
    "input-required-result-validate-input",
    // The upstream's request during prompts/get is relayed as during tools/call.
    "input-required-result-non-tool-request",
];

/// Scenarios that fail alone too, with the text of the failing check that says why.
const FAIL_ALONE: [(&str, &str); 3] = [
    // The frontend keys each relayed request `tutti-<n>`; a 2025-era upstream's request
    // carries no key of its own.
    (
        "input-required-result-basic-elicitation",
        "inputRequests missing expected key \"user_name\"",
    ),
    // One relayed request per input_required result, in the order the upstream sends them.
    (
        "input-required-result-multiple-input-requests",
        "Expected at least 3 inputRequests, got 1",
    ),
    // inputResponses without a requestState the runtime issued answer nothing: the call
    // starts afresh and its upstream asks again (a SHOULD: a warning).
    (
        "input-required-result-ignore-extra-params",
        "did not return complete result",
    ),
];

/// `(checks passed, failures and warnings with their messages)` of one scenario run alone.
fn run_alone(node: &Path, suite: &Path, scenario: &str) -> (usize, Vec<String>) {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let tools = ["--tools", "conformance_relay", "--conformance-catalog"];
    rt.install_trusted(&fixture_connector("test", &tools), &[]);
    rt.wait_status("test", "ready", Duration::from_secs(20));
    let token = rt.issue_token("conformance", "relay");
    let proxy = AuthProxy::start(rt.frontend_url(), &token);
    let out_dir = rt.root().join(format!("relay-{scenario}"));
    let out = Command::new(node)
        .arg(suite.join("dist").join("index.js"))
        .args(["server", "--url", &proxy.url(), "--scenario", scenario])
        .args(["--spec-version", "2026-07-28", "-o"])
        .arg(&out_dir)
        .env("NO_COLOR", "1")
        .output()
        .unwrap_or_else(|e| panic!("cannot run the conformance suite: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let checks: Vec<Value> = std::fs::read_dir(&out_dir)
        .ok()
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|e| std::fs::read_to_string(e.path().join("checks.json")).ok())
        .flat_map(|text| serde_json::from_str::<Vec<Value>>(&text).unwrap_or_default())
        .collect();
    assert!(!checks.is_empty(), "{scenario}: no checks ran\n{stdout}");
    let passed = checks.iter().filter(|c| c["status"] == "SUCCESS").count();
    let bad = checks
        .iter()
        .filter(|c| c["status"] == "FAILURE" || c["status"] == "WARNING")
        .map(|c| {
            let text = |key: &str| c[key].as_str().unwrap_or_default().to_owned();
            format!(
                "{} {}: {}",
                text("status"),
                text("id"),
                text("errorMessage")
            )
        })
        .collect();
    drop(proxy);
    (passed, bad)
}

#[test]
fn input_required_scenarios_pass_alone_through_the_relay() {
    let node = require_node22();
    let suite = npm_package("@modelcontextprotocol/conformance").unwrap_or_else(|| {
        panic!("this test needs @modelcontextprotocol/conformance: run scripts/install-test-tools")
    });
    for scenario in PASS_ALONE {
        let (passed, bad) = run_alone(&node, &suite, scenario);
        println!("| {scenario} | {passed} / {} | pass alone |", bad.len());
        assert!(passed > 0 && bad.is_empty(), "{scenario}: {bad:#?}");
    }
    for (scenario, why) in FAIL_ALONE {
        let (passed, bad) = run_alone(&node, &suite, scenario);
        println!("| {scenario} | {passed} / {} | fails alone |", bad.len());
        assert!(
            bad.len() == 1 && bad[0].contains(why),
            "{scenario} should fail only for {why:?}: {bad:#?}"
        );
    }
}

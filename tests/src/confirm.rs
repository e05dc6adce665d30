//! The setup the confirmed-call tests share (`e2e/calls/confirm*.rs`, SPEC §12): a runtime with the
//! fixture connector `fx` (`destroy` is high risk, `echo` low) recording every message it
//! gets, `--confirm` tokens, what reached the upstream, the audit's decisions, and the
//! person's side: `tests/py/confirm_client.py`, the Python SDK client that answers.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::{Runtime, RuntimeOptions, fixture_connector, repo_root, require_python};

const READY: Duration = Duration::from_secs(30);

/// A runtime with the fixture `fx` installed and ready, and the file it records every
/// message it gets in.
pub struct RiskyFixture {
    pub rt: Runtime,
    pub record: PathBuf,
}

impl RiskyFixture {
    /// Installs `fx` (tools `destroy`, high risk, and `echo`); `call_ms` sets its
    /// `timeouts.callMs` (how long a person has to answer a question).
    pub fn start(call_ms: Option<u64>) -> RiskyFixture {
        let mut rt = Runtime::start(RuntimeOptions::default());
        let record = rt.root().join("fixture-record.jsonl");
        let record_arg = record.to_string_lossy().into_owned();
        let mut manifest =
            fixture_connector("fx", &["--tools", "destroy,echo", "--record", &record_arg]);
        if let Some(ms) = call_ms {
            manifest["timeouts"] = json!({"callMs": ms});
        }
        rt.install_ok(&manifest, &[]);
        rt.wait_status("fx", "ready", READY);
        RiskyFixture { rt, record }
    }

    /// A token of workspace `w`, session `session`; with `--confirm high --confirm-via agent`
    /// (the agent's client is asked) when `confirm`.
    pub fn token(&self, session: &str, confirm: bool) -> String {
        if confirm {
            self.token_via(session, "agent")
        } else {
            self.rt.issue_token_with("w", session, &[])
        }
    }

    /// A `--confirm high --confirm-via VIA` token of workspace `w`, session `session`.
    pub fn token_via(&self, session: &str, via: &str) -> String {
        let extra = ["--confirm", "high", "--confirm-via", via];
        self.rt.issue_token_with("w", session, &extra)
    }

    /// The calls `tutti confirm list --json` shows, waiting up to 15 s for `n` of them.
    pub fn wait_pending(&self, n: usize) -> Vec<Value> {
        poll_for(n, Duration::from_secs(15), || {
            let out = self.rt.tutti_ok(&["confirm", "list", "--json"]);
            let list: Value = serde_json::from_str(out.trim())
                .unwrap_or_else(|e| panic!("`confirm list --json` printed no JSON ({e}): {out}"));
            list["pending"].as_array().cloned().unwrap_or_default()
        })
    }

    /// Answers the one call `tutti confirm list` shows with `tutti confirm VERB ID` (`allow`
    /// or `deny`), once it shows; its id.
    pub fn answer_pending(&self, verb: &str) -> String {
        let pending = self.wait_pending(1);
        let id = pending.first().and_then(|p| p["id"].as_str());
        let id = id
            .unwrap_or_else(|| panic!("no call waits: {pending:?}"))
            .to_owned();
        self.rt.tutti_ok(&["confirm", verb, &id]);
        id
    }

    /// The audit `confirmation` records of `fx_destroy`, each `state` or `state:channel`
    /// (`pending`, `allowed:person`, `expired`, …), waiting up to 10 s for `n`.
    pub fn confirmation_states(&self, n: usize) -> Vec<String> {
        poll_for(n, Duration::from_secs(10), || {
            self.rt
                .audit_lines()
                .into_iter()
                .filter(|l| l["event"] == "confirmation" && l["tool"] == "fx_destroy")
                .map(|l| match (l["state"].as_str(), l["channel"].as_str()) {
                    (Some(state), Some(channel)) => format!("{state}:{channel}"),
                    (state, _) => state.unwrap_or_default().to_owned(),
                })
                .collect()
        })
    }

    /// How many `tools/call` of `destroy` the fixture got.
    pub fn upstream_calls(&self) -> usize {
        std::fs::read_to_string(&self.record)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|m| m["method"] == "tools/call" && m["params"]["name"] == "destroy")
            .count()
    }

    /// The audit `call` records of `fx_destroy`, waiting up to 10 s for `n` of them.
    pub fn destroy_records(&self, n: usize) -> Vec<Value> {
        poll_for(n, Duration::from_secs(10), || {
            self.rt
                .audit_lines()
                .into_iter()
                .filter(|l| l["event"] == "call" && l["tool"] == "fx_destroy")
                .collect()
        })
    }

    /// The audit `confirmation` words of `fx_destroy` calls, waiting up to 10 s for `n`.
    pub fn decisions(&self, n: usize) -> Vec<String> {
        self.destroy_records(n)
            .iter()
            .map(|l| l["confirmation"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// Runs `tests/py/confirm_client.py` (the Python SDK client calling `fx_destroy` once)
    /// in `mode` (`legacy` or `auto`) with `token`, answering the question with `answer`
    /// (`accept`, `decline`, `cancel`, `none`, `never`), and returns the JSON line it prints
    /// (`version`, `asked`, `result`, `seconds`). Panics, with its output, when it fails.
    pub fn run_client(&self, mode: &str, token: &str, answer: &str) -> Value {
        self.run_client_with(mode, token, answer, &json!({}))
    }

    /// [`RiskyFixture::run_client`] calling `fx_destroy` with `arguments`.
    pub fn run_client_with(
        &self,
        mode: &str,
        token: &str,
        answer: &str,
        arguments: &Value,
    ) -> Value {
        let child = self.spawn_client(mode, token, answer, arguments);
        client_answer(answer, child)
    }

    /// Starts the client of [`RiskyFixture::run_client_with`] without waiting for it; its
    /// answer comes from [`client_answer`].
    pub fn spawn_client(&self, mode: &str, token: &str, answer: &str, arguments: &Value) -> Child {
        let script = repo_root()
            .join("tests")
            .join("py")
            .join("confirm_client.py");
        Command::new(require_python())
            .arg(&script)
            .args([answer, self.rt.frontend_url(), mode, &arguments.to_string()])
            .env("TUTTI_TEST_TOKEN", token)
            .env("PYTHONWARNINGS", "ignore")
            .env_remove("HTTP_PROXY")
            .env_remove("http_proxy")
            .env_remove("ALL_PROXY")
            .env_remove("all_proxy")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run the Python client: {e}"))
    }
}

/// The JSON line a client started by [`RiskyFixture::spawn_client`] (answering `answer`)
/// prints, once it ended. Panics, with its output, when it fails.
pub fn client_answer(answer: &str, child: Child) -> Value {
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("cannot wait for the Python client: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "Python client ({answer}) failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("client ({answer}) printed no JSON ({e}): {stdout}"))
}

/// Asserts that the client's call (its JSON line) waited for the connector's `call_ms`, and
/// not much longer.
pub fn assert_waited_for(answered: &Value, call_ms: u64) {
    let waited = answered["seconds"].as_f64().unwrap_or_default();
    let limit = call_ms as f64 / 1000.0;
    assert!(
        waited >= limit - 0.2 && waited < limit + 20.0,
        "the call waited for the call timeout ({limit} s): {waited} s"
    );
}

/// Reads `read` every 50 ms until it holds `n` items or `within` passed; the last reading.
fn poll_for<T>(n: usize, within: Duration, read: impl Fn() -> Vec<T>) -> Vec<T> {
    let deadline = Instant::now() + within;
    loop {
        let items = read();
        if items.len() >= n || Instant::now() > deadline {
            return items;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

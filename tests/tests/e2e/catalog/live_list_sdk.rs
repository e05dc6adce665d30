//! The live tool list for legacy clients with the Python SDK (mcp 2.3.0) in
//! 2025-06-18 mode: its own, unchanged GET stream code (`tests/py/live_list_client.py`; the
//! runtime names the token's session id at `initialize`) sees
//! `notifications/tools/list_changed` within 1 s of an install, an upgrade and an uninstall;
//! the stream ends when the token is reissued and when it is revoked, and the SDK's reconnect
//! with the dead token is refused.
#![cfg(unix)]

use std::time::{Duration, Instant};

use serde_json::Value;
use tutti_tests::{PySdk, Runtime, RuntimeOptions, fixture_connector, py_script};

const READY: Duration = Duration::from_secs(30);
/// The acceptance bound: a change reaches the stream within 1 s.
const AT_ONCE: Duration = Duration::from_secs(1);
const CLIENT_START: Duration = Duration::from_secs(60);

/// The SDK client (`tests/py/live_list_client.py`) and its JSON lines.
struct PyClient(PySdk);

impl PyClient {
    fn spawn(rt: &Runtime, token: &str, name: &str) -> PyClient {
        let stderr = rt.root().join(format!("live-list-{name}.stderr"));
        let script = py_script("live_list_client.py");
        let py = PyClient(PySdk::spawn(&script, &[rt.frontend_url()], token, stderr));
        // The SDK opens its GET stream at `notifications/initialized`, so "get-open" and
        // "listed" come in either order.
        let (mut listed, mut open) = (None, false);
        while listed.is_none() || !open {
            let v = py.until("the tool list and the GET stream", CLIENT_START, |v| {
                v["event"] == "listed" || v["event"] == "get-open"
            });
            match v["event"] == "listed" {
                true => listed = Some(v),
                false => open = true,
            }
        }
        let listed = listed.unwrap_or_default();
        // Legacy mode: a 2025 era version (the SDK asks for its newest, 2025-11-25).
        let version = listed["protocolVersion"].as_str().unwrap_or_default();
        assert!(version.starts_with("2025-"), "{listed}");
        py
    }

    /// Skips lines until one satisfies `pred` within `timeout`; that line.
    fn until(&self, what: &str, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Value {
        self.0.until(what, timeout, pred)
    }

    /// Waits for `notifications/tools/list_changed` after `change` ran; asserts it came
    /// within [`AT_ONCE`] of `change` finishing.
    fn sees_list_changed(&self, what: &str, change: impl FnOnce()) {
        change();
        let done = Instant::now();
        self.until(&format!("list_changed after {what}"), READY, |v| {
            v["event"] == "note" && v["method"] == "notifications/tools/list_changed"
        });
        let after = done.elapsed();
        assert!(after <= AT_ONCE, "list_changed came {after:?} after {what}");
    }

    /// After the token died: the stream ends within [`AT_ONCE`], and the SDK's reconnect with
    /// the dead token is refused (an error, never a new open stream).
    fn stream_ends(&self, what: &str) {
        let since = Instant::now();
        let end = self.until(&format!("the end of the stream after {what}"), READY, |v| {
            v["event"] == "get-ended" || v["event"] == "get-open" || v["event"] == "get-error"
        });
        assert_eq!(end["event"], "get-ended", "{what}: {end}");
        assert!(
            since.elapsed() <= AT_ONCE,
            "the stream ended {:?} after {what}",
            since.elapsed()
        );
        let next = self.until(&format!("the reconnect after {what}"), READY, |v| {
            v["event"] == "get-open" || v["event"] == "get-error"
        });
        assert_eq!(next["event"], "get-error", "{what}: reconnected: {next}");
    }
}

#[test]
fn the_python_sdks_legacy_get_stream_sees_installs_upgrades_uninstalls_and_ends_with_its_token() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    rt.install_ok(&fixture_connector("fx", &["--tools", "echo"]), &[]);
    rt.wait_status("fx", "ready", READY);
    let token = rt.issue_token("w", "s");
    let py = PyClient::spawn(&rt, &token, "first");

    py.sees_list_changed("an install", || {
        rt.install_ok(&fixture_connector("late", &["--tools", "echo"]), &[]);
        rt.wait_status("late", "ready", READY);
    });
    let mut upgraded = fixture_connector("fx", &["--tools", "echo,add"]);
    upgraded["version"] = "1.0.1".into();
    py.sees_list_changed("an upgrade", || {
        rt.install_ok(&upgraded, &[]);
        rt.wait_connector("fx", READY, "the upgrade", |c| {
            c["status"] == "ready" && c["toolCount"] == 2
        });
    });
    py.sees_list_changed("an uninstall", || {
        rt.tutti_ok(&["connector", "uninstall", "late"]);
    });

    // A reissued token's old stream ends.
    let reissued = rt.issue_token("w", "s");
    py.stream_ends("the reissue");
    drop(py);

    // The new token's stream ends on revoke.
    let py = PyClient::spawn(&rt, &reissued, "second");
    rt.tutti_ok(&["session", "revoke", "--workspace", "w", "--session", "s"]);
    py.stream_ends("the revoke");
}

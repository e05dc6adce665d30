//! A Python `mcp` SDK client (`.tools/venv`, mcp 2.3.0) as a child process that prints one JSON
//! object per line: the runner the SDK tests share. Scripts import what they share from
//! `tests/py/sdk_prelude.py` (on `PYTHONPATH`).
//!
//! The token goes in the environment (`TUTTI_TEST_TOKEN`, never argv), proxy variables are
//! unset (the runtime listens on 127.0.0.1), warnings are off, stderr goes to a file that every
//! failure shows, and the process is killed when the [`PySdk`] is dropped. A line whose `event`
//! is `"error"` (the scripts' last words before exit 1) fails the waiting test at once.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{file_tail, repo_root, require_python};

/// How long [`PySdk::next`] waits for a line: generous, the machine may be loaded.
pub const PY_RUN: Duration = Duration::from_secs(90);

/// A running Python SDK script and its JSON lines.
pub struct PySdk {
    child: Child,
    lines: Receiver<Value>,
    stderr: PathBuf,
}

/// `<repo>/tests/py/<name>`: a script kept in the repository.
pub fn py_script(name: &str) -> PathBuf {
    repo_root().join("tests").join("py").join(name)
}

impl PySdk {
    /// Runs `script args…` with the venv's Python; its stderr goes to `stderr`.
    pub fn spawn(script: &Path, args: &[&str], token: &str, stderr: PathBuf) -> PySdk {
        let python = require_python();
        let err = std::fs::File::create(&stderr)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", stderr.display()));
        let mut child = Command::new(python)
            .arg(script)
            .args(args)
            .env("TUTTI_TEST_TOKEN", token)
            .env("PYTHONWARNINGS", "ignore")
            // `tests/py/sdk_prelude.py`, which inline scripts import.
            .env("PYTHONPATH", py_script(""))
            .env_remove("HTTP_PROXY")
            .env_remove("http_proxy")
            .env_remove("HTTPS_PROXY")
            .env_remove("https_proxy")
            .env_remove("ALL_PROXY")
            .env_remove("all_proxy")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run the Python client {}: {e}", script.display()));
        let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let v = serde_json::from_str(&line).unwrap_or(Value::String(line));
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        PySdk {
            child,
            lines,
            stderr,
        }
    }

    /// Writes `text` to `dir/name` and runs it like [`PySdk::spawn`].
    pub fn spawn_inline(
        dir: &Path,
        name: &str,
        text: &str,
        args: &[&str],
        token: &str,
        stderr: PathBuf,
    ) -> PySdk {
        let script = dir.join(name);
        std::fs::write(&script, text)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", script.display()));
        PySdk::spawn(&script, args, token, stderr)
    }

    /// The next line within [`PY_RUN`].
    pub fn next(&self, what: &str) -> Value {
        self.next_within(what, PY_RUN)
    }

    /// The next line within `timeout`; a timeout, the script's end or its `error` line fails
    /// the test with the script's stderr.
    pub fn next_within(&self, what: &str, timeout: Duration) -> Value {
        self.recv(what, timeout, timeout)
    }

    /// The next line within `left`; a timeout names `timeout`, the whole wait.
    fn recv(&self, what: &str, left: Duration, timeout: Duration) -> Value {
        match self.lines.recv_timeout(left) {
            Ok(v) if v["event"] == "error" => panic!(
                "the Python client failed waiting for {what}: {v}\n{}",
                self.stderr_text()
            ),
            Ok(v) => v,
            Err(RecvTimeoutError::Timeout) => panic!(
                "the Python client: no {what} within {timeout:?}\n{}",
                self.stderr_text()
            ),
            Err(RecvTimeoutError::Disconnected) => panic!(
                "the Python client ended before {what}\n{}",
                self.stderr_text()
            ),
        }
    }

    /// Skips lines until one satisfies `pred` within `timeout`; that line.
    pub fn until(&self, what: &str, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = self.recv(what, left, timeout);
            if pred(&v) {
                return v;
            }
        }
    }

    /// The last 40 lines of the script's stderr.
    pub fn stderr_text(&self) -> String {
        format!(
            "stderr ({}):\n{}",
            self.stderr.display(),
            file_tail(&self.stderr, 40)
        )
    }
}

impl Drop for PySdk {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

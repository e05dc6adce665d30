//! Direct clients of an MCP server process: [`StdioClient`] (newline-delimited JSON-RPC on
//! the child's stdin/stdout) and [`FixtureHttp`] (the fixture in `--http` mode).

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{LEGACY_VERSION, fixture_bin};

/// How long [`StdioClient::request`] waits for a response.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// A stdio MCP server child and a line-oriented JSON-RPC client of it. Non-JSON stdout lines
/// are delivered as `Value::String`. Stderr goes to a file ([`StdioClient::stderr`]). Dropping
/// it kills and reaps the child.
pub struct StdioClient {
    child: Child,
    stdin: Option<ChildStdin>,
    rx: Receiver<Value>,
    stash: VecDeque<Value>,
    next_id: i64,
    stderr_file: tempfile::NamedTempFile,
}

impl StdioClient {
    /// Spawns `program args…`.
    pub fn spawn(program: &Path, args: &[&str]) -> StdioClient {
        let mut cmd = Command::new(program);
        cmd.args(args);
        Self::spawn_cmd(cmd)
    }

    /// Spawns the fixture server with `args`.
    pub fn fixture(args: &[&str]) -> StdioClient {
        Self::spawn(&fixture_bin(), args)
    }

    /// Spawns a prepared command (its stdin/stdout/stderr are replaced).
    pub fn spawn_cmd(mut cmd: Command) -> StdioClient {
        let stderr_file = tempfile::NamedTempFile::new()
            .unwrap_or_else(|e| panic!("cannot create a stderr file: {e}"));
        let stderr = stderr_file
            .reopen()
            .unwrap_or_else(|e| panic!("cannot open the stderr file: {e}"));
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {cmd:?}: {e}"));
        let stdout = child
            .stdout
            .take()
            .unwrap_or_else(|| panic!("no stdout pipe for {cmd:?}"));
        let stdin = child.stdin.take();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match reader.read_until(b'\n', &mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                let line = buf.trim_ascii();
                if line.is_empty() {
                    continue;
                }
                let v = serde_json::from_slice(line)
                    .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(line).into_owned()));
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        StdioClient {
            child,
            stdin,
            rx,
            stash: VecDeque::new(),
            next_id: 1,
            stderr_file,
        }
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything the child wrote to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read(self.stderr_file.path())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// Writes one message (one line). Panics if stdin is closed.
    pub fn send(&mut self, msg: &Value) {
        let stdin = self
            .stdin
            .as_mut()
            .unwrap_or_else(|| panic!("stdin already closed"));
        let mut line = msg.to_string().into_bytes();
        line.push(b'\n');
        stdin
            .write_all(&line)
            .and_then(|()| stdin.flush())
            .unwrap_or_else(|e| panic!("cannot write to the server: {e}"));
    }

    /// Writes raw bytes (e.g. a line that is not JSON).
    pub fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self
            .stdin
            .as_mut()
            .unwrap_or_else(|| panic!("stdin already closed"));
        stdin
            .write_all(bytes)
            .and_then(|()| stdin.flush())
            .unwrap_or_else(|e| panic!("cannot write to the server: {e}"));
    }

    /// Sends a request with a fresh integer id and returns that id (does not wait).
    pub fn start_request(&mut self, method: &str, params: Value) -> Value {
        let id = json!(self.next_id);
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// Sends a request and waits (10 s) for its response; other messages are kept for
    /// [`StdioClient::recv`]. Returns the whole response message.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.start_request(method, params);
        self.response(&id, DEFAULT_TIMEOUT).unwrap_or_else(|| {
            panic!(
                "no response to {method} (id {id}) within {DEFAULT_TIMEOUT:?}; stderr:\n{}",
                self.stderr()
            )
        })
    }

    /// Sends a notification.
    pub fn notify(&mut self, method: &str, params: Value) {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// `initialize` + `notifications/initialized`; returns the initialize result.
    pub fn initialize(&mut self) -> Value {
        let r = self.request(
            "initialize",
            json!({"protocolVersion": LEGACY_VERSION, "capabilities": {},
                   "clientInfo": {"name": "tutti-tests", "version": "0"}}),
        );
        self.notify("notifications/initialized", json!({}));
        r.get("result")
            .cloned()
            .unwrap_or_else(|| panic!("initialize failed: {r}"))
    }

    /// Waits for the response with `id`.
    pub fn response(&mut self, id: &Value, timeout: Duration) -> Option<Value> {
        self.wait_for(timeout, |m| {
            m.get("id") == Some(id) && m.get("method").is_none()
        })
    }

    /// Waits for the first message matching `pred` (stashed ones first); the others are kept.
    pub fn wait_for(&mut self, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Option<Value> {
        if let Some(pos) = self.stash.iter().position(&pred) {
            return self.stash.remove(pos);
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(v) if pred(&v) => return Some(v),
                Ok(v) => self.stash.push_back(v),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// The next message of any kind.
    pub fn recv(&mut self, timeout: Duration) -> Option<Value> {
        self.wait_for(timeout, |_| true)
    }

    /// Closes the child's stdin (EOF).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Waits for the child to exit; `None` if it is still running after `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.child.try_wait() {
                Ok(Some(s)) => return Some(s),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => return None,
            }
        }
    }
}

impl Drop for StdioClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The fixture server in `--http` mode, killed and reaped on drop.
pub struct FixtureHttp {
    child: Child,
    /// The bound port.
    pub port: u16,
    /// `http://127.0.0.1:<port>/mcp`.
    pub url: String,
}

impl FixtureHttp {
    /// Starts `tutti-fixture-server --http 0 ARGS…` and waits for `listening <port>`.
    pub fn start(args: &[&str]) -> FixtureHttp {
        Self::start_on(0, args)
    }

    /// Like [`FixtureHttp::start`] on a given port (0 = pick one).
    pub fn start_on(port: u16, args: &[&str]) -> FixtureHttp {
        let mut child = Command::new(fixture_bin())
            .args(["--http", &port.to_string()])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn the fixture server: {e}"));
        let stdout = child
            .stdout
            .take()
            .unwrap_or_else(|| panic!("no stdout pipe for the fixture"));
        let mut lines = BufReader::new(stdout).lines();
        let port = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some(p) = line.strip_prefix("listening ") {
                        break p
                            .trim()
                            .parse::<u16>()
                            .unwrap_or_else(|e| panic!("bad port in {line:?}: {e}"));
                    }
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("the fixture server exited before printing `listening <port>`");
                }
            }
        };
        // Keep draining stdout so the child never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        FixtureHttp {
            child,
            port,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the server and waits until it is gone (its port is free again).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends `order` to `POST /control` (see `fixture/http.rs`) and checks it was taken.
    pub fn control(&self, order: &Value) {
        use std::io::Read as _;
        let body = order.to_string();
        let mut conn = std::net::TcpStream::connect(("127.0.0.1", self.port))
            .unwrap_or_else(|e| panic!("cannot reach the fixture's /control: {e}"));
        let request = format!(
            "POST /control HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let mut answer = String::new();
        conn.write_all(request.as_bytes())
            .and_then(|()| conn.read_to_string(&mut answer))
            .unwrap_or_else(|e| panic!("the fixture's /control failed: {e}"));
        assert!(
            answer.starts_with("HTTP/1.1 200"),
            "the fixture refused {order}: {answer}"
        );
    }

    /// Waits for the server to exit; `None` if it is still running after `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.child.try_wait() {
                Ok(Some(s)) => return Some(s),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => return None,
            }
        }
    }
}

impl Drop for FixtureHttp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

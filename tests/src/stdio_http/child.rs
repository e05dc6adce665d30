//! One stdio MCP server process behind the adapter: lines written to its stdin, and each line
//! of its stdout handed to the HTTP exchange it belongs to.
//!
//! A line goes to: the request it answers (by id); for a notification or a request of the
//! server, the listen request its `_meta` subscription id names, the request whose
//! `progressToken` it carries, else the one request in flight that is not a listen, else the
//! first open GET stream (2025-era sessions); otherwise it is dropped. Stdio carries no more
//! than that, so nothing else is guessed.

use std::ffi::OsString;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};

const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// A request waiting for its answer, and where its stream's lines go.
struct Pending {
    /// The request id as JSON text.
    id: String,
    progress: Option<String>,
    listen: bool,
    lines: UnboundedSender<String>,
}

#[derive(Default)]
struct Routes {
    pending: Vec<Pending>,
    streams: Vec<UnboundedSender<String>>,
}

/// A running stdio server; dropping the last handle closes its stdin and kills it.
pub(super) struct StdioServer {
    /// `None` once closed.
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
    routes: Mutex<Routes>,
    child: tokio::sync::Mutex<Child>,
}

/// An exchange's receiving end: the lines of its request's stream, ending after the answer.
/// Dropped before the answer came, it withdraws the request with `notifications/cancelled`.
pub(super) struct Exchange {
    pub(super) lines: UnboundedReceiver<String>,
    server: Arc<StdioServer>,
    id: String,
    answered: bool,
}

impl StdioServer {
    /// Starts `command` with piped stdin and stdout (stderr inherited).
    pub(super) fn start(command: &[OsString]) -> std::io::Result<Arc<StdioServer>> {
        let (program, args) = command
            .split_first()
            .ok_or_else(|| std::io::Error::other("no command to run"))?;
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| std::io::Error::other("no stdin"))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| std::io::Error::other("no stdout"))?;
        let server = Arc::new(StdioServer {
            stdin: tokio::sync::Mutex::new(Some(stdin)),
            routes: Mutex::new(Routes::default()),
            child: tokio::sync::Mutex::new(child),
        });
        let weak = Arc::downgrade(&server);
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let Some(server) = weak.upgrade() else { return };
                server.route(line);
            }
        });
        Ok(server)
    }

    /// Writes one message as one line.
    pub(super) async fn write(&self, message: &str) -> std::io::Result<()> {
        let mut stdin = self.stdin.lock().await;
        let stdin = stdin
            .as_mut()
            .ok_or_else(|| std::io::Error::other("stdin closed"))?;
        stdin.write_all(message.as_bytes()).await?;
        stdin.write_all(b"\n").await?;
        stdin.flush().await
    }

    /// Closes stdin (how a stdio client ends its session) and waits up to `within` for the
    /// process to exit; kills it after that.
    pub(super) async fn end(&self, within: std::time::Duration) {
        drop(self.stdin.lock().await.take());
        let mut child = self.child.lock().await;
        if tokio::time::timeout(within, child.wait()).await.is_err() {
            let _ = child.kill().await;
        }
    }

    /// Registers request `message` (which has an id) and writes it. `None` when a request
    /// with the same id is still in flight on this server.
    pub(super) async fn request(self: &Arc<Self>, message: &Value) -> Option<Exchange> {
        let id = message.get("id")?.to_string();
        let params = message.get("params");
        let progress = params
            .and_then(|p| p.pointer("/_meta/progressToken"))
            .map(Value::to_string);
        let listen = message.get("method").and_then(Value::as_str) == Some("subscriptions/listen");
        let (tx, lines) = mpsc::unbounded_channel();
        {
            let mut routes = self.routes.lock().ok()?;
            if routes.pending.iter().any(|p| p.id == id) {
                return None;
            }
            routes.pending.push(Pending {
                id: id.clone(),
                progress,
                listen,
                lines: tx,
            });
        }
        let exchange = Exchange {
            lines,
            server: self.clone(),
            id,
            answered: false,
        };
        // A failed write leaves the exchange without lines: it ends with no answer.
        if self.write(&message.to_string()).await.is_err() {
            self.forget(&exchange.id);
        }
        Some(exchange)
    }

    /// A GET stream: every line no request claims.
    pub(super) fn stream(&self) -> UnboundedReceiver<String> {
        let (tx, rx) = mpsc::unbounded_channel();
        if let Ok(mut routes) = self.routes.lock() {
            routes.streams.push(tx);
        }
        rx
    }

    fn forget(&self, id: &str) {
        if let Ok(mut routes) = self.routes.lock() {
            routes.pending.retain(|p| p.id != id);
        }
    }

    fn route(&self, line: String) {
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            return;
        };
        let Ok(mut routes) = self.routes.lock() else {
            return;
        };
        routes.streams.retain(|s| !s.is_closed());
        let id = message.get("id").map(Value::to_string);
        if message.get("method").is_none() {
            // An answer: its request's stream ends with it.
            if let Some(at) = routes
                .pending
                .iter()
                .position(|p| Some(&p.id) == id.as_ref())
            {
                let _ = routes.pending.remove(at).lines.send(line);
            }
            return;
        }
        let params = message.get("params");
        let subscription = params
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get(SUBSCRIPTION_ID))
            .map(Value::to_string);
        let progress = params
            .and_then(|p| p.get("progressToken"))
            .map(Value::to_string);
        let calls: Vec<&Pending> = routes.pending.iter().filter(|p| !p.listen).collect();
        let sink = if let Some(sub) = subscription {
            routes.pending.iter().find(|p| p.id == sub)
        } else if let Some(token) = progress {
            routes
                .pending
                .iter()
                .find(|p| p.progress.as_ref() == Some(&token))
        } else if calls.len() == 1 {
            calls.first().copied()
        } else {
            None
        };
        match sink {
            Some(pending) => drop(pending.lines.send(line)),
            None => {
                if let Some(stream) = routes.streams.first() {
                    let _ = stream.send(line);
                }
            }
        }
    }
}

impl Exchange {
    /// The next line of the request's stream; `None` after the answer (or if the server
    /// went away).
    pub(super) async fn next(&mut self) -> Option<String> {
        let line = self.lines.recv().await?;
        if is_answer(&line) {
            self.answered = true;
        }
        Some(line)
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        self.server.forget(&self.id);
        let server = self.server.clone();
        let Ok(request_id) = serde_json::from_str::<Value>(&self.id) else {
            return;
        };
        let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": request_id, "reason": "the HTTP client closed the response"}});
        tokio::spawn(async move {
            let _ = server.write(&cancel.to_string()).await;
        });
    }
}

/// Whether `line` answers a request (a result or an error, no method).
pub(super) fn is_answer(line: &str) -> bool {
    serde_json::from_str::<Value>(line)
        .is_ok_and(|m| m.get("method").is_none() && m.get("id").is_some())
}

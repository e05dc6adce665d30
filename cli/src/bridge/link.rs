//! The bridge's session with the runtime: its token (asked of the kernel over the local
//! socket), the kernel that issued it, and a fresh token (with the client's `initialize`
//! replayed) when that kernel was replaced.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::{Mutex, Notify, RwLock};
use tutti_proto::kernel::{Empty, IssueSessionRequest, RevokeSessionRequest};

use super::conn::{Connections, Endpoint};
use super::http::{self, Peek, Target};
use super::params::ParamHeaders;
use crate::error::CliError;
use crate::kernel::Kernel;

/// How long a message waits for a runtime that went away to come back.
pub(super) const COMEBACK: Duration = Duration::from_secs(90);
const RETRY_PAUSE: Duration = Duration::from_millis(300);
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
/// The revision a request that names none is sent as before the client's `initialize`.
const MODERN_VERSION: &str = "2026-07-28";

/// One token's lifetime: the kernel that issued it and a counter that grows per token.
#[derive(Clone, Debug)]
pub(super) struct Current {
    pub(super) target: Target,
    kernel_pid: u32,
    pub(super) epoch: u64,
}

/// The outcome of [`Link::renew`].
pub(super) enum Renewal {
    /// This call replaced the token (and replayed `initialize`).
    Renewed(Current),
    /// Another message's call did already, or the same kernel still runs (the frontend
    /// restarted on its own, or the token was revoked): this is the session to use.
    Current(Current),
    /// No runtime came back in time; the line says so.
    Gone(String),
}

pub(super) struct Link {
    state_dir: PathBuf,
    request: IssueSessionRequest,
    pub(super) http: Connections,
    /// The `x-mcp-header` declarations of the listed tools (2026-07-28).
    pub(super) params: ParamHeaders,
    current: RwLock<Current>,
    renewing: Mutex<()>,
    /// The client's `initialize` line, replayed for a new token (2025-06-18 only).
    initialize: std::sync::Mutex<Option<String>>,
    /// The client's open `subscriptions/listen` requests (2026-07-28).
    pub(super) listens: OpenListens,
    /// The client sent a 2025-era `initialize`.
    legacy_client: AtomicBool,
}

/// Open listen requests by id (its JSON text), each with what ends it.
#[derive(Default)]
pub(super) struct OpenListens(std::sync::Mutex<HashMap<String, Arc<Notify>>>);

impl OpenListens {
    pub(super) fn open(&self, id: &Value) -> Arc<Notify> {
        let end = Arc::new(Notify::new());
        if let Ok(mut open) = self.0.lock() {
            open.insert(id.to_string(), end.clone());
        }
        end
    }

    pub(super) fn close(&self, id: &Value) {
        if let Ok(mut open) = self.0.lock() {
            open.remove(&id.to_string());
        }
    }

    /// A client's `notifications/cancelled` line: ends the open listen request it names.
    pub(super) fn cancelled(&self, line: &str) {
        let Ok(message) = serde_json::from_str::<Value>(line) else {
            return;
        };
        let Some(id) = message.pointer("/params/requestId") else {
            return;
        };
        if let Some(end) = self
            .0
            .lock()
            .ok()
            .and_then(|o| o.get(&id.to_string()).cloned())
        {
            end.notify_one();
        }
    }
}

impl Link {
    /// Asks the kernel of `state_dir` for a token.
    pub(super) async fn open(
        state_dir: &Path,
        request: IssueSessionRequest,
    ) -> Result<Link, CliError> {
        let (target, kernel_pid) = issue(state_dir, &request).await?;
        Ok(Link {
            state_dir: state_dir.to_path_buf(),
            request,
            http: Connections::default(),
            params: ParamHeaders::default(),
            current: RwLock::new(Current {
                target,
                kernel_pid,
                epoch: 0,
            }),
            renewing: Mutex::new(()),
            initialize: std::sync::Mutex::new(None),
            listens: OpenListens::default(),
            legacy_client: AtomicBool::new(false),
        })
    }

    /// The era of a client message, called in the order the lines came. A 2025-era client
    /// begins with `initialize` (a `ping` may come first); any other request before it whose
    /// `_meta` names no protocol version is a 2026-07-28 request missing what that revision
    /// requires, so it goes to that surface and gets its refusal (-32602), as from a
    /// 2026-07-28 stdio server, not the 2025 surface's answer.
    pub(super) fn place(&self, peek: &mut Peek) {
        match peek.method.as_deref() {
            Some("initialize") if peek.modern_version.is_none() => {
                self.legacy_client.store(true, Ordering::Relaxed);
            }
            Some("initialize" | "ping") | None => {}
            Some(_) => {
                if peek.id.is_some()
                    && peek.modern_version.is_none()
                    && !self.legacy_client.load(Ordering::Relaxed)
                {
                    peek.modern_version = Some(MODERN_VERSION.to_owned());
                }
            }
        }
    }

    pub(super) async fn current(&self) -> Current {
        self.current.read().await.clone()
    }

    /// Records the client's `initialize` and what its answer settled.
    pub(super) async fn initialized(
        &self,
        line: &str,
        epoch: u64,
        session: Option<String>,
        answer: &[String],
    ) {
        if let Ok(mut init) = self.initialize.lock() {
            *init = Some(line.to_owned());
        }
        let mut current = self.current.write().await;
        if current.epoch == epoch {
            http::settle(&mut current.target, session, answer);
        }
    }

    /// After a failure seen with `seen`: waits for a kernel; a new token (and the client's
    /// `initialize` replayed) when it is not the one that issued `seen`'s.
    pub(super) async fn renew(&self, seen: &Current) -> Renewal {
        let _one_at_a_time = self.renewing.lock().await;
        let now = self.current().await;
        if now.epoch != seen.epoch {
            return Renewal::Current(now);
        }
        let deadline = Instant::now() + COMEBACK;
        loop {
            if let Ok(mut kernel) = Kernel::connect(&self.state_dir).await {
                // The same kernel: its tokens (and revocations) stand. Unknown: ask again.
                let pid = kernel_pid(&mut kernel).await;
                if pid == Some(seen.kernel_pid) {
                    return Renewal::Current(now);
                }
                if pid.is_some()
                    && let Ok((target, kernel_pid)) = issue(&self.state_dir, &self.request).await
                {
                    let mut next = Current {
                        target,
                        kernel_pid,
                        epoch: seen.epoch + 1,
                    };
                    self.replay(&mut next.target).await;
                    *self.current.write().await = next.clone();
                    return Renewal::Renewed(next);
                }
            }
            if Instant::now() > deadline {
                return Renewal::Gone(format!(
                    "the Tutti runtime stopped and did not come back within {} s; start it with `{}`",
                    COMEBACK.as_secs(),
                    crate::kernel::up_command(&self.state_dir)
                ));
            }
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }

    /// Replays the client's `initialize` and `notifications/initialized` for a new token;
    /// the answers are the bridge's own (the client had its answer).
    async fn replay(&self, target: &mut Target) {
        let Some(line) = self.initialize.lock().ok().and_then(|i| i.clone()) else {
            return;
        };
        target.session_id = None;
        target.legacy_version = None;
        let peek = Peek::of(&line);
        let headers = http::headers(target, &peek);
        let Ok(answer) = http::post(&self.http, target, headers, line).await else {
            return;
        };
        let session = http::session_of(&answer);
        let (sink, _drop) = tokio::sync::mpsc::unbounded_channel();
        let lines = http::relay(answer, &peek, &sink).await;
        http::settle(target, session, &lines);
        let headers = http::headers(target, &Peek::default());
        let initialized = INITIALIZED.to_owned();
        if let Ok(answer) = http::post(&self.http, target, headers, initialized).await {
            // Read to its end (nothing is written): the connection serves the next message.
            http::relay(answer, &Peek::default(), &sink).await;
        }
    }

    /// Revokes this bridge's token (stdin closed).
    pub(super) async fn revoke(&self) {
        if let Ok(mut kernel) = Kernel::connect(&self.state_dir).await {
            let request = RevokeSessionRequest {
                workspace: self.request.workspace.clone(),
                session: self.request.session.clone(),
                all: false,
            };
            let _ = kernel.client.revoke_session(request).await;
        }
    }
}

async fn kernel_pid(kernel: &mut Kernel) -> Option<u32> {
    let reply = kernel.client.status(Empty {}).await.ok()?;
    Some(reply.into_inner().kernel_pid)
}

/// A token from the kernel of `state_dir`, and that kernel's pid.
async fn issue(state_dir: &Path, request: &IssueSessionRequest) -> Result<(Target, u32), CliError> {
    let mut kernel = Kernel::connect(state_dir).await?;
    let pid = kernel_pid(&mut kernel).await.unwrap_or(0);
    let reply = kernel
        .client
        .issue_session(request.clone())
        .await
        .map_err(|status| kernel.error(status))?
        .into_inner();
    let endpoint = Endpoint::of(&reply.url).ok_or_else(|| CliError::Bridge {
        reason: format!(
            "the kernel named a frontend URL that is not http://: {}",
            reply.url
        ),
    })?;
    let target = Target {
        endpoint,
        token: reply.token,
        session_id: None,
        legacy_version: None,
    };
    Ok((target, pid))
}

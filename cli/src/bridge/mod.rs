//! `tutti mcp-stdio` (SPEC §18): an MCP server over stdio for clients that launch their
//! servers as commands. It asks the kernel for a session token over the local socket (never
//! on an argv), then carries every line of stdin to the frontend as an HTTP POST, unchanged,
//! and every message of the answers (JSON or event streams) back to stdout, one per line.
//! For a 2025-06-18 client it also opens the notification stream after `initialize`; a
//! 2026-07-28 client's `subscriptions/listen` is a request held open across restarts
//! (`subscriptions.rs`). When the kernel is replaced (tokens end with it) the bridge takes a new
//! token, replays the client's `initialize`, and sends the message again: the client does not
//! notice. A `tools/call` whose connection broke after it was sent is not sent again (it may
//! have run): it is answered `[MCP_UNAVAILABLE]`. Closing stdin revokes the token.

mod conn;
mod http;
mod link;
mod params;
mod stdio;
mod subscriptions;

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use hyper::StatusCode;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};
use tutti_proto::kernel::IssueSessionRequest;

use crate::args::McpStdioArgs;
use crate::error::CliError;
use conn::Failure;
use http::Peek;
use link::{Current, Link, Renewal};

/// JSON-RPC code of the bridge's own errors (implementation-defined server error).
const BRIDGE_ERROR: i64 = -32000;
/// JSON-RPC code of SPEC §5's `[MCP_UNAVAILABLE]` answers.
const INTERNAL_ERROR: i64 = -32603;

/// The answer to a `tools/call` of `tool` (`<key>_<tool>`) whose connection broke before its
/// answer came, in SPEC §5's form `[MCP_UNAVAILABLE] <key>: …` (the runtime's server name when
/// the name holds no key).
fn call_lost(tool: Option<&str>) -> String {
    let key = tool
        .and_then(|t| t.split_once('_'))
        .map_or("connector", |(key, _)| key);
    format!(
        "[MCP_UNAVAILABLE] {key}: the runtime went away during the call and its answer was \
         lost; the call may have reached the upstream, so it is not sent again"
    )
}

pub(crate) async fn run(state_dir: &Path, args: McpStdioArgs) -> Result<ExitCode, CliError> {
    // Dropped last, when the bridge ends: shared pipes are blocking again.
    let (stdin, stdout, _restore) = stdio::open();
    let (out, rx) = mpsc::unbounded_channel::<String>();
    let writer = tokio::spawn(write_stdout(stdout, rx));
    let mut lines = BufReader::new(stdin).lines();
    let request = IssueSessionRequest {
        workspace: args.workspace.unwrap_or_else(default_workspace),
        session: args
            .session
            .unwrap_or_else(|| format!("mcp-stdio-{}", std::process::id())),
        tools: args.tools.wire().into(),
        confirm_high: args.confirm.high(),
        confirm_via_person: args.confirm.via().0,
        confirm_via_agent: args.confirm.via().1,
    };
    let link = match Link::open(state_dir, request).await {
        Ok(link) => Arc::new(link),
        Err(err) => {
            // Answer the client's first request (its `initialize`) with the reason, then exit.
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(id) = Peek::of(&line).id {
                    let _ = out.send(http::rpc_error(&id, BRIDGE_ERROR, &err.to_string()));
                    break;
                }
            }
            drop(out);
            let _ = writer.await;
            return Err(err);
        }
    };
    while let Ok(Some(line)) = lines.next_line().await {
        if !line.trim().is_empty() {
            tokio::spawn(forward(link.clone(), line, out.clone()));
        }
    }
    link.revoke().await;
    drop(out);
    Ok(ExitCode::SUCCESS)
}

/// The workspace a bridge files its session under by default: the directory it runs in.
fn default_workspace() -> String {
    std::env::current_dir()
        .map(|d| d.display().to_string())
        .unwrap_or_else(|_| "mcp-stdio".to_owned())
}

async fn write_stdout(mut stdout: stdio::Output, mut rx: UnboundedReceiver<String>) {
    while let Some(mut line) = rx.recv().await {
        line.push('\n');
        if stdout.write_all(line.as_bytes()).await.is_err() || stdout.flush().await.is_err() {
            return;
        }
    }
}

/// Sends one client message to the frontend and its answer back; across a kernel restart,
/// sends it again with the new token.
async fn forward(link: Arc<Link>, line: String, out: UnboundedSender<String>) {
    let mut peek = Peek::of(&line);
    link.place(&mut peek);
    let initialize = peek.method.as_deref() == Some("initialize");
    let modern = peek.modern_version.is_some();
    if modern && peek.method.as_deref() == Some("tools/call") {
        peek.params = link.params.for_call(&line);
    }
    if modern && peek.id.is_some() && peek.method.as_deref() == Some("subscriptions/listen") {
        let gone = subscriptions::hold_open(&link, &line, &peek, &out, spawn_listen).await;
        if let (Some(reason), Some(id)) = (gone, &peek.id) {
            let _ = out.send(http::rpc_error(id, BRIDGE_ERROR, &reason));
        }
        return;
    }
    if peek.method.as_deref() == Some("notifications/cancelled") {
        link.listens.cancelled(&line);
    }
    loop {
        let current = link.current().await;
        let target = &current.target;
        let headers = http::headers(target, &peek);
        let failure = match http::post(&link.http, target, headers, line.clone()).await {
            Ok(answer) if answer.response.status() != StatusCode::UNAUTHORIZED => {
                let session = http::session_of(&answer);
                let answer = http::relay(answer, &peek, &out).await;
                if modern && peek.method.as_deref() == Some("tools/list") {
                    link.params.learn(&answer);
                }
                if initialize && !modern {
                    link.initialized(&line, current.epoch, session, &answer)
                        .await;
                    tokio::spawn(listen(link.clone(), current.epoch, out.clone()));
                }
                return;
            }
            Ok(unauthorized) => Some(unauthorized),
            // The connection broke after the call may have reached the frontend: it may have
            // run, so it is not sent twice. Anything else is sent again.
            Err(Failure::Cut) if peek.method.as_deref() == Some("tools/call") => {
                if let Some(id) = &peek.id {
                    let lost = call_lost(peek.name.as_deref());
                    let _ = out.send(http::rpc_error(id, INTERNAL_ERROR, &lost));
                }
                return;
            }
            Err(_) => None,
        };
        match link.renew(&current).await {
            Renewal::Renewed(next) => spawn_listen(&link, &next, &out),
            Renewal::Current(next) if next.epoch != current.epoch => {}
            // Same kernel: a 401 means the token was revoked, so the answer stands; a
            // frontend that is not there yet is waited for.
            Renewal::Current(_) => match failure {
                Some(unauthorized) => {
                    http::relay(unauthorized, &peek, &out).await;
                    return;
                }
                None => tokio::time::sleep(Duration::from_millis(300)).await,
            },
            Renewal::Gone(reason) => {
                if let Some(id) = &peek.id {
                    let _ = out.send(http::rpc_error(id, BRIDGE_ERROR, &reason));
                }
                return;
            }
        }
    }
}

/// A renewed 2025-06-18 session gets its notification stream again.
fn spawn_listen(link: &Arc<Link>, next: &Current, out: &UnboundedSender<String>) {
    if next.target.legacy_version.is_some() {
        tokio::spawn(listen(link.clone(), next.epoch, out.clone()));
    }
}

/// The 2025-06-18 notification stream of token `epoch`, relayed until the token is replaced
/// or revoked; when it ends because the runtime went away, the session is renewed.
async fn listen(link: Arc<Link>, epoch: u64, out: UnboundedSender<String>) {
    let mut failures = 0u32;
    loop {
        let current = link.current().await;
        if current.epoch != epoch || current.target.legacy_version.is_none() {
            return;
        }
        match http::open_stream(&link.http, &current.target).await {
            Ok(answer) if answer.response.status().is_success() => {
                failures = 0;
                http::relay(answer, &Peek::default(), &out).await;
            }
            // No stream for this session (revoked, or not offered): nothing to relay.
            Ok(_) if failures > 0 => return,
            Ok(_) | Err(_) => failures += 1,
        }
        match link.renew(&current).await {
            Renewal::Renewed(next) => return spawn_listen(&link, &next, &out),
            Renewal::Current(next) if next.epoch != epoch => return,
            Renewal::Current(_) => tokio::time::sleep(Duration::from_millis(500)).await,
            Renewal::Gone(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::call_lost;

    #[test]
    fn a_lost_call_names_its_connector_as_the_runtime_does() {
        assert!(
            call_lost(Some("gh-issues_create_issue")).starts_with("[MCP_UNAVAILABLE] gh-issues: ")
        );
        assert!(call_lost(Some("plain")).starts_with("[MCP_UNAVAILABLE] connector: "));
        assert!(call_lost(None).starts_with("[MCP_UNAVAILABLE] connector: "));
    }
}

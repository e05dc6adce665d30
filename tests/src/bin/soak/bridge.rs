//! The stdio-bridge client: `tutti mcp-stdio` with its stdin and stdout on pipes, one
//! JSON-RPC message a line, as a client that launches its servers as commands runs it. It
//! calls what the HTTP clients call for the whole run; the bridge asks the kernel for its own
//! tokens and must outlive every kernel restart.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{Value, json};
use tutti_tests::{LEGACY_VERSION, StdioClient, bin};

use super::clients::{Sent, TARGETS, request_of};
use super::setup::BRIDGE_SESSION;
use super::world::{Call, Shared, WORKSPACE, nap, now_ms};

/// Starts the bridge on the soak's state dir.
pub fn start(shared: &Shared) -> StdioClient {
    let mut cmd = Command::new(bin("tutti"));
    cmd.arg("--state-dir")
        .arg(&shared.state_dir)
        .args([
            "mcp-stdio",
            "--workspace",
            WORKSPACE,
            "--session",
            BRIDGE_SESSION,
        ])
        .env_remove("TUTTI_STATE_DIR");
    let client = StdioClient::spawn_cmd(cmd);
    shared.bridge_pid.store(client.pid(), Ordering::Relaxed);
    client
}

/// The answer to request `id`, or `None` once the call is overdue (a hang).
fn answer(
    client: &mut StdioClient,
    id: &Value,
    shared: &Shared,
    start_ms: i64,
) -> Option<Result<(u16, Value), String>> {
    loop {
        if let Some(message) = client.response(id, Duration::from_millis(250)) {
            return Some(Ok((200, message)));
        }
        if client.wait_exit(Duration::ZERO).is_some() {
            return Some(Err("the bridge exited".to_owned()));
        }
        if shared.overdue(start_ms) {
            return None;
        }
    }
}

/// `initialize` through the bridge; false (and a fault) when it is not answered.
fn hello(client: &mut StdioClient, shared: &Shared) -> bool {
    let id = client.start_request(
        "initialize",
        json!({"protocolVersion": LEGACY_VERSION, "capabilities": {},
               "clientInfo": {"name": "tutti-soak", "version": "1"}}),
    );
    match client.response(&id, Duration::from_secs(30)) {
        Some(m) if m.get("result").is_some() => {
            client.notify("notifications/initialized", json!({}));
            true
        }
        other => {
            shared.fault(format!(
                "the stdio bridge did not answer initialize: {other:?}; stderr:\n{}",
                client.stderr()
            ));
            false
        }
    }
}

/// Calls through the bridge until the soak stops, then closes its stdin: it must exit.
pub fn run(mut client: StdioClient, shared: Arc<Shared>, pace: Duration) -> Vec<Call> {
    let mut calls = Vec::new();
    if !hello(&mut client, &shared) {
        return calls;
    }
    let mut n = 0usize;
    while !shared.stopping() {
        if client.wait_exit(Duration::ZERO).is_some() {
            shared.fault(format!(
                "the stdio bridge exited during the run; stderr:\n{}",
                client.stderr()
            ));
            return calls;
        }
        n += 1;
        let t = &TARGETS[n % TARGETS.len()];
        let message = format!("bridge-{n}");
        let (method, params) = request_of(t, false, &message);
        let sent = Sent {
            client: "bridge",
            session: BRIDGE_SESSION,
            target: t,
            token: None,
            message,
            start_ms: now_ms(),
        };
        let id = client.start_request(method, params);
        let reply = answer(&mut client, &id, &shared, sent.start_ms);
        calls.push(sent.record(&shared, reply));
        // Notifications (list changes) are not what the soak counts.
        while client.recv(Duration::ZERO).is_some() {}
        nap(&shared, pace);
    }
    client.close_stdin();
    if client.wait_exit(Duration::from_secs(15)).is_none() {
        shared.fault("the stdio bridge did not exit within 15 s of its stdin closing".into());
    }
    calls
}

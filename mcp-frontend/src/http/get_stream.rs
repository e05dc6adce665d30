//! The 2025-06-18 notification stream (SPEC §11): `GET /mcp/connector` with
//! `Accept: text/event-stream` and a live token opens a server-to-client stream for that
//! token (the token is the session; its `Mcp-Session-Id`, `session/ids.rs`, may be carried, and
//! a `DELETE` with it ends the token's GET streams). It carries
//! `notifications/tools/list_changed` after every committed change of the tool set, the
//! prompts/resources list changes and the token's resource updates (`session/notify.rs`), and
//! whatever [`deliver`] is given for the token (log messages, resource updates, other
//! list_changed kinds); keep-alive comments every 10 s; it ends when the token is revoked
//! (a reissue revokes the old token, so its stream ends too) or the runtime stops.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::response::Response;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, Interval, MissedTickBehavior};

use crate::app::App;
use crate::backend::Identity;
use crate::session::clients::TokenKey;

/// SPEC §11 asks for a keep-alive at least every 15 s (as for `subscriptions/listen`).
const KEEP_ALIVE: Duration = Duration::from_secs(10);

/// The capabilities the legacy surface declares now that it has this stream (SPEC §11).
pub(crate) fn legacy_capabilities() -> Value {
    json!({
        "tools": {"listChanged": true},
        "resources": {"subscribe": true, "listChanged": true},
        "prompts": {"listChanged": true},
        "logging": {},
    })
}

/// Sends one notification (a full JSON-RPC message) to every open GET stream of `token`;
/// dropped for a stream that is behind or when there is none.
pub(crate) fn deliver(app: &App, token: &TokenKey, message: &Value) {
    app.clients.push(token, message);
}

/// Unregisters the stream when the response body is dropped.
struct Registration {
    app: Arc<App>,
    listener: u64,
    stream: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.app.listeners.unregister(self.listener);
        self.app.clients.unregister_stream(self.stream);
    }
}

struct Stream {
    tools: watch::Receiver<u64>,
    end: watch::Receiver<bool>,
    pushed: mpsc::Receiver<Value>,
    /// Prompts/resources list changes and this identity's resource updates (`session/notify.rs`).
    events: crate::session::notify::Events,
    keep_alive: Interval,
    _registration: Registration,
}

/// Opens the stream. `ticket_at_start` is the session cache's epoch read before the token
/// was verified, so a revocation racing with this request is not missed.
pub(crate) async fn open(
    app: Arc<App>,
    identity: Identity,
    token: &str,
    key: TokenKey,
    ticket_at_start: crate::session::sessions::Ticket,
) -> Response {
    let mut tools = app.tools_version.subscribe();
    tools.borrow_and_update();
    let events = app.notifier.events(identity.clone());
    let (listener, end) = app.listeners.register(identity);
    let (stream, pushed) = app.clients.register_stream(key);
    let registration = Registration {
        app: app.clone(),
        listener,
        stream,
    };
    let mut ended = *end.borrow();
    if !ended && app.sessions.ticket() != ticket_at_start {
        ended = !matches!(app.backend.verify_session(token).await, Ok(Some(_)));
    }
    let mut keep_alive = tokio::time::interval_at(Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
    keep_alive.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let state = Stream {
        tools,
        end,
        pushed,
        events,
        keep_alive,
        _registration: registration,
    };
    // The head goes out at once (with a first comment): the client sees the stream open.
    let first = (!ended).then(|| Bytes::from_static(b": open\n\n"));
    let rest = futures_util::stream::unfold((state, ended), |(state, ended)| async move {
        if ended {
            return None;
        }
        next_frame(state)
            .await
            .map(|(frame, s)| (frame, (s, false)))
    });
    crate::rpc::event_stream_response(futures_util::StreamExt::chain(
        futures_util::stream::iter(first),
        rest,
    ))
}

async fn next_frame(mut s: Stream) -> Option<(Bytes, Stream)> {
    loop {
        let message = tokio::select! {
            biased;
            () = ended(&mut s.end) => return None,
            changed = s.tools.changed() => {
                changed.ok()?;
                s.tools.borrow_and_update();
                json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
            }
            // `None`: a DELETE with the session id ended this stream (`Clients::close_streams`).
            message = s.pushed.recv() => message?,
            Some(note) = s.events.next() => {
                // Tool list changes come from `tools` above (once per committed change).
                if note.get("method").and_then(Value::as_str)
                    == Some("notifications/tools/list_changed")
                {
                    continue;
                }
                note
            }
            _ = s.keep_alive.tick() => return Some((Bytes::from_static(b": keep-alive\n\n"), s)),
        };
        return Some((frame(&message), s));
    }
}

/// Resolves once the stream must end (also if its registry entry is gone).
async fn ended(end: &mut watch::Receiver<bool>) {
    let _ = end.wait_for(|end| *end).await;
}

fn frame(message: &Value) -> Bytes {
    crate::rpc::sse_event(message.to_string().as_bytes())
}

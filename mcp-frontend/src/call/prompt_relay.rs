//! `prompts/get` whose upstream asks the client something during it (SPEC §11): the
//! upstream's `elicitation/create`, `sampling/createMessage` and `roots/list` (a 2025-era
//! upstream's requests on the request's stream, a 2026-07-28 upstream's `input_required`
//! rounds) reach the client exactly as during a `tools/call`, through the same machinery
//! ([`crate::call::relay`]): the worker call is `CallToolStream` with `method: "prompts/get"`, the
//! legacy client gets SSE requests on the `prompts/get` response stream, the modern client an
//! `input_required` result with a `requestState` of this frontend's own, bound to the token
//! and to [`parked_name`] (a tool call's state never resumes a prompt, nor the reverse).
//! Bounded by the connector's call timeout, cancelled with the request (legacy
//! `notifications/cancelled`, or the client closing the answer), audited with the relayed
//! kinds and outcomes.
//!
//! A `prompts/get` from a client that can answer nothing (no capability, no event stream on
//! the legacy surface) keeps the unary forward (`beyond::get_prompt`).

use std::sync::Arc;

use axum::response::Response;
use serde_json::Value;
use tokio::sync::oneshot;

use crate::call::progress::accepts_event_stream;
use crate::call::relay::{self, Answering, Era, Running};
use crate::catalog::beyond;
use crate::era::shared::Ctx;
use crate::rpc;
use crate::session::clients::Caps;

/// `_meta` key of the modern request's log level.
const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";

/// What a retry of a parked `prompts/get` of `prompt` is matched by (tool names cannot hold a
/// space, so it never equals a tool's).
pub(crate) fn parked_name(prompt: &str) -> String {
    format!("prompts/get {prompt}")
}

/// Whether a legacy `prompts/get` is relayed: the client may be asked something or sent log
/// messages, and it takes an event stream.
pub(crate) fn legacy_relays(ctx: &Ctx) -> bool {
    let client = ctx.app.clients.state(&ctx.token_key);
    (client.caps.any() || client.log_level.is_some()) && accepts_event_stream(&ctx.headers)
}

/// Whether a modern `prompts/get` is relayed: it declares a capability an upstream request
/// needs, resumes a parked one, or asks for log messages on an event stream.
pub(crate) fn modern_relays(ctx: &Ctx, params: Option<&Value>) -> bool {
    let meta = params.and_then(|p| p.get("_meta"));
    params.is_some_and(|p| p.get("requestState").is_some())
        || modern_caps(params).any()
        || (meta.is_some_and(|m| m.get(LOG_LEVEL).is_some()) && accepts_event_stream(&ctx.headers))
}

fn modern_caps(params: Option<&Value>) -> Caps {
    Caps::from_json(
        params
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get("io.modelcontextprotocol/clientCapabilities")),
    )
}

/// A legacy `prompts/get` answered as an event stream with the upstream's requests on it.
pub(crate) async fn legacy(ctx: Ctx, id: Value, params: Option<Value>) -> Response {
    let prompt = match beyond::resolve_prompt(&ctx.app, params).await {
        Ok(prompt) => prompt,
        Err(e) => return rpc::answer_response(&id, Err(e)),
    };
    let (pending, cancelled) = ctx.app.register_pending(&ctx.identity, &id);
    let client = ctx.app.clients.state(&ctx.token_key);
    let how = How {
        requests: client.caps.any(),
        logs: client.log_level.is_some(),
        cancelled: Some(cancelled),
        modern: false,
    };
    let running = start(&ctx, prompt, how);
    let answering = Answering {
        app: ctx.app.clone(),
        token: ctx.token_key,
        id,
        era: Era::Legacy,
        progress: None,
        log_level: client.log_level,
        streams: true,
        caps: client.caps,
        _hold: Some(Box::new(pending)),
    };
    relay::respond(answering, running).await
}

/// A modern `prompts/get` that may be answered `input_required`, or resumes one.
pub(crate) async fn modern(ctx: &Ctx, id: &Value, params: Option<Value>) -> Response {
    let streams = accepts_event_stream(&ctx.headers);
    let log_level = params
        .as_ref()
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(LOG_LEVEL))
        .and_then(Value::as_str)
        .and_then(crate::session::clients::level_rank)
        .filter(|_| streams);
    let caps = modern_caps(params.as_ref());
    let resumed = params.as_ref().filter(|p| p.get("requestState").is_some());
    let running = match resumed {
        Some(p) => {
            let name = p.get("name").and_then(Value::as_str).unwrap_or_default();
            relay::resume_modern(&ctx.app, &ctx.token_key, &parked_name(name), p)
        }
        None => beyond::resolve_prompt(&ctx.app, params)
            .await
            .map(|prompt| {
                let how = How {
                    requests: true,
                    logs: log_level.is_some(),
                    cancelled: None,
                    modern: true,
                };
                start(ctx, prompt, how)
            }),
    };
    let running = match running {
        Ok(running) => running,
        Err(e) => return rpc::answer_response(id, Err(e)),
    };
    let answering = Answering {
        app: ctx.app.clone(),
        token: ctx.token_key,
        id: id.clone(),
        era: Era::Modern,
        progress: None,
        log_level,
        streams,
        caps,
        _hold: None,
    };
    relay::respond(answering, running).await
}

/// How a relayed `prompts/get` runs: what the client can take during it (`requests`, `logs`),
/// its legacy cancellation, and whether the result is in the modern form.
struct How {
    requests: bool,
    logs: bool,
    cancelled: Option<oneshot::Receiver<()>>,
    modern: bool,
}

/// Starts the relayed `prompts/get` in a task of its own.
fn start(ctx: &Ctx, prompt: beyond::Prompt, how: How) -> Running {
    let (app, who) = (Arc::clone(&ctx.app), ctx.identity.clone());
    let connector = prompt.entry.connector.clone();
    let name = parked_name(&prompt.name);
    let How {
        requests,
        logs,
        cancelled,
        modern,
    } = how;
    relay::spawn(
        connector,
        name,
        (requests, logs),
        move |stream, _| async move {
            let via = (stream, cancelled);
            beyond::get_prompt_relayed(&app, &who, prompt, via, modern).await
        },
    )
}

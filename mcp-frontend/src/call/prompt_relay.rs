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
//! Whether a `prompts/get` is relayed is the call path's one decision ([`crate::call::path`]);
//! one that is not keeps the unary forward (`beyond::get_prompt`).

use std::sync::Arc;

use axum::response::Response;
use serde_json::Value;
use tokio::sync::oneshot;

use crate::call::path::Caller;
use crate::call::relay::{self, Era, Running};
use crate::catalog::beyond;
use crate::era::shared::Ctx;
use crate::rpc;

/// What a retry of a parked `prompts/get` of `prompt` is matched by (tool names cannot hold a
/// space, so it never equals a tool's).
pub(crate) fn parked_name(prompt: &str) -> String {
    format!("prompts/get {prompt}")
}

/// A `prompts/get` the call path relays ([`crate::call::path::how_sent`]), or a modern retry
/// that resumes one: answered by the relay as the call goes (legacy: the upstream's requests
/// on the response's event stream; modern: `input_required` when the upstream asks).
pub(crate) async fn relayed(
    ctx: &Ctx,
    id: &Value,
    params: Option<Value>,
    mut caller: Caller,
) -> Response {
    let resumed = params.as_ref().filter(|_| caller.resuming);
    let running = match resumed {
        Some(p) => {
            let name = p.get("name").and_then(Value::as_str).unwrap_or_default();
            relay::resume_modern(&ctx.app, &ctx.token_key, &parked_name(name), p)
        }
        None => beyond::resolve_prompt(&ctx.app, params)
            .await
            .map(|prompt| {
                let (requests, logs) = caller.relays();
                let how = How {
                    requests,
                    logs,
                    cancelled: caller.cancelled(),
                    modern: caller.era == Era::Modern,
                };
                start(ctx, prompt, how)
            }),
    };
    match running {
        Ok(running) => relay::respond(caller.answering(ctx, id), running).await,
        Err(e) => rpc::answer_response(id, Err(e)),
    }
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

//! The one path of a call, for both eras: each era describes its client ([`Caller`]),
//! [`how_sent`] decides how the call is sent (refused unsent, relayed through the client,
//! streamed with progress, or plain) and [`tools_call`] sends a `tools/call` that way. A relayed
//! `prompts/get` takes the same decision ([`crate::call::prompt_relay`]).

use std::any::Any;
use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::Value;
use tokio::sync::oneshot;

use crate::call::confirm::{self, Ask};
use crate::call::execute::{self, Streaming};
use crate::call::progress;
use crate::call::relay::{self, Answering, Era, MISSING_CAPABILITY};
use crate::call::result::call_response;
use crate::catalog::routes::Tool;
use crate::catalog::search::{self, Routed};
use crate::era::shared::Ctx;
use crate::era::tables::Revision;
use crate::rpc;
use crate::session::clients::Caps;

/// What an era found out about the client of one call.
pub(crate) struct Caller {
    pub(crate) era: Era,
    /// The revision the answer is written in.
    pub(crate) revision: Revision,
    pub(crate) caps: Caps,
    /// The answer may be an event stream (`Accept` names `text/event-stream`).
    pub(crate) streams: bool,
    /// The client's progress token (progress asked for, an event stream accepted).
    pub(crate) progress: Option<Value>,
    /// The client asked for log messages (legacy: `logging/setLevel`; modern: a level in the
    /// request's `_meta`, on an event stream).
    pub(crate) logs: bool,
    /// Log messages at or above this rank go to the client.
    pub(crate) log_level: Option<u8>,
    /// A modern retry that resumes a parked call (`requestState`).
    pub(crate) resuming: bool,
    /// A modern client's own `inputResponses` sent without a `requestState`, as JSON.
    pub(crate) own_answers: Option<String>,
    /// The legacy client's `notifications/cancelled` for this request.
    pub(crate) cancel: Option<Cancel>,
}

/// A request the client can cancel: the registration, held until the answer is complete, and
/// the receiver the call waits on.
pub(crate) struct Cancel {
    pub(crate) hold: Box<dyn Any + Send>,
    pub(crate) cancelled: Option<oneshot::Receiver<()>>,
}

/// How a call is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sending {
    /// The person must confirm it and the client cannot be asked: refused, nothing sent.
    NotAsked,
    /// Through the relay: the client may be asked something or sent log messages, or it
    /// resumes a parked call.
    Relayed,
    /// Plain, answered as an event stream of the upstream's progress, then the answer.
    Progress,
    /// Plain, answered with one JSON response.
    Plain,
}

/// The one decision of how a call of `caller` is sent; `confirm`: who confirms it first
/// (`--confirm high`), as [`Caller::asks`] narrows it.
pub(crate) fn how_sent(caller: &Caller, confirm: Option<Ask>) -> Sending {
    let reachable = caller.reachable();
    if confirm.is_some_and(|a| !a.person && !a.agent) {
        return Sending::NotAsked;
    }
    let relays = confirm.is_some()
        || caller.caps.any()
        || caller.logs
        || caller.resuming
        || caller.own_answers.is_some();
    if relays && reachable {
        Sending::Relayed
    } else if caller.progress.is_some() {
        Sending::Progress
    } else {
        Sending::Plain
    }
}

impl Caller {
    /// A legacy relay answers on the call's event stream; a modern one with JSON results.
    fn reachable(&self) -> bool {
        self.streams || self.era == Era::Modern
    }

    /// Who of `confirm` can be asked about this caller's call: the agent's channel only when
    /// this client can be asked (it declared elicitation and can take the question).
    pub(crate) fn asks(&self, confirm: Option<Ask>) -> Option<Ask> {
        let can_elicit = self.caps.elicitation && self.reachable();
        confirm.map(|a| Ask {
            person: a.person,
            agent: a.agent && can_elicit,
        })
    }

    /// Takes out what the call waits on for the client's cancellation.
    pub(crate) fn cancelled(&mut self) -> Option<oneshot::Receiver<()>> {
        self.cancel.as_mut().and_then(|c| c.cancelled.take())
    }

    /// What the upstream may send this client during a relayed call: `(requests, logs)`. A
    /// modern call relays every request (one the client cannot answer ends it with -32021); a
    /// legacy one only when the client declared a capability.
    pub(crate) fn relays(&self) -> (bool, bool) {
        let requests = self.era == Era::Modern || self.caps.any();
        (requests, self.log_level.is_some())
    }

    /// How the relay writes the answer of request `id` of this client.
    pub(crate) fn answering(self, ctx: &Ctx, id: &Value) -> Answering {
        Answering {
            app: ctx.app.clone(),
            token: ctx.token_key,
            id: id.clone(),
            era: self.era,
            progress: self.progress,
            log_level: self.log_level,
            streams: self.streams,
            caps: self.caps,
            _hold: self.cancel.map(|c| c.hold),
        }
    }

    /// How an unrelayed call uses the worker's stream: a modern client that declared no
    /// capability has an upstream request end the call (-32021).
    fn unrelayed(&self, progress: Option<tokio::sync::mpsc::Sender<String>>) -> Streaming {
        match self.era {
            Era::Legacy => Streaming::from(progress),
            Era::Modern => Streaming::Refusing(progress),
        }
    }
}

/// What a `tools/call` calls.
pub(crate) struct Target {
    pub(crate) tool: Arc<Tool>,
    /// The params the tool gets: the request's, or the inner call's through `tutti_call_tool`.
    pub(crate) params: Option<Value>,
    /// The request named the tool itself (its headers describe this call).
    pub(crate) direct: bool,
}

/// The tool the `tools/call` with `params` names (directly or through `tutti_call_tool`), or
/// the answer, in `revision`'s form, when there is nothing to call (no name, an unknown or
/// unavailable one, a search tool's own answer).
pub(crate) async fn target(
    ctx: &Ctx,
    id: &Value,
    params: Option<Value>,
    revision: Revision,
) -> Result<Target, Response> {
    let resolved = match execute::tool_name(params.as_ref()) {
        Err(e) => Err(e),
        Ok(name) => match search::route(ctx, name, params.as_ref()).await {
            Routed::Direct => execute::resolve(&ctx.app, name).await,
            Routed::Answer(answer) => {
                return Err(call_response(id, answer.map(|r| r.in_era(revision))));
            }
            Routed::Call { tool, params } => {
                return Ok(Target {
                    tool,
                    params,
                    direct: false,
                });
            }
        },
    };
    match resolved {
        Ok(tool) => Ok(Target {
            tool,
            params,
            direct: true,
        }),
        Err(e) => Err(call_response(id, Err(e))),
    }
}

/// A `tools/call` of `tool`, sent the way [`how_sent`] decides, answered in the caller's era.
pub(crate) async fn tools_call(
    ctx: &Ctx,
    id: &Value,
    tool: Arc<Tool>,
    params: Option<Value>,
    caller: Caller,
    confirm: Option<Ask>,
) -> Response {
    let confirm = caller.asks(confirm);
    match how_sent(&caller, confirm) {
        Sending::NotAsked => {
            let revision = caller.revision;
            drop(caller);
            call_response(id, confirm::not_asked(ctx, &tool, revision))
        }
        Sending::Relayed => relayed(ctx, id, tool, params, caller, confirm).await,
        Sending::Progress | Sending::Plain if confirm.is_some() => {
            // Only the person can be asked, and this client takes no event stream: the
            // call waits for the person before it is sent.
            let arguments = params.as_ref().and_then(|p| p.get("arguments"));
            let decided = confirm::by_person(&ctx.app, &ctx.identity, &tool, arguments, None);
            match decided.await {
                d if d.decision == confirm::Decision::Accepted => {
                    direct(ctx, id, tool, params, caller).await
                }
                d => {
                    let relayed = Arc::new(crate::observe::audit::Relayed::default());
                    let refused = confirm::refused(&ctx.app, &ctx.identity, &tool, &relayed, d);
                    call_response(id, refused.map(|r| r.in_era(caller.revision)))
                }
            }
        }
        Sending::Progress | Sending::Plain => direct(ctx, id, tool, params, caller).await,
    }
}

/// A call whose upstream (or, with `confirm`, the person's confirmation) may ask this
/// client something: started, or resumed with the client's `inputResponses`.
async fn relayed(
    ctx: &Ctx,
    id: &Value,
    tool: Arc<Tool>,
    mut params: Option<Value>,
    mut caller: Caller,
    confirm: Option<Ask>,
) -> Response {
    let resumed = params.as_ref().filter(|_| caller.resuming);
    let running = match resumed {
        Some(p) => match relay::resume_modern(&ctx.app, &ctx.token_key, &tool.name, p) {
            Ok(running) => running,
            Err(e) => return rpc::answer_response(id, Err(e)),
        },
        None => {
            let (requests, logs) = caller.relays();
            relay::start(relay::Start {
                app: ctx.app.clone(),
                who: ctx.identity.clone(),
                arguments: params
                    .as_mut()
                    .and_then(|p| p.get_mut("arguments").map(Value::take)),
                tool,
                cancelled: caller.cancelled(),
                revision: caller.revision,
                requests,
                logs,
                token: ctx.token_key,
                confirm,
                input_responses: caller.own_answers.take(),
            })
        }
    };
    relay::respond(caller.answering(ctx, id), running).await
}

/// A call nobody is asked anything during: one JSON answer, or an event stream of the
/// upstream's progress and then the answer. The call runs inside the response: a client that
/// closes it cancels the worker call.
async fn direct(
    ctx: &Ctx,
    id: &Value,
    tool: Arc<Tool>,
    params: Option<Value>,
    mut caller: Caller,
) -> Response {
    let arguments = params.and_then(|mut p| p.get_mut("arguments").map(Value::take));
    let cancelled = caller.cancelled();
    let hold = caller.cancel.take().map(|c| c.hold);
    let revision = caller.revision;
    if let Some(token) = caller.progress.take() {
        let (app, identity) = (ctx.app.clone(), ctx.identity.clone());
        let era = caller.era;
        let status = move |e: &_| error_status(era, e);
        return progress::respond(id.clone(), token, status, move |sink| async move {
            let _hold = hold;
            let streaming = caller.unrelayed(Some(sink));
            execute::execute(&app, &identity, &tool, arguments, cancelled, streaming)
                .await
                .map(|r| r.in_era(revision))
        })
        .await;
    }
    let streaming = caller.unrelayed(None);
    let answer = execute::execute(
        &ctx.app,
        &ctx.identity,
        &tool,
        arguments,
        cancelled,
        streaming,
    )
    .await
    .map(|r| r.in_era(revision));
    drop(hold);
    match answer {
        Err(e) if error_status(caller.era, &e) == StatusCode::BAD_REQUEST => {
            rpc::error_response(StatusCode::BAD_REQUEST, id, &e)
        }
        answer => call_response(id, answer),
    }
}

/// The HTTP status of an unrelayed call's error answered before anything was streamed: SPEC §11
/// / 2026-07-28: a missing client capability is HTTP 400.
fn error_status(era: Era, e: &rpc::RpcError) -> StatusCode {
    if era == Era::Modern && e.code == MISSING_CAPABILITY {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(era: Era, streams: bool) -> Caller {
        Caller {
            era,
            revision: Revision::V2026_07_28,
            caps: Caps::default(),
            streams,
            progress: None,
            logs: false,
            log_level: None,
            resuming: false,
            own_answers: None,
            cancel: None,
        }
    }

    const AGENT: Ask = Ask {
        person: false,
        agent: true,
    };

    #[test]
    fn a_legacy_call_is_relayed_only_on_an_event_stream() {
        let mut plain = caller(Era::Legacy, false);
        plain.logs = true;
        assert_eq!(how_sent(&plain, None), Sending::Plain);
        assert_eq!(how_sent(&plain, plain.asks(Some(AGENT))), Sending::NotAsked);
        let mut streamed = caller(Era::Legacy, true);
        streamed.logs = true;
        assert_eq!(how_sent(&streamed, None), Sending::Relayed);
        streamed.logs = false;
        streamed.progress = Some(Value::from(1));
        assert_eq!(how_sent(&streamed, None), Sending::Progress);
    }

    #[test]
    fn a_modern_call_is_relayed_without_an_event_stream() {
        let mut resuming = caller(Era::Modern, false);
        resuming.resuming = true;
        assert_eq!(how_sent(&resuming, None), Sending::Relayed);
        let mut answering = caller(Era::Modern, false);
        answering.own_answers = Some("{}".to_owned());
        assert_eq!(how_sent(&answering, None), Sending::Relayed);
        assert_eq!(how_sent(&caller(Era::Modern, true), None), Sending::Plain);
        assert_eq!(
            how_sent(&caller(Era::Modern, true), Some(Ask::default())),
            Sending::NotAsked
        );
    }
}

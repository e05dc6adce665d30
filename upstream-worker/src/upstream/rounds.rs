//! The calls that relay: `tools/call` and `prompts/get`, each in as many rounds as a
//! 2026-07-28 upstream asks input for ([`super::mrtr`]), with its progress
//! forwarded, its upstream requests relayed and cancellation sent when it is interrupted.

use std::future::Future;

use bytes::Bytes;
use rmcp::ServiceError;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientRequest, GetPromptRequest,
    GetPromptRequestParams, JsonObject, MetaObject, ProgressNotificationParam, RequestMetaObject,
    ServerResult,
};
use rmcp::service::{PeerRequestOptions, RoleClient};
use serde_json::Value;

use crate::transport::results::Expected;
use crate::upstream::cancel::{CancelOnDrop, send_cancelled};
use crate::upstream::contract::{CallFailure, ProgressSink};
use crate::upstream::mrtr;
use crate::upstream::relay::RelayTo;
use crate::upstream::session::RmcpUpstream;

/// One round of a `tools/call` ([`super::mrtr`]).
enum Round {
    /// The upstream's `CallToolResult` as JSON text.
    Complete(Bytes),
    /// A 2026-07-28 upstream needs the client's answers before it goes on.
    InputRequired(mrtr::InputRequired),
}

/// What a relaying call asks the upstream for: both run the same rounds, relay and
/// cancellation; they differ in the request sent and the result taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Called {
    /// `tools/call`: the result is a `CallToolResult`.
    Tool,
    /// `prompts/get`: the result is a `GetPromptResult`.
    Prompt,
}

impl Called {
    fn method(self) -> &'static str {
        match self {
            Called::Tool => "tools/call",
            Called::Prompt => "prompts/get",
        }
    }

    /// One round's request: `name` with `arguments`, and the previous round's answers.
    fn request(
        self,
        name: &str,
        arguments: Option<JsonObject>,
        retry: &mut mrtr::Retry,
    ) -> ClientRequest {
        match self {
            Called::Tool => {
                let mut params = CallToolRequestParams::new(name.to_owned());
                params.arguments = arguments;
                params.input_responses = retry.responses.take();
                params.request_state = retry.state.take();
                ClientRequest::CallToolRequest(CallToolRequest::new(params))
            }
            Called::Prompt => {
                let mut params = GetPromptRequestParams::new(name);
                params.arguments = arguments;
                params.input_responses = retry.responses.take();
                params.request_state = retry.state.take();
                ClientRequest::GetPromptRequest(GetPromptRequest::new(params))
            }
        }
    }
}

impl RmcpUpstream {
    /// A tool call or a prompt get (`called`, name, arguments, meta) with every round of
    /// answers a 2026-07-28 upstream asks for ([`super::mrtr`]); see [`Upstream::call_tool`].
    pub(super) async fn rounds<W: Send>(
        &self,
        (called, name, arguments, meta): (Called, String, Option<JsonObject>, Option<JsonObject>),
        progress: Option<ProgressSink>,
        relay: Option<RelayTo>,
        interrupt: impl Future<Output = W> + Send,
    ) -> Result<Result<Bytes, CallFailure>, W> {
        let mut interrupt = std::pin::pin!(interrupt);
        // Only a 2026-07-28 upstream can answer input_required and need the call again: a
        // copy of the arguments is kept for it alone (none on the legacy common path).
        let again = self.mrtr.then(|| (arguments.clone(), meta.clone()));
        let mut first = Some((arguments, meta));
        // The client's own inputResponses (sent without a requestState) are its input
        // to a 2026-07-28 upstream, which verifies them: they go with the first round. A
        // 2025-era upstream has no inputResponses; for it they are dropped.
        let mut retry = mrtr::Retry {
            responses: relay
                .as_ref()
                .and_then(|to| to.answers.clone())
                .filter(|_| self.mrtr)
                .map(|answers| answers.into_iter().collect()),
            state: None,
        };
        for _ in 0..mrtr::MAX_INPUT_ROUNDS {
            let (arguments, meta) = match first.take() {
                Some(first) => first,
                None => again.clone().unwrap_or_default(),
            };
            let request = called.request(&name, arguments, &mut retry);
            let answered = self
                .call_tool_round(
                    (called, request),
                    meta,
                    progress.clone(),
                    relay.clone(),
                    &mut interrupt,
                )
                .await?;
            let asked = match answered {
                Ok(Round::Complete(text)) => return Ok(Ok(text)),
                Ok(Round::InputRequired(asked)) => asked,
                Err(failure) => return Ok(Err(failure)),
            };
            retry = tokio::select! {
                retry = mrtr::answer(&self.relay, relay.as_ref(), asked) => match retry {
                    Ok(retry) => retry,
                    Err(e) => {
                        // A request the caller refuses (no capability) ends the call as its
                        // interrupt says (-32021), as during a call: look at it first.
                        tokio::select! {
                            biased;
                            why = &mut interrupt => return Err(why),
                            () = std::future::ready(()) => {}
                        }
                        return Ok(Err(self.failure(ServiceError::McpError(e))));
                    }
                },
                why = &mut interrupt => return Err(why),
            };
        }
        Ok(Err(CallFailure::Other(mrtr::too_many_rounds())))
    }

    /// One round of a `tools/call`: its answer as text, or the input a 2026-07-28 upstream
    /// asked for ([`super::mrtr`]); interrupted and cancelled as [`Upstream::call_tool`] says.
    async fn call_tool_round<W: Send>(
        &self,
        (called, request): (Called, ClientRequest),
        meta: Option<JsonObject>,
        progress: Option<ProgressSink>,
        relay: Option<RelayTo>,
        interrupt: &mut (impl Future<Output = W> + Unpin + Send),
    ) -> Result<Result<Round, CallFailure>, W> {
        let mut options = PeerRequestOptions::no_options();
        if let Some(meta) = meta {
            options = options.with_meta(RequestMetaObject(MetaObject(meta)));
        }
        // Queueing the request can wait when rmcp is busy; the interrupt applies there too
        // (an unqueued request needs no cancellation).
        let sent = tokio::select! {
            sent = self.peer.send_request_with_option(request, options) => sent,
            why = &mut *interrupt => return Err(why),
        };
        let handle = match sent {
            Ok(handle) => handle,
            Err(e) => return Ok(Err(self.failure(e))),
        };
        let id = handle.id.clone();
        // Registered (results, relay) before this task yields again, so (one thread) before
        // rmcp writes the request. An answer before registration only takes rmcp's path.
        let expected = self.results.as_ref().map(|r| match called {
            Called::Tool => r.expect(id.clone()),
            // Any object result but an `input_required` one (that one reaches `round_result`).
            Called::Prompt => r.expect_any(id.clone()),
        });
        let _entered = self.relay.enter(id.clone(), relay);
        let mut guard = CancelOnDrop {
            peer: self.peer.clone(),
            id: Some(id.clone()),
        };
        let response = match progress {
            None => tokio::select! {
                response = handle.await_response() => response,
                why = &mut *interrupt => {
                    guard.disarm();
                    send_cancelled(&self.peer, id).await;
                    return Err(why);
                }
            },
            // Boxed and out of line: the state of a call that asked for progress does not
            // enlarge every other call's future (a worker's memory under load counts).
            Some(sink) => {
                match Box::pin(self.await_with_progress(handle, sink, &mut *interrupt)).await {
                    Ok(response) => response,
                    Err(why) => {
                        guard.disarm();
                        send_cancelled(&self.peer, id).await;
                        return Err(why);
                    }
                }
            }
        };
        guard.disarm();
        let result = match response {
            Ok(result) => result,
            Err(e) => return Ok(Err(self.failure(e))),
        };
        if let Some(text) = expected.as_ref().and_then(Expected::take) {
            return Ok(Ok(Round::Complete(text)));
        }
        if let Some(limit) = expected.as_ref().and_then(Expected::too_large) {
            return Ok(Err(CallFailure::TooLarge(limit)));
        }
        Ok(self.round_result(called, result))
    }

    /// A round's result rmcp decoded: the tool result (or prompt) as text, or the input asked
    /// for.
    fn round_result(&self, called: Called, result: ServerResult) -> Result<Round, CallFailure> {
        match mrtr::input_required(&result) {
            None if called == Called::Prompt => serde_json::to_vec(&result)
                .map(|json| Round::Complete(Bytes::from(json)))
                .map_err(|e| CallFailure::Other(format!("cannot encode the result: {e}"))),
            None => result_text(result).map(Round::Complete),
            Some(_) if !self.mrtr => Err(CallFailure::Other(format!(
                "the upstream answered {} with input_required, which it may only do \
                 from protocol version {} on",
                called.method(),
                mrtr::MRTR_SINCE
            ))),
            Some(Ok(asked)) => Ok(Round::InputRequired(asked)),
            Some(Err(e)) => Err(self.failure(ServiceError::McpError(e))),
        }
    }

    /// Waits for the answer to `handle` while forwarding the upstream's progress notifications
    /// for it to `sink`, all of them before the answer; `Err(why)` when `interrupt` came first.
    #[inline(never)]
    async fn await_with_progress<W>(
        &self,
        handle: rmcp::service::RequestHandle<RoleClient>,
        sink: ProgressSink,
        mut interrupt: impl Future<Output = W> + Unpin,
    ) -> Result<Result<ServerResult, ServiceError>, W> {
        // Subscribed before this task yields, i.e. before rmcp has even written the request
        // (one thread), so no notification can come too early.
        let subscriber = self.progress.subscribe(handle.progress_token.clone()).await;
        let mut route: ProgressRoute = Some((subscriber, sink));
        let response = handle.await_response();
        let mut response = std::pin::pin!(response);
        let response = loop {
            tokio::select! {
                // Progress first: every notification the upstream sent before its answer is
                // forwarded before the answer.
                biased;
                Some(note) = next_progress(&mut route) => forward_progress(&mut route, note),
                response = &mut response => break response,
                why = &mut interrupt => return Err(why),
            }
        };
        // rmcp hands each notification to a task of its own; give those queued before the
        // answer their turn, then pass on what they delivered.
        tokio::task::yield_now().await;
        while let Some(Some(note)) =
            futures_util::FutureExt::now_or_never(next_progress(&mut route))
        {
            forward_progress(&mut route, note);
        }
        Ok(response)
    }
}

/// A tools/call result rmcp decoded, as JSON text.
fn result_text(result: ServerResult) -> Result<Bytes, CallFailure> {
    match result {
        ServerResult::CallToolResult(result) => serde_json::to_vec(&result)
            .map(Bytes::from)
            .map_err(|e| CallFailure::Other(format!("cannot encode the result: {e}"))),
        // A result with no `content` decodes as one of these; pass its JSON on as is.
        ServerResult::CustomResult(custom) => Ok(custom.0.to_string().into()),
        ServerResult::EmptyResult(_) => Ok(Bytes::from_static(br#"{"content":[]}"#)),
        _ => Err(CallFailure::Other(
            "the upstream answered tools/call with an unexpected result type".to_owned(),
        )),
    }
}

type ProgressRoute = Option<(
    rmcp::handler::client::progress::ProgressSubscriber,
    ProgressSink,
)>;

/// The next progress notification of a call that asked for them (never, otherwise).
async fn next_progress(route: &mut ProgressRoute) -> Option<ProgressNotificationParam> {
    match route.as_mut() {
        Some((subscriber, _)) => futures_util::StreamExt::next(subscriber).await,
        None => std::future::pending().await,
    }
}

/// Passes one notification on without its token; stops forwarding when the sink is gone.
fn forward_progress(route: &mut ProgressRoute, note: ProgressNotificationParam) {
    let Some((_, sink)) = route.as_ref() else {
        return;
    };
    let mut params = match serde_json::to_value(&note) {
        Ok(Value::Object(params)) => params,
        _ => return,
    };
    params.remove("progressToken");
    match sink.try_send(Value::Object(params).to_string()) {
        Ok(()) => {}
        Err(tokio::sync::mpsc::error::TrySendError::Full(_)) => {
            tracing::debug!("a progress notification was dropped: the caller is behind");
        }
        Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => *route = None,
    }
}

//! The upstream MCP server, behind our own small [`Upstream`] trait. The implementation is the
//! official Rust SDK (`rmcp`, pinned exactly): a stdio child process whose stdout we read
//! ourselves (see [`crate::stdio`]), or a remote Streamable HTTP endpoint.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rmcp::ClientHandler;
use rmcp::handler::client::progress::ProgressDispatcher;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientCapabilities,
    ClientConfig, ClientRequest, CustomRequest, GetPromptRequest, GetPromptRequestParams,
    Implementation, JsonObject, ListToolsRequest, MetaObject, PaginatedRequestParams,
    ProgressNotificationParam, ProtocolVersion, RequestId, RequestMetaObject,
    ResourceUpdatedNotificationParam, ServerNotification, ServerResult, SubscriptionFilter,
};
use rmcp::service::{
    ClientCacheConfig, ClientInitializeError, ClientLifecycleMode, InboundStreamOrigin,
    NotificationContext, PeerRequestOptions, RequestContext, RoleClient, RunningService,
    RunningServiceCancellationToken, serve_client_with_lifecycle,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, InsufficientScopeError, StreamableHttpClientTransportConfig,
    StreamableHttpError,
};
use rmcp::{Peer, ServiceError};
use serde_json::Value;
use tokio::process::Command;
use tokio::sync::{Notify, broadcast, mpsc, oneshot, watch};
use tutti_proto::kernel::{LaunchSpec, Transport};

use crate::bearer::Bearer;
use crate::error::{WorkerError, error_chain};
use crate::http::{HttpClient, SessionEvent};
use crate::mrtr;
use crate::platform;
use crate::redact::Redactor;
use crate::relay::{Origin, Relay, RelayTo};
use crate::results::{CallResults, Expected};
use crate::stdio::{self, MAX_STDOUT_LINE, NonJsonCounter};

/// Largest HTTP JSON response / SSE event we accept from a remote upstream.
const MAX_HTTP_MESSAGE: usize = 64 * 1024 * 1024;
/// In-memory pipe between our stdout reader and rmcp.
const PIPE_BUFFER: usize = 256 * 1024;
/// The `reason` of the `notifications/cancelled` we send.
const CANCEL_REASON: &str = "request cancelled";
/// How long sending `notifications/cancelled` may hold up the reply to the caller.
const CANCEL_SEND_LIMIT: Duration = Duration::from_secs(1);
/// `notifications/resources/updated` buffered for a slow `WatchResources` stream; older ones are
/// dropped (an update says "read again", so a later one stands for a lost one).
const RESOURCE_UPDATES: usize = 256;
/// How long rmcp gets to wind down its transport when we stop.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// Why a request to the upstream did not produce a result.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum CallFailure {
    /// The upstream answered with a JSON-RPC error: passed on unchanged.
    Rpc {
        code: i32,
        message: String,
        data: Option<Value>,
    },
    /// The connection to the upstream is gone.
    Closed,
    /// The upstream refused our credentials: the HTTP status line (401/403).
    Auth(String),
    /// The answer's line was longer than this many bytes (`stdio::MAX_STDOUT_LINE`) and was
    /// discarded unread.
    TooLarge(usize),
    /// A remote upstream cannot serve the request now (it failed, or lost our session and a
    /// call that may have reached it is not repeated); redacted detail.
    Unavailable(String),
    /// Anything else (an unusable response, …); redacted detail.
    Other(String),
}

/// One round of a `tools/call` ([`crate::mrtr`]).
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

/// Where the upstream's `notifications/progress` for one call go: the params as a JSON object
/// (progress, total, message) without the upstream's token, in the order they came.
pub(crate) type ProgressSink = tokio::sync::mpsc::Sender<String>;

/// The one upstream MCP server this worker is the client of.
pub(crate) trait Upstream: Send + Sync + 'static {
    /// Every page of `tools/list`, each tool as the upstream's JSON object.
    fn list_tools(&self) -> impl Future<Output = Result<Vec<Value>, CallFailure>> + Send;

    /// One `tools/call`: the upstream's `CallToolResult` as JSON text (serialized once, straight
    /// from rmcp's model), or why there is none.
    ///
    /// Cancellable two ways, both of which send `notifications/cancelled` for the request to
    /// the upstream: when `interrupt` resolves first (timeout, `Cancel`, fencing) the
    /// notification is sent before this returns `Err(why)`; when the returned future is
    /// dropped (the gRPC caller went away) it is sent in the background.
    ///
    /// With `progress`, the upstream's progress notifications for this call are forwarded
    /// there (all of them before this returns); a sink that is full or gone loses them, the
    /// call goes on.
    ///
    /// With `relay`, the upstream's requests to the client and its log messages during this
    /// call go there ([`crate::relay`]); without, such requests get an error.
    fn call_tool<W: Send>(
        &self,
        name: String,
        arguments: Option<JsonObject>,
        meta: Option<JsonObject>,
        progress: Option<ProgressSink>,
        relay: Option<RelayTo>,
        interrupt: impl Future<Output = W> + Send,
    ) -> impl Future<Output = Result<Result<Bytes, CallFailure>, W>> + Send;

    /// One `prompts/get` whose upstream requests (or 2026-07-28 `input_required` rounds) go
    /// to `relay` exactly as [`Upstream::call_tool`]'s do: the upstream's
    /// `GetPromptResult` as JSON text. The default forwards it without relaying.
    fn get_prompt<W: Send>(
        &self,
        name: String,
        arguments: Option<JsonObject>,
        meta: Option<JsonObject>,
        relay: Option<RelayTo>,
        interrupt: impl Future<Output = W> + Send,
    ) -> impl Future<Output = Result<Result<Bytes, CallFailure>, W>> + Send {
        let _ = (meta, relay);
        let mut params = JsonObject::new();
        params.insert("name".to_owned(), Value::String(name));
        if let Some(arguments) = arguments {
            params.insert("arguments".to_owned(), Value::Object(arguments));
        }
        self.request("prompts/get", Some(params), interrupt)
    }

    /// The client's answer to relayed request `id`; false when no such request waits.
    fn answer_request(&self, id: &str, answer: crate::relay::Answer) -> bool {
        let _ = (id, answer);
        false
    }

    /// One other request (`prompts/get`, `resources/read`, `completion/complete`,
    /// `resources/subscribe`, a list page, …) with `params` as given: the upstream's
    /// result as JSON text, as sent where the transport lets us take it so, or why there is
    /// none. Interrupted and cancelled exactly like [`Upstream::call_tool`].
    fn request<W: Send>(
        &self,
        method: &'static str,
        params: Option<JsonObject>,
        interrupt: impl Future<Output = W> + Send,
    ) -> impl Future<Output = Result<Result<Bytes, CallFailure>, W>> + Send {
        let _ = (method, params, interrupt);
        std::future::ready(Ok(Err(CallFailure::Other(
            "this upstream forwards tools only".to_owned(),
        ))))
    }

    /// The upstream's `notifications/resources/updated` params (JSON objects), as they come.
    fn resource_updates(&self) -> Option<broadcast::Receiver<String>> {
        None
    }

    /// The upstream's `notifications/message` params that no call claimed, as they come.
    fn unclaimed_logs(&self) -> Option<broadcast::Receiver<String>> {
        None
    }
}

/// What the upstream declared beyond tools in its capabilities.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Offers {
    pub(crate) prompts: bool,
    pub(crate) resources: bool,
    pub(crate) completions: bool,
    pub(crate) subscribe: bool,
}

// === impl RmcpUpstream ===

/// [`Upstream`] over an initialized rmcp client.
pub(crate) struct RmcpUpstream {
    peer: Peer<RoleClient>,
    redactor: Arc<Redactor>,
    /// The upstream's progress notifications, by the token rmcp put on each request.
    progress: ProgressDispatcher,
    /// tools/call results the stdout pump keeps as text (stdio upstreams only).
    results: Option<Arc<CallResults>>,
    /// What the upstream offers beyond tools.
    pub(crate) offers: Offers,
    /// Its `notifications/resources/updated`, as JSON params.
    updates: broadcast::Sender<String>,
    /// The calls in flight, for the upstream's requests to the client.
    relay: Arc<Relay>,
    /// Resource subscriptions to a 2026-07-28 upstream (its `subscriptions/listen`).
    listens: crate::listen::ResourceListens,
    /// Its log messages that no call claimed.
    logs: broadcast::Sender<String>,
    /// The upstream speaks 2026-07-28 or later: it may answer `input_required`.
    mrtr: bool,
}

impl Upstream for RmcpUpstream {
    async fn list_tools(&self) -> Result<Vec<Value>, CallFailure> {
        // Paged here rather than with rmcp's `list_all_tools`: that one needs every tool to
        // decode as rmcp's `Tool`, so one tool without an `inputSchema` failed the whole
        // list ("Unexpected response type") and the worker exited, again and again. A page
        // rmcp cannot type arrives as its raw JSON instead, and the kernel refuses the
        // generation naming the tool and the field (SPEC §5.1).
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        let mut seen_cursors = std::collections::HashSet::new();
        loop {
            let params = PaginatedRequestParams::default().with_cursor(cursor.take());
            let request = ClientRequest::ListToolsRequest(ListToolsRequest {
                method: Default::default(),
                params: Some(params),
                extensions: Default::default(),
            });
            let result = self
                .peer
                .send_request(request)
                .await
                .map_err(|e| self.failure(e))?;
            let (page, next) = tools_page(result)?;
            tools.extend(page);
            match next {
                None => return Ok(tools),
                Some(next) if !seen_cursors.insert(next.clone()) => {
                    return Err(CallFailure::Other(format!(
                        "tools/list: the upstream returned the cursor {next:?} twice; \
                         its pagination never ends"
                    )));
                }
                Some(next) => cursor = Some(next),
            }
        }
    }

    async fn call_tool<W: Send>(
        &self,
        name: String,
        arguments: Option<JsonObject>,
        meta: Option<JsonObject>,
        progress: Option<ProgressSink>,
        relay: Option<RelayTo>,
        interrupt: impl Future<Output = W> + Send,
    ) -> Result<Result<Bytes, CallFailure>, W> {
        let call = (Called::Tool, name, arguments, meta);
        self.rounds(call, progress, relay, interrupt).await
    }

    async fn get_prompt<W: Send>(
        &self,
        name: String,
        arguments: Option<JsonObject>,
        meta: Option<JsonObject>,
        relay: Option<RelayTo>,
        interrupt: impl Future<Output = W> + Send,
    ) -> Result<Result<Bytes, CallFailure>, W> {
        let call = (Called::Prompt, name, arguments, meta);
        self.rounds(call, None, relay, interrupt).await
    }

    fn answer_request(&self, id: &str, answer: crate::relay::Answer) -> bool {
        self.relay.answer(id, answer)
    }

    async fn request<W: Send>(
        &self,
        method: &'static str,
        params: Option<JsonObject>,
        interrupt: impl Future<Output = W> + Send,
    ) -> Result<Result<Bytes, CallFailure>, W> {
        if matches!(method, "resources/subscribe" | "resources/unsubscribe") && self.modern() {
            return self
                .listen_request(method, params.as_ref(), interrupt)
                .await;
        }
        // A custom request: rmcp writes method and params as given (no typed model in between).
        let request =
            ClientRequest::CustomRequest(CustomRequest::new(method, params.map(Value::Object)));
        let mut interrupt = std::pin::pin!(interrupt);
        let sent = tokio::select! {
            sent = self.peer.send_request_with_option(request, PeerRequestOptions::no_options()) => sent,
            why = &mut interrupt => return Err(why),
        };
        let handle = match sent {
            Ok(handle) => handle,
            Err(e) => return Ok(Err(self.failure(e))),
        };
        let id = handle.id.clone();
        // As for tools/call: registered before rmcp can have written the request.
        let expected = self.results.as_ref().map(|r| r.expect_any(id.clone()));
        let mut guard = CancelOnDrop {
            peer: self.peer.clone(),
            id: Some(id.clone()),
        };
        let response = tokio::select! {
            response = handle.await_response() => response,
            why = &mut interrupt => {
                guard.disarm();
                send_cancelled(&self.peer, id).await;
                return Err(why);
            }
        };
        guard.disarm();
        let result = match response {
            Ok(result) => result,
            Err(e) => return Ok(Err(self.failure(e))),
        };
        if let Some(text) = expected.as_ref().and_then(Expected::take) {
            return Ok(Ok(text));
        }
        if let Some(limit) = expected.as_ref().and_then(Expected::too_large) {
            return Ok(Err(CallFailure::TooLarge(limit)));
        }
        if mrtr::input_required(&result).is_some() {
            // Never passed on: its requestState is the upstream's, and this request has no
            // caller to relay to (only tools/call and prompts/get stream).
            return Ok(Err(CallFailure::Other(format!(
                "the upstream needs input from the client (input_required) to answer {method}; \
                 the runtime relays an upstream's requests to the client during tools/call and \
                 prompts/get, for a client that declares the capability it needs"
            ))));
        }
        Ok(serde_json::to_vec(&result)
            .map(Bytes::from)
            .map_err(|e| CallFailure::Other(format!("cannot encode the result: {e}"))))
    }

    fn resource_updates(&self) -> Option<broadcast::Receiver<String>> {
        Some(self.updates.subscribe())
    }

    fn unclaimed_logs(&self) -> Option<broadcast::Receiver<String>> {
        Some(self.logs.subscribe())
    }
}

impl RmcpUpstream {
    /// A tool call or a prompt get (`called`, name, arguments, meta) with every round of
    /// answers a 2026-07-28 upstream asks for ([`crate::mrtr`]); see [`Upstream::call_tool`].
    async fn rounds<W: Send>(
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
        // 2025-era upstream has no inputResponses; for it they are dropped, as before.
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

    /// Whether the upstream speaks 2026-07-28 (no `initialize`, so no `resources/subscribe`).
    fn modern(&self) -> bool {
        self.peer
            .peer_info()
            .is_some_and(|info| !info.protocol_version.has_initialize())
    }

    /// `resources/subscribe` / `unsubscribe` to a 2026-07-28 upstream: one listen stream per
    /// URI (`listen.rs`); the answer is the empty result the legacy request has.
    async fn listen_request<W>(
        &self,
        method: &str,
        params: Option<&JsonObject>,
        interrupt: impl Future<Output = W>,
    ) -> Result<Result<Bytes, CallFailure>, W> {
        let Some(uri) = params.and_then(|p| p.get("uri")).and_then(Value::as_str) else {
            return Ok(Err(CallFailure::Rpc {
                code: -32602,
                message: "Invalid params: uri is required".to_owned(),
                data: None,
            }));
        };
        if method == "resources/unsubscribe" {
            self.listens.unsubscribe(uri);
            return Ok(Ok(Bytes::from_static(b"{}")));
        }
        let subscribed = self
            .listens
            .subscribe(&self.peer, uri, self.updates.clone());
        tokio::select! {
            done = subscribed => Ok(done
                .map(|()| Bytes::from_static(b"{}"))
                .map_err(CallFailure::Other)),
            why = interrupt => Err(why),
        }
    }

    /// One round of a `tools/call`: its answer as text, or the input a 2026-07-28 upstream
    /// asked for ([`crate::mrtr`]); interrupted and cancelled as [`Upstream::call_tool`] says.
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

    fn failure(&self, error: ServiceError) -> CallFailure {
        match error {
            // Passed on to the agent with the same code (SPEC §5), but never with a stored
            // secret in it (SPEC §9: not in error messages): an upstream that puts its key
            // into an error text gets `***` there.
            ServiceError::McpError(e) => CallFailure::Rpc {
                code: e.code.0,
                message: self.redactor.redact(&e.message),
                data: e
                    .data
                    .map(|d| crate::redact::redact_json(&self.redactor, d)),
            },
            ServiceError::TransportClosed => CallFailure::Closed,
            ServiceError::TransportSend(e) => match auth_failure(e.error.as_ref()) {
                Some(status) => CallFailure::Auth(status),
                None if let Some(detail) = unavailable_detail(e.error.as_ref()) => {
                    CallFailure::Unavailable(self.redactor.redact(detail))
                }
                None => {
                    let detail = self.redactor.redact(&error_chain(e.error.as_ref()));
                    tracing::warn!(error = %detail, "sending to the upstream failed");
                    CallFailure::Closed
                }
            },
            other => CallFailure::Other(self.redactor.redact(&other.to_string())),
        }
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

/// The detail of a [`WorkerError::UpstreamUnavailable`] in an error's chain.
fn unavailable_detail<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a str> {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(StreamableHttpError::Client(WorkerError::UpstreamUnavailable { detail })) =
            e.downcast_ref::<StreamableHttpError<WorkerError>>()
        {
            return Some(detail);
        }
        current = e.source();
    }
    None
}

/// One `tools/list` page: the tools as JSON objects and the next cursor.
fn tools_page(result: ServerResult) -> Result<(Vec<Value>, Option<String>), CallFailure> {
    let unusable = |why: &str| CallFailure::Other(format!("tools/list: {why}"));
    match result {
        ServerResult::ListToolsResult(page) => {
            let tools = page
                .tools
                .iter()
                .map(|tool| {
                    serde_json::to_value(tool)
                        .map_err(|e| unusable(&format!("cannot encode a tool: {e}")))
                })
                .collect::<Result<_, _>>()?;
            Ok((tools, page.next_cursor))
        }
        // Not decodable as rmcp's typed list (a tool without `inputSchema`, …): as sent.
        ServerResult::CustomResult(raw) => {
            let Value::Object(mut page) = raw.0 else {
                return Err(unusable("the result is not a JSON object"));
            };
            let Some(Value::Array(tools)) = page.remove("tools") else {
                return Err(unusable("the result has no \"tools\" array"));
            };
            let next = match page.remove("nextCursor") {
                None | Some(Value::Null) => None,
                Some(Value::String(c)) => Some(c),
                Some(other) => {
                    return Err(unusable(&format!("nextCursor {other} is not a string")));
                }
            };
            Ok((tools, next))
        }
        _ => Err(unusable("the upstream answered with another result type")),
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

/// Sends `notifications/cancelled` (in the background) for a request whose `call_tool` future
/// was dropped: the gRPC caller went away.
struct CancelOnDrop {
    peer: Peer<RoleClient>,
    id: Option<RequestId>,
}

impl CancelOnDrop {
    fn disarm(&mut self) {
        self.id = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let peer = self.peer.clone();
        runtime.spawn(async move { send_cancelled(&peer, id).await });
    }
}

/// Sends `notifications/cancelled` for request `id` (bounded: never holds up a reply).
async fn send_cancelled(peer: &Peer<RoleClient>, id: RequestId) {
    tracing::debug!(request_id = %id, "cancelling the upstream request");
    let params = CancelledNotificationParam::new(Some(id), Some(CANCEL_REASON.to_owned()));
    match tokio::time::timeout(CANCEL_SEND_LIMIT, peer.notify_cancelled(params)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!(error = %e, "could not send notifications/cancelled"),
        Err(_) => tracing::debug!("sending notifications/cancelled timed out"),
    }
}

// === impl Handler ===

/// Our rmcp client handler: notices `notifications/tools/list_changed`, routes progress, and
/// relays the upstream's elicitation, sampling and roots requests and its log messages to
/// the client of the call they belong to ([`crate::relay`]). It declares all three client
/// capabilities always: which client a request reaches is only known when it comes, and a
/// client without the capability makes the upstream get an error (SPEC §11).
#[derive(Clone)]
struct Handler {
    info: ClientConfig,
    list_changed: Arc<Notify>,
    progress: ProgressDispatcher,
    /// `notifications/resources/updated` params, for the frontend's `WatchResources`.
    updates: broadcast::Sender<String>,
    /// `notifications/message` params no call claimed, for the frontend's `WatchLogs`.
    logs: broadcast::Sender<String>,
    relay: Arc<Relay>,
}

impl Handler {
    fn new(list_changed: Arc<Notify>) -> Self {
        let info = ClientConfig::new(
            relayed_capabilities(),
            Implementation::new("tutti-upstream-worker", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE);
        Self {
            info,
            list_changed,
            progress: ProgressDispatcher::new(),
            updates: broadcast::channel(RESOURCE_UPDATES).0,
            logs: broadcast::channel(RESOURCE_UPDATES).0,
            relay: Arc::new(Relay::default()),
        }
    }

    /// Relays one request of the upstream and decodes the client's answer as `T`.
    async fn relay_request<T: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        params: Value,
        context: &RequestContext<RoleClient>,
    ) -> Result<T, rmcp::ErrorData> {
        let origin = origin(&context.extensions);
        let answer = self
            .relay
            .ask(origin, method, params, context.ct.clone())
            .await?;
        serde_json::from_value(answer).map_err(|e| {
            rmcp::ErrorData::internal_error(
                format!("{method}: the client's answer is not a valid result: {e}"),
                None,
            )
        })
    }
}

/// Where rmcp says a request or notification of the upstream came from.
fn origin(extensions: &rmcp::model::Extensions) -> Origin<'_> {
    match extensions.get::<InboundStreamOrigin>() {
        Some(InboundStreamOrigin::OutboundRequest(id)) => Origin::Call(id),
        Some(InboundStreamOrigin::Unassociated) => Origin::Unassociated,
        None => Origin::Unknown,
    }
}

/// The client capabilities the worker declares to its upstream: elicitation (form and URL),
/// sampling and roots, each relayed to the calling client.
fn relayed_capabilities() -> ClientCapabilities {
    let mut capabilities = ClientCapabilities::default();
    capabilities.elicitation = Some(
        rmcp::model::ElicitationCapability::default()
            .with_form(Default::default())
            .with_url(Default::default()),
    );
    capabilities.sampling = Some(Default::default());
    capabilities.roots = Some(Default::default());
    capabilities
}

fn to_value<T: serde::Serialize>(params: &T) -> Value {
    serde_json::to_value(params).unwrap_or(Value::Null)
}

#[expect(
    deprecated,
    reason = "sampling, roots and logging are deprecated by 2026-07-28 but served"
)]
impl ClientHandler for Handler {
    async fn create_elicitation(
        &self,
        params: rmcp::model::ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        self.relay_request("elicitation/create", to_value(&params), &context)
            .await
    }

    async fn create_message(
        &self,
        params: rmcp::model::CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, rmcp::ErrorData> {
        self.relay_request("sampling/createMessage", to_value(&params), &context)
            .await
    }

    async fn list_roots(
        &self,
        context: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ListRootsResult, rmcp::ErrorData> {
        self.relay_request("roots/list", Value::Null, &context)
            .await
    }

    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        context: NotificationContext<RoleClient>,
    ) {
        let origin = origin(&context.extensions);
        if let Some(unclaimed) = self.relay.log(origin, to_value(&params).to_string()) {
            // Nobody watching (no frontend stream yet) is fine.
            let _ = self.logs.send(unclaimed);
        }
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.list_changed.notify_one();
    }

    // Prompts and resources are offered with the tools as one candidate: any of
    // the three lists changing means listing and offering again.
    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.list_changed.notify_one();
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.list_changed.notify_one();
    }

    async fn on_resource_updated(
        &self,
        mut params: ResourceUpdatedNotificationParam,
        context: NotificationContext<RoleClient>,
    ) {
        // rmcp takes the params' `_meta` out of them (into the context's `extensions`, where
        // its dispatch leaves it, rather than `meta`): put it back, so the update reaches
        // clients as the upstream sent it.
        if params.meta.is_none() {
            params.meta = Some(context.meta)
                .filter(|meta| !meta.is_empty())
                .or_else(|| {
                    context
                        .extensions
                        .get::<rmcp::model::NotificationMetaObject>()
                        .cloned()
                });
        }
        if let Ok(params) = serde_json::to_string(&params) {
            // Nobody listening (no subscriber in the frontend) is fine.
            let _ = self.updates.send(params);
        }
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.handle_notification(params).await;
    }

    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }
}

// === impl Session ===

/// A started upstream: the client plus what it takes to watch and stop it.
pub(crate) struct Session {
    pub(crate) upstream: Arc<RmcpUpstream>,
    pub(crate) protocol_version: String,
    /// The upstream's `serverInfo.name` (shown by `tutti connector probe`).
    pub(crate) server_name: String,
    /// Woken on every `notifications/tools/list_changed`.
    pub(crate) list_changed: Arc<Notify>,
    /// Non-JSON stdout lines (stdio only).
    pub(crate) non_json: Option<Arc<NonJsonCounter>>,
    /// What the HTTP client says about the upstream's session (http only).
    session_events: Option<mpsc::UnboundedReceiver<SessionEvent>>,
    service: ServiceWatch,
    child: Option<ChildHandle>,
}

/// What the HTTP client says about a remote upstream's session.
pub(crate) struct SessionEvents(Option<mpsc::UnboundedReceiver<SessionEvent>>);

impl SessionEvents {
    /// The next event; never, for stdio. Cancel-safe.
    pub(crate) async fn next(&mut self) -> SessionEvent {
        if let Some(events) = self.0.as_mut()
            && let Some(event) = events.recv().await
        {
            return event;
        }
        std::future::pending().await
    }
}

/// A started upstream and its first complete tool list.
pub(crate) struct Started {
    pub(crate) session: Session,
    pub(crate) tools: Vec<Value>,
}

impl Session {
    /// Resolves when the upstream went away on its own, describing how ("exited with status
    /// 1", "connection closed"). Cancel-safe.
    pub(crate) async fn ended(&mut self) -> String {
        match self.child.as_mut() {
            Some(child) => {
                tokio::select! {
                    how = child.exited() => how,
                    () = self.service.closed() => {
                        // The client side ended (stdout closed): prefer the exit status.
                        match tokio::time::timeout(Duration::from_secs(1), child.exited()).await {
                            Ok(how) => how,
                            Err(_) => "closed its stdout".to_owned(),
                        }
                    }
                }
            }
            None => {
                self.service.closed().await;
                "connection closed".to_owned()
            }
        }
    }

    /// What the HTTP client will say about the upstream's session (nothing, for stdio).
    pub(crate) fn take_session_events(&mut self) -> SessionEvents {
        SessionEvents(self.session_events.take())
    }

    /// Stops the upstream: close the MCP connection (for stdio: its stdin), then SIGTERM,
    /// then SIGKILL after 2 s.
    pub(crate) async fn stop(mut self) {
        self.service.close().await;
        if let Some(child) = self.child.take() {
            let how = child.stop().await;
            tracing::info!(upstream = %how, "upstream stopped");
        }
    }
}

/// Watches the rmcp service task.
struct ServiceWatch {
    cancel: Option<RunningServiceCancellationToken>,
    done: watch::Receiver<bool>,
}

impl ServiceWatch {
    fn spawn(running: RunningService<RoleClient, Handler>) -> Self {
        let cancel = Some(running.cancellation_token());
        let (done_tx, done) = watch::channel(false);
        tokio::spawn(async move {
            let reason = running.waiting().await;
            tracing::debug!(?reason, "MCP client session ended");
            let _ = done_tx.send(true);
        });
        Self { cancel, done }
    }

    async fn closed(&mut self) {
        let _ = self.done.wait_for(|done| *done).await;
    }

    async fn close(&mut self) {
        if let Some(cancel) = self.cancel.take() {
            cancel.cancel();
        }
        let _ = tokio::time::timeout(CLOSE_GRACE, self.closed()).await;
    }
}

/// The stdio child, owned by a supervisor task that reaps it.
struct ChildHandle {
    stop: Option<oneshot::Sender<()>>,
    status: watch::Receiver<Option<String>>,
}

impl ChildHandle {
    fn spawn(mut child: tokio::process::Child, contained: platform::Containment) -> Self {
        let (stop_tx, mut stop_rx) = oneshot::channel::<()>();
        let (status_tx, status) = watch::channel(None);
        tokio::spawn(async move {
            let status = tokio::select! {
                status = child.wait() => status,
                // A stop request, or the handle was dropped: stop it.
                _ = &mut stop_rx => platform::stop_child(&mut child).await,
            };
            // Whatever the upstream started and left behind goes with it.
            contained.end_tree();
            let _ = status_tx.send(Some(platform::describe_exit(&status)));
        });
        Self {
            stop: Some(stop_tx),
            status,
        }
    }

    /// Resolves once the child has exited, describing how. Cancel-safe.
    async fn exited(&mut self) -> String {
        match self.status.wait_for(Option::is_some).await {
            Ok(status) => status.clone().unwrap_or_default(),
            Err(_) => "exited".to_owned(),
        }
    }

    /// The current exit description, if it has exited.
    fn exit_now(&self) -> Option<String> {
        self.status.borrow().clone()
    }

    async fn stop(mut self) -> String {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.exited().await
    }
}

// === start ===

/// Starts the upstream described by `spec`, completes the MCP handshake and lists every page
/// of tools, all within `within`.
pub(crate) async fn start(
    spec: &LaunchSpec,
    redactor: Arc<Redactor>,
    within: Duration,
    bearer: Option<Arc<Bearer>>,
) -> Result<Started, WorkerError> {
    match spec.transport() {
        Transport::Stdio => start_stdio(spec, redactor, within).await,
        Transport::Http => start_http(spec, redactor, within, bearer).await,
        Transport::Unspecified => Err(WorkerError::LaunchSpec {
            problem: format!("unknown transport {}", spec.transport),
        }),
    }
}

async fn start_stdio(
    spec: &LaunchSpec,
    redactor: Arc<Redactor>,
    within: Duration,
) -> Result<Started, WorkerError> {
    let (child, stdin, stdout, stderr) = spawn_stdio(spec, &redactor)?;
    let contained = platform::contain(&child);
    let mut child = ChildHandle::spawn(child, contained);
    let pumps = StdioPumps::spawn(stdout, stderr, &redactor);
    let last_stderr = pumps.last_stderr.clone();

    let list_changed = Arc::new(Notify::new());
    let transport =
        AsyncRwTransport::new_client(pumps.rmcp_side, stdin).with_max_line_length(MAX_STDOUT_LINE);
    let handshake = async {
        let running = serve_client_with_lifecycle(
            Handler::new(list_changed.clone()),
            transport,
            ClientLifecycleMode::Initialize,
        )
        .await
        .map_err(|e| init_failure(&e))?;
        let listed = first_listing(running, redactor.clone(), Some(pumps.results)).await?;
        Ok::<_, String>(listed)
    };

    // The deadline is polled by reference: when it fires the handshake (and with it the
    // upstream's stdin) is still alive, so the last stderr line is the upstream's own and not
    // its reaction to being cut off.
    let mut handshake = Box::pin(handshake);
    let deadline = tokio::time::sleep(within);
    tokio::pin!(deadline);
    let outcome = tokio::select! {
        res = &mut handshake => res.map_err(StartFailure::Failed),
        () = &mut deadline => Err(StartFailure::TimedOut {
            last_stderr: last_line(&last_stderr),
        }),
        // The child died during the handshake: say so rather than "connection closed".
        how = child.exited() => Err(StartFailure::Failed(how)),
    };
    // Closes the upstream's stdin unless the session took it over.
    drop(handshake);
    match outcome {
        Ok((running, upstream, (protocol_version, server_name), tools)) => Ok(Started {
            session: Session {
                upstream,
                protocol_version,
                server_name,
                list_changed,
                non_json: Some(pumps.counter),
                session_events: None,
                service: ServiceWatch::spawn(running),
                child: Some(child),
            },
            tools,
        }),
        Err(failure) => {
            Err(stdio_start_failed(child, failure, &last_stderr, within, &redactor).await)
        }
    }
}

/// The stdio upstream's process and its three pipes.
type StdioChild = (
    tokio::process::Child,
    tokio::process::ChildStdin,
    tokio::process::ChildStdout,
    tokio::process::ChildStderr,
);

/// Spawns the stdio upstream with exactly the launch spec's environment, hardened.
fn spawn_stdio(spec: &LaunchSpec, redactor: &Redactor) -> Result<StdioChild, WorkerError> {
    let mut cmd = Command::new(&spec.command);
    cmd.args(&spec.args)
        .current_dir(&spec.cwd)
        .env_clear()
        .envs(&spec.env)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    platform::harden(&mut cmd);
    // We are on a tokio task here (never spawn_blocking): PDEATHSIG follows this thread.
    let mut child = cmd.spawn().map_err(|e| WorkerError::UpstreamStart {
        message: redactor.redact(&spawn_failure(spec, &e)),
    })?;
    tracing::info!(pid = child.id(), command = %redactor.redact(&spec.command), "upstream started");

    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(WorkerError::UpstreamStart {
            message: "the upstream's stdio pipes are missing".to_owned(),
        });
    };
    Ok((child, stdin, stdout, stderr))
}

/// The tasks reading a stdio upstream's stdout (into rmcp's side of a pipe) and stderr, and
/// what they share with the session.
struct StdioPumps {
    /// Where rmcp reads the upstream's JSON lines.
    rmcp_side: tokio::io::DuplexStream,
    counter: Arc<NonJsonCounter>,
    last_stderr: Arc<Mutex<Option<String>>>,
    results: Arc<CallResults>,
}

impl StdioPumps {
    fn spawn(
        stdout: tokio::process::ChildStdout,
        stderr: tokio::process::ChildStderr,
        redactor: &Arc<Redactor>,
    ) -> Self {
        let counter = Arc::new(NonJsonCounter::default());
        let last_stderr = Arc::new(Mutex::new(None::<String>));
        let results = Arc::new(CallResults::default());
        let (rmcp_side, pump_side) = tokio::io::duplex(PIPE_BUFFER);
        tokio::spawn({
            let (redactor, counter, results) = (redactor.clone(), counter.clone(), results.clone());
            async move {
                if let Err(e) =
                    stdio::pump_stdout(stdout, pump_side, redactor, counter, results).await
                {
                    tracing::warn!(error = %e, "reading the upstream's stdout failed");
                }
            }
        });
        tokio::spawn({
            let (redactor, last_stderr) = (redactor.clone(), last_stderr.clone());
            async move {
                if let Err(e) =
                    stdio::pump_stderr(stderr, std::io::stderr(), redactor, last_stderr).await
                {
                    tracing::warn!(error = %e, "reading the upstream's stderr failed");
                }
            }
        });
        Self {
            rmcp_side,
            counter,
            last_stderr,
            results,
        }
    }
}

/// The most telling stderr line seen so far ([`crate::stdio::telling`]).
fn last_line(last_stderr: &Mutex<Option<String>>) -> Option<String> {
    last_stderr.lock().ok().and_then(|l| l.clone())
}

/// Stops a stdio upstream that did not start, and says why it did not (redacted).
async fn stdio_start_failed(
    mut child: ChildHandle,
    failure: StartFailure,
    last_stderr: &Mutex<Option<String>>,
    within: Duration,
    redactor: &Redactor,
) -> WorkerError {
    let message = match failure {
        StartFailure::TimedOut { last_stderr } => {
            // Our deadline, not the upstream's doing: whatever it does once its stdin closes
            // (exit 0, say) must not be reported as the cause.
            let mut message = start_timeout(within);
            if let Some(last) = last_stderr {
                message = format!("{message}; stderr: {last}");
            }
            child.stop().await;
            message
        }
        StartFailure::Failed(mut message) => {
            // An early exit shows up as a closed connection first; prefer the exit status.
            if let Ok(how) = tokio::time::timeout(Duration::from_millis(300), child.exited()).await
                && !message.starts_with("exited")
                && !message.starts_with("killed")
            {
                message = format!("{how} ({message})");
            }
            let exited = child.exit_now().is_some();
            if let Some(last) = last_line(last_stderr) {
                message = format!("{message}; stderr: {last}");
            }
            if !exited {
                let _ = child.stop().await;
            }
            message
        }
    };
    WorkerError::UpstreamStart {
        message: redactor.redact(&message),
    }
}

/// Why the stdio command could not be spawned, naming the manifest field to fix. "No such
/// file or directory" alone would not say whether the command or the working directory is
/// missing.
fn spawn_failure(spec: &LaunchSpec, error: &std::io::Error) -> String {
    let command = &spec.command;
    if error.kind() != std::io::ErrorKind::NotFound {
        return format!("cannot start {command}: {error}");
    }
    if !std::path::Path::new(&spec.cwd).is_dir() {
        return format!(
            "cannot start {command}: the working directory {} does not exist (check mcp.cwd)",
            spec.cwd
        );
    }
    let path = spec.env.get("PATH").map_or("", String::as_str);
    let program = std::path::Path::new(command);
    let exists = if program.is_absolute() {
        program.is_file()
    } else if program.components().count() > 1 {
        std::path::Path::new(&spec.cwd).join(program).is_file()
    } else {
        std::env::split_paths(path).any(|dir| dir.join(program).is_file())
    };
    if exists {
        // execve also says ENOENT when the file is there but its `#!` interpreter (or its
        // dynamic loader) is not.
        return format!(
            "cannot start {command}: it exists, but its interpreter (the #! line) or loader was \
             not found; install that, or point mcp.command at the interpreter"
        );
    }
    if program.is_absolute() {
        return format!("cannot start {command}: no such file (check mcp.command)");
    }
    format!(
        "cannot start {command}: not found on the upstream's PATH ({path}); install it there or \
         give mcp.command as an absolute path"
    )
}

/// Why a stdio upstream did not start.
enum StartFailure {
    /// `timeouts.startMs` passed first; the last stderr line seen before it, if any.
    TimedOut { last_stderr: Option<String> },
    /// The handshake or listing failed, or the child exited (description).
    Failed(String),
}

/// The one wording of a start timeout (stdio and http).
fn start_timeout(within: Duration) -> String {
    format!(
        "timed out after {} ms (startMs) waiting for the MCP handshake and tools/list",
        within.as_millis()
    )
}

/// The launch spec's HTTP headers, each marked sensitive (they may carry credentials).
fn http_headers(
    spec: &LaunchSpec,
) -> Result<HashMap<reqwest::header::HeaderName, reqwest::header::HeaderValue>, WorkerError> {
    let mut headers = HashMap::new();
    for (name, value) in &spec.headers {
        let header_name =
            reqwest::header::HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                WorkerError::LaunchSpec {
                    problem: format!("invalid HTTP header name {name:?}"),
                }
            })?;
        let mut header_value =
            reqwest::header::HeaderValue::from_str(value).map_err(|_| WorkerError::LaunchSpec {
                problem: format!("invalid value for HTTP header {name:?}"),
            })?;
        header_value.set_sensitive(true);
        headers.insert(header_name, header_value);
    }
    Ok(headers)
}

async fn start_http(
    spec: &LaunchSpec,
    redactor: Arc<Redactor>,
    within: Duration,
    bearer: Option<Arc<Bearer>>,
) -> Result<Started, WorkerError> {
    let headers = http_headers(spec)?;
    let config = StreamableHttpClientTransportConfig::with_uri(spec.url.as_str())
        .custom_headers(headers)
        .max_json_response_size(MAX_HTTP_MESSAGE)
        .max_sse_event_size(MAX_HTTP_MESSAGE);
    let results = Arc::new(CallResults::default());
    let (events_tx, session_events) = mpsc::unbounded_channel();
    let client = HttpClient::new(results.clone(), events_tx).with_bearer(bearer);
    let transport = StreamableHttpClientTransport::with_client(client.clone(), config);
    let list_changed = Arc::new(Notify::new());

    let handshake = async {
        let running = serve_client_with_lifecycle(
            Handler::new(list_changed.clone()),
            transport,
            ClientLifecycleMode::Auto {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                legacy_version: Some(ProtocolVersion::V_2025_06_18),
            },
        )
        .await
        .map_err(|e| {
            if let Some(status) = init_auth_failure(&e) {
                WorkerError::UpstreamAuth {
                    message: format!("the upstream refused the credentials ({status})"),
                }
            } else {
                WorkerError::UpstreamStart {
                    message: redactor.redact(&init_failure(&e)),
                }
            }
        })?;
        let listed = first_listing(running, redactor.clone(), Some(results)).await;
        listed.map_err(|message| WorkerError::UpstreamStart {
            message: redactor.redact(&message),
        })
    };
    let (running, upstream, (protocol_version, server_name), tools) =
        match tokio::time::timeout(within, handshake).await {
            Ok(res) => res?,
            Err(_) => {
                return Err(WorkerError::UpstreamStart {
                    message: start_timeout(within),
                });
            }
        };
    client.mark_started();
    subscribe_list_changed(&running, list_changed.clone());
    Ok(Started {
        session: Session {
            upstream,
            protocol_version,
            server_name,
            list_changed,
            non_json: None,
            session_events: Some(session_events),
            service: ServiceWatch::spawn(running),
            child: None,
        },
        tools,
    })
}

/// The running client, the upstream, (protocol version, server name), the tools.
type Listed = (
    RunningService<RoleClient, Handler>,
    Arc<RmcpUpstream>,
    (String, String),
    Vec<Value>,
);

/// After the handshake: no response caching (every list is fresh), then every tools page.
async fn first_listing(
    running: RunningService<RoleClient, Handler>,
    redactor: Arc<Redactor>,
    results: Option<Arc<CallResults>>,
) -> Result<Listed, String> {
    let peer = running.peer().clone();
    peer.set_response_cache_config(ClientCacheConfig::disabled())
        .await;
    let (protocol_version, server_name) = peer
        .peer_info()
        .map(|info| {
            (
                info.protocol_version.as_str().to_owned(),
                info.server_info
                    .as_ref()
                    .map(|s| s.name.clone())
                    .unwrap_or_default(),
            )
        })
        .unwrap_or_default();
    let offers = peer
        .peer_info()
        .map(|info| offers(&info.capabilities))
        .unwrap_or_default();
    let upstream = Arc::new(RmcpUpstream {
        peer,
        redactor,
        progress: running.service().progress.clone(),
        relay: running.service().relay.clone(),
        results,
        offers,
        updates: running.service().updates.clone(),
        listens: Default::default(),
        logs: running.service().logs.clone(),
        mrtr: protocol_version.as_str() >= mrtr::MRTR_SINCE,
    });
    let tools = upstream.list_tools().await.map_err(|f| match f {
        CallFailure::Rpc { code, message, .. } => {
            format!("tools/list failed: JSON-RPC error {code}: {message}")
        }
        CallFailure::Closed => "connection closed during tools/list".to_owned(),
        CallFailure::TooLarge(limit) => {
            format!("tools/list failed: a page larger than {limit} bytes")
        }
        CallFailure::Auth(detail)
        | CallFailure::Unavailable(detail)
        | CallFailure::Other(detail) => {
            format!("tools/list failed: {detail}")
        }
    })?;
    tracing::info!(
        protocol_version = %protocol_version,
        tools = tools.len(),
        "upstream initialized"
    );
    Ok((running, upstream, (protocol_version, server_name), tools))
}

/// What the upstream's capabilities offer beyond tools.
fn offers(capabilities: &rmcp::model::ServerCapabilities) -> Offers {
    Offers {
        prompts: capabilities.prompts.is_some(),
        resources: capabilities.resources.is_some(),
        completions: capabilities.completions.is_some(),
        subscribe: capabilities
            .resources
            .as_ref()
            .and_then(|r| r.subscribe)
            .unwrap_or(false),
    }
}

/// On a 2026-07-28 connection list changes arrive on a `subscriptions/listen` stream.
fn subscribe_list_changed(running: &RunningService<RoleClient, Handler>, notify: Arc<Notify>) {
    let peer = running.peer().clone();
    let Some(info) = peer.peer_info() else {
        return;
    };
    let caps = &info.capabilities;
    let tools = caps.tools.as_ref().and_then(|t| t.list_changed) == Some(true);
    let prompts = caps.prompts.as_ref().and_then(|p| p.list_changed) == Some(true);
    let resources = caps.resources.as_ref().and_then(|r| r.list_changed) == Some(true);
    if info.protocol_version.has_initialize() || !(tools || prompts || resources) {
        return;
    }
    tokio::spawn(async move {
        let mut filter = SubscriptionFilter::builder();
        if tools {
            filter = filter.tools_list_changed();
        }
        if prompts {
            filter = filter.prompts_list_changed();
        }
        if resources {
            filter = filter.resources_list_changed();
        }
        let filter = filter.build();
        let mut subscription = match peer.listen(filter).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot subscribe to the upstream's tool list changes");
                return;
            }
        };
        loop {
            match subscription.next().await {
                Ok(Some(
                    ServerNotification::ToolListChangedNotification(_)
                    | ServerNotification::PromptListChangedNotification(_)
                    | ServerNotification::ResourceListChangedNotification(_),
                )) => {
                    notify.notify_one();
                }
                Ok(Some(_)) => {}
                Ok(None) => {
                    tracing::debug!(end = ?subscription.end(), "tool list subscription ended");
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "tool list subscription failed");
                    return;
                }
            }
        }
    });
}

// === errors ===

fn init_failure(error: &ClientInitializeError) -> String {
    match error {
        ClientInitializeError::TransportError { error, context } => {
            format!("{context}: {}", error_chain(error.error.as_ref()))
        }
        ClientInitializeError::LegacyFallbackFailed { discover, fallback } => format!(
            "server/discover failed ({}), then initialize failed ({})",
            init_failure(discover),
            init_failure(fallback)
        ),
        ClientInitializeError::JsonRpcError(e) => {
            format!(
                "initialization failed: JSON-RPC error {}: {}",
                e.code.0, e.message
            )
        }
        other => format!("initialization failed: {other}"),
    }
}

/// The HTTP status, if initialization failed because the upstream refused our credentials.
fn init_auth_failure(error: &ClientInitializeError) -> Option<String> {
    match error {
        ClientInitializeError::TransportError { error, .. } => auth_failure(error.error.as_ref()),
        ClientInitializeError::LegacyFallbackFailed { discover, fallback } => {
            init_auth_failure(discover).or_else(|| init_auth_failure(fallback))
        }
        _ => None,
    }
}

const UNAUTHORIZED: &str = "HTTP 401 Unauthorized";
const FORBIDDEN: &str = "HTTP 403 Forbidden";

/// The HTTP status, if an error (or any of its sources) is an HTTP 401/403 from the upstream.
fn auth_failure(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut current = Some(error);
    while let Some(e) = current {
        if e.is::<AuthRequiredError>() {
            return Some(UNAUTHORIZED.to_owned());
        }
        if e.is::<InsufficientScopeError>() {
            return Some(FORBIDDEN.to_owned());
        }
        // Our HTTP client answers every 401/403 with one of these two.
        if let Some(http) = e.downcast_ref::<StreamableHttpError<WorkerError>>() {
            match http {
                StreamableHttpError::AuthRequired(_) => return Some(UNAUTHORIZED.to_owned()),
                StreamableHttpError::InsufficientScope(_) => return Some(FORBIDDEN.to_owned()),
                _ => {}
            }
        }
        current = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_failures_are_recognised() {
        let challenge: StreamableHttpError<WorkerError> =
            StreamableHttpError::AuthRequired(AuthRequiredError::new("Bearer".to_owned()));
        assert_eq!(auth_failure(&challenge).as_deref(), Some(UNAUTHORIZED));
        let plain: StreamableHttpError<WorkerError> = StreamableHttpError::InsufficientScope(
            InsufficientScopeError::new(String::new(), None),
        );
        assert_eq!(auth_failure(&plain).as_deref(), Some(FORBIDDEN));
        let other: StreamableHttpError<WorkerError> =
            StreamableHttpError::UnexpectedServerResponse("HTTP 500 oops".into());
        assert_eq!(auth_failure(&other), None);
    }

    #[test]
    #[cfg_attr(
        windows,
        ignore = "its fixture path /nope/server is not absolute on Windows, so the message is the PATH one"
    )]
    fn spawn_failures_name_what_to_fix() {
        let dir = std::env::temp_dir();
        let spec = |command: &str, cwd: &str| LaunchSpec {
            command: command.to_owned(),
            cwd: cwd.to_owned(),
            env: HashMap::from([("PATH".to_owned(), "/usr/bin:/bin".to_owned())]),
            ..LaunchSpec::default()
        };
        let not_found = std::io::Error::from(std::io::ErrorKind::NotFound);
        let cwd = dir.to_string_lossy();
        assert_eq!(
            spawn_failure(&spec("nodex", &cwd), &not_found),
            "cannot start nodex: not found on the upstream's PATH (/usr/bin:/bin); install it \
             there or give mcp.command as an absolute path"
        );
        assert_eq!(
            spawn_failure(&spec("/nope/server", &cwd), &not_found),
            "cannot start /nope/server: no such file (check mcp.command)"
        );
        let missing = dir.join("tutti-no-such-dir-for-this-test");
        let missing = missing.to_string_lossy();
        assert_eq!(
            spawn_failure(&spec("node", &missing), &not_found),
            format!(
                "cannot start node: the working directory {missing} does not exist (check mcp.cwd)"
            )
        );
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        assert!(spawn_failure(&spec("node", &cwd), &denied).starts_with("cannot start node: "));
    }

    /// A script whose `#!` interpreter is missing also fails with ENOENT; the message must
    /// not send the user looking for the script.
    #[cfg(unix)]
    #[test]
    fn a_missing_interpreter_is_not_reported_as_a_missing_command() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("tutti-interp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let script = dir.join("server");
        std::fs::write(&script, "#!/nonexistent/interpreter\n").expect("script");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let error = std::process::Command::new(&script)
            .spawn()
            .expect_err("the interpreter does not exist");
        assert_eq!(error.kind(), std::io::ErrorKind::NotFound);
        let command = script.to_string_lossy().into_owned();
        let spec = LaunchSpec {
            command: command.clone(),
            cwd: dir.to_string_lossy().into_owned(),
            ..LaunchSpec::default()
        };
        let message = spawn_failure(&spec, &error);
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            message.starts_with(&format!(
                "cannot start {command}: it exists, but its interpreter"
            )),
            "{message}"
        );
    }
}

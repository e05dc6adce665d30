//! The `tutti.worker.v1.Worker` gRPC service: tool calls for exactly one generation.
//!
//! **Invariant:** a call is answered by the upstream only if it names this worker's own
//! generation and the worker is neither fenced nor shutting down.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rmcp::model::JsonObject;
use tokio::sync::{mpsc, oneshot, watch};
use tonic::{Request, Response, Status};
use tutti_proto::worker::worker_server::Worker;
use tutti_proto::worker::{
    AnswerUpstreamRequestRequest, CallError, CallToolEvent, CallToolReply, CallToolRequest,
    CancelRequest, Empty, ForwardRequest, GenerationRequest, LogMessage, ResourceUpdated,
    ShutdownRequest, UpstreamRequest, answer_upstream_request_request, call_tool_event,
    call_tool_reply,
};

use crate::upstream::relay::{RelayTo, Relayed};
use crate::upstream::{CallFailure, ProgressSink, Upstream};

/// Progress notifications of one streamed call that may wait for the gRPC stream; more are
/// dropped (progress is advisory, the answer is not).
const PROGRESS_BUFFER: usize = 64;

/// Call timeout when neither the request nor the launch spec names one.
pub(crate) const DEFAULT_CALL_TIMEOUT_MS: u32 = 60_000;

/// Where the worker is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Registered or registering; the upstream is not ready yet.
    Starting,
    /// Calls are served.
    Serving,
    /// `Shutdown` received: no new calls, in-flight calls may finish.
    Draining,
    /// `Fence` received: nothing new, in-flight calls are answered `[MCP_UNAVAILABLE]`.
    Fenced,
    /// The upstream is gone or being stopped: calls are answered `[MCP_UNAVAILABLE]`.
    Stopped,
    /// `Shutdown` drained: new calls are refused, left-over calls answered `[MCP_UNAVAILABLE]`.
    Closed,
}

/// What the main loop must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    /// The kernel fenced this generation.
    Fenced,
    /// The kernel asked for a shutdown and draining is over.
    ShutDown,
    /// A call hit HTTP 401/403 (the status line).
    AuthFailed(String),
}

/// Whether a call may proceed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    Admit,
    /// Wrong generation, fenced or shutting down: the caller must list tools again.
    Refuse,
    /// Our generation, but the upstream is not ready (starting) or gone.
    Unavailable,
}

/// The generation check, done on every call: equality with our own generation, and a phase
/// that still takes new calls.
pub(crate) fn admit(own: u64, requested: u64, phase: Phase) -> Admission {
    if requested != own {
        return Admission::Refuse;
    }
    match phase {
        Phase::Serving => Admission::Admit,
        Phase::Starting | Phase::Stopped => Admission::Unavailable,
        Phase::Draining | Phase::Fenced | Phase::Closed => Admission::Refuse,
    }
}

/// The refusal for a call that names another or a fenced generation (SPEC §5, -32602).
pub(crate) fn refusal(key: &str, generation: u64) -> CallError {
    CallError {
        code: -32602,
        message: format!(
            "tool is not available now (generation {generation} of {key} is fenced); list tools again"
        ),
        data_json: String::new(),
        reason: "fenced".to_owned(),
    }
}

fn unavailable(key: &str, what: &str, reason: &str) -> CallError {
    CallError {
        code: -32603,
        message: format!("[MCP_UNAVAILABLE] {key}: {what}"),
        data_json: String::new(),
        reason: reason.to_owned(),
    }
}

fn timed_out(key: &str, what: &str, ms: u32) -> CallError {
    CallError {
        code: -32603,
        message: format!("[MCP_TIMEOUT] {key}: {what} exceeded {ms} ms"),
        data_json: String::new(),
        reason: "timeout".to_owned(),
    }
}

/// -32021 MissingRequiredClientCapability (2026-07-28) for an upstream request `method`.
fn missing_capability(method: &str) -> CallError {
    let capability = match method {
        "elicitation/create" => "elicitation",
        "sampling/createMessage" => "sampling",
        "roots/list" => "roots",
        _ => "unknown",
    };
    CallError {
        code: -32021,
        message: format!(
            "Missing required client capability: the tool's upstream sent {method} and the \
             request did not declare the {capability} capability"
        ),
        data_json: serde_json::json!({"requiredCapabilities": {capability: {}}}).to_string(),
        reason: "missing_capability".to_owned(),
    }
}

fn cancelled() -> CallError {
    CallError {
        code: -32800,
        message: "Request cancelled".to_owned(),
        data_json: String::new(),
        reason: "cancelled".to_owned(),
    }
}

/// Parses an optional JSON object field of a request (`""` = none).
fn parse_object(field: &'static str, text: &str) -> Result<Option<JsonObject>, Status> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(map)) => Ok(Some(map)),
        Ok(serde_json::Value::Null) => Ok(None),
        Ok(_) => Err(Status::invalid_argument(format!(
            "{field} must be a JSON object"
        ))),
        Err(e) => Err(Status::invalid_argument(format!(
            "{field} is not valid JSON: {e}"
        ))),
    }
}

/// Drops `_meta` keys the MCP client sets itself (protocol metadata, progress token).
fn upstream_meta(mut meta: JsonObject) -> Option<JsonObject> {
    meta.retain(|k, _| k != "progressToken" && !k.starts_with("io.modelcontextprotocol/"));
    (!meta.is_empty()).then_some(meta)
}

// === impl Shared ===

/// State shared by the gRPC handlers and the main loop.
pub(crate) struct Shared<U> {
    key: String,
    generation: u64,
    phase: watch::Sender<Phase>,
    upstream: OnceLock<Arc<U>>,
    call_timeout_ms: AtomicU32,
    /// In-flight calls by call id → their cancel trigger.
    calls: Mutex<HashMap<String, oneshot::Sender<()>>>,
    inflight: watch::Sender<usize>,
    events: mpsc::UnboundedSender<Event>,
}

impl<U: Upstream> Shared<U> {
    pub(crate) fn new(key: String, generation: u64, events: mpsc::UnboundedSender<Event>) -> Self {
        Self {
            key,
            generation,
            phase: watch::Sender::new(Phase::Starting),
            upstream: OnceLock::new(),
            call_timeout_ms: AtomicU32::new(DEFAULT_CALL_TIMEOUT_MS),
            calls: Mutex::new(HashMap::new()),
            inflight: watch::Sender::new(0),
            events,
        }
    }

    pub(crate) fn set_call_timeout(&self, ms: u32) {
        let ms = if ms == 0 { DEFAULT_CALL_TIMEOUT_MS } else { ms };
        self.call_timeout_ms.store(ms, Ordering::Relaxed);
    }

    /// The upstream is ready: start serving (unless fenced or told to shut down meanwhile).
    pub(crate) fn attach(&self, upstream: Arc<U>) {
        let _ = self.upstream.set(upstream);
        self.phase.send_if_modified(|p| {
            let starting = *p == Phase::Starting;
            if starting {
                *p = Phase::Serving;
            }
            starting
        });
    }

    /// No more upstream: in-flight calls are answered `[MCP_UNAVAILABLE]` (a fenced worker
    /// keeps answering "fenced").
    pub(crate) fn stop_calls(&self) {
        self.phase.send_if_modified(|p| {
            let change = !matches!(*p, Phase::Fenced | Phase::Stopped | Phase::Closed);
            if change {
                *p = Phase::Stopped;
            }
            change
        });
    }

    fn check_generation(&self, requested: u64) -> Result<(), Status> {
        if requested == self.generation {
            Ok(())
        } else {
            Err(Status::failed_precondition(format!(
                "generation {requested} is not served here (this is generation {} of {})",
                self.generation, self.key
            )))
        }
    }

    fn register(self: &Arc<Self>, call_id: &str) -> Result<CallGuard<U>, Status> {
        let (tx, rx) = oneshot::channel();
        let id = if call_id.is_empty() {
            None
        } else {
            let mut calls = self
                .calls
                .lock()
                .map_err(|_| Status::internal("call table poisoned"))?;
            if calls.contains_key(call_id) {
                return Err(Status::already_exists(format!(
                    "call {call_id} is already in flight"
                )));
            }
            calls.insert(call_id.to_owned(), tx);
            Some(call_id.to_owned())
        };
        self.inflight.send_modify(|n| *n += 1);
        Ok(CallGuard {
            shared: Arc::clone(self),
            id,
            cancel: Some(rx),
        })
    }

    fn cancel(&self, call_id: &str) -> bool {
        let trigger = self.calls.lock().ok().and_then(|mut c| c.remove(call_id));
        match trigger {
            Some(tx) => tx.send(()).is_ok(),
            None => false,
        }
    }

    pub(crate) async fn call(
        self: &Arc<Self>,
        req: CallToolRequest,
        progress: Option<ProgressSink>,
    ) -> Result<CallToolReply, Status> {
        self.call_relaying(req, progress, None).await
    }

    /// [`Self::call`] whose upstream requests and log messages go to `relay`.
    async fn call_relaying(
        self: &Arc<Self>,
        req: CallToolRequest,
        progress: Option<ProgressSink>,
        relay: Option<RelayTo>,
    ) -> Result<CallToolReply, Status> {
        let reply = |outcome| CallToolReply {
            outcome: Some(outcome),
            generation: self.generation,
        };
        let upstream = match self.admitted(req.generation) {
            Ok(upstream) => upstream,
            Err(refused) => return Ok(reply(call_tool_reply::Outcome::Error(refused))),
        };
        let arguments = parse_object("arguments_json", &req.arguments_json)?;
        let meta = parse_object("meta_json", &req.meta_json)?.and_then(upstream_meta);
        let (meta, span) = crate::otel::start(meta, &self.key, &req.tool);
        let timeout_ms = if req.timeout_ms > 0 {
            req.timeout_ms
        } else {
            self.call_timeout_ms.load(Ordering::Relaxed)
        };

        let (relay, mut refused) = refusing(relay, req.refuse_requests);
        let mut guard = self.register(&req.call_id)?;
        tracing::debug!(call_id = %req.call_id, tool = %req.tool, timeout_ms, "tool call");
        // Whatever ends the wait first also cancels the upstream request (and so does this
        // handler being dropped because the caller went away).
        let interrupt = interrupted(
            guard.cancel.take(),
            refused.take(),
            self.phase.subscribe(),
            timeout_ms,
        );
        let called = match req.method.as_str() {
            "" | "tools/call" => {
                let call =
                    upstream.call_tool(req.tool, arguments, meta, progress, relay, interrupt);
                futures_util::future::Either::Left(call)
            }
            // A prompt whose upstream may ask the client, relayed like a tool call.
            "prompts/get" => futures_util::future::Either::Right(
                upstream.get_prompt(req.tool, arguments, meta, relay, interrupt),
            ),
            other => return Err(unknown_method(other)),
        };
        let outcome = match called.await {
            Ok(done) => Outcome::Done(done),
            Err(interrupted) => interrupted,
        };
        drop(guard);
        if let Some(span) = span {
            span.finish(match &outcome {
                Outcome::Done(Ok(_)) => "ok",
                Outcome::Done(Err(_)) => "error",
                Outcome::Cancelled => "cancelled",
                Outcome::TimedOut => "timeout",
                Outcome::MissingCapability(_) => "missing_capability",
                Outcome::Stopped(_) => "unavailable",
            });
        }

        Ok(reply(self.answer(outcome, "tool call", timeout_ms)))
    }

    /// One forwarded request beyond tools (`prompts/get`, `resources/read`, …): the same
    /// generation check, registration, cancellation, timeout and answers as a tool call.
    async fn forward(
        self: &Arc<Self>,
        method: &'static str,
        req: ForwardRequest,
    ) -> Result<CallToolReply, Status> {
        let reply = |outcome| CallToolReply {
            outcome: Some(outcome),
            generation: self.generation,
        };
        let upstream = match self.admitted(req.generation) {
            Ok(upstream) => upstream,
            Err(refused) => return Ok(reply(call_tool_reply::Outcome::Error(refused))),
        };
        let params = parse_object("params_json", &req.params_json)?;
        let timeout_ms = if req.timeout_ms > 0 {
            req.timeout_ms
        } else {
            self.call_timeout_ms.load(Ordering::Relaxed)
        };
        let mut guard = self.register(&req.call_id)?;
        tracing::debug!(call_id = %req.call_id, method, timeout_ms, "forwarded request");
        let interrupt = interrupted(
            guard.cancel.take(),
            None,
            self.phase.subscribe(),
            timeout_ms,
        );
        let outcome = match upstream.request(method, params, interrupt).await {
            Ok(done) => Outcome::Done(done),
            Err(interrupted) => interrupted,
        };
        drop(guard);
        Ok(reply(self.answer(outcome, method, timeout_ms)))
    }

    /// Resolves when this generation stops serving (fenced, stopped or closed): where the
    /// watch streams end.
    fn stops_serving(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut phase = self.phase.subscribe();
        async move {
            let _ = phase
                .wait_for(|p| matches!(p, Phase::Fenced | Phase::Stopped | Phase::Closed))
                .await;
        }
    }

    /// The upstream's log messages that no call claimed, until this generation stops serving.
    fn unclaimed_logs(&self, generation: u64) -> Result<LogStream, Status> {
        self.check_generation(generation)?;
        let logs = self
            .upstream
            .get()
            .and_then(|u| u.unclaimed_logs())
            .ok_or_else(|| Status::unavailable("the upstream is not serving"))?;
        let stopped = self.stops_serving();
        let logs = tokio_stream::wrappers::BroadcastStream::new(logs);
        // A lagging stream lost some messages; the ones after still go.
        let stream = futures_util::StreamExt::filter_map(logs, |log| {
            std::future::ready(log.ok().map(|params_json| Ok(LogMessage { params_json })))
        });
        Ok(Box::pin(futures_util::StreamExt::take_until(
            stream, stopped,
        )))
    }

    /// The upstream's resource updates until this generation stops serving.
    fn resource_updates(&self, generation: u64) -> Result<ResourceStream, Status> {
        self.check_generation(generation)?;
        let updates = self
            .upstream
            .get()
            .and_then(|u| u.resource_updates())
            .ok_or_else(|| Status::unavailable("the upstream is not serving"))?;
        let stopped = self.stops_serving();
        let updates = tokio_stream::wrappers::BroadcastStream::new(updates);
        let stream = futures_util::StreamExt::filter_map(updates, |update| {
            // A lagging stream lost some updates: the ones after stand for them.
            let update = update.ok().map(|params_json| {
                let uri = serde_json::from_str::<serde_json::Value>(&params_json)
                    .ok()
                    .and_then(|v| v.get("uri").and_then(|u| u.as_str()).map(str::to_owned))
                    .unwrap_or_default();
                Ok(ResourceUpdated { params_json, uri })
            });
            std::future::ready(update)
        });
        Ok(Box::pin(futures_util::StreamExt::take_until(
            stream, stopped,
        )))
    }

    /// The upstream to call for `generation`, or why the call is refused.
    fn admitted(&self, generation: u64) -> Result<Arc<U>, CallError> {
        let phase = *self.phase.borrow();
        match (
            admit(self.generation, generation, phase),
            self.upstream.get(),
        ) {
            (Admission::Admit, Some(upstream)) => Ok(Arc::clone(upstream)),
            (Admission::Refuse, _) => Err(refusal(&self.key, generation)),
            // Not ready yet, gone, or (never while serving) no upstream attached.
            (Admission::Unavailable, _) | (Admission::Admit, None) => Err(unavailable(
                &self.key,
                "upstream is not available",
                "unavailable",
            )),
        }
    }

    /// How a call that ran (or was interrupted) is answered.
    fn answer(&self, outcome: Outcome, what: &str, timeout_ms: u32) -> call_tool_reply::Outcome {
        match outcome {
            // The upstream's bytes as they came (no copy into a string).
            Outcome::Done(Ok(result)) => call_tool_reply::Outcome::ResultBytes(result),
            Outcome::Done(Err(failure)) => call_tool_reply::Outcome::Error(self.failure(failure)),
            Outcome::Cancelled => call_tool_reply::Outcome::Error(cancelled()),
            Outcome::MissingCapability(method) => {
                call_tool_reply::Outcome::Error(missing_capability(&method))
            }
            Outcome::TimedOut => {
                call_tool_reply::Outcome::Error(timed_out(&self.key, what, timeout_ms))
            }
            Outcome::Stopped(Phase::Fenced) => call_tool_reply::Outcome::Error(unavailable(
                &self.key,
                &format!("generation {} is fenced", self.generation),
                "fenced",
            )),
            Outcome::Stopped(Phase::Closed) => call_tool_reply::Outcome::Error(unavailable(
                &self.key,
                "the connector was stopped before the call finished (its drain period is over)",
                "unavailable",
            )),
            Outcome::Stopped(_) => call_tool_reply::Outcome::Error(unavailable(
                &self.key,
                "upstream connection closed",
                "unavailable",
            )),
        }
    }

    fn failure(&self, failure: CallFailure) -> CallError {
        match failure {
            CallFailure::Rpc {
                code,
                message,
                data,
            } => CallError {
                code,
                message,
                data_json: data.map(|d| d.to_string()).unwrap_or_default(),
                reason: "upstream_error".to_owned(),
            },
            CallFailure::Closed => {
                unavailable(&self.key, "upstream connection closed", "unavailable")
            }
            CallFailure::Unavailable(detail) => unavailable(&self.key, &detail, "unavailable"),
            CallFailure::Auth(status) => {
                let _ = self.events.send(Event::AuthFailed(status));
                unavailable(&self.key, "upstream refused the credentials", "unavailable")
            }
            CallFailure::TooLarge(limit) => unavailable(
                &self.key,
                &format!("result larger than {limit} bytes"),
                "unavailable",
            ),
            CallFailure::Other(detail) => {
                tracing::warn!(error = %detail, "tool call failed");
                CallError {
                    code: -32603,
                    message: format!("{}: {detail}", self.key),
                    data_json: String::new(),
                    reason: "upstream_error".to_owned(),
                }
            }
        }
    }

    fn fence(&self) {
        self.phase.send_if_modified(|p| {
            let change = *p != Phase::Fenced;
            *p = Phase::Fenced;
            change
        });
        let _ = self.events.send(Event::Fenced);
    }

    async fn shutdown(&self, grace: Duration) {
        self.phase.send_if_modified(|p| {
            let change = matches!(*p, Phase::Starting | Phase::Serving);
            if change {
                *p = Phase::Draining;
            }
            change
        });
        let mut inflight = self.inflight.subscribe();
        if tokio::time::timeout(grace, inflight.wait_for(|n| *n == 0))
            .await
            .is_err()
        {
            tracing::info!(
                in_flight = *inflight.borrow(),
                "shutdown grace period over; answering the remaining calls"
            );
        }
        self.phase.send_if_modified(|p| {
            let change = !matches!(*p, Phase::Fenced | Phase::Closed);
            if change {
                *p = Phase::Closed;
            }
            change
        });
        let _ = self.events.send(Event::ShutDown);
    }
}

/// The messages of `WatchLogs`.
type LogStream =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = Result<LogMessage, Status>> + Send>>;

/// The updates of `WatchResources`.
type ResourceStream =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = Result<ResourceUpdated, Status>> + Send>>;

/// What ends a call's wait other than its answer: the caller's `Cancel`, the timeout, or the
/// generation stopping (fenced, upstream gone, drained).
async fn interrupted(
    mut cancel: Option<oneshot::Receiver<()>>,
    mut refused: Option<mpsc::Receiver<Relayed>>,
    mut phase: watch::Receiver<Phase>,
    timeout_ms: u32,
) -> Outcome {
    let cancelled = async {
        match cancel.as_mut() {
            Some(rx) => rx.await,
            None => std::future::pending().await,
        }
    };
    // The upstream sent a request the calling client cannot answer (`refuse_requests`).
    let refused = async {
        match refused.as_mut() {
            Some(rx) => loop {
                match rx.recv().await {
                    Some(Relayed::Missing(method)) => break method,
                    Some(_) => {}
                    None => std::future::pending().await,
                }
            },
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        Ok(()) = cancelled => Outcome::Cancelled,
        method = refused => Outcome::MissingCapability(method),
        () = tokio::time::sleep(Duration::from_millis(u64::from(timeout_ms))) => Outcome::TimedOut,
        stopped = phase.wait_for(|p| matches!(p, Phase::Fenced | Phase::Stopped | Phase::Closed)) => {
            Outcome::Stopped(stopped.map(|p| *p).unwrap_or(Phase::Stopped))
        }
    }
}

enum Outcome {
    Done(Result<bytes::Bytes, CallFailure>),
    Cancelled,
    TimedOut,
    Stopped(Phase),
    /// The upstream sent this request to a client that cannot answer it (`refuse_requests`).
    MissingCapability(String),
}

/// Keeps a call registered while it is in flight.
struct CallGuard<U: Upstream> {
    shared: Arc<Shared<U>>,
    id: Option<String>,
    cancel: Option<oneshot::Receiver<()>>,
}

impl<U: Upstream> Drop for CallGuard<U> {
    fn drop(&mut self) {
        if let Some(id) = self.id.take()
            && let Ok(mut calls) = self.shared.calls.lock()
        {
            calls.remove(&id);
        }
        self.shared
            .inflight
            .send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// Runs one call for `CallToolStream`: its progress notifications as they come, then the
/// reply. When the caller goes away the call is dropped, which cancels it upstream (as a
/// dropped `CallTool` handler does).
async fn stream_call<U: Upstream>(
    shared: Arc<Shared<U>>,
    request: CallToolRequest,
    events: mpsc::Sender<Result<CallToolEvent, Status>>,
) {
    let event = |event| Ok(CallToolEvent { event: Some(event) });
    let (sink, mut progress) = mpsc::channel(PROGRESS_BUFFER);
    let (relay_sink, mut relayed) = mpsc::channel(PROGRESS_BUFFER);
    let relay = (request.relay_requests || request.relay_logs).then(|| RelayTo {
        sink: relay_sink,
        requests: request.relay_requests,
        logs: request.relay_logs,
        refuse: false,
        // The frontend sends a JSON object or nothing.
        answers: serde_json::from_str(&request.input_responses_json).ok(),
    });
    let call = shared.call_relaying(request, Some(sink), relay);
    let mut call = std::pin::pin!(call);
    let outcome = loop {
        tokio::select! {
            biased;
            Some(note) = progress.recv() => {
                // Never waits on a slow caller: a note that finds the stream full is dropped
                // (progress is advisory); only the reply below waits for room.
                let _ = events.try_send(event(call_tool_event::Event::ProgressJson(note)));
            }
            Some(relayed) = relayed.recv() => {
                // A request waits for room (it must arrive); a log message is advisory.
                if let Some(relayed) = relayed_event(relayed)
                    && events.send(event(relayed)).await.is_err()
                {
                    return;
                }
            }
            outcome = &mut call => break outcome,
            () = events.closed() => return,
        }
    };
    while let Ok(note) = progress.try_recv() {
        let _ = events.try_send(event(call_tool_event::Event::ProgressJson(note)));
    }
    let last = outcome.map(|reply| CallToolEvent {
        event: Some(call_tool_event::Event::Reply(reply)),
    });
    let _ = events.send(last).await;
}

/// A `CallToolRequest.method` the worker does not call this way.
fn unknown_method(method: &str) -> Status {
    Status::invalid_argument(format!(
        "CallToolRequest.method {method:?}: only tools/call and prompts/get are called this way"
    ))
}

/// For a call whose client cannot answer any request (`refuse_requests`, no relay): a relay
/// target that refuses, and where the refusal is told.
fn refusing(
    relay: Option<RelayTo>,
    refuse: bool,
) -> (Option<RelayTo>, Option<mpsc::Receiver<Relayed>>) {
    if relay.is_some() || !refuse {
        return (relay, None);
    }
    let (sink, refused) = mpsc::channel(1);
    let to = RelayTo {
        sink,
        requests: false,
        logs: false,
        refuse: true,
        answers: None,
    };
    (Some(to), Some(refused))
}

/// The stream event of one relayed request or log message.
fn relayed_event(relayed: Relayed) -> Option<call_tool_event::Event> {
    Some(match relayed {
        Relayed::Request {
            id,
            method,
            params_json,
            input,
        } => {
            let (input_key, input_round) = input.map(|i| (i.key, i.round)).unwrap_or_default();
            call_tool_event::Event::Request(UpstreamRequest {
                request_id: id,
                method,
                params_json,
                input_key,
                input_round,
            })
        }
        Relayed::Log(params) => call_tool_event::Event::LogJson(params),
        // Only on calls that refuse requests, which are never streamed with a relay.
        Relayed::Missing(_) => return None,
    })
}

/// The client's answer as the relay takes it.
fn relay_answer(
    answer: Option<answer_upstream_request_request::Answer>,
) -> crate::upstream::relay::Answer {
    use answer_upstream_request_request::Answer;
    let error = |code: i32, message: String, data: Option<serde_json::Value>| {
        rmcp::model::ErrorData::new(rmcp::model::ErrorCode(code), message, data)
    };
    match answer {
        Some(Answer::ResultJson(text)) => serde_json::from_str(&text).map_err(|e| {
            error(
                -32603,
                format!("the client's answer is not JSON: {e}"),
                None,
            )
        }),
        Some(Answer::Error(e)) => Err(error(
            e.code,
            e.message,
            serde_json::from_str(&e.data_json).ok(),
        )),
        None => Err(error(-32603, "the client gave no answer".to_owned(), None)),
    }
}

// === impl WorkerService ===

/// The gRPC service.
pub(crate) struct WorkerService<U> {
    shared: Arc<Shared<U>>,
}

impl<U> WorkerService<U> {
    pub(crate) fn new(shared: Arc<Shared<U>>) -> Self {
        Self { shared }
    }
}

#[tonic::async_trait]
impl<U: Upstream> Worker for WorkerService<U> {
    async fn call_tool(
        &self,
        request: Request<CallToolRequest>,
    ) -> Result<Response<CallToolReply>, Status> {
        self.shared
            .call(request.into_inner(), None)
            .await
            .map(Response::new)
    }

    type CallToolStreamStream = futures_util::stream::Chain<
        futures_util::stream::Iter<std::option::IntoIter<Result<CallToolEvent, Status>>>,
        tokio_stream::wrappers::ReceiverStream<Result<CallToolEvent, Status>>,
    >;

    async fn call_tool_stream(
        &self,
        request: Request<CallToolRequest>,
    ) -> Result<Response<Self::CallToolStreamStream>, Status> {
        let (events, mut stream) = mpsc::channel(PROGRESS_BUFFER + 1);
        tokio::spawn(stream_call(
            self.shared.clone(),
            request.into_inner(),
            events,
        ));
        // Answer once there is something to send: the response head then travels with the
        // first event (for a call without progress, with the reply, as for `CallTool`)
        // instead of waking the caller once more for the head alone. Dropping this future
        // (the caller left) drops `stream`, which ends the call.
        let first = stream.recv().await;
        Ok(Response::new(futures_util::StreamExt::chain(
            futures_util::stream::iter(first),
            tokio_stream::wrappers::ReceiverStream::new(stream),
        )))
    }

    async fn get_prompt(
        &self,
        request: Request<ForwardRequest>,
    ) -> Result<Response<CallToolReply>, Status> {
        let shared = &self.shared;
        shared
            .forward("prompts/get", request.into_inner())
            .await
            .map(Response::new)
    }

    async fn read_resource(
        &self,
        request: Request<ForwardRequest>,
    ) -> Result<Response<CallToolReply>, Status> {
        let shared = &self.shared;
        shared
            .forward("resources/read", request.into_inner())
            .await
            .map(Response::new)
    }

    async fn complete(
        &self,
        request: Request<ForwardRequest>,
    ) -> Result<Response<CallToolReply>, Status> {
        let shared = &self.shared;
        shared
            .forward("completion/complete", request.into_inner())
            .await
            .map(Response::new)
    }

    async fn subscribe(
        &self,
        request: Request<ForwardRequest>,
    ) -> Result<Response<CallToolReply>, Status> {
        let shared = &self.shared;
        shared
            .forward("resources/subscribe", request.into_inner())
            .await
            .map(Response::new)
    }

    async fn unsubscribe(
        &self,
        request: Request<ForwardRequest>,
    ) -> Result<Response<CallToolReply>, Status> {
        let shared = &self.shared;
        shared
            .forward("resources/unsubscribe", request.into_inner())
            .await
            .map(Response::new)
    }

    type WatchResourcesStream = ResourceStream;

    type WatchLogsStream = LogStream;

    async fn watch_logs(
        &self,
        request: Request<GenerationRequest>,
    ) -> Result<Response<Self::WatchLogsStream>, Status> {
        let generation = request.into_inner().generation;
        self.shared.unclaimed_logs(generation).map(Response::new)
    }

    async fn watch_resources(
        &self,
        request: Request<GenerationRequest>,
    ) -> Result<Response<Self::WatchResourcesStream>, Status> {
        let generation = request.into_inner().generation;
        self.shared.resource_updates(generation).map(Response::new)
    }

    async fn cancel(&self, request: Request<CancelRequest>) -> Result<Response<Empty>, Status> {
        let req = request.into_inner();
        self.shared.check_generation(req.generation)?;
        let found = self.shared.cancel(&req.call_id);
        tracing::debug!(call_id = %req.call_id, found, "cancel");
        Ok(Response::new(Empty {}))
    }

    async fn answer_upstream_request(
        &self,
        request: Request<AnswerUpstreamRequestRequest>,
    ) -> Result<Response<Empty>, Status> {
        let req = request.into_inner();
        self.shared.check_generation(req.generation)?;
        let Some(upstream) = self.shared.upstream.get() else {
            return Err(Status::failed_precondition("the upstream is not ready"));
        };
        if !upstream.answer_request(&req.request_id, relay_answer(req.answer)) {
            return Err(Status::not_found(format!(
                "no upstream request {} waits for an answer (call {})",
                req.request_id, req.call_id
            )));
        }
        Ok(Response::new(Empty {}))
    }

    async fn fence(&self, request: Request<GenerationRequest>) -> Result<Response<Empty>, Status> {
        let req = request.into_inner();
        self.shared.check_generation(req.generation)?;
        tracing::info!(generation = req.generation, "fenced by the kernel");
        self.shared.fence();
        Ok(Response::new(Empty {}))
    }

    async fn shutdown(&self, request: Request<ShutdownRequest>) -> Result<Response<Empty>, Status> {
        let req = request.into_inner();
        self.shared.check_generation(req.generation)?;
        tracing::info!(grace_ms = req.grace_ms, "shutdown requested by the kernel");
        self.shared
            .shutdown(Duration::from_millis(u64::from(req.grace_ms)))
            .await;
        Ok(Response::new(Empty {}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::sync::atomic::AtomicBool;

    use serde_json::{Value, json};
    use tokio::sync::Notify;

    const KEY: &str = "demo";
    const GEN: u64 = (3 << 32) | 7;

    /// A scripted upstream: `echo` answers, `fail` errors, `gone` is closed, `hang` never
    /// answers and records being dropped (= cancelled upstream).
    #[derive(Default)]
    struct Fake {
        /// The `hang` call's work was dropped (by an interrupt or the caller).
        hang_dropped: AtomicBool,
        /// An interrupt ended a call (the real upstream sends `notifications/cancelled`).
        interrupted: AtomicBool,
        hang_started: Notify,
    }

    struct OnDrop<'a>(&'a AtomicBool);
    impl Drop for OnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    impl Upstream for Fake {
        async fn list_tools(&self) -> Result<Vec<Value>, CallFailure> {
            Ok(vec![json!({"name": "echo"})])
        }

        async fn call_tool<W: Send>(
            &self,
            name: String,
            arguments: Option<JsonObject>,
            meta: Option<JsonObject>,
            progress: Option<ProgressSink>,
            _relay: Option<RelayTo>,
            interrupt: impl Future<Output = W> + Send,
        ) -> Result<Result<bytes::Bytes, CallFailure>, W> {
            let work = async {
                if name == "progress"
                    && let Some(sink) = &progress
                {
                    for step in [1, 2] {
                        let _ = sink.try_send(json!({"progress": step, "total": 2}).to_string());
                    }
                }
                self.work(name, arguments, meta)
                    .await
                    .map(|v| v.to_string().into())
            };
            tokio::select! {
                done = work => Ok(done),
                why = interrupt => {
                    self.interrupted.store(true, Ordering::SeqCst);
                    Err(why)
                }
            }
        }
    }

    impl Fake {
        async fn work(
            &self,
            name: String,
            arguments: Option<JsonObject>,
            meta: Option<JsonObject>,
        ) -> Result<Value, CallFailure> {
            match name.as_str() {
                "echo" => Ok(json!({
                    "content": [{"type": "text", "text": arguments.and_then(|a| a.get("message").cloned())}],
                    "_meta": meta,
                })),
                "fail" => Err(CallFailure::Rpc {
                    code: -32602,
                    message: "Unknown tool: fail".into(),
                    data: Some(json!({"x": 1})),
                }),
                "gone" => Err(CallFailure::Closed),
                "progress" => Ok(json!({"content": []})),
                _ => {
                    let _flag = OnDrop(&self.hang_dropped);
                    self.hang_started.notify_one();
                    std::future::pending::<()>().await;
                    Err(CallFailure::Closed)
                }
            }
        }
    }

    fn serving() -> (Arc<Shared<Fake>>, Arc<Fake>, mpsc::UnboundedReceiver<Event>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared::new(KEY.to_owned(), GEN, tx));
        let fake = Arc::new(Fake::default());
        shared.attach(fake.clone());
        (shared, fake, rx)
    }

    fn call(tool: &str, id: &str, generation: u64) -> CallToolRequest {
        CallToolRequest {
            generation,
            call_id: id.to_owned(),
            tool: tool.to_owned(),
            arguments_json: r#"{"message":"hi"}"#.to_owned(),
            timeout_ms: 0,
            meta_json: String::new(),
            ..CallToolRequest::default()
        }
    }

    /// Starts a `hang` call with id `id` and returns once the fake upstream is working on it.
    async fn hanging(
        shared: &Arc<Shared<Fake>>,
        fake: &Fake,
        id: &str,
    ) -> tokio::task::JoinHandle<Result<CallToolReply, Status>> {
        let pending = tokio::spawn({
            let (shared, req) = (shared.clone(), call("hang", id, GEN));
            async move { shared.call(req, None).await }
        });
        fake.hang_started.notified().await;
        pending
    }

    /// The error a spawned call ended with.
    async fn joined_error(
        pending: tokio::task::JoinHandle<Result<CallToolReply, Status>>,
    ) -> CallError {
        error_of(
            pending
                .await
                .unwrap_or_else(|_| Err(Status::internal("join"))),
        )
    }

    fn error_of(reply: Result<CallToolReply, Status>) -> CallError {
        match reply.ok().and_then(|r| r.outcome) {
            Some(call_tool_reply::Outcome::Error(e)) => e,
            other => panic!("expected an error, got {other:?}"),
        }
    }

    #[test]
    fn generation_check() {
        assert_eq!(admit(GEN, GEN, Phase::Serving), Admission::Admit);
        assert_eq!(admit(GEN, GEN + 1, Phase::Serving), Admission::Refuse);
        assert_eq!(admit(GEN, GEN - 1, Phase::Serving), Admission::Refuse);
        assert_eq!(admit(GEN, 0, Phase::Serving), Admission::Refuse);
        assert_eq!(admit(GEN, GEN, Phase::Fenced), Admission::Refuse);
        assert_eq!(admit(GEN, GEN, Phase::Draining), Admission::Refuse);
        assert_eq!(admit(GEN, GEN, Phase::Closed), Admission::Refuse);
        assert_eq!(admit(GEN, GEN, Phase::Starting), Admission::Unavailable);
        assert_eq!(admit(GEN, GEN, Phase::Stopped), Admission::Unavailable);
        assert_eq!(admit(GEN, GEN + 1, Phase::Starting), Admission::Refuse);
    }

    #[test]
    fn refusal_names_generation_and_key() {
        let e = refusal("github", 42);
        assert_eq!(e.code, -32602);
        assert_eq!(e.reason, "fenced");
        assert_eq!(
            e.message,
            "tool is not available now (generation 42 of github is fenced); list tools again"
        );
    }

    #[test]
    fn meta_keeps_only_caller_keys() {
        let meta = json!({"progressToken": 1, "io.modelcontextprotocol/protocolVersion": "x", "trace": "t"});
        let Value::Object(meta) = meta else {
            panic!("object")
        };
        let kept = upstream_meta(meta).unwrap_or_default();
        assert_eq!(Value::Object(kept), json!({"trace": "t"}));
    }

    #[tokio::test]
    async fn success_passes_the_result_through() {
        let (shared, _, _) = serving();
        let mut req = call("echo", "c1", GEN);
        req.meta_json = r#"{"trace":"abc"}"#.to_owned();
        let reply = shared.call(req, None).await.ok();
        assert_eq!(reply.as_ref().map(|r| r.generation), Some(GEN));
        let Some(call_tool_reply::Outcome::ResultBytes(json)) = reply.and_then(|r| r.outcome)
        else {
            panic!("expected a result");
        };
        let value: Value = serde_json::from_slice(&json).unwrap_or_default();
        assert_eq!(value["content"][0]["text"], "hi");
        assert_eq!(value["_meta"]["trace"], "abc");
        assert_eq!(*shared.inflight.borrow(), 0);
    }

    #[tokio::test]
    async fn wrong_generation_is_refused() {
        let (shared, _, _) = serving();
        let e = error_of(shared.call(call("echo", "c1", GEN + 1), None).await);
        assert_eq!(e.code, -32602);
        assert_eq!(e.reason, "fenced");
        assert!(e.message.contains(&format!("generation {}", GEN + 1)));
    }

    #[tokio::test]
    async fn not_ready_is_unavailable() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let shared: Arc<Shared<Fake>> = Arc::new(Shared::new(KEY.to_owned(), GEN, tx));
        let e = error_of(shared.call(call("echo", "c1", GEN), None).await);
        assert_eq!((e.code, e.reason.as_str()), (-32603, "unavailable"));
        assert!(e.message.starts_with("[MCP_UNAVAILABLE] demo: "));
    }

    #[tokio::test]
    async fn upstream_errors_pass_unchanged() {
        let (shared, _, _) = serving();
        let e = error_of(shared.call(call("fail", "c1", GEN), None).await);
        assert_eq!(e.code, -32602);
        assert_eq!(e.message, "Unknown tool: fail");
        assert_eq!(e.data_json, r#"{"x":1}"#);
        assert_eq!(e.reason, "upstream_error");
        let e = error_of(shared.call(call("gone", "c2", GEN), None).await);
        assert_eq!(
            e.message,
            "[MCP_UNAVAILABLE] demo: upstream connection closed"
        );
    }

    #[tokio::test]
    async fn bad_arguments_are_rejected() {
        let (shared, _, _) = serving();
        let mut req = call("echo", "c1", GEN);
        req.arguments_json = "[1]".to_owned();
        let status = shared.call(req, None).await.err().map(|s| s.code());
        assert_eq!(status, Some(tonic::Code::InvalidArgument));
        let mut req = call("echo", "c1", GEN);
        req.arguments_json = String::new();
        assert!(shared.call(req, None).await.is_ok());
    }

    #[tokio::test]
    async fn timeout_cancels_upstream() {
        let (shared, fake, _) = serving();
        let mut req = call("hang", "c1", GEN);
        req.timeout_ms = 30;
        let e = error_of(shared.call(req, None).await);
        assert_eq!(e.code, -32603);
        assert_eq!(e.reason, "timeout");
        assert_eq!(e.message, "[MCP_TIMEOUT] demo: tool call exceeded 30 ms");
        assert!(fake.interrupted.load(Ordering::SeqCst));
        assert!(fake.hang_dropped.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn cancel_answers_cancelled() {
        let (shared, fake, _) = serving();
        let service = WorkerService::new(shared.clone());
        let pending = hanging(&shared, &fake, "c9").await;
        // Wrong generation: refused, the call keeps running.
        let refused = service
            .cancel(Request::new(CancelRequest {
                generation: GEN + 1,
                call_id: "c9".into(),
            }))
            .await;
        assert_eq!(
            refused.err().map(|s| s.code()),
            Some(tonic::Code::FailedPrecondition)
        );
        let ok = service
            .cancel(Request::new(CancelRequest {
                generation: GEN,
                call_id: "c9".into(),
            }))
            .await;
        assert!(ok.is_ok());
        let e = joined_error(pending).await;
        assert_eq!(
            (e.code, e.message.as_str(), e.reason.as_str()),
            (-32800, "Request cancelled", "cancelled")
        );
        assert!(fake.interrupted.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn duplicate_call_ids_are_rejected() {
        let (shared, fake, _) = serving();
        let first = hanging(&shared, &fake, "dup").await;
        let second = shared.call(call("echo", "dup", GEN), None).await;
        assert_eq!(
            second.err().map(|s| s.code()),
            Some(tonic::Code::AlreadyExists)
        );
        first.abort();
    }

    #[tokio::test]
    async fn fence_answers_in_flight_and_refuses_new_calls() {
        let (shared, fake, mut events) = serving();
        let service = WorkerService::new(shared.clone());
        let pending = hanging(&shared, &fake, "c1").await;
        let wrong = service
            .fence(Request::new(GenerationRequest {
                generation: GEN - 1,
            }))
            .await;
        assert!(wrong.is_err());
        assert!(
            service
                .fence(Request::new(GenerationRequest { generation: GEN }))
                .await
                .is_ok()
        );
        assert_eq!(events.recv().await, Some(Event::Fenced));
        let e = joined_error(pending).await;
        assert_eq!(e.code, -32603);
        assert_eq!(e.reason, "fenced");
        assert!(e.message.starts_with("[MCP_UNAVAILABLE] demo: "));
        assert!(fake.interrupted.load(Ordering::SeqCst));
        let e = error_of(shared.call(call("echo", "c2", GEN), None).await);
        assert_eq!((e.code, e.reason.as_str()), (-32602, "fenced"));
    }

    #[tokio::test]
    async fn shutdown_drains_then_answers_the_rest() {
        let (shared, fake, mut events) = serving();
        let service = WorkerService::new(shared.clone());
        let pending = hanging(&shared, &fake, "c1").await;
        let done = service
            .shutdown(Request::new(ShutdownRequest {
                generation: GEN,
                grace_ms: 20,
            }))
            .await;
        assert!(done.is_ok());
        assert_eq!(events.recv().await, Some(Event::ShutDown));
        let e = joined_error(pending).await;
        assert_eq!((e.code, e.reason.as_str()), (-32603, "unavailable"));
        let e = error_of(shared.call(call("echo", "c2", GEN), None).await);
        assert_eq!((e.code, e.reason.as_str()), (-32602, "fenced"));
    }

    #[tokio::test]
    async fn a_streamed_call_sends_its_progress_then_the_reply() {
        let (shared, _, _) = serving();
        let (events, mut stream) = mpsc::channel(8);
        stream_call(shared.clone(), call("progress", "p1", GEN), events).await;
        let mut seen = Vec::new();
        while let Ok(Ok(event)) = stream.try_recv() {
            seen.push(event.event);
        }
        assert_eq!(seen.len(), 3, "{seen:?}");
        assert_eq!(
            seen[0],
            Some(call_tool_event::Event::ProgressJson(
                r#"{"progress":1,"total":2}"#.into()
            ))
        );
        assert_eq!(
            seen[1],
            Some(call_tool_event::Event::ProgressJson(
                r#"{"progress":2,"total":2}"#.into()
            ))
        );
        assert!(
            matches!(
                &seen[2],
                Some(call_tool_event::Event::Reply(CallToolReply {
                    outcome: Some(call_tool_reply::Outcome::ResultBytes(_)),
                    ..
                }))
            ),
            "{seen:?}"
        );
    }

    #[tokio::test]
    async fn a_streamed_call_whose_caller_left_is_cancelled_upstream() {
        let (shared, fake, _) = serving();
        let (events, stream) = mpsc::channel(8);
        let streaming = tokio::spawn(stream_call(shared.clone(), call("hang", "s1", GEN), events));
        fake.hang_started.notified().await;
        drop(stream);
        tokio::time::timeout(Duration::from_secs(5), streaming)
            .await
            .expect("the streamed call ends when its caller leaves")
            .expect("task");
        assert!(fake.hang_dropped.load(Ordering::SeqCst));
        assert_eq!(*shared.inflight.borrow(), 0);
    }

    #[tokio::test]
    async fn dropped_handler_cancels_upstream() {
        let (shared, fake, _) = serving();
        let pending = hanging(&shared, &fake, "c1").await;
        pending.abort();
        let _ = pending.await;
        assert!(fake.hang_dropped.load(Ordering::SeqCst));
        assert_eq!(*shared.inflight.borrow(), 0);
        assert!(shared.calls.lock().map(|c| c.is_empty()).unwrap_or(false));
    }
}

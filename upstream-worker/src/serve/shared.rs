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
use tonic::Status;
use tutti_proto::worker::{
    CallError, CallToolReply, CallToolRequest, ForwardRequest, LogMessage, ResourceUpdated,
    call_tool_reply,
};

use crate::serve::admission::{
    Admission, Event, Phase, admit, cancelled, missing_capability, refusal, timed_out, unavailable,
};
use crate::upstream::relay::{RelayTo, Relayed};
use crate::upstream::{CallFailure, ProgressSink, Upstream};

/// Call timeout when neither the request nor the launch spec names one.
pub(crate) const DEFAULT_CALL_TIMEOUT_MS: u32 = 60_000;

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
pub(super) fn upstream_meta(mut meta: JsonObject) -> Option<JsonObject> {
    meta.retain(|k, _| k != "progressToken" && !k.starts_with("io.modelcontextprotocol/"));
    (!meta.is_empty()).then_some(meta)
}

// === impl Shared ===

/// State shared by the gRPC handlers and the main loop.
pub(crate) struct Shared<U> {
    pub(super) key: String,
    pub(super) generation: u64,
    pub(super) phase: watch::Sender<Phase>,
    pub(super) upstream: OnceLock<Arc<U>>,
    pub(super) call_timeout_ms: AtomicU32,
    /// In-flight calls by call id → their cancel trigger.
    pub(super) calls: Mutex<HashMap<String, oneshot::Sender<()>>>,
    pub(super) inflight: watch::Sender<usize>,
    pub(super) events: mpsc::UnboundedSender<Event>,
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

    pub(super) fn check_generation(&self, requested: u64) -> Result<(), Status> {
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

    pub(super) fn cancel(&self, call_id: &str) -> bool {
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
    pub(super) async fn call_relaying(
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
    pub(super) async fn forward(
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
    pub(super) fn unclaimed_logs(&self, generation: u64) -> Result<LogStream, Status> {
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
    pub(super) fn resource_updates(&self, generation: u64) -> Result<ResourceStream, Status> {
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

    pub(super) fn fence(&self) {
        self.phase.send_if_modified(|p| {
            let change = *p != Phase::Fenced;
            *p = Phase::Fenced;
            change
        });
        let _ = self.events.send(Event::Fenced);
    }

    pub(super) async fn shutdown(&self, grace: Duration) {
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
pub(super) type LogStream =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = Result<LogMessage, Status>> + Send>>;

/// The updates of `WatchResources`.
pub(super) type ResourceStream =
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

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    #[test]
    fn meta_keeps_only_caller_keys() {
        let meta = json!({"progressToken": 1, "io.modelcontextprotocol/protocolVersion": "x", "trace": "t"});
        let Value::Object(meta) = meta else {
            panic!("object")
        };
        let kept = upstream_meta(meta).unwrap_or_default();
        assert_eq!(Value::Object(kept), json!({"trace": "t"}));
    }
}

//! `tools/call`, shared by both eras: resolve the name to an immutable binding, validate
//! the arguments, call the worker that owns the generation, and map every outcome.

use std::future::pending;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot, watch};
use tutti_proto::worker::{CallToolRequest, CancelRequest, call_tool_reply};

use crate::app::App;
use crate::backend::{Backend, Identity};
use crate::call::validate;
use crate::catalog::routes::{Fenced, Lookup, Tool};
use crate::era::tables::{self, Piece, RawMembers, Revision};
use crate::error::Error;
use crate::http::body::Chunks;
use crate::observe::audit::Outcome;
use crate::rpc::{
    self, INTERNAL_ERROR, INVALID_PARAMS, REQUEST_CANCELLED, RpcError, routes_not_ready,
};

/// What the worker's answer means (`CallError.reason` and code, tutti.worker.v1).
fn outcome_of_worker_error(reason: &str, code: i64) -> Outcome {
    match reason {
        "timeout" => Outcome::Timeout,
        "cancelled" => Outcome::Cancelled,
        "unavailable" => Outcome::Unavailable,
        // Refused before it reached the upstream (-32602, list tools again) or fenced
        // while in flight (-32603).
        "fenced" if code != INVALID_PARAMS => Outcome::Unavailable,
        _ => Outcome::RpcError,
    }
}

/// A call's answer and how it ended.
type Ended = (Result<CallResult, RpcError>, Outcome);

/// How a call uses the worker's stream: not at all (`CallTool`), for progress only, or for
/// progress, the upstream's requests to the client and its log messages.
pub(crate) enum Streaming {
    Plain,
    Progress(mpsc::Sender<String>),
    Relay(RelayStream),
    /// A 2026-07-28 client that declared no capability an upstream request needs: a request
    /// of the upstream ends the call with -32021 (`refuse_requests`); progress as asked.
    Refusing(Option<mpsc::Sender<String>>),
}

/// What a relayed call streams, and what the relay needs to answer the worker.
pub(crate) struct RelayStream {
    pub(crate) events: mpsc::Sender<crate::backend::WorkerEvent>,
    pub(crate) requests: bool,
    pub(crate) logs: bool,
    /// Set to the worker call's id once it is made.
    pub(crate) call_id: Arc<std::sync::OnceLock<String>>,
    /// The relayed requests' kinds and outcomes, for the call's audit record.
    pub(crate) relayed: Arc<crate::observe::audit::Relayed>,
    /// A 2026-07-28 client's own `inputResponses` sent without a `requestState`, as JSON:
    /// the worker gives them to a 2026-07-28 upstream with the first round.
    pub(crate) input_responses: Option<String>,
}

impl From<Option<mpsc::Sender<String>>> for Streaming {
    fn from(progress: Option<mpsc::Sender<String>>) -> Self {
        match progress {
            Some(sink) => Self::Progress(sink),
            None => Self::Plain,
        }
    }
}

/// A `CallToolResult` as the worker sent it: JSON text checked (in one pass) to be one object,
/// its top-level members located (key and the byte range of the value's text), and written to
/// the client as it is or with only the top-level members its era needs changed
/// ([`CallResult::in_era`], [`crate::era::tables`]). Never parsed into a tree and serialized again:
/// for a 1 MiB result that round trip was most of the frontend's work
/// (docs/PERFORMANCE.md), and every value keeps its exact text (key order, number spelling,
/// integers beyond 2^53). The text is the slice of the worker's frame it came in, and goes
/// into the response body as slices of it ([`crate::http::body`]).
#[derive(Debug)]
pub(crate) struct CallResult {
    /// Exactly one JSON object (surrounding whitespace allowed), UTF-8.
    text: Bytes,
    /// The object's members in order: key (unescaped) and where its value's text is.
    members: Vec<(String, Range<usize>)>,
    is_error: bool,
    /// How it is written; `None`: the text as it came.
    pieces: Option<Vec<Piece>>,
}

impl CallResult {
    /// `None` unless `text` is exactly one JSON object.
    pub(crate) fn from_json(text: String) -> Option<Self> {
        Self::from_bytes(Bytes::from(text))
    }

    /// `None` unless `text` is exactly one JSON object (in UTF-8). The one pass over it.
    pub(crate) fn from_bytes(text: Bytes) -> Option<Self> {
        let members = {
            let RawMembers(members) = serde_json::from_slice::<RawMembers<'_>>(&text).ok()?;
            let base = text.as_ptr() as usize;
            members
                .into_iter()
                .map(|(key, value)| {
                    // The value is borrowed from `text`: its offset is where it starts there.
                    let start = (value.get().as_ptr() as usize).checked_sub(base)?;
                    Some((key.into_owned(), start..start + value.get().len()))
                })
                .collect::<Option<Vec<_>>>()?
        };
        let is_error = members
            .iter()
            .any(|(key, value)| key == "isError" && text.get(value.clone()) == Some(b"true"));
        Some(Self {
            text,
            members,
            is_error,
            pieces: None,
        })
    }

    /// One of our own results (a JSON object built here).
    pub(crate) fn from_value(value: &Value) -> Option<Self> {
        Self::from_json(value.to_string())
    }

    /// `isError: true`.
    pub(crate) fn is_error(&self) -> bool {
        self.is_error
    }

    /// The form the client's era gets (the table in [`crate::era::tables`]): only the top-level
    /// members that era needs changed are changed, every other member is written as it came.
    pub(crate) fn in_era(self, revision: Revision) -> Self {
        let pieces = {
            let keys: Vec<&str> = self.members.iter().map(|(key, _)| key.as_str()).collect();
            tables::result_pieces(revision, &keys, |i| self.member_text(i))
        };
        Self { pieces, ..self }
    }

    /// The text of member `i`'s value (checked as UTF-8 when the result was read).
    fn member_text(&self, i: usize) -> &str {
        self.members
            .get(i)
            .and_then(|(_, range)| self.text.get(range.clone()))
            .and_then(|raw| std::str::from_utf8(raw).ok())
            .unwrap_or_default()
    }

    /// Appends the result's JSON text to `out`: the members kept as slices of the text.
    pub(crate) fn write_to(&self, out: &mut Chunks) {
        let Some(pieces) = &self.pieces else {
            out.append(&self.text.slice(trimmed(&self.text)));
            return;
        };
        out.push(b'{');
        for (n, piece) in pieces.iter().enumerate() {
            if n > 0 {
                out.push(b',');
            }
            match piece {
                Piece::Kept(i) => {
                    if let Some((key, range)) = self.members.get(*i) {
                        out.extend(tables::quoted(key).as_bytes());
                        out.push(b':');
                        out.append(&self.text.slice(range.clone()));
                    }
                }
                Piece::Written(member) => out.extend(member.as_bytes()),
            }
        }
        out.push(b'}');
    }

    /// Length of the JSON text as it would be written, whitespace around an unchanged text
    /// included (tests; the response no longer needs a capacity hint).
    #[cfg(test)]
    fn len(&self) -> usize {
        let member_len = |i: usize| {
            self.members
                .get(i)
                .map_or(0, |(k, v)| k.len() + v.len() + 3)
        };
        match &self.pieces {
            None => self.text.len(),
            Some(pieces) => pieces.iter().fold(2, |n, piece| {
                n + 1
                    + match piece {
                        Piece::Kept(i) => member_len(*i),
                        Piece::Written(member) => member.len(),
                    }
            }),
        }
    }

    /// The text as written (tests).
    #[cfg(test)]
    fn written(&self) -> String {
        let mut out = Chunks::default();
        self.write_to(&mut out);
        String::from_utf8_lossy(&out.into_vec()).into_owned()
    }
}

/// `text` without the JSON whitespace around it.
fn trimmed(text: &[u8]) -> Range<usize> {
    let json_space = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    let start = text
        .iter()
        .position(|b| !json_space(b))
        .unwrap_or(text.len());
    let end = text
        .iter()
        .rposition(|b| !json_space(b))
        .map_or(start, |i| i + 1);
    start..end
}

/// Tests only: the response path writes the text itself (`rpc::call_message`).
#[cfg(test)]
impl serde::Serialize for CallResult {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serde_json::value::RawValue::from_string(self.written())
            .map_err(serde::ser::Error::custom)?
            .serialize(serializer)
    }
}

/// The frontend's own deadline is the call timeout plus this much (the worker normally
/// answers the timeout itself).
pub(crate) const DEADLINE_GRACE: Duration = Duration::from_secs(2);

pub(crate) fn tutti(reason: &str, key: &str, generation: u64) -> Value {
    json!({"reason": reason, "connector": key, "generation": generation})
}

pub(crate) fn with_tutti(data: Option<Value>, tutti: Value) -> Value {
    match data {
        Some(Value::Object(mut map)) => {
            map.insert("tutti".into(), tutti);
            Value::Object(map)
        }
        Some(other) => json!({"upstream": other, "tutti": tutti}),
        None => json!({"tutti": tutti}),
    }
}

pub(crate) fn unavailable(key: &str, generation: u64, reason: &str, what: &str) -> RpcError {
    RpcError::new(INTERNAL_ERROR, format!("[MCP_UNAVAILABLE] {key}: {what}"))
        .with_data(json!({"tutti": tutti(reason, key, generation)}))
}

/// The binding's generation was fenced before the call reached the upstream: the SPEC §5 row
/// "removed or fenced" (-32602, list tools again), the same answer as a vanished name.
fn not_available(name: &str, key: &str, generation: u64) -> RpcError {
    RpcError::new(
        INVALID_PARAMS,
        format!(
            "tool {name} is not available now (its connector was removed, stopped, or is \
             restarting); list tools again"
        ),
    )
    .with_data(json!({"tutti": tutti("fenced", key, generation)}))
}

/// The generation was fenced while the call was in flight (SPEC §5: -32603 unavailable).
pub(crate) fn fenced_mid_call(key: &str, generation: u64) -> RpcError {
    unavailable(
        key,
        generation,
        "fenced",
        &format!("generation {generation} was fenced"),
    )
}

pub(crate) fn timed_out(key: &str, generation: u64, what: &str) -> RpcError {
    RpcError::new(INTERNAL_ERROR, format!("[MCP_TIMEOUT] {key}: {what}"))
        .with_data(json!({"tutti": tutti("timeout", key, generation)}))
}

/// The name of a `tools/call` request, or the -32602 answer.
pub(crate) fn tool_name(params: Option<&Value>) -> Result<&str, RpcError> {
    params
        .and_then(|p| p.get("name"))
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::new(INVALID_PARAMS, "Invalid params: name is required"))
}

/// `200 OK` with a `tools/call` answer: the result's JSON text as the worker sent it, or the
/// error.
pub(crate) fn call_response(id: &Value, answer: Result<CallResult, RpcError>) -> Response {
    match call_chunks(id, &answer) {
        Ok(chunks) => crate::http::body::chunks_response(StatusCode::OK, chunks),
        Err(e) => rpc::unserializable(&e),
    }
}

/// The JSON-RPC response message of a `tools/call` answer as bytes (the body of a plain
/// answer, the last event of an event-stream one).
pub(crate) fn call_message(
    id: &Value,
    answer: &Result<CallResult, RpcError>,
) -> Result<Vec<u8>, serde_json::Error> {
    call_chunks(id, answer).map(Chunks::into_vec)
}

/// [`call_message`] as pieces: the result's text is not copied.
fn call_chunks(
    id: &Value,
    answer: &Result<CallResult, RpcError>,
) -> Result<Chunks, serde_json::Error> {
    let mut out = Chunks::default();
    match answer {
        Ok(result) => {
            // The same bytes as serializing `Envelope`, with the result's text as it came.
            out.extend(br#"{"jsonrpc":"2.0","id":"#);
            out.extend(&serde_json::to_vec(id)?);
            out.extend(br#","result":"#);
            result.write_to(&mut out);
            out.push(b'}');
        }
        Err(error) => out.extend(&serde_json::to_vec(&rpc::error_body(id, error))?),
    }
    Ok(out)
}

/// Resolves a local tool name at call start.
pub(crate) async fn resolve(app: &App, name: &str) -> Result<Arc<Tool>, RpcError> {
    let Some(table) = app.routes().await else {
        return Err(routes_not_ready());
    };
    match table.lookup(name) {
        Lookup::Found(tool) => Ok(tool),
        Lookup::Gone(gone) => Err(not_available(name, &gone.key, gone.generation)),
        // No connector or generation is known for a name that never routed.
        Lookup::Unknown => Err(
            RpcError::new(INVALID_PARAMS, format!("Unknown tool: {name}"))
                .with_data(json!({"tutti": {"reason": "unknown_tool"}})),
        ),
    }
}

/// Sends `Cancel` to the worker unless disarmed (the call completed). Dropping the call's
/// future (the client closed the stream) therefore cancels the upstream call.
pub(crate) struct CancelGuard {
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) endpoint: String,
    pub(crate) request: Option<CancelRequest>,
}

impl CancelGuard {
    pub(crate) fn disarm(&mut self) {
        self.request = None;
    }
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        let Some(request) = self.request.take() else {
            return;
        };
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let backend = self.backend.clone();
        let endpoint = std::mem::take(&mut self.endpoint);
        handle.spawn(async move {
            if let Err(e) = backend.cancel(&endpoint, request).await {
                tracing::debug!(error = %e, "cancel not delivered");
            }
        });
    }
}

/// Records the call in the audit log when it finishes, or as `cancelled` when its future is
/// dropped (the client closed the stream).
struct AuditGuard<'a> {
    app: &'a App,
    who: &'a Identity,
    tool: &'a Tool,
    started: Instant,
    done: bool,
    relayed: Option<Arc<crate::observe::audit::Relayed>>,
}

impl AuditGuard<'_> {
    fn finish(&mut self, (answer, outcome): &Ended) {
        self.done = true;
        let code = match answer {
            Ok(_) => 0,
            Err(e) => i32::try_from(e.code).unwrap_or(i32::MIN),
        };
        self.app.audit.record(
            self.who,
            self.tool,
            self.started,
            *outcome,
            code,
            self.relayed.as_deref(),
        );
    }
}

impl Drop for AuditGuard<'_> {
    fn drop(&mut self) {
        if !self.done {
            let code = i32::try_from(REQUEST_CANCELLED).unwrap_or(i32::MIN);
            self.app.audit.record(
                self.who,
                self.tool,
                self.started,
                Outcome::Cancelled,
                code,
                self.relayed.as_deref(),
            );
        }
    }
}

/// Runs one call of `who` against a resolved binding and records it in the audit log. `Ok`
/// is the `CallToolResult` to return (the upstream's, unchanged, or an `invalid_arguments`
/// result).
pub(crate) async fn execute(
    app: &App,
    who: &Identity,
    tool: &Tool,
    arguments: Option<Value>,
    cancelled: Option<oneshot::Receiver<()>>,
    streaming: impl Into<Streaming>,
) -> Result<CallResult, RpcError> {
    let streaming = streaming.into();
    let relayed = match &streaming {
        Streaming::Relay(relay) => Some(relay.relayed.clone()),
        _ => None,
    };
    let mut audit = AuditGuard {
        app,
        who,
        tool,
        started: Instant::now(),
        done: false,
        relayed,
    };
    let c = &tool.connector;
    let permit = match app.circuits.admit(&c.key, c.generation, c.circuit) {
        Ok(permit) => permit,
        Err(open) => {
            let ended = (Err(open), Outcome::Unavailable);
            audit.finish(&ended);
            return ended.0;
        }
    };
    let span = crate::observe::otel::start(&tool.otel);
    let meta_json = span.as_ref().map(|s| s.meta_json()).unwrap_or_default();
    let ended = execute_call(app, tool, arguments, cancelled, streaming, meta_json).await;
    permit.finish(ended.1.circuit_verdict());
    audit.finish(&ended);
    if let Some(span) = span {
        span.finish(ended.1.as_str());
    }
    ended.0
}

async fn execute_call(
    app: &App,
    tool: &Tool,
    arguments: Option<Value>,
    cancelled: Option<oneshot::Receiver<()>>,
    streaming: Streaming,
    meta_json: String,
) -> Ended {
    let connector = &tool.connector;
    let (key, generation) = (connector.key.as_str(), connector.generation);

    let arguments = arguments
        .filter(|a| !a.is_null())
        .unwrap_or_else(|| Value::Object(Map::new()));
    let arguments_json =
        match validate::check_and_encode(&app.checks, &tool.validator, arguments).await {
            Ok(json) => json,
            Err(text) => return invalid_arguments(&text),
        };

    let mut fence = connector.fence.subscribe();
    if fence.borrow_and_update().is_fenced() {
        // Fenced between resolution and now: nothing was sent upstream.
        return (
            Err(not_available(&tool.name, key, generation)),
            Outcome::RpcError,
        );
    }

    let call_id = app.next_call_id();
    let request = CallToolRequest {
        generation,
        call_id: call_id.clone(),
        tool: tool.upstream_name.clone(),
        arguments_json,
        timeout_ms: connector.timeout_ms,
        meta_json,
        relay_requests: matches!(&streaming, Streaming::Relay(r) if r.requests),
        relay_logs: matches!(&streaming, Streaming::Relay(r) if r.logs),
        refuse_requests: matches!(&streaming, Streaming::Refusing(_)),
        method: String::new(),
        input_responses_json: match &streaming {
            Streaming::Relay(r) => r.input_responses.clone().unwrap_or_default(),
            _ => String::new(),
        },
    };
    if let Streaming::Relay(relay) = &streaming {
        let _ = relay.call_id.set(call_id.clone());
    }
    let mut guard = CancelGuard {
        backend: app.backend.clone(),
        endpoint: connector.endpoint.clone(),
        request: Some(CancelRequest {
            generation,
            call_id,
        }),
    };
    let deadline = Duration::from_millis(u64::from(connector.timeout_ms)) + DEADLINE_GRACE;

    // Biased: a reply that is already there wins over a fence or a deadline noticed in the
    // same poll (the worker answered before it went away, so its answer is the one to give).
    tokio::select! {
        biased;
        reply = send_call(app, tool, request, streaming) => {
            guard.disarm();
            map_reply(&tool.name, key, generation, reply)
        }
        why = until_fenced(fence) => (Err(fenced_mid_call(key, generation)), fence_outcome(why)),
        () = until_cancelled(cancelled) => (
            Err(cancelled_error(key, generation)),
            Outcome::Cancelled,
        ),
        () = tokio::time::sleep(deadline) => (Err(deadline_passed(tool)), Outcome::Timeout),
    }
}

/// The `invalid_arguments` result: a tool error naming what is wrong with the arguments.
fn invalid_arguments(text: &str) -> Ended {
    let result = json!({"content": [{"type": "text", "text": text}], "isError": true});
    let answer = CallResult::from_value(&result)
        .ok_or_else(|| RpcError::new(INTERNAL_ERROR, "cannot encode a result"));
    (answer, Outcome::InvalidArguments)
}

/// Sends the call to the worker that owns the tool's generation, streaming progress if asked.
async fn send_call(
    app: &App,
    tool: &Tool,
    request: CallToolRequest,
    streaming: Streaming,
) -> Result<tutti_proto::worker::CallToolReply, Error> {
    let endpoint = &tool.connector.endpoint;
    match streaming {
        Streaming::Progress(progress) => {
            app.backend
                .call_tool_with_progress(endpoint, request, progress)
                .await
        }
        Streaming::Relay(relay) => {
            app.backend
                .call_tool_relayed(endpoint, request, relay.events)
                .await
        }
        Streaming::Refusing(Some(progress)) => {
            app.backend
                .call_tool_with_progress(endpoint, request, progress)
                .await
        }
        Streaming::Plain | Streaming::Refusing(None) => {
            let data_endpoint = &tool.connector.data_endpoint;
            app.backend
                .call_tool_plain(endpoint, data_endpoint, request)
                .await
        }
    }
}

/// Completes when the generation is fenced, with why; never if the fence's sender is gone.
pub(crate) async fn until_fenced(mut fence: watch::Receiver<Fenced>) -> Fenced {
    let fenced = fence.wait_for(|f| f.is_fenced()).await.map(|f| *f);
    match fenced {
        Ok(why) => why,
        Err(_) => pending().await,
    }
}

/// How a call that a fence ended is audited and counted: a deliberate fence (uninstall,
/// disconnect, shutdown) is no failure of the connector's (SPEC §12 counts worker gone,
/// timeouts and transport errors).
pub(crate) fn fence_outcome(why: Fenced) -> Outcome {
    match why {
        Fenced::Deliberate => Outcome::Withdrawn,
        Fenced::No | Fenced::Failed => Outcome::Unavailable,
    }
}

/// Completes when the client cancels the call; never if it cannot (no receiver, or its
/// sender was dropped).
pub(crate) async fn until_cancelled(cancelled: Option<oneshot::Receiver<()>>) {
    let delivered = match cancelled {
        Some(rx) => rx.await.is_ok(),
        None => false,
    };
    if !delivered {
        pending::<()>().await;
    }
}

/// The frontend's own deadline passed without an answer from the worker.
fn deadline_passed(tool: &Tool) -> RpcError {
    let connector = &tool.connector;
    timed_out(
        &connector.key,
        connector.generation,
        &format!(
            "tool {} did not answer within {} ms",
            tool.name, connector.timeout_ms
        ),
    )
}

fn map_reply(
    name: &str,
    key: &str,
    generation: u64,
    reply: Result<tutti_proto::worker::CallToolReply, Error>,
) -> Ended {
    let reply = match reply {
        Ok(reply) => reply,
        Err(e) => return map_worker_failure(name, key, generation, &e),
    };
    let generation = if reply.generation == 0 {
        generation
    } else {
        reply.generation
    };
    match reply.outcome {
        Some(call_tool_reply::Outcome::ResultJson(text)) => {
            map_result(key, generation, Bytes::from(text))
        }
        Some(call_tool_reply::Outcome::ResultBytes(text)) => map_result(key, generation, text),
        Some(call_tool_reply::Outcome::Error(error)) => {
            map_call_error(name, key, generation, error)
        }
        None => (
            Err(unavailable(
                key,
                generation,
                "unavailable",
                "the worker returned no outcome",
            )),
            Outcome::Unavailable,
        ),
    }
}

/// The worker call itself failed (no reply).
fn map_worker_failure(name: &str, key: &str, generation: u64, e: &Error) -> Ended {
    match e {
        // The worker refused the call up front: it never reached the upstream.
        Error::WorkerFenced { .. } => {
            (Err(not_available(name, key, generation)), Outcome::RpcError)
        }
        Error::WorkerTimeout { .. } => (
            Err(timed_out(key, generation, "the call timed out")),
            Outcome::Timeout,
        ),
        e => {
            tracing::warn!(connector = key, generation, error = %e, "worker call failed");
            (
                Err(unavailable(
                    key,
                    generation,
                    "unavailable",
                    "worker unavailable",
                )),
                Outcome::Unavailable,
            )
        }
    }
}

/// The -32800 answer to a request the client cancelled (tool calls and relayed prompts).
pub(crate) fn cancelled_error(key: &str, generation: u64) -> RpcError {
    RpcError::new(REQUEST_CANCELLED, "Request cancelled")
        .with_data(json!({"tutti": tutti("cancelled", key, generation)}))
}

/// The answer when the worker's result is not what it must be (tool calls and forwards).
pub(crate) fn malformed_result<T>(key: &str, generation: u64) -> (Result<T, RpcError>, Outcome) {
    let why = unavailable(
        key,
        generation,
        "unavailable",
        "the worker returned a malformed result",
    );
    (Err(why), Outcome::Unavailable)
}

/// The upstream's `CallToolResult` text.
fn map_result(key: &str, generation: u64, text: Bytes) -> Ended {
    match CallResult::from_bytes(text) {
        Some(result) => {
            let outcome = if result.is_error() {
                Outcome::ToolError
            } else {
                Outcome::Ok
            };
            (Ok(result), outcome)
        }
        None => malformed_result(key, generation),
    }
}

/// A JSON-RPC error from the upstream, or the worker's own (`CallError`).
fn map_call_error(
    name: &str,
    key: &str,
    generation: u64,
    error: tutti_proto::worker::CallError,
) -> Ended {
    let data = if error.data_json.is_empty() {
        None
    } else {
        serde_json::from_str(&error.data_json).ok()
    };
    let reason = if error.reason.is_empty() {
        "upstream_error"
    } else {
        error.reason.as_str()
    };
    let code = if error.code == 0 {
        INTERNAL_ERROR
    } else {
        i64::from(error.code)
    };
    if reason == "fenced" && code == INVALID_PARAMS {
        // The worker refused a call for a generation it no longer serves: the same
        // SPEC §5 answer as a generation fenced before the call was sent.
        return (Err(not_available(name, key, generation)), Outcome::RpcError);
    }
    (
        Err(RpcError::new(code, error.message)
            .with_data(with_tutti(data, tutti(reason, key, generation)))),
        outcome_of_worker_error(reason, code),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::era::tables::META_SERVER_INFO;
    use serde::Serialize;
    use tutti_proto::worker::{CallError, CallToolReply};

    #[test]
    fn upstream_errors_keep_code_message_and_data() {
        let reply = CallToolReply {
            outcome: Some(call_tool_reply::Outcome::Error(CallError {
                code: -32001,
                message: "nope".into(),
                data_json: r#"{"why":"x"}"#.into(),
                reason: "upstream_error".into(),
            })),
            generation: 9,
        };
        let (answer, outcome) = map_reply("gh_x", "gh", 9, Ok(reply));
        assert_eq!(outcome, Outcome::RpcError);
        let e = answer.expect_err("error");
        assert_eq!(e.code, -32001);
        assert_eq!(e.message, "nope");
        assert_eq!(
            e.data,
            Some(
                json!({"why":"x","tutti":{"reason":"upstream_error","connector":"gh","generation":9}})
            )
        );
    }

    #[test]
    fn transport_failures_are_unavailable() {
        let (answer, outcome) = map_reply(
            "gh_x",
            "gh",
            3,
            Err(Error::WorkerUnavailable {
                endpoint: "/x".into(),
                detail: "gone".into(),
            }),
        );
        assert_eq!(outcome, Outcome::Unavailable);
        let e = answer.expect_err("error");
        assert_eq!(e.code, INTERNAL_ERROR);
        assert_eq!(e.message, "[MCP_UNAVAILABLE] gh: worker unavailable");
        assert_eq!(
            e.data
                .and_then(|d| d["tutti"]["reason"].as_str().map(str::to_owned))
                .as_deref(),
            Some("unavailable")
        );
    }

    /// SPEC §5's answer for a fenced generation (-32602, list tools again), for `gh_x` of
    /// generation 4 of `gh`.
    fn assert_lists_again((answer, outcome): Ended) {
        assert_eq!(outcome, Outcome::RpcError);
        let e = answer.expect_err("error");
        assert_eq!(e.code, INVALID_PARAMS);
        assert_eq!(
            e.message,
            "tool gh_x is not available now (its connector was removed, stopped, or is \
             restarting); list tools again"
        );
        assert_eq!(
            e.data,
            Some(json!({"tutti":{"reason":"fenced","connector":"gh","generation":4}}))
        );
    }

    #[test]
    fn a_worker_refusing_a_fenced_generation_says_list_again() {
        let (answer, outcome) = map_reply(
            "gh_x",
            "gh",
            4,
            Err(Error::WorkerFenced {
                endpoint: "/x".into(),
                generation: 4,
                detail: "fenced".into(),
            }),
        );
        assert_lists_again((answer, outcome));
    }

    #[test]
    fn results_pass_unchanged() {
        let text = r#"{"content":[{"type":"text","text":"hi"}],"structuredContent":{"a":1},"isError":false}"#;
        let reply = CallToolReply {
            outcome: Some(call_tool_reply::Outcome::ResultJson(text.into())),
            generation: 1,
        };
        let (answer, outcome) = map_reply("gh_x", "gh", 1, Ok(reply));
        assert_eq!(outcome, Outcome::Ok);
        let result = answer.expect("result");
        // Byte for byte, also in the envelope.
        assert_eq!(result.written(), text);
        #[derive(Serialize)]
        struct Envelope<'a> {
            result: &'a CallResult,
        }
        let envelope = serde_json::to_string(&Envelope { result: &result }).expect("envelope");
        assert_eq!(envelope, format!(r#"{{"result":{text}}}"#));
    }

    #[test]
    fn result_text_is_checked_and_read_without_a_tree() {
        let shape = |t: &str| {
            CallResult::from_json(t.to_owned()).map(|r| {
                let has_result_type = r.members.iter().any(|(k, _)| k == "resultType");
                (r.is_error, has_result_type)
            })
        };
        assert_eq!(shape(r#"{"content":[]}"#), Some((false, false)));
        assert_eq!(
            shape(r#" {"isError": true, "content": []} "#),
            Some((true, false))
        );
        assert_eq!(
            shape(r#"{"isError":"yes","resultType":null}"#),
            Some((false, true))
        );
        // Keys are compared after unescaping.
        assert_eq!(shape(r#"{"is\u0045rror":true}"#), Some((true, false)));
        for bad in [
            "[1]",
            "1",
            "\"x\"",
            "{",
            r#"{"a":1} {"b":2}"#,
            r#"{"a":}"#,
            "",
        ] {
            assert!(CallResult::from_json(bad.to_owned()).is_none(), "{bad}");
        }
    }

    fn ours() -> Value {
        json!({"io.modelcontextprotocol/serverInfo": tables::server_info()})
    }

    #[test]
    fn the_modern_form_adds_result_type_once() {
        let modern = |t: &str| {
            let r = CallResult::from_json(t.to_owned())
                .expect("object")
                .in_era(Revision::V2026_07_28);
            serde_json::from_str::<Value>(&r.written()).expect("still JSON")
        };
        assert_eq!(
            modern("{}"),
            json!({"resultType": "complete", "_meta": ours()})
        );
        assert_eq!(
            modern("{ }"),
            json!({"resultType": "complete", "_meta": ours()})
        );
        assert_eq!(
            modern(r#"{"content":[],"isError":false}"#),
            json!({"resultType": "complete", "content": [], "isError": false, "_meta": ours()})
        );
        // The upstream's own `resultType` stays; a field 2026-07-28 does not define goes.
        assert_eq!(
            modern(r#"{"resultType":"incomplete","x":1}"#),
            json!({"resultType": "incomplete", "_meta": ours()})
        );
        let twice = CallResult::from_json("{\"a\":1}".into())
            .expect("object")
            .in_era(Revision::V2026_07_28)
            .in_era(Revision::V2026_07_28);
        assert_eq!(twice.written().matches("resultType").count(), 1);
        assert_eq!(twice.written().matches("serverInfo").count(), 1);
    }

    /// The frontend's era edits touch only the top-level members they must; every
    /// other member keeps its bytes (key order, number spelling, integers beyond 2^53, UTF-8).
    #[test]
    fn era_edits_keep_every_other_byte() {
        let structured = r#"{"z":1,"a":9007199254740993,"f":1.50,"s":"é"}"#;
        let content =
            r#"[{"type":"text","text":"{\"z\":1,\"a\":9007199254740993,\"f\":1.50,\"s\":\"é\"}"}]"#;
        let upstream = format!(
            r#"{{"resultType":"complete","content":{content},"structuredContent":{structured},"isError":false,"_meta":{{"io.modelcontextprotocol/serverInfo":{{"name":"upstream","version":"9"}},"ui/resourceUri":"ui://x","n":1.0}}}}"#
        );
        let written = |revision| {
            CallResult::from_json(upstream.clone())
                .expect("object")
                .in_era(revision)
                .written()
        };
        for legacy in [Revision::V2025_06_18, Revision::V2025_11_25] {
            assert_eq!(
                written(legacy),
                format!(
                    r#"{{"content":{content},"structuredContent":{structured},"isError":false,"_meta":{{"ui/resourceUri":"ui://x","n":1.0}}}}"#
                )
            );
        }
        assert_eq!(
            written(Revision::V2026_07_28),
            format!(
                r#"{{"resultType":"complete","content":{content},"structuredContent":{structured},"isError":false,"_meta":{{"ui/resourceUri":"ui://x","n":1.0,"io.modelcontextprotocol/serverInfo":{}}}}}"#,
                tables::server_info()
            )
        );
        // A legacy result that has nothing to lose is written exactly as it came.
        let plain = format!(r#"{{"content":{content}, "structuredContent" : {structured}}}"#);
        let result = CallResult::from_json(format!(" {plain}\n"))
            .expect("object")
            .in_era(Revision::V2025_06_18);
        assert_eq!(result.written(), plain);
        assert_eq!(result.len(), plain.len() + 2);
    }

    /// The worker's own refusal of a fenced generation gets the frontend's one answer for it.
    #[test]
    fn a_worker_refusal_of_a_fenced_generation_reads_like_any_fenced_call() {
        let reply = CallToolReply {
            outcome: Some(call_tool_reply::Outcome::Error(CallError {
                code: -32602,
                message:
                    "tool is not available now (generation 4 of gh is fenced); list tools again"
                        .into(),
                data_json: String::new(),
                reason: "fenced".into(),
            })),
            generation: 4,
        };
        let (answer, outcome) = map_reply("gh_x", "gh", 4, Ok(reply));
        assert_lists_again((answer, outcome));
    }

    /// The audit outcome follows the worker's `reason` field, not its message text.
    #[test]
    fn outcomes_of_worker_answers() {
        let error = |code: i32, reason: &str| {
            let reply = CallToolReply {
                outcome: Some(call_tool_reply::Outcome::Error(CallError {
                    code,
                    message: "whatever the text says".into(),
                    data_json: String::new(),
                    reason: reason.into(),
                })),
                generation: 2,
            };
            map_reply("gh_x", "gh", 2, Ok(reply)).1
        };
        assert_eq!(error(-32603, "timeout"), Outcome::Timeout);
        assert_eq!(error(-32800, "cancelled"), Outcome::Cancelled);
        assert_eq!(error(-32603, "unavailable"), Outcome::Unavailable);
        assert_eq!(error(-32603, "fenced"), Outcome::Unavailable);
        assert_eq!(error(-32602, "fenced"), Outcome::RpcError);
        assert_eq!(error(-32001, "upstream_error"), Outcome::RpcError);
        let tool_error = CallToolReply {
            outcome: Some(call_tool_reply::Outcome::ResultJson(
                r#"{"content":[{"type":"text","text":"boom"}],"isError":true}"#.into(),
            )),
            generation: 2,
        };
        assert_eq!(
            map_reply("gh_x", "gh", 2, Ok(tool_error)).1,
            Outcome::ToolError
        );
        let malformed = CallToolReply {
            outcome: Some(call_tool_reply::Outcome::ResultJson("[1]".into())),
            generation: 2,
        };
        assert_eq!(
            map_reply("gh_x", "gh", 2, Ok(malformed)).1,
            Outcome::Unavailable
        );
    }

    /// A call's answer is written as the serialized envelope would be, with the worker's text
    /// as it came (no whitespace around it), `resultType` in front for the modern surface.
    #[test]
    fn call_messages_carry_the_result_text_as_is() {
        let result = |t: &str| CallResult::from_json(t.to_owned()).expect("object");
        let text = |m: Result<Vec<u8>, serde_json::Error>| {
            String::from_utf8(m.expect("serializable")).expect("UTF-8")
        };
        assert_eq!(
            text(call_message(
                &json!(7),
                &Ok(result(r#" {"n":1.50,"content":[]} "#))
            )),
            r#"{"jsonrpc":"2.0","id":7,"result":{"n":1.50,"content":[]}}"#
        );
        assert_eq!(
            text(call_message(
                &json!("a"),
                &Ok(result(r#"{"content":[]}"#).in_era(Revision::V2026_07_28))
            )),
            format!(
                r#"{{"jsonrpc":"2.0","id":"a","result":{{"resultType":"complete","content":[],"_meta":{{"{META_SERVER_INFO}":{}}}}}}}"#,
                tables::server_info()
            )
        );
        assert_eq!(
            text(call_message(
                &json!(1),
                &Ok(result("{ }").in_era(Revision::V2026_07_28))
            )),
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"result":{{"resultType":"complete","_meta":{{"{META_SERVER_INFO}":{}}}}}}}"#,
                tables::server_info()
            )
        );
        // The legacy form of a result with nothing to lose is its text as it came; a field
        // no revision defines is left out.
        assert_eq!(
            text(call_message(
                &json!(3),
                &Ok(
                    result(r#" {"structuredContent":{"n":1.50}, "content":[]} "#)
                        .in_era(Revision::V2025_06_18)
                )
            )),
            r#"{"jsonrpc":"2.0","id":3,"result":{"structuredContent":{"n":1.50}, "content":[]}}"#
        );
        assert_eq!(
            text(call_message(
                &json!(4),
                &Ok(result(r#"{"n":1.50,"content":[]}"#).in_era(Revision::V2025_06_18))
            )),
            r#"{"jsonrpc":"2.0","id":4,"result":{"content":[]}}"#
        );
        let answer = Err(RpcError::new(-32602, "Unknown tool: x"));
        let parsed: Value =
            serde_json::from_slice(&call_message(&json!(2), &answer).expect("serializable"))
                .expect("JSON");
        assert_eq!(
            parsed,
            rpc::error_body(&json!(2), &RpcError::new(-32602, "Unknown tool: x"))
        );
    }
}

//! One `tools/call` against the worker, shared by both eras: resolve the name to an immutable
//! binding, pass the breaker, validate the arguments, send the call the way the caller chose
//! ([`Streaming`]), wait for it ([`crate::call::ending`]) and map every outcome; the circuit,
//! the audit record and the span are reported here, once for every call.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};
use tutti_proto::worker::CallToolRequest;

use crate::app::App;
use crate::backend::Identity;
use crate::call::ending::{self, Flight, Reading, in_flight, malformed_result, read_reply, tutti};
use crate::call::result::CallResult;
use crate::call::validate;
use crate::catalog::routes::{Lookup, Tool};
use crate::error::Error;
use crate::observe::audit::Outcome;
use crate::rpc::{INTERNAL_ERROR, INVALID_PARAMS, REQUEST_CANCELLED, RpcError, routes_not_ready};

/// A call's answer and how it ended.
type Ended = ending::Ended<CallResult>;

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

/// The name of a `tools/call` request, or the -32602 answer.
pub(crate) fn tool_name(params: Option<&Value>) -> Result<&str, RpcError> {
    params
        .and_then(|p| p.get("name"))
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::new(INVALID_PARAMS, "Invalid params: name is required"))
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
    let validator = match tool.validator() {
        Ok(v) => v,
        Err(problem) => return invalid_arguments(&problem),
    };
    let arguments_json = match validate::check_and_encode(&app.checks, validator, arguments).await {
        Ok(json) => json,
        Err(text) => return invalid_arguments(&text),
    };

    let Some(mut flight) = Flight::board(app, connector, ["tool ", &tool.name]) else {
        // Fenced between resolution and now: nothing was sent upstream.
        let refused = not_available(&tool.name, key, generation);
        return (Err(refused), Outcome::RpcError);
    };
    flight.cancelled = cancelled;
    let request = CallToolRequest {
        generation,
        call_id: flight.call_id.clone(),
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
        let _ = relay.call_id.set(flight.call_id.clone());
    }
    let reply = send_call(app, tool, request, streaming);
    in_flight(flight, reply, |reply| {
        map_reply(&tool.name, key, generation, reply)
    })
    .await
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

fn map_reply(
    name: &str,
    key: &str,
    generation: u64,
    reply: Result<tutti_proto::worker::CallToolReply, Error>,
) -> Ended {
    let refused = |generation| not_available(name, key, generation);
    let reading = Reading {
        key,
        generation,
        reply_generation: true,
        what: "call",
        refused: &refused,
        result: map_result,
    };
    read_reply(&reading, reply)
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;
    use tutti_proto::worker::{CallError, CallToolReply, call_tool_reply};

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
}

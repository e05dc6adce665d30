//! Calls whose upstream may ask the client something (SPEC §11): the upstream's
//! `elicitation/create`, `sampling/createMessage` and `roots/list` during a `tools/call`
//! reach the client that made the call, and its answer goes back to the worker
//! (`AnswerUpstreamRequest`).
//!
//! - Legacy (2025-06-18): the call is answered as an event stream; each request is a JSON-RPC
//!   request on it (id `tutti-<n>`), the client POSTs its JSON-RPC response, correlated by
//!   token and id ([`answer_legacy`], 202). Log messages at or above the token's level travel
//!   on the same stream.
//! - Modern (2026-07-28): the call's answer is an `input_required` result whose
//!   `requestState` names the call parked here (32 random bytes, kept with the token's hash
//!   and the tool: only this frontend can have made it, and an altered or replayed one names
//!   nothing); the client's retry with `inputResponses` resumes it ([`resume_modern`]). The
//!   upstream call stays pending at the worker meanwhile; a state never used expires with the
//!   call's timeout, which cancels the call.
//! - A request the client has no capability for: legacy, the upstream gets an error (-32601);
//!   modern, the call ends with -32021 / HTTP 400 and the upstream call is cancelled.
//!
//! The call itself runs in a task of its own ([`start`]) so that a parked call outlives the
//! HTTP request that started it; dropping the [`Running`] aborts that task, which cancels
//! the worker call (as closing a plain call's stream does) and audits it.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::Response;
use futures_util::StreamExt;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};
use tutti_proto::worker::{
    AnswerUpstreamRequestRequest, CallError, UpstreamRequest, answer_upstream_request_request,
};

use crate::app::App;
use crate::backend::{Identity, WorkerEvent};
use crate::call::confirm::{self, Decided, Decision};
use crate::call::execute::{self, RelayStream, Streaming};
use crate::call::result::{self, CallResult};
use crate::catalog::routes::{Connector, Tool};
use crate::era::tables::Revision;
use crate::observe::audit::Relayed;
use crate::rpc::{self, INTERNAL_ERROR, INVALID_PARAMS, RpcError};
use crate::session::clients::{AnswerTo, Caps, Parked, TokenKey, level_rank};

/// Steps of one call that may wait for a slow client.
const BUFFER: usize = 64;
/// -32021 MissingRequiredClientCapability (2026-07-28).
pub(crate) const MISSING_CAPABILITY: i64 = -32021;
/// A parked call is dropped this long after its call timeout if never resumed.
const PARK_GRACE: Duration = Duration::from_secs(2);

/// Who waits for the answers to an `input_required` result's requests.
enum Asked {
    /// The upstream's requests by `inputRequests` key, answered to the worker.
    Upstream(HashMap<String, AnswerTo>),
    /// The person's confirmation question (`--confirm high`), by its key.
    Confirm(String),
}

/// One upstream request of a modern answer that is being put together: its
/// `inputRequests` key, where its answer goes, its method and params.
struct Pending {
    key: String,
    to: AnswerTo,
    method: String,
    params: Value,
}

/// Which surface answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Era {
    Legacy,
    Modern,
}

/// One running relayed call (a `tools/call`, or a `prompts/get`).
pub(crate) struct Running {
    steps: mpsc::Receiver<Step>,
    task: tokio::task::JoinHandle<()>,
    /// The connector generation that serves the call.
    connector: Arc<Connector>,
    /// What a retry must name to resume the call once parked: the tool's local name, or
    /// [`crate::call::prompt_relay::parked_name`] of a prompt.
    name: String,
    call_id: Arc<OnceLock<String>>,
    relayed: Arc<Relayed>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub(crate) enum Step {
    Event(WorkerEvent),
    /// The person's confirmation question (`--confirm high`): its id / `inputRequests` key
    /// and its `elicitation/create` params.
    Confirm(String, Value),
    Done(Result<CallResult, RpcError>),
}

/// What a relayed call is started with.
pub(crate) struct Start {
    pub(crate) app: Arc<App>,
    pub(crate) who: Identity,
    pub(crate) tool: Arc<Tool>,
    pub(crate) arguments: Option<Value>,
    pub(crate) cancelled: Option<oneshot::Receiver<()>>,
    pub(crate) revision: Revision,
    /// The client can answer requests (at least one capability).
    pub(crate) requests: bool,
    /// The client wants log messages.
    pub(crate) logs: bool,
    /// Whose client the call came from.
    pub(crate) token: TokenKey,
    /// Who confirms the call first (`--confirm high`, [`crate::call::confirm`]).
    pub(crate) confirm: Option<confirm::Ask>,
    /// The client's own `inputResponses` without a `requestState`
    /// ([`RelayStream::input_responses`]).
    pub(crate) input_responses: Option<String>,
}

/// The answer a relayed call ends with, in its client's era.
pub(crate) type Answer = Result<CallResult, RpcError>;

/// Starts the call in a task of its own.
pub(crate) fn start(s: Start) -> Running {
    let connector = s.tool.connector.clone();
    let name = s.tool.name.clone();
    let (requests, logs) = (s.requests, s.logs);
    spawn(
        connector,
        name,
        (requests, logs),
        move |mut stream, steps| async move {
            stream.input_responses = s.input_responses.clone();
            if let Some(ask) = s.confirm
                && let Some(refused) = confirm_first(&s, ask, &steps, &stream.relayed).await
            {
                return refused.map(|r| r.in_era(s.revision));
            }
            let call = execute::execute(
                &s.app,
                &s.who,
                &s.tool,
                s.arguments,
                s.cancelled,
                Streaming::Relay(stream),
            );
            call.await.map(|r| r.in_era(s.revision))
        },
    )
}

/// Runs `run` (the call, given its [`RelayStream`] and where a confirmation question goes) in a
/// task of its own, the worker's events of the call passed on as steps until its answer, the
/// last step (one machinery for tool calls and prompts). `name` is what a retry of a
/// parked call must name; `(requests, logs)` what the client can take during the call.
pub(crate) fn spawn<F, Fut>(
    connector: Arc<Connector>,
    name: String,
    (requests, logs): (bool, bool),
    run: F,
) -> Running
where
    F: FnOnce(RelayStream, mpsc::Sender<Step>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Answer> + Send + 'static,
{
    let (steps_tx, steps) = mpsc::channel(BUFFER);
    let call_id = Arc::new(OnceLock::new());
    let relayed = Arc::new(Relayed::default());
    let (events, mut worker_events) = mpsc::channel(BUFFER);
    let stream = RelayStream {
        events,
        requests,
        logs,
        call_id: call_id.clone(),
        relayed: relayed.clone(),
        input_responses: None,
    };
    let task = tokio::spawn(async move {
        let call = run(stream, steps_tx.clone());
        let mut call = std::pin::pin!(call);
        let answer = loop {
            tokio::select! {
                biased;
                Some(event) = worker_events.recv() => {
                    if steps_tx.send(Step::Event(event)).await.is_err() {
                        return;
                    }
                }
                answer = &mut call => break answer,
            }
        };
        while let Ok(event) = worker_events.try_recv() {
            let _ = steps_tx.send(Step::Event(event)).await;
        }
        let _ = steps_tx.send(Step::Done(answer)).await;
    });
    Running {
        steps,
        task,
        connector,
        name,
        call_id,
        relayed,
    }
}

/// Has the call confirmed through the channels of `ask`; `None` when accepted, else the
/// call's refusal.
async fn confirm_first(
    s: &Start,
    ask: confirm::Ask,
    steps: &mpsc::Sender<Step>,
    relayed: &Arc<Relayed>,
) -> Option<Result<CallResult, RpcError>> {
    let undecided = confirm::Undecided::new(&s.app, &s.who, &s.tool, relayed);
    let mut waiting = None;
    if ask.agent {
        let id = s.app.clients.next_id();
        // Dropped with this task (the call's stream closed, its parked state expired): the
        // question leaves the map then too.
        let wait = s.app.clients.expect_confirm(s.token, id.clone());
        let question = Step::Confirm(id, confirm::params(&s.tool, s.arguments.as_ref()));
        if steps.send(question).await.is_ok() {
            waiting = Some(wait);
        }
    }
    let decided = match (ask.person, waiting) {
        (true, agent) => {
            confirm::by_person(&s.app, &s.who, &s.tool, s.arguments.as_ref(), agent).await
        }
        (false, Some(agent)) => confirm::wait(&s.tool, agent).await,
        (false, None) => Decided::by(Decision::Cancelled, ""),
    };
    undecided.decided();
    if decided.decision == Decision::Accepted {
        relayed.confirm(decided.decision.as_str(), decided.via);
        return None;
    }
    Some(confirm::refused(&s.app, &s.who, &s.tool, relayed, decided))
}

/// How the answer to one request of a relayed call is written.
pub(crate) struct Answering {
    pub(crate) app: Arc<App>,
    pub(crate) token: TokenKey,
    pub(crate) id: Value,
    pub(crate) era: Era,
    /// The client's progress token (progress wanted and an event stream accepted).
    pub(crate) progress: Option<Value>,
    /// Log messages at or above this rank go to the client (on an event stream).
    pub(crate) log_level: Option<u8>,
    /// The answer may be an event stream.
    pub(crate) streams: bool,
    pub(crate) caps: Caps,
    /// Held until the answer is complete (e.g. the legacy cancel registration).
    pub(crate) _hold: Option<Box<dyn std::any::Any + Send>>,
}

enum Out {
    /// One event of an event-stream answer.
    Note(Bytes),
    /// The response message, with the status a plain answer gets.
    Final(Vec<u8>, StatusCode),
}

struct Driver {
    a: Answering,
    running: Option<Running>,
    /// The requests of a 2026-07-28 upstream's `input_required` round that have come so far:
    /// the client is asked all of them in one `input_required` result.
    round: Vec<Pending>,
}

/// Answers the request with the running call: as one JSON response when the first thing to
/// send is the response, else as an event stream (notes first, the response last).
pub(crate) async fn respond(a: Answering, running: Running) -> Response {
    let mut driver = Driver {
        a,
        running: Some(running),
        round: Vec::new(),
    };
    let first = driver.next().await;
    match first {
        None => rpc::reject(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the call ended unanswered",
        ),
        Some(Out::Final(bytes, status)) => rpc::bytes_response(status, bytes),
        Some(Out::Note(note)) if driver.a.streams => {
            let rest = futures_util::stream::unfold(driver, |mut d| async move {
                let out = d.next().await?;
                let bytes = match out {
                    Out::Note(note) => note,
                    Out::Final(message, _) => {
                        d.running = None;
                        rpc::sse_event(&message)
                    }
                };
                Some((bytes, d))
            });
            rpc::event_stream_response(futures_util::stream::iter([note]).chain(rest))
        }
        Some(Out::Note(_)) => {
            // Not deliverable as an event stream: only the response counts.
            loop {
                match driver.next().await {
                    Some(Out::Final(bytes, status)) => return rpc::bytes_response(status, bytes),
                    Some(Out::Note(_)) => {}
                    None => {
                        return rpc::reject(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            "the call ended unanswered",
                        );
                    }
                }
            }
        }
    }
}

impl Driver {
    async fn next(&mut self) -> Option<Out> {
        loop {
            let running = self.running.as_mut()?;
            let step = running.steps.recv().await;
            match step {
                None => {
                    self.running = None;
                    let error = RpcError::new(INTERNAL_ERROR, "the call ended without an answer");
                    return Some(self.final_message(&Err(error), StatusCode::OK));
                }
                Some(Step::Done(answer)) => {
                    self.settle_unanswered();
                    self.running = None;
                    return Some(self.final_message(&answer, StatusCode::OK));
                }
                Some(Step::Confirm(id, params)) => return Some(self.confirm(id, params)),
                Some(Step::Event(WorkerEvent::Progress(note))) => {
                    if let Some(token) = &self.a.progress
                        && let Some(event) = crate::call::progress::progress_event(token, &note)
                    {
                        return Some(Out::Note(event));
                    }
                }
                Some(Step::Event(WorkerEvent::Log(note))) => {
                    if let Some(event) = self.log_event(&note) {
                        return Some(Out::Note(event));
                    }
                }
                Some(Step::Event(WorkerEvent::Request(request))) => {
                    if let Some(out) = self.ask(request) {
                        return Some(out);
                    }
                }
            }
        }
    }

    fn final_message(&self, answer: &Result<CallResult, RpcError>, status: StatusCode) -> Out {
        match result::call_message(&self.a.id, answer) {
            Ok(bytes) => Out::Final(bytes, status),
            Err(e) => Out::Final(
                serde_json::to_vec(&rpc::error_body(
                    &self.a.id,
                    &RpcError::new(INTERNAL_ERROR, format!("cannot encode the answer: {e}")),
                ))
                .unwrap_or_default(),
                status,
            ),
        }
    }

    /// Requests of this call nobody answered (the call ended first).
    fn settle_unanswered(&self) {
        let Some(running) = &self.running else {
            return;
        };
        if let Some(call_id) = running.call_id.get() {
            for to in self.a.app.clients.unanswered(call_id) {
                to.relayed.settle(to.note, "unanswered");
            }
        }
    }

    /// `notifications/message` for one upstream log message at or above the client's level,
    /// its `logger` prefixed `<key>/`.
    fn log_event(&self, note: &str) -> Option<Bytes> {
        let threshold = self.a.log_level?;
        let key = &self.running.as_ref()?.connector.key;
        let params = log_params(key, note, threshold)?;
        let message =
            json!({"jsonrpc": "2.0", "method": "notifications/message", "params": params});
        serde_json::to_vec(&message)
            .ok()
            .map(|m| rpc::sse_event(&m))
    }

    /// One request of the upstream: asked of the client, refused, or (modern) the end of
    /// this answer.
    fn ask(&mut self, request: UpstreamRequest) -> Option<Out> {
        let running = self.running.as_ref()?;
        let (_, declared) = self.a.caps.needed(&request.method);
        let to = AnswerTo {
            endpoint: running.connector.endpoint.clone(),
            generation: running.connector.generation,
            call_id: running.call_id.get().cloned().unwrap_or_default(),
            request_id: request.request_id.clone(),
            method: request.method.clone(),
            relayed: running.relayed.clone(),
            note: usize::MAX,
        };
        if !declared {
            let note = to.relayed.request(&to.method, "refused");
            let _ = note;
            return match self.a.era {
                Era::Legacy => {
                    refuse(&self.a.app, to);
                    None
                }
                Era::Modern => {
                    // Nothing of the client's reaches the upstream: the call is cancelled.
                    self.running = None;
                    let error = RpcError::new(
                        MISSING_CAPABILITY,
                        format!(
                            "Missing required client capability: the tool's upstream sent \
                             {} and this request did not declare that capability",
                            request.method
                        ),
                    )
                    .with_data(json!({"requiredCapabilities": Caps::required(&request.method)}));
                    Some(self.final_message(&Err(error), StatusCode::BAD_REQUEST))
                }
            };
        }
        let note = to.relayed.request(&to.method, "unanswered");
        let to = AnswerTo { note, ..to };
        let params = match serde_json::from_str::<Value>(&request.params_json) {
            Ok(Value::Object(params)) => Value::Object(params),
            _ => Value::Object(Map::new()),
        };
        let id = self.a.app.clients.next_id();
        match self.a.era {
            Era::Legacy => {
                self.a.app.clients.ask(self.a.token, id.clone(), to);
                let message = json!({"jsonrpc": "2.0", "id": id, "method": request.method,
                    "params": params});
                serde_json::to_vec(&message)
                    .ok()
                    .map(|m| Out::Note(rpc::sse_event(&m)))
            }
            Era::Modern => {
                // A 2026-07-28 upstream's request keeps its own key (unique in its round); a
                // 2025-era upstream's has none and gets the JSON-RPC-style id.
                let key = match request.input_key {
                    key if key.is_empty() || self.round.iter().any(|p| p.key == key) => id,
                    key => key,
                };
                let method = request.method;
                self.round.push(Pending {
                    key,
                    to,
                    method,
                    params,
                });
                let size = usize::try_from(request.input_round).unwrap_or(usize::MAX);
                if self.round.len() < size {
                    // The rest of the round is on its way: all are asked together.
                    return None;
                }
                Some(self.park_round())
            }
        }
    }

    /// The collected round of upstream requests, asked in one `input_required` answer.
    fn park_round(&mut self) -> Out {
        let mut asked = HashMap::new();
        let mut requests = Map::new();
        for p in std::mem::take(&mut self.round) {
            requests.insert(
                p.key.clone(),
                json!({"method": p.method, "params": p.params}),
            );
            asked.insert(p.key, p.to);
        }
        self.park(Asked::Upstream(asked), requests)
    }

    /// The person's confirmation question: a request on the legacy event stream, or the
    /// modern call parked behind an `input_required` answer.
    fn confirm(&mut self, id: String, mut params: Value) -> Out {
        match self.a.era {
            Era::Legacy => {
                let message = json!({"jsonrpc": "2.0", "id": id,
                    "method": "elicitation/create", "params": params});
                Out::Note(rpc::sse_event(
                    &serde_json::to_vec(&message).unwrap_or_default(),
                ))
            }
            Era::Modern => {
                if let Some(params) = params.as_object_mut() {
                    params.insert("mode".to_owned(), json!("form"));
                }
                let mut requests = Map::new();
                requests.insert(
                    id.clone(),
                    json!({"method": "elicitation/create", "params": params}),
                );
                self.park(Asked::Confirm(id), requests)
            }
        }
    }

    /// Parks the call behind an `input_required` answer asking `requests` (`inputRequests`).
    fn park(&mut self, asked: Asked, requests: Map<String, Value>) -> Out {
        let Some(running) = self.running.take() else {
            let error = RpcError::new(INTERNAL_ERROR, "the call is gone");
            return self.final_message(&Err(error), StatusCode::OK);
        };
        let call_timeout = Duration::from_millis(u64::from(running.connector.timeout_ms));
        let tool = running.name.clone();
        let (timeout, asked, confirm) = match asked {
            Asked::Upstream(asked) => (call_timeout, asked, None),
            Asked::Confirm(key) => (
                confirm::limit(&running.connector),
                HashMap::new(),
                Some(key),
            ),
        };
        let parked = Parked {
            token: self.a.token,
            tool,
            asked,
            call: Box::new(running),
            confirm,
        };
        let Some(state) = self.a.app.clients.park(parked) else {
            let error = RpcError::new(INTERNAL_ERROR, "no random bytes for a requestState");
            return self.final_message(&Err(error), StatusCode::OK);
        };
        let (app, expiring) = (self.a.app.clone(), state.clone());
        tokio::spawn(async move {
            tokio::time::sleep(timeout + PARK_GRACE).await;
            // Dropping it cancels the call (if the worker has not ended it already).
            drop(app.clients.expire(&expiring));
        });
        let result = json!({
            "resultType": "input_required",
            "inputRequests": requests,
            "requestState": state,
        });
        let bytes = serde_json::to_vec(&rpc::result_body(&self.a.id, result)).unwrap_or_default();
        Out::Final(bytes, StatusCode::OK)
    }
}

/// The params of a relayed `notifications/message` for connector `key`, or `None` when its
/// level is below `threshold` (or it is not a log message).
pub(crate) fn log_params(key: &str, note: &str, threshold: u8) -> Option<Value> {
    let Ok(Value::Object(mut params)) = serde_json::from_str::<Value>(note) else {
        return None;
    };
    let rank = params
        .get("level")
        .and_then(Value::as_str)
        .and_then(level_rank)?;
    if rank < threshold {
        return None;
    }
    let logger = match params.get("logger").and_then(Value::as_str) {
        Some(logger) => format!("{key}/{logger}"),
        None => format!("{key}/"),
    };
    params.insert("logger".to_owned(), Value::String(logger));
    Some(Value::Object(params))
}

/// The upstream gets an error for a request this client cannot answer.
fn refuse(app: &Arc<App>, to: AnswerTo) {
    let error = CallError {
        code: -32601,
        message: format!(
            "{}: the client of this tool call did not declare the capability",
            to.method
        ),
        data_json: String::new(),
        reason: String::new(),
    };
    send_answer(
        app,
        to,
        answer_upstream_request_request::Answer::Error(error),
    );
}

/// Sends one answer to the worker (in the background: the client's POST does not wait).
fn send_answer(app: &Arc<App>, to: AnswerTo, answer: answer_upstream_request_request::Answer) {
    let backend = app.backend.clone();
    tokio::spawn(async move {
        let request = AnswerUpstreamRequestRequest {
            generation: to.generation,
            call_id: to.call_id,
            request_id: to.request_id,
            answer: Some(answer),
        };
        if let Err(e) = backend.answer_upstream_request(&to.endpoint, request).await {
            tracing::debug!(error = %e, "an answer to an upstream request was not delivered");
        }
    });
}

/// The client's answer (a JSON-RPC `result` or `error`) as the worker takes it.
fn worker_answer(answer: Result<Value, Value>) -> answer_upstream_request_request::Answer {
    use answer_upstream_request_request::Answer;
    match answer {
        Ok(result) => Answer::ResultJson(result.to_string()),
        Err(error) => Answer::Error(CallError {
            code: error
                .get("code")
                .and_then(Value::as_i64)
                .and_then(|c| i32::try_from(c).ok())
                .unwrap_or(-32603),
            message: error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("the client answered with an error")
                .to_owned(),
            data_json: error.get("data").map(Value::to_string).unwrap_or_default(),
            reason: String::new(),
        }),
    }
}

/// A legacy client's POSTed response to a request relayed to it; false when it names none.
pub(crate) fn answer_legacy(
    app: &Arc<App>,
    token: TokenKey,
    id: &Value,
    answer: Result<Value, Value>,
) -> bool {
    let Some(id) = id.as_str() else {
        return false;
    };
    let Some(answer) = app.clients.confirmed(token, id, answer) else {
        return true;
    };
    let Some(to) = app.clients.answered(token, id) else {
        return false;
    };
    to.relayed
        .settle(to.note, if answer.is_ok() { "answered" } else { "error" });
    send_answer(app, to, worker_answer(answer));
    true
}

/// A modern retry of a parked call: checks its `requestState`, passes `inputResponses` on
/// to the worker and answers with the call as it goes on. `Err`: the -32602 answer.
pub(crate) fn resume_modern(
    app: &Arc<App>,
    token: &TokenKey,
    tool: &str,
    params: &Value,
) -> Result<Running, RpcError> {
    let invalid = || {
        RpcError::new(
            INVALID_PARAMS,
            "Invalid params: requestState is not one this server issued for this session and \
             tool, was already used, or has expired; call the tool again",
        )
    };
    let state = params
        .get("requestState")
        .and_then(Value::as_str)
        .ok_or_else(invalid)?;
    let parked = app.clients.unpark(state, token, tool).ok_or_else(invalid)?;
    let responses = params.get("inputResponses").and_then(Value::as_object);
    if let Some(key) = &parked.confirm {
        // A retry without the answer is no consent: the question ends cancelled.
        let answer = match responses.and_then(|r| r.get(key)) {
            Some(response) => Ok(response.clone()),
            None => Err(json!({"code": -32602, "message": "no answer"})),
        };
        let _ = app.clients.confirmed(*token, key, answer);
    }
    for (key, to) in parked.asked {
        match responses.and_then(|r| r.get(&key)) {
            Some(response) => {
                to.relayed.settle(to.note, "answered");
                let answer = worker_answer(Ok(response.clone()));
                send_answer(app, to, answer);
            }
            None => {
                let missing = json!({"code": -32602, "message": format!(
                    "the client's retry has no inputResponses[{key:?}]")});
                to.relayed.settle(to.note, "error");
                send_answer(app, to, worker_answer(Err(missing)));
            }
        }
    }
    parked
        .call
        .downcast::<Running>()
        .map(|running| *running)
        .map_err(|_| invalid())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_messages_are_tagged_and_filtered_by_level() {
        let note = r#"{"level":"warning","logger":"db","data":"slow"}"#;
        assert_eq!(
            log_params("k", note, 3),
            Some(json!({"level":"warning","logger":"k/db","data":"slow"}))
        );
        assert_eq!(log_params("k", note, 4), None, "below the level");
        assert_eq!(
            log_params("k", r#"{"level":"error","data":1}"#, 0),
            Some(json!({"level":"error","logger":"k/","data":1}))
        );
        assert_eq!(log_params("k", r#"{"level":"loud"}"#, 0), None);
    }
}

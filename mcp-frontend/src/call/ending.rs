//! How a call that was sent ends, for tool calls and forwarded requests alike: the worker's
//! reply, the generation fenced, the client's cancellation or the frontend's own deadline,
//! whichever comes first ([`in_flight`]); the worker is sent `Cancel` unless its reply came.
//! Also the answers such an ending gives.

use std::future::{Future, pending};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::{oneshot, watch};
use tutti_proto::worker::{CallError, CallToolReply, CancelRequest, call_tool_reply};

use crate::app::App;
use crate::backend::Backend;
use crate::catalog::routes::{Connector, Fenced};
use crate::error::Error;
use crate::observe::audit::Outcome;
use crate::rpc::{INTERNAL_ERROR, INVALID_PARAMS, REQUEST_CANCELLED, RpcError};

/// A call's answer and how it ended.
pub(crate) type Ended<T> = (Result<T, RpcError>, Outcome);

/// One call sent to the worker of `connector`'s generation, as it waits for its reply.
pub(crate) struct Flight<'a> {
    app: &'a App,
    connector: &'a Connector,
    /// The worker call's id (what `Cancel` names).
    pub(crate) call_id: String,
    /// The generation's fence, subscribed before the call is sent.
    fence: watch::Receiver<Fenced>,
    /// The client's cancellation (legacy `notifications/cancelled`), if it can cancel.
    pub(crate) cancelled: Option<oneshot::Receiver<()>>,
    /// What the deadline's answer names, in two parts (`["tool ", name]`, `["", name]`).
    what: [&'a str; 2],
}

impl<'a> Flight<'a> {
    /// A call about to be sent to `connector`'s generation: its fence watched and a call id
    /// taken. `None` when the generation is fenced already (nothing may be sent upstream).
    pub(crate) fn board(
        app: &'a App,
        connector: &'a Connector,
        what: [&'a str; 2],
    ) -> Option<Self> {
        let mut fence = connector.fence.subscribe();
        if fence.borrow_and_update().is_fenced() {
            return None;
        }
        Some(Self {
            app,
            connector,
            call_id: app.next_call_id(),
            fence,
            cancelled: None,
            what,
        })
    }
}

/// Waits for `reply` and maps it with `map_reply`, unless the generation is fenced, the client
/// cancels or the deadline (call timeout plus [`DEADLINE_GRACE`]) passes first; a call that
/// ends without its reply (or whose future is dropped) is cancelled at the worker.
pub(crate) async fn in_flight<R, T>(
    flight: Flight<'_>,
    reply: impl Future<Output = R>,
    map_reply: impl FnOnce(R) -> Ended<T>,
) -> Ended<T> {
    let Flight {
        app,
        connector,
        call_id,
        fence,
        cancelled,
        what,
    } = flight;
    let (key, generation) = (connector.key.as_str(), connector.generation);
    let mut guard = CancelGuard {
        backend: &app.backend,
        endpoint: &connector.endpoint,
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
        reply = reply => {
            guard.disarm();
            map_reply(reply)
        }
        why = until_fenced(fence) => (Err(fenced_mid_call(key, generation)), fence_outcome(why)),
        () = until_cancelled(cancelled) => (
            Err(cancelled_error(key, generation)),
            Outcome::Cancelled,
        ),
        () = tokio::time::sleep(deadline) => {
            let [prefix, name] = what;
            let late = format!("{prefix}{name} did not answer within {} ms", connector.timeout_ms);
            (Err(timed_out(key, generation, &late)), Outcome::Timeout)
        }
    }
}
/// How a worker's reply is read (a tool call's, or a forwarded request's).
pub(crate) struct Reading<'a, T> {
    pub(crate) key: &'a str,
    pub(crate) generation: u64,
    /// The reply's own generation, when it names one, is the one its answer names.
    pub(crate) reply_generation: bool,
    /// What was sent, in the answers: `call` or `request`.
    pub(crate) what: &'static str,
    /// The -32602 answer when the worker refused the generation (given the generation).
    pub(crate) refused: &'a dyn Fn(u64) -> RpcError,
    /// The result text as the answer (key, generation, text).
    pub(crate) result: fn(&str, u64, Bytes) -> Ended<T>,
}

/// The answer a worker's reply (or its failure) gives, and how the call ended.
pub(crate) fn read_reply<T>(
    reading: &Reading<'_, T>,
    reply: Result<CallToolReply, Error>,
) -> Ended<T> {
    let (key, generation) = (reading.key, reading.generation);
    let reply = match reply {
        Ok(reply) => reply,
        // The worker refused the call up front: it never reached the upstream.
        Err(Error::WorkerFenced { .. }) => {
            return (Err((reading.refused)(generation)), Outcome::RpcError);
        }
        Err(Error::WorkerTimeout { .. }) => {
            let what = format!("the {} timed out", reading.what);
            return (Err(timed_out(key, generation, &what)), Outcome::Timeout);
        }
        Err(e) => {
            let what = reading.what;
            tracing::warn!(connector = key, generation, error = %e, "worker {what} failed");
            let why = unavailable(key, generation, "unavailable", "worker unavailable");
            return (Err(why), Outcome::Unavailable);
        }
    };
    let generation = match reply.generation {
        0 => generation,
        named if reading.reply_generation => named,
        _ => generation,
    };
    match reply.outcome {
        Some(call_tool_reply::Outcome::ResultJson(text)) => {
            (reading.result)(key, generation, Bytes::from(text))
        }
        Some(call_tool_reply::Outcome::ResultBytes(text)) => {
            (reading.result)(key, generation, text)
        }
        Some(call_tool_reply::Outcome::Error(error)) => call_error(reading, generation, error),
        None => {
            let why = unavailable(
                key,
                generation,
                "unavailable",
                "the worker returned no outcome",
            );
            (Err(why), Outcome::Unavailable)
        }
    }
}

/// A JSON-RPC error from the upstream, or the worker's own (`CallError`).
fn call_error<T>(reading: &Reading<'_, T>, generation: u64, error: CallError) -> Ended<T> {
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
        return (Err((reading.refused)(generation)), Outcome::RpcError);
    }
    let data = with_tutti(data, tutti(reason, reading.key, generation));
    (
        Err(RpcError::new(code, error.message).with_data(data)),
        outcome_of_worker_error(reason, code),
    )
}

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

/// Sends `Cancel` to the worker unless disarmed (the call completed). Dropping the call's
/// future (the client closed the stream) therefore cancels the upstream call. What the
/// `Cancel` needs is copied only when one is sent, not for every call.
struct CancelGuard<'a> {
    backend: &'a Arc<dyn Backend>,
    endpoint: &'a str,
    request: Option<CancelRequest>,
}

impl CancelGuard<'_> {
    fn disarm(&mut self) {
        self.request = None;
    }
}

impl Drop for CancelGuard<'_> {
    fn drop(&mut self) {
        let Some(request) = self.request.take() else {
            return;
        };
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let backend = Arc::clone(self.backend);
        let endpoint = self.endpoint.to_owned();
        handle.spawn(async move {
            if let Err(e) = backend.cancel(&endpoint, request).await {
                tracing::debug!(error = %e, "cancel not delivered");
            }
        });
    }
}

/// Completes when the generation is fenced, with why; never if the fence's sender is gone.
async fn until_fenced(mut fence: watch::Receiver<Fenced>) -> Fenced {
    let fenced = fence.wait_for(|f| f.is_fenced()).await.map(|f| *f);
    match fenced {
        Ok(why) => why,
        Err(_) => pending().await,
    }
}

/// How a call that a fence ended is audited and counted: a deliberate fence (uninstall,
/// disconnect, shutdown) is no failure of the connector's (SPEC §12 counts worker gone,
/// timeouts and transport errors).
fn fence_outcome(why: Fenced) -> Outcome {
    match why {
        Fenced::Deliberate => Outcome::Withdrawn,
        Fenced::No | Fenced::Failed => Outcome::Unavailable,
    }
}

/// Completes when the client cancels the call; never if it cannot (no receiver, or its
/// sender was dropped).
async fn until_cancelled(cancelled: Option<oneshot::Receiver<()>>) {
    let delivered = match cancelled {
        Some(rx) => rx.await.is_ok(),
        None => false,
    };
    if !delivered {
        pending::<()>().await;
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

//! Progress of a `tools/call` (MCP `notifications/progress`): a client that puts a
//! `progressToken` in the call's `_meta` and accepts `text/event-stream` gets the answer as an
//! event stream: each of the upstream's progress notifications for the call, carrying the
//! client's own token, then the JSON-RPC response. Everyone else gets the plain JSON answer.
//!
//! The call runs inside the stream, so a client that closes it cancels the call, as closing
//! a plain answer does.

use std::future::Future;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use futures_util::StreamExt;
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use crate::call::result::CallResult;
use crate::rpc::{self, RpcError};

/// Progress notifications of one call that may wait for a slow client; more are dropped.
const BUFFER: usize = 64;

/// The client's progress token for this request, if it asked for progress and can receive it
/// (MCP: a string or an integer in `params._meta.progressToken`; `Accept` naming
/// `text/event-stream`).
pub(crate) fn requested(params: Option<&Value>, headers: &HeaderMap) -> Option<Value> {
    let token = params?.get("_meta")?.get("progressToken")?;
    let usable = token.is_string() || token.as_i64().is_some() || token.as_u64().is_some();
    (usable && accepts_event_stream(headers)).then(|| token.clone())
}

pub(crate) fn accepts_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|range| {
            let essence = range.split(';').next().unwrap_or_default().trim();
            essence.eq_ignore_ascii_case("text/event-stream")
        })
}

/// The `text/event-stream` answer of request `id`: `call` gets the sender for the upstream's
/// progress params (JSON text, no token) and resolves to the answer. Resolves once the first
/// event is ready, so the response head goes out with it (for a call without progress: head,
/// answer and end of stream in one write) instead of waking the client once more for the head
/// alone; dropping it before then (the client left) drops the call, which cancels it. An
/// error that comes before any progress and that `status` answers 400 (a 2026-07-28 missing
/// capability) is a plain JSON response with that status.
pub(crate) async fn respond<F>(
    id: Value,
    token: Value,
    status: impl FnOnce(&RpcError) -> StatusCode,
    call: impl FnOnce(mpsc::Sender<String>) -> F,
) -> Response
where
    F: Future<Output = Result<CallResult, RpcError>> + Send + 'static,
{
    let (sink, notes) = mpsc::channel(BUFFER);
    let mut state = State {
        call: Some(Box::pin(call(sink))),
        notes,
        answer: None,
        id,
        token,
    };
    let first = match next(&mut state).await {
        Some(Next::Answer(answer)) => {
            if let Err(e) = &answer
                && let refused @ StatusCode::BAD_REQUEST = status(e)
            {
                return rpc::error_response(refused, &state.id, e);
            }
            final_event(&mut state, &answer)
        }
        Some(Next::Note(event)) => Some(event),
        None => None,
    };
    let rest = futures_util::stream::unfold(state, next_event);
    rpc::event_stream_response(futures_util::stream::iter(first).chain(rest))
}

type Call = std::pin::Pin<Box<dyn Future<Output = Result<CallResult, RpcError>> + Send>>;

struct State {
    /// `None` once it has resolved.
    call: Option<Call>,
    notes: mpsc::Receiver<String>,
    /// The answer, held back until every progress notification before it has been sent.
    answer: Option<Result<CallResult, RpcError>>,
    id: Value,
    token: Value,
}

/// What comes next on the stream: a progress event, or the answer once every progress
/// notification before it has been sent.
enum Next {
    Note(Bytes),
    Answer(Result<CallResult, RpcError>),
}

async fn next(s: &mut State) -> Option<Next> {
    loop {
        if let Some(answer) = s.answer.take() {
            // The call is over and its sender gone: drain what it sent, then the answer.
            if let Ok(note) = s.notes.try_recv() {
                s.answer = Some(answer);
                match progress_event(&s.token, &note) {
                    Some(event) => return Some(Next::Note(event)),
                    None => continue,
                }
            }
            return Some(Next::Answer(answer));
        }
        let call = s.call.as_mut()?;
        tokio::select! {
            biased;
            Some(note) = s.notes.recv() => {
                if let Some(event) = progress_event(&s.token, &note) {
                    return Some(Next::Note(event));
                }
            }
            answer = call => s.answer = Some(answer),
        }
    }
}

/// The answer's event; the stream ends after it.
fn final_event(s: &mut State, answer: &Result<CallResult, RpcError>) -> Option<Bytes> {
    s.call = None;
    match crate::call::result::call_message(&s.id, answer) {
        Ok(message) => Some(rpc::sse_event(&message)),
        Err(e) => {
            tracing::error!(error = %e, "cannot serialize a tools/call answer");
            None
        }
    }
}

async fn next_event(mut s: State) -> Option<(Bytes, State)> {
    let event = match next(&mut s).await? {
        Next::Note(event) => event,
        Next::Answer(answer) => final_event(&mut s, &answer)?,
    };
    Some((event, s))
}

/// `notifications/progress` with the client's token around the upstream's params.
pub(crate) fn progress_event(token: &Value, note: &str) -> Option<Bytes> {
    let Ok(Value::Object(mut params)) = serde_json::from_str::<Value>(note) else {
        return None;
    };
    params.insert("progressToken".to_owned(), token.clone());
    let mut message = Map::new();
    message.insert("jsonrpc".to_owned(), "2.0".into());
    message.insert("method".to_owned(), "notifications/progress".into());
    message.insert("params".to_owned(), Value::Object(params));
    serde_json::to_vec(&Value::Object(message))
        .ok()
        .map(|m| rpc::sse_event(&m))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use serde_json::json;

    fn accept(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_str(value) {
            headers.insert(header::ACCEPT, v);
        }
        headers
    }

    #[test]
    fn progress_is_requested_by_a_token_and_an_event_stream_accept() {
        let both = accept("application/json, text/event-stream");
        let with = |token: Value| json!({"name": "t", "_meta": {"progressToken": token}});
        assert_eq!(requested(Some(&with(json!("a"))), &both), Some(json!("a")));
        assert_eq!(requested(Some(&with(json!(7))), &both), Some(json!(7)));
        // Not a string or an integer: no progress.
        assert_eq!(requested(Some(&with(json!(1.5))), &both), None);
        assert_eq!(requested(Some(&with(json!({"a": 1}))), &both), None);
        assert_eq!(requested(Some(&json!({"name": "t"})), &both), None);
        assert_eq!(requested(None, &both), None);
        // A client that cannot read an event stream gets the plain answer.
        assert_eq!(
            requested(Some(&with(json!("a"))), &accept("application/json")),
            None
        );
        assert_eq!(requested(Some(&with(json!("a"))), &HeaderMap::new()), None);
        assert_eq!(
            requested(Some(&with(json!("a"))), &accept("Text/Event-Stream;q=0.5")),
            Some(json!("a"))
        );
    }

    #[test]
    fn progress_events_carry_the_clients_token() {
        let event = progress_event(&json!("tok"), r#"{"progress":1,"total":2}"#).expect("an event");
        let text = String::from_utf8_lossy(&event);
        let data = text
            .strip_prefix("event: message\ndata: ")
            .and_then(|t| t.strip_suffix("\n\n"))
            .expect("one SSE event");
        assert_eq!(
            serde_json::from_str::<Value>(data).ok(),
            Some(json!({"jsonrpc":"2.0","method":"notifications/progress",
                "params":{"progress":1,"total":2,"progressToken":"tok"}}))
        );
        assert!(progress_event(&json!("tok"), "not json").is_none());
    }
}

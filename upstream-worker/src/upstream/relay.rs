//! Requests from the upstream to the client during a call (`elicitation/create`,
//! `sampling/createMessage`, `roots/list`) and its log messages, relayed to the caller of
//! that call (SPEC §11).
//!
//! Every in-flight `tools/call` is entered here under the JSON-RPC id rmcp gave it, with the
//! caller's sink when the caller relays (`CallToolRequest.relay_requests`/`relay_logs`).
//! A request of the upstream belongs to one call:
//! - an HTTP upstream sends it on the response stream of that call's POST (rmcp marks it
//!   `InboundStreamOrigin::OutboundRequest(id)`);
//! - a stdio upstream's request names no call: it belongs to the one call in flight, when
//!   exactly one is; a request that could belong to two callers (two sessions) is never
//!   guessed, the upstream gets an error; `roots/list`, which servers send on their own, is
//!   treated as unassociated (below);
//! - an HTTP upstream's request on its standalone GET stream is, by the transport's rule,
//!   unrelated to any call (server-everything asks `roots/list` there 350 ms after
//!   `initialized`): it is relayed to the one call in flight only when that call's client
//!   can answer it, and it never ends a call whose client cannot ([`Origin::Unassociated`]).
//!
//! The caller's answer comes back through `AnswerUpstreamRequest` ([`Relay::answer`]); a
//! request ends unanswered when its call ends (the caller's sink closes), when the upstream
//! cancels it, or with the call's timeout (which ends the call).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::model::{ErrorCode, ErrorData, RequestId};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// JSON-RPC "method not found": what an MCP client answers a request it has no capability for.
const METHOD_NOT_FOUND: i32 = -32601;
const INTERNAL_ERROR: i32 = -32603;

/// One thing relayed to a call's caller.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Relayed {
    /// A request to the client: answered by [`Relay::answer`] with this id.
    Request {
        id: String,
        method: String,
        params_json: String,
        /// Set for a 2026-07-28 upstream's `input_required` request ([`super::mrtr`]).
        input: Option<InputKey>,
    },
    /// The params of a `notifications/message`, as a JSON object.
    Log(String),
    /// The upstream sent `method` during a call whose client declared no capability for it
    /// and must be refused with -32021 (`RelayTo::refuse`).
    Missing(String),
}

/// A request of a 2026-07-28 upstream's `input_required` round: its key in `inputRequests`
/// and how many requests the round holds (all are relayed before any answer is awaited).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct InputKey {
    pub(crate) key: String,
    pub(crate) round: u32,
}

/// Where a relaying call's requests and logs go.
pub(crate) type RelaySink = mpsc::Sender<Relayed>;

/// What the caller asked to have relayed, and where.
#[derive(Clone)]
pub(crate) struct RelayTo {
    pub(crate) sink: RelaySink,
    pub(crate) requests: bool,
    pub(crate) logs: bool,
    /// A request ends the call ([`Relayed::Missing`]).
    pub(crate) refuse: bool,
    /// The client's own `inputResponses`, sent without a `requestState`: a
    /// 2026-07-28 upstream gets them with the call's first round (`RmcpUpstream::rounds`).
    pub(crate) answers: Option<rmcp::model::JsonObject>,
}

/// Where a request or notification of the upstream came from, as far as the transport says.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Origin<'a> {
    /// The response stream of this call's POST (an HTTP upstream).
    Call(&'a RequestId),
    /// An HTTP upstream's standalone stream (or a POST stream tied to no request).
    Unassociated,
    /// The transport cannot tell (stdio).
    Unknown,
}

impl<'a> Origin<'a> {
    fn call(self) -> Option<&'a RequestId> {
        match self {
            Origin::Call(id) => Some(id),
            Origin::Unassociated | Origin::Unknown => None,
        }
    }
}

/// The client's answer to one relayed request.
pub(crate) type Answer = Result<Value, ErrorData>;

/// The calls in flight and the requests waiting for an answer.
#[derive(Default)]
pub(crate) struct Relay {
    inner: Mutex<Inner>,
    next: AtomicU64,
}

#[derive(Default)]
struct Inner {
    /// Calls in flight by rmcp's request id; `None`: the caller does not relay.
    calls: HashMap<RequestId, Option<RelayTo>>,
    pending: HashMap<String, oneshot::Sender<Answer>>,
}

/// Removes a call from the relay when it ends.
pub(crate) struct Entered {
    relay: Arc<Relay>,
    id: RequestId,
}

impl Drop for Entered {
    fn drop(&mut self) {
        if let Ok(mut inner) = self.relay.inner.lock() {
            inner.calls.remove(&self.id);
        }
    }
}

fn error(code: i32, message: impl Into<String>) -> ErrorData {
    ErrorData::new(ErrorCode(code), message.into(), None)
}

impl Relay {
    /// Enters a call in flight (before rmcp writes the request).
    pub(crate) fn enter(self: &Arc<Self>, id: RequestId, to: Option<RelayTo>) -> Entered {
        if let Ok(mut inner) = self.inner.lock() {
            inner.calls.insert(id.clone(), to);
        }
        Entered {
            relay: Arc::clone(self),
            id,
        }
    }

    /// The call a request or notification of the upstream belongs to (see the module doc).
    fn target(&self, origin: Origin<'_>) -> Result<Option<RelayTo>, ErrorData> {
        let inner = self
            .inner
            .lock()
            .map_err(|_| error(INTERNAL_ERROR, "relay table poisoned"))?;
        if let Some(id) = origin.call()
            && let Some(to) = inner.calls.get(id)
        {
            return Ok(to.clone());
        }
        let mut calls = inner.calls.values();
        match (calls.next(), calls.next()) {
            // Sent outside any call by the transport's own account: only a client that can
            // answer gets it; a call whose client cannot is not ended for it.
            (Some(Some(to)), None) if origin == Origin::Unassociated && !to.requests => Err(error(
                METHOD_NOT_FOUND,
                "this request came on the upstream's standalone stream, outside any tool \
                     call, and the one call in flight cannot answer it",
            )),
            (Some(to), None) => Ok(to.clone()),
            (None, _) => Err(error(
                INTERNAL_ERROR,
                "no tool call is in flight: requests to the client are only relayed during a call",
            )),
            (Some(_), Some(_)) => Err(error(
                INTERNAL_ERROR,
                "several tool calls are in flight and this request names none of them: \
                 it is not relayed to a client",
            )),
        }
    }

    /// Relays `method` with `params` to the client of the call it belongs to and waits for its
    /// answer; an error when there is no such caller, it cannot answer, the call ended or the
    /// upstream cancelled the request (`ct`).
    pub(crate) async fn ask(
        &self,
        origin: Origin<'_>,
        method: &str,
        params: Value,
        ct: CancellationToken,
    ) -> Answer {
        // Servers ask `roots/list` on their own (after `initialized`, on
        // `roots/list_changed`), unrelated to any call; a stdio upstream's cannot be told
        // apart, so it is taken as unrelated: it never ends a call.
        let origin = match origin {
            Origin::Unknown if method == "roots/list" => Origin::Unassociated,
            origin => origin,
        };
        self.ask_caller(self.target(origin)?, method, params, ct)
            .await
    }

    /// Relays `method` with `params` to the caller `to` (the caller of a call, known without a
    /// lookup: a 2026-07-28 upstream's `input_required` round, [`super::mrtr`]) and waits for
    /// its answer, as [`Relay::ask`] does.
    pub(crate) async fn ask_caller(
        &self,
        to: Option<RelayTo>,
        method: &str,
        params: Value,
        ct: CancellationToken,
    ) -> Answer {
        self.ask_keyed(to, method, params, ct, None).await
    }

    /// [`Relay::ask_caller`] for one request of an `input_required` round, with its key.
    pub(crate) async fn ask_keyed(
        &self,
        to: Option<RelayTo>,
        method: &str,
        params: Value,
        ct: CancellationToken,
        input: Option<InputKey>,
    ) -> Answer {
        let to = match to {
            Some(to) if to.refuse => {
                let _ = to.sink.try_send(Relayed::Missing(method.to_owned()));
                return Err(error(
                    METHOD_NOT_FOUND,
                    format!(
                        "{method}: the client of this tool call did not declare the capability"
                    ),
                ));
            }
            Some(to) if to.requests => to,
            _ => {
                return Err(error(
                    METHOD_NOT_FOUND,
                    format!(
                        "{method}: the client of this tool call did not declare the capability \
                         (or cannot receive requests)"
                    ),
                ));
            }
        };
        let id = format!("r{}", self.next.fetch_add(1, Ordering::Relaxed) + 1);
        let (tx, rx) = oneshot::channel();
        if let Ok(mut inner) = self.inner.lock() {
            inner.pending.insert(id.clone(), tx);
        }
        let _forget = Forget {
            relay: self,
            id: &id,
        };
        let params_json = match params {
            Value::Null => String::new(),
            params => params.to_string(),
        };
        let request = Relayed::Request {
            id: id.clone(),
            method: method.to_owned(),
            params_json,
            input,
        };
        let ended = || error(INTERNAL_ERROR, format!("{method}: the tool call ended"));
        if to.sink.send(request).await.is_err() {
            return Err(ended());
        }
        tokio::select! {
            answer = rx => answer.unwrap_or_else(|_| Err(ended())),
            () = to.sink.closed() => Err(ended()),
            () = ct.cancelled() => Err(error(INTERNAL_ERROR, format!("{method}: cancelled"))),
        }
    }

    /// Passes one `notifications/message` (params as JSON) to the caller of the call it
    /// belongs to, when that caller wants logs; a message no call claims is handed back (for
    /// `WatchLogs`); otherwise it is dropped.
    pub(crate) fn log(&self, origin: Origin<'_>, params: String) -> Option<String> {
        if self.unclaimed(origin) {
            return Some(params);
        }
        if let Ok(Some(to)) = self.target(origin)
            && to.logs
        {
            let _ = to.sink.try_send(Relayed::Log(params));
        }
        None
    }

    /// Whether a message from `origin` belongs to no call: it names none in flight, and no
    /// call is in flight at all (such log messages go to the GET streams).
    fn unclaimed(&self, origin: Origin<'_>) -> bool {
        self.inner.lock().is_ok_and(|inner| {
            inner.calls.is_empty() && origin.call().is_none_or(|id| !inner.calls.contains_key(id))
        })
    }

    /// The client's answer to relayed request `id`; false when no such request waits.
    pub(crate) fn answer(&self, id: &str, answer: Answer) -> bool {
        let waiting = self
            .inner
            .lock()
            .ok()
            .and_then(|mut inner| inner.pending.remove(id));
        match waiting {
            Some(tx) => tx.send(answer).is_ok(),
            None => false,
        }
    }
}

/// Removes a pending request however its wait ends.
struct Forget<'a> {
    relay: &'a Relay,
    id: &'a str,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        if let Ok(mut inner) = self.relay.inner.lock() {
            inner.pending.remove(self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn relaying(requests: bool) -> (RelayTo, mpsc::Receiver<Relayed>) {
        let (sink, rx) = mpsc::channel(4);
        (
            RelayTo {
                sink,
                requests,
                logs: true,
                refuse: false,
                answers: None,
            },
            rx,
        )
    }

    #[tokio::test]
    async fn a_request_reaches_the_one_call_in_flight_and_its_answer_comes_back() {
        let relay = Arc::new(Relay::default());
        let (to, mut rx) = relaying(true);
        let _call = relay.enter(RequestId::Number(1), Some(to));
        let asking = relay.ask(
            Origin::Unknown,
            "roots/list",
            json!({}),
            CancellationToken::new(),
        );
        let answering = async {
            let Some(Relayed::Request { id, method, .. }) = rx.recv().await else {
                panic!("no request relayed");
            };
            assert_eq!(method, "roots/list");
            assert!(relay.answer(&id, Ok(json!({"roots": []}))));
            assert!(!relay.answer(&id, Ok(json!({}))), "answered once only");
        };
        let (answer, ()) = tokio::join!(asking, answering);
        assert_eq!(answer, Ok(json!({"roots": []})));
    }

    #[tokio::test]
    async fn a_request_is_never_guessed_between_two_calls_or_sent_to_a_non_relaying_one() {
        let relay = Arc::new(Relay::default());
        let (a, _ra) = relaying(true);
        let (b, mut rb) = relaying(true);
        let _a = relay.enter(RequestId::Number(1), Some(a));
        let _b = relay.enter(RequestId::Number(2), Some(b));
        let ct = CancellationToken::new;
        let ambiguous = relay
            .ask(Origin::Unknown, "roots/list", json!({}), ct())
            .await;
        assert!(ambiguous.is_err());
        // The HTTP origin names the call.
        let named = relay.ask(
            Origin::Call(&RequestId::Number(2)),
            "roots/list",
            json!({}),
            ct(),
        );
        let answer = async {
            if let Some(Relayed::Request { id, .. }) = rb.recv().await {
                relay.answer(&id, Ok(json!({"roots": []})));
            }
        };
        let (named, ()) = tokio::join!(named, answer);
        assert!(named.is_ok());

        let relay = Arc::new(Relay::default());
        let _plain = relay.enter(RequestId::Number(3), None);
        let refused = relay
            .ask(Origin::Unknown, "elicitation/create", json!({}), ct())
            .await;
        assert_eq!(refused.err().map(|e| e.code.0), Some(METHOD_NOT_FOUND));
        let (declines, _r) = relaying(false);
        drop(_plain);
        let _no = relay.enter(RequestId::Number(4), Some(declines));
        assert!(
            relay
                .ask(Origin::Unknown, "sampling/createMessage", json!({}), ct())
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn a_request_ends_when_its_call_ends() {
        let relay = Arc::new(Relay::default());
        let (to, rx) = relaying(true);
        let call = relay.enter(RequestId::Number(1), Some(to));
        let asking = relay.ask(
            Origin::Unknown,
            "roots/list",
            json!({}),
            CancellationToken::new(),
        );
        let ending = async {
            tokio::task::yield_now().await;
            drop(call);
            drop(rx);
        };
        let (answer, ()) = tokio::join!(asking, ending);
        assert!(answer.is_err());
        assert!(
            relay
                .inner
                .lock()
                .map(|i| i.pending.is_empty())
                .unwrap_or(false)
        );
    }

    #[tokio::test]
    async fn a_request_from_the_standalone_stream_never_ends_a_call_that_cannot_answer_it() {
        // server-everything asks roots/list on its GET stream 350 ms after `initialized`; a
        // modern call without the roots capability in flight then must go on (the CI failure
        // of an earlier build: the call ended with -32021).
        let relay = Arc::new(Relay::default());
        let (sink, mut refused) = mpsc::channel(1);
        let refusing = RelayTo {
            sink,
            requests: false,
            logs: false,
            refuse: true,
            answers: None,
        };
        let _call = relay.enter(RequestId::Number(1), Some(refusing.clone()));
        let ct = CancellationToken::new;
        let answer = relay
            .ask(Origin::Unassociated, "roots/list", json!({}), ct())
            .await;
        assert_eq!(answer.err().map(|e| e.code.0), Some(METHOD_NOT_FOUND));
        assert!(refused.try_recv().is_err(), "the call was not told to end");
        // The same request on the call's own stream does end it, as SPEC §11 prescribes.
        let answer = relay
            .ask(
                Origin::Call(&RequestId::Number(1)),
                "roots/list",
                json!({}),
                ct(),
            )
            .await;
        assert!(answer.is_err());
        assert_eq!(
            refused.try_recv().ok(),
            Some(Relayed::Missing("roots/list".into()))
        );
        drop(_call);
        // A relaying call still gets the standalone request (server-everything's
        // get-roots-list asks there during the call).
        let (to, mut rx) = relaying(true);
        let _call = relay.enter(RequestId::Number(2), Some(to));
        let asking = relay.ask(Origin::Unassociated, "roots/list", json!({}), ct());
        let answering = async {
            if let Some(Relayed::Request { id, .. }) = rx.recv().await {
                relay.answer(&id, Ok(json!({"roots": []})));
            }
        };
        let (answer, ()) = tokio::join!(asking, answering);
        assert_eq!(answer, Ok(json!({"roots": []})));
        drop(_call);
        // A stdio upstream's roots/list names no call either: it does not end one.
        let _call = relay.enter(RequestId::Number(3), Some(refusing));
        let answer = relay
            .ask(Origin::Unknown, "roots/list", json!({}), ct())
            .await;
        assert!(answer.is_err());
        assert!(refused.try_recv().is_err(), "the call was not told to end");
        // Sampling during the one call in flight is that call's: the call is told.
        let _ = relay
            .ask(Origin::Unknown, "sampling/createMessage", json!({}), ct())
            .await;
        assert_eq!(
            refused.try_recv().ok(),
            Some(Relayed::Missing("sampling/createMessage".into()))
        );
    }
}

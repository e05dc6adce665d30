//! A 2026-07-28 upstream's `input_required` results (SEP-2322, multi round-trip requests),
//! relayed to the caller as the upstream's requests to the client (SPEC §11).
//!
//! A modern upstream does not send requests to the client during a call: it answers the call
//! with `resultType: "input_required"`, `inputRequests` (key → `{method, params}`, each one of
//! `elicitation/create`, `sampling/createMessage`, `roots/list`) and an opaque `requestState`.
//! The worker asks the caller each request in turn through [`super::relay`], exactly as if the
//! upstream had sent it on the call's stream (the frontend asks the agent on either surface),
//! collects the answers by key, and sends the call again with `inputResponses` and the
//! `requestState` as received: a new JSON-RPC id each round, at most [`MAX_INPUT_ROUNDS`]
//! rounds, all within the call's deadline and cancellation (the caller's interrupt).
//!
//! The `requestState` is the upstream's: it goes back to that upstream only, never to the
//! caller (only each request's method and params are relayed).

use std::collections::BTreeMap;

use rmcp::model::{ErrorCode, ErrorData, ServerResult};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::upstream::relay::{InputKey, Relay, RelayTo};

/// Rounds of answers one call may take (the official SDKs' default): an upstream that keeps
/// asking after that is ended with an error rather than holding the caller to its timeout.
pub(crate) const MAX_INPUT_ROUNDS: usize = 10;

/// The protocol version from which an upstream may answer `input_required`.
pub(crate) const MRTR_SINCE: &str = "2026-07-28";

/// The requests an upstream may put into `inputRequests`.
const RELAYABLE: [&str; 3] = ["elicitation/create", "sampling/createMessage", "roots/list"];

/// JSON-RPC "invalid params": what an unusable `input_required` result ends the call with.
const INVALID: i32 = -32602;

/// What an upstream asked for in one `input_required` result.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct InputRequired {
    requests: Vec<InputRequest>,
    state: Option<String>,
}

/// One entry of `inputRequests`.
#[derive(Debug, Clone, PartialEq)]
struct InputRequest {
    key: String,
    method: String,
    params: Value,
}

/// What the next round sends besides the call's own params: the answers by key and the
/// upstream's `requestState`, both absent on the first round.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Retry {
    pub(crate) responses: Option<BTreeMap<String, Value>>,
    pub(crate) state: Option<String>,
}

/// `Some` when `result` is an `input_required` result: what it asks for, or why it cannot be
/// answered.
pub(crate) fn input_required(result: &ServerResult) -> Option<Result<InputRequired, ErrorData>> {
    let value = match result {
        ServerResult::InputRequiredResult(result) => match serde_json::to_value(result) {
            Ok(value) => value,
            Err(e) => return Some(Err(unusable(&format!("cannot be read: {e}")))),
        },
        // rmcp did not type it (an entry it does not model): read it as sent.
        ServerResult::CustomResult(custom)
            if custom.0.get("resultType").and_then(Value::as_str) == Some("input_required") =>
        {
            custom.0.clone()
        }
        _ => return None,
    };
    Some(parse(&value))
}

fn unusable(why: &str) -> ErrorData {
    ErrorData::new(
        ErrorCode(INVALID),
        format!("the upstream's input_required result {why}"),
        None,
    )
}

fn parse(value: &Value) -> Result<InputRequired, ErrorData> {
    let state = match value.get("requestState") {
        None | Some(Value::Null) => None,
        Some(Value::String(state)) => Some(state.clone()),
        Some(_) => return Err(unusable("has a requestState that is not a string")),
    };
    let mut requests = Vec::new();
    match value.get("inputRequests") {
        None | Some(Value::Null) => {}
        Some(Value::Object(asked)) => {
            for (key, request) in asked {
                let method = request.get("method").and_then(Value::as_str);
                let Some(method) = method.filter(|m| RELAYABLE.contains(m)) else {
                    return Err(unusable(&format!(
                        "asks {key:?} for something a client is not asked during a call \
                         (only {})",
                        RELAYABLE.join(", ")
                    )));
                };
                requests.push(InputRequest {
                    key: key.clone(),
                    method: method.to_owned(),
                    params: request.get("params").cloned().unwrap_or(Value::Null),
                });
            }
        }
        Some(_) => return Err(unusable("has inputRequests that are not an object")),
    }
    Ok(InputRequired { requests, state })
}

/// Asks the caller `to` every request of `asked` at once, each with its key and the round's
/// size (the frontend asks a 2026-07-28 client all of them in one `input_required`
/// result, under the upstream's own keys), and returns the next round's retry once all are
/// answered. A request the caller cannot or did not answer ends the call with its error,
/// naming what the upstream needed (an `inputResponses` entry cannot carry an error).
pub(crate) async fn answer(
    relay: &Relay,
    to: Option<&RelayTo>,
    asked: InputRequired,
) -> Result<Retry, ErrorData> {
    let round = u32::try_from(asked.requests.len()).unwrap_or(u32::MAX);
    let asks = asked.requests.into_iter().map(|request| {
        let InputRequest {
            key,
            method,
            params,
        } = request;
        let input = InputKey {
            key: key.clone(),
            round,
        };
        async move {
            // Nothing is in flight at the upstream between rounds: only the caller's
            // interrupt (around this whole function) ends the wait.
            let ct = CancellationToken::new();
            let answer = relay
                .ask_keyed(to.cloned(), &method, params, ct, Some(input))
                .await
                .map_err(|e| {
                    ErrorData::new(
                        e.code,
                        format!(
                            "the upstream needs {method} answered by the client to go on: {}",
                            e.message
                        ),
                        e.data,
                    )
                })?;
            Ok::<_, ErrorData>((key, answer))
        }
    });
    // Polled in order, so the requests reach the caller in the upstream's order.
    let responses = futures_util::future::try_join_all(asks).await?;
    Ok(Retry {
        responses: Some(responses.into_iter().collect()),
        state: asked.state,
    })
}

/// The error that ends a call whose upstream still asks for input after
/// [`MAX_INPUT_ROUNDS`] rounds.
pub(crate) fn too_many_rounds() -> String {
    format!(
        "the upstream still asked for input from the client after {MAX_INPUT_ROUNDS} rounds \
         of answers (input_required); the call is ended: the server may be looping, ask its \
         maintainer"
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rmcp::model::{CustomResult, RequestId};
    use serde_json::json;
    use tokio::sync::mpsc;

    use super::*;
    use crate::upstream::relay::Relayed;

    const STATE: &str = "upstream-secret-state";

    fn asking() -> Value {
        json!({
            "resultType": "input_required",
            "inputRequests": {
                "confirm": {"method": "elicitation/create", "params": {
                    "message": "Go on?",
                    "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}}}},
                "where": {"method": "roots/list"},
            },
            "requestState": STATE,
        })
    }

    fn typed(value: Value) -> ServerResult {
        serde_json::from_value(value).unwrap_or_else(|e| panic!("not a result: {e}"))
    }

    #[test]
    fn input_required_is_read_typed_or_raw_and_complete_is_not() {
        let typed = input_required(&typed(asking()));
        let raw = input_required(&ServerResult::CustomResult(CustomResult(asking())));
        for asked in [typed, raw] {
            let Some(Ok(asked)) = asked else {
                panic!("not read: {asked:?}");
            };
            assert_eq!(asked.state.as_deref(), Some(STATE));
            let methods: Vec<_> = asked.requests.iter().map(|r| r.method.as_str()).collect();
            assert_eq!(methods, ["elicitation/create", "roots/list"]);
        }
        let done = json!({"resultType": "complete", "content": []});
        assert!(input_required(&ServerResult::CustomResult(CustomResult(done))).is_none());
    }

    #[test]
    fn a_request_a_client_is_never_asked_is_refused() {
        let mut bad = asking();
        bad["inputRequests"]["x"] = json!({"method": "tools/call", "params": {}});
        let read = input_required(&ServerResult::CustomResult(CustomResult(bad)));
        let Some(Err(e)) = read else {
            panic!("accepted: {read:?}");
        };
        assert_eq!(e.code.0, INVALID);
        assert!(e.message.contains("\"x\""), "{}", e.message);
    }

    #[tokio::test]
    async fn a_round_is_relayed_at_once_with_its_keys_without_the_state() {
        let relay = Arc::new(Relay::default());
        let (sink, mut rx) = mpsc::channel(4);
        let to = RelayTo {
            sink,
            requests: true,
            logs: false,
            refuse: false,
            answers: None,
        };
        let Some(Ok(asked)) = input_required(&typed(asking())) else {
            panic!("not read");
        };
        // All requests of the round arrive before any is answered: the frontend
        // asks them in one input_required result.
        let answering = async {
            let mut asked = Vec::new();
            while asked.len() < 2 {
                let next = tokio::time::timeout(std::time::Duration::from_secs(5), rx.recv());
                let Ok(Some(Relayed::Request {
                    id,
                    method,
                    params_json,
                    input,
                })) = next.await
                else {
                    panic!("the round's requests did not all come unanswered: {asked:?}");
                };
                assert!(
                    !params_json.contains(STATE),
                    "the state leaked: {params_json}"
                );
                // Every request of the round comes with its key and the round's size.
                let input = input.unwrap_or_else(|| panic!("{method} has no input key"));
                assert_eq!(input.round, 2);
                let key = if method == "roots/list" {
                    "where"
                } else {
                    "confirm"
                };
                assert_eq!(input.key, key);
                asked.push((id, method));
            }
            for (id, method) in &asked {
                let answer = match method.as_str() {
                    "roots/list" => json!({"roots": []}),
                    _ => json!({"action": "accept", "content": {"ok": true}}),
                };
                assert!(relay.answer(id, Ok(answer)));
            }
            asked.into_iter().map(|(_, m)| m).collect::<Vec<_>>()
        };
        let (retry, seen) = tokio::join!(answer(&relay, Some(&to), asked), answering);
        assert_eq!(seen, ["elicitation/create", "roots/list"]);
        let retry = retry.unwrap_or_else(|e| panic!("not answered: {e:?}"));
        assert_eq!(retry.state.as_deref(), Some(STATE));
        let responses = retry.responses.unwrap_or_default();
        assert_eq!(responses["confirm"]["action"], "accept");
        assert_eq!(responses["where"], json!({"roots": []}));
        // A caller that cannot be asked ends the call with an error naming the need.
        let Some(Ok(asked)) = input_required(&typed(asking())) else {
            panic!("not read");
        };
        let _call = relay.enter(RequestId::Number(1), None);
        let refused = answer(&relay, None, asked).await;
        let message = refused.err().map(|e| e.message).unwrap_or_default();
        assert!(message.contains("needs elicitation/create"), "{message}");
    }
}

//! What the frontend knows of its clients beyond one request: per token, the
//! capabilities a legacy client declared at `initialize` and its `logging/setLevel`; the
//! requests relayed to legacy clients that wait for their answer; and the modern calls parked
//! behind an `input_required` result, by `requestState`.
//!
//! The token is the session (its `Mcp-Session-Id` is derived from it, `session/ids.rs`), so
//! everything is keyed by the token's SHA-256, never the token itself. Plain data: the flows are in `call/relay.rs`.

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use base64::Engine;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::observe::audit::Relayed;

pub(crate) use crate::session::sessions::TokenKey;

/// The client capabilities that let a client answer an upstream's requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Caps {
    pub(crate) elicitation: bool,
    pub(crate) sampling: bool,
    pub(crate) roots: bool,
}

impl Caps {
    /// From a `ClientCapabilities` object (absent or not an object: none).
    pub(crate) fn from_json(capabilities: Option<&Value>) -> Self {
        let has = |name: &str| {
            capabilities
                .and_then(|c| c.get(name))
                .is_some_and(Value::is_object)
        };
        Self {
            elicitation: has("elicitation"),
            sampling: has("sampling"),
            roots: has("roots"),
        }
    }

    pub(crate) fn any(self) -> bool {
        self.elicitation || self.sampling || self.roots
    }

    /// The capability `method` needs: its name, and whether this client declared it.
    pub(crate) fn needed(self, method: &str) -> (&'static str, bool) {
        match method {
            "elicitation/create" => ("elicitation", self.elicitation),
            "sampling/createMessage" => ("sampling", self.sampling),
            "roots/list" => ("roots", self.roots),
            _ => ("unknown", false),
        }
    }

    /// `data.requiredCapabilities` of -32021 for `method`.
    pub(crate) fn required(method: &str) -> Value {
        let (name, _) = Self::default().needed(method);
        json!({ name: {} })
    }
}

/// The RFC 5424 severity of an MCP `LoggingLevel` (debug 0 … emergency 7).
pub(crate) fn level_rank(level: &str) -> Option<u8> {
    const LEVELS: [&str; 8] = [
        "debug",
        "info",
        "notice",
        "warning",
        "error",
        "critical",
        "alert",
        "emergency",
    ];
    LEVELS
        .iter()
        .position(|l| *l == level)
        .and_then(|p| u8::try_from(p).ok())
}

/// A legacy client's state.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TokenState {
    pub(crate) caps: Caps,
    /// Its `logging/setLevel`, as a rank; `None`: no log messages at all.
    pub(crate) log_level: Option<u8>,
}

/// Where the client's answer to one relayed request goes.
#[derive(Clone, Debug)]
pub(crate) struct AnswerTo {
    pub(crate) endpoint: String,
    pub(crate) generation: u64,
    pub(crate) call_id: String,
    /// The worker's id of the request.
    pub(crate) request_id: String,
    pub(crate) method: String,
    pub(crate) relayed: Arc<Relayed>,
    /// Its note in `relayed`.
    pub(crate) note: usize,
}

/// A modern call waiting for its client to retry with `inputResponses`.
pub(crate) struct Parked {
    pub(crate) token: TokenKey,
    /// The local tool name the retry must name.
    pub(crate) tool: String,
    /// By `inputRequests` key.
    pub(crate) asked: HashMap<String, AnswerTo>,
    /// The running call (its type is `call/relay.rs`'s).
    pub(crate) call: Box<dyn Any + Send>,
    /// The `inputRequests` key of the person's confirmation question (`--confirm high`):
    /// its answer goes to [`Clients::confirmed`], not to a worker.
    pub(crate) confirm: Option<String>,
}

type ConfirmAnswer = tokio::sync::oneshot::Sender<Result<Value, Value>>;

/// A confirmation question waiting for its answer. Dropping it (answered, timed out, or the
/// call that waits went away: its stream closed, its parked state expired) removes the entry,
/// so an abandoned question never stays behind.
pub(crate) struct ConfirmWait<'a> {
    clients: &'a Clients,
    key: (TokenKey, String),
    answer: tokio::sync::oneshot::Receiver<Result<Value, Value>>,
}

impl ConfirmWait<'_> {
    /// The client's answer; `Err` when it can no longer come.
    pub(crate) async fn answer(
        &mut self,
    ) -> Result<Result<Value, Value>, tokio::sync::oneshot::error::RecvError> {
        (&mut self.answer).await
    }
}

impl Drop for ConfirmWait<'_> {
    fn drop(&mut self) {
        lock(&self.clients.confirms).remove(&self.key);
    }
}

#[derive(Default)]
pub(crate) struct Clients {
    tokens: Mutex<HashMap<TokenKey, TokenState>>,
    asked: Mutex<HashMap<(TokenKey, String), AnswerTo>>,
    parked: Mutex<HashMap<String, Parked>>,
    /// Confirmation questions (`--confirm high`) awaiting the client's POSTed answer.
    confirms: Mutex<HashMap<(TokenKey, String), ConfirmAnswer>>,
    seq: AtomicU64,
    /// Open legacy GET streams by id: their token and where their notifications go.
    streams: Mutex<HashMap<u64, (TokenKey, mpsc::Sender<Value>)>>,
}

/// Notifications one GET stream may have waiting; more are dropped.
const STREAM_BUFFER: usize = 256;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Clients {
    pub(crate) fn state(&self, token: &TokenKey) -> TokenState {
        lock(&self.tokens).get(token).copied().unwrap_or_default()
    }

    pub(crate) fn set_caps(&self, token: TokenKey, caps: Caps) {
        lock(&self.tokens).entry(token).or_default().caps = caps;
    }

    pub(crate) fn set_log_level(&self, token: TokenKey, rank: u8) {
        lock(&self.tokens).entry(token).or_default().log_level = Some(rank);
    }

    /// A fresh id for a request the frontend sends to a client, or an `inputRequests` key.
    pub(crate) fn next_id(&self) -> String {
        format!("tutti-{}", self.seq.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// A legacy request sent to the client of `token` with JSON-RPC id `id`.
    pub(crate) fn ask(&self, token: TokenKey, id: String, to: AnswerTo) {
        lock(&self.asked).insert((token, id), to);
    }

    /// A confirmation question sent to `token`'s client with JSON-RPC id (legacy) or
    /// `inputRequests` key (modern) `id`; waiting until the returned value is dropped.
    pub(crate) fn expect_confirm(&self, token: TokenKey, id: String) -> ConfirmWait<'_> {
        let (tx, answer) = tokio::sync::oneshot::channel();
        let key = (token, id);
        lock(&self.confirms).insert(key.clone(), tx);
        ConfirmWait {
            clients: self,
            key,
            answer,
        }
    }

    /// How many confirmation questions wait for an answer.
    #[cfg(test)]
    pub(crate) fn confirms_waiting(&self) -> usize {
        lock(&self.confirms).len()
    }

    /// Hands the client's answer to its confirmation question; gives it back when `id`
    /// names none.
    pub(crate) fn confirmed(
        &self,
        token: TokenKey,
        id: &str,
        answer: Result<Value, Value>,
    ) -> Option<Result<Value, Value>> {
        let waiting = lock(&self.confirms).remove(&(token, id.to_owned()));
        match waiting {
            Some(tx) => {
                let _ = tx.send(answer);
                None
            }
            None => Some(answer),
        }
    }

    /// Where the answer of `token`'s client to request `id` goes (once).
    pub(crate) fn answered(&self, token: TokenKey, id: &str) -> Option<AnswerTo> {
        lock(&self.asked).remove(&(token, id.to_owned()))
    }

    /// Forgets the requests of call `call_id` that were never answered; returns them.
    pub(crate) fn unanswered(&self, call_id: &str) -> Vec<AnswerTo> {
        let mut asked = lock(&self.asked);
        let ids: Vec<_> = asked
            .iter()
            .filter(|(_, to)| to.call_id == call_id)
            .map(|(k, _)| k.clone())
            .collect();
        ids.iter().filter_map(|k| asked.remove(k)).collect()
    }

    /// Parks a call; returns its `requestState`: 32 random bytes (base64url), which only this
    /// frontend can have made and which names exactly one parked call of one token.
    pub(crate) fn park(&self, parked: Parked) -> Option<String> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).ok()?;
        let state = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        lock(&self.parked).insert(state.clone(), parked);
        Some(state)
    }

    /// Takes the parked call `state` names, when it belongs to `token` and `tool`.
    pub(crate) fn unpark(&self, state: &str, token: &TokenKey, tool: &str) -> Option<Parked> {
        let mut parked = lock(&self.parked);
        let ours = parked
            .get(state)
            .is_some_and(|p| p.token == *token && p.tool == tool);
        if ours { parked.remove(state) } else { None }
    }

    /// A new GET stream of `token`: its id and where its notifications arrive.
    pub(crate) fn register_stream(&self, token: TokenKey) -> (u64, mpsc::Receiver<Value>) {
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        let id = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        lock(&self.streams).insert(id, (token, tx));
        (id, rx)
    }

    pub(crate) fn unregister_stream(&self, id: u64) {
        lock(&self.streams).remove(&id);
    }

    /// Ends every GET stream of `token` (their senders go, so each stream ends once it has
    /// sent what it has queued); returns how many.
    pub(crate) fn close_streams(&self, token: &TokenKey) -> usize {
        let mut streams = lock(&self.streams);
        let before = streams.len();
        streams.retain(|_, (t, _)| t != token);
        before - streams.len()
    }

    /// Queues `message` on every GET stream of `token` (dropped where one is full).
    pub(crate) fn push(&self, token: &TokenKey, message: &Value) {
        for (t, tx) in lock(&self.streams).values() {
            if t == token {
                let _ = tx.try_send(message.clone());
            }
        }
    }

    /// The tokens with an open GET stream and a log level, with that level.
    pub(crate) fn log_listeners(&self) -> Vec<(TokenKey, u8)> {
        let streams = lock(&self.streams);
        let tokens = lock(&self.tokens);
        let mut out: Vec<(TokenKey, u8)> = streams
            .values()
            .filter_map(|(token, _)| Some((*token, tokens.get(token)?.log_level?)))
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Drops a parked call that was never resumed (its deadline passed).
    pub(crate) fn expire(&self, state: &str) -> Option<Parked> {
        lock(&self.parked).remove(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_and_levels() {
        let caps = Caps::from_json(Some(
            &json!({"elicitation": {}, "roots": {"listChanged": true}}),
        ));
        assert_eq!(caps.needed("elicitation/create"), ("elicitation", true));
        assert_eq!(caps.needed("sampling/createMessage"), ("sampling", false));
        assert_eq!(caps.needed("roots/list"), ("roots", true));
        assert!(!Caps::from_json(Some(&json!({}))).any());
        assert!(!Caps::from_json(Some(&json!({"sampling": true}))).any());
        assert_eq!(
            Caps::required("sampling/createMessage"),
            json!({"sampling": {}})
        );
        assert_eq!(level_rank("debug"), Some(0));
        assert_eq!(level_rank("emergency"), Some(7));
        assert_eq!(level_rank("loud"), None);
    }

    #[test]
    fn a_parked_call_is_resumed_only_by_its_token_and_tool_and_once() {
        let clients = Clients::default();
        let park = |token| Parked {
            token,
            tool: "k_t".into(),
            asked: HashMap::new(),
            call: Box::new(()),
            confirm: None,
        };
        let state = clients.park(park([1; 32])).expect("random bytes");
        assert!(
            clients.unpark(&state, &[2; 32], "k_t").is_none(),
            "another token"
        );
        assert!(
            clients.unpark(&state, &[1; 32], "k_other").is_none(),
            "another tool"
        );
        let mut altered = state.clone();
        altered.pop();
        assert!(
            clients.unpark(&altered, &[1; 32], "k_t").is_none(),
            "altered"
        );
        assert!(clients.unpark(&state, &[1; 32], "k_t").is_some());
        assert!(
            clients.unpark(&state, &[1; 32], "k_t").is_none(),
            "used once"
        );
    }

    #[tokio::test]
    async fn a_confirmation_question_leaves_the_map_however_its_wait_ends() {
        let clients = Clients::default();
        // Answered: the waiter gets the answer, nothing stays behind.
        let mut answered = clients.expect_confirm([1; 32], "tutti-1".into());
        assert_eq!(clients.confirms_waiting(), 1);
        let answer = Ok(json!({"action": "accept"}));
        assert!(clients.confirmed([1; 32], "tutti-1", answer).is_none());
        assert_eq!(clients.confirms_waiting(), 0);
        assert_eq!(
            answered.answer().await.ok(),
            Some(Ok(json!({"action": "accept"})))
        );
        drop(answered);
        // Another token cannot answer it; dropping the waiter (the call's stream closed)
        // removes it, and a late answer then names nothing.
        let waiting = clients.expect_confirm([1; 32], "tutti-2".into());
        let forged = Ok(json!({"action": "accept"}));
        assert!(clients.confirmed([2; 32], "tutti-2", forged).is_some());
        assert_eq!(clients.confirms_waiting(), 1);
        drop(waiting);
        assert_eq!(clients.confirms_waiting(), 0, "the dropped wait is gone");
        let late = Ok(json!({"action": "accept"}));
        assert!(clients.confirmed([1; 32], "tutti-2", late).is_some());
    }
}

//! Confirmed high-risk calls (SPEC §12): a session issued with
//! `--confirm high` has each call of a `high`-risk tool confirmed by the person through the
//! client's elicitation before anything is sent upstream.
//!
//! The question is a frontend-originated `elicitation/create`: on the legacy surface a
//! JSON-RPC request on the call's event stream (id `tutti-<n>`, the client's POSTed answer
//! comes back through [`crate::call::relay::answer_legacy`]); on the modern surface the call's
//! `input_required` result (`inputRequests["tutti-<n>"]`, with the relay's `requestState`;
//! the client's retry brings the answer through [`crate::call::relay::resume_modern`]). It names
//! the tool, its connector and its risk, and the arguments (secret-looking keys masked, long
//! values cut, hidden characters written out). Accept → the call runs; decline, cancel, an
//! error answer or no answer within the tool's timeout → an `isError` result starting
//! `declined:`; a client that cannot be asked → an `isError` result saying so. Each decision is the call's audit
//! `confirmation`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tutti_rules::redact::escape_hidden;

use crate::app::App;
use crate::backend::Identity;
use crate::call::result::CallResult;
use crate::catalog::routes::{Connector, Tool};
use crate::observe::audit::{Outcome, Relayed};
use crate::rpc::{INTERNAL_ERROR, RpcError};
use crate::session::clients::ConfirmWait;

/// How long the person has when the tool has no timeout of its own.
const DEFAULT_WAIT: Duration = Duration::from_secs(60);

/// Whether `who`'s call of `tool` must be confirmed first.
pub(crate) fn required(who: &Identity, tool: &Tool) -> bool {
    who.confirm_high && tool.risk == "high"
}

/// The person's decision (its audit word).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    Accepted,
    Declined,
    Cancelled,
    Timeout,
    NotAsked,
}

impl Decision {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Accepted => "accepted",
            Self::Declined => "declined",
            Self::Cancelled => "cancelled",
            Self::Timeout => "timeout",
            Self::NotAsked => "not_asked",
        }
    }

    /// The client's answer to the question: `action` of an `ElicitResult`.
    fn of_answer(answer: &Result<Value, Value>) -> Self {
        match answer
            .as_ref()
            .ok()
            .and_then(|r| r.get("action"))
            .and_then(Value::as_str)
        {
            Some("accept") => Self::Accepted,
            Some("decline") => Self::Declined,
            _ => Self::Cancelled,
        }
    }
}

/// The question's `elicitation/create` params (a form with no fields: the answer is the
/// action alone): the tool, its connector and risk, and the arguments as [`shown_arguments`]
/// writes them.
pub(crate) fn params(tool: &Tool, arguments: Option<&Value>) -> Value {
    let message = format!(
        "Allow the call of tool {} (connector {}, risk {})?\n{}",
        escape_hidden(&tool.name, &[]),
        tool.connector.key,
        tool.risk,
        shown_arguments(arguments)
    );
    json!({
        "message": message,
        "requestedSchema": {"type": "object", "properties": {}},
    })
}

/// Words that make an argument's key secret-looking (compared ignoring ASCII case, as parts
/// of the key): its value is masked. The frontend does not hold the connector's secret values,
/// so the key is what it can judge by.
const SECRET_KEY_WORDS: &[&str] = &[
    "token",
    "password",
    "passwd",
    "secret",
    "key",
    "authorization",
    "cookie",
    "credential",
];
/// Most characters of one argument's value in the question; a longer one is cut with `…`.
const MAX_VALUE_CHARS: usize = 200;
/// Most arguments listed in the question; the rest are counted.
const MAX_ARGUMENTS: usize = 20;

fn secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    SECRET_KEY_WORDS.iter().any(|w| key.contains(w))
}

/// `value` with the value of every secret-looking key (at any depth) replaced by the mask.
fn masked(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let v = if secret_key(k) {
                        json!(tutti_rules::redact::MASK)
                    } else {
                        masked(v)
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(masked).collect()),
        other => other.clone(),
    }
}

/// The arguments, one `  name: value` line each (the value as JSON, secret-looking keys
/// masked, cut at [`MAX_VALUE_CHARS`], hidden characters written out), or `No arguments.`
fn shown_arguments(arguments: Option<&Value>) -> String {
    let map = match arguments {
        Some(Value::Object(map)) if !map.is_empty() => map,
        None | Some(Value::Object(_)) | Some(Value::Null) => return "No arguments.".into(),
        Some(other) => return format!("Arguments: {}", shown_value(&masked(other))),
    };
    let mut out = String::from("Arguments:");
    for (key, value) in map.iter().take(MAX_ARGUMENTS) {
        let value = if secret_key(key) {
            tutti_rules::redact::MASK.to_owned()
        } else {
            shown_value(&masked(value))
        };
        out.push_str(&format!("\n  {}: {value}", escape_hidden(key, &[])));
    }
    if map.len() > MAX_ARGUMENTS {
        out.push_str(&format!("\n  … and {} more", map.len() - MAX_ARGUMENTS));
    }
    out
}

fn shown_value(value: &Value) -> String {
    let text = value.to_string();
    let cut = tutti_rules::redact::truncate_chars(&text, MAX_VALUE_CHARS);
    escape_hidden(&cut, &[]).into_owned()
}

/// How long the person has to answer: the call timeout of the tool's connector.
pub(crate) fn limit(connector: &Connector) -> Duration {
    match connector.timeout_ms {
        0 => DEFAULT_WAIT,
        ms => Duration::from_millis(u64::from(ms)),
    }
}

/// Waits for the answer to a question about `tool` (the entry leaves the map with `waiting`).
pub(crate) async fn wait(tool: &Tool, mut waiting: ConfirmWait<'_>) -> Decision {
    match tokio::time::timeout(limit(&tool.connector), waiting.answer()).await {
        Ok(Ok(answer)) => Decision::of_answer(&answer),
        Ok(Err(_)) => Decision::Cancelled,
        Err(_) => Decision::Timeout,
    }
}

/// A question the person has not answered yet. Dropped undecided (the call went away: its
/// legacy stream closed, its parked modern state expired), the call is audited `cancelled`,
/// so every question asked ends in an audit record.
pub(crate) struct Undecided<'a> {
    app: &'a App,
    who: &'a Identity,
    tool: &'a Tool,
    relayed: &'a Arc<Relayed>,
    armed: bool,
}

impl<'a> Undecided<'a> {
    pub(crate) fn new(
        app: &'a App,
        who: &'a Identity,
        tool: &'a Tool,
        relayed: &'a Arc<Relayed>,
    ) -> Self {
        Self {
            app,
            who,
            tool,
            relayed,
            armed: true,
        }
    }

    /// The person decided (or the call will say why not): nothing to audit here.
    pub(crate) fn decided(mut self) {
        self.armed = false;
    }
}

impl Drop for Undecided<'_> {
    fn drop(&mut self) {
        if self.armed {
            let _ = refused(
                self.app,
                self.who,
                self.tool,
                self.relayed,
                Decision::Cancelled,
            );
        }
    }
}

/// The result of a call that was not sent: audited with `decision`.
pub(crate) fn refused(
    app: &App,
    who: &Identity,
    tool: &Tool,
    relayed: &Arc<Relayed>,
    decision: Decision,
) -> Result<CallResult, RpcError> {
    relayed.confirm(decision.as_str());
    app.audit.record(
        who,
        tool,
        Instant::now(),
        Outcome::ToolError,
        0,
        Some(relayed),
    );
    let text = match decision {
        Decision::NotAsked => format!(
            "confirmation required: the call of {} (risk {}) must be confirmed by the person, \
             and this client could not be asked (it declared no elicitation capability, or on \
             2025-06-18 does not accept an event stream); nothing was sent. To call it, use a \
             client that answers elicitation, or issue the session without `--confirm high`",
            tool.name, tool.risk
        ),
        other => format!(
            "declined: the person did not confirm the call of {} ({}); nothing was sent",
            tool.name,
            other.as_str()
        ),
    };
    let result = json!({"content": [{"type": "text", "text": text}], "isError": true});
    CallResult::from_json(result.to_string())
        .ok_or_else(|| RpcError::new(INTERNAL_ERROR, "cannot encode the refusal"))
}

/// The refusal for a call that must be confirmed by a client that cannot be asked.
pub(crate) fn not_asked(
    ctx: &crate::era::shared::Ctx,
    tool: &Tool,
    revision: crate::era::tables::Revision,
) -> Result<CallResult, RpcError> {
    let relayed = Arc::new(Relayed::default());
    refused(&ctx.app, &ctx.identity, tool, &relayed, Decision::NotAsked).map(|r| r.in_era(revision))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_question_shows_arguments_masked_cut_and_escaped() {
        let long = "x".repeat(500);
        let args = json!({
            "path": "/srv/data",
            "api_token": "tok-123",
            "options": {"Password": "hunter2", "depth": 2},
            "note": long,
            "label": "a\u{202e}b",
        });
        let shown = shown_arguments(Some(&args));
        assert!(shown.starts_with("Arguments:\n"), "{shown}");
        assert!(shown.contains("\n  path: \"/srv/data\""), "{shown}");
        assert!(shown.contains("\n  api_token: ***"), "{shown}");
        assert!(
            shown.contains(r#"options: {"Password":"***","depth":2}"#),
            "{shown}"
        );
        assert!(!shown.contains("tok-123") && !shown.contains("hunter2"));
        let note = shown
            .lines()
            .find(|l| l.contains("note:"))
            .unwrap_or_default();
        assert_eq!(
            note.chars().count(),
            "  note: ".len() + MAX_VALUE_CHARS + 1,
            "{note}"
        );
        assert!(note.ends_with('…'), "{note}");
        assert!(shown.contains("label: \"a\\u{202e}b\""), "{shown}");
        assert_eq!(shown_arguments(None), "No arguments.");
        assert_eq!(shown_arguments(Some(&json!({}))), "No arguments.");
    }
}

//! Confirmed high-risk calls (SPEC §12): a session issued with `--confirm high` has each call
//! of a `high`-risk tool confirmed before anything is sent upstream, through the channels
//! named by `--confirm-via` ([`Ask`]).
//!
//! - **person** (the default): the call is held in the kernel ([`by_person`], the `Routes`
//!   RPC `AwaitConfirmation`), which lists it for `tutti confirm list` and the console and
//!   announces it on the desktop, until the person allows or denies it there, or the wait
//!   ends. An answer of the agent's own client never decides it.
//! - **agent**: a frontend-originated `elicitation/create` to the call's own client: on the
//!   legacy surface a JSON-RPC request on the call's event stream (id `tutti-<n>`, the
//!   client's POSTed answer comes back through [`crate::call::relay::answer_legacy`]); on the
//!   modern surface the call's `input_required` result (`inputRequests["tutti-<n>"]`, with
//!   the relay's `requestState`; the client's retry brings the answer through
//!   [`crate::call::relay::resume_modern`]). With both channels, the client's accept or
//!   decline goes to the kernel as the agent's answer (`AnswerAgentConfirmation`) and the
//!   first answer wins; its cancel leaves the question to the person.
//!
//! Both show the tool, its connector and risk, and the arguments as
//! [`tutti_rules::shown_arguments`] writes them. Accepted → the call runs; declined,
//! cancelled, an error answer or no answer within the connector's call timeout → an `isError`
//! result starting `declined:`; a session whose only channel is a client that cannot be asked
//! → an `isError` result saying so. Each decision, and the channel that answered, is the
//! call's audit `confirmation` / `confirmedVia`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tutti_proto::kernel::{AgentConfirmationAnswer, ConfirmationRequest, HeldCall, ShownArgument};
use tutti_rules::redact::escape_hidden;
use tutti_rules::shown_arguments::shown_arguments;

use crate::app::App;
use crate::backend::Identity;
use crate::call::result::CallResult;
use crate::catalog::routes::{Connector, Tool};
use crate::observe::audit::{Outcome, Relayed};
use crate::rpc::{INTERNAL_ERROR, RpcError};
use crate::session::clients::ConfirmWait;

/// How long the person has when the tool has no timeout of its own.
const DEFAULT_WAIT: Duration = Duration::from_secs(60);
/// How much longer than the kernel's wait the frontend waits for the kernel's answer.
const KERNEL_SLACK: Duration = Duration::from_secs(5);

/// Who is asked to confirm one call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Ask {
    /// The person, outside the agent (held in the kernel).
    pub(crate) person: bool,
    /// The call's own client, by elicitation.
    pub(crate) agent: bool,
}

/// Who must confirm `who`'s call of `tool` first; `None` when nobody must.
pub(crate) fn required(who: &Identity, tool: &Tool) -> Option<Ask> {
    (who.confirm_high && tool.risk == "high").then_some(Ask {
        person: who.confirm_via.person || !who.confirm_via.agent,
        agent: who.confirm_via.agent,
    })
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

    /// The kernel's outcome of a held call.
    fn of_outcome(outcome: &str) -> Self {
        match outcome {
            "allowed" => Self::Accepted,
            "denied" => Self::Declined,
            _ => Self::Timeout,
        }
    }
}

/// A decision and the channel that made it (`person` | `agent`; empty when nobody did).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Decided {
    pub(crate) decision: Decision,
    pub(crate) via: &'static str,
}

impl Decided {
    pub(crate) fn by(decision: Decision, via: &'static str) -> Self {
        Self { decision, via }
    }

    fn channel(channel: &str) -> &'static str {
        match channel {
            "person" => "person",
            "agent" => "agent",
            _ => "",
        }
    }
}

/// The question's `elicitation/create` params (a form with no fields: the answer is the
/// action alone): the tool, its connector and risk, and the arguments as shown to a person.
pub(crate) fn params(tool: &Tool, arguments: Option<&Value>) -> Value {
    let message = format!(
        "Allow the call of tool {} (connector {}, risk {})?\n{}",
        escape_hidden(&tool.name, &[]),
        tool.connector.key,
        tool.risk,
        shown_arguments(arguments).lines()
    );
    json!({
        "message": message,
        "requestedSchema": {"type": "object", "properties": {}},
    })
}

/// What the kernel lists of `who`'s call of `tool` (`tutti confirm list`, the console).
fn held(
    app: &App,
    who: &Identity,
    tool: &Tool,
    arguments: Option<&Value>,
    agent_asked: bool,
) -> ConfirmationRequest {
    let shown = shown_arguments(arguments);
    let call = HeldCall {
        workspace: who.workspace.clone(),
        session: who.session.clone(),
        connector: tool.connector.key.clone(),
        tool: tool.name.clone(),
        risk: tool.risk.clone(),
        arguments: shown
            .items
            .into_iter()
            .map(|(name, value)| ShownArgument { name, value })
            .collect(),
        more_arguments: u32::try_from(shown.more).unwrap_or(u32::MAX),
    };
    ConfirmationRequest {
        call_key: format!("{}-{}", std::process::id(), app.clients.next_id()),
        call: Some(call),
        wait_ms: u64::try_from(limit(&tool.connector).as_millis()).unwrap_or(u64::MAX),
        agent_asked,
    }
}

/// Holds the call in the kernel for the person; with `agent` (the client's answer to the
/// question already asked), the client's accept or decline counts as the agent's answer.
/// The first answer wins.
pub(crate) async fn by_person(
    app: &App,
    who: &Identity,
    tool: &Tool,
    arguments: Option<&Value>,
    agent: Option<ConfirmWait<'_>>,
) -> Decided {
    let request = held(app, who, tool, arguments, agent.is_some());
    let call_key = request.call_key.clone();
    let kernel = tokio::time::timeout(
        limit(&tool.connector) + KERNEL_SLACK,
        app.backend.await_confirmation(request),
    );
    let mut kernel = std::pin::pin!(kernel);
    if let Some(mut waiting) = agent {
        tokio::select! {
            decided = &mut kernel => return person_decided(decided),
            answer = waiting.answer() => {
                let decision = answer.map_or(Decision::Cancelled, |a| Decision::of_answer(&a));
                if decision != Decision::Cancelled {
                    let allow = decision == Decision::Accepted;
                    let answer = AgentConfirmationAnswer { call_key, allow };
                    if let Err(e) = app.backend.answer_agent_confirmation(answer).await {
                        tracing::warn!(error = %e, "cannot pass the agent's confirmation to the kernel");
                    }
                }
            }
        }
    }
    person_decided(kernel.await)
}

fn person_decided(
    decided: Result<
        Result<tutti_proto::kernel::ConfirmationDecision, crate::Error>,
        tokio::time::error::Elapsed,
    >,
) -> Decided {
    match decided {
        Ok(Ok(d)) => Decided::by(
            Decision::of_outcome(&d.outcome),
            Decided::channel(&d.channel),
        ),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "cannot hold a call for the person's confirmation");
            Decided::by(Decision::Cancelled, "")
        }
        Err(_) => Decided::by(Decision::Timeout, ""),
    }
}

/// How long the person has to answer: the call timeout of the tool's connector.
pub(crate) fn limit(connector: &Connector) -> Duration {
    match connector.timeout_ms {
        0 => DEFAULT_WAIT,
        ms => Duration::from_millis(u64::from(ms)),
    }
}

/// Waits for the answer to a question about `tool` (the entry leaves the map with `waiting`).
pub(crate) async fn wait(tool: &Tool, mut waiting: ConfirmWait<'_>) -> Decided {
    let decision = match tokio::time::timeout(limit(&tool.connector), waiting.answer()).await {
        Ok(Ok(answer)) => Decision::of_answer(&answer),
        Ok(Err(_)) => Decision::Cancelled,
        Err(_) => return Decided::by(Decision::Timeout, ""),
    };
    Decided::by(decision, "agent")
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
                Decided::by(Decision::Cancelled, ""),
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
    decided: Decided,
) -> Result<CallResult, RpcError> {
    relayed.confirm(decided.decision.as_str(), decided.via);
    app.audit.record(
        who,
        tool,
        Instant::now(),
        Outcome::ToolError,
        0,
        Some(relayed),
    );
    let text = match (decided.decision, decided.via) {
        (Decision::NotAsked, _) => format!(
            "confirmation required: the call of {} (risk {}) must be confirmed through the \
             agent's client, and this client could not be asked (it declared no elicitation \
             capability, or on 2025-06-18 does not accept an event stream); nothing was sent. \
             To call it, issue the session with `--confirm-via person` and answer with \
             `tutti confirm allow ID` or the console",
            tool.name, tool.risk
        ),
        (Decision::Timeout, _) => format!(
            "declined: not confirmed in time (timeout): nobody confirmed the call of {} \
             within the connector's call timeout; nothing was sent",
            tool.name
        ),
        (Decision::Declined, "person") => format!(
            "declined: the person denied the call of {}; nothing was sent",
            tool.name
        ),
        (other, _) => format!(
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
    let decided = Decided::by(Decision::NotAsked, "");
    refused(&ctx.app, &ctx.identity, tool, &relayed, decided).map(|r| r.in_era(revision))
}

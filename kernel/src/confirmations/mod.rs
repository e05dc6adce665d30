//! High-risk calls held for the person's confirmation (SPEC §12, `--confirm-via person`).
//!
//! The frontend holds the call and asks [`await_decision`]; the kernel lists it (`tutti confirm
//! list`, the console) until the first answer: the person's ([`answer`]: `tutti confirm
//! allow|deny ID`, the console's Allow once / Deny) or, when the session also names the
//! agent's channel, the agent's client ([`answer_by_agent`]). No answer within the call's
//! wait → expired. A frontend that goes away (the call's client left) withdraws it. The set
//! lives in memory only: a held call never outlives the kernel. Every pending, allowed,
//! denied, expired and withdrawn confirmation is an audit record naming the channel.

mod desktop;
mod held;

pub use held::Confirmations;
use held::{Channel, Held};

use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tonic::Status;
use tutti_proto::kernel as pb;

use crate::audit::Event;
use crate::state::{Kernel, unix_ms};

/// Longest wait the frontend may ask for (a connector's `callMs` is bounded lower).
const MAX_WAIT: Duration = Duration::from_secs(24 * 60 * 60);

/// Withdraws the held call when the frontend's request goes away before it was decided.
struct Withdraw<'a> {
    k: &'a Kernel,
    id: String,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        if let Some(held) = self.k.confirmations.lock().take(&self.id) {
            audit(self.k, &held.shown, "withdrawn", None);
        }
    }
}

/// Holds the call `req` describes until it is answered or `wait_ms` passed.
pub async fn await_decision(
    k: &Kernel,
    req: pb::ConfirmationRequest,
) -> Result<pb::ConfirmationDecision, Status> {
    let wait = Duration::from_millis(req.wait_ms).min(MAX_WAIT);
    let (tx, mut rx) = oneshot::channel();
    let id = hold(k, req, wait, tx)?;
    let withdraw = Withdraw { k, id: id.clone() };
    let answer = match tokio::time::timeout(wait, &mut rx).await {
        Ok(answer) => answer.ok(),
        // Expired, unless an answer took the entry at the same moment: then its answer is
        // on its way.
        Err(_) => {
            let expired = k.confirmations.lock().take(&id);
            match expired {
                Some(held) => {
                    audit(k, &held.shown, "expired", None);
                    None
                }
                None => rx.await.ok(),
            }
        }
    };
    drop(withdraw);
    let (outcome, channel) = match answer {
        Some((true, channel)) => ("allowed", channel.as_str()),
        Some((false, channel)) => ("denied", channel.as_str()),
        None => ("expired", ""),
    };
    Ok(pb::ConfirmationDecision {
        id,
        outcome: outcome.into(),
        channel: channel.into(),
    })
}

/// Registers the call; its id.
fn hold(
    k: &Kernel,
    req: pb::ConfirmationRequest,
    wait: Duration,
    answer: oneshot::Sender<(bool, Channel)>,
) -> Result<String, Status> {
    let mut call = req.call.unwrap_or_default();
    for argument in &mut call.arguments {
        // The frontend masked secret-looking keys; values the kernel knows are masked too.
        argument.value = k.redact(&argument.value);
    }
    let mut table = k.confirmations.lock();
    if table.by_key.contains_key(&req.call_key) {
        return Err(Status::already_exists(
            "this call already waits for confirmation",
        ));
    }
    let id = loop {
        let id = new_id().map_err(|e| Status::internal(format!("random: {e}")))?;
        if !table.held.contains_key(&id) {
            break id;
        }
    };
    let shown = pb::PendingConfirmation {
        id: id.clone(),
        call: Some(call),
        remaining_ms: 0,
        asked_unix_ms: unix_ms(std::time::SystemTime::now()),
    };
    audit(k, &shown, "pending", None);
    let announced = shown.call.clone().unwrap_or_default();
    table.by_key.insert(req.call_key.clone(), id.clone());
    table.held.insert(
        id.clone(),
        Held {
            shown,
            call_key: req.call_key,
            deadline: Instant::now() + wait,
            answer,
        },
    );
    drop(table);
    desktop::announce(&announced);
    Ok(id)
}

/// Eight hex digits from the OS's randomness: short enough to type.
fn new_id() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 4];
    getrandom::fill(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The person's answer to the held call `id`.
pub fn answer(k: &Kernel, id: &str, allow: bool) -> Result<(), Status> {
    let held = k.confirmations.lock().take(id.trim());
    match held {
        Some(held) => {
            decide(k, held, allow, Channel::Person);
            Ok(())
        }
        None => Err(Status::not_found(format!(
            "no call waits for confirmation under id {id:?}: it was answered, it expired, or the \
             id is wrong; see `tutti confirm list`"
        ))),
    }
}

/// The agent's client answered the held call `call_key` (both channels); ignored once the
/// call was decided.
pub fn answer_by_agent(k: &Kernel, call_key: &str, allow: bool) {
    let held = {
        let mut table = k.confirmations.lock();
        let id = table.by_key.get(call_key).cloned();
        id.and_then(|id| table.take(&id))
    };
    if let Some(held) = held {
        decide(k, held, allow, Channel::Agent);
    }
}

fn decide(k: &Kernel, held: Held, allow: bool, channel: Channel) {
    let state = if allow { "allowed" } else { "denied" };
    audit(k, &held.shown, state, Some(channel));
    if held.answer.send((allow, channel)).is_err() {
        tracing::info!(id = %held.shown.id, "a confirmation was answered after its call went away");
    }
}

/// The held calls, oldest first, each with the time it has left.
pub fn list(k: &Kernel) -> pb::ConfirmationsReply {
    let now = Instant::now();
    let table = k.confirmations.lock();
    let mut pending: Vec<pb::PendingConfirmation> = table
        .held
        .values()
        .map(|h| pb::PendingConfirmation {
            remaining_ms: u64::try_from(h.deadline.saturating_duration_since(now).as_millis())
                .unwrap_or(u64::MAX),
            ..h.shown.clone()
        })
        .collect();
    pending.sort_by(|a, b| (a.asked_unix_ms, &a.id).cmp(&(b.asked_unix_ms, &b.id)));
    pb::ConfirmationsReply { pending }
}

fn audit(k: &Kernel, shown: &pb::PendingConfirmation, state: &str, channel: Option<Channel>) {
    let call = shown.call.clone().unwrap_or_default();
    k.audit.record(Event::Confirmation {
        id: shown.id.clone(),
        workspace: call.workspace,
        session: call.session,
        connector: call.connector,
        tool: call.tool,
        state: state.to_owned(),
        channel: channel.map(|c| c.as_str().to_owned()),
    });
}

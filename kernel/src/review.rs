//! The kernel's side of pinned definitions and of the circuit breaker (SPEC §12): `tutti
//! connector review` and `approve`, and the frontend's circuit reports. The decisions are
//! elsewhere (`release/pin.rs`, `lifecycle/`; the breaker itself is the frontend's `circuit.rs`);
//! this module is what the `Admin` and `Routes` adapters call.

use tonic::Status;
use tutti_proto::kernel as pb;

use crate::audit::Event;
use crate::circuit::CircuitSeen;
use crate::guards::not_installed;
use crate::lifecycle::{Input, Msg};
use crate::release::pin;
use crate::state::{Kernel, lock};

/// The difference between the pin and the offer that awaits review (`awaiting: false` and
/// no entries when nothing does).
pub fn review(k: &Kernel, key: &str) -> Result<pb::ReviewReply, Status> {
    let inner = lock(&k.inner);
    let installed = inner
        .registry
        .connectors
        .get(key)
        .ok_or_else(|| not_installed(key))?;
    let pinned = installed.pin.clone();
    let held = inner.conns.get(key).and_then(|c| c.life.held()).cloned();
    drop(inner);
    let mut reply = pb::ReviewReply {
        key: key.to_string(),
        pinned_hash: pinned.as_ref().map(|p| p.hash.clone()).unwrap_or_default(),
        ..Default::default()
    };
    let (Some(pinned), Some(held)) = (pinned, held) else {
        return Ok(reply);
    };
    let offered = pin::entries(&held.tools);
    let d = pin::diff(&pinned.entries, &offered);
    reply.awaiting = true;
    reply.offered_hash = held.hash;
    reply.generation = held.generation;
    let json = |e: &pin::Entry| e.definition.text().to_owned();
    let entry = |change: &str, e: &pin::Entry, pinned_json, offered_json| pb::ReviewEntry {
        change: change.into(),
        kind: e.kind.clone(),
        name: e.name.clone(),
        pinned_json,
        offered_json,
    };
    for (old, new) in &d.changed {
        reply
            .entries
            .push(entry("changed", new, json(old), json(new)));
    }
    for e in &d.added {
        reply
            .entries
            .push(entry("added", e, String::new(), json(e)));
    }
    for e in &d.removed {
        reply
            .entries
            .push(entry("removed", e, json(e), String::new()));
    }
    // Upstream text: a stored secret an upstream echoes is masked here too.
    let redact = k.redactor();
    for e in &mut reply.entries {
        e.pinned_json = redact(&e.pinned_json);
        e.offered_json = redact(&e.offered_json);
    }
    Ok(reply)
}

/// Commits the held offer of `key` and pins it (the connector's actor decides).
pub async fn approve(k: &Kernel, key: &str, expected: Option<String>) -> Result<(), Status> {
    let _turn = k.admin.lock().await;
    let actor = {
        let inner = lock(&k.inner);
        if !inner.registry.connectors.contains_key(key) {
            return Err(not_installed(key));
        }
        inner.actors.get(key).cloned()
    };
    let (reply, answer) = tokio::sync::oneshot::channel();
    let sent = actor.is_some_and(|a| {
        a.send(Msg {
            input: Input::Approve { expected },
            reply: Some(reply),
        })
        .is_ok()
    });
    if !sent {
        return Err(Status::failed_precondition(format!(
            "connector {key} is not running; start it with `tutti up`"
        )));
    }
    match answer.await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(Status::failed_precondition(e)),
        Err(_) => Err(Status::unavailable(format!("connector {key} stopped"))),
    }
}

/// The frontend's breaker of a connector changed state: kept for `status`, written to the
/// audit log.
pub fn report_circuit(k: &Kernel, report: pb::CircuitReport) {
    let mut inner = lock(&k.inner);
    let Some(conn) = inner.conns.get_mut(&report.key) else {
        return;
    };
    let reason = k.redact(&report.reason);
    tracing::warn!(key = %report.key, state = %report.state, failures = report.failures, %reason, "circuit");
    k.audit.record(Event::Circuit {
        connector: report.key.clone(),
        state: report.state.clone(),
        failures: report.failures,
        reason: reason.clone(),
    });
    let retry_at_unix_ms = crate::state::unix_ms(std::time::SystemTime::now())
        .saturating_add(i64::try_from(report.retry_in_ms).unwrap_or(i64::MAX));
    conn.circuit = (report.state != "closed").then_some(CircuitSeen {
        state: report.state,
        failures: report.failures,
        retry_at_unix_ms,
    });
}

/// The frontend is gone, and its breakers with it: the next one starts every circuit closed.
pub fn forget_circuits(k: &Kernel) {
    let mut inner = lock(&k.inner);
    for (key, conn) in &mut inner.conns {
        if let Some(seen) = conn.circuit.take() {
            k.audit.record(Event::Circuit {
                connector: key.clone(),
                state: "closed".into(),
                failures: seen.failures,
                reason: "the frontend restarted; its breakers start closed".into(),
            });
        }
    }
}

//! What the frontend reports of each call: a line in the audit log (names and outcomes only,
//! never argument or result values), the call figures, and the records and spans it dropped.

use tutti_proto::kernel as pb;

use crate::audit::Event;
use crate::state::Kernel;

/// Records one call the frontend made.
pub fn record(k: &Kernel, record: pb::CallRecord) {
    k.audit.note_frontend_dropped(record.dropped_total);
    k.telemetry_drops
        .note_frontend(record.telemetry_dropped_total);
    k.figures
        .record(&record.connector, record.duration_us, &record.outcome);
    k.audit.record(Event::Call {
        call_time: record.time_unix_ms,
        workspace: record.workspace,
        session: record.session,
        tool: record.tool,
        connector: record.connector,
        generation: record.generation,
        risk: record.risk,
        duration_us: record.duration_us,
        outcome: record.outcome,
        error_code: (record.error_code != 0).then_some(record.error_code),
        kind: match record.kind.as_str() {
            "" | "tool" => None,
            kind => Some(kind.to_owned()),
        },
        relayed: record.relayed,
        confirmation: (!record.confirmation.is_empty()).then_some(record.confirmation),
        confirmed_via: (!record.confirmed_via.is_empty()).then_some(record.confirmed_via),
    });
}

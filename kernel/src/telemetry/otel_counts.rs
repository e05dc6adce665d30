//! The kernel's event counters for OpenTelemetry (`tutti.fences`, `tutti.commits`, by
//! connector), fed by `audit.rs` as it queues the `fence` and `commit` records (so the metric
//! and the audit log cannot disagree). A leaf module: `otel.rs` creates the counters when
//! export is on; until then (and always with export off) counting is a no-op.

use std::sync::OnceLock;

use tutti_telemetry::opentelemetry::KeyValue;
use tutti_telemetry::opentelemetry::metrics::{Counter, Meter};

/// The attribute naming a connector (the same as the frontend's and the worker's).
pub const CONNECTOR: &str = "tutti.connector";

struct Counters {
    fences: Counter<u64>,
    commits: Counter<u64>,
}

static COUNTERS: OnceLock<Counters> = OnceLock::new();

/// Creates the counters on `meter` (once).
pub fn init(meter: &Meter) {
    let _ = COUNTERS.get_or_init(|| Counters {
        fences: meter
            .u64_counter("tutti.fences")
            .with_description("generations fenced (left the route table), by connector")
            .build(),
        commits: meter
            .u64_counter("tutti.commits")
            .with_description("generations committed (made live), by connector")
            .build(),
    });
}

/// One generation of `connector` fenced.
pub fn fence(connector: &str) {
    if let Some(c) = COUNTERS.get() {
        c.fences
            .add(1, &[KeyValue::new(CONNECTOR, connector.to_owned())]);
    }
}

/// One generation of `connector` committed.
pub fn commit(connector: &str) {
    if let Some(c) = COUNTERS.get() {
        c.commits
            .add(1, &[KeyValue::new(CONNECTOR, connector.to_owned())]);
    }
}

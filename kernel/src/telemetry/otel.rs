//! The kernel's OpenTelemetry metrics (SPEC §14: restarts, fences, commits, open circuits,
//! live sessions, audit drops), through `tutti_telemetry` (metrics only; on only with
//! `OTEL_EXPORTER_OTLP_*`, else every function here is a no-op and nothing is built).
//!
//! - `tutti.worker.restarts` (counter, by connector): worker exits the kernel restarted after,
//!   as `tutti status` counts them (read at each export).
//! - `tutti.fences`, `tutti.commits` (counters, by connector): generations that left the route
//!   table and generations that became live, counted as their audit records are queued
//!   (`otel_counts.rs`).
//! - `tutti.circuits.open` (gauge, by connector): 1 while the frontend's breaker for the
//!   connector is not closed (open, or half-open waiting for its trial call), else 0.
//! - `tutti.sessions.live` (gauge): session tokens that verify now.
//! - `tutti.audit.dropped` (counter): audit records dropped (`auditDropped` of `status`).
//! - `tutti.telemetry.dropped` (counter): spans the frontend (no attribute) and each
//!   connector's workers (by connector) dropped from their export queues
//!   (`telemetryDropped` of `status`).
//!
//! Attributes are connector keys only: never a session name, token or secret. The observed
//! values are read by the export loop (a task of the kernel's runtime) at each export
//! (`OTEL_METRIC_EXPORT_INTERVAL`), under the same short locks `Status` takes; nothing here
//! runs on a call's path.

use std::sync::{Arc, OnceLock, Weak};

use tutti_telemetry::{self as telemetry, opentelemetry};

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Meter, ObservableCounter, ObservableGauge};

use crate::state::{Kernel, lock};
use crate::telemetry::otel_counts::CONNECTOR;

/// Restarts, open circuits, live sessions, audit drops, telemetry drops: kept alive with the
/// process (their callbacks read the kernel).
type Observed = (
    ObservableCounter<u64>,
    ObservableGauge<u64>,
    ObservableGauge<u64>,
    ObservableCounter<u64>,
    ObservableCounter<u64>,
);

static OBSERVED: OnceLock<Observed> = OnceLock::new();

/// The export loop on the kernel's runtime, with export on (see `tutti_telemetry`).
pub struct Export(Option<tokio::task::JoinHandle<()>>);

/// The last export as the kernel stops, bounded by `telemetry::SHUTDOWN_BUDGET`.
pub async fn finish_export(export: Export) {
    if let (Some(t), Some(export)) = (telemetry::get(), export.0) {
        t.shutdown(export).await;
    }
}

/// Registers the kernel's metrics with `k` as the source of the observed ones and starts
/// the export loop as a task of the kernel's runtime (nothing with export off). The
/// callbacks hold `k` weakly: a stopped kernel reports nothing more.
pub fn observe(k: &Arc<Kernel>) -> Export {
    let Some(t) = telemetry::get() else {
        return Export(None);
    };
    crate::telemetry::otel_counts::init(&t.meter);
    let weak = Arc::downgrade(k);
    let _ = OBSERVED.get_or_init(|| {
        let (restarts, circuits, sessions, audit) = observed(&t.meter, &weak);
        (
            restarts,
            circuits,
            sessions,
            audit,
            telemetry_dropped(&t.meter, weak.clone()),
        )
    });
    Export(Some(tokio::spawn(t.exporting())))
}

fn telemetry_dropped(meter: &Meter, k: Weak<Kernel>) -> ObservableCounter<u64> {
    meter
        .u64_observable_counter("tutti.telemetry.dropped")
        .with_description(
            "spans dropped because an OpenTelemetry export queue was full (frontend: no attribute)",
        )
        .with_callback(move |o| {
            if let Some(k) = k.upgrade() {
                o.observe(k.telemetry_drops.frontend(), &[]);
                for (key, n) in k.telemetry_drops.workers() {
                    o.observe(n, &[KeyValue::new(CONNECTOR, key)]);
                }
            }
        })
        .build()
}

fn observed(
    meter: &Meter,
    k: &Weak<Kernel>,
) -> (
    ObservableCounter<u64>,
    ObservableGauge<u64>,
    ObservableGauge<u64>,
    ObservableCounter<u64>,
) {
    let (restarts, circuits, sessions, dropped) = (k.clone(), k.clone(), k.clone(), k.clone());
    (
        meter
            .u64_observable_counter("tutti.worker.restarts")
            .with_description("worker exits followed by a restart, by connector")
            .with_callback(move |o| {
                for (key, n) in per_connector(&restarts, |c| u64::from(c.life.restarts())) {
                    o.observe(n, &[KeyValue::new(CONNECTOR, key)]);
                }
            })
            .build(),
        meter
            .u64_observable_gauge("tutti.circuits.open")
            .with_description("1 while a connector's circuit breaker is not closed")
            .with_callback(move |o| {
                for (key, n) in per_connector(&circuits, |c| u64::from(c.circuit.is_some())) {
                    o.observe(n, &[KeyValue::new(CONNECTOR, key)]);
                }
            })
            .build(),
        meter
            .u64_observable_gauge("tutti.sessions.live")
            .with_description("session tokens that verify now")
            .with_callback(move |o| {
                if let Some(k) = sessions.upgrade() {
                    o.observe(lock(&k.tokens).live() as u64, &[]);
                }
            })
            .build(),
        meter
            .u64_observable_counter("tutti.audit.dropped")
            .with_description("audit records dropped (queue full or write failed)")
            .with_callback(move |o| {
                if let Some(k) = dropped.upgrade() {
                    o.observe(k.audit.dropped(), &[]);
                }
            })
            .build(),
    )
}

/// `(key, value)` for every connector the kernel tracks, under one short lock.
fn per_connector(
    k: &Weak<Kernel>,
    value: impl Fn(&crate::state::ConnState) -> u64,
) -> Vec<(String, u64)> {
    let Some(k) = k.upgrade() else {
        return Vec::new();
    };
    let inner = lock(&k.inner);
    inner
        .conns
        .iter()
        .map(|(key, c)| (key.clone(), value(c)))
        .collect()
}

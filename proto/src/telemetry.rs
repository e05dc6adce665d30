//! OpenTelemetry export (SPEC §14), for the frontend and the workers (feature `otel`).
//!
//! On only when the standard variables name an OTLP endpoint
//! (`OTEL_EXPORTER_OTLP_ENDPOINT`, or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` /
//! `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`); otherwise nothing is built and nothing is sent.
//! Export is OTLP/HTTP protobuf: spans through our own bounded queue (`queue.rs`: a full
//! queue drops and counts, [`dropped`], it never waits), metrics from the SDK's periodic
//! reader, each on its own thread, so a call only ever hands a finished span over. The other
//! `OTEL_*` variables (`…_HEADERS`, `…_TIMEOUT`, `OTEL_BSP_*`, `OTEL_METRIC_EXPORT_INTERVAL`,
//! `OTEL_RESOURCE_ATTRIBUTES`) work as the SDK documents them. At exit the exporters get
//! [`SHUTDOWN_BUDGET`], never an export timeout.

mod queue;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

pub use opentelemetry;
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Meter, MeterProvider as _};
use opentelemetry::trace::{
    SpanContext, SpanId, TraceFlags, TraceId, TraceState, TracerProvider as _,
};
use opentelemetry_otlp::{MetricExporter, Protocol, SpanExporter, WithExportConfig as _};
pub use opentelemetry_sdk;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

pub use queue::QueueConfig;

/// How long a process waits at exit for its last export: a receiver that does not answer
/// must not hold up `tutti down` (each export would otherwise wait `OTEL_EXPORTER_OTLP_TIMEOUT`,
/// 10 s, and the SDK's metric reader 5 s more).
pub const SHUTDOWN_BUDGET: Duration = Duration::from_secs(1);

/// The variables that turn export on (any one of them, not empty).
pub const ENDPOINT_VARS: [&str; 3] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
];

/// A process's exporters, tracer and meter.
pub struct Telemetry {
    pub tracer: SdkTracer,
    pub meter: Meter,
    tracer_provider: SdkTracerProvider,
    meter_provider: SdkMeterProvider,
    dropped: Arc<AtomicU64>,
}

static GLOBAL: OnceLock<Option<Telemetry>> = OnceLock::new();

/// Whether the environment asks for export.
pub fn enabled_by_env() -> bool {
    ENDPOINT_VARS
        .iter()
        .any(|v| std::env::var(v).is_ok_and(|s| !s.trim().is_empty()))
}

/// Sets up export for this process once (`service`: the binary's name, `role`: its part in
/// the runtime, both resource attributes). `None`, and nothing built, without the variables
/// or when an exporter cannot be built (logged once).
pub fn init(service: &'static str, role: &'static str) -> Option<&'static Telemetry> {
    init_with(service, role, Signals::TracesAndMetrics)
}

/// What a process exports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signals {
    /// Spans and metrics (the frontend, the workers).
    TracesAndMetrics,
    /// Metrics only (the kernel has no span of its own): no span exporter, no batch thread.
    Metrics,
}

/// [`init`], choosing the signals: with [`Signals::Metrics`] the tracer is a no-op one and
/// neither a span exporter nor its thread is built.
pub fn init_with(
    service: &'static str,
    role: &'static str,
    signals: Signals,
) -> Option<&'static Telemetry> {
    GLOBAL
        .get_or_init(|| {
            if !enabled_by_env() {
                return None;
            }
            match build(service, role, signals) {
                Ok(t) => Some(t),
                Err(e) => {
                    tracing::warn!(error = %e, "OpenTelemetry export is off: cannot build the OTLP exporter");
                    None
                }
            }
        })
        .as_ref()
}

/// The process's telemetry, if [`init`] turned it on.
pub fn get() -> Option<&'static Telemetry> {
    GLOBAL.get().and_then(Option::as_ref)
}

/// Spans this process dropped because its export queue was full (0 with export off).
pub fn dropped() -> u64 {
    get().map_or(0, Telemetry::dropped_spans)
}

fn build(service: &'static str, role: &'static str, signals: Signals) -> Result<Telemetry, String> {
    let resource = Resource::builder()
        .with_service_name(service)
        .with_attributes([
            KeyValue::new("tutti.process.role", role),
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
        ])
        .build();
    let metrics = MetricExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .build()
        .map_err(|e| e.to_string())?;
    let dropped = Arc::new(AtomicU64::new(0));
    let mut tracer_provider = SdkTracerProvider::builder().with_resource(resource.clone());
    if signals == Signals::TracesAndMetrics {
        let spans = SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .build()
            .map_err(|e| e.to_string())?;
        let queue =
            queue::DroppingBatchProcessor::start(spans, QueueConfig::from_env(), dropped.clone())
                .map_err(|e| format!("cannot start the span export thread: {e}"))?;
        tracer_provider = tracer_provider.with_span_processor(queue);
    }
    let tracer_provider = tracer_provider.build();
    let meter_provider = SdkMeterProvider::builder()
        .with_periodic_exporter(metrics)
        .with_resource(resource)
        .build();
    Ok(Telemetry {
        tracer: tracer_provider.tracer(service),
        meter: meter_provider.meter(service),
        tracer_provider,
        meter_provider,
        dropped,
    })
}

impl Telemetry {
    /// Exports what is queued and stops the exporters (at process exit), waiting at most
    /// [`SHUTDOWN_BUDGET`]: the SDK's metric reader waits up to 5 s for its last export
    /// whatever timeout it is given, so both shutdowns run on a thread of their own and are
    /// left behind (the process is exiting) when the budget runs out.
    pub fn shutdown(&'static self) {
        let (done, finished) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("tutti-otel-shutdown".into())
            .spawn(move || {
                let _ = self.tracer_provider.shutdown_with_timeout(SHUTDOWN_BUDGET);
                let _ = self.meter_provider.shutdown_with_timeout(SHUTDOWN_BUDGET);
                let _ = done.send(());
            });
        if spawned.is_ok() && finished.recv_timeout(SHUTDOWN_BUDGET).is_err() {
            tracing::warn!(
                budget = ?SHUTDOWN_BUDGET,
                dropped_spans = self.dropped_spans(),
                "OpenTelemetry export did not finish at exit (receiver slow or unreachable); exiting without it"
            );
        }
    }

    /// Spans dropped because the export queue was full, since the process started.
    pub fn dropped_spans(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// The W3C `traceparent` of a span context: `00-<trace id>-<span id>-<flags>`.
pub fn traceparent(cx: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        cx.trace_id(),
        cx.span_id(),
        cx.trace_flags().to_u8()
    )
}

/// A remote span context from a W3C `traceparent` (version 00); `None` when malformed.
pub fn parse_traceparent(value: &str) -> Option<SpanContext> {
    let mut parts = value.trim().split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if version != "00"
        || parts.next().is_some()
        || trace.len() != 32
        || span.len() != 16
        || flags.len() != 2
    {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok()?;
    let span_id = SpanId::from_hex(span).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    if trace_id == TraceId::INVALID || span_id == SpanId::INVALID {
        return None;
    }
    Some(SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags),
        true,
        TraceState::default(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_round_trips_and_malformed_ones_are_refused() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let cx = parse_traceparent(tp);
        assert_eq!(cx.as_ref().map(traceparent).as_deref(), Some(tp));
        assert!(cx.is_some_and(|c| c.is_remote() && c.is_sampled()));
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-zz-00f067aa0ba902b7-01",
        ] {
            assert!(parse_traceparent(bad).is_none(), "{bad}");
        }
    }
}

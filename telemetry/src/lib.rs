//! OpenTelemetry export (SPEC §14), for the frontend, the workers and the kernel (feature
//! `otel`).
//!
//! On only when the standard variables name an OTLP endpoint
//! (`OTEL_EXPORTER_OTLP_ENDPOINT`, or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` /
//! `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`); otherwise nothing is built and nothing is sent.
//! Export is OTLP/HTTP protobuf: spans through our own bounded queue (`queue.rs`: a full
//! queue drops and counts, [`dropped`], it never waits), metrics from a manual reader
//! collected on the export interval. The other `OTEL_*` variables (`…_HEADERS`, `…_TIMEOUT`,
//! `OTEL_BSP_*`, `OTEL_METRIC_EXPORT_INTERVAL`, `OTEL_RESOURCE_ATTRIBUTES`) work as the SDK
//! documents them.
//!
//! **No thread of its own.** The export loop ([`Telemetry::exporting`]) is a task on the
//! process's single-threaded runtime, with an async HTTP client. The SDK's way (a thread for
//! the batch span processor, one for the periodic metric reader, two inside the blocking HTTP
//! client) made the frontend and every worker multi-threaded processes: ~1.1–1.3 MiB more
//! resident in each with export on, and every call paying for a multi-threaded process
//! (locked allocator paths, shared file tables). Measured without the threads
//! (docs/PERFORMANCE.md): the memory is saved; the per-call latency with export
//! on did not measurably change. The price: an export's encoding runs between calls on the
//! call's thread (once per batch of 512 spans or per metric interval). At exit the last
//! export gets [`SHUTDOWN_BUDGET`], never an export timeout.

#![forbid(unsafe_code)]

mod health;
mod queue;
mod unchanged;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
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
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter as _;
use opentelemetry_sdk::metrics::reader::MetricReader;
use opentelemetry_sdk::metrics::{
    InstrumentKind, ManualReader, Pipeline, SdkMeterProvider, Temporality,
};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, SpanExporter as _};
use tokio::sync::watch;

pub use queue::QueueConfig;

/// How long a process waits at exit for its last export: a receiver that does not answer
/// must not hold up `tutti down` (each export would otherwise wait `OTEL_EXPORTER_OTLP_TIMEOUT`,
/// 10 s).
pub const SHUTDOWN_BUDGET: Duration = Duration::from_secs(1);

/// The variables that turn export on (any one of them, not empty); the kernel passes them on
/// with the rest of its `OTEL_*` list ([`tutti_rules::child_env::OTEL`]).
pub use tutti_rules::child_env::OTEL_ENDPOINTS as ENDPOINT_VARS;

/// The metric export interval when `OTEL_METRIC_EXPORT_INTERVAL` (ms) is unset (the SDK's).
const METRIC_INTERVAL_DEFAULT: Duration = Duration::from_secs(60);

/// A process's exporters, tracer and meter.
pub struct Telemetry {
    pub tracer: SdkTracer,
    pub meter: Meter,
    tracer_provider: SdkTracerProvider,
    meter_provider: SdkMeterProvider,
    dropped: Arc<AtomicU64>,
    /// The span queue (`None` with [`Signals::Metrics`]), for [`Telemetry::admit_span`].
    span_queue: Option<Arc<queue::SpanQueue>>,
    /// What the export loop needs; taken by the first [`Telemetry::exporting`].
    exporters: Mutex<Option<Exporters>>,
    /// `true`: the export loop runs its last export and ends.
    stop: watch::Sender<bool>,
}

/// The export loop's parts, built with the providers.
struct Exporters {
    spans: Option<(Arc<queue::SpanQueue>, SpanExporter)>,
    metrics: MetricExporter,
    reader: SharedReader,
    interval: Duration,
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
/// or when an exporter cannot be built (logged once). Nothing is sent until the process
/// runs [`Telemetry::exporting`] on its runtime.
pub fn init(service: &'static str, role: &'static str) -> Option<&'static Telemetry> {
    init_with(service, role, Signals::TracesAndMetrics)
}

/// What a process exports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signals {
    /// Spans and metrics (the frontend, the workers).
    TracesAndMetrics,
    /// Metrics only (the kernel has no span of its own): no span exporter, no span queue.
    Metrics,
}

/// [`init`], choosing the signals: with [`Signals::Metrics`] the tracer is a no-op one and
/// no span exporter is built.
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

/// Why export could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error(
        "cannot build the OTLP {signal} exporter ({source}); check the OTEL_EXPORTER_OTLP_* variables"
    )]
    Exporter {
        signal: &'static str,
        source: opentelemetry_otlp::ExporterBuildError,
    },
}

fn build(
    service: &'static str,
    role: &'static str,
    signals: Signals,
) -> Result<Telemetry, TelemetryError> {
    let resource = Resource::builder()
        .with_service_name(service)
        .with_attributes([
            KeyValue::new("tutti.process.role", role),
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
        ])
        .build();
    // The async HTTP client (feature `reqwest-client`): its connections are tasks on the
    // runtime that awaits the export, so no thread is started for it.
    let metrics = MetricExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .build()
        .map_err(|source| TelemetryError::Exporter {
            signal: "metric",
            source,
        })?;
    let dropped = Arc::new(AtomicU64::new(0));
    let mut tracer_provider = SdkTracerProvider::builder().with_resource(resource.clone());
    let mut spans = None;
    if signals == Signals::TracesAndMetrics {
        let mut exporter = SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .build()
            .map_err(|source| TelemetryError::Exporter {
                signal: "span",
                source,
            })?;
        exporter.set_resource(&resource);
        let queue = queue::SpanQueue::new(QueueConfig::from_env(), dropped.clone());
        tracer_provider = tracer_provider.with_span_processor(queue::QueueProcessor(queue.clone()));
        spans = Some((queue, exporter));
    }
    let tracer_provider = tracer_provider.build();
    let reader = SharedReader(Arc::new(
        ManualReader::builder()
            .with_temporality(metrics.temporality())
            .build(),
    ));
    let meter_provider = SdkMeterProvider::builder()
        .with_reader(reader.clone())
        .with_resource(resource)
        .build();
    let interval = std::env::var("OTEL_METRIC_EXPORT_INTERVAL")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map_or(METRIC_INTERVAL_DEFAULT, Duration::from_millis);
    Ok(Telemetry {
        span_queue: spans.as_ref().map(|(queue, _)| queue.clone()),
        tracer: tracer_provider.tracer(service),
        meter: meter_provider.meter(service),
        tracer_provider,
        meter_provider,
        dropped,
        exporters: Mutex::new(Some(Exporters {
            spans,
            metrics,
            reader,
            interval,
        })),
        stop: watch::channel(false).0,
    })
}

impl Telemetry {
    /// The export loop, to be spawned on the process's own runtime (`tokio::spawn`): spans
    /// as their queue fills or its delay passes, metrics every export interval, until
    /// [`Telemetry::shutdown`]; then one last export of each. A second call returns at once.
    pub fn exporting(&'static self) -> impl Future<Output = ()> + Send + 'static {
        let parts = self
            .exporters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let stop = self.stop.subscribe();
        async move {
            let Some(parts) = parts else {
                return;
            };
            let spans = async {
                if let Some((queue, exporter)) = parts.spans {
                    queue::export_spans(queue, exporter, stop.clone()).await;
                }
            };
            let metrics = export_metrics(parts.reader, parts.metrics, parts.interval, stop.clone());
            tokio::join!(spans, metrics);
        }
    }

    /// At exit, on the runtime that runs `export` (the spawned [`Telemetry::exporting`]):
    /// asks for the last export and waits for it at most [`SHUTDOWN_BUDGET`], then shuts the
    /// providers down (spans ended after that are not exported).
    pub async fn shutdown(&'static self, export: tokio::task::JoinHandle<()>) {
        let _ = self.stop.send(true);
        if tokio::time::timeout(SHUTDOWN_BUDGET, export).await.is_err() {
            tracing::warn!(
                budget = ?SHUTDOWN_BUDGET,
                dropped_spans = self.dropped_spans(),
                "OpenTelemetry export did not finish at exit (receiver slow or unreachable); exiting without it"
            );
        }
        let _ = self.tracer_provider.shutdown_with_timeout(SHUTDOWN_BUDGET);
        let _ = self.meter_provider.shutdown_with_timeout(SHUTDOWN_BUDGET);
    }

    /// Whether to build a span for a call starting now: `false` while the span queue is full
    /// (the receiver does not take spans), counting that span as dropped, so a call skips
    /// the work of a span that would be thrown away (and its `traceparent`: a trace whose
    /// spans are not exported). Checked before starting a span.
    pub fn admit_span(&self) -> bool {
        self.span_queue.as_ref().is_some_and(|q| q.admit())
    }

    /// Spans dropped because the export queue was full, since the process started.
    pub fn dropped_spans(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Resolves once more spans were dropped since it last resolved (never without a span
    /// queue), for the one task that reports [`Telemetry::dropped_spans`]: no polling.
    pub async fn spans_dropped(&self) {
        match &self.span_queue {
            Some(q) => q.dropped_more().await,
            None => std::future::pending().await,
        }
    }
}

/// The metric export loop: collect and export every `interval` until `stop`, then once more;
/// points that only repeat the last export's are skipped a few intervals in a row
/// (`unchanged.rs`), so an idle process rarely exports. An export in flight when `stop` comes
/// is abandoned for the last one.
async fn export_metrics(
    reader: SharedReader,
    exporter: MetricExporter,
    interval: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut metrics = ResourceMetrics::default();
    let mut health = health::ExportHealth::new("metrics");
    let mut pacing = unchanged::ExportPacing::default();
    let mut next = tokio::time::Instant::now() + interval;
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(next) => {}
            _ = stop.wait_for(|s| *s) => break,
        }
        next = tokio::time::Instant::now() + interval;
        if reader.collect(&mut metrics).is_ok() && pacing.worth_exporting(&metrics) {
            tokio::select! {
                result = exporter.export(&metrics) => {
                    pacing.exported(&metrics, result.is_ok());
                    health.note(&result);
                }
                _ = stop.wait_for(|s| *s) => break,
            }
        }
    }
    if reader.collect(&mut metrics).is_ok() {
        let _ = exporter.export(&metrics).await;
    }
    let _ = exporter.shutdown();
}

/// The manual reader, shared between the meter provider (which owns its reader) and the
/// export loop (which collects from it).
#[derive(Clone, Debug)]
struct SharedReader(Arc<ManualReader>);

impl MetricReader for SharedReader {
    fn register_pipeline(&self, pipeline: Weak<Pipeline>) {
        self.0.register_pipeline(pipeline);
    }

    fn collect(&self, rm: &mut ResourceMetrics) -> OTelSdkResult {
        self.0.collect(rm)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn temporality(&self, kind: InstrumentKind) -> Temporality {
        self.0.temporality(kind)
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

//! The worker's OpenTelemetry span per tools/call (SPEC §14, through
//! `tutti_telemetry`; on only with `OTEL_EXPORTER_OTLP_*`): a child of the frontend's
//! span named by the request's `_meta.traceparent`, and the upstream request's
//! `_meta.traceparent` then names this span (same trace). With export off the `_meta` goes on
//! unchanged. Attributes are names only (connector key, upstream tool name, outcome).
//! Spans the export queue dropped are reported to the kernel (`report_drops`).

use std::time::Duration;

use rmcp::model::JsonObject;
use tutti_proto::kernel::WorkerReportKind;
use tutti_telemetry::{self as telemetry, opentelemetry, opentelemetry_sdk};

use opentelemetry::trace::{Span as _, SpanKind, TraceContextExt as _, Tracer as _};
use opentelemetry::{Context, KeyValue};

use crate::control::KernelLink;

/// At most one drop report per this long (later drops are folded into the next one).
const DROPS_EVERY: Duration = Duration::from_secs(1);

/// Starts [`report_drops`] when export is on.
pub(crate) fn spawn_drop_reports(kernel: &KernelLink) {
    if let Some(t) = telemetry::get() {
        tokio::spawn(report_drops(t, kernel.clone()));
    }
}

/// Reports the running total of spans dropped from the export queue whenever it grew, at
/// most once per [`DROPS_EVERY`]; it waits for a drop, so an idle worker never wakes for it
/// (spawned only with export on; ends with the worker).
async fn report_drops(t: &'static telemetry::Telemetry, kernel: KernelLink) {
    let mut reported = 0;
    loop {
        t.spans_dropped().await;
        tokio::time::sleep(DROPS_EVERY).await;
        let total = t.dropped_spans();
        if total != reported {
            let message =
                format!("{total} span(s) dropped: the OpenTelemetry export queue was full");
            kernel
                .report(WorkerReportKind::TelemetryDropped, &message, total)
                .await;
            reported = total;
        }
    }
}

/// The `_meta` key of the W3C trace context.
const TRACEPARENT: &str = "traceparent";

pub(crate) struct CallSpan(opentelemetry_sdk::trace::Span);

/// Starts the span of a call to `tool` and puts its `traceparent` in `meta`. With export off,
/// or while the span queue is full (the span counted as dropped: `Telemetry::admit_span`),
/// `meta` goes on unchanged: the frontend's `traceparent`, if any, still reaches the upstream.
pub(crate) fn start(
    meta: Option<JsonObject>,
    key: &str,
    tool: &str,
) -> (Option<JsonObject>, Option<CallSpan>) {
    let Some(t) = telemetry::get().filter(|t| t.admit_span()) else {
        return (meta, None);
    };
    let parent = meta
        .as_ref()
        .and_then(|m| m.get(TRACEPARENT))
        .and_then(|v| v.as_str())
        .and_then(telemetry::parse_traceparent)
        .map_or_else(Context::new, |cx| {
            Context::new().with_remote_span_context(cx)
        });
    let span = t
        .tracer
        .span_builder("tools/call upstream")
        .with_kind(SpanKind::Client)
        .with_attributes([
            KeyValue::new("tutti.connector", key.to_owned()),
            KeyValue::new("mcp.tool.name", tool.to_owned()),
        ])
        .start_with_context(&t.tracer, &parent);
    let mut meta = meta.unwrap_or_default();
    meta.insert(
        TRACEPARENT.to_owned(),
        telemetry::traceparent(span.span_context()).into(),
    );
    (Some(meta), Some(CallSpan(span)))
}

impl CallSpan {
    pub(crate) fn finish(mut self, outcome: &'static str) {
        self.0
            .set_attribute(KeyValue::new("tutti.outcome", outcome));
        if outcome != "ok" {
            self.0
                .set_status(opentelemetry::trace::Status::error(outcome));
        }
        self.0.end();
    }
}

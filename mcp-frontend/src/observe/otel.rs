//! The frontend's OpenTelemetry span and metrics per tools/call (SPEC §14), through
//! `tutti_telemetry` (on only with `OTEL_EXPORTER_OTLP_*`). The span's W3C context
//! travels to the worker in `CallToolRequest.meta_json` (`{"traceparent": …}`), where the
//! worker's span becomes its child and the upstream request's `_meta.traceparent` names that.
//! Attributes are names only: connector key, local tool name, outcome; never arguments,
//! results, tokens or secrets.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tutti_telemetry::{self as telemetry, opentelemetry, opentelemetry_sdk};

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram};
use opentelemetry::trace::{Span as _, SpanKind, Tracer as _};

/// A tool's names as span and metric attributes (connector key, local tool name), built once
/// when the tool is projected at commit time, and only with export on: a call clones two
/// reference counts, not two strings.
pub(crate) struct ToolNames(Option<[KeyValue; 2]>);

impl ToolNames {
    pub(crate) fn new(key: &str, tool: &str) -> ToolNames {
        ToolNames(telemetry::get().map(|_| {
            [
                KeyValue::new("tutti.connector", Arc::<str>::from(key)),
                KeyValue::new("mcp.tool.name", Arc::<str>::from(tool)),
            ]
        }))
    }
}

/// The span of one call, started before the worker is asked.
pub(crate) struct CallSpan {
    span: opentelemetry_sdk::trace::Span,
    traceparent: String,
}

/// Starts the call's span, when export is on and the span queue has room (a full queue
/// counts the span as dropped instead: `Telemetry::admit_span`).
pub(crate) fn start(names: &ToolNames) -> Option<CallSpan> {
    let names = names.0.as_ref()?;
    let t = telemetry::get().filter(|t| t.admit_span())?;
    let span = t
        .tracer
        .span_builder("tools/call")
        .with_kind(SpanKind::Server)
        .with_attributes([
            names[0].clone(),
            names[1].clone(),
            KeyValue::new("mcp.method.name", "tools/call"),
        ])
        .start(&t.tracer);
    let traceparent = telemetry::traceparent(span.span_context());
    Some(CallSpan { span, traceparent })
}

impl CallSpan {
    /// `_meta` for the worker request: the span's `traceparent`.
    pub(crate) fn meta_json(&self) -> String {
        // `traceparent` is lowercase hex and dashes (`telemetry::traceparent`): nothing to escape.
        format!(r#"{{"traceparent":"{}"}}"#, self.traceparent)
    }

    /// Ends the span with the call's outcome (`audit::Outcome::as_str`; this module sits below `audit`).
    pub(crate) fn finish(mut self, outcome: &'static str) {
        self.span
            .set_attribute(KeyValue::new("tutti.outcome", outcome));
        if outcome != "ok" {
            self.span
                .set_status(opentelemetry::trace::Status::error(outcome));
        }
        self.span.end();
    }
}

struct Instruments {
    calls: Counter<u64>,
    errors: Counter<u64>,
    duration: Histogram<f64>,
}

fn instruments() -> Option<&'static Instruments> {
    static INSTRUMENTS: OnceLock<Option<Instruments>> = OnceLock::new();
    INSTRUMENTS
        .get_or_init(|| {
            let m = &telemetry::get()?.meter;
            Some(Instruments {
                calls: m
                    .u64_counter("tutti.calls")
                    .with_description("tools/call answered, by connector, tool and outcome")
                    .build(),
                errors: m
                    .u64_counter("tutti.call.errors")
                    .with_description("tools/call whose outcome was not ok")
                    .build(),
                duration: m
                    .f64_histogram("tutti.call.duration")
                    .with_unit("s")
                    .with_description("tools/call latency at the frontend")
                    .build(),
            })
        })
        .as_ref()
}

/// Spans dropped from the export queue so far (0 with export off).
pub(crate) fn dropped() -> u64 {
    telemetry::dropped()
}

/// Counts one finished call in the metrics (a no-op with export off).
pub(crate) fn record(names: &ToolNames, elapsed: Duration, outcome: &'static str) {
    let (Some(i), Some(names)) = (instruments(), names.0.as_ref()) else {
        return;
    };
    let with_outcome = [
        names[0].clone(),
        names[1].clone(),
        KeyValue::new("tutti.outcome", outcome),
    ];
    i.calls.add(1, &with_outcome);
    if outcome != "ok" {
        i.errors.add(1, &with_outcome);
    }
    i.duration.record(elapsed.as_secs_f64(), names);
}

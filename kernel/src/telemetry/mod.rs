//! Telemetry: the OpenTelemetry export of the kernel's own counters (`otel`, `otel_counts`,
//! each with a no-op twin when the `otel` feature is off), the spans other processes dropped
//! (`drops`) and the per-connector call figures `tutti status` shows (`figures`).

pub(crate) mod drops;
pub(crate) mod figures;
#[cfg(feature = "otel")]
pub(crate) mod otel;
#[cfg(not(feature = "otel"))]
#[path = "otel_off.rs"]
pub(crate) mod otel;
#[cfg(feature = "otel")]
pub(crate) mod otel_counts;
#[cfg(not(feature = "otel"))]
#[path = "otel_counts_off.rs"]
pub(crate) mod otel_counts;

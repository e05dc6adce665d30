//! What the frontend tells about its calls: the audit records ([`audit`]), OpenTelemetry
//! spans and metrics ([`otel`], a stand-in without the `otel` feature) and the upstreams' log
//! messages no call claimed ([`server_logs`], [`unclaimed`]).

pub(crate) mod audit;
#[cfg(feature = "otel")]
pub(crate) mod otel;
#[cfg(not(feature = "otel"))]
#[path = "otel_off.rs"]
pub(crate) mod otel;
pub(crate) mod server_logs;
pub(crate) mod unclaimed;

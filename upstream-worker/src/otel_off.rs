//! `otel.rs` when the crate is built without its `otel` feature (to measure what the
//! OpenTelemetry crates cost, docs/PERFORMANCE.md): the same calls, doing nothing; `_meta`
//! goes on unchanged.

use rmcp::model::JsonObject;

use crate::control::KernelLink;

/// Never built: there is no span without the feature.
pub(crate) enum CallSpan {}

pub(crate) fn start(
    meta: Option<JsonObject>,
    _key: &str,
    _tool: &str,
) -> (Option<JsonObject>, Option<CallSpan>) {
    (meta, None)
}

impl CallSpan {
    pub(crate) fn finish(self, _outcome: &'static str) {
        match self {}
    }
}

pub(crate) fn spawn_drop_reports(_kernel: &KernelLink) {}

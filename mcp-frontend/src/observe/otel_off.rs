//! `observe/otel.rs` when the crate is built without its `otel` feature (to measure what the
//! OpenTelemetry crates cost, docs/PERFORMANCE.md): the same calls, doing nothing.

use std::time::Duration;

/// Nothing to keep without the feature.
pub(crate) struct ToolNames;

impl ToolNames {
    pub(crate) fn new(_key: &str, _tool: &str) -> ToolNames {
        ToolNames
    }
}

/// Never built: there is no span without the feature.
pub(crate) enum CallSpan {}

pub(crate) fn start(_names: &ToolNames) -> Option<CallSpan> {
    None
}

impl CallSpan {
    pub(crate) fn meta_json(&self) -> String {
        match *self {}
    }

    pub(crate) fn finish(self, _outcome: &'static str) {
        match self {}
    }
}

pub(crate) fn record(_names: &ToolNames, _elapsed: Duration, _outcome: &'static str) {}

pub(crate) fn dropped() -> u64 {
    0
}

//! `otel.rs` when the crate is built without its `otel` feature (to measure what the
//! OpenTelemetry crates cost, docs/PERFORMANCE.md): the same calls, doing nothing.

use std::sync::Arc;

use crate::state::Kernel;

pub fn observe(_k: &Arc<Kernel>) -> Export {
    Export
}

/// Nothing to export.
pub struct Export;

pub async fn finish_export(_export: Export) {}

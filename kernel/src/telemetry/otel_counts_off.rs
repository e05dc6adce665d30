//! `otel_counts.rs` when the crate is built without its `otel` feature: the same counters,
//! doing nothing. A module of its own (not part of `otel_off.rs`), so that the audit writer,
//! which counts through it, never depends on the kernel state `otel_off.rs` names.

pub fn fence(_connector: &str) {}

pub fn commit(_connector: &str) {}

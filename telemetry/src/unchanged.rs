//! Skips a metric export that would only repeat the last one: an idle process's points do not
//! change, and each export costs it a connection and several wake-ups. At most
//! [`UNCHANGED_EXPORTS_SKIPPED`] intervals in a row are skipped, so a receiver still hears
//! from the process (and a cumulative series does not look ended) while it is idle.

use std::collections::hash_map::DefaultHasher;
use std::fmt::Debug;
use std::hash::{Hash, Hasher};

use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};

/// How many unchanged exports in a row are skipped (with the default 60 s interval: an idle
/// process exports every 5 minutes).
pub(crate) const UNCHANGED_EXPORTS_SKIPPED: u32 = 4;

/// Whether the points collected now are worth an export.
#[derive(Debug, Default)]
pub(crate) struct ExportPacing {
    /// The fingerprint of the points last exported successfully.
    last: Option<u64>,
    /// Exports skipped since.
    skipped: u32,
}

impl ExportPacing {
    /// `true`: export `metrics` (then report with [`ExportPacing::exported`]); `false`: they
    /// are the same points as the last export's, skip them.
    pub(crate) fn worth_exporting(&mut self, metrics: &ResourceMetrics) -> bool {
        if self.last == Some(fingerprint(metrics)) && self.skipped < UNCHANGED_EXPORTS_SKIPPED {
            self.skipped += 1;
            return false;
        }
        true
    }

    /// `metrics` went out (`ok`) or not (the next interval tries again).
    pub(crate) fn exported(&mut self, metrics: &ResourceMetrics, ok: bool) {
        self.skipped = 0;
        self.last = ok.then(|| fingerprint(metrics));
    }
}

/// A hash of every metric's name and points (attributes and values; not the collection
/// times, which change at every collection).
fn fingerprint(metrics: &ResourceMetrics) -> u64 {
    let mut h = DefaultHasher::new();
    for scope in metrics.scope_metrics() {
        for metric in scope.metrics() {
            metric.name().hash(&mut h);
            match metric.data() {
                AggregatedMetrics::F64(d) => points(d, &mut h),
                AggregatedMetrics::U64(d) => points(d, &mut h),
                AggregatedMetrics::I64(d) => points(d, &mut h),
            }
        }
    }
    h.finish()
}

/// Hashes the `Debug` form of each point: attributes, value(s) and exemplars, no times.
fn points<T: Debug>(data: &MetricData<T>, h: &mut DefaultHasher) {
    let mut each = |p: &dyn Debug| format!("{p:?}").hash(h);
    match data {
        MetricData::Gauge(g) => g.data_points().for_each(|p| each(p)),
        MetricData::Sum(s) => s.data_points().for_each(|p| each(p)),
        MetricData::Histogram(x) => x.data_points().for_each(|p| each(p)),
        MetricData::ExponentialHistogram(x) => x.data_points().for_each(|p| each(p)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::metrics::MeterProvider as _;
    use opentelemetry_sdk::metrics::reader::MetricReader as _;
    use opentelemetry_sdk::metrics::{ManualReader, SdkMeterProvider};
    use std::sync::Arc;

    /// A meter provider with a manual reader, as the export loop has.
    fn provider() -> (SdkMeterProvider, crate::SharedReader) {
        let reader = crate::SharedReader(Arc::new(ManualReader::builder().build()));
        let provider = SdkMeterProvider::builder()
            .with_reader(reader.clone())
            .build();
        (provider, reader)
    }

    #[test]
    fn unchanged_points_are_skipped_a_few_times_then_exported_and_a_change_goes_out_at_once() {
        let (provider, reader) = provider();
        let calls = provider.meter("t").u64_counter("calls").build();
        let latency = provider.meter("t").f64_histogram("latency").build();
        calls.add(1, &[]);
        latency.record(1.5, &[]);
        let mut pacing = ExportPacing::default();
        let mut metrics = ResourceMetrics::default();
        let collect = |m: &mut ResourceMetrics| reader.collect(m).unwrap_or_else(|e| panic!("{e}"));
        collect(&mut metrics);
        assert!(
            pacing.worth_exporting(&metrics),
            "the first points must go out"
        );
        pacing.exported(&metrics, true);
        for _ in 0..UNCHANGED_EXPORTS_SKIPPED {
            collect(&mut metrics);
            assert!(
                !pacing.worth_exporting(&metrics),
                "unchanged points went out"
            );
        }
        collect(&mut metrics);
        assert!(
            pacing.worth_exporting(&metrics),
            "never exported while unchanged"
        );
        pacing.exported(&metrics, true);
        latency.record(2.5, &[]);
        collect(&mut metrics);
        assert!(pacing.worth_exporting(&metrics), "a change waited");
        pacing.exported(&metrics, false);
        collect(&mut metrics);
        assert!(
            pacing.worth_exporting(&metrics),
            "a failed export was not tried again"
        );
    }
}

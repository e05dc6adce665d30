//! The span queue in front of the OTLP span exporter: bounded, never waits, and counts what
//! it drops (the SDK's `BatchSpanProcessor` drops too, but keeps its count private).
//!
//! A finished span is handed to one exporter thread over a channel; `queued` counts the
//! spans in the channel, and a span that would make it more than `OTEL_BSP_MAX_QUEUE_SIZE`
//! is dropped and counted instead (one atomic add and a channel send on the call's thread,
//! nothing else). The thread exports a batch when it has `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`
//! spans or `OTEL_BSP_SCHEDULE_DELAY` has passed, as the SDK's processor does; while an
//! export waits for a receiver that does not answer, the queue fills and spans are dropped.
//! Flush and shutdown wait at most their timeout, never for a stuck export.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use opentelemetry::Context;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};

/// The queue's limits, from the standard `OTEL_BSP_*` variables (the SDK's defaults).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueConfig {
    pub max_queue_size: usize,
    pub max_export_batch_size: usize,
    pub schedule_delay: Duration,
}

impl QueueConfig {
    /// `OTEL_BSP_MAX_QUEUE_SIZE` (2048), `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` (512, at most the
    /// queue size), `OTEL_BSP_SCHEDULE_DELAY` (5000 ms); a malformed value is the default.
    pub fn from_env() -> QueueConfig {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    fn from_vars(var: impl Fn(&str) -> Option<String>) -> QueueConfig {
        let num = |name: &str, default: u64| {
            var(name)
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(default)
        };
        let max_queue_size = usize::try_from(num("OTEL_BSP_MAX_QUEUE_SIZE", 2048))
            .unwrap_or(2048)
            .max(1);
        let batch = usize::try_from(num("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)).unwrap_or(512);
        QueueConfig {
            max_queue_size,
            max_export_batch_size: batch.clamp(1, max_queue_size),
            schedule_delay: Duration::from_millis(num("OTEL_BSP_SCHEDULE_DELAY", 5000)),
        }
    }
}

enum Msg {
    Span(Box<SpanData>),
    Flush(Sender<OTelSdkResult>),
    Shutdown(Sender<OTelSdkResult>),
    Resource(Resource),
}

/// The span processor: see the module documentation.
#[derive(Debug)]
pub struct DroppingBatchProcessor {
    tx: Sender<Msg>,
    queued: Arc<AtomicUsize>,
    max_queue_size: usize,
    dropped: Arc<AtomicU64>,
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Msg")
    }
}

impl DroppingBatchProcessor {
    /// Starts the exporter thread; spans it drops are added to `dropped`.
    pub fn start<E>(
        exporter: E,
        config: QueueConfig,
        dropped: Arc<AtomicU64>,
    ) -> std::io::Result<DroppingBatchProcessor>
    where
        E: SpanExporter + Send + 'static,
    {
        let (tx, rx) = mpsc::channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let thread_queued = queued.clone();
        std::thread::Builder::new()
            .name("tutti-otel-spans".into())
            .stack_size(256 * 1024)
            .spawn(move || export_loop(exporter, &rx, &thread_queued, config))?;
        Ok(DroppingBatchProcessor {
            tx,
            queued,
            max_queue_size: config.max_queue_size,
            dropped,
        })
    }

    /// Sends a control message and waits at most `timeout` for its answer.
    fn ask(
        &self,
        msg: impl FnOnce(Sender<OTelSdkResult>) -> Msg,
        timeout: Duration,
    ) -> OTelSdkResult {
        let (done, answer) = mpsc::channel();
        self.tx
            .send(msg(done))
            .map_err(|_| OTelSdkError::AlreadyShutdown)?;
        match answer.recv_timeout(timeout) {
            Ok(result) => result,
            Err(RecvTimeoutError::Timeout) => Err(OTelSdkError::Timeout(timeout)),
            Err(RecvTimeoutError::Disconnected) => Err(OTelSdkError::AlreadyShutdown),
        }
    }
}

impl SpanProcessor for DroppingBatchProcessor {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if self.queued.fetch_add(1, Ordering::AcqRel) >= self.max_queue_size {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if self.tx.send(Msg::Span(Box::new(span))).is_err() {
            // Shut down: nothing will export it (the SDK does not count these either).
            self.queued.fetch_sub(1, Ordering::AcqRel);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.ask(Msg::Flush, Duration::from_secs(5))
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.ask(Msg::Shutdown, timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        let _ = self.tx.send(Msg::Resource(resource.clone()));
    }
}

/// The exporter thread: batches by size and time, answers flush and shutdown.
fn export_loop<E: SpanExporter>(
    mut exporter: E,
    rx: &Receiver<Msg>,
    queued: &AtomicUsize,
    config: QueueConfig,
) {
    let _suppress = Context::enter_telemetry_suppressed_scope();
    let mut batch: Vec<SpanData> = Vec::new();
    let mut due = Instant::now() + config.schedule_delay;
    loop {
        let msg = rx.recv_timeout(due.saturating_duration_since(Instant::now()));
        match msg {
            Ok(Msg::Span(span)) => {
                queued.fetch_sub(1, Ordering::AcqRel);
                batch.push(*span);
                if batch.len() >= config.max_export_batch_size {
                    let _ = export(&exporter, &mut batch);
                    due = Instant::now() + config.schedule_delay;
                }
            }
            Ok(Msg::Flush(done)) => {
                let _ = done.send(export(&exporter, &mut batch));
            }
            Ok(Msg::Shutdown(done)) => {
                let result = export(&exporter, &mut batch);
                let _ = exporter.shutdown();
                let _ = done.send(result);
                return;
            }
            Ok(Msg::Resource(resource)) => exporter.set_resource(&resource),
            Err(RecvTimeoutError::Timeout) => {
                let _ = export(&exporter, &mut batch);
                due = Instant::now() + config.schedule_delay;
            }
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

fn export<E: SpanExporter>(exporter: &E, batch: &mut Vec<SpanData>) -> OTelSdkResult {
    if batch.is_empty() {
        return Ok(());
    }
    futures_executor::block_on(exporter.export(std::mem::take(batch)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// An exporter that blocks every export until released, and counts what it got.
    #[derive(Debug, Clone, Default)]
    struct Stuck {
        release: Arc<Mutex<bool>>,
        exported: Arc<AtomicUsize>,
    }

    impl SpanExporter for Stuck {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            while !*self.release.lock().unwrap_or_else(|e| e.into_inner()) {
                std::thread::sleep(Duration::from_millis(5));
            }
            self.exported.fetch_add(batch.len(), Ordering::SeqCst);
            Ok(())
        }
    }

    fn span() -> SpanData {
        use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status};
        use std::borrow::Cow;
        SpanData {
            span_context: SpanContext::empty_context(),
            parent_span_id: SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: Cow::Borrowed("s"),
            start_time: std::time::SystemTime::UNIX_EPOCH,
            end_time: std::time::SystemTime::UNIX_EPOCH,
            attributes: Vec::new(),
            dropped_attributes_count: 0,
            events: Default::default(),
            links: Default::default(),
            status: Status::Unset,
            instrumentation_scope: Default::default(),
        }
    }

    #[test]
    fn config_follows_the_standard_variables() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        let default = QueueConfig::from_vars(vars(&[]));
        assert_eq!(default.max_queue_size, 2048);
        assert_eq!(default.max_export_batch_size, 512);
        assert_eq!(default.schedule_delay, Duration::from_secs(5));
        let small = QueueConfig::from_vars(vars(&[
            ("OTEL_BSP_MAX_QUEUE_SIZE", "4"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ]));
        assert_eq!(small.max_queue_size, 4);
        assert_eq!(small.max_export_batch_size, 4);
        assert_eq!(small.schedule_delay, Duration::from_millis(100));
        let bad = QueueConfig::from_vars(vars(&[("OTEL_BSP_MAX_QUEUE_SIZE", "many")]));
        assert_eq!(bad.max_queue_size, 2048);
    }

    #[test]
    fn a_stuck_export_fills_the_queue_and_further_spans_are_dropped_and_counted() {
        let exporter = Stuck::default();
        let dropped = Arc::new(AtomicU64::new(0));
        let config = QueueConfig {
            max_queue_size: 4,
            max_export_batch_size: 2,
            schedule_delay: Duration::from_secs(60),
        };
        let p = DroppingBatchProcessor::start(exporter.clone(), config, dropped.clone())
            .unwrap_or_else(|e| panic!("{e}"));
        // The first full batch goes to the (stuck) exporter; then the queue takes 4 more.
        let started = Instant::now();
        for _ in 0..2 {
            p.on_end(span());
        }
        while p.queued.load(Ordering::SeqCst) > 0 {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "batch never taken"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        for _ in 0..10 {
            p.on_end(span());
        }
        assert!(started.elapsed() < Duration::from_secs(5), "on_end waited");
        assert_eq!(dropped.load(Ordering::SeqCst), 6);
        // A shutdown while the export is stuck returns within its timeout.
        let t = Instant::now();
        assert!(p.shutdown_with_timeout(Duration::from_millis(200)).is_err());
        assert!(t.elapsed() < Duration::from_secs(3));
        // Released, everything queued is exported: 2 + 4 spans, none of the dropped.
        *exporter.release.lock().unwrap_or_else(|e| e.into_inner()) = true;
        let deadline = Instant::now() + Duration::from_secs(10);
        while exporter.exported.load(Ordering::SeqCst) < 6 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(exporter.exported.load(Ordering::SeqCst), 6);
    }
}

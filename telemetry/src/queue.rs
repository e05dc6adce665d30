//! The span queue in front of the OTLP span exporter: bounded, never waits, and counts what
//! it drops (the SDK's `BatchSpanProcessor` drops too, but keeps its count private).
//!
//! A finished span is pushed onto a vector under a mutex on the call's thread; a span that
//! would make the vector longer than `OTEL_BSP_MAX_QUEUE_SIZE` is dropped and counted instead.
//! Nothing else happens on the call's thread. The export loop ([`export_spans`]) is a task on
//! the process's own runtime (see the parent module for why not a thread): it takes a batch
//! when a whole one (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`) is waiting — the push that completes it
//! wakes the task, a same-thread wake-up with no system call — or when its timer
//! (`OTEL_BSP_SCHEDULE_DELAY`) runs out, as the SDK's processor does. The timer runs only while
//! spans wait: with the queue empty the loop sleeps until a span arrives, so an idle process
//! never wakes for it. While an export waits for a receiver that does not answer, the vector
//! fills and spans are dropped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use tokio::sync::{Notify, watch};

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

/// Finished spans waiting for the export loop; shared by the processor and the loop.
#[derive(Debug)]
pub(super) struct SpanQueue {
    spans: Mutex<Spans>,
    /// Woken by the push that completes a batch.
    batch_ready: Notify,
    /// Woken by the push into an empty queue (the schedule delay starts then).
    first_waiting: Notify,
    /// Woken when a span is dropped (see [`SpanQueue::dropped_more`]).
    dropped_more: Notify,
    config: QueueConfig,
    dropped: Arc<AtomicU64>,
}

#[derive(Debug, Default)]
struct Spans {
    /// At most `max_queue_size`.
    waiting: Vec<SpanData>,
    /// No more spans are taken (the provider shut down, or the last export ran).
    closed: bool,
}

impl SpanQueue {
    /// An empty queue; spans it drops are added to `dropped`.
    pub(super) fn new(config: QueueConfig, dropped: Arc<AtomicU64>) -> Arc<SpanQueue> {
        Arc::new(SpanQueue {
            spans: Mutex::new(Spans::default()),
            batch_ready: Notify::new(),
            first_waiting: Notify::new(),
            dropped_more: Notify::new(),
            config,
            dropped,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Spans> {
        // A panic elsewhere while holding the lock leaves plain data behind; keep going.
        self.spans.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(&self, span: SpanData) {
        let (first, batch_ready) = {
            let mut spans = self.lock();
            if spans.closed {
                // Shutting down: nothing will export it (the SDK does not count these either).
                return;
            }
            if spans.waiting.len() >= self.config.max_queue_size {
                drop(spans);
                self.count_drop();
                return;
            }
            spans.waiting.push(span);
            let n = spans.waiting.len();
            (n == 1, n == self.config.max_export_batch_size)
        };
        if first {
            self.first_waiting.notify_one();
        }
        if batch_ready {
            self.batch_ready.notify_one();
        }
    }

    /// Whether a span started now can still be queued: `false`, and the span counted as
    /// dropped, while the queue is full (a receiver that does not answer), so the caller
    /// skips building a span that would be thrown away. Also `false`, not counted, once
    /// the queue is closed (as [`Self::push`]). A span admitted here can still be dropped at
    /// its end if the queue filled meanwhile; it is counted once, there.
    pub(super) fn admit(&self) -> bool {
        let spans = self.lock();
        if spans.closed {
            return false;
        }
        if spans.waiting.len() >= self.config.max_queue_size {
            drop(spans);
            self.count_drop();
            return false;
        }
        true
    }

    fn count_drop(&self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
        self.dropped_more.notify_one();
    }

    /// Resolves once a span was dropped since it last resolved (for one waiter: whoever
    /// reports the drop count), so that nothing needs to look at the count on a timer.
    pub(super) async fn dropped_more(&self) {
        self.dropped_more.notified().await;
    }

    fn is_empty(&self) -> bool {
        self.lock().waiting.is_empty()
    }

    /// Takes at most one batch.
    fn take_batch(&self) -> Vec<SpanData> {
        let mut spans = self.lock();
        let n = spans.waiting.len().min(self.config.max_export_batch_size);
        spans.waiting.drain(..n).collect()
    }

    /// Closes the queue and takes everything in it.
    fn close(&self) -> Vec<SpanData> {
        let mut spans = self.lock();
        spans.closed = true;
        std::mem::take(&mut spans.waiting)
    }

    /// Spans waiting for the export loop.
    #[cfg(test)]
    fn queued(&self) -> usize {
        self.lock().waiting.len()
    }
}

/// The span processor: hands finished spans to a [`SpanQueue`].
#[derive(Debug)]
pub(super) struct QueueProcessor(pub(super) Arc<SpanQueue>);

impl SpanProcessor for QueueProcessor {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        self.0.push(span);
    }

    /// Nothing to wait for here: the export loop is a task of the caller's own runtime,
    /// which a blocking flush would stall. The loop exports what is queued at its next tick
    /// and at shutdown ([`super::Telemetry::shutdown`]).
    fn force_flush(&self) -> OTelSdkResult {
        self.0.batch_ready.notify_one();
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        self.0.lock().closed = true;
        Ok(())
    }
}

/// The span export loop: a batch when one is full or the schedule delay passed since the
/// first span waiting arrived (an empty queue arms no timer), until `stop` turns true; then whatever is queued, once (bounded by the caller's shutdown budget). An
/// export in flight when `stop` comes is abandoned for that last one.
pub(super) async fn export_spans<E: SpanExporter>(
    queue: Arc<SpanQueue>,
    exporter: E,
    mut stop: watch::Receiver<bool>,
) {
    let delay = queue.config.schedule_delay;
    let mut health = super::health::ExportHealth::new("spans");
    let mut due = tokio::time::Instant::now() + delay;
    loop {
        if queue.is_empty() {
            tokio::select! {
                () = queue.first_waiting.notified() => {}
                _ = stop.wait_for(|s| *s) => break,
            }
            due = tokio::time::Instant::now() + delay;
        }
        tokio::select! {
            () = queue.batch_ready.notified() => {}
            () = tokio::time::sleep_until(due) => {}
            _ = stop.wait_for(|s| *s) => break,
        }
        let batch = queue.take_batch();
        if !batch.is_empty() {
            tokio::select! {
                result = exporter.export(batch) => health.note(&result),
                _ = stop.wait_for(|s| *s) => break,
            }
        }
        due = tokio::time::Instant::now() + delay;
    }
    let mut rest = queue.close();
    while !rest.is_empty() {
        let tail = rest.split_off(rest.len().min(queue.config.max_export_batch_size));
        let _ = exporter.export(rest).await;
        rest = tail;
    }
    let _ = exporter.shutdown();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// An exporter that waits (asynchronously) until released, and counts what it got.
    #[derive(Debug, Clone)]
    struct Stuck {
        release: watch::Sender<bool>,
        exported: Arc<AtomicUsize>,
    }

    impl Stuck {
        fn new(released: bool) -> Stuck {
            Stuck {
                release: watch::channel(released).0,
                exported: Arc::default(),
            }
        }

        fn exported(&self) -> usize {
            self.exported.load(Ordering::SeqCst)
        }
    }

    impl SpanExporter for Stuck {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            let mut released = self.release.subscribe();
            let _ = released.wait_for(|r| *r).await;
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
    fn every_variable_the_queue_reads_reaches_workers_and_services() {
        let read = std::cell::RefCell::new(Vec::new());
        QueueConfig::from_vars(|name| {
            read.borrow_mut().push(name.to_owned());
            None
        });
        let passed = tutti_rules::child_env::OTEL;
        for name in read.into_inner() {
            assert!(
                passed.iter().any(|v| v.name == name && v.from == name),
                "{name} is not passed on to children"
            );
        }
    }

    /// Yields to the loop until `done` or 10 s pass.
    async fn until(done: impl Fn() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !done() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// A queue of `size` spans, batches of `batch`, the given delay, with its export loop
    /// running on the test's runtime: the queue, its processor, the stop switch, the loop.
    fn running(
        exporter: &Stuck,
        (size, batch, delay): (usize, usize, Duration),
        dropped: Arc<AtomicU64>,
    ) -> (
        Arc<SpanQueue>,
        QueueProcessor,
        watch::Sender<bool>,
        tokio::task::JoinHandle<()>,
    ) {
        let config = QueueConfig {
            max_queue_size: size,
            max_export_batch_size: batch,
            schedule_delay: delay,
        };
        let queue = SpanQueue::new(config, dropped);
        let (stop, stopped) = watch::channel(false);
        let export = tokio::spawn(export_spans(queue.clone(), exporter.clone(), stopped));
        (queue.clone(), QueueProcessor(queue), stop, export)
    }

    /// Fewer spans than a batch wait for the timer; stop exports what is queued and closes.
    #[tokio::test(flavor = "current_thread")]
    async fn spans_short_of_a_batch_wait_for_the_timer() {
        let exporter = Stuck::new(true);
        let started = tokio::time::Instant::now();
        let (queue, processor, stop, export) = running(
            &exporter,
            (16, 4, Duration::from_millis(300)),
            Arc::default(),
        );
        for _ in 0..3 {
            assert!(queue.admit(), "a queue with room refused a span");
            processor.on_end(span());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(exporter.exported(), 0, "exported before the timer");
        assert_eq!(queue.queued(), 3);
        until(|| exporter.exported() == 3).await;
        assert_eq!(exporter.exported(), 3);
        assert!(started.elapsed() >= Duration::from_millis(300));
        // Stop: what is queued goes out, later spans are refused.
        processor.on_end(span());
        let _ = stop.send(true);
        let _ = export.await;
        assert_eq!(exporter.exported(), 4);
        processor.on_end(span());
        assert_eq!(queue.queued(), 0);
        // Closed: nothing is admitted any more, and that is not a drop.
        assert!(!queue.admit());
    }

    /// An empty queue arms no timer (an idle process never wakes for it): the schedule delay
    /// starts with the first span waiting, however long the queue was empty before.
    #[tokio::test(flavor = "current_thread")]
    async fn the_delay_starts_with_the_first_span_not_while_the_queue_is_empty() {
        let exporter = Stuck::new(true);
        let (_queue, processor, stop, export) = running(
            &exporter,
            (16, 4, Duration::from_millis(400)),
            Arc::default(),
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        let pushed = tokio::time::Instant::now();
        processor.on_end(span());
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_eq!(
            exporter.exported(),
            0,
            "the span went out before the delay counted from its arrival"
        );
        until(|| exporter.exported() == 1).await;
        assert!(pushed.elapsed() >= Duration::from_millis(400));
        let _ = stop.send(true);
        let _ = export.await;
    }

    /// A full batch is exported at once, not at the (here one-minute) timer.
    #[tokio::test(flavor = "current_thread")]
    async fn a_full_batch_does_not_wait_for_the_timer() {
        let exporter = Stuck::new(true);
        let (_queue, processor, stop, export) =
            running(&exporter, (16, 4, Duration::from_secs(60)), Arc::default());
        for _ in 0..4 {
            processor.on_end(span());
        }
        until(|| exporter.exported() == 4).await;
        assert_eq!(exporter.exported(), 4, "a full batch waited for the timer");
        let _ = stop.send(true);
        let _ = export.await;
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_stuck_export_fills_the_queue_and_further_spans_are_dropped_and_counted() {
        let exporter = Stuck::new(false);
        let dropped = Arc::new(AtomicU64::new(0));
        let (queue, processor, stop, export) =
            running(&exporter, (4, 2, Duration::from_secs(60)), dropped.clone());
        // The first full batch goes to the (stuck) exporter; then the queue takes 4 more.
        for _ in 0..2 {
            processor.on_end(span());
        }
        until(|| queue.queued() == 0).await;
        assert_eq!(queue.queued(), 0, "batch never taken");
        let before = std::time::Instant::now();
        for _ in 0..10 {
            processor.on_end(span());
        }
        assert!(before.elapsed() < Duration::from_secs(1), "on_end waited");
        assert_eq!(dropped.load(Ordering::SeqCst), 6);
        // While it is full, no span is admitted, and each refusal counts as a drop.
        assert!(!queue.admit());
        assert!(!queue.admit());
        assert_eq!(dropped.load(Ordering::SeqCst), 8);
        // Stop abandons the stuck export and takes the queued spans for one last export;
        // released, that one delivers 4 spans, none of the dropped (the abandoned batch of 2
        // is lost).
        let _ = stop.send(true);
        until(|| queue.lock().closed).await;
        let _ = exporter.release.send(true);
        let _ = export.await;
        assert_eq!(exporter.exported(), 4);
    }
}

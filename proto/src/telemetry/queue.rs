//! The span queue in front of the OTLP span exporter: bounded, never waits, and counts what
//! it drops (the SDK's `BatchSpanProcessor` drops too, but keeps its count private).
//!
//! A finished span is pushed onto a vector under a mutex on the call's thread; a span that
//! would make the vector longer than `OTEL_BSP_MAX_QUEUE_SIZE` is dropped and counted instead.
//! Nothing else happens on the call's thread: the one exporter thread is woken only when a
//! whole batch (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`) is waiting, or by its own timer
//! (`OTEL_BSP_SCHEDULE_DELAY`), as the SDK's processor does. (A channel send per span woke
//! that thread once per span: a futex wake and a context switch per call, measured as
//! +17…20 µs p50 with export on; docs/PERFORMANCE.md.) While an export waits for a receiver
//! that does not answer, the vector fills and spans are dropped. Flush and shutdown wait at
//! most their timeout, never for a stuck export.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
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

/// What the exporter thread is asked to do besides exporting.
enum Control {
    Flush(Sender<OTelSdkResult>),
    Shutdown(Sender<OTelSdkResult>),
    Resource(Resource),
}

/// Shared between the processor (any thread ending a span) and the exporter thread.
#[derive(Default)]
struct Queue {
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Default)]
struct State {
    /// Finished spans not yet taken by the exporter thread; at most `max_queue_size`.
    spans: Vec<SpanData>,
    control: VecDeque<Control>,
    /// No more spans are taken: a shutdown was asked for, or the processor is gone.
    closed: bool,
    /// The processor is gone: the thread ends without exporting.
    abandoned: bool,
    /// The thread has ended.
    exited: bool,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere while holding the lock leaves plain data behind; keep going.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The span processor: see the module documentation.
pub struct DroppingBatchProcessor {
    queue: Arc<Queue>,
    config: QueueConfig,
    dropped: Arc<AtomicU64>,
}

impl std::fmt::Debug for DroppingBatchProcessor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DroppingBatchProcessor")
            .field("config", &self.config)
            .finish_non_exhaustive()
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
        let queue = Arc::new(Queue::default());
        let thread_queue = queue.clone();
        std::thread::Builder::new()
            .name("tutti-otel-spans".into())
            .stack_size(256 * 1024)
            .spawn(move || export_loop(exporter, &thread_queue, config))?;
        Ok(DroppingBatchProcessor {
            queue,
            config,
            dropped,
        })
    }

    /// Spans waiting for the exporter thread.
    #[cfg(test)]
    fn queued(&self) -> usize {
        self.queue.lock().spans.len()
    }

    /// Hands the exporter thread a control message and waits at most `timeout` for its answer.
    fn ask(
        &self,
        msg: impl FnOnce(Sender<OTelSdkResult>) -> Control,
        shutdown: bool,
        timeout: Duration,
    ) -> OTelSdkResult {
        let (done, answer) = mpsc::channel();
        {
            let mut state = self.queue.lock();
            if state.exited {
                return Err(OTelSdkError::AlreadyShutdown);
            }
            state.closed |= shutdown;
            state.control.push_back(msg(done));
        }
        self.queue.wake.notify_one();
        match answer.recv_timeout(timeout) {
            Ok(result) => result,
            Err(RecvTimeoutError::Timeout) => Err(OTelSdkError::Timeout(timeout)),
            Err(RecvTimeoutError::Disconnected) => Err(OTelSdkError::AlreadyShutdown),
        }
    }
}

impl Drop for DroppingBatchProcessor {
    fn drop(&mut self) {
        {
            let mut state = self.queue.lock();
            state.closed = true;
            state.abandoned = true;
        }
        self.queue.wake.notify_one();
    }
}

impl SpanProcessor for DroppingBatchProcessor {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        let batch_ready = {
            let mut state = self.queue.lock();
            if state.closed {
                // Shutting down: nothing will export it (the SDK does not count these either).
                return;
            }
            if state.spans.len() >= self.config.max_queue_size {
                drop(state);
                self.dropped.fetch_add(1, Ordering::Relaxed);
                return;
            }
            state.spans.push(span);
            state.spans.len() == self.config.max_export_batch_size
        };
        if batch_ready {
            self.queue.wake.notify_one();
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.ask(Control::Flush, false, Duration::from_secs(5))
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.ask(Control::Shutdown, true, timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.queue
            .lock()
            .control
            .push_back(Control::Resource(resource.clone()));
        self.queue.wake.notify_one();
    }
}

/// The exporter thread: batches by size and time, answers flush and shutdown.
fn export_loop<E: SpanExporter>(exporter: E, queue: &Queue, config: QueueConfig) {
    let _suppress = Context::enter_telemetry_suppressed_scope();
    let mut exporter = exporter;
    let mut due = Instant::now() + config.schedule_delay;
    let mut state = queue.lock();
    loop {
        if state.abandoned {
            state.exited = true;
            return;
        }
        if let Some(control) = state.control.pop_front() {
            match control {
                Control::Flush(done) => {
                    let spans = std::mem::take(&mut state.spans);
                    drop(state);
                    let _ = done.send(export(&exporter, spans, config));
                }
                Control::Shutdown(done) => {
                    let spans = std::mem::take(&mut state.spans);
                    drop(state);
                    let result = export(&exporter, spans, config);
                    let _ = exporter.shutdown();
                    queue.lock().exited = true;
                    let _ = done.send(result);
                    return;
                }
                Control::Resource(resource) => {
                    drop(state);
                    exporter.set_resource(&resource);
                }
            }
            state = queue.lock();
            continue;
        }
        let now = Instant::now();
        let full = state.spans.len() >= config.max_export_batch_size;
        if full || now >= due {
            let take = state.spans.len().min(config.max_export_batch_size);
            let spans: Vec<SpanData> = state.spans.drain(..take).collect();
            drop(state);
            let _ = export(&exporter, spans, config);
            due = Instant::now() + config.schedule_delay;
            state = queue.lock();
            continue;
        }
        state = queue
            .wake
            .wait_timeout(state, due.saturating_duration_since(now))
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

/// Exports `spans` in batches of at most `max_export_batch_size`; the first error is returned.
fn export<E: SpanExporter>(
    exporter: &E,
    spans: Vec<SpanData>,
    config: QueueConfig,
) -> OTelSdkResult {
    let mut result = Ok(());
    let mut spans = spans.into_iter().peekable();
    while spans.peek().is_some() {
        let batch: Vec<SpanData> = spans.by_ref().take(config.max_export_batch_size).collect();
        let exported = futures_executor::block_on(exporter.export(batch));
        if result.is_ok() {
            result = exported;
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

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

    /// Fewer spans than a batch wait for the timer (the exporter is not woken span by span).
    #[test]
    fn spans_short_of_a_batch_wait_for_the_timer() {
        let exporter = Stuck {
            release: Arc::new(Mutex::new(true)),
            ..Stuck::default()
        };
        let config = QueueConfig {
            max_queue_size: 16,
            max_export_batch_size: 8,
            schedule_delay: Duration::from_millis(300),
        };
        let p = DroppingBatchProcessor::start(exporter.clone(), config, Arc::default())
            .unwrap_or_else(|e| panic!("{e}"));
        let started = Instant::now();
        for _ in 0..3 {
            p.on_end(span());
        }
        std::thread::sleep(Duration::from_millis(100));
        if started.elapsed() < Duration::from_millis(250) {
            assert_eq!(
                exporter.exported.load(Ordering::SeqCst),
                0,
                "exported early"
            );
            assert_eq!(p.queued(), 3);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while exporter.exported.load(Ordering::SeqCst) < 3 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(exporter.exported.load(Ordering::SeqCst), 3);
        assert!(p.shutdown_with_timeout(Duration::from_secs(5)).is_ok());
        assert!(matches!(
            p.force_flush(),
            Err(OTelSdkError::AlreadyShutdown)
        ));
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
        while p.queued() > 0 {
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

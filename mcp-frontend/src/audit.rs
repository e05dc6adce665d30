//! Audit records of `tools/call`, shipped to the kernel (which owns `logs/audit.jsonl`) off
//! the hot path: a call only does a non-blocking `try_send` into a bounded queue; when the
//! queue is full the record is dropped and counted, and the count travels with the next
//! record so `tutti status` shows it. Names and outcomes only: never argument or result
//! values.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;
use tutti_proto::kernel::CallRecord;

use crate::backend::{Backend, Identity};
use crate::routes::Tool;

/// How a call ended, as its audit record says. Decided where the answer is made (from the
/// worker's `CallError.reason` for its answers), never parsed back out of message text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The upstream's result.
    Ok,
    /// The upstream's result with `isError: true`.
    ToolError,
    /// Refused by the tool's input schema; nothing was sent upstream.
    InvalidArguments,
    /// A JSON-RPC error other than the kinds below (upstream errors, a fenced name).
    RpcError,
    Timeout,
    /// The worker or the upstream went away, or the generation was fenced mid-call.
    Unavailable,
    Cancelled,
}

impl Outcome {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::ToolError => "tool_error",
            Self::InvalidArguments => "invalid_arguments",
            Self::RpcError => "rpc_error",
            Self::Timeout => "timeout",
            Self::Unavailable => "unavailable",
            Self::Cancelled => "cancelled",
        }
    }
}

const QUEUE: usize = 4096;

pub(crate) struct CallAudit {
    tx: mpsc::Sender<CallRecord>,
    dropped: Arc<AtomicU64>,
}

impl CallAudit {
    /// Starts the shipper task (needs a tokio runtime).
    pub(crate) fn start(backend: Arc<dyn Backend>) -> CallAudit {
        let (tx, rx) = mpsc::channel(QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        tokio::spawn(ship(backend, rx));
        CallAudit { tx, dropped }
    }

    /// Records one finished call. Never waits.
    pub(crate) fn record(
        &self,
        who: &Identity,
        tool: &Tool,
        started: Instant,
        outcome: Outcome,
        error_code: i32,
    ) {
        let record = CallRecord {
            time_unix_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as i64)
                .unwrap_or(0),
            workspace: who.workspace.clone(),
            session: who.session.clone(),
            tool: tool.name.clone(),
            connector: tool.connector.key.clone(),
            generation: tool.connector.generation,
            risk: tool.risk.clone(),
            duration_us: started.elapsed().as_micros() as u64,
            outcome: outcome.as_str().into(),
            error_code,
            dropped_total: self.dropped.load(Ordering::Relaxed),
        };
        crate::otel::record(tool, started.elapsed(), outcome.as_str());
        if self.tx.try_send(record).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Records arriving within this window after a first one travel together: one write and one
/// kernel wake-up per window instead of one per call (a busy frontend would otherwise wake the
/// kernel once more for every call it serves).
const BATCH_WINDOW: Duration = Duration::from_millis(10);
/// Most records gathered into one batch.
const BATCH_MAX: usize = 256;

/// Streams queued records to the kernel, one gRPC stream per connection; reconnects after a
/// failure (records in flight on a broken stream are lost, which the audit log tolerates).
async fn ship(backend: Arc<dyn Backend>, mut rx: mpsc::Receiver<CallRecord>) {
    loop {
        let (tx, stream_rx) = mpsc::channel(BATCH_MAX);
        let b = backend.clone();
        let mut call = tokio::spawn(async move { b.record_calls(stream_rx).await });
        loop {
            tokio::select! {
                next = rx.recv() => match next {
                    Some(first) => {
                        let (batch, closed) = gather(first, &mut rx).await;
                        let mut sent = true;
                        for record in batch {
                            if tx.send(record).await.is_err() {
                                sent = false;
                                break;
                            }
                        }
                        if closed {
                            return; // the frontend is stopping; `tx` drops and ends the stream
                        }
                        if !sent {
                            break; // the stream ended: reconnect
                        }
                    }
                    None => return, // the frontend is stopping
                },
                result = &mut call => {
                    if let Ok(Err(e)) = result {
                        tracing::debug!(error = %e, "audit stream to the kernel failed; retrying");
                    }
                    break;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// `first` plus whatever arrives within [`BATCH_WINDOW`] (at most [`BATCH_MAX`] records), and
/// whether the queue was closed meanwhile.
async fn gather(first: CallRecord, rx: &mut mpsc::Receiver<CallRecord>) -> (Vec<CallRecord>, bool) {
    let mut batch = vec![first];
    let window = tokio::time::sleep(BATCH_WINDOW);
    tokio::pin!(window);
    while batch.len() < BATCH_MAX {
        tokio::select! {
            more = rx.recv() => match more {
                Some(record) => batch.push(record),
                None => return (batch, true),
            },
            () = &mut window => break,
        }
    }
    (batch, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(n: u64) -> CallRecord {
        CallRecord {
            duration_us: n,
            ..CallRecord::default()
        }
    }

    #[tokio::test]
    async fn records_within_the_window_travel_together() {
        let (tx, mut rx) = mpsc::channel(16);
        for n in 1..=3 {
            tx.try_send(record(n)).expect("queued");
        }
        let (batch, closed) = gather(record(0), &mut rx).await;
        assert_eq!(
            batch.iter().map(|r| r.duration_us).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        assert!(!closed);
        // A record after the window is the next batch; a closed queue is reported.
        tx.try_send(record(4)).expect("queued");
        drop(tx);
        let (batch, closed) = gather(record(9), &mut rx).await;
        assert_eq!(batch.len(), 2);
        assert!(closed);
    }
}

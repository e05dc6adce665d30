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
use crate::catalog::routes::Tool;

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
    /// The worker or the upstream went away, or the generation was fenced mid-call because
    /// it failed.
    Unavailable,
    /// Fenced mid-call by the kernel's own decision (uninstall, disconnect, shutdown): audited
    /// `unavailable` like the above, but not counted by the circuit breaker.
    Withdrawn,
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
            Self::Unavailable | Self::Withdrawn => "unavailable",
            Self::Cancelled => "cancelled",
        }
    }

    /// What the call says about its connector, for the circuit breaker (SPEC §12): only
    /// unavailability and timeouts count; an upstream's answer, even an error, means it is up.
    pub(crate) fn circuit_verdict(self) -> crate::call::circuit::Verdict {
        use crate::call::circuit::Verdict;
        match self {
            Self::Timeout => Verdict::Failed("calls timed out ([MCP_TIMEOUT])"),
            Self::Unavailable => {
                Verdict::Failed("the connector was unavailable ([MCP_UNAVAILABLE])")
            }
            Self::Ok | Self::ToolError | Self::RpcError => Verdict::Answered,
            Self::Cancelled | Self::InvalidArguments | Self::Withdrawn => Verdict::NoAnswer,
        }
    }
}

const QUEUE: usize = 4096;

/// What a request beyond tools was, for its audit record.
pub(crate) struct Audited<'a> {
    pub(crate) kind: &'static str,
    pub(crate) name: &'a str,
    pub(crate) key: &'a str,
    pub(crate) generation: u64,
    pub(crate) started: Instant,
    /// The upstream's requests relayed during it (a relayed `prompts/get`).
    pub(crate) relayed: Option<&'a Relayed>,
}

/// What a call's audit record says beyond its outcome: the upstream's requests to
/// the client relayed during the call (`<method>:<outcome>`, never contents) and the person's
/// decision on a confirmed high-risk call.
/// The relayed requests, the confirmation decision and the channel that made it.
type Notes = (Vec<String>, String, String);

#[derive(Debug, Default)]
pub(crate) struct Relayed {
    notes: std::sync::Mutex<Notes>,
}

impl Relayed {
    /// One relayed request and how it ended so far (`unanswered`, `refused`, …); the index
    /// [`Relayed::settle`] takes.
    pub(crate) fn request(&self, method: &str, outcome: &str) -> usize {
        match self.notes.lock() {
            Ok(mut notes) => {
                notes.0.push(format!("{method}:{outcome}"));
                notes.0.len() - 1
            }
            Err(_) => usize::MAX,
        }
    }

    /// How relayed request `index` ended after all (`answered`, `error`).
    pub(crate) fn settle(&self, index: usize, outcome: &str) {
        if let Ok(mut notes) = self.notes.lock()
            && let Some(note) = notes.0.get_mut(index)
            && let Some((method, _)) = note.split_once(':')
        {
            *note = format!("{method}:{outcome}");
        }
    }

    /// The person's decision on a confirmed call (`--confirm high`).
    /// `via`: the channel that answered (`person` | `agent`; empty when none did).
    pub(crate) fn confirm(&self, decision: &str, via: &str) {
        if let Ok(mut notes) = self.notes.lock() {
            decision.clone_into(&mut notes.1);
            via.clone_into(&mut notes.2);
        }
    }

    fn take(&self) -> Notes {
        self.notes
            .lock()
            .map(|mut n| std::mem::take(&mut *n))
            .unwrap_or_default()
    }
}

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
        relayed: Option<&Relayed>,
    ) {
        let (relayed, confirmation, confirmed_via) = relayed.map(Relayed::take).unwrap_or_default();
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
            telemetry_dropped_total: crate::observe::otel::dropped(),
            kind: String::new(),
            relayed,
            confirmation,
            confirmed_via,
        };
        crate::observe::otel::record(&tool.otel, started.elapsed(), outcome.as_str());
        self.send(record);
    }

    /// Records one finished request beyond tools: `kind` is `prompt`, `resource`
    /// or `completion`, `name` the prompt's local name or the URI without query or fragment.
    pub(crate) fn record_other(
        &self,
        who: &Identity,
        what: Audited<'_>,
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
            tool: what.name.to_owned(),
            connector: what.key.to_owned(),
            generation: what.generation,
            duration_us: what.started.elapsed().as_micros() as u64,
            outcome: outcome.as_str().into(),
            error_code,
            dropped_total: self.dropped.load(Ordering::Relaxed),
            telemetry_dropped_total: crate::observe::otel::dropped(),
            kind: what.kind.to_owned(),
            relayed: what.relayed.map(|r| r.take().0).unwrap_or_default(),
            ..CallRecord::default()
        };
        self.send(record);
    }

    fn send(&self, record: CallRecord) {
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

    #[test]
    fn only_unavailability_and_timeouts_count_against_the_circuit() {
        use crate::call::circuit::Verdict;
        for o in [Outcome::Timeout, Outcome::Unavailable] {
            assert!(matches!(o.circuit_verdict(), Verdict::Failed(_)), "{o:?}");
        }
        for o in [Outcome::Ok, Outcome::ToolError, Outcome::RpcError] {
            assert_eq!(o.circuit_verdict(), Verdict::Answered, "{o:?}");
        }
        for o in [
            Outcome::Cancelled,
            Outcome::InvalidArguments,
            Outcome::Withdrawn,
        ] {
            assert_eq!(o.circuit_verdict(), Verdict::NoAnswer, "{o:?}");
        }
        // A call the kernel fenced on purpose reads like any unavailable one in the log.
        assert_eq!(Outcome::Withdrawn.as_str(), Outcome::Unavailable.as_str());
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

//! Audit records of `tools/call`, shipped to the kernel (which owns `logs/audit.jsonl`) off
//! the hot path: a call only does a non-blocking `try_send` into a bounded queue; when the
//! queue is full the record is dropped and counted, and the count travels with the next
//! record so `tutti status` shows it. Names and outcomes only: never argument or result
//! values.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tokio::sync::mpsc;
use tutti_proto::kernel::CallRecord;

use crate::backend::{Backend, Identity};
use crate::routes::Tool;
use crate::rpc::{REQUEST_CANCELLED, RpcError};

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
        outcome: &Result<Value, RpcError>,
    ) {
        let (outcome, error_code) = classify(outcome);
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
            // The kernel fills in the risk from its own table (it computed it at commit).
            risk: String::new(),
            duration_us: started.elapsed().as_micros() as u64,
            outcome: outcome.into(),
            error_code,
            dropped_total: self.dropped.load(Ordering::Relaxed),
        };
        if self.tx.try_send(record).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn classify(outcome: &Result<Value, RpcError>) -> (&'static str, i32) {
    match outcome {
        Ok(v) if v.get("isError").and_then(Value::as_bool) == Some(true) => {
            let text = v["content"][0]["text"].as_str().unwrap_or("");
            if text.starts_with("invalid_arguments:") {
                ("invalid_arguments", 0)
            } else {
                ("tool_error", 0)
            }
        }
        Ok(_) => ("ok", 0),
        Err(e) => {
            let code = i32::try_from(e.code).unwrap_or(i32::MIN);
            if e.code == REQUEST_CANCELLED {
                ("cancelled", code)
            } else if e.message.starts_with("[MCP_TIMEOUT]") {
                ("timeout", code)
            } else if e.message.starts_with("[MCP_UNAVAILABLE]") {
                ("unavailable", code)
            } else {
                ("rpc_error", code)
            }
        }
    }
}

/// Streams queued records to the kernel, one gRPC stream per connection; reconnects after a
/// failure (records in flight on a broken stream are lost, which the audit log tolerates).
async fn ship(backend: Arc<dyn Backend>, mut rx: mpsc::Receiver<CallRecord>) {
    loop {
        let (tx, stream_rx) = mpsc::channel(256);
        let b = backend.clone();
        let mut call = tokio::spawn(async move { b.record_calls(stream_rx).await });
        loop {
            tokio::select! {
                next = rx.recv() => match next {
                    Some(record) => {
                        if tx.send(record).await.is_err() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn outcomes() {
        assert_eq!(classify(&Ok(json!({"content": []}))).0, "ok");
        assert_eq!(
            classify(&Ok(
                json!({"content": [{"type":"text","text":"boom"}], "isError": true})
            ))
            .0,
            "tool_error"
        );
        assert_eq!(
            classify(&Ok(json!({"content": [{"type":"text","text":"invalid_arguments: /a: x"}], "isError": true}))).0,
            "invalid_arguments"
        );
        assert_eq!(
            classify(&Err(RpcError::new(-32800, "Request cancelled"))),
            ("cancelled", -32800)
        );
        assert_eq!(
            classify(&Err(RpcError::new(-32603, "[MCP_TIMEOUT] k: t"))).0,
            "timeout"
        );
        assert_eq!(
            classify(&Err(RpcError::new(-32603, "[MCP_UNAVAILABLE] k: t"))).0,
            "unavailable"
        );
        assert_eq!(
            classify(&Err(RpcError::new(-32001, "upstream"))),
            ("rpc_error", -32001)
        );
    }
}

//! The Worker service against a scripted upstream: results, refusals, timeouts, cancellation,
//! fencing, draining and streamed calls.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rmcp::model::JsonObject;
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};
use tonic::{Request, Status};
use tutti_proto::worker::worker_server::Worker;
use tutti_proto::worker::{
    CallError, CallToolReply, CallToolRequest, CancelRequest, GenerationRequest, ShutdownRequest,
    call_tool_event, call_tool_reply,
};

use crate::serve::service::stream_call;
use crate::serve::{Event, Shared, WorkerService};
use crate::upstream::relay::RelayTo;
use crate::upstream::{CallFailure, ProgressSink, Upstream};

const KEY: &str = "demo";
const GEN: u64 = (3 << 32) | 7;

/// A scripted upstream: `echo` answers, `fail` errors, `gone` is closed, `hang` never
/// answers and records being dropped (= cancelled upstream).
#[derive(Default)]
struct Fake {
    /// The `hang` call's work was dropped (by an interrupt or the caller).
    hang_dropped: AtomicBool,
    /// An interrupt ended a call (the real upstream sends `notifications/cancelled`).
    interrupted: AtomicBool,
    hang_started: Notify,
}

struct OnDrop<'a>(&'a AtomicBool);
impl Drop for OnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl Upstream for Fake {
    async fn list_tools(&self) -> Result<Vec<Value>, CallFailure> {
        Ok(vec![json!({"name": "echo"})])
    }

    async fn call_tool<W: Send>(
        &self,
        name: String,
        arguments: Option<JsonObject>,
        meta: Option<JsonObject>,
        progress: Option<ProgressSink>,
        _relay: Option<RelayTo>,
        interrupt: impl Future<Output = W> + Send,
    ) -> Result<Result<bytes::Bytes, CallFailure>, W> {
        let work = async {
            if name == "progress"
                && let Some(sink) = &progress
            {
                for step in [1, 2] {
                    let _ = sink.try_send(json!({"progress": step, "total": 2}).to_string());
                }
            }
            self.work(name, arguments, meta)
                .await
                .map(|v| v.to_string().into())
        };
        tokio::select! {
            done = work => Ok(done),
            why = interrupt => {
                self.interrupted.store(true, Ordering::SeqCst);
                Err(why)
            }
        }
    }
}

impl Fake {
    async fn work(
        &self,
        name: String,
        arguments: Option<JsonObject>,
        meta: Option<JsonObject>,
    ) -> Result<Value, CallFailure> {
        match name.as_str() {
            "echo" => Ok(json!({
                "content": [{"type": "text", "text": arguments.and_then(|a| a.get("message").cloned())}],
                "_meta": meta,
            })),
            "fail" => Err(CallFailure::Rpc {
                code: -32602,
                message: "Unknown tool: fail".into(),
                data: Some(json!({"x": 1})),
            }),
            "gone" => Err(CallFailure::Closed),
            "progress" => Ok(json!({"content": []})),
            _ => {
                let _flag = OnDrop(&self.hang_dropped);
                self.hang_started.notify_one();
                std::future::pending::<()>().await;
                Err(CallFailure::Closed)
            }
        }
    }
}

fn serving() -> (Arc<Shared<Fake>>, Arc<Fake>, mpsc::UnboundedReceiver<Event>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared::new(KEY.to_owned(), GEN, tx));
    let fake = Arc::new(Fake::default());
    shared.attach(fake.clone());
    (shared, fake, rx)
}

fn call(tool: &str, id: &str, generation: u64) -> CallToolRequest {
    CallToolRequest {
        generation,
        call_id: id.to_owned(),
        tool: tool.to_owned(),
        arguments_json: r#"{"message":"hi"}"#.to_owned(),
        timeout_ms: 0,
        meta_json: String::new(),
        ..CallToolRequest::default()
    }
}

/// Starts a `hang` call with id `id` and returns once the fake upstream is working on it.
async fn hanging(
    shared: &Arc<Shared<Fake>>,
    fake: &Fake,
    id: &str,
) -> tokio::task::JoinHandle<Result<CallToolReply, Status>> {
    let pending = tokio::spawn({
        let (shared, req) = (shared.clone(), call("hang", id, GEN));
        async move { shared.call(req, None).await }
    });
    fake.hang_started.notified().await;
    pending
}

/// The error a spawned call ended with.
async fn joined_error(
    pending: tokio::task::JoinHandle<Result<CallToolReply, Status>>,
) -> CallError {
    error_of(
        pending
            .await
            .unwrap_or_else(|_| Err(Status::internal("join"))),
    )
}

fn error_of(reply: Result<CallToolReply, Status>) -> CallError {
    match reply.ok().and_then(|r| r.outcome) {
        Some(call_tool_reply::Outcome::Error(e)) => e,
        other => panic!("expected an error, got {other:?}"),
    }
}
#[tokio::test]
async fn success_passes_the_result_through() {
    let (shared, _, _) = serving();
    let mut req = call("echo", "c1", GEN);
    req.meta_json = r#"{"trace":"abc"}"#.to_owned();
    let reply = shared.call(req, None).await.ok();
    assert_eq!(reply.as_ref().map(|r| r.generation), Some(GEN));
    let Some(call_tool_reply::Outcome::ResultBytes(json)) = reply.and_then(|r| r.outcome) else {
        panic!("expected a result");
    };
    let value: Value = serde_json::from_slice(&json).unwrap_or_default();
    assert_eq!(value["content"][0]["text"], "hi");
    assert_eq!(value["_meta"]["trace"], "abc");
    assert_eq!(*shared.inflight.borrow(), 0);
}

#[tokio::test]
async fn wrong_generation_is_refused() {
    let (shared, _, _) = serving();
    let e = error_of(shared.call(call("echo", "c1", GEN + 1), None).await);
    assert_eq!(e.code, -32602);
    assert_eq!(e.reason, "fenced");
    assert!(e.message.contains(&format!("generation {}", GEN + 1)));
}

#[tokio::test]
async fn not_ready_is_unavailable() {
    let (tx, _rx) = mpsc::unbounded_channel();
    let shared: Arc<Shared<Fake>> = Arc::new(Shared::new(KEY.to_owned(), GEN, tx));
    let e = error_of(shared.call(call("echo", "c1", GEN), None).await);
    assert_eq!((e.code, e.reason.as_str()), (-32603, "unavailable"));
    assert!(e.message.starts_with("[MCP_UNAVAILABLE] demo: "));
}

#[tokio::test]
async fn upstream_errors_pass_unchanged() {
    let (shared, _, _) = serving();
    let e = error_of(shared.call(call("fail", "c1", GEN), None).await);
    assert_eq!(e.code, -32602);
    assert_eq!(e.message, "Unknown tool: fail");
    assert_eq!(e.data_json, r#"{"x":1}"#);
    assert_eq!(e.reason, "upstream_error");
    let e = error_of(shared.call(call("gone", "c2", GEN), None).await);
    assert_eq!(
        e.message,
        "[MCP_UNAVAILABLE] demo: upstream connection closed"
    );
}

#[tokio::test]
async fn bad_arguments_are_rejected() {
    let (shared, _, _) = serving();
    let mut req = call("echo", "c1", GEN);
    req.arguments_json = "[1]".to_owned();
    let status = shared.call(req, None).await.err().map(|s| s.code());
    assert_eq!(status, Some(tonic::Code::InvalidArgument));
    let mut req = call("echo", "c1", GEN);
    req.arguments_json = String::new();
    assert!(shared.call(req, None).await.is_ok());
}

#[tokio::test]
async fn timeout_cancels_upstream() {
    let (shared, fake, _) = serving();
    let mut req = call("hang", "c1", GEN);
    req.timeout_ms = 30;
    let e = error_of(shared.call(req, None).await);
    assert_eq!(e.code, -32603);
    assert_eq!(e.reason, "timeout");
    assert_eq!(e.message, "[MCP_TIMEOUT] demo: tool call exceeded 30 ms");
    assert!(fake.interrupted.load(Ordering::SeqCst));
    assert!(fake.hang_dropped.load(Ordering::SeqCst));
}

#[tokio::test]
async fn cancel_answers_cancelled() {
    let (shared, fake, _) = serving();
    let service = WorkerService::new(shared.clone());
    let pending = hanging(&shared, &fake, "c9").await;
    // Wrong generation: refused, the call keeps running.
    let refused = service
        .cancel(Request::new(CancelRequest {
            generation: GEN + 1,
            call_id: "c9".into(),
        }))
        .await;
    assert_eq!(
        refused.err().map(|s| s.code()),
        Some(tonic::Code::FailedPrecondition)
    );
    let ok = service
        .cancel(Request::new(CancelRequest {
            generation: GEN,
            call_id: "c9".into(),
        }))
        .await;
    assert!(ok.is_ok());
    let e = joined_error(pending).await;
    assert_eq!(
        (e.code, e.message.as_str(), e.reason.as_str()),
        (-32800, "Request cancelled", "cancelled")
    );
    assert!(fake.interrupted.load(Ordering::SeqCst));
}

#[tokio::test]
async fn duplicate_call_ids_are_rejected() {
    let (shared, fake, _) = serving();
    let first = hanging(&shared, &fake, "dup").await;
    let second = shared.call(call("echo", "dup", GEN), None).await;
    assert_eq!(
        second.err().map(|s| s.code()),
        Some(tonic::Code::AlreadyExists)
    );
    first.abort();
}

#[tokio::test]
async fn fence_answers_in_flight_and_refuses_new_calls() {
    let (shared, fake, mut events) = serving();
    let service = WorkerService::new(shared.clone());
    let pending = hanging(&shared, &fake, "c1").await;
    let wrong = service
        .fence(Request::new(GenerationRequest {
            generation: GEN - 1,
        }))
        .await;
    assert!(wrong.is_err());
    assert!(
        service
            .fence(Request::new(GenerationRequest { generation: GEN }))
            .await
            .is_ok()
    );
    assert_eq!(events.recv().await, Some(Event::Fenced));
    let e = joined_error(pending).await;
    assert_eq!(e.code, -32603);
    assert_eq!(e.reason, "fenced");
    assert!(e.message.starts_with("[MCP_UNAVAILABLE] demo: "));
    assert!(fake.interrupted.load(Ordering::SeqCst));
    let e = error_of(shared.call(call("echo", "c2", GEN), None).await);
    assert_eq!((e.code, e.reason.as_str()), (-32602, "fenced"));
}

#[tokio::test]
async fn shutdown_drains_then_answers_the_rest() {
    let (shared, fake, mut events) = serving();
    let service = WorkerService::new(shared.clone());
    let pending = hanging(&shared, &fake, "c1").await;
    let done = service
        .shutdown(Request::new(ShutdownRequest {
            generation: GEN,
            grace_ms: 20,
        }))
        .await;
    assert!(done.is_ok());
    assert_eq!(events.recv().await, Some(Event::ShutDown));
    let e = joined_error(pending).await;
    assert_eq!((e.code, e.reason.as_str()), (-32603, "unavailable"));
    let e = error_of(shared.call(call("echo", "c2", GEN), None).await);
    assert_eq!((e.code, e.reason.as_str()), (-32602, "fenced"));
}

#[tokio::test]
async fn a_streamed_call_sends_its_progress_then_the_reply() {
    let (shared, _, _) = serving();
    let (events, mut stream) = mpsc::channel(8);
    stream_call(shared.clone(), call("progress", "p1", GEN), events).await;
    let mut seen = Vec::new();
    while let Ok(Ok(event)) = stream.try_recv() {
        seen.push(event.event);
    }
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert_eq!(
        seen[0],
        Some(call_tool_event::Event::ProgressJson(
            r#"{"progress":1,"total":2}"#.into()
        ))
    );
    assert_eq!(
        seen[1],
        Some(call_tool_event::Event::ProgressJson(
            r#"{"progress":2,"total":2}"#.into()
        ))
    );
    assert!(
        matches!(
            &seen[2],
            Some(call_tool_event::Event::Reply(CallToolReply {
                outcome: Some(call_tool_reply::Outcome::ResultBytes(_)),
                ..
            }))
        ),
        "{seen:?}"
    );
}

#[tokio::test]
async fn a_streamed_call_whose_caller_left_is_cancelled_upstream() {
    let (shared, fake, _) = serving();
    let (events, stream) = mpsc::channel(8);
    let streaming = tokio::spawn(stream_call(shared.clone(), call("hang", "s1", GEN), events));
    fake.hang_started.notified().await;
    drop(stream);
    tokio::time::timeout(Duration::from_secs(5), streaming)
        .await
        .expect("the streamed call ends when its caller leaves")
        .expect("task");
    assert!(fake.hang_dropped.load(Ordering::SeqCst));
    assert_eq!(*shared.inflight.borrow(), 0);
}

#[tokio::test]
async fn dropped_handler_cancels_upstream() {
    let (shared, fake, _) = serving();
    let pending = hanging(&shared, &fake, "c1").await;
    pending.abort();
    let _ = pending.await;
    assert!(fake.hang_dropped.load(Ordering::SeqCst));
    assert_eq!(*shared.inflight.borrow(), 0);
    assert!(shared.calls.lock().map(|c| c.is_empty()).unwrap_or(false));
}

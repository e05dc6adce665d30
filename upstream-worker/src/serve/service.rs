//! The `tutti.worker.v1.Worker` gRPC service over [`Shared`]: calls (streamed with their
//! progress and relayed requests, or not), forwarded requests, watches, `Cancel`, the
//! client's answers to relayed requests, and the kernel's `Fence` and `Shutdown`.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tonic::{Request, Response, Status};
use tutti_proto::worker::worker_server::Worker;
use tutti_proto::worker::{
    AnswerUpstreamRequestRequest, CallToolEvent, CallToolReply, CallToolRequest, CancelRequest,
    Empty, ForwardRequest, GenerationRequest, ShutdownRequest, UpstreamRequest,
    answer_upstream_request_request, call_tool_event,
};

use crate::serve::shared::{LogStream, ResourceStream, Shared};
use crate::upstream::Upstream;
use crate::upstream::relay::{RelayTo, Relayed};

/// Progress notifications of one streamed call that may wait for the gRPC stream; more are
/// dropped (progress is advisory, the answer is not).
const PROGRESS_BUFFER: usize = 64;

/// Runs one call for `CallToolStream`: its progress notifications as they come, then the
/// reply. When the caller goes away the call is dropped, which cancels it upstream (as a
/// dropped `CallTool` handler does).
pub(super) async fn stream_call<U: Upstream>(
    shared: Arc<Shared<U>>,
    request: CallToolRequest,
    events: mpsc::Sender<Result<CallToolEvent, Status>>,
) {
    let event = |event| Ok(CallToolEvent { event: Some(event) });
    let (sink, mut progress) = mpsc::channel(PROGRESS_BUFFER);
    let (relay_sink, mut relayed) = mpsc::channel(PROGRESS_BUFFER);
    let relay = (request.relay_requests || request.relay_logs).then(|| RelayTo {
        sink: relay_sink,
        requests: request.relay_requests,
        logs: request.relay_logs,
        refuse: false,
        // The frontend sends a JSON object or nothing.
        answers: serde_json::from_str(&request.input_responses_json).ok(),
    });
    let call = shared.call_relaying(request, Some(sink), relay);
    let mut call = std::pin::pin!(call);
    let outcome = loop {
        tokio::select! {
            biased;
            Some(note) = progress.recv() => {
                // Never waits on a slow caller: a note that finds the stream full is dropped
                // (progress is advisory); only the reply below waits for room.
                let _ = events.try_send(event(call_tool_event::Event::ProgressJson(note)));
            }
            Some(relayed) = relayed.recv() => {
                // A request waits for room (it must arrive); a log message is advisory.
                if let Some(relayed) = relayed_event(relayed)
                    && events.send(event(relayed)).await.is_err()
                {
                    return;
                }
            }
            outcome = &mut call => break outcome,
            () = events.closed() => return,
        }
    };
    while let Ok(note) = progress.try_recv() {
        let _ = events.try_send(event(call_tool_event::Event::ProgressJson(note)));
    }
    let last = outcome.map(|reply| CallToolEvent {
        event: Some(call_tool_event::Event::Reply(reply)),
    });
    let _ = events.send(last).await;
}

/// The stream event of one relayed request or log message.
fn relayed_event(relayed: Relayed) -> Option<call_tool_event::Event> {
    Some(match relayed {
        Relayed::Request {
            id,
            method,
            params_json,
            input,
        } => {
            let (input_key, input_round) = input.map(|i| (i.key, i.round)).unwrap_or_default();
            call_tool_event::Event::Request(UpstreamRequest {
                request_id: id,
                method,
                params_json,
                input_key,
                input_round,
            })
        }
        Relayed::Log(params) => call_tool_event::Event::LogJson(params),
        // Only on calls that refuse requests, which are never streamed with a relay.
        Relayed::Missing(_) => return None,
    })
}

/// The client's answer as the relay takes it.
fn relay_answer(
    answer: Option<answer_upstream_request_request::Answer>,
) -> crate::upstream::relay::Answer {
    use answer_upstream_request_request::Answer;
    let error = |code: i32, message: String, data: Option<serde_json::Value>| {
        rmcp::model::ErrorData::new(rmcp::model::ErrorCode(code), message, data)
    };
    match answer {
        Some(Answer::ResultJson(text)) => serde_json::from_str(&text).map_err(|e| {
            error(
                -32603,
                format!("the client's answer is not JSON: {e}"),
                None,
            )
        }),
        Some(Answer::Error(e)) => Err(error(
            e.code,
            e.message,
            serde_json::from_str(&e.data_json).ok(),
        )),
        None => Err(error(-32603, "the client gave no answer".to_owned(), None)),
    }
}

// === impl WorkerService ===

/// The gRPC service.
pub(crate) struct WorkerService<U> {
    shared: Arc<Shared<U>>,
}

impl<U> WorkerService<U> {
    pub(crate) fn new(shared: Arc<Shared<U>>) -> Self {
        Self { shared }
    }
}

#[tonic::async_trait]
impl<U: Upstream> Worker for WorkerService<U> {
    async fn call_tool(
        &self,
        request: Request<CallToolRequest>,
    ) -> Result<Response<CallToolReply>, Status> {
        self.shared
            .call(request.into_inner(), None)
            .await
            .map(Response::new)
    }

    type CallToolStreamStream = futures_util::stream::Chain<
        futures_util::stream::Iter<std::option::IntoIter<Result<CallToolEvent, Status>>>,
        tokio_stream::wrappers::ReceiverStream<Result<CallToolEvent, Status>>,
    >;

    async fn call_tool_stream(
        &self,
        request: Request<CallToolRequest>,
    ) -> Result<Response<Self::CallToolStreamStream>, Status> {
        let (events, mut stream) = mpsc::channel(PROGRESS_BUFFER + 1);
        tokio::spawn(stream_call(
            self.shared.clone(),
            request.into_inner(),
            events,
        ));
        // Answer once there is something to send: the response head then travels with the
        // first event (for a call without progress, with the reply, as for `CallTool`)
        // instead of waking the caller once more for the head alone. Dropping this future
        // (the caller left) drops `stream`, which ends the call.
        let first = stream.recv().await;
        Ok(Response::new(futures_util::StreamExt::chain(
            futures_util::stream::iter(first),
            tokio_stream::wrappers::ReceiverStream::new(stream),
        )))
    }

    async fn get_prompt(
        &self,
        request: Request<ForwardRequest>,
    ) -> Result<Response<CallToolReply>, Status> {
        let shared = &self.shared;
        shared
            .forward("prompts/get", request.into_inner())
            .await
            .map(Response::new)
    }

    async fn read_resource(
        &self,
        request: Request<ForwardRequest>,
    ) -> Result<Response<CallToolReply>, Status> {
        let shared = &self.shared;
        shared
            .forward("resources/read", request.into_inner())
            .await
            .map(Response::new)
    }

    async fn complete(
        &self,
        request: Request<ForwardRequest>,
    ) -> Result<Response<CallToolReply>, Status> {
        let shared = &self.shared;
        shared
            .forward("completion/complete", request.into_inner())
            .await
            .map(Response::new)
    }

    async fn subscribe(
        &self,
        request: Request<ForwardRequest>,
    ) -> Result<Response<CallToolReply>, Status> {
        let shared = &self.shared;
        shared
            .forward("resources/subscribe", request.into_inner())
            .await
            .map(Response::new)
    }

    async fn unsubscribe(
        &self,
        request: Request<ForwardRequest>,
    ) -> Result<Response<CallToolReply>, Status> {
        let shared = &self.shared;
        shared
            .forward("resources/unsubscribe", request.into_inner())
            .await
            .map(Response::new)
    }

    type WatchResourcesStream = ResourceStream;

    type WatchLogsStream = LogStream;

    async fn watch_logs(
        &self,
        request: Request<GenerationRequest>,
    ) -> Result<Response<Self::WatchLogsStream>, Status> {
        let generation = request.into_inner().generation;
        self.shared.unclaimed_logs(generation).map(Response::new)
    }

    async fn watch_resources(
        &self,
        request: Request<GenerationRequest>,
    ) -> Result<Response<Self::WatchResourcesStream>, Status> {
        let generation = request.into_inner().generation;
        self.shared.resource_updates(generation).map(Response::new)
    }

    async fn cancel(&self, request: Request<CancelRequest>) -> Result<Response<Empty>, Status> {
        let req = request.into_inner();
        self.shared.check_generation(req.generation)?;
        let found = self.shared.cancel(&req.call_id);
        tracing::debug!(call_id = %req.call_id, found, "cancel");
        Ok(Response::new(Empty {}))
    }

    async fn answer_upstream_request(
        &self,
        request: Request<AnswerUpstreamRequestRequest>,
    ) -> Result<Response<Empty>, Status> {
        let req = request.into_inner();
        self.shared.check_generation(req.generation)?;
        let Some(upstream) = self.shared.upstream.get() else {
            return Err(Status::failed_precondition("the upstream is not ready"));
        };
        if !upstream.answer_request(&req.request_id, relay_answer(req.answer)) {
            return Err(Status::not_found(format!(
                "no upstream request {} waits for an answer (call {})",
                req.request_id, req.call_id
            )));
        }
        Ok(Response::new(Empty {}))
    }

    async fn fence(&self, request: Request<GenerationRequest>) -> Result<Response<Empty>, Status> {
        let req = request.into_inner();
        self.shared.check_generation(req.generation)?;
        tracing::info!(generation = req.generation, "fenced by the kernel");
        self.shared.fence();
        Ok(Response::new(Empty {}))
    }

    async fn shutdown(&self, request: Request<ShutdownRequest>) -> Result<Response<Empty>, Status> {
        let req = request.into_inner();
        self.shared.check_generation(req.generation)?;
        tracing::info!(grace_ms = req.grace_ms, "shutdown requested by the kernel");
        self.shared
            .shutdown(Duration::from_millis(u64::from(req.grace_ms)))
            .await;
        Ok(Response::new(Empty {}))
    }
}

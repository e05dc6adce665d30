//! The frontend's view of the rest of the runtime: the kernel (session verification, route
//! events) and the workers (tool calls, cancellation). The HTTP layer only sees the
//! [`Backend`] trait, so it can be driven in-process by a fake in tests.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Mutex;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use tonic::transport::Channel;
use tutti_proto::kernel::routes_client::RoutesClient;
use tutti_proto::kernel::{
    AckRoutesRequest, AgentConfirmationAnswer, CallRecord, ConfirmationDecision,
    ConfirmationRequest, RouteEvent, ToolsMode, VerifySessionRequest, WatchRoutesRequest,
};
use tutti_proto::transport::{self, LocalEndpoint};
use tutti_proto::worker::worker_client::WorkerClient;
use tutti_proto::worker::{
    AnswerUpstreamRequestRequest, CallToolReply, CallToolRequest, CancelRequest, ForwardRequest,
    GenerationRequest, UpstreamRequest, call_tool_event,
};

use crate::error::Error;

/// Route events as they arrive from the kernel.
pub type RouteStream = BoxStream<'static, Result<RouteEvent, Error>>;

/// A worker's resource updates: (URI, the update's params as JSON text).
pub type ResourceUpdates = BoxStream<'static, (String, String)>;

/// A worker's log messages that no call claimed: each one's params as JSON text.
pub type UnclaimedLogs = BoxStream<'static, String>;

/// Which request beyond tools a worker forwards (one `tutti.worker.v1` RPC each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forward {
    GetPrompt,
    ReadResource,
    Complete,
    Subscribe,
    Unsubscribe,
}

/// What a worker streams ahead of a relayed call's reply (`CallToolStream`).
#[derive(Debug, Clone, PartialEq)]
pub enum WorkerEvent {
    /// One upstream progress notification's params (JSON, no token).
    Progress(String),
    /// A request from the upstream to the client.
    Request(UpstreamRequest),
    /// One upstream `notifications/message`'s params (JSON).
    Log(String),
}

/// Who a valid session token belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Identity {
    pub workspace: String,
    pub session: String,
    /// The `--tools` mode of the token (SPEC §15); `All` unless the kernel says otherwise.
    pub tools: ToolsMode,
    /// `--confirm high` (SPEC §12): high-risk calls are confirmed by the person first.
    pub confirm_high: bool,
    /// `--confirm-via` (SPEC §12): who is asked.
    pub confirm_via: ConfirmVia,
}

/// Who is asked to confirm a high-risk call (`--confirm-via`, SPEC §12).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ConfirmVia {
    /// Outside the agent: `tutti confirm`, the console (held in the kernel).
    pub person: bool,
    /// The agent's own client, by elicitation.
    pub agent: bool,
}

/// Everything the frontend needs from the kernel and the workers.
///
/// Implementations must be cheap to call concurrently: `verify_session` runs on every HTTP
/// request and `call_tool` on every tool call.
pub trait Backend: Send + Sync + 'static {
    /// `Ok(Some(identity))` for a live token, `Ok(None)` for an unknown or revoked one.
    fn verify_session<'a>(
        &'a self,
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<Identity>, Error>>;

    /// Opens the kernel's route stream: a snapshot first, then versioned changes.
    fn watch_routes(&self) -> BoxFuture<'_, Result<RouteStream, Error>>;

    /// Whether the stream from [`Backend::watch_routes`] is registered as a session cache:
    /// the kernel then waits for [`Backend::ack_routes`] of every revocation before it
    /// reports the revocation done, so verified sessions may be cached. `false` (the
    /// default) means every request is verified with the backend.
    fn caches_sessions(&self) -> bool {
        false
    }

    /// Confirms that every route event up to `revision` has been applied.
    fn ack_routes(&self, _revision: u64) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async { Ok(()) })
    }

    /// Calls a tool on the worker listening at `endpoint`.
    fn call_tool<'a>(
        &'a self,
        endpoint: &'a str,
        request: CallToolRequest,
    ) -> BoxFuture<'a, Result<CallToolReply, Error>>;

    /// [`Backend::call_tool`] for a plain call (no progress, relaying or refusal stream), which
    /// may go to the worker's frame endpoint `data_endpoint` (empty when it has
    /// none). The default ignores it.
    fn call_tool_plain<'a>(
        &'a self,
        endpoint: &'a str,
        _data_endpoint: &'a str,
        request: CallToolRequest,
    ) -> BoxFuture<'a, Result<CallToolReply, Error>> {
        self.call_tool(endpoint, request)
    }

    /// [`Backend::call_tool`] for a client that asked for progress: each of the upstream's
    /// progress notifications for the call (its params as JSON text, without a token) goes to
    /// `progress` as it comes, all before the reply. A full or closed `progress` loses them,
    /// never the call. The default (backends without progress) sends none.
    fn call_tool_with_progress<'a>(
        &'a self,
        endpoint: &'a str,
        request: CallToolRequest,
        _progress: tokio::sync::mpsc::Sender<String>,
    ) -> BoxFuture<'a, Result<CallToolReply, Error>> {
        self.call_tool(endpoint, request)
    }

    /// Forwards one request beyond tools to the worker at `endpoint`. The default
    /// (backends without workers) has none to forward to.
    fn forward<'a>(
        &'a self,
        endpoint: &'a str,
        kind: Forward,
        _request: ForwardRequest,
    ) -> BoxFuture<'a, Result<CallToolReply, Error>> {
        Box::pin(async move {
            Err(Error::WorkerUnavailable {
                endpoint: endpoint.to_owned(),
                detail: format!("{kind:?} is not supported by this backend"),
            })
        })
    }

    /// The upstream's resource updates of `generation` (params as JSON text), until that
    /// generation ends.
    fn watch_resources<'a>(
        &'a self,
        endpoint: &'a str,
        _generation: u64,
    ) -> BoxFuture<'a, Result<ResourceUpdates, Error>> {
        Box::pin(async move {
            Err(Error::WorkerUnavailable {
                endpoint: endpoint.to_owned(),
                detail: "resource updates are not supported by this backend".to_owned(),
            })
        })
    }

    /// The log messages of generation `generation` that no call claimed (`WatchLogs`),
    /// until the generation ends. The default has none.
    fn watch_logs<'a>(
        &'a self,
        endpoint: &'a str,
        _generation: u64,
    ) -> BoxFuture<'a, Result<UnclaimedLogs, Error>> {
        Box::pin(async move {
            Err(Error::WorkerUnavailable {
                endpoint: endpoint.to_owned(),
                detail: "log messages are not supported by this backend".to_owned(),
            })
        })
    }

    /// [`Backend::call_tool`] whose progress, upstream requests and log messages (as the
    /// request's `relay_requests`/`relay_logs` ask) go to `events`; requests wait for room,
    /// the rest is dropped when `events` is full. The default sends none.
    fn call_tool_relayed<'a>(
        &'a self,
        endpoint: &'a str,
        request: CallToolRequest,
        _events: tokio::sync::mpsc::Sender<WorkerEvent>,
    ) -> BoxFuture<'a, Result<CallToolReply, Error>> {
        self.call_tool(endpoint, request)
    }

    /// The client's answer to a relayed upstream request. The default refuses.
    fn answer_upstream_request<'a>(
        &'a self,
        endpoint: &'a str,
        _request: AnswerUpstreamRequestRequest,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            Err(Error::WorkerUnavailable {
                endpoint: endpoint.to_owned(),
                detail: "this backend relays no requests".to_owned(),
            })
        })
    }

    /// Cancels an in-flight call on the worker listening at `endpoint`.
    fn cancel<'a>(
        &'a self,
        endpoint: &'a str,
        request: CancelRequest,
    ) -> BoxFuture<'a, Result<(), Error>>;

    /// Called after every route change with the endpoints still routed: connections to any
    /// other endpoint may be dropped.
    fn retain_endpoints(&self, _live: &HashSet<String>) {}

    /// Reports a circuit breaker's transition to the kernel. The default discards it.
    fn report_circuit(
        &self,
        _report: tutti_proto::kernel::CircuitReport,
    ) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async { Ok(()) })
    }

    /// Holds a call for the person's confirmation (`--confirm-via person`) until it is
    /// answered or expires. The default (backends without a kernel) cannot ask anybody.
    fn await_confirmation(
        &self,
        _request: ConfirmationRequest,
    ) -> BoxFuture<'_, Result<ConfirmationDecision, Error>> {
        Box::pin(async {
            Err(Error::KernelUnavailable {
                detail: "no kernel holds confirmations here".into(),
            })
        })
    }

    /// The agent's client answered the held call `call_key` too (both channels).
    fn answer_agent_confirmation(
        &self,
        _answer: AgentConfirmationAnswer,
    ) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async { Ok(()) })
    }

    /// Streams audit records of calls to the kernel until `records` ends. The default
    /// (for backends without a kernel) discards them.
    fn record_calls(
        &self,
        mut records: tokio::sync::mpsc::Receiver<CallRecord>,
    ) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            while records.recv().await.is_some() {}
            Ok(())
        })
    }
}

/// Largest gRPC message accepted from the kernel or a worker (tool results can be large).
const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// The production backend: gRPC over the runtime's local sockets.
pub(crate) struct GrpcBackend {
    kernel_endpoint: LocalEndpoint,
    kernel: tokio::sync::Mutex<Option<RoutesClient<Channel>>>,
    /// One client per worker endpoint, on its own HTTP/2 connection without tonic's channel
    /// queue (per-call path); built once when the connection opens.
    workers: Mutex<HashMap<String, WorkerClient<transport::Connection>>>,
    /// The id of the current route stream (pid in the high half, attempt in the low half).
    watcher_id: std::sync::atomic::AtomicU64,
    /// Plain calls' frame connections; `None` with `TUTTI_DATA_PLANE=grpc`.
    frames: Option<crate::frames::FramePool>,
}

impl GrpcBackend {
    pub(crate) fn new(state_dir: &Path) -> Self {
        Self {
            kernel_endpoint: transport::kernel_endpoint(state_dir),
            kernel: tokio::sync::Mutex::new(None),
            workers: Mutex::new(HashMap::new()),
            watcher_id: std::sync::atomic::AtomicU64::new(u64::from(std::process::id()) << 32),
            frames: match crate::frames::DataPlane::from_env() {
                crate::frames::DataPlane::Frames => Some(crate::frames::FramePool::default()),
                crate::frames::DataPlane::Grpc => None,
            },
        }
    }

    async fn kernel(&self) -> Result<RoutesClient<Channel>, Error> {
        let mut slot = self.kernel.lock().await;
        if let Some(client) = slot.as_ref() {
            return Ok(client.clone());
        }
        let channel = transport::connect(&self.kernel_endpoint)
            .await
            .map_err(|e| Error::KernelUnavailable {
                detail: e.to_string(),
            })?;
        let client = RoutesClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        *slot = Some(client.clone());
        Ok(client)
    }

    async fn forget_kernel(&self) {
        *self.kernel.lock().await = None;
    }

    async fn worker(&self, endpoint: &str) -> Result<WorkerClient<transport::Connection>, Error> {
        if let Some(client) = self.lock_workers().get(endpoint) {
            return Ok(client.clone());
        }
        let connection = transport::Connection::open(&LocalEndpoint::from_wire(endpoint))
            .await
            .map_err(|e| Error::WorkerUnavailable {
                endpoint: endpoint.to_owned(),
                detail: e.to_string(),
            })?;
        let client = WorkerClient::with_origin(connection, transport::Connection::origin())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        // Two first calls may have raced here: the connection cached first is kept for both
        // (the other one closes when its client is dropped).
        Ok(self
            .lock_workers()
            .entry(endpoint.to_owned())
            .or_insert(client)
            .clone())
    }

    fn forget_worker(&self, endpoint: &str) {
        self.lock_workers().remove(endpoint);
    }

    /// A failed call or cancellation: the connection is dropped when it looks broken (the
    /// next call connects again; a `Connection` never reconnects by itself), and the status
    /// becomes the frontend's error.
    fn call_failed(&self, endpoint: &str, generation: u64, status: &tonic::Status) -> Error {
        if matches!(
            status.code(),
            tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Internal
        ) {
            self.forget_worker(endpoint);
        }
        worker_status(endpoint, generation, status)
    }

    fn lock_workers(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, WorkerClient<transport::Connection>>> {
        // A poisoned cache only ever holds clients; keep using it.
        self.workers.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn kernel_status(status: &tonic::Status) -> Error {
    Error::KernelUnavailable {
        detail: format!("{:?}: {}", status.code(), status.message()),
    }
}

fn worker_status(endpoint: &str, generation: u64, status: &tonic::Status) -> Error {
    let detail = format!("{:?}: {}", status.code(), status.message());
    match status.code() {
        tonic::Code::FailedPrecondition => Error::WorkerFenced {
            endpoint: endpoint.to_owned(),
            generation,
            detail,
        },
        tonic::Code::DeadlineExceeded => Error::WorkerTimeout {
            endpoint: endpoint.to_owned(),
            detail,
        },
        _ => Error::WorkerUnavailable {
            endpoint: endpoint.to_owned(),
            detail,
        },
    }
}

impl Backend for GrpcBackend {
    fn verify_session<'a>(
        &'a self,
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<Identity>, Error>> {
        Box::pin(async move {
            let mut client = self.kernel().await?;
            let request = VerifySessionRequest {
                token: token.to_owned(),
            };
            match client.verify_session(request).await {
                Ok(reply) => {
                    let reply = reply.into_inner();
                    Ok(reply.valid.then(|| Identity {
                        tools: reply.tools(),
                        confirm_high: reply.confirm_high,
                        confirm_via: ConfirmVia {
                            person: reply.confirm_via_person,
                            agent: reply.confirm_via_agent,
                        },
                        workspace: reply.workspace,
                        session: reply.session,
                    }))
                }
                Err(status) => {
                    if status.code() == tonic::Code::Unavailable {
                        self.forget_kernel().await;
                    }
                    Err(kernel_status(&status))
                }
            }
        })
    }

    fn watch_routes(&self) -> BoxFuture<'_, Result<RouteStream, Error>> {
        Box::pin(async move {
            // A fresh connection per watch: the old one is what just failed.
            self.forget_kernel().await;
            let mut client = self.kernel().await?;
            let watcher_id = self
                .watcher_id
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
                + 1;
            let request = WatchRoutesRequest {
                watcher_id,
                caches_sessions: true,
            };
            match client.watch_routes(request).await {
                Ok(stream) => {
                    let stream = stream
                        .into_inner()
                        .map(|item| item.map_err(|status| kernel_status(&status)));
                    Ok(stream.boxed())
                }
                Err(status) => {
                    self.forget_kernel().await;
                    Err(kernel_status(&status))
                }
            }
        })
    }

    fn caches_sessions(&self) -> bool {
        true
    }

    fn ack_routes(&self, revision: u64) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            let mut client = self.kernel().await?;
            let request = AckRoutesRequest {
                watcher_id: self.watcher_id.load(std::sync::atomic::Ordering::SeqCst),
                revision,
            };
            client
                .ack_routes(request)
                .await
                .map(|_| ())
                .map_err(|status| kernel_status(&status))
        })
    }

    fn call_tool<'a>(
        &'a self,
        endpoint: &'a str,
        request: CallToolRequest,
    ) -> BoxFuture<'a, Result<CallToolReply, Error>> {
        Box::pin(async move {
            let generation = request.generation;
            let mut client = self.worker(endpoint).await?;
            client
                .call_tool(request)
                .await
                .map(tonic::Response::into_inner)
                .map_err(|status| self.call_failed(endpoint, generation, &status))
        })
    }

    fn call_tool_plain<'a>(
        &'a self,
        endpoint: &'a str,
        data_endpoint: &'a str,
        request: CallToolRequest,
    ) -> BoxFuture<'a, Result<CallToolReply, Error>> {
        match &self.frames {
            Some(pool) if !data_endpoint.is_empty() => Box::pin(async move {
                let generation = request.generation;
                pool.call(endpoint, data_endpoint, request)
                    .await?
                    .map_err(|status| worker_status(endpoint, generation, &status))
            }),
            _ => self.call_tool(endpoint, request),
        }
    }

    fn call_tool_with_progress<'a>(
        &'a self,
        endpoint: &'a str,
        request: CallToolRequest,
        progress: tokio::sync::mpsc::Sender<String>,
    ) -> BoxFuture<'a, Result<CallToolReply, Error>> {
        Box::pin(async move {
            let generation = request.generation;
            let mut client = self.worker(endpoint).await?;
            let failed = |status: tonic::Status| self.call_failed(endpoint, generation, &status);
            let mut events = client
                .call_tool_stream(request)
                .await
                .map_err(failed)?
                .into_inner();
            while let Some(event) = events.next().await {
                match event.map_err(failed)?.event {
                    Some(call_tool_event::Event::ProgressJson(note)) => {
                        let _ = progress.try_send(note);
                    }
                    Some(call_tool_event::Event::Reply(reply)) => return Ok(reply),
                    // Not asked for on this call (relay_requests/relay_logs unset).
                    Some(
                        call_tool_event::Event::Request(_) | call_tool_event::Event::LogJson(_),
                    )
                    | None => {}
                }
            }
            Err(Error::WorkerUnavailable {
                endpoint: endpoint.to_owned(),
                detail: "the call's stream ended without a reply".to_owned(),
            })
        })
    }

    fn call_tool_relayed<'a>(
        &'a self,
        endpoint: &'a str,
        request: CallToolRequest,
        events: tokio::sync::mpsc::Sender<WorkerEvent>,
    ) -> BoxFuture<'a, Result<CallToolReply, Error>> {
        Box::pin(async move {
            let generation = request.generation;
            let mut client = self.worker(endpoint).await?;
            let failed = |status: tonic::Status| self.call_failed(endpoint, generation, &status);
            let mut stream = client
                .call_tool_stream(request)
                .await
                .map_err(failed)?
                .into_inner();
            while let Some(event) = stream.next().await {
                match event.map_err(failed)?.event {
                    Some(call_tool_event::Event::ProgressJson(note)) => {
                        let _ = events.try_send(WorkerEvent::Progress(note));
                    }
                    Some(call_tool_event::Event::LogJson(note)) => {
                        let _ = events.try_send(WorkerEvent::Log(note));
                    }
                    Some(call_tool_event::Event::Request(request)) => {
                        // Unanswered, it ends with the call: a closed receiver is fine.
                        let _ = events.send(WorkerEvent::Request(request)).await;
                    }
                    Some(call_tool_event::Event::Reply(reply)) => return Ok(reply),
                    None => {}
                }
            }
            Err(Error::WorkerUnavailable {
                endpoint: endpoint.to_owned(),
                detail: "the call's stream ended without a reply".to_owned(),
            })
        })
    }

    fn forward<'a>(
        &'a self,
        endpoint: &'a str,
        kind: Forward,
        request: ForwardRequest,
    ) -> BoxFuture<'a, Result<CallToolReply, Error>> {
        Box::pin(async move {
            let generation = request.generation;
            let mut client = self.worker(endpoint).await?;
            let reply = match kind {
                Forward::GetPrompt => client.get_prompt(request).await,
                Forward::ReadResource => client.read_resource(request).await,
                Forward::Complete => client.complete(request).await,
                Forward::Subscribe => client.subscribe(request).await,
                Forward::Unsubscribe => client.unsubscribe(request).await,
            };
            reply
                .map(tonic::Response::into_inner)
                .map_err(|status| self.call_failed(endpoint, generation, &status))
        })
    }

    fn answer_upstream_request<'a>(
        &'a self,
        endpoint: &'a str,
        request: AnswerUpstreamRequestRequest,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            let generation = request.generation;
            let mut client = self.worker(endpoint).await?;
            client
                .answer_upstream_request(request)
                .await
                .map(|_| ())
                .map_err(|status| self.call_failed(endpoint, generation, &status))
        })
    }

    fn watch_resources<'a>(
        &'a self,
        endpoint: &'a str,
        generation: u64,
    ) -> BoxFuture<'a, Result<ResourceUpdates, Error>> {
        Box::pin(async move {
            let mut client = self.worker(endpoint).await?;
            let stream = client
                .watch_resources(GenerationRequest { generation })
                .await
                .map_err(|status| self.call_failed(endpoint, generation, &status))?
                .into_inner();
            let updates = stream.filter_map(|update| {
                std::future::ready(update.ok().map(|u| (u.uri, u.params_json)))
            });
            Ok(Box::pin(updates) as ResourceUpdates)
        })
    }

    fn watch_logs<'a>(
        &'a self,
        endpoint: &'a str,
        generation: u64,
    ) -> BoxFuture<'a, Result<UnclaimedLogs, Error>> {
        Box::pin(async move {
            let mut client = self.worker(endpoint).await?;
            let stream = client
                .watch_logs(GenerationRequest { generation })
                .await
                .map_err(|status| self.call_failed(endpoint, generation, &status))?
                .into_inner();
            let logs = stream.filter_map(|log| std::future::ready(log.ok().map(|l| l.params_json)));
            Ok(Box::pin(logs) as UnclaimedLogs)
        })
    }

    fn cancel<'a>(
        &'a self,
        endpoint: &'a str,
        request: CancelRequest,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            let generation = request.generation;
            let mut client = self.worker(endpoint).await?;
            client
                .cancel(request)
                .await
                .map(|_| ())
                .map_err(|status| self.call_failed(endpoint, generation, &status))
        })
    }

    fn retain_endpoints(&self, live: &HashSet<String>) {
        self.lock_workers()
            .retain(|endpoint, _| live.contains(endpoint));
    }

    fn report_circuit(
        &self,
        report: tutti_proto::kernel::CircuitReport,
    ) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            let mut client = self.kernel().await?;
            client
                .report_circuit(report)
                .await
                .map(|_| ())
                .map_err(|status| kernel_status(&status))
        })
    }

    fn await_confirmation(
        &self,
        request: ConfirmationRequest,
    ) -> BoxFuture<'_, Result<ConfirmationDecision, Error>> {
        Box::pin(async move {
            let mut client = self.kernel().await?;
            client
                .await_confirmation(request)
                .await
                .map(tonic::Response::into_inner)
                .map_err(|status| kernel_status(&status))
        })
    }

    fn answer_agent_confirmation(
        &self,
        answer: AgentConfirmationAnswer,
    ) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            let mut client = self.kernel().await?;
            client
                .answer_agent_confirmation(answer)
                .await
                .map(|_| ())
                .map_err(|status| kernel_status(&status))
        })
    }

    fn record_calls(
        &self,
        records: tokio::sync::mpsc::Receiver<CallRecord>,
    ) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            let mut client = self.kernel().await?;
            client
                .record_calls(tokio_stream::wrappers::ReceiverStream::new(records))
                .await
                .map(|_| ())
                .map_err(|status| kernel_status(&status))
        })
    }
}

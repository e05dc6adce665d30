//! `run()` end to end over the real gRPC backend: a fake kernel and a fake worker served
//! with tonic on the runtime's local sockets, the frontend found through
//! `run/frontend.json`.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::{Request, Response, Status};
use tutti_mcp_frontend::{Config, run};
use tutti_proto::kernel::routes_server::{Routes, RoutesServer};
use tutti_proto::kernel::*;
use tutti_proto::transport;
use tutti_proto::worker::worker_server::{Worker, WorkerServer};
use tutti_proto::worker::{
    self as wk, CallToolEvent, CallToolReply, CallToolRequest, CancelRequest, ForwardRequest,
    GenerationRequest, ResourceUpdated, ShutdownRequest, call_tool_event, call_tool_reply,
};

const WAIT: Duration = Duration::from_secs(10);
const TOKEN: &str = "tts_grpc_test_token";

struct FakeKernel {
    watch: std::sync::Mutex<Option<(mpsc::UnboundedReceiver<RouteEvent>, oneshot::Sender<()>)>>,
    /// How often the valid token was verified.
    verified: Arc<AtomicUsize>,
    /// The watch request and every AckRoutes, in order.
    watch_requests: mpsc::UnboundedSender<WatchRoutesRequest>,
    acks: mpsc::UnboundedSender<AckRoutesRequest>,
}

type Reply<T> = Result<Response<T>, Status>;

fn no<T>() -> Reply<T> {
    Err(Status::unimplemented("not in this fake"))
}

#[tonic::async_trait]
impl Routes for FakeKernel {
    async fn verify_session(
        &self,
        request: Request<VerifySessionRequest>,
    ) -> Reply<VerifySessionReply> {
        let valid = request.into_inner().token == TOKEN;
        if valid {
            self.verified.fetch_add(1, Ordering::SeqCst);
        }
        Ok(Response::new(VerifySessionReply {
            valid,
            workspace: if valid { "w".into() } else { String::new() },
            session: if valid { "s".into() } else { String::new() },
            tools: 0,
            confirm_high: false,
            ..Default::default()
        }))
    }
    type WatchRoutesStream = futures_util::stream::BoxStream<'static, Result<RouteEvent, Status>>;
    async fn watch_routes(
        &self,
        request: Request<WatchRoutesRequest>,
    ) -> Reply<Self::WatchRoutesStream> {
        let _ = self.watch_requests.send(request.into_inner());
        let Some((rx, watching)) = self.watch.lock().expect("lock").take() else {
            return Err(Status::unavailable("only one watcher in this fake"));
        };
        let _ = watching.send(());
        use futures_util::StreamExt;
        Ok(Response::new(
            UnboundedReceiverStream::new(rx).map(Ok).boxed(),
        ))
    }
    async fn ack_routes(&self, request: Request<AckRoutesRequest>) -> Reply<Empty> {
        let _ = self.acks.send(request.into_inner());
        Ok(Response::new(Empty {}))
    }
    async fn record_calls(&self, _: Request<tonic::Streaming<CallRecord>>) -> Reply<Empty> {
        Err(Status::unimplemented("RecordCalls"))
    }
    async fn resolve_shim(&self, _: Request<KeyRequest>) -> Reply<ResolveShimReply> {
        no()
    }
    async fn report_circuit(
        &self,
        _: tonic::Request<tutti_proto::kernel::CircuitReport>,
    ) -> Result<tonic::Response<tutti_proto::kernel::Empty>, tonic::Status> {
        Err(tonic::Status::unimplemented("ReportCircuit"))
    }
    async fn await_confirmation(
        &self,
        _: tonic::Request<tutti_proto::kernel::ConfirmationRequest>,
    ) -> Result<tonic::Response<tutti_proto::kernel::ConfirmationDecision>, tonic::Status> {
        Err(tonic::Status::unimplemented("AwaitConfirmation"))
    }
    async fn answer_agent_confirmation(
        &self,
        _: tonic::Request<tutti_proto::kernel::AgentConfirmationAnswer>,
    ) -> Result<tonic::Response<tutti_proto::kernel::Empty>, tonic::Status> {
        Err(tonic::Status::unimplemented("AnswerAgentConfirmation"))
    }
}

struct FakeWorker {
    calls: mpsc::UnboundedSender<CallToolRequest>,
    cancels: mpsc::UnboundedSender<CancelRequest>,
}

#[tonic::async_trait]
impl Worker for FakeWorker {
    async fn call_tool(&self, request: Request<CallToolRequest>) -> Reply<CallToolReply> {
        let request = request.into_inner();
        let _ = self.calls.send(request.clone());
        if request.tool == "hang" {
            std::future::pending::<()>().await;
        }
        let result =
            json!({"content":[{"type":"text","text":request.arguments_json}],"isError":false});
        Ok(Response::new(CallToolReply {
            outcome: Some(call_tool_reply::Outcome::ResultJson(result.to_string())),
            generation: request.generation,
        }))
    }
    type CallToolStreamStream =
        tokio_stream::Iter<std::vec::IntoIter<Result<CallToolEvent, Status>>>;
    /// Two progress notifications, then the reply.
    async fn call_tool_stream(
        &self,
        request: Request<CallToolRequest>,
    ) -> Reply<Self::CallToolStreamStream> {
        let request = request.into_inner();
        let _ = self.calls.send(request.clone());
        let progress = |n: u32| {
            Ok(CallToolEvent {
                event: Some(call_tool_event::Event::ProgressJson(
                    json!({"progress": n, "total": 2, "message": format!("step {n}")}).to_string(),
                )),
            })
        };
        let reply = CallToolReply {
            outcome: Some(call_tool_reply::Outcome::ResultJson(
                json!({"content":[{"type":"text","text":"streamed"}]}).to_string(),
            )),
            generation: request.generation,
        };
        let events = vec![
            progress(1),
            progress(2),
            Ok(CallToolEvent {
                event: Some(call_tool_event::Event::Reply(reply)),
            }),
        ];
        Ok(Response::new(tokio_stream::iter(events)))
    }
    async fn cancel(&self, request: Request<CancelRequest>) -> Reply<wk::Empty> {
        let _ = self.cancels.send(request.into_inner());
        Ok(Response::new(wk::Empty {}))
    }
    async fn fence(&self, _: Request<GenerationRequest>) -> Reply<wk::Empty> {
        no()
    }
    async fn shutdown(&self, _: Request<ShutdownRequest>) -> Reply<wk::Empty> {
        no()
    }
    async fn get_prompt(&self, _: Request<ForwardRequest>) -> Reply<CallToolReply> {
        no()
    }
    async fn read_resource(&self, _: Request<ForwardRequest>) -> Reply<CallToolReply> {
        no()
    }
    async fn complete(&self, _: Request<ForwardRequest>) -> Reply<CallToolReply> {
        no()
    }
    async fn subscribe(&self, _: Request<ForwardRequest>) -> Reply<CallToolReply> {
        no()
    }
    async fn unsubscribe(&self, _: Request<ForwardRequest>) -> Reply<CallToolReply> {
        no()
    }
    type WatchResourcesStream = futures_util::stream::Empty<Result<ResourceUpdated, Status>>;
    async fn watch_resources(
        &self,
        _: Request<GenerationRequest>,
    ) -> Reply<Self::WatchResourcesStream> {
        no()
    }
    async fn answer_upstream_request(
        &self,
        _: Request<wk::AnswerUpstreamRequestRequest>,
    ) -> Reply<wk::Empty> {
        no()
    }
    type WatchLogsStream = futures_util::stream::Empty<Result<wk::LogMessage, Status>>;
    async fn watch_logs(&self, _: Request<GenerationRequest>) -> Reply<Self::WatchLogsStream> {
        no()
    }
}

fn route(endpoint: &str) -> ConnectorRoute {
    ConnectorRoute {
        key: "demo".into(),
        name: "Demo".into(),
        generation: 1,
        worker_endpoint: endpoint.into(),
        call_timeout_ms: 30_000,
        tools: vec![
            RoutedTool {
                name: "demo_echo".into(),
                upstream_name: "echo".into(),
                definition_json: json!({"name":"echo","inputSchema":{"type":"object"}}).to_string(),
                risk: "low".into(),
            },
            RoutedTool {
                name: "demo_hang".into(),
                upstream_name: "hang".into(),
                definition_json: json!({"name":"hang","inputSchema":{"type":"object"}}).to_string(),
                risk: "low".into(),
            },
        ],
        has_cli: false,
        has_mcp: true,
        ..Default::default()
    }
}

/// The fake kernel and worker on the runtime's sockets, the frontend running against them,
/// and what the fakes record.
struct Harness {
    state: PathBuf,
    routes: mpsc::UnboundedSender<RouteEvent>,
    verified: Arc<AtomicUsize>,
    watch_requests: mpsc::UnboundedReceiver<WatchRoutesRequest>,
    acks: mpsc::UnboundedReceiver<AckRoutesRequest>,
    calls: mpsc::UnboundedReceiver<CallToolRequest>,
    cancels: mpsc::UnboundedReceiver<CancelRequest>,
    frontend: tokio::task::JoinHandle<Result<(), tutti_mcp_frontend::Error>>,
    client: reqwest::Client,
    url: String,
}

impl Harness {
    /// Serves the fakes, starts the frontend, sends it the route snapshot, and reads its URL
    /// from `run/frontend.json`.
    async fn start() -> Self {
        let state: PathBuf = std::env::temp_dir().join(format!("tfe-grpc-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&state);
        transport::run_dir(&state).expect("run dir");

        let (routes, routes_rx) = mpsc::unbounded_channel();
        let (watching_tx, watching) = oneshot::channel();
        let verified = Arc::new(AtomicUsize::new(0));
        let (watch_requests_tx, watch_requests) = mpsc::unbounded_channel();
        let (acks_tx, acks) = mpsc::unbounded_channel();
        let kernel = FakeKernel {
            watch: std::sync::Mutex::new(Some((routes_rx, watching_tx))),
            verified: verified.clone(),
            watch_requests: watch_requests_tx,
            acks: acks_tx,
        };
        let incoming = transport::bind(&transport::kernel_endpoint(&state)).expect("bind kernel");
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(RoutesServer::new(kernel))
                .serve_with_incoming(incoming),
        );
        let (calls_tx, calls) = mpsc::unbounded_channel();
        let (cancels_tx, cancels) = mpsc::unbounded_channel();
        let worker_endpoint = transport::worker_endpoint(&state, 1);
        let incoming = transport::bind(&worker_endpoint).expect("bind worker");
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(WorkerServer::new(FakeWorker {
                    calls: calls_tx,
                    cancels: cancels_tx,
                }))
                .serve_with_incoming(incoming),
        );

        let frontend = tokio::spawn(run(Config::new(state.clone(), 0)));
        tokio::time::timeout(WAIT, watching)
            .await
            .expect("the frontend watches routes")
            .expect("signal");
        routes
            .send(RouteEvent {
                revision: 1,
                event: Some(route_event::Event::Snapshot(RouteSnapshot {
                    connectors: vec![route(worker_endpoint.as_str())],
                })),
            })
            .expect("snapshot");
        let url = frontend_url(&state);
        Self {
            state,
            routes,
            verified,
            watch_requests,
            acks,
            calls,
            cancels,
            frontend,
            client: reqwest::Client::new(),
            url,
        }
    }

    /// POSTs `body` with `token` as the bearer token.
    fn post(
        &self,
        body: &Value,
        token: &str,
    ) -> impl Future<Output = reqwest::Result<reqwest::Response>> + Send + 'static + use<> {
        self.client
            .post(&self.url)
            .header("authorization", format!("Bearer {token}"))
            .json(body)
            .send()
    }
}

/// The URL in `run/frontend.json`, checked against the port and pid written next to it.
fn frontend_url(state: &std::path::Path) -> String {
    let file: Value = serde_json::from_str(
        &std::fs::read_to_string(state.join("run").join("frontend.json")).expect("frontend.json"),
    )
    .expect("json");
    let url = file["url"].as_str().expect("url").to_owned();
    assert_eq!(file["pid"], std::process::id());
    assert_eq!(
        url,
        format!("http://127.0.0.1:{}/mcp/connector", file["port"])
    );
    url
}

/// A wrong token is refused; a call with the right one reaches the worker and comes back.
async fn check_plain_call(h: &mut Harness) {
    let r = h
        .post(
            &json!({"jsonrpc":"2.0","id":1,"method":"ping"}),
            "tts_wrong",
        )
        .await
        .expect("send");
    assert_eq!(r.status(), reqwest::StatusCode::UNAUTHORIZED);

    let r = h
        .post(
            &json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"demo_echo","arguments":{"a":1}}}),
            TOKEN,
        )
        .await
        .expect("send");
    let body: Value = r.json().await.expect("json");
    assert_eq!(body["result"]["content"][0]["text"], r#"{"a":1}"#, "{body}");
    let echo = h.calls.recv().await.expect("echo call recorded");
    assert_eq!((echo.tool.as_str(), echo.generation), ("echo", 1));
}

/// A client that asked for progress gets the worker's progress notifications, with its own
/// token, then the answer, as an event stream.
async fn check_progress_stream(h: &mut Harness) {
    let r = h
        .client
        .post(&h.url)
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc":"2.0","id":"p","method":"tools/call",
            "params":{"name":"demo_echo","arguments":{},"_meta":{"progressToken":"tok-1"}}}))
        .send()
        .await
        .expect("send");
    assert_eq!(
        r.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("text/event-stream")
    );
    let text = r.text().await.expect("body");
    let messages: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).expect("json event"))
        .collect();
    assert_eq!(messages.len(), 3, "{text}");
    for (n, message) in messages[..2].iter().enumerate() {
        assert_eq!(
            message,
            &json!({"jsonrpc":"2.0","method":"notifications/progress","params":{
                "progress": n + 1, "total": 2, "message": format!("step {}", n + 1),
                "progressToken": "tok-1"}})
        );
    }
    assert_eq!(messages[2]["id"], "p");
    assert_eq!(messages[2]["result"]["content"][0]["text"], "streamed");
    let streamed = h.calls.recv().await.expect("streamed call recorded");
    assert_eq!(streamed.tool, "echo");
}

/// A legacy cancellation reaches the worker over gRPC.
async fn check_cancellation(h: &mut Harness) {
    let call = tokio::spawn(h.post(
        &json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"demo_hang"}}),
        TOKEN,
    ));
    let hang = tokio::time::timeout(WAIT, h.calls.recv())
        .await
        .expect("the call reached the worker")
        .expect("worker alive");
    assert_eq!(hang.tool, "hang");
    let r = h
        .post(
            &json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}),
            TOKEN,
        )
        .await
        .expect("send");
    assert_eq!(r.status(), reqwest::StatusCode::ACCEPTED);
    let cancel = tokio::time::timeout(WAIT, h.cancels.recv())
        .await
        .expect("the cancel reached the worker")
        .expect("worker alive");
    assert_eq!(cancel.call_id, hang.call_id);
    assert_eq!(cancel.generation, 1);
    let body: Value = tokio::time::timeout(WAIT, call)
        .await
        .expect("answered")
        .expect("task")
        .expect("send")
        .json()
        .await
        .expect("json");
    assert_eq!(body["error"]["code"], -32800);
}

/// The route stream registered as a session cache (the requests so far, one verification);
/// a revocation empties the cache before it is confirmed, so the next request asks again.
async fn check_session_cache_and_revocation(h: &mut Harness) {
    let watch = h.watch_requests.try_recv().expect("the watch request");
    assert!(watch.caches_sessions, "{watch:?}");
    assert_ne!(watch.watcher_id, 0);
    let snapshot_ack = tokio::time::timeout(WAIT, h.acks.recv())
        .await
        .expect("the snapshot is confirmed")
        .expect("kernel alive");
    assert_eq!(
        (snapshot_ack.watcher_id, snapshot_ack.revision),
        (watch.watcher_id, 1)
    );
    assert_eq!(
        h.verified.load(Ordering::SeqCst),
        1,
        "the cache was not used"
    );

    h.routes
        .send(RouteEvent {
            revision: 2,
            event: Some(route_event::Event::SessionsRevoked(SessionsRevoked {
                all: false,
                workspace: "w".into(),
                session: "s".into(),
            })),
        })
        .expect("revocation");
    let ack = tokio::time::timeout(WAIT, h.acks.recv())
        .await
        .expect("the revocation is confirmed")
        .expect("kernel alive");
    assert_eq!((ack.watcher_id, ack.revision), (watch.watcher_id, 2));
    let r = h
        .post(&json!({"jsonrpc":"2.0","id":4,"method":"ping"}), TOKEN)
        .await
        .expect("send");
    assert_eq!(r.status(), reqwest::StatusCode::OK);
    assert_eq!(
        h.verified.load(Ordering::SeqCst),
        2,
        "a revoked session was answered from the cache"
    );
}

#[tokio::test]
async fn run_over_grpc_calls_workers_and_stops_on_kernel_shutdown() {
    let mut h = Harness::start().await;
    check_plain_call(&mut h).await;
    check_progress_stream(&mut h).await;
    check_cancellation(&mut h).await;
    check_session_cache_and_revocation(&mut h).await;

    h.routes
        .send(RouteEvent {
            revision: 3,
            event: Some(route_event::Event::Shutdown(RuntimeShutdown {})),
        })
        .expect("shutdown");
    let outcome = tokio::time::timeout(WAIT, h.frontend)
        .await
        .expect("stops")
        .expect("task");
    assert!(outcome.is_ok(), "{outcome:?}");
    let _ = std::fs::remove_dir_all(&h.state);
}

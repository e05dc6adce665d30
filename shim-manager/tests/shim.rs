//! The real `tutti-shim-manager` and `tutti-shim` binaries against a fake kernel served
//! in-process over the real local-socket transport.
#![cfg(unix)]

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::{Request, Response, Status};
use tutti_proto::kernel::route_event::Event;
use tutti_proto::kernel::routes_server::{Routes, RoutesServer};
use tutti_proto::kernel::{
    ConnectorRemoved, ConnectorRoute, Empty, KeyRequest, ResolveShimReply, RouteEvent,
    RouteSnapshot, RuntimeShutdown, VerifySessionReply, VerifySessionRequest, WatchRoutesRequest,
};
use tutti_proto::transport;

/// SPEC §8: shims follow the route table within one second.
const WITHIN: Duration = Duration::from_secs(1);
/// Starting a process on a loaded 2-core machine.
const STARTUP: Duration = Duration::from_secs(20);

const SECRET: &str = "s3cret value, never printed";

const FIXTURE: &str = r#"#!/usr/bin/env python3
import json, os, signal, sys

marker = os.environ.get("FIXTURE_MARKER")
if marker:
    with open(marker, "a") as f:
        f.write("ran\n")

if os.environ.get("FIXTURE_MODE") == "wait":
    def on_term(signum, frame):
        sys.stdout.write("got SIGTERM\n")
        sys.stdout.flush()
        os._exit(42)
    signal.signal(signal.SIGTERM, on_term)
    sys.stdout.write("ready %d\n" % os.getpid())
    sys.stdout.flush()
    while True:
        signal.pause()

data = sys.stdin.buffer.read()
sys.stdout.write(json.dumps({
    "args": [os.fsencode(a).hex() for a in sys.argv[1:]],
    "stdin": data.hex(),
    "secret": os.environ.get("DEMO_TOKEN"),
    "key": os.environ.get("TUTTI_CONNECTOR_KEY"),
    "caller": os.environ.get("CALLER_VAR"),
    "cwd": os.getcwd(),
    "pid": os.getpid(),
}))
sys.stdout.flush()
sys.stderr.write("to stderr\n")
sys.stderr.flush()
sys.exit(7)
"#;

// === fake kernel ===

type EventTx = mpsc::UnboundedSender<Result<RouteEvent, Status>>;

#[derive(Default)]
struct State {
    revision: u64,
    routes: BTreeMap<String, ConnectorRoute>,
    resolve: HashMap<String, ResolveShimReply>,
    watchers: Vec<EventTx>,
}

#[derive(Clone)]
struct FakeKernel {
    state: Arc<Mutex<State>>,
    connections: Arc<watch::Sender<usize>>,
}

impl FakeKernel {
    fn new() -> Self {
        Self {
            state: Arc::default(),
            connections: Arc::new(watch::channel(0).0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("fake kernel state")
    }

    fn set_resolve(&self, key: &str, reply: ResolveShimReply) {
        self.lock().resolve.insert(key.to_owned(), reply);
    }

    fn broadcast(state: &mut State, event: Event) {
        state.revision += 1;
        let event = RouteEvent {
            revision: state.revision,
            event: Some(event),
        };
        state
            .watchers
            .retain(|tx| tx.send(Ok(event.clone())).is_ok());
    }

    /// The route as it is at the start of the next `WatchRoutes` (no event).
    fn seed(&self, route: ConnectorRoute) {
        self.lock().routes.insert(route.key.clone(), route);
    }

    fn upsert(&self, route: ConnectorRoute) {
        let mut state = self.lock();
        state.routes.insert(route.key.clone(), route.clone());
        Self::broadcast(&mut state, Event::Upsert(route));
    }

    fn removed(&self, key: &str, generation: u64) {
        let mut state = self.lock();
        if state
            .routes
            .get(key)
            .is_some_and(|r| r.generation <= generation)
        {
            state.routes.remove(key);
        }
        Self::broadcast(
            &mut state,
            Event::Removed(ConnectorRemoved {
                key: key.to_owned(),
                generation,
                reason: "test".to_owned(),
                deliberate: false,
            }),
        );
    }

    fn shutdown(&self) {
        Self::broadcast(&mut self.lock(), Event::Shutdown(RuntimeShutdown {}));
    }

    /// Ends every open route stream (as a dying kernel does).
    fn end_streams(&self) {
        self.lock().watchers.clear();
    }

    async fn wait_connections(&self, n: usize) {
        let mut rx = self.connections.subscribe();
        tokio::time::timeout(STARTUP, rx.wait_for(|c| *c >= n))
            .await
            .expect("the shim manager did not open WatchRoutes in time")
            .expect("connection counter");
    }
}

fn unimplemented<T>(name: &str) -> Result<Response<T>, Status> {
    Err(Status::unimplemented(name.to_owned()))
}

#[tonic::async_trait]
impl Routes for FakeKernel {
    async fn verify_session(
        &self,
        _: Request<VerifySessionRequest>,
    ) -> Result<Response<VerifySessionReply>, Status> {
        unimplemented("VerifySession")
    }

    type WatchRoutesStream = UnboundedReceiverStream<Result<RouteEvent, Status>>;

    async fn ack_routes(
        &self,
        _: Request<tutti_proto::kernel::AckRoutesRequest>,
    ) -> Result<Response<Empty>, Status> {
        Err(Status::unimplemented("the shim manager caches no sessions"))
    }

    async fn watch_routes(
        &self,
        _: Request<WatchRoutesRequest>,
    ) -> Result<Response<Self::WatchRoutesStream>, Status> {
        let (tx, rx) = mpsc::unbounded_channel();
        {
            let mut state = self.lock();
            let snapshot = RouteEvent {
                revision: state.revision,
                event: Some(Event::Snapshot(RouteSnapshot {
                    connectors: state.routes.values().cloned().collect(),
                })),
            };
            tx.send(Ok(snapshot))
                .map_err(|_| Status::internal("receiver gone"))?;
            state.watchers.push(tx);
        }
        self.connections.send_modify(|c| *c += 1);
        Ok(Response::new(UnboundedReceiverStream::new(rx)))
    }
    async fn record_calls(
        &self,
        _: Request<tonic::Streaming<tutti_proto::kernel::CallRecord>>,
    ) -> Result<Response<Empty>, Status> {
        unimplemented("RecordCalls")
    }
    async fn resolve_shim(
        &self,
        request: Request<KeyRequest>,
    ) -> Result<Response<ResolveShimReply>, Status> {
        let key = request.into_inner().key;
        match self.lock().resolve.get(&key) {
            Some(reply) => Ok(Response::new(reply.clone())),
            None => Ok(Response::new(ResolveShimReply {
                live: false,
                status: "not installed".to_owned(),
                ..Default::default()
            })),
        }
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

/// A fake kernel listening on the state directory's kernel endpoint.
struct KernelHandle {
    fake: FakeKernel,
    task: tokio::task::JoinHandle<()>,
}

impl KernelHandle {
    fn start(state_dir: &Path, fake: FakeKernel) -> Self {
        transport::run_dir(state_dir).expect("run dir");
        let incoming = transport::bind(&transport::kernel_endpoint(state_dir)).expect("bind");
        let service = RoutesServer::new(fake.clone());
        let task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(incoming)
                .await;
        });
        Self { fake, task }
    }

    /// The kernel dies: no new connections, open streams end.
    async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
        self.fake.end_streams();
    }
}

// === helpers ===

struct Fixture {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    state: PathBuf,
    bin: PathBuf,
    entrypoint: PathBuf,
}

impl Fixture {
    fn new() -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().canonicalize().expect("canonical tempdir");
        let state = root.join("state");
        let release_bin = state.join("releases/demo/0123abcd/bin");
        std::fs::create_dir_all(&release_bin).expect("release dir");
        let entrypoint = release_bin.join("demo-cli");
        std::fs::write(&entrypoint, FIXTURE).expect("write entrypoint");
        std::fs::set_permissions(&entrypoint, std::fs::Permissions::from_mode(0o755))
            .expect("chmod entrypoint");
        Self {
            _tmp: tmp,
            bin: state.join("bin"),
            root,
            state,
            entrypoint,
        }
    }

    fn shim(&self, key: &str) -> PathBuf {
        self.bin.join(format!("tutti-connector-{key}"))
    }

    fn live(&self, generation: u64) -> ResolveShimReply {
        ResolveShimReply {
            live: true,
            status: "ready".to_owned(),
            generation,
            entrypoint: self.entrypoint.to_string_lossy().into_owned(),
            env: HashMap::from([
                ("DEMO_TOKEN".to_owned(), SECRET.to_owned()),
                ("TUTTI_CONNECTOR_KEY".to_owned(), "demo".to_owned()),
            ]),
        }
    }

    fn start_manager(&self, libexec: &Path) -> Child {
        let log = std::fs::File::create(self.root.join("shim-manager.log")).expect("log file");
        Command::new(env!("CARGO_BIN_EXE_tutti-shim-manager"))
            .arg("--state-dir")
            .arg(&self.state)
            .env("TUTTI_LIBEXEC_DIR", libexec)
            .env("RUST_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("spawn tutti-shim-manager")
    }

    fn manager_log(&self) -> String {
        std::fs::read_to_string(self.root.join("shim-manager.log")).unwrap_or_default()
    }
}

fn libexec_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_tutti-shim"))
        .parent()
        .expect("bin dir")
        .to_path_buf()
}

fn route(key: &str, generation: u64, has_cli: bool) -> ConnectorRoute {
    ConnectorRoute {
        key: key.to_owned(),
        name: key.to_uppercase(),
        generation,
        has_cli,
        ..Default::default()
    }
}

async fn wait_until(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

struct Ran {
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: String,
}

async fn run_shim(
    program: &Path,
    args: &[OsString],
    envs: &[(&str, &Path)],
    cwd: &Path,
    stdin: &[u8],
) -> Ran {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(cwd)
        .env("CALLER_VAR", "from the caller")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (name, value) in envs {
        cmd.env(name, value);
    }
    let mut child = cmd.spawn().expect("spawn shim");
    let mut input = child.stdin.take().expect("stdin");
    // The shim may exit without reading (exit 69): a broken pipe is fine.
    let _ = input.write_all(stdin).await;
    drop(input);
    let out = tokio::time::timeout(STARTUP, child.wait_with_output())
        .await
        .expect("shim finished")
        .expect("shim output");
    Ran {
        status: out.status,
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn tricky_args() -> Vec<OsString> {
    vec![
        "two words".into(),
        "it's \"quoted\" $HOME `id` ; | *".into(),
        "ünïcødé ✓ 日本語".into(),
        "".into(),
        "--flag=a b".into(),
        "\\back\\slash\n2nd line".into(),
        OsString::from_vec(b"raw\xff\xfe bytes".to_vec()),
    ]
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Runs the echo mode of the fixture through `program` and checks everything it saw.
async fn assert_echo_run(fx: &Fixture, program: &Path) {
    let marker = fx.root.join("marker-echo");
    let cwd = fx.root.join("caller cwd ü");
    std::fs::create_dir_all(&cwd).expect("cwd");
    let args = tricky_args();
    let stdin = "line one\nzwei ✓\n".as_bytes();
    let ran = run_shim(program, &args, &[("FIXTURE_MARKER", &marker)], &cwd, stdin).await;
    assert_eq!(ran.status.code(), Some(7), "stderr: {}", ran.stderr);
    assert_eq!(ran.stderr, "to stderr\n");
    assert!(!ran.stderr.contains(SECRET));
    let report: serde_json::Value = serde_json::from_slice(&ran.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not the fixture's JSON ({e}): {:?}",
            String::from_utf8_lossy(&ran.stdout)
        )
    });
    let want_args: Vec<String> = args.iter().map(|a| hex(a.as_encoded_bytes())).collect();
    assert_eq!(report["args"], serde_json::json!(want_args));
    assert_eq!(report["stdin"], hex(stdin));
    assert_eq!(report["secret"], SECRET);
    assert_eq!(report["key"], "demo");
    assert_eq!(report["caller"], "from the caller");
    assert_eq!(report["cwd"], cwd.to_string_lossy().as_ref());
    assert!(marker.exists(), "the entrypoint ran");
}

/// Snapshot: the cli connector's shim appears; stale ones go; others stay.
async fn assert_snapshot_published(fx: &Fixture, shim: &Path) {
    wait_until("shim published from the snapshot", WITHIN, || shim.exists()).await;
    wait_until("stale shims swept", WITHIN, || {
        !fx.shim("stale").exists() && !fx.bin.join(".tutti-connector-stale.shim").exists()
    })
    .await;
    assert!(fx.bin.join("someone-elses-tool").exists());
    assert!(!fx.shim("mcponly").exists());
    assert_eq!(
        std::fs::metadata(&fx.bin)
            .expect("bin")
            .permissions()
            .mode()
            & 0o777,
        0o755
    );
    assert_eq!(
        std::fs::metadata(shim).expect("shim").permissions().mode() & 0o777,
        0o755
    );
    let content = std::fs::read_to_string(shim).expect("shim text");
    let want = format!(
        "#!{} tutti-shim:v1:demo:{}\n",
        Path::new(env!("CARGO_BIN_EXE_tutti-shim")).display(),
        fx.state.display()
    );
    assert!(content.starts_with(&want), "{content:?} vs {want:?}");
}

/// Exec: the shim's pid is the entrypoint's, and SIGTERM reaches it.
async fn assert_exec_keeps_pid_and_signals(shim: &Path) {
    let mut child = Command::new(shim)
        .env("FIXTURE_MODE", "wait")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn shim");
    let pid = child.id().expect("pid");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let ready = tokio::time::timeout(STARTUP, lines.next_line())
        .await
        .expect("ready in time")
        .expect("read")
        .expect("a ready line");
    assert_eq!(
        ready,
        format!("ready {pid}"),
        "the shim exec'd the entrypoint"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(pid).expect("pid fits")),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("kill");
    let after = tokio::time::timeout(STARTUP, lines.next_line())
        .await
        .expect("handler ran")
        .expect("read");
    assert_eq!(after.as_deref(), Some("got SIGTERM"));
    let status = child.wait().await.expect("wait");
    assert_eq!(status.code(), Some(42));
}

/// Removal: the shim goes; a copy taken before runs nothing and exits 69.
async fn assert_removal_fences_copies(
    fx: &Fixture,
    fake: &FakeKernel,
    shim: &Path,
    copy: &Path,
    marker: &Path,
) {
    std::fs::copy(shim, copy).expect("copy shim");
    fake.set_resolve(
        "demo",
        ResolveShimReply {
            live: false,
            status: "stopped".to_owned(),
            ..Default::default()
        },
    );
    fake.removed("demo", 1);
    wait_until("shim removed", WITHIN, || !shim.exists()).await;
    let ran = run_shim(
        copy,
        &tricky_args(),
        &[("FIXTURE_MARKER", marker)],
        &fx.root,
        b"",
    )
    .await;
    assert_eq!(ran.status.code(), Some(69));
    assert_eq!(
        ran.stderr,
        "tutti-connector-demo: connector demo is not available (stopped)\n"
    );
    assert!(ran.stdout.is_empty());
    assert!(!marker.exists(), "the entrypoint must not run");
}

/// Generations: a removal for an older generation leaves a newer shim alone.
async fn assert_generations_order_removals(fx: &Fixture, fake: &FakeKernel, shim: &Path) {
    fake.set_resolve("demo", fx.live(3));
    fake.upsert(route("demo", 3, true));
    wait_until("shim republished for generation 3", WITHIN, || {
        shim.exists()
    })
    .await;
    fake.removed("demo", 2);
    fake.upsert(route("nocli", 4, false));
    fake.upsert(route("other", 5, true));
    // Events are applied in order: once `other` exists, the two before it were handled.
    wait_until("other shim published", WITHIN, || fx.shim("other").exists()).await;
    assert!(
        shim.exists(),
        "removed(2) must not remove generation 3's shim"
    );
    assert!(!fx.shim("nocli").exists());
    fake.removed("demo", 3);
    wait_until("shim removed by its own generation", WITHIN, || {
        !shim.exists()
    })
    .await;
}

// === tests ===

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shims_follow_routes_run_entrypoints_and_fence() {
    let fx = Fixture::new();
    std::fs::create_dir_all(&fx.bin).expect("bin");
    std::fs::write(fx.shim("stale"), "#!/bin/false\n").expect("stale shim");
    std::fs::write(fx.bin.join(".tutti-connector-stale.shim"), "x").expect("stale sidecar");
    std::fs::write(fx.bin.join("someone-elses-tool"), "keep me").expect("unrelated");

    let fake = FakeKernel::new();
    fake.seed(route("demo", 1, true));
    fake.seed(route("mcponly", 1, false));
    fake.set_resolve("demo", fx.live(1));
    let kernel = KernelHandle::start(&fx.state, fake.clone());
    let mut manager = fx.start_manager(&libexec_dir());
    fake.wait_connections(1).await;

    let shim = fx.shim("demo");
    assert_snapshot_published(&fx, &shim).await;
    // Running it: args, stdin, stdout/stderr, exit code, env, cwd.
    assert_echo_run(&fx, &shim).await;

    assert_exec_keeps_pid_and_signals(&shim).await;
    let copy = fx.root.join("copy-of-shim");
    let marker = fx.root.join("marker-removed");
    assert_removal_fences_copies(&fx, &fake, &shim, &copy, &marker).await;
    assert_generations_order_removals(&fx, &fake, &shim).await;

    // Kernel gone: the shim says so and runs nothing.
    kernel.stop().await;
    let ran = run_shim(&copy, &[], &[("FIXTURE_MARKER", &marker)], &fx.root, b"").await;
    assert_eq!(ran.status.code(), Some(69));
    assert_eq!(
        ran.stderr,
        "tutti-connector-demo: connector demo is not available (kernel not running)\n"
    );
    assert!(!marker.exists(), "the entrypoint must not run");

    let status = tokio::time::timeout(STARTUP, manager.wait())
        .await
        .expect("manager exits once the kernel is gone")
        .expect("wait");
    assert!(!status.success(), "log:\n{}", fx.manager_log());
    assert!(!fx.manager_log().contains(SECRET));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnects_within_five_seconds_then_gives_up() {
    let fx = Fixture::new();
    let first = FakeKernel::new();
    first.seed(route("alpha", 1, true));
    let kernel = KernelHandle::start(&fx.state, first.clone());
    let mut manager = fx.start_manager(&libexec_dir());
    first.wait_connections(1).await;
    wait_until("alpha published", WITHIN, || fx.shim("alpha").exists()).await;

    // The kernel restarts with a different table: the new snapshot wins.
    kernel.stop().await;
    let second = FakeKernel::new();
    second.seed(route("beta", (2 << 32) | 1, true));
    let kernel = KernelHandle::start(&fx.state, second.clone());
    tokio::time::timeout(Duration::from_secs(5), second.wait_connections(1))
        .await
        .expect("reconnected within 5 s");
    wait_until("beta published, alpha swept", WITHIN, || {
        fx.shim("beta").exists() && !fx.shim("alpha").exists()
    })
    .await;

    // The kernel stays away: the manager gives up after about 5 s, non-zero.
    let gone = Instant::now();
    kernel.stop().await;
    let status = tokio::time::timeout(STARTUP, manager.wait())
        .await
        .expect("manager gives up")
        .expect("wait");
    let waited = gone.elapsed();
    assert!(!status.success(), "log:\n{}", fx.manager_log());
    assert!(
        waited >= Duration::from_secs(4),
        "gave up after {waited:?}, expected about 5 s of retries; log:\n{}",
        fx.manager_log()
    );
    // Without a kernel no generation is live: the manager leaves no shim behind.
    assert_eq!(leftover_shims(&fx.bin), Vec::<String>::new());
}

/// Names of our files left in `bin/` (shims, sidecars, temp files).
fn leftover_shims(bin: &Path) -> Vec<String> {
    std::fs::read_dir(bin)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.trim_start_matches('.').starts_with("tutti-connector-"))
                .collect()
        })
        .unwrap_or_default()
}

/// Publishes two shims, plus a stale one a previous manager left behind.
async fn manager_with_two_shims(fx: &Fixture, fake: &FakeKernel) -> Child {
    std::fs::create_dir_all(&fx.bin).expect("bin dir");
    std::fs::write(fx.shim("stale"), b"#!/bin/sh\n").expect("stale shim");
    fake.seed(route("alpha", 1, true));
    fake.seed(route("beta", 2, true));
    let manager = fx.start_manager(&libexec_dir());
    fake.wait_connections(1).await;
    wait_until("shims published", WITHIN, || {
        fx.shim("alpha").exists() && fx.shim("beta").exists() && !fx.shim("stale").exists()
    })
    .await;
    manager
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_event_removes_every_shim_and_exits_zero() {
    let fx = Fixture::new();
    let fake = FakeKernel::new();
    let _kernel = KernelHandle::start(&fx.state, fake.clone());
    let mut manager = manager_with_two_shims(&fx, &fake).await;
    fake.shutdown();
    let status = tokio::time::timeout(STARTUP, manager.wait())
        .await
        .expect("manager exits on shutdown")
        .expect("wait");
    assert!(status.success(), "log:\n{}", fx.manager_log());
    assert_eq!(leftover_shims(&fx.bin), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_removes_every_shim_and_exits_zero() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let fx = Fixture::new();
    let fake = FakeKernel::new();
    let _kernel = KernelHandle::start(&fx.state, fake.clone());
    let mut manager = manager_with_two_shims(&fx, &fake).await;
    let pid = manager
        .id()
        .and_then(|p| i32::try_from(p).ok())
        .expect("pid");
    kill(Pid::from_raw(pid), Signal::SIGTERM).expect("SIGTERM");
    let status = tokio::time::timeout(STARTUP, manager.wait())
        .await
        .expect("manager exits on SIGTERM")
        .expect("wait");
    assert!(status.success(), "{status}; log:\n{}", fx.manager_log());
    assert_eq!(leftover_shims(&fx.bin), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_launcher_path_publishes_a_copy_with_sidecar() {
    let fx = Fixture::new();
    // A launcher path too long for a `#!` line.
    let libexec = fx.root.join("l".repeat(240));
    std::fs::create_dir_all(&libexec).expect("libexec");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_tutti-shim"), libexec.join("tutti-shim"))
        .expect("symlink launcher");

    let fake = FakeKernel::new();
    fake.seed(route("demo", 1, true));
    fake.set_resolve("demo", fx.live(1));
    let _kernel = KernelHandle::start(&fx.state, fake.clone());
    let _manager = fx.start_manager(&libexec);
    fake.wait_connections(1).await;

    let shim = fx.shim("demo");
    let sidecar = fx.bin.join(".tutti-connector-demo.shim");
    wait_until("copy published", WITHIN, || {
        shim.exists() && sidecar.exists()
    })
    .await;
    let head = std::fs::read(&shim).expect("read copy");
    assert!(
        !head.starts_with(b"#!"),
        "a copy of the launcher, not a script"
    );
    assert_eq!(
        std::fs::read_to_string(&sidecar).expect("sidecar"),
        format!("tutti-shim:v1:demo:{}\n", fx.state.display())
    );

    assert_echo_run(&fx, &shim).await;

    fake.removed("demo", 1);
    wait_until("copy and sidecar removed", WITHIN, || {
        !shim.exists() && !sidecar.exists()
    })
    .await;
}

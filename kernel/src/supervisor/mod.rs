//! Supervision of connectors: one actor task per installed connector owns its worker
//! processes and interprets the effects of its lifecycle (`lifecycle/`), which decides
//! everything else. The frontend and the shim manager are supervised by `services`.

pub(crate) mod probe;
pub(crate) mod restart;
pub(crate) mod services;
#[allow(unsafe_code)]
pub(crate) mod spawn;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, oneshot};
use tutti_proto::transport;
use tutti_proto::worker as wpb;
use tutti_rules::{child_env, timing};

use crate::lifecycle::{self, Effect, Facts, Input, Msg, View};
use crate::state::{ConnState, Inner, Kernel, LiveRelease, Pending, lock, sha256, unix_ms};
use spawn::ChildSpec;

/// How long calls in flight may take to finish when the runtime shuts down (SPEC §4 "drain
/// calls"); what still runs then is answered `[MCP_UNAVAILABLE]` and cancelled upstream.
pub const SHUTDOWN_DRAIN: Duration = timing::WORKER_DRAIN;
/// The same when a connector is uninstalled: its user asked for it to be gone.
pub const UNINSTALL_DRAIN: Duration = Duration::from_secs(2);

/// A started worker process, as its actor holds it.
pub struct WorkerHandle {
    /// Asks the process to stop, letting calls finish for the given grace period.
    pub stop: Option<oneshot::Sender<Duration>>,
    /// Resolves (with an error) once the process is reaped.
    pub reaped: Option<oneshot::Receiver<()>>,
}

/// What a worker is started with.
pub struct WorkerStart<'a> {
    pub k: &'a Kernel,
    pub key: &'a str,
    pub generation: u64,
    /// Its identity (only its hash stays in the kernel).
    pub token: &'a str,
    pub endpoint: transport::LocalEndpoint,
    /// Where the process's exit is reported (`Input::Exited`).
    pub events: mpsc::UnboundedSender<Msg>,
}

/// Starts worker processes. The real one runs `tutti-upstream-worker` (`spawn.rs`); tests
/// use a fake.
pub trait Spawner: Send + Sync + 'static {
    fn start(&self, w: WorkerStart<'_>) -> Result<WorkerHandle, String>;

    /// Whether the release copy a worker is about to run still holds the content its name
    /// says (SPEC §12). Runs on the blocking pool before every spawn.
    fn verify_release(&self, release: &std::path::Path, sha: &str) -> Result<(), String> {
        crate::release::verify_copy(release, sha)
    }
}

/// Makes the connector's actor look at its registry entry again (after an install, a
/// connect, a login), starting the actor if it has none.
pub fn reload(k: &Arc<Kernel>, key: &str) {
    let tx = lock(&k.inner).actors.get(key).cloned();
    match tx {
        Some(tx) => {
            let _ = tx.send(Msg::step(Input::Reload));
        }
        None => {
            start_actor(k, key);
        }
    }
}

/// Starts the actor of `key` with the real spawner and registers its mailbox.
pub fn start_actor(k: &Arc<Kernel>, key: &str) -> mpsc::UnboundedSender<Msg> {
    start_actor_with(k, key, Arc::new(ProcessSpawner))
}

/// Starts the actor of `key` with `spawner`, registers its mailbox and reloads it.
pub fn start_actor_with(
    k: &Arc<Kernel>,
    key: &str,
    spawner: Arc<dyn Spawner>,
) -> mpsc::UnboundedSender<Msg> {
    let (tx, rx) = mpsc::unbounded_channel();
    let actor = Actor {
        k: k.clone(),
        key: key.to_string(),
        tx: tx.clone(),
        spawner,
        handles: BTreeMap::new(),
    };
    lock(&k.inner).actors.insert(key.to_string(), tx.clone());
    tokio::spawn(actor.run(rx));
    let _ = tx.send(Msg::step(Input::Reload));
    tx
}

/// Steps the connector `key` with an input that has no process effects (install,
/// disconnect) and carries them out now, under the caller's lock.
pub fn step_now(k: &Kernel, inner: &mut Inner, key: &str, input: Input) {
    for effect in step(k, inner, key, input) {
        match effect {
            Effect::Fence { generation, reason } => k.fence(inner, key, generation, &reason),
            Effect::Audit(event) => k.audit.record(event),
            other => tracing::error!(key, ?other, "effect without an actor ignored"),
        }
    }
}

/// One step of `key`'s lifecycle with the facts of now.
fn step(k: &Kernel, inner: &mut Inner, key: &str, input: Input) -> Vec<Effect> {
    let now = k.now();
    let mut facts = Facts {
        now,
        unix_ms: unix_ms(SystemTime::now()),
        jitter: f64::from(now.subsec_nanos() % 1000) / 1000.0,
        installed: view(k, inner, key),
        table_live: inner.table.live(key).is_some(),
        next_generation: &mut || k.draw_generation(),
    };
    let conn = inner
        .conns
        .entry(key.to_string())
        .or_insert_with(|| ConnState::new(key));
    conn.life.step(input, &mut facts)
}

/// The installed connector as the lifecycle needs it; `None` when not installed or its
/// manifest cannot be read.
fn view(k: &Kernel, inner: &Inner, key: &str) -> Option<View> {
    let installed = inner.registry.connectors.get(key)?;
    let m = inner.manifests.get(key)?;
    let auth_ready = installed.auth == crate::registry::AuthState::Ready;
    let waits_for_secrets = installed.upgrade_waits_for_secrets();
    let names = m.secret_names();
    // Only a connector that waits for credentials shows which, from what the secret store
    // keeps in memory (updated by every connect, disconnect, login and refresh): no file read.
    let oauth = crate::connect::oauth_record::oauth_of(m).is_some();
    let auth_hint = if auth_ready {
        String::new()
    } else if oauth && !k.secrets.logged_in(key) {
        format!("needs a login; run `tutti connector connect {key}`")
    } else {
        lifecycle::auth_hint(key, &k.secrets.missing(key, &names))
    };
    Some(View {
        version: m.version.clone(),
        release: installed.release_dir.clone(),
        has_mcp: m.mcp.is_some(),
        start_ms: m.start_ms,
        auth_ready,
        waits_for_secrets,
        upgrade_pending: installed.previous.is_some(),
        auth_hint,
        connect_command: lifecycle::connect_command(key, &names),
        log_path: k.paths.connector_log(key).display().to_string(),
        pin: installed.pin.clone(),
        trust_updates: installed.trust_updates,
    })
}

struct Actor {
    k: Arc<Kernel>,
    key: String,
    tx: mpsc::UnboundedSender<Msg>,
    spawner: Arc<dyn Spawner>,
    handles: BTreeMap<u64, WorkerHandle>,
}

/// An effect that runs outside the state lock.
enum Later {
    Spawn { generation: u64, token: String },
    Stop { generation: u64, grace: Duration },
    StopAll { drain: Duration },
    Timer { after: Duration, input: Input },
}

impl Actor {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Msg>) {
        while let Some(msg) = rx.recv().await {
            let stop = matches!(msg.input, Input::Stop { .. });
            let answer = self.handle(msg.input).await;
            if let Some(reply) = msg.reply {
                let _ = reply.send(answer.unwrap_or(Ok(())));
            }
            if stop {
                return;
            }
        }
    }

    /// Steps the lifecycle (and the inputs its effects answer with), carrying out the state
    /// effects under the lock and the process effects after it.
    async fn handle(&mut self, input: Input) -> Option<Result<(), String>> {
        let mut answer = None;
        let mut later = Vec::new();
        let mut queue = VecDeque::from([self.redacted(input)]);
        while let Some(input) = queue.pop_front() {
            let mut inner = lock(&self.k.inner);
            for effect in step(&self.k, &mut inner, &self.key, input) {
                self.apply(&mut inner, effect, &mut queue, &mut later, &mut answer);
            }
        }
        for effect in later {
            self.run_later(effect).await;
        }
        answer
    }

    /// Texts from workers are redacted once, as they enter (they are shown by `status`).
    fn redacted(&self, input: Input) -> Input {
        match input {
            Input::Exited { generation, detail } => Input::Exited {
                generation,
                detail: self.k.redact(&detail),
            },
            // The worker's periodic non-JSON count is its own text and changes nothing the
            // lifecycle shows: no need to read every stored secret for it once a second.
            Input::Report {
                kind: lifecycle::ReportKind::NonJsonStdout,
                ..
            } => input,
            Input::Report {
                generation,
                kind,
                message,
            } => Input::Report {
                generation,
                kind,
                message: self.k.redact(&message),
            },
            other => other,
        }
    }

    fn apply(
        &self,
        inner: &mut Inner,
        effect: Effect,
        queue: &mut VecDeque<Input>,
        later: &mut Vec<Later>,
        answer: &mut Option<Result<(), String>>,
    ) {
        let (k, key) = (&self.k, self.key.as_str());
        match effect {
            Effect::Spawn {
                generation,
                release,
            } => match self.identity(inner, generation, release) {
                Ok(token) => later.push(Later::Spawn { generation, token }),
                Err(detail) => queue.push_back(Input::Exited { generation, detail }),
            },
            Effect::StartTimer { generation, after } => later.push(Later::Timer {
                after,
                input: Input::StartTimeout(generation),
            }),
            Effect::RetryAfter { epoch, after } => later.push(Later::Timer {
                after,
                input: Input::Retry(epoch),
            }),
            Effect::Stop { generation, grace } => later.push(Later::Stop { generation, grace }),
            Effect::StopAll { drain } => later.push(Later::StopAll { drain }),
            Effect::Forget { generation } => {
                if let Some(c) = inner.conns.get_mut(key) {
                    c.workers.remove(&generation);
                }
            }
            Effect::ForgetAll => {
                if let Some(c) = inner.conns.get_mut(key) {
                    c.workers.clear();
                }
            }
            Effect::Fence { generation, reason } => k.fence(inner, key, generation, &reason),
            Effect::Commit {
                generation,
                tools,
                release,
            } => k.commit(inner, key, generation, tools, release),
            Effect::Abandon { why } => {
                let note = k.abandon_upgrade(inner, key, &why);
                queue.push_back(Input::Abandoned {
                    note,
                    why: k.redact(&why),
                });
            }
            Effect::Audit(event) => k.audit.record(event),
            Effect::Answer(a) => *answer = Some(a),
            Effect::Pin(pin) => k.store_pin(inner, key, pin),
        }
    }

    /// Draws the identity of a new worker and records it (with the release it runs) before
    /// the process exists; returns its token.
    fn identity(
        &self,
        inner: &mut Inner,
        generation: u64,
        release_dir: std::path::PathBuf,
    ) -> Result<String, String> {
        self.k.reserve_generation(inner, generation);
        let token = crate::sessions::tokens::new_token()
            .map_err(|e| format!("cannot draw random bytes: {e}"))?;
        let Some(manifest) = inner.manifests.get(&self.key).cloned() else {
            return Err("the installed manifest is gone".into());
        };
        let endpoint = transport::worker_endpoint(&self.k.paths.state, generation);
        let conn = inner
            .conns
            .entry(self.key.clone())
            .or_insert_with(|| ConnState::new(&self.key));
        conn.workers.insert(
            generation,
            Pending {
                token_hash: sha256(&token),
                endpoint: endpoint.to_string(),
                data_endpoint: String::new(),
                release: LiveRelease {
                    release_dir,
                    manifest,
                },
            },
        );
        Ok(token)
    }

    async fn run_later(&mut self, effect: Later) {
        match effect {
            Later::Spawn { generation, token } => match self.release_check(generation).await {
                Ok(()) => self.spawn(generation, &token),
                Err(detail) => self.spawn_failed(generation, detail),
            },
            Later::Stop { generation, grace } => {
                if let Some(stop) = self
                    .handles
                    .get_mut(&generation)
                    .and_then(|h| h.stop.take())
                {
                    let _ = stop.send(grace);
                }
            }
            Later::StopAll { drain } => self.stop_all(drain).await,
            Later::Timer { after, input } => {
                let tx = self.tx.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(after).await;
                    let _ = tx.send(Msg::step(input));
                });
            }
        }
    }

    fn spawn(&mut self, generation: u64, token: &str) {
        let endpoint = transport::worker_endpoint(&self.k.paths.state, generation);
        let started = self.spawner.start(WorkerStart {
            k: &self.k,
            key: &self.key,
            generation,
            token,
            endpoint,
            events: self.tx.clone(),
        });
        match started {
            Ok(handle) => {
                self.handles.insert(generation, handle);
            }
            Err(detail) => self.spawn_failed(generation, detail),
        }
    }

    /// A worker that could not be started: its identity goes, the lifecycle hears it exited.
    fn spawn_failed(&mut self, generation: u64, detail: String) {
        if let Some(c) = lock(&self.k.inner).conns.get_mut(&self.key) {
            c.workers.remove(&generation);
        }
        let _ = self
            .tx
            .send(Msg::step(Input::Exited { generation, detail }));
    }

    /// SPEC §12, what runs is what was confirmed: the release copy `generation` is to run
    /// is verified against the SHA-256 it was installed as (off the runtime thread).
    async fn release_check(&self, generation: u64) -> Result<(), String> {
        let target = {
            let inner = lock(&self.k.inner);
            inner
                .conns
                .get(&self.key)
                .and_then(|c| c.workers.get(&generation))
                .map(|w| w.release.release_dir.clone())
                .and_then(|dir| installed_sha(&inner, &self.key, &dir).map(|sha| (dir, sha)))
        };
        let Some((dir, sha)) = target else {
            return Ok(());
        };
        let spawner = self.spawner.clone();
        tokio::task::spawn_blocking(move || spawner.verify_release(&dir, &sha))
            .await
            .map_err(|e| format!("release check task: {e}"))?
            .map_err(|why| format!("{why}; reinstall it with `tutti connector install DIR`"))
    }

    /// Every watcher drops its sender once the process is reaped and its group swept (a
    /// worker gets `drain`, then SIGTERM and SIGKILL after 2 s each).
    async fn stop_all(&mut self, drain: Duration) {
        let mut reaped = Vec::new();
        for (_, mut h) in std::mem::take(&mut self.handles) {
            if let Some(stop) = h.stop.take() {
                let _ = stop.send(drain);
            }
            if let Some(r) = h.reaped.take() {
                reaped.push(r);
            }
        }
        let _ = tokio::time::timeout(
            drain + timing::WORKER_REAP_AFTER_DRAIN,
            futures_util::future::join_all(reaped),
        )
        .await;
    }
}

/// The SHA-256 `release_dir` of `key` was installed as (the current release or one it
/// falls back to).
fn installed_sha(inner: &Inner, key: &str, release_dir: &std::path::Path) -> Option<String> {
    let mut entry = inner.registry.connectors.get(key);
    while let Some(e) = entry {
        if e.release_dir == release_dir {
            return Some(e.sha256.clone());
        }
        entry = e.previous.as_deref();
    }
    None
}

/// The real spawner: `tutti-upstream-worker` as a child process, watched by its own task.
struct ProcessSpawner;

impl Spawner for ProcessSpawner {
    fn start(&self, w: WorkerStart<'_>) -> Result<WorkerHandle, String> {
        let log = crate::housekeeping::open_log(&w.k.paths.connector_log(w.key)).ok();
        let env = child_env::worker(child_env::from_process, w.key, w.generation, w.token);
        let program = w.k.paths.sibling("tutti-upstream-worker");
        let spec = ChildSpec {
            program: &program,
            // The key (not secret) only so that `ps` tells workers apart.
            args: vec![
                "--state-dir".into(),
                w.k.paths.state.to_string_lossy().into_owned(),
                "--key".into(),
                w.key.to_string(),
            ],
            env,
            stderr: log,
            death_signal_term: true,
            listener: None,
        };
        let child =
            spawn::spawn(spec).map_err(|e| format!("cannot start {}: {e}", program.display()))?;
        tracing::info!(key = %w.key, generation = w.generation, pid = child.id(), "worker spawned");
        let (stop_tx, stop_rx) = oneshot::channel();
        let (reaped_tx, reaped_rx) = oneshot::channel();
        let data_endpoint = transport::worker_data_endpoint(&w.k.paths.state, w.generation);
        tokio::spawn(watch_worker(
            w.events,
            child,
            w.generation,
            (w.endpoint, data_endpoint),
            stop_rx,
            (reaped_tx, w.k.memory.clone()),
        ));
        Ok(WorkerHandle {
            stop: Some(stop_tx),
            reaped: Some(reaped_rx),
        })
    }
}

/// Owns one worker process: reports its exit; on request stops it (gRPC Shutdown, then
/// SIGTERM to the group, then SIGKILL).
async fn watch_worker(
    tx: mpsc::UnboundedSender<Msg>,
    mut child: tokio::process::Child,
    generation: u64,
    (endpoint, data_endpoint): (transport::LocalEndpoint, transport::LocalEndpoint),
    stop: oneshot::Receiver<Duration>,
    (reaped, memory): (oneshot::Sender<()>, tutti_os::memory::AfterChanges),
) {
    let pid = child.id();
    let detail = tokio::select! {
        status = child.wait() => match status {
            Ok(s) => format!("worker exited ({s})"),
            Err(e) => format!("worker wait failed: {e}"),
        },
        grace = stop => {
            let grace = grace.unwrap_or(Duration::ZERO);
            if !grace.is_zero() {
                // The worker answers Shutdown only once it has drained (up to `grace`), so
                // the RPC runs on its own task while we wait for the exit: cancelling it
                // early would abandon the drain and leave the worker running.
                let rpc = tokio::spawn(ask_shutdown(endpoint.clone(), generation, grace));
                let _ = tokio::time::timeout(grace + Duration::from_millis(500), child.wait()).await;
                rpc.abort();
            }
            spawn::stop_group(&mut child, timing::WORKER_KILL_AFTER_TERM).await;
            "stopped".to_string()
        }
    };
    if let Some(pid) = pid {
        // Whatever the upstream left behind in the worker's process group.
        spawn::sweep_group(pid);
        spawn::reap_group(pid).await;
    }
    // A worker killed by a signal cannot remove its socket file; nobody dials it again.
    transport::remove_endpoint(&endpoint);
    transport::remove_endpoint(&data_endpoint);
    drop(reaped);
    // Its connections' buffers are freed now.
    memory.changed();
    let _ = tx.send(Msg::step(Input::Exited { generation, detail }));
}

/// Asks the worker to drain and exit. Bounded by the grace period (plus a second to
/// connect); the caller stops waiting for the exit at the same deadline anyway.
async fn ask_shutdown(endpoint: transport::LocalEndpoint, generation: u64, grace: Duration) {
    let fut = async {
        let ch = tokio::time::timeout(Duration::from_secs(1), transport::connect(&endpoint))
            .await
            .ok()?
            .ok()?;
        let mut client = wpb::worker_client::WorkerClient::new(ch);
        client
            .shutdown(wpb::ShutdownRequest {
                generation,
                grace_ms: u32::try_from(grace.as_millis()).unwrap_or(u32::MAX),
            })
            .await
            .ok()
    };
    let _ = tokio::time::timeout(grace + Duration::from_secs(1), fut).await;
}

#[cfg(test)]
mod tests {
    //! The interpreter over a fake spawner: no process runs.
    use std::sync::Mutex;

    use super::*;
    use crate::registry::{AuthState, Installed, Registry};

    /// Records every start; `fail` makes starts fail. A stopped worker reports its exit.
    #[derive(Default)]
    struct FakeSpawner {
        started: Mutex<Vec<u64>>,
        stopped: Arc<Mutex<Vec<(u64, Duration)>>>,
        fail: bool,
    }

    impl Spawner for FakeSpawner {
        /// The fake's releases are hand-written, not installed copies.
        fn verify_release(&self, _: &std::path::Path, _: &str) -> Result<(), String> {
            Ok(())
        }

        fn start(&self, w: WorkerStart<'_>) -> Result<WorkerHandle, String> {
            if self.fail {
                return Err("cannot start the worker: no such file".into());
            }
            lock(&self.started).push(w.generation);
            let (stop_tx, stop_rx) = oneshot::channel::<Duration>();
            let (reaped_tx, reaped_rx) = oneshot::channel::<()>();
            let (generation, events, stopped) = (w.generation, w.events, self.stopped.clone());
            tokio::spawn(async move {
                if let Ok(grace) = stop_rx.await {
                    lock(&stopped).push((generation, grace));
                    drop(reaped_tx);
                    let detail = "stopped".to_string();
                    let _ = events.send(Msg::step(Input::Exited { generation, detail }));
                }
            });
            Ok(WorkerHandle {
                stop: Some(stop_tx),
                reaped: Some(reaped_rx),
            })
        }
    }

    /// A kernel in a temporary state dir with one installed stdio connector `k`.
    fn kernel(dir: &std::path::Path) -> Arc<Kernel> {
        let release = dir.join("release");
        std::fs::create_dir_all(&release).expect("release dir");
        let manifest = serde_json::json!({
            "key": "k", "name": "K", "description": "d", "version": "1.0.0",
            "mcp": {"transport": "stdio", "command": "/bin/true"}
        });
        std::fs::write(release.join("connector.json"), manifest.to_string()).expect("manifest");
        let mut registry = Registry {
            generation_ceiling: 5000,
            ..Registry::default()
        };
        registry.connectors.insert(
            "k".into(),
            Installed {
                version: "1.0.0".into(),
                sha256: "0".into(),
                release_dir: release.clone(),
                installed_at_unix: 0,
                skill_findings: vec![],
                confirmed_launch: vec![],
                allow_commands: vec![],
                allow_env: vec![],
                auth: AuthState::Ready,
                connected: true,
                previous: None,
                pin: None,
                trust_updates: false,
            },
        );
        let manifests = [(
            "k".to_string(),
            crate::release::manifest::load(&release).expect("valid manifest"),
        )]
        .into();
        let paths = crate::paths::Paths {
            state: dir.to_path_buf(),
            libexec: dir.to_path_buf(),
        };
        std::fs::create_dir_all(paths.logs()).expect("logs dir");
        let secrets = crate::secrets::SecretStore::open(dir).expect("secret store");
        Kernel::new(paths, secrets, registry, manifests)
    }

    /// Waits (up to 5 s) until `f` holds.
    async fn until(what: &str, mut f: impl FnMut() -> bool) {
        for _ in 0..500 {
            if f() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("timed out waiting until {what}");
    }

    fn status(k: &Kernel) -> lifecycle::Status {
        lock(&k.inner)
            .conns
            .get("k")
            .map(|c| c.life.status())
            .expect("connector state")
    }

    /// A kernel with connector `k` whose actor has started its first worker (a fake one).
    async fn started(
        dir: &std::path::Path,
    ) -> (
        Arc<Kernel>,
        Arc<FakeSpawner>,
        mpsc::UnboundedSender<Msg>,
        u64,
    ) {
        let k = kernel(dir);
        let spawner = Arc::new(FakeSpawner::default());
        let tx = start_actor_with(&k, "k", spawner.clone());
        until("a worker starts", || !lock(&spawner.started).is_empty()).await;
        let g = lock(&spawner.started)[0];
        (k, spawner, tx, g)
    }

    async fn offer(tx: &mpsc::UnboundedSender<Msg>, generation: u64) -> Result<(), String> {
        let (reply, answer) = oneshot::channel();
        let tools = Ok(crate::catalog::Candidate::default());
        let input = Input::Offer { generation, tools };
        let _ = tx.send(Msg {
            input,
            reply: Some(reply),
        });
        answer.await.expect("an answer")
    }

    #[tokio::test]
    async fn a_started_worker_gets_an_identity_and_its_offer_commits() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (k, _, tx, g) = started(dir.path()).await;
        assert!(lock(&k.inner).conns["k"].workers.contains_key(&g));
        assert_eq!(status(&k), lifecycle::Status::Starting);
        assert_eq!(offer(&tx, g).await, Ok(()));
        assert_eq!(
            lock(&k.inner).table.live("k").map(|r| r.generation),
            Some(g)
        );
        assert_eq!(status(&k), lifecycle::Status::Ready);
        // A generation the actor never started cannot commit.
        assert!(offer(&tx, g + 100).await.is_err());
    }

    #[tokio::test]
    async fn a_worker_that_cannot_start_is_retried_with_the_reason_shown() {
        let dir = tempfile::tempdir().expect("temp dir");
        let k = kernel(dir.path());
        let spawner = Arc::new(FakeSpawner {
            fail: true,
            ..FakeSpawner::default()
        });
        start_actor_with(&k, "k", spawner);
        until("the start failure is seen", || {
            lock(&k.inner)
                .conns
                .get("k")
                .is_some_and(|c| c.life.restarts() > 0)
        })
        .await;
        let inner = lock(&k.inner);
        let c = &inner.conns["k"];
        assert_eq!(c.life.status(), lifecycle::Status::Restarting);
        assert!(
            c.life.last_error().contains("no such file"),
            "{}",
            c.life.last_error()
        );
        assert!(c.workers.is_empty(), "its identity was revoked");
    }

    #[tokio::test]
    async fn stop_fences_and_waits_for_every_worker() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (k, spawner, tx, g) = started(dir.path()).await;
        assert_eq!(offer(&tx, g).await, Ok(()));
        let (reply, done) = oneshot::channel();
        let input = Input::Stop {
            reason: "uninstalled".into(),
            drain: UNINSTALL_DRAIN,
        };
        let _ = tx.send(Msg {
            input,
            reply: Some(reply),
        });
        assert_eq!(done.await.expect("stopped"), Ok(()));
        assert_eq!(lock(&spawner.stopped).as_slice(), &[(g, UNINSTALL_DRAIN)]);
        assert!(lock(&k.inner).table.live("k").is_none());
        assert_eq!(status(&k), lifecycle::Status::Stopped);
        assert!(lock(&k.inner).conns["k"].workers.is_empty());
    }
}

//! Supervision. One actor task per installed connector owns its workers (at most a live
//! one and a candidate); the frontend and the shim manager are supervised by
//! `supervise_service`. Crash → fence at once → restart with backoff; past the intensity
//! limit → `crash_loop`.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{mpsc, oneshot};
use tutti_proto::kernel as pb;
use tutti_proto::rules::{child_env, timing};
use tutti_proto::transport;
use tutti_proto::worker as wpb;

use crate::restart::{Decision, RestartPolicy, RestartTracker};
use crate::spawn::{self, ChildSpec};
use crate::state::{Kernel, Pending, Status, lock, sha256, unix_ms};
use crate::table::Route;

/// How long calls in flight may take to finish when the runtime shuts down (SPEC §4 "drain
/// calls"); what still runs then is answered `[MCP_UNAVAILABLE]` and cancelled upstream.
pub const SHUTDOWN_DRAIN: Duration = timing::WORKER_DRAIN;
/// The same when a connector is uninstalled: its user asked for it to be gone.
pub const UNINSTALL_DRAIN: Duration = Duration::from_secs(2);

/// Messages to a connector actor.
pub enum Msg {
    /// Manifest, secrets or connection changed: (re)start a candidate, or stop if not routable.
    Reload,
    Committed(u64),
    /// The generation's tools were refused at commit; the problems, one line.
    Refused(u64, String),
    Exited {
        generation: u64,
        detail: String,
    },
    Report {
        generation: u64,
        kind: pb::WorkerReportKind,
        message: String,
    },
    StartTimeout(u64),
    Retry(u64),
    /// Fence and stop everything, letting calls in flight finish for up to `drain`; the
    /// actor ends.
    Stop {
        reason: String,
        drain: Duration,
        done: oneshot::Sender<()>,
    },
}

struct WorkerHandle {
    started: Instant,
    stop: Option<oneshot::Sender<Duration>>,
    /// Resolves (with an error) once the process is reaped.
    reaped: Option<oneshot::Receiver<()>>,
}

struct Actor {
    k: Arc<Kernel>,
    key: String,
    tx: mpsc::UnboundedSender<Msg>,
    live: Option<u64>,
    candidate: Option<u64>,
    workers: std::collections::BTreeMap<u64, WorkerHandle>,
    tracker: RestartTracker,
    policy: RestartPolicy,
    retry_epoch: u64,
    auth_failed: bool,
    start_error: Option<String>,
}

/// Starts the actor of `key` and registers its mailbox.
pub fn start_actor(k: &Arc<Kernel>, key: &str) -> mpsc::UnboundedSender<Msg> {
    let (tx, rx) = mpsc::unbounded_channel();
    let actor = Actor {
        k: k.clone(),
        key: key.to_string(),
        tx: tx.clone(),
        live: None,
        candidate: None,
        workers: Default::default(),
        tracker: RestartTracker::default(),
        policy: RestartPolicy::default(),
        retry_epoch: 0,
        auth_failed: false,
        start_error: None,
    };
    lock(&k.inner).actors.insert(key.to_string(), tx.clone());
    tokio::spawn(actor.run(rx));
    let _ = tx.send(Msg::Reload);
    tx
}

impl Actor {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Msg>) {
        while let Some(msg) = rx.recv().await {
            match msg {
                Msg::Reload => {
                    self.tracker.reset();
                    self.auth_failed = false;
                    self.retry_epoch += 1;
                    self.reload();
                }
                Msg::Committed(g) => self.on_committed(g),
                Msg::Refused(g, problems) => {
                    if self.candidate == Some(g) {
                        self.candidate = None;
                        self.forget_worker(g);
                        self.stop_worker(g, Duration::ZERO);
                        self.upgrade_failed(&format!("its tools were refused ({problems})"));
                    }
                }
                Msg::Exited { generation, detail } => self.on_exit(generation, detail),
                Msg::Report {
                    generation,
                    kind,
                    message,
                } => self.on_report(generation, kind, message),
                Msg::StartTimeout(g) => {
                    if self.candidate == Some(g) {
                        let ms = lock(&self.k.inner)
                            .manifests
                            .get(&self.key)
                            .map(|m| m.start_ms)
                            .unwrap_or(0);
                        self.start_error = Some(format!(
                            "upstream did not become ready within startMs = {ms} ms"
                        ));
                        self.forget_worker(g);
                        self.stop_worker(g, Duration::ZERO);
                    }
                }
                Msg::Retry(epoch) => {
                    if epoch == self.retry_epoch && self.live.is_none() && self.candidate.is_none()
                    {
                        self.reload();
                    }
                }
                Msg::Stop {
                    reason,
                    drain,
                    done,
                } => {
                    self.stop_all(&reason, drain).await;
                    let _ = done.send(());
                    return;
                }
            }
        }
    }

    fn set_status(&self, status: Status, error: Option<String>) {
        let mut inner = lock(&self.k.inner);
        let c = inner.conns.entry(self.key.clone()).or_default();
        c.status = status;
        if let Some(e) = error {
            c.last_error = e;
        }
        if !matches!(status, Status::Restarting | Status::CrashLoop) {
            c.next_retry_unix_ms = 0;
        }
    }

    /// Start a candidate when routable; otherwise fence and stop.
    fn reload(&mut self) {
        let (manifest, release, auth_ready, waits_for_secrets) = {
            let inner = lock(&self.k.inner);
            let Some(installed) = inner.registry.connectors.get(&self.key) else {
                return;
            };
            let Some(m) = inner.manifests.get(&self.key) else {
                return;
            };
            (
                m.clone(),
                installed.release_dir.clone(),
                installed.auth == crate::registry::AuthState::Ready,
                installed.upgrade_waits_for_secrets(),
            )
        };
        if waits_for_secrets && self.live.is_some() {
            // An upgrade that needs a secret not stored yet: the live release keeps serving
            // with its own credentials until `connect` provides it.
            if let Some(old) = self.candidate.take() {
                self.forget_worker(old);
                self.stop_worker(old, Duration::ZERO);
            }
            let note = format!(
                "upgrade to {} waits for its credentials: {}",
                manifest.version,
                self.auth_hint(&manifest)
            );
            lock(&self.k.inner)
                .conns
                .entry(self.key.clone())
                .or_default()
                .upgrade_note = note;
            return;
        }
        if !auth_ready {
            let workers: Vec<u64> = self
                .live
                .take()
                .into_iter()
                .chain(self.candidate.take())
                .collect();
            // Identities first, then the fence: a candidate whose offer arrives now cannot
            // commit after the fence (a "ready" connector without a worker).
            for &g in &workers {
                self.forget_worker(g);
            }
            {
                let mut inner = lock(&self.k.inner);
                self.k.fence(&mut inner, &self.key, None, "auth required");
            }
            for g in workers {
                self.stop_worker(g, Duration::from_secs(2));
            }
            let hint = self.auth_hint(&manifest);
            self.set_status(Status::AuthRequired, Some(hint));
            return;
        }
        {
            // Routable again: an auth hint from before no longer applies.
            let mut inner = lock(&self.k.inner);
            let c = inner.conns.entry(self.key.clone()).or_default();
            if matches!(c.status, Status::AuthRequired | Status::AuthFailed) {
                c.last_error.clear();
            }
        }
        if manifest.mcp.is_none() {
            // CLI/skills only: no worker; the generation marks the live release.
            let generation = self.k.next_generation();
            let mut inner = lock(&self.k.inner);
            let route = Route {
                key: self.key.clone(),
                name: manifest.name.clone(),
                generation,
                endpoint: String::new(),
                call_timeout_ms: manifest.call_ms,
                has_cli: manifest.cli.is_some(),
                has_mcp: false,
                tools: Vec::new(),
            };
            let now = self.k.now();
            self.k.settle_upgrade(&mut inner, &self.key, &release);
            inner.live_releases.insert(
                self.key.clone(),
                crate::state::LiveRelease {
                    release_dir: release.clone(),
                    manifest: manifest.clone(),
                },
            );
            if let Some((rev, change)) = inner.table.commit(route, now) {
                self.k.publish(rev, change);
            }
            let c = inner.conns.entry(self.key.clone()).or_default();
            c.status = Status::Ready;
            c.last_error.clear();
            return;
        }
        if let Some(old) = self.candidate.take() {
            // Its identity goes first: a superseded candidate must not commit after all.
            self.forget_worker(old);
            self.stop_worker(old, Duration::ZERO);
        }
        self.spawn_candidate(&manifest, &release);
    }

    fn spawn_candidate(&mut self, manifest: &crate::manifest::Manifest, release: &std::path::Path) {
        let generation = self.k.next_generation();
        let token = match crate::tokens::new_token() {
            Ok(t) => t,
            Err(e) => {
                self.set_status(
                    Status::Failed,
                    Some(format!("cannot draw random bytes: {e}")),
                );
                return;
            }
        };
        let endpoint = transport::worker_endpoint(&self.k.paths.state, generation);
        let log = crate::housekeeping::open_log(&self.k.paths.connector_log(&self.key)).ok();
        let env = child_env::worker(child_env::from_process, &self.key, generation, &token);
        let program = self.k.paths.sibling("tutti-upstream-worker");
        let spec = ChildSpec {
            program: &program,
            // The key (not secret) only so that `ps` tells workers apart.
            args: vec![
                "--state-dir".into(),
                self.k.paths.state.to_string_lossy().into_owned(),
                "--key".into(),
                self.key.clone(),
            ],
            env,
            stderr: log,
            death_signal_term: true,
            listener: None,
        };
        {
            let mut inner = lock(&self.k.inner);
            let c = inner.conns.entry(self.key.clone()).or_default();
            c.workers.insert(
                generation,
                Pending {
                    token_hash: sha256(&token),
                    endpoint: endpoint.to_string(),
                    release: crate::state::LiveRelease {
                        release_dir: release.to_path_buf(),
                        manifest: manifest.clone(),
                    },
                },
            );
            if self.live.is_none() {
                c.status = if c.restarts > 0 {
                    Status::Restarting
                } else {
                    Status::Starting
                };
            }
        }
        let child = match spawn::spawn(spec) {
            Ok(c) => c,
            Err(e) => {
                self.forget_worker(generation);
                let _ = self.tx.send(Msg::Exited {
                    generation,
                    detail: format!("cannot start {}: {e}", program.display()),
                });
                self.candidate = Some(generation);
                self.workers.insert(
                    generation,
                    WorkerHandle {
                        started: Instant::now(),
                        stop: None,
                        reaped: None,
                    },
                );
                return;
            }
        };
        tracing::info!(key = %self.key, generation, pid = child.id(), "worker spawned");
        let (stop_tx, stop_rx) = oneshot::channel();
        let (reaped_tx, reaped_rx) = oneshot::channel();
        tokio::spawn(watch_worker(
            self.tx.clone(),
            child,
            generation,
            endpoint,
            stop_rx,
            reaped_tx,
        ));
        self.candidate = Some(generation);
        self.start_error = None;
        self.workers.insert(
            generation,
            WorkerHandle {
                started: Instant::now(),
                stop: Some(stop_tx),
                reaped: Some(reaped_rx),
            },
        );
        let tx = self.tx.clone();
        let deadline = Duration::from_millis(u64::from(manifest.start_ms)) + Duration::from_secs(2);
        tokio::spawn(async move {
            tokio::time::sleep(deadline).await;
            let _ = tx.send(Msg::StartTimeout(generation));
        });
    }

    fn on_committed(&mut self, g: u64) {
        if self.candidate != Some(g) {
            return;
        }
        self.candidate = None;
        if let Some(old) = self.live.replace(g) {
            // Update: the old generation drains its in-flight calls, then stops.
            self.forget_worker(old);
            self.stop_worker(old, Duration::from_secs(10));
        }
    }

    fn on_report(&mut self, g: u64, kind: pb::WorkerReportKind, message: String) {
        use pb::WorkerReportKind as Kind;
        let message = self.k.redact(&message);
        match kind {
            Kind::AuthFailed if self.candidate == Some(g) && self.upgrade_pending() => {
                // A new release whose upstream refuses the stored credentials (another
                // server, another scope): the upgrade failed; the release it replaces, which
                // these credentials work for, stays.
                self.candidate = None;
                self.forget_worker(g);
                self.stop_worker(g, Duration::ZERO);
                self.upgrade_failed(&format!(
                    "its upstream refused the stored credentials ({message})"
                ));
            }
            Kind::AuthFailed => {
                self.auth_failed = true;
                // The stored credentials are the ones refused, so no generation goes on
                // serving (one started with older credentials would answer an agent that is
                // told the connector needs auth): fence every generation, then stop them.
                let connect = {
                    let mut inner = lock(&self.k.inner);
                    self.k.fence(
                        &mut inner,
                        &self.key,
                        None,
                        "upstream refused the credentials",
                    );
                    let names = inner
                        .manifests
                        .get(&self.key)
                        .map(|m| m.secret_names())
                        .unwrap_or_default();
                    connect_command(&self.key, &names)
                };
                tracing::warn!(key = %self.key, generation = g, "upstream refused the credentials");
                for worker in self.live.take().into_iter().chain(self.candidate.take()) {
                    self.forget_worker(worker);
                    self.stop_worker(worker, Duration::from_secs(2));
                }
                let hint = format!("{message}; run `{connect}` again");
                self.set_status(Status::AuthFailed, Some(hint));
            }
            Kind::StartFailed | Kind::UpstreamExited => {
                self.start_error = Some(message);
            }
            Kind::UpstreamReinitialized => {
                // The generation goes on serving through a new upstream session: counted
                // and recorded, nothing fenced.
                if let Some(c) = lock(&self.k.inner).conns.get_mut(&self.key) {
                    c.reinitializations += 1;
                }
                self.k.audit.record(
                    "reinit",
                    serde_json::json!({"connector": self.key, "generation": g, "reason": message}),
                );
                tracing::warn!(key = %self.key, generation = g, reason = %message, "upstream session re-initialized");
            }
            Kind::UpstreamUnavailable => {
                // Fenced now (calls end at once with [MCP_UNAVAILABLE]); the worker's exit,
                // which follows, restarts it like a crash, with backoff.
                let reason = format!("upstream unavailable: {message}");
                if self.live == Some(g) {
                    let mut inner = lock(&self.k.inner);
                    self.k.fence(&mut inner, &self.key, Some(g), &reason);
                }
                self.start_error = Some(reason);
            }
            Kind::NonJsonStdout => {}
            Kind::Unspecified => tracing::debug!(key = %self.key, %kind, "worker report"),
        }
    }

    fn on_exit(&mut self, g: u64, detail: String) {
        let Some(handle) = self.workers.remove(&g) else {
            return;
        };
        self.forget_worker(g);
        // Without a report from the worker all the kernel saw is the exit status: say where
        // the worker and its upstream wrote why.
        let detail = self.start_error.take().unwrap_or_else(|| {
            format!(
                "{detail}; see {}",
                self.k.paths.connector_log(&self.key).display()
            )
        });
        let was_live = self.live == Some(g);
        let was_candidate = self.candidate == Some(g);
        if was_live {
            self.live = None;
            let mut inner = lock(&self.k.inner);
            self.k
                .fence(&mut inner, &self.key, Some(g), "worker exited");
        } else if was_candidate {
            self.candidate = None;
        } else {
            return; // an old generation we stopped on purpose
        }
        // Redacted once, and only when shown (it reads every stored secret): status, the log
        // line and the upgrade error all show this text.
        let reason = self.k.redact(&detail);
        if self.auth_failed {
            return;
        }
        if was_candidate && self.upgrade_failed(&format!("it did not start ({reason})")) {
            return;
        }
        if self.live.is_some() {
            // A failed upgrade candidate: the live generation stays.
            lock(&self.k.inner)
                .conns
                .entry(self.key.clone())
                .or_default()
                .last_error = format!("new generation failed to start: {reason}");
            return;
        }
        if lock(&self.k.inner)
            .conns
            .get(&self.key)
            .is_some_and(|c| c.status == Status::Failed)
            && was_candidate
        {
            return; // refused at commit: retrying cannot help until the release changes
        }
        let uptime = handle.started.elapsed();
        let jitter = f64::from(self.k.now().subsec_nanos() % 1000) / 1000.0;
        let decision = self
            .tracker
            .on_exit(&self.policy, self.k.now(), uptime, was_live, jitter);
        self.retry_epoch += 1;
        let epoch = self.retry_epoch;
        let (status, delay) = match decision {
            Decision::RestartAfter(d) => (Status::Restarting, d),
            Decision::GiveUp => (Status::CrashLoop, self.policy.crash_loop_retry),
        };
        {
            let mut inner = lock(&self.k.inner);
            let c = inner.conns.entry(self.key.clone()).or_default();
            c.status = status;
            c.restarts += 1;
            c.last_error = reason.clone();
            c.next_retry_unix_ms = unix_ms(SystemTime::now() + delay);
        }
        tracing::warn!(key = %self.key, generation = g, %reason, ?delay, status = status.as_str(), "worker exited");
        let tx = self.tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = tx.send(Msg::Retry(epoch));
        });
    }

    /// Whether an installed upgrade has not committed yet (the registry names its fallback).
    fn upgrade_pending(&self) -> bool {
        lock(&self.k.inner)
            .registry
            .connectors
            .get(&self.key)
            .is_some_and(|c| c.previous.is_some())
    }

    /// What `status` shows for `auth_required`: which secrets are missing and the command
    /// that stores them, or that the connector was disconnected.
    fn auth_hint(&self, manifest: &crate::manifest::Manifest) -> String {
        let stored = self.k.secrets.load(&self.key);
        let missing: Vec<String> = manifest
            .secret_names()
            .into_iter()
            .filter(|n| stored.get(n).is_none_or(|v| v.is_empty()))
            .collect();
        if missing.is_empty() {
            return format!(
                "disconnected; run `{}` to route it again",
                connect_command(&self.key, &[])
            );
        }
        format!(
            "needs {}; run `{}`",
            missing.join(", "),
            connect_command(&self.key, &missing)
        )
    }

    /// A candidate failed before its first commit. If it was an upgrade's, the release the
    /// upgrade replaced is current again (registry and manifest) and, when no generation is
    /// live, started at once; `status` says what happened. False when it was no upgrade.
    fn upgrade_failed(&mut self, why: &str) -> bool {
        let abandoned = {
            let mut inner = lock(&self.k.inner);
            let note = self.k.abandon_upgrade(&mut inner, &self.key, why);
            if note.is_some() {
                // The note (shown by `status`) carries the reason; the candidate's own error
                // line would only repeat it.
                inner
                    .conns
                    .entry(self.key.clone())
                    .or_default()
                    .last_error
                    .clear();
            }
            note.is_some()
        };
        if !abandoned {
            return false;
        }
        if self.live.is_none() {
            self.tracker.reset();
            self.reload();
        }
        true
    }

    /// Revokes generation `g`'s identity: its RPCs are refused from now on.
    fn forget_worker(&self, g: u64) {
        if let Some(c) = lock(&self.k.inner).conns.get_mut(&self.key) {
            c.workers.remove(&g);
        }
    }

    fn stop_worker(&mut self, g: u64, grace: Duration) {
        if let Some(h) = self.workers.get_mut(&g)
            && let Some(stop) = h.stop.take()
        {
            let _ = stop.send(grace);
        }
    }

    async fn stop_all(&mut self, reason: &str, drain: Duration) {
        {
            let mut inner = lock(&self.k.inner);
            self.k.fence(&mut inner, &self.key, None, reason);
            if let Some(c) = inner.conns.get_mut(&self.key) {
                c.workers.clear();
                c.status = Status::Stopped;
            }
        }
        self.live = None;
        self.candidate = None;
        let mut reaped = Vec::new();
        for (_, mut h) in std::mem::take(&mut self.workers) {
            if let Some(stop) = h.stop.take() {
                let _ = stop.send(drain);
            }
            if let Some(r) = h.reaped.take() {
                reaped.push(r);
            }
        }
        // Every watcher drops its sender once the process is reaped and its group swept
        // (a worker gets `drain`, then SIGTERM and SIGKILL after 2 s each).
        let _ = tokio::time::timeout(
            drain + Duration::from_secs(6),
            futures_util::future::join_all(reaped),
        )
        .await;
    }
}

/// `tutti connector connect KEY --from-env NAME…`: the command that stores `names`.
fn connect_command(key: &str, names: &[String]) -> String {
    let flags: String = names.iter().map(|n| format!(" --from-env {n}")).collect();
    format!("tutti connector connect {key}{flags}")
}

/// Owns one worker process: reports its exit; on request stops it (gRPC Shutdown, then
/// SIGTERM to the group, then SIGKILL).
async fn watch_worker(
    tx: mpsc::UnboundedSender<Msg>,
    mut child: tokio::process::Child,
    generation: u64,
    endpoint: transport::LocalEndpoint,
    stop: oneshot::Receiver<Duration>,
    reaped: oneshot::Sender<()>,
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
            spawn::stop_group(&mut child, Duration::from_secs(2)).await;
            "stopped".to_string()
        }
    };
    if let Some(pid) = pid {
        // Whatever the upstream left behind in the worker's process group.
        spawn::sweep_group(pid);
    }
    // A worker killed by a signal cannot remove its socket file; nobody dials it again.
    transport::remove_endpoint(&endpoint);
    drop(reaped);
    let _ = tx.send(Msg::Exited { generation, detail });
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

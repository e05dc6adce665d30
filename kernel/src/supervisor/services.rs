//! Supervision of the frontend and the shim manager: restart with backoff, same port for
//! the frontend across restarts.
//!
//! The frontend's port is never free while the kernel runs (Unix): the kernel binds the
//! listening socket once, before the first frontend starts, and every frontend it starts
//! inherits that same socket (`spawn::ChildSpec::listener`). Between a frontend's death and
//! its successor's start, connections wait in the socket's backlog and are served by the
//! successor; no other process can bind the port meanwhile (the socket stays bound, without
//! `SO_REUSEPORT`). On Windows the frontend binds the remembered port itself.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};
use tutti_rules::{child_env, timing};

use crate::state::{Kernel, lock};
use crate::supervisor::restart::{Decision, RestartPolicy, RestartTracker};
use crate::supervisor::spawn::{self, ChildSpec};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Role {
    Frontend,
    ShimManager,
}

impl Role {
    fn binary(self) -> &'static str {
        match self {
            Role::Frontend => "tutti-mcp-frontend",
            Role::ShimManager => "tutti-shim-manager",
        }
    }
    fn log(self) -> &'static str {
        match self {
            Role::Frontend => "frontend.log",
            Role::ShimManager => "shim-manager.log",
        }
    }
}

#[derive(serde::Deserialize)]
struct FrontendInfo {
    url: String,
    port: u16,
    pid: u32,
}

/// Runs `role` until shutdown; returns after its process is stopped.
pub async fn supervise(k: Arc<Kernel>, role: Role) {
    let mut shutdown = k.shutdown.subscribe();
    let mut restarts = Restarts::default();
    let mut port: u16 = match role {
        Role::Frontend => crate::frontend_port::initial(&k.paths),
        Role::ShimManager => 0,
    };
    let mut socket: Option<std::net::TcpListener> = None; // bound once, kept for good
    let mut fence_requests = fence_requests(&k, role);
    // Made once per kernel run: every frontend it starts derives the same session ids.
    let session_id_key = (role == Role::Frontend).then(session_id_key).flatten();
    loop {
        if *shutdown.borrow() {
            return;
        }
        let program = k.paths.sibling(role.binary());
        let args = match args(&k, role, &mut socket, &mut port) {
            Ok(args) => args,
            Err(e) => {
                tracing::error!(port, error = %e, "cannot bind the frontend's port on 127.0.0.1");
                // The last port was taken meanwhile: any free port next.
                port = 0;
                if !pause(Duration::from_secs(2), &mut fence_requests, &mut shutdown).await {
                    return;
                }
                continue;
            }
        };
        let log = crate::housekeeping::open_log(&k.paths.logs().join(role.log())).ok();
        let mut env = child_env::inherited(child_env::ChildKind::Service, child_env::from_process);
        if let Some(key) = &session_id_key {
            env.push((child_env::SESSION_ID_KEY.to_owned(), key.clone()));
        }
        let started = Instant::now();
        let mut child = match spawn::spawn(ChildSpec {
            program: &program,
            args,
            env,
            stderr: log,
            death_signal_term: false,
            listener: socket.as_ref(),
        }) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(binary = %program.display(), error = %e, "cannot start");
                if !pause(Duration::from_secs(2), &mut fence_requests, &mut shutdown).await {
                    return;
                }
                continue;
            }
        };
        let pid = child.id().unwrap_or(0);
        tracing::info!(role = ?role, pid, "started");
        if role == Role::Frontend {
            tokio::spawn(learn_frontend_url(k.clone(), pid));
        }
        let status = tokio::select! {
            Some(done) = next_fence(&mut fence_requests) => {
                port = stop_fenced(&k, &mut child, port, done, &mut fence_requests).await;
                // Not a crash of its own: start a fresh one (empty cache) on the same port now.
                continue;
            }
            status = child.wait() => status,
            _ = shutdown.changed() => {
                // The frontend drains its requests (calls the workers drain get their
                // answers through it); then SIGKILL (`timing`: 12 s, then 14 s).
                spawn::stop_group(&mut child, timing::SERVICE_KILL).await;
                return;
            }
        };
        port = after_exit(&k, role, port, pid);
        tracing::warn!(role = ?role, status = ?status.ok(), "exited; restarting");
        let delay = restarts.delay(k.now(), started.elapsed());
        if !pause(delay, &mut fence_requests, &mut shutdown).await {
            return;
        }
    }
}

/// The key of the frontend's `Mcp-Session-Id`s (SPEC §11): 32 random bytes, base64url. `None`
/// without OS randomness: each frontend then makes its own (ids change when it restarts).
fn session_id_key() -> Option<String> {
    use base64::Engine;
    let mut bytes = [0u8; 32];
    match getrandom::fill(&mut bytes) {
        Ok(()) => Some(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)),
        Err(e) => {
            tracing::warn!(error = %e, "no OS randomness for the session id key");
            None
        }
    }
}

/// Restart history and policy of the frontend or the shim manager.
struct Restarts {
    tracker: RestartTracker,
    policy: RestartPolicy,
}

impl Default for Restarts {
    fn default() -> Self {
        Restarts {
            tracker: RestartTracker::default(),
            policy: RestartPolicy {
                intensity: 10,
                crash_loop_retry: Duration::from_secs(10),
                ..RestartPolicy::default()
            },
        }
    }
}

impl Restarts {
    /// How long to wait before starting the process again after it ran for `uptime`.
    fn delay(&mut self, now: Duration, uptime: Duration) -> Duration {
        match self.tracker.on_exit(&self.policy, now, uptime, false, 0.5) {
            Decision::RestartAfter(d) => d,
            Decision::GiveUp => self.policy.crash_loop_retry,
        }
    }
}

/// Requests to stop the frontend because its session cache did not confirm a revocation.
fn fence_requests(k: &Kernel, role: Role) -> Option<mpsc::UnboundedReceiver<oneshot::Sender<()>>> {
    match role {
        Role::Frontend => k.session_caches.take_fence_requests(),
        Role::ShimManager => None,
    }
}

/// After an exit: the frontend's port as it last bound it; what the process left in its
/// group goes.
fn after_exit(k: &Kernel, role: Role, port: u16, pid: u32) -> u16 {
    let port = match role {
        Role::Frontend => remember_port(k, port),
        Role::ShimManager => port,
    };
    spawn::sweep_group(pid);
    port
}

/// The arguments of `role`'s process; for the frontend, binds its socket first (once) and
/// remembers its port.
fn args(
    k: &Kernel,
    role: Role,
    socket: &mut Option<std::net::TcpListener>,
    port: &mut u16,
) -> std::io::Result<Vec<String>> {
    let mut args = vec![
        "--state-dir".to_string(),
        k.paths.state.to_string_lossy().into_owned(),
    ];
    if role == Role::Frontend {
        if let Some(bound) = frontend_socket(socket, *port)? {
            *port = bound;
        }
        args.push("--port".into());
        args.push(port.to_string());
    }
    Ok(args)
}

/// Reads the URL of the frontend `pid` from `run/frontend.json` once it wrote it.
async fn learn_frontend_url(k: Arc<Kernel>, pid: u32) {
    for _ in 0..400 {
        if let Ok(bytes) = std::fs::read(k.paths.frontend_json())
            && let Ok(info) = serde_json::from_slice::<FrontendInfo>(&bytes)
            && info.pid == pid
        {
            *lock(&k.frontend_url) = Some(info.url);
            crate::frontend_port::record(&k.paths, info.port);
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Stops a frontend whose session cache did not confirm a revocation, then answers the
/// request (and those queued meanwhile: they were about the process that is gone, not
/// about the fresh one started next).
/// Returns the port to start the next one on.
async fn stop_fenced(
    k: &Kernel,
    child: &mut tokio::process::Child,
    port: u16,
    done: oneshot::Sender<()>,
    fence_requests: &mut Option<mpsc::UnboundedReceiver<oneshot::Sender<()>>>,
) -> u16 {
    let pid = child.id().unwrap_or(0);
    tracing::warn!(
        pid,
        "stopping the frontend: its session cache did not confirm a revocation"
    );
    let _ = child.start_kill();
    let _ = child.wait().await;
    spawn::sweep_group(pid);
    let port = remember_port(k, port);
    let _ = done.send(());
    if let Some(rx) = fence_requests.as_mut() {
        while let Ok(queued) = rx.try_recv() {
            let _ = queued.send(());
        }
    }
    port
}

/// Waits `delay` before the next start; `false` if the runtime shuts down meanwhile. Nothing
/// runs then, so nothing caches sessions: fence requests are answered at once.
async fn pause(
    delay: Duration,
    fence_requests: &mut Option<mpsc::UnboundedReceiver<oneshot::Sender<()>>>,
    shutdown: &mut tokio::sync::watch::Receiver<bool>,
) -> bool {
    let sleep = tokio::time::sleep(delay);
    tokio::pin!(sleep);
    loop {
        tokio::select! {
            _ = &mut sleep => return true,
            Some(done) = next_fence(fence_requests) => { let _ = done.send(()); }
            _ = shutdown.changed() => return false,
        }
    }
}

/// Binds the frontend's socket on 127.0.0.1 (`port`, `0` = any) unless it is bound already;
/// its port. Windows: nothing is bound here (`None`), the frontend binds `port` itself.
fn frontend_socket(
    socket: &mut Option<std::net::TcpListener>,
    port: u16,
) -> std::io::Result<Option<u16>> {
    if cfg!(windows) {
        return Ok(None);
    }
    let listener = match socket {
        Some(listener) => listener,
        // std sets SO_REUSEADDR (a restarted kernel can bind a port in TIME_WAIT) but never
        // SO_REUSEPORT, so no other socket can bind the port while this one exists.
        None => socket.insert(std::net::TcpListener::bind((
            std::net::Ipv4Addr::LOCALHOST,
            port,
        ))?),
    };
    Ok(Some(listener.local_addr()?.port()))
}

/// The frontend is gone: forget its URL until the next one reports, keep its port.
fn remember_port(k: &Kernel, port: u16) -> u16 {
    *lock(&k.frontend_url) = None;
    crate::review::forget_circuits(k);
    std::fs::read(k.paths.frontend_json())
        .ok()
        .and_then(|bytes| serde_json::from_slice::<FrontendInfo>(&bytes).ok())
        .map_or(port, |info| info.port)
}

/// The next fence request, or never when this role has none.
async fn next_fence(
    requests: &mut Option<mpsc::UnboundedReceiver<oneshot::Sender<()>>>,
) -> Option<oneshot::Sender<()>> {
    match requests {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::frontend_socket;

    #[test]
    fn the_frontend_socket_is_bound_once_and_keeps_its_port() {
        let mut socket = None;
        let port = frontend_socket(&mut socket, 0)
            .expect("bind")
            .expect("bound on Unix");
        assert_ne!(port, 0);
        assert_eq!(
            frontend_socket(&mut socket, 0).expect("again"),
            Some(port),
            "the same socket, not a new one"
        );
        let taken = std::net::TcpListener::bind(("127.0.0.1", port));
        assert!(taken.is_err(), "another socket bound the frontend's port");
    }
}

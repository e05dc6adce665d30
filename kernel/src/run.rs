//! Running the kernel: start-up (state dir, lock, registry, siblings), the gRPC server, the
//! supervised services and connectors, and the graceful shutdown. `lib.rs` re-exports
//! [`Config`], [`run`] and [`run_until`].

use crate::error::KernelError;
use crate::release::manifest;
use crate::sessions::revocation;
use crate::supervisor::services;
use crate::{demo, housekeeping, lifecycle, notify, paths, registry, secrets, state, supervisor};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tutti_proto::transport;
use tutti_rules::timing;

use crate::state::{Kernel, lock};

/// How to run the kernel.
#[derive(Clone, Debug)]
pub struct Config {
    pub state_dir: PathBuf,
    /// Install and connect the bundled example connectors first.
    pub demo: bool,
    /// Windows: a user (besides the pipe's owner) the control pipe admits, the installing
    /// user of a LocalSystem service (see `tutti_proto::pipe_access`). Ignored on Unix.
    pub pipe_grant: Option<tutti_proto::pipe_access::UserSid>,
}

/// Runs the kernel until SIGINT/SIGTERM (on Windows: Ctrl-C, Ctrl-Break, console close or
/// system shutdown), then shuts the whole set down and returns.
pub async fn run(config: Config) -> Result<(), KernelError> {
    run_until(config, wait_for_signal()).await
}

/// Runs the kernel until `stop` completes (the Windows service's Stop, a test), then runs
/// the same graceful shutdown as [`run`] on a signal and returns.
pub async fn run_until(
    config: Config,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), KernelError> {
    let state_dir = absolute(&config.state_dir)?;
    let paths = prepare(&state_dir)?;
    let _lock = acquire_lock(&paths)?;
    // Owner-only logs and registry, also when an older version or the owner made them
    // readable; then what a crash left behind goes (the lock says no other kernel uses it).
    housekeeping::tighten(&paths).map_err(|source| KernelError::Io {
        context: format!("making {} owner-only", paths.logs().display()),
        source,
    })?;
    let swept = housekeeping::sweep(&paths);
    if swept > 0 {
        tracing::info!(swept, "removed leftovers of an earlier run");
    }
    // What a crash kept an uninstall or a disconnect from deleting goes before anything
    // reads the secrets (and before the registry is written again without the uninstalls).
    let mut registry = registry::Registry::load(&paths.registry())?;
    let reclaimed = housekeeping::reclaim(&paths, &mut registry);
    let (registry, manifests, broken) = load_connectors(&paths, registry)?;
    let secrets = secrets::SecretStore::open(&state_dir)?;
    let keys: Vec<String> = manifests.keys().cloned().collect();
    let k = Kernel::new(paths.clone(), secrets, registry, manifests);
    k.settle_auth_at_start();
    crate::connect::oauth::revoke_reclaimed(&k, reclaimed);
    let export = crate::telemetry::otel::observe(&k);
    mark_unreadable(&k, broken);

    let endpoint = transport::kernel_endpoint(&state_dir);
    let incoming = transport::bind_granting(&endpoint, config.pipe_grant.as_ref())?;
    let mut shutdown_rx = k.shutdown.subscribe();
    let server = tokio::spawn(crate::grpc::router(&k)?.serve_with_incoming_shutdown(
        incoming,
        async move {
            let _ = shutdown_rx.wait_for(|s| *s).await;
        },
    ));
    tracing::info!(state_dir = %state_dir.display(), boot_epoch = k.boot_epoch, "kernel listening on {endpoint}");

    release_memory_after_changes(&k);
    let frontend = tokio::spawn(services::supervise(k.clone(), services::Role::Frontend));
    let shims = tokio::spawn(services::supervise(k.clone(), services::Role::ShimManager));
    for key in &keys {
        supervisor::start_actor(&k, key);
    }

    let mut demo_keys = Vec::new();
    if config.demo {
        demo_keys = install_demo(&k).await;
    }
    let ready = announce_ready(k.clone(), demo_keys);

    // `ready` prints the banner and then never completes: `stop` ends the kernel.
    tokio::select! {
        _ = ready => {}
        _ = stop => {}
    }
    shutdown(&k).await;
    // The frontend was told to stop when the shutdown began (it drains, then is killed:
    // `timing::SERVICE_KILL`): this only waits for what is left of that.
    let _ = tokio::time::timeout(timing::SERVICES_WAIT, async {
        let _ = frontend.await;
        let _ = shims.await;
    })
    .await;
    let _ = tokio::time::timeout(timing::KERNEL_SERVER_STOP, server).await;
    let _ = std::fs::remove_file(endpoint.as_str());
    // The frontend is gone: its URL must not outlive it for a reader of run/.
    let _ = std::fs::remove_file(paths.frontend_json());
    crate::telemetry::otel::finish_export(export).await;
    tracing::info!("kernel stopped");
    Ok(())
}

/// The state dir's paths, after checking the sibling binaries and creating the
/// directories the kernel writes to.
fn prepare(state_dir: &std::path::Path) -> Result<paths::Paths, KernelError> {
    let paths = paths::Paths {
        state: state_dir.to_path_buf(),
        libexec: paths::libexec_dir().map_err(|source| KernelError::Io {
            context: "finding the directory of tutti-kernel".into(),
            source,
        })?,
    };
    // A missing sibling is an installation problem no restart fixes: say so and stop,
    // rather than retry a frontend that can never start.
    for name in paths::SIBLINGS {
        let path = paths.sibling(name);
        if !path.is_file() {
            return Err(KernelError::MissingBinary { path });
        }
    }
    for dir in [paths.logs(), paths.releases(), paths.bin()] {
        std::fs::create_dir_all(&dir).map_err(|source| KernelError::Io {
            context: format!("creating {}", dir.display()),
            source,
        })?;
    }
    transport::run_dir(state_dir)?;
    Ok(paths)
}

/// Installed connectors whose manifest could be read.
type Loaded = (
    registry::Registry,
    std::collections::BTreeMap<String, manifest::Manifest>,
    Vec<(String, String)>,
);

/// The registry (with a new boot epoch and a fresh block of generation numbers, saved),
/// the manifests of the installed releases, and the connectors whose release cannot be
/// read (with why).
fn load_connectors(
    paths: &paths::Paths,
    mut registry: registry::Registry,
) -> Result<Loaded, KernelError> {
    registry.boot_epoch = registry.boot_epoch.saturating_add(1);
    // Reserve a fresh block of generation numbers above anything a previous kernel used.
    registry.generation_ceiling += state::GENERATION_BLOCK;
    registry.save(&paths.registry())?;
    let mut manifests = std::collections::BTreeMap::new();
    let mut broken = Vec::new();
    for (key, installed) in &registry.connectors {
        // SPEC §12: what runs is what was confirmed, so the copy must still be what its
        // name says (a damaged copy fails only its own connector; a reinstall repairs it).
        let verified = crate::release::verify_copy(&installed.release_dir, &installed.sha256)
            .map_err(|why| vec![why])
            .and_then(|()| manifest::load(&installed.release_dir));
        match verified {
            Ok(m) => {
                manifests.insert(key.clone(), m);
            }
            Err(p) => broken.push((key.clone(), p.join("; "))),
        }
    }
    Ok((registry, manifests, broken))
}

fn absolute(p: &std::path::Path) -> Result<PathBuf, KernelError> {
    std::fs::create_dir_all(p).map_err(|source| KernelError::Io {
        context: format!("creating state dir {}", p.display()),
        source,
    })?;
    std::path::absolute(p).map_err(|source| KernelError::Io {
        context: format!("resolving {}", p.display()),
        source,
    })
}

/// One kernel per state dir: an exclusive lock on `run/kernel.lock`, held for the process
/// lifetime (the OS drops it if the kernel dies).
fn acquire_lock(paths: &paths::Paths) -> Result<std::fs::File, KernelError> {
    use std::io::{Read, Seek, Write};
    let path = tutti_rules::state_dir::layout::kernel_lock(&paths.state);
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|source| KernelError::Io {
            context: format!("opening {}", path.display()),
            source,
        })?;
    if f.try_lock().is_err() {
        let mut pid = String::new();
        let _ = f.read_to_string(&mut pid);
        let pid = pid.trim().to_string();
        if !holder_gone(&pid) || !lock_within(&f, ORPHANED_LOCK_WAIT) {
            return Err(KernelError::AlreadyRunning {
                state_dir: paths.state.clone(),
                pid,
            });
        }
        tracing::info!(
            pid,
            "the lock of a kernel that is gone was held a moment longer"
        );
    }
    let _ = f.set_len(0);
    let _ = f.rewind();
    let _ = write!(f, "{}", std::process::id());
    Ok(f)
}

/// How long a lock whose kernel is gone is waited for. A kernel killed while it started a
/// child leaves its locked descriptor in that child from the fork until the child's exec
/// (which closes it) or its death by the parent-death signal: a few milliseconds, longer on a
/// loaded machine. Without the wait, a kernel started again at once (by a service manager,
/// say) refused to run, naming the dead kernel as running.
const ORPHANED_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether the process the lock file names is gone (Unix; elsewhere never assumed).
fn holder_gone(pid: &str) -> bool {
    #[cfg(unix)]
    {
        let Ok(pid) = pid.parse::<i32>() else {
            return false;
        };
        let probe = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None);
        matches!(probe, Err(nix::errno::Errno::ESRCH))
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        false
    }
}

/// Takes the lock if it is released within `wait`.
fn lock_within(f: &std::fs::File, wait: std::time::Duration) -> bool {
    let deadline = std::time::Instant::now() + wait;
    while std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
        if f.try_lock().is_ok() {
            return true;
        }
    }
    false
}

async fn install_demo(k: &Arc<Kernel>) -> Vec<String> {
    let dirs = match demo::write_releases(&k.paths.state, &k.paths.libexec) {
        Ok(d) => d,
        Err(e) => {
            tracing::error!("demo connectors unavailable: {e}");
            eprintln!("tutti: demo connectors unavailable: {e}");
            return Vec::new();
        }
    };
    let mut keys = Vec::new();
    for dir in dirs {
        let req = crate::install::Install {
            folder: dir.clone(),
            ..Default::default()
        };
        match crate::install::install(k, req).await {
            Ok(r) => keys.push(r.key),
            Err(e) => eprintln!(
                "tutti: demo install of {} failed: {}",
                dir.display(),
                e.message()
            ),
        }
    }
    keys
}

/// Prints the MCP URL once the frontend answers (and the demo connectors settled).
async fn announce_ready(k: Arc<Kernel>, demo: Vec<String>) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let url = loop {
        if let Some(u) = lock(&k.frontend_url).clone() {
            break u;
        }
        if tokio::time::Instant::now() > deadline {
            eprintln!(
                "tutti: the MCP frontend did not start; see {}",
                k.paths.logs().join("frontend.log").display()
            );
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    while tokio::time::Instant::now() < deadline {
        let settled = {
            let inner = lock(&k.inner);
            demo.iter().all(|key| {
                inner
                    .conns
                    .get(key)
                    .is_some_and(|c| c.life.status() != state::Status::Starting)
            })
        };
        if settled {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    while !notify::frontend_answers(&url).await && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    notify::notify("READY=1\nSTATUS=serving");
    // The banner is for whoever started `tutti up`; if they stopped reading (`| head -1`, a
    // closed terminal) the runtime keeps running: write errors are ignored, never a panic
    // as `println!` would.
    // The hint names the state dir when `tutti` would not find it by itself.
    let default = paths::default_state_dir().and_then(|d| std::path::absolute(d).ok());
    let state_flag = if default.as_deref() == Some(k.paths.state.as_path()) {
        String::new()
    } else {
        let dir = k.paths.state.display().to_string();
        if dir.contains(|c: char| c.is_whitespace() || "'\"$`\\".contains(c)) {
            format!(" --state-dir '{}'", dir.replace('\'', r"'\''"))
        } else {
            format!(" --state-dir {dir}")
        }
    };
    let banner = format!(
        "tutti is up. MCP server \"connector\": {url}\n  state dir: {}\n  give an agent access: tutti{state_flag} session issue --workspace W --session S --format claude\n  stop: Ctrl-C\n",
        k.paths.state.display()
    );
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(banner.as_bytes()).and_then(|()| out.flush());
    }
    std::future::pending::<()>().await;
}

#[cfg(unix)]
async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Console events that end the kernel: Ctrl-C, Ctrl-Break, the console window closing and
/// system shutdown/logoff. A handler that cannot be installed is logged and skipped.
#[cfg(windows)]
async fn wait_for_signal() {
    use tokio::signal::windows::{ctrl_break, ctrl_c, ctrl_close, ctrl_shutdown};
    fn unavailable(event: &str, e: &std::io::Error) {
        tracing::warn!(error = %e, "cannot listen for {event}; it will not stop the kernel");
    }
    let c = async {
        match ctrl_c() {
            Ok(mut s) => s.recv().await,
            Err(e) => {
                unavailable("Ctrl-C", &e);
                std::future::pending().await
            }
        }
    };
    let brk = async {
        match ctrl_break() {
            Ok(mut s) => s.recv().await,
            Err(e) => {
                unavailable("Ctrl-Break", &e);
                std::future::pending().await
            }
        }
    };
    let close = async {
        match ctrl_close() {
            Ok(mut s) => s.recv().await,
            Err(e) => {
                unavailable("console close", &e);
                std::future::pending().await
            }
        }
    };
    let shut = async {
        match ctrl_shutdown() {
            Ok(mut s) => s.recv().await,
            Err(e) => {
                unavailable("system shutdown", &e);
                std::future::pending().await
            }
        }
    };
    let event = tokio::select! {
        _ = c => "Ctrl-C",
        _ = brk => "Ctrl-Break",
        _ = close => "console close",
        _ = shut => "system shutdown",
    };
    tracing::info!("{event}: stopping");
}

#[cfg(not(any(unix, windows)))]
async fn wait_for_signal() {
    let _ = tokio::signal::ctrl_c().await;
}

/// Revoke all tokens, tell every watcher, stop every connector (draining calls), stop the
/// frontend and the shim manager.
async fn shutdown(k: &Arc<Kernel>) {
    tracing::info!("shutting down");
    notify::notify("STOPPING=1");
    // Revoked before anything drains (SPEC §4), confirmed by the session caches like any
    // other revocation.
    revocation::revoke(k, revocation::Revocation::All).await;
    let _ = k.shutdown.send(true);
    let actors: Vec<_> = lock(&k.inner).actors.values().cloned().collect();
    let mut waits = Vec::new();
    for tx in actors {
        let (done, wait) = tokio::sync::oneshot::channel();
        let _ = tx.send(lifecycle::Msg {
            input: lifecycle::Input::Stop {
                reason: "runtime shutdown".into(),
                drain: supervisor::SHUTDOWN_DRAIN,
            },
            reply: Some(done),
        });
        waits.push(wait);
    }
    let _ = tokio::time::timeout(
        timing::CONNECTORS_WAIT,
        futures_util::future::join_all(waits),
    )
    .await;
}

/// Connectors whose installed release cannot be read: listed with why and the fix, not started.
fn mark_unreadable(k: &Kernel, broken: Vec<(String, String)>) {
    for (key, err) in broken {
        let why = format!(
            "installed release is unreadable: {err}; reinstall it with `tutti connector install DIR` or remove it with `tutti connector uninstall {key}`"
        );
        let mut conn = state::ConnState::new(&key);
        conn.life = lifecycle::Connector::unreadable(&key, why);
        lock(&k.inner).conns.insert(key, conn);
    }
}

/// Free heap goes back to the system once route changes (commits, fences, uninstalls) and
/// the reaping of workers have settled for a second: a commit's offer, pin and registry text
/// are freed right after it, a worker's connection buffers when it is gone, and glibc would
/// otherwise keep them (`tutti_os::memory::AfterChanges`).
fn release_memory_after_changes(k: &Arc<Kernel>) {
    k.memory.release_when_quiet(Duration::from_secs(1));
    let memory = k.memory.clone();
    let mut events = k.events.subscribe();
    tokio::spawn(async move {
        loop {
            match events.recv().await {
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    memory.changed();
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    });
}

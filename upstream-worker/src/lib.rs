//! `tutti-upstream-worker`: one process per connector generation, the MCP client of exactly
//! one upstream, serving `tutti.worker.v1.Worker` on its own local endpoint.
//!
//! Life of a worker: bind the endpoint and serve → `RegisterWorker` (get the launch spec) →
//! start the upstream, handshake and page `tools/list` within the start timeout →
//! `OfferTools` → serve calls for its own generation until fenced, shut down, or the upstream
//! goes away. The process exit code tells the kernel why it ended ([`Exit`]).
#![deny(unsafe_code)]

pub mod client;
mod control;
mod error;
#[cfg(feature = "otel")]
mod otel;
#[cfg(not(feature = "otel"))]
#[path = "otel_off.rs"]
mod otel;
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
mod pdeathsig;
mod platform;
mod redact;
mod serve;
mod transport;
mod upstream;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tutti_proto::kernel::WorkerReportKind;
use tutti_proto::transport as ipc;
use tutti_proto::worker::worker_server::WorkerServer;
use tutti_rules::child_env::{WORKER_GENERATION, WORKER_KEY, WORKER_TOKEN};

use crate::control::KernelLink;
use crate::serve::{Event, FrameServer, Shared, WorkerService};
use crate::transport::{NonJsonCounter, SessionEvent};
use crate::upstream::{RmcpUpstream, Session, catalog, definitions};

pub use crate::error::WorkerError;
pub use crate::redact::RedactingStderr;

/// Start timeout when the launch spec names none (SPEC §3 default).
const DEFAULT_START_TIMEOUT_MS: u32 = 30_000;
/// How long in-flight gRPC responses (e.g. the reply to `Fence`) get to go out at exit.
const SERVER_STOP_GRACE: Duration = Duration::from_secs(2);

/// Who this worker is. Built from the environment the kernel sets ([`Config::from_env`]).
#[derive(Clone)]
pub struct Config {
    pub state_dir: PathBuf,
    /// Connector key.
    pub key: String,
    /// The generation this process serves.
    pub generation: u64,
    /// Proves the spawn to the kernel. Never logged, never in argv.
    pub token: String,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("state_dir", &self.state_dir)
            .field("key", &self.key)
            .field("generation", &self.generation)
            .field("token", &"<redacted>")
            .finish()
    }
}

impl Config {
    /// Reads `TUTTI_WORKER_KEY`, `TUTTI_WORKER_GENERATION` (decimal) and `TUTTI_WORKER_TOKEN`
    /// (set by the kernel: `tutti_rules::child_env::worker`).
    pub fn from_env(state_dir: PathBuf) -> Result<Self, WorkerError> {
        Self::from_vars(state_dir, |name| std::env::var(name).ok())
    }

    fn from_vars(
        state_dir: PathBuf,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, WorkerError> {
        let missing = |var: &'static str| WorkerError::Env {
            var,
            problem: "is not set".to_owned(),
        };
        let key = var(WORKER_KEY).ok_or_else(|| missing(WORKER_KEY))?;
        if !tutti_proto::key::is_valid(&key) {
            return Err(WorkerError::Env {
                var: WORKER_KEY,
                problem: format!("{key:?} is not a connector key"),
            });
        }
        let generation = var(WORKER_GENERATION).ok_or_else(|| missing(WORKER_GENERATION))?;
        let generation = generation
            .trim()
            .parse::<u64>()
            .map_err(|_| WorkerError::Env {
                var: WORKER_GENERATION,
                problem: format!("{generation:?} is not a decimal u64"),
            })?;
        let token = var(WORKER_TOKEN)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| missing(WORKER_TOKEN))?;
        Ok(Self {
            state_dir,
            key,
            generation,
            token,
        })
    }
}

/// Why the worker ended; [`Exit::code`] is the process exit code the kernel sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Fenced, shut down, or the kernel went away: 0.
    Done,
    /// `RegisterWorker` failed (kernel unreachable, token refused, no launch spec): 2.
    RegisterFailed,
    /// The upstream could not be started, initialized or listed in time: 3.
    StartFailed,
    /// The kernel did not commit the offered tool set: 4.
    OfferRefused,
    /// The upstream exited (or its connection closed) on its own: 5.
    UpstreamExited,
    /// The upstream answered HTTP 401/403: 6.
    AuthFailed,
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Done => 0,
            Exit::RegisterFailed => 2,
            Exit::StartFailed => 3,
            Exit::OfferRefused => 4,
            Exit::UpstreamExited => 5,
            Exit::AuthFailed => 6,
        }
    }
}

/// Runs the worker until it is fenced, shut down, or its upstream goes away.
pub async fn run(config: Config) -> Result<Exit, WorkerError> {
    platform::become_subreaper();
    ipc::run_dir(&config.state_dir).map_err(WorkerError::RunDir)?;
    let endpoint = ipc::worker_endpoint(&config.state_dir, config.generation);
    let incoming = ipc::bind(&endpoint).map_err(WorkerError::Bind)?;
    let data_endpoint = ipc::worker_data_endpoint(&config.state_dir, config.generation);
    let data_incoming = ipc::bind(&data_endpoint).map_err(WorkerError::Bind)?;

    let (events_tx, mut events) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared::<RmcpUpstream>::new(
        config.key.clone(),
        config.generation,
        events_tx,
    ));
    let frame_server = FrameServer::start(data_incoming, shared.clone());
    let (stop_server, server_stopped) = oneshot::channel::<()>();
    let mut server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(WorkerServer::new(WorkerService::new(shared.clone())))
            .serve_with_incoming_shutdown(incoming, async {
                let _ = server_stopped.await;
            }),
    );
    tracing::info!(
        key = %config.key,
        generation = config.generation,
        endpoint = %endpoint,
        data_endpoint = %data_endpoint,
        "worker listening"
    );

    let endpoints = (endpoint.as_str(), data_endpoint.as_str());
    let exit = tokio::select! {
        exit = drive(&config, endpoints, &shared, &mut events) => Ok(exit),
        // The server only ends early if it failed.
        served = &mut server => {
            let failure = match served {
                Ok(Ok(())) => None,
                Ok(Err(source)) => Some(source),
                Err(join) => {
                    tracing::error!(error = %join, "worker gRPC server task failed");
                    None
                }
            };
            shared.stop_calls();
            match failure {
                Some(source) => Err(WorkerError::Serve { endpoint: endpoint.to_string(), source }),
                None => Ok(Exit::Done),
            }
        }
    };

    let _ = stop_server.send(());
    frame_server.stop(SERVER_STOP_GRACE).await;
    if !server.is_finished()
        && tokio::time::timeout(SERVER_STOP_GRACE, &mut server)
            .await
            .is_err()
    {
        tracing::debug!("gRPC connections still open at exit");
        server.abort();
    }
    exit
}

/// Register, start, offer, then serve until something ends this generation.
async fn drive(
    config: &Config,
    endpoints: (&str, &str),
    shared: &Arc<Shared<RmcpUpstream>>,
    events: &mut mpsc::UnboundedReceiver<Event>,
) -> Exit {
    let (kernel, spec) = match register(config, endpoints).await {
        Ok(registered) => registered,
        Err(exit) => return exit,
    };
    redact::install_for_log(&spec.redact);
    let redactor = redact::current();
    shared.set_call_timeout(spec.call_timeout_ms);
    let start_ms = match spec.start_timeout_ms {
        0 => DEFAULT_START_TIMEOUT_MS,
        ms => ms,
    };
    tracing::info!(transport = %spec.transport(), start_timeout_ms = start_ms, "registered");
    let within = Duration::from_millis(u64::from(start_ms));

    let parent_gone = platform::parent_gone();
    tokio::pin!(parent_gone);

    // Start the upstream, but stay responsive to the kernel meanwhile.
    let listing = definitions::Listing::start();
    let started = tokio::select! {
        started = upstream::start(&spec, redactor.clone(), within, kernel.bearer()) => started,
        event = events.recv() => {
            tracing::info!(?event, "stopped while the upstream was starting");
            return Exit::Done;
        }
        () = &mut parent_gone => {
            tracing::warn!("the kernel went away; exiting");
            return Exit::Done;
        }
    };
    drop(listing);
    let upstream::Started { mut session, tools } = match started_or_report(&kernel, started).await {
        Ok(started) => started,
        Err(exit) => return exit,
    };

    let catalog = list_catalog(&session, within).await;
    let offered = offer(&kernel, shared, &session, tools, &catalog).await;
    drop(catalog);
    let exit = match offered {
        Ok(()) => {
            release_listing_memory();
            serve(&kernel, shared, &mut session, events, within, parent_gone).await
        }
        Err(exit) => exit,
    };
    shared.stop_calls();
    session.stop().await;
    exit
}

/// Connects to the kernel and registers: the link and the launch spec.
async fn register(
    config: &Config,
    (endpoint, data_endpoint): (&str, &str),
) -> Result<(KernelLink, tutti_proto::kernel::LaunchSpec), Exit> {
    let registered = async {
        let kernel = KernelLink::connect(
            &config.state_dir,
            &config.key,
            config.generation,
            &config.token,
        )
        .await?;
        let spec = kernel.register(endpoint, data_endpoint).await?;
        let kernel = kernel.with_oauth(&spec);
        Ok::<_, WorkerError>((kernel, spec))
    };
    registered.await.map_err(|e| {
        tracing::error!(error = %e, "cannot register with the kernel");
        Exit::RegisterFailed
    })
}

/// The started upstream, or the failure reported to the kernel and the exit it means.
async fn started_or_report(
    kernel: &KernelLink,
    started: Result<upstream::Started, WorkerError>,
) -> Result<upstream::Started, Exit> {
    match started {
        Ok(started) => Ok(started),
        Err(WorkerError::UpstreamAuth { message }) => {
            tracing::error!(error = %message, "upstream authentication failed");
            kernel
                .report(WorkerReportKind::AuthFailed, &message, 0)
                .await;
            Err(Exit::AuthFailed)
        }
        Err(e) => {
            let message = redact::current().redact(&e.to_string());
            tracing::error!(error = %message, "upstream failed to start");
            kernel
                .report(WorkerReportKind::StartFailed, &message, 0)
                .await;
            Err(Exit::StartFailed)
        }
    }
}

/// Serves the upstream's calls, then offers its tool set (serve before offering: the kernel
/// may route calls as soon as it commits). `Err`: the kernel did not commit it.
async fn offer(
    kernel: &KernelLink,
    shared: &Shared<RmcpUpstream>,
    session: &Session,
    tools: Vec<serde_json::Value>,
    catalog: &catalog::Catalog,
) -> Result<(), Exit> {
    let tools = definitions::as_sent(tools);
    shared.attach(session.upstream.clone());
    if let Some(counter) = session.non_json.clone() {
        tokio::spawn(report_non_json(kernel.clone(), counter));
    }
    otel::spawn_drop_reports(kernel);
    match kernel
        .offer(
            &tools,
            catalog,
            &session.protocol_version,
            &session.server_name,
        )
        .await
    {
        Ok(reply) if reply.committed => {
            tracing::info!(
                tools = tools.len(),
                prompts = catalog.prompts.len(),
                resources = catalog.resources.len(),
                templates = catalog.templates.len(),
                "tool set committed"
            );
            Ok(())
        }
        Ok(reply) => {
            tracing::error!(error = %redact::current().redact(&reply.error), "the kernel refused the tool set");
            Err(Exit::OfferRefused)
        }
        Err(e) => {
            tracing::error!(error = %e, "cannot offer the tool set");
            Err(Exit::OfferRefused)
        }
    }
}

/// Serves the committed generation until it is fenced or shut down, the upstream fails or goes
/// away, or the kernel does; the exit that means.
async fn serve(
    kernel: &KernelLink,
    shared: &Shared<RmcpUpstream>,
    session: &mut Session,
    events: &mut mpsc::UnboundedReceiver<Event>,
    within: Duration,
    mut parent_gone: std::pin::Pin<&mut impl Future<Output = ()>>,
) -> Exit {
    let list_changed = session.list_changed.clone();
    let mut session_events = session.take_session_events();
    loop {
        tokio::select! {
            event = events.recv() => match event {
                Some(Event::Fenced) | Some(Event::ShutDown) | None => return Exit::Done,
                Some(Event::AuthFailed(status)) => {
                    let message = format!("the upstream refused the credentials ({status})");
                    tracing::error!(error = %message, "upstream authentication failed");
                    shared.stop_calls();
                    kernel.report(WorkerReportKind::AuthFailed, &message, 0).await;
                    return Exit::AuthFailed;
                }
            },
            event = session_events.next() => {
                if let Some(exit) = on_session_event(kernel, shared, event).await {
                    return exit;
                }
            }
            () = list_changed.notified() => {
                reoffer(kernel, session, within).await;
            }
            how = session.ended() => {
                let message = redact::current().redact(&how);
                tracing::warn!(upstream = %message, "the upstream went away");
                shared.stop_calls();
                kernel.report(WorkerReportKind::UpstreamExited, &message, 0).await;
                return Exit::UpstreamExited;
            }
            () = &mut parent_gone => {
                tracing::warn!("the kernel went away; exiting");
                return Exit::Done;
            }
        }
    }
}

/// A remote upstream's session was re-initialized (reported, serving goes on) or cannot be
/// (reported as unavailable: the worker ends and the kernel restarts it like a crash).
async fn on_session_event(
    kernel: &KernelLink,
    shared: &Shared<RmcpUpstream>,
    event: SessionEvent,
) -> Option<Exit> {
    match event {
        SessionEvent::Reinitialized(why) => {
            let message = redact::current().redact(&why);
            tracing::warn!(upstream = %message, "the upstream session failed; initialized a new one");
            kernel
                .report(WorkerReportKind::UpstreamReinitialized, &message, 0)
                .await;
            None
        }
        SessionEvent::Unavailable(why) => {
            let message = redact::current().redact(&why);
            tracing::error!(upstream = %message, "the upstream is unavailable");
            shared.stop_calls();
            kernel
                .report(WorkerReportKind::UpstreamUnavailable, &message, 0)
                .await;
            Some(Exit::UpstreamExited)
        }
    }
}

/// The upstream said its tools changed: list every page again and offer the new set for the
/// same generation. Failures are logged; the committed set stays live.
async fn reoffer(kernel: &KernelLink, session: &Session, within: Duration) {
    use crate::upstream::Upstream as _;
    tracing::info!("upstream tool list changed; listing again");
    let listing = definitions::Listing::start();
    let listed = tokio::time::timeout(within, session.upstream.list_tools()).await;
    drop(listing);
    let tools = match listed {
        Ok(Ok(tools)) => definitions::as_sent(tools),
        Ok(Err(failure)) => {
            tracing::warn!(error = %redact::current().redact(&format!("{failure:?}")), "tools/list failed");
            return;
        }
        Err(_) => {
            tracing::warn!(timeout_ms = within.as_millis(), "tools/list timed out");
            return;
        }
    };
    let catalog = list_catalog(session, within).await;
    match kernel
        .offer(
            &tools,
            &catalog,
            &session.protocol_version,
            &session.server_name,
        )
        .await
    {
        Ok(reply) if reply.committed => {
            tracing::info!(tools = tools.len(), "changed tool set committed");
        }
        Ok(reply) => {
            tracing::warn!(error = %redact::current().redact(&reply.error), "the kernel refused the changed tool set");
        }
        Err(e) => tracing::warn!(error = %e, "cannot offer the changed tool set"),
    }
    drop((tools, catalog));
    release_listing_memory();
}

/// Gives back the heap a listing used. A worker's resident set is otherwise its listing's
/// peak: the pages were held as rmcp's parse, the definitions as sent and the offer at once,
/// then freed, and glibc keeps freed heap (a worker of 100 tools: 1.7 MiB private, 0.96 MiB
/// after the release). One walk of a small heap, once per listing.
fn release_listing_memory() {
    tutti_os::memory::release_free_memory();
}

/// The upstream's prompts, resources and templates, listed within `within`. A listing that
/// fails is logged and offered empty: the tools still serve (the upstream declared a list it
/// cannot give; its log says so).
async fn list_catalog(session: &Session, within: Duration) -> catalog::Catalog {
    let upstream = &session.upstream;
    match tokio::time::timeout(within, catalog::list(upstream.as_ref(), upstream.offers)).await {
        Ok(Ok(catalog)) => catalog,
        Ok(Err(why)) => {
            tracing::warn!(error = %why, "cannot list the upstream's prompts and resources");
            catalog::Catalog::default()
        }
        Err(_) => {
            tracing::warn!(
                timeout_ms = within.as_millis(),
                "listing the upstream's prompts and resources timed out"
            );
            catalog::Catalog::default()
        }
    }
}

/// Reports the running total of non-JSON stdout lines, at most once per second.
async fn report_non_json(kernel: KernelLink, counter: Arc<NonJsonCounter>) {
    loop {
        counter.changed().await;
        let total = counter.total();
        kernel
            .report(
                WorkerReportKind::NonJsonStdout,
                &format!("the upstream wrote {total} non-JSON line(s) to stdout"),
                total,
            )
            .await;
        // Rate limit, not synchronisation: later lines are folded into the next report.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// SIGTERM to a worker means "take everything down now": the kernel sends it as the
/// parent-death signal and as the second stage of a stop. The worker kills every descendant
/// (those that left its process group with `setsid()` included, Linux) and its own process
/// group (itself, its upstream and anything the upstream left behind, e.g. `npx`
/// grandchildren), so no process of the tree outlives the kernel. The graceful path is the
/// Worker `Shutdown` RPC.
pub async fn kill_group_on_sigterm() {
    #[cfg(unix)]
    {
        use nix::sys::signal::{Signal, killpg};
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut term) = signal(SignalKind::terminate()) else {
            return;
        };
        if term.recv().await.is_some() {
            // Descendants that left our group (`setsid()`) first: killpg does not reach them.
            platform::kill_descendants();
            let group = nix::unistd::getpgrp();
            // Only when we lead our own group (as the kernel spawns us); never signal a
            // group we merely joined.
            if group == nix::unistd::getpid() {
                let _ = killpg(group, Signal::SIGKILL);
            }
            std::process::exit(143);
        }
    }
    #[cfg(not(unix))]
    std::future::pending::<()>().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    #[test]
    fn config_from_environment() {
        let config = Config::from_vars(
            PathBuf::from("/s"),
            vars(&[
                ("TUTTI_WORKER_KEY", "github"),
                ("TUTTI_WORKER_GENERATION", "4294967297"),
                ("TUTTI_WORKER_TOKEN", "tok-secret"),
            ]),
        );
        let config = config.ok();
        assert_eq!(config.as_ref().map(|c| c.generation), Some((1 << 32) | 1));
        assert_eq!(config.as_ref().map(|c| c.key.as_str()), Some("github"));
        assert!(!format!("{config:?}").contains("tok-secret"));
    }

    #[test]
    fn config_rejects_bad_values() {
        let bad =
            |pairs: &[(&str, &str)]| Config::from_vars(PathBuf::from("/s"), vars(pairs)).is_err();
        assert!(bad(&[
            ("TUTTI_WORKER_GENERATION", "1"),
            ("TUTTI_WORKER_TOKEN", "t")
        ]));
        assert!(bad(&[
            ("TUTTI_WORKER_KEY", "Bad_Key"),
            ("TUTTI_WORKER_GENERATION", "1"),
            ("TUTTI_WORKER_TOKEN", "t")
        ]));
        assert!(bad(&[
            ("TUTTI_WORKER_KEY", "ok"),
            ("TUTTI_WORKER_GENERATION", "0x10"),
            ("TUTTI_WORKER_TOKEN", "t")
        ]));
        assert!(bad(&[
            ("TUTTI_WORKER_KEY", "ok"),
            ("TUTTI_WORKER_GENERATION", "1"),
            ("TUTTI_WORKER_TOKEN", "")
        ]));
    }

    #[test]
    fn exit_codes() {
        let codes: Vec<u8> = [
            Exit::Done,
            Exit::RegisterFailed,
            Exit::StartFailed,
            Exit::OfferRefused,
            Exit::UpstreamExited,
            Exit::AuthFailed,
        ]
        .into_iter()
        .map(Exit::code)
        .collect();
        assert_eq!(codes, [0, 2, 3, 4, 5, 6]);
    }
}

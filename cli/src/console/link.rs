//! The console's calls to the kernel, and what a page says when one fails.

use std::path::{Path, PathBuf};

use axum::http::StatusCode;
use futures_util::StreamExt;
use tutti_proto::kernel as pb;
use tutti_proto::kernel::admin_client::AdminClient;
use tutti_proto::tonic::transport::Channel;

use crate::error::CliError;
use crate::kernel::Kernel;

/// Why a page could not do what was asked: shown on the page, one line per problem.
#[derive(Debug)]
pub(crate) struct Problem {
    pub(crate) status: StatusCode,
    pub(crate) lines: Vec<String>,
}

impl Problem {
    pub(crate) fn new(status: StatusCode, line: impl Into<String>) -> Self {
        Self {
            status,
            lines: vec![line.into()],
        }
    }

    /// A CLI error as a page shows it: a kernel that is gone says so, with the command that
    /// starts it; the kernel's own refusals (already user-facing) are shown as they are.
    pub(crate) fn from_cli(state_dir: &Path, err: CliError) -> Self {
        match err {
            CliError::NoKernel { .. }
            | CliError::KernelLost { .. }
            | CliError::KernelUnreachable { .. } => not_running(state_dir),
            CliError::Kernel { code, message } => {
                let status = match code {
                    tonic::Code::NotFound => StatusCode::NOT_FOUND,
                    tonic::Code::FailedPrecondition => StatusCode::CONFLICT,
                    tonic::Code::InvalidArgument => StatusCode::BAD_REQUEST,
                    _ => StatusCode::BAD_GATEWAY,
                };
                // A list of problems (a manifest's) comes one per line.
                Self {
                    status,
                    lines: message
                        .lines()
                        .filter(|l| !l.trim().is_empty())
                        .map(str::to_owned)
                        .collect(),
                }
            }
            other => Self::new(StatusCode::INTERNAL_SERVER_ERROR, other.to_string()),
        }
    }
}

fn not_running(state_dir: &Path) -> Problem {
    Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        format!(
            "the runtime is not running (state dir {}); start it with `{}`, then reload this page",
            state_dir.display(),
            crate::kernel::up_command(state_dir)
        ),
    )
}

/// A fresh connection to the kernel for one page or action.
pub(crate) async fn kernel(state_dir: &Path) -> Result<Kernel, Problem> {
    Kernel::connect(state_dir)
        .await
        .map_err(|e| Problem::from_cli(state_dir, e))
}

/// The kernel's gRPC client, as [`call`] lends it.
pub(crate) type Client = AdminClient<Channel>;

/// One RPC on a fresh connection to the kernel: its reply, or what the page says instead.
pub(crate) async fn call<T>(
    state_dir: &Path,
    rpc: impl AsyncFnOnce(&mut Client) -> Result<tonic::Response<T>, tonic::Status>,
) -> Result<T, Problem> {
    let mut k = kernel(state_dir).await?;
    let reply = rpc(&mut k.client).await;
    reply
        .map(tonic::Response::into_inner)
        .map_err(|s| self::rpc(state_dir, &k, s))
}

/// Maps a failed RPC of `kernel` to what the page says.
pub(crate) fn rpc(state_dir: &Path, kernel: &Kernel, status: tonic::Status) -> Problem {
    Problem::from_cli(state_dir, kernel.error(status))
}

/// Removes a staged release folder of a market source (the kernel removes only a folder of
/// its `staging/`).
pub(crate) async fn discard_staged(state_dir: &Path, dir: &str) -> Result<(), Problem> {
    let request = pb::DiscardRequest {
        staging_dir: dir.to_owned(),
    };
    let k = kernel(state_dir).await?;
    k.market()
        .discard_staged(request)
        .await
        .map_err(|s| rpc(state_dir, &k, s))?;
    Ok(())
}

/// [`discard_staged`] after an install or a refusal: a failure is logged, the page goes on.
pub(crate) async fn discard_staged_quietly(state_dir: &Path, dir: &str) {
    if let Err(p) = discard_staged(state_dir, dir).await {
        tracing::warn!(reason = ?p.lines, "the staged release was not removed");
    }
}

/// Status and Available together: what the connectors pages show.
pub(crate) struct Overview {
    pub(crate) status: pb::StatusReply,
    pub(crate) available: pb::AvailableReply,
}

pub(crate) async fn overview(state_dir: &Path) -> Result<Overview, Problem> {
    let mut k = kernel(state_dir).await?;
    let status = k
        .client
        .status(pb::Empty {})
        .await
        .map_err(|s| rpc(state_dir, &k, s))?
        .into_inner();
    let available = k
        .client
        .available(pb::Empty {})
        .await
        .map_err(|s| rpc(state_dir, &k, s))?
        .into_inner();
    Ok(Overview { status, available })
}

/// The connector's live route (its tools with risk and definitions), from the first event
/// (a full snapshot) of a route watch. `None` when no generation of it is live.
pub(crate) async fn route(
    state_dir: &Path,
    key: &str,
) -> Result<Option<pb::ConnectorRoute>, Problem> {
    let mut k = kernel(state_dir).await?;
    let request = pb::WatchRoutesRequest {
        watcher_id: watcher_id(),
        caches_sessions: false,
    };
    let mut stream = k
        .routes
        .watch_routes(request)
        .await
        .map_err(|s| rpc(state_dir, &k, s))?
        .into_inner();
    let first = stream.next().await;
    let Some(Ok(pb::RouteEvent {
        event: Some(pb::route_event::Event::Snapshot(snapshot)),
        ..
    })) = first
    else {
        return Err(not_running(state_dir));
    };
    Ok(snapshot.connectors.into_iter().find(|c| c.key == key))
}

/// Random watcher ids: a console never collides with the frontend or another console.
fn watcher_id() -> u64 {
    let mut bytes = [0u8; 8];
    match getrandom::fill(&mut bytes) {
        Ok(()) => u64::from_le_bytes(bytes),
        Err(_) => u64::from(std::process::id()) << 32,
    }
}

/// Returns once the kernel is gone: its route watch ended (shutdown, or the connection
/// broke) and it cannot be reached again.
pub(crate) async fn watch_kernel(state_dir: PathBuf) {
    loop {
        if let Ok(mut k) = Kernel::connect(&state_dir).await {
            let request = pb::WatchRoutesRequest {
                watcher_id: watcher_id(),
                caches_sessions: false,
            };
            if let Ok(stream) = k.routes.watch_routes(request).await {
                let mut stream = stream.into_inner();
                while let Some(Ok(event)) = stream.next().await {
                    if matches!(event.event, Some(pb::route_event::Event::Shutdown(_))) {
                        break;
                    }
                }
            }
        }
        // A broken watch of a kernel that still answers is watched again.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        if Kernel::connect(&state_dir).await.is_err() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    }
}

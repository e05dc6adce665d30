//! `tutti-upstream-worker --state-dir D` (spawned by the kernel; see ARCHITECTURE.md).
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;
use tutti_upstream_worker::{Config, RedactingStderr, kill_group_on_sigterm, run};

/// One upstream MCP client per process, serving the worker gRPC service.
#[derive(Parser, Debug)]
#[command(name = "tutti-upstream-worker", version)]
struct Args {
    /// State directory (else TUTTI_STATE_DIR, else the platform default).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    init_tracing();
    let Some(state_dir) = args.state_dir.or_else(tutti_proto::state_dir::from_env) else {
        tracing::error!("no state directory: pass --state-dir or set TUTTI_STATE_DIR");
        return ExitCode::FAILURE;
    };
    let config = match Config::from_env(state_dir) {
        Ok(config) => config,
        Err(e) => {
            tracing::error!(error = %e, "bad worker environment");
            return ExitCode::FAILURE;
        }
    };
    // One thread: a worker serves one upstream; a single-threaded runtime avoids cross-thread
    // wake-ups on the per-call path and keeps the resident set small.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the async runtime");
            return ExitCode::FAILURE;
        }
    };
    runtime.spawn(kill_group_on_sigterm());
    let outcome = runtime.block_on(run(config));
    // Do not wait for stray blocking work (e.g. a stuck stderr write) at exit.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match outcome {
        Ok(exit) => {
            tracing::info!(?exit, code = exit.code(), "worker exiting");
            ExitCode::from(exit.code())
        }
        Err(e) => {
            tracing::error!(error = %e, "worker failed");
            ExitCode::FAILURE
        }
    }
}

/// Logs go to stderr (the kernel points it at `logs/connector-<key>.log`), with every secret
/// value masked. rmcp is capped at warn whatever `RUST_LOG` says: at debug it logs raw
/// upstream lines, which may carry secrets.
fn init_tracing() {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;

    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Both filters are global and decide by callsite metadata only, so their verdicts are
    // cached per callsite: a disabled span or event (h2's trace spans, rmcp's per-session
    // span) costs nothing on the call path instead of a filter evaluation, span bookkeeping
    // in the registry and a clone per spawned send.
    let cap_rmcp = Targets::new()
        .with_default(LevelFilter::TRACE)
        .with_target("rmcp", LevelFilter::WARN);
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(RedactingStderr)
        .with_ansi(false);
    tracing_subscriber::registry()
        .with(cap_rmcp)
        .with(filter)
        .with(layer)
        .init();
}

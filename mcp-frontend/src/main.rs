#![forbid(unsafe_code)]
//! `tutti-mcp-frontend --state-dir D --port P`: started and supervised by the kernel.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use tracing_subscriber::EnvFilter;
use tutti_mcp_frontend::{Config, DEFAULT_PAGE_SIZE};

/// The local MCP server named `connector` (started by tutti-kernel).
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// State directory (else TUTTI_STATE_DIR, else the platform default).
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// tools/list page size.
    #[arg(long, default_value_t = DEFAULT_PAGE_SIZE, hide = true)]
    page_size: usize,
}

fn default_state_dir() -> anyhow::Result<PathBuf> {
    tutti_rules::state_dir::from_env()
        .context("cannot find a state directory: pass --state-dir or set TUTTI_STATE_DIR")
}

// One thread: the per-request path hops between several tasks (hyper's connection, tonic's
// channel buffer and h2 connection tasks); on one thread those hand-offs are queue pushes
// instead of cross-thread wake-ups (eventfd writes, futex wakes), and the resident set is
// smaller. The work per request is a few microseconds of CPU; the latency is in the hops.
#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    tutti_os::memory::one_arena();
    let args = Args::parse();
    // Stderr, text or TUTTI_LOG_FORMAT=json, dependencies' secret-carrying events off.
    tutti_rules::log_format::init_stderr(
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        true,
    );
    // OpenTelemetry export, only with OTEL_EXPORTER_OTLP_* set (SPEC §14).
    #[cfg(feature = "otel")]
    let telemetry = tutti_telemetry::init("tutti-mcp-frontend", "frontend")
        .map(|t| (t, tokio::spawn(t.exporting())));
    let outcome = start(args).await;
    #[cfg(feature = "otel")]
    if let Some((t, export)) = telemetry {
        t.shutdown(export).await;
    }
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tutti-mcp-frontend: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn start(args: Args) -> anyhow::Result<()> {
    let state_dir = match args.state_dir {
        Some(dir) => dir,
        None => default_state_dir()?,
    };
    let mut config = Config::new(state_dir, args.port);
    config.page_size = args.page_size.max(1);
    if let Ok(text) = std::env::var(tutti_rules::child_env::SESSION_ID_KEY) {
        config.session_id_key = tutti_mcp_frontend::parse_session_id_key(&text);
        if config.session_id_key.is_none() {
            tracing::warn!("the kernel's session id key is malformed; using a key of this process");
        }
    }
    tutti_mcp_frontend::run(config).await?;
    Ok(())
}

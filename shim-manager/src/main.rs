#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// Publishes `tutti-connector-<key>` shims for the connectors the kernel routes.
#[derive(Parser, Debug)]
#[command(name = "tutti-shim-manager", version, about)]
struct Args {
    /// State directory (else TUTTI_STATE_DIR, else the platform default).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
}

fn main() -> ExitCode {
    let json = tutti_proto::rules::log_format::LogFormat::from_env().is_json();
    let logs = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(!json && std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        );
    // TUTTI_LOG_FORMAT=json: one JSON object per line.
    // Dependencies' events that carry codes or tokens stay off whatever the filter says.
    let secret_free = tutti_proto::rules::log_filter::secret_free();
    if json {
        logs.json().finish().with(secret_free).init();
    } else {
        logs.finish().with(secret_free).init();
    }
    let args = Args::parse();
    match start(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

fn start(args: Args) -> anyhow::Result<()> {
    // `state_dir::from_env` is TUTTI_STATE_DIR, else the platform default (SPEC §2).
    let state_dir = args
        .state_dir
        .or_else(tutti_proto::state_dir::from_env)
        .context("no --state-dir, no TUTTI_STATE_DIR and no home directory")?;
    let config = tutti_shim_manager::Config {
        state_dir,
        libexec_dir: std::env::var_os(tutti_proto::rules::sibling::LIBEXEC_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime
        .block_on(tutti_shim_manager::run(config))
        .context("shim manager failed")
}

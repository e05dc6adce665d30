#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use tracing_subscriber::EnvFilter;

/// Publishes `tutti-connector-<key>` shims for the connectors the kernel routes.
#[derive(Parser, Debug)]
#[command(name = "tutti-shim-manager", version, about)]
struct Args {
    /// State directory (else TUTTI_STATE_DIR, else the platform default).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
}

fn main() -> ExitCode {
    tutti_os::memory::one_arena();
    // Stderr, text or TUTTI_LOG_FORMAT=json, dependencies' secret-carrying events off.
    tutti_rules::log_format::init_stderr(
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        true,
    );
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
        .or_else(tutti_rules::state_dir::from_env)
        .context("no --state-dir, no TUTTI_STATE_DIR and no home directory")?;
    let config = tutti_shim_manager::Config {
        state_dir,
        libexec_dir: std::env::var_os(tutti_rules::sibling::LIBEXEC_ENV)
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

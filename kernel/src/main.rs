use std::process::ExitCode;

use clap::Parser;

/// The Tutti kernel: authoritative state and supervisor of the runtime's processes.
#[derive(Parser)]
#[command(name = "tutti-kernel", version)]
struct Args {
    /// State directory (else TUTTI_STATE_DIR, else the platform default).
    #[arg(long, env = "TUTTI_STATE_DIR")]
    state_dir: Option<std::path::PathBuf>,
    /// Install and connect the bundled example connectors first.
    #[arg(long)]
    demo: bool,
    /// Run under the Windows Service Control Manager (Windows only; the SCM starts it so).
    #[arg(long, conflicts_with = "demo")]
    service: bool,
    /// Windows only: also admit this user (a SID, as `whoami /user` prints it) to the
    /// control pipe. `tutti service install` passes the installing user's, so the CLI reaches
    /// the kernel running as LocalSystem.
    #[arg(long, value_name = "SID")]
    grant_user: Option<String>,
}

/// Nothing the runtime writes (registry, logs, release copies, shims' directory) is ever
/// writable by group or others, whatever umask it was started with: `0o022` is added to it
/// (a stricter umask stays). Children, upstreams included, inherit it.
fn restrict_umask() {
    #[cfg(unix)]
    {
        use nix::sys::stat::{Mode, umask};
        let group_other_write = Mode::S_IWGRP | Mode::S_IWOTH;
        let old = umask(group_other_write);
        umask(old | group_other_write);
    }
}

/// `--grant-user SID`: checked here; refused off Windows (there is no pipe to grant).
fn pipe_grant(sid: Option<&str>) -> Result<Option<tutti_proto::pipe_access::UserSid>, String> {
    let Some(sid) = sid else {
        return Ok(None);
    };
    if !cfg!(windows) {
        return Err("--grant-user admits a Windows user to the kernel's named pipe and exists only on Windows; on Unix the socket is the owner's only".into());
    }
    tutti_proto::pipe_access::UserSid::parse(sid)
        .map(Some)
        .map_err(|e| format!("--grant-user: {e}"))
}

fn main() -> ExitCode {
    tutti_os::memory::one_arena();
    let args = Args::parse();
    if args.service && !cfg!(windows) {
        eprintln!(
            "tutti-kernel: --service runs the kernel under the Windows Service Control Manager and exists only on Windows; on Linux and macOS run `tutti service install` (systemd unit / launchd agent) or start tutti-kernel directly"
        );
        return ExitCode::FAILURE;
    }
    let pipe_grant = match pipe_grant(args.grant_user.as_deref()) {
        Ok(grant) => grant,
        Err(e) => {
            eprintln!("tutti-kernel: {e}");
            return ExitCode::FAILURE;
        }
    };
    let Some(state_dir) = args.state_dir.or_else(tutti_kernel::default_state_dir) else {
        eprintln!("tutti-kernel: no state directory; pass --state-dir DIR or set TUTTI_STATE_DIR");
        return ExitCode::FAILURE;
    };
    restrict_umask();
    init_tracing(&state_dir);
    tutti_kernel::adopt_orphans();
    // The kernel holds a descriptor per child pipe, log file, socket and gRPC connection.
    tutti_os::rlimit::raise_open_files_limit();
    let config = tutti_kernel::Config {
        state_dir,
        demo: args.demo,
        pipe_grant,
    };
    // OpenTelemetry metrics, only with OTEL_EXPORTER_OTLP_* set (SPEC §14): exported by a
    // task of the kernel's runtime (`run_until`), the last values when the kernel stops.
    #[cfg(feature = "otel")]
    tutti_telemetry::init_with("tutti-kernel", "kernel", tutti_telemetry::Signals::Metrics);
    if args.service {
        run_service(config)
    } else {
        run_foreground(config)
    }
}

/// The kernel on this thread until a signal stops it.
fn run_foreground(config: tutti_kernel::Config) -> ExitCode {
    // One thread, like the frontend and the workers: the kernel's per-request work is small
    // (session checks, audit records, route events), and blocking file work (hashing and
    // copying releases) runs on the blocking pool. Fewer threads, fewer malloc arenas, no
    // cross-thread wake-ups. Children are spawned from runtime tasks, i.e. from this thread,
    // which lives as long as the kernel (PR_SET_PDEATHSIG follows the spawning thread).
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tutti-kernel: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(tutti_kernel::run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tutti-kernel: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `--service`: the SCM's dispatcher owns this thread until the service stops.
#[cfg(windows)]
fn run_service(config: tutti_kernel::Config) -> ExitCode {
    match tutti_kernel::run_service(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("tutti-kernel: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(not(windows))]
fn run_service(_config: tutti_kernel::Config) -> ExitCode {
    // Refused in `main` before anything starts; kept so both targets share one code path.
    ExitCode::FAILURE
}

/// Logs on stderr and in `logs/kernel.log`: human-readable, or one JSON object per line
/// with `TUTTI_LOG_FORMAT=json`.
fn init_tracing(state_dir: &std::path::Path) {
    use tracing_subscriber::prelude::*;
    let json = tutti_rules::log_format::LogFormat::from_env().is_json();
    let filter = || {
        tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"))
    };
    let logs = tutti_rules::state_dir::layout::logs(state_dir);
    // Owner-only: logs may hold what an upstream printed (ARCHITECTURE.md, Hardening).
    let _ = tutti_kernel::create_private_dir(&logs);
    let file = tutti_kernel::open_log(&tutti_rules::state_dir::layout::kernel_log(state_dir)).ok();
    let file_layer = file.map(|f| {
        let layer = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(std::sync::Mutex::new(f));
        if json {
            layer.json().with_filter(filter()).boxed()
        } else {
            layer.with_filter(filter()).boxed()
        }
    });
    let stderr_layer = tracing_subscriber::fmt::layer()
        // Colours only on a terminal: under systemd or launchd stderr is a log.
        .with_ansi(!json && std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let stderr_layer = if json {
        stderr_layer.json().with_filter(filter()).boxed()
    } else {
        stderr_layer.with_filter(filter()).boxed()
    };
    tracing_subscriber::registry()
        // Dependencies' events that carry codes or tokens stay off whatever RUST_LOG says.
        .with(tutti_rules::log_filter::secret_free())
        .with(stderr_layer)
        .with(file_layer)
        .init();
}

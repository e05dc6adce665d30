//! `tutti-upstream-worker --state-dir D --key KEY` (spawned by the kernel; see ARCHITECTURE.md).
#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use tutti_upstream_worker::{Config, RedactingStderr, kill_group_on_sigterm, run};

const USAGE: &str = "\
One upstream MCP client per process, serving the worker gRPC service.
Started by tutti-kernel, which passes the rest of its configuration in the environment.

Usage: tutti-upstream-worker [--state-dir DIR] [--key KEY]

Options:
      --state-dir DIR  State directory (else TUTTI_STATE_DIR, else the platform default)
      --key KEY        The connector key, so that `ps` tells workers apart; must match
                       TUTTI_WORKER_KEY
  -h, --help           Print help
  -V, --version        Print version
";

/// What the command line asks for.
#[derive(Debug, PartialEq)]
enum Cli {
    Run {
        state_dir: Option<PathBuf>,
        key: Option<String>,
    },
    Help,
    Version,
}

/// Parses the worker's command line. By hand rather than with clap: the worker is started only
/// by the kernel with one option, and clap's parser would be ~150 KiB of code resident in every
/// worker process (docs/PERFORMANCE.md, worker RSS).
fn parse_cli(args: impl IntoIterator<Item = OsString>) -> Result<Cli, String> {
    let mut state_dir = None;
    let mut key = None;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.to_str() {
            Some("-h" | "--help") => return Ok(Cli::Help),
            Some("-V" | "--version") => return Ok(Cli::Version),
            Some("--state-dir") => match args.next() {
                Some(dir) => state_dir = Some(PathBuf::from(dir)),
                None => return Err("--state-dir needs a directory".into()),
            },
            Some("--key") => match args.next().and_then(|k| k.into_string().ok()) {
                Some(k) => key = Some(k),
                None => return Err("--key needs a connector key".into()),
            },
            Some(s) => match (s.strip_prefix("--state-dir="), s.strip_prefix("--key=")) {
                (Some(dir), _) => state_dir = Some(PathBuf::from(dir)),
                (_, Some(k)) => key = Some(k.to_owned()),
                _ => return Err(format!("unexpected argument {s:?}")),
            },
            None => return Err(format!("unexpected argument {arg:?}")),
        }
    }
    Ok(Cli::Run { state_dir, key })
}

fn main() -> ExitCode {
    tutti_os::memory::one_arena();
    let (state_dir, key) = match parse_cli(std::env::args_os().skip(1)) {
        Ok(Cli::Run { state_dir, key }) => (state_dir, key),
        // Written with the error ignored: `print!` would panic on a closed pipe.
        Ok(Cli::Help) => {
            let _ = std::io::stdout().write_all(USAGE.as_bytes());
            return ExitCode::SUCCESS;
        }
        Ok(Cli::Version) => {
            let version = format!("tutti-upstream-worker {}\n", env!("CARGO_PKG_VERSION"));
            let _ = std::io::stdout().write_all(version.as_bytes());
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("error: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    init_tracing();
    let Some(state_dir) = state_dir.or_else(tutti_rules::state_dir::from_env) else {
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
    if let Some(key) = key
        && key != config.key
    {
        tracing::error!(
            argv_key = %key,
            env_key = %config.key,
            "--key does not match TUTTI_WORKER_KEY; the kernel starts workers with both the same"
        );
        return ExitCode::FAILURE;
    }
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
    // OpenTelemetry export, only with OTEL_EXPORTER_OTLP_* set (SPEC §14).
    #[cfg(feature = "otel")]
    let telemetry = tutti_telemetry::init("tutti-upstream-worker", "worker")
        .map(|t| (t, runtime.spawn(t.exporting())));
    let outcome = runtime.block_on(run(config));
    #[cfg(feature = "otel")]
    if let Some((t, export)) = telemetry {
        runtime.block_on(t.shutdown(export));
    }
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
/// value masked. Dependencies' events that carry codes, tokens or raw upstream messages are
/// capped whatever `RUST_LOG` says (`tutti_rules::log_filter`).
///
/// `RUST_LOG` is read as `target=level` directives (`Targets`), not as a full `EnvFilter`:
/// span and field filters are not needed here, and `EnvFilter` compiles its directives with
/// regular expressions, which put the regex engine's code and tables in every worker's
/// resident set (docs/PERFORMANCE.md, worker RSS).
fn init_tracing() {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;

    let default = || Targets::new().with_default(LevelFilter::INFO);
    let mut unreadable = None;
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => spec.parse::<Targets>().unwrap_or_else(|e| {
            unreadable = Some((spec, e));
            default()
        }),
        _ => default(),
    };
    // Both filters are global and decide by callsite metadata only, so their verdicts are
    // cached per callsite: a disabled span or event (h2's trace spans, rmcp's per-session
    // span) costs nothing on the call path instead of a filter evaluation, span bookkeeping
    // in the registry and a clone per spawned send.
    // TUTTI_LOG_FORMAT=json: one JSON object per line (the writer then masks secrets in
    // their JSON-escaped form too, and escapes hidden characters the JSON way).
    let json = tutti_rules::log_format::LogFormat::from_env().is_json();
    let text = (!json).then(|| {
        tracing_subscriber::fmt::layer()
            .with_writer(RedactingStderr)
            .with_ansi(false)
    });
    let json = json.then(|| {
        tracing_subscriber::fmt::layer()
            .with_writer(RedactingStderr)
            .with_ansi(false)
            .json()
    });
    tracing_subscriber::registry()
        .with(tutti_rules::log_filter::secret_free())
        .with(filter)
        .with(text)
        .with(json)
        .init();
    if let Some((spec, error)) = unreadable {
        tracing::warn!(
            rust_log = %spec,
            %error,
            "TUTTI_WORKER_LOG (the worker's RUST_LOG) is not a comma-separated list of `target=level` directives; logging at info"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, String> {
        parse_cli(args.iter().map(OsString::from))
    }

    #[test]
    fn command_line() {
        let run = |dir: Option<&str>| Cli::Run {
            state_dir: dir.map(PathBuf::from),
            key: None,
        };
        assert_eq!(parse(&[]), Ok(run(None)));
        assert_eq!(parse(&["--state-dir", "/s d"]), Ok(run(Some("/s d"))));
        assert_eq!(parse(&["--state-dir=/s"]), Ok(run(Some("/s"))));
        assert_eq!(
            parse(&["--state-dir", "/s", "--key", "github"]),
            Ok(Cli::Run {
                state_dir: Some(PathBuf::from("/s")),
                key: Some("github".to_owned()),
            })
        );
        assert_eq!(
            parse(&["--key=github"]),
            Ok(Cli::Run {
                state_dir: None,
                key: Some("github".to_owned()),
            })
        );
        assert!(parse(&["--key"]).is_err_and(|e| e.contains("connector key")));
        assert_eq!(parse(&["--version"]), Ok(Cli::Version));
        assert_eq!(parse(&["-h"]), Ok(Cli::Help));
        assert!(parse(&["--state-dir"]).is_err_and(|e| e.contains("needs a directory")));
        assert!(parse(&["--bogus"]).is_err_and(|e| e.contains("--bogus")));
    }
}

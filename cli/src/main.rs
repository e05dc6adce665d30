#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

fn main() -> ExitCode {
    let cli = match tutti_cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return tutti_cli::usage_error(&err),
    };
    // Diagnostics only, to stderr; `TUTTI_LOG=debug` to see more. Never secrets.
    let filter = EnvFilter::try_from_env("TUTTI_LOG").unwrap_or_else(|_| EnvFilter::new("warn"));
    let json = tutti_proto::rules::log_format::LogFormat::from_env().is_json();
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(!json && std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .with_target(false);
    // Dependencies' events that carry codes or tokens stay off whatever the filter says.
    let secret_free = tutti_proto::rules::log_filter::secret_free();
    if json {
        logs.json().finish().with(secret_free).init();
    } else {
        logs.finish().with(secret_free).init();
    }
    tutti_cli::report(tutti_cli::run(cli))
}

#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = match tutti_cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return tutti_cli::usage_error(&err),
    };
    // Diagnostics only, to stderr; `TUTTI_LOG=debug` to see more. Never secrets.
    let filter = EnvFilter::try_from_env("TUTTI_LOG").unwrap_or_else(|_| EnvFilter::new("warn"));
    tutti_rules::log_format::init_stderr(filter, false);
    tutti_cli::report(tutti_cli::run(cli))
}

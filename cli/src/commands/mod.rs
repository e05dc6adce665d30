//! One module per command group. Each command returns the process exit code, or a
//! [`CliError`] that `report` prints as one line.

use std::path::Path;
use std::process::ExitCode;

use crate::args::{Command, ConfirmCommand, ConnectorCommand, ServiceCommand, SessionCommand};
use crate::error::CliError;

mod confirm;
pub(crate) mod connector;
pub(crate) mod doctor;
mod doctor_check;
mod doctor_market;
mod down;
mod lockfile;
pub(crate) mod login;
pub(crate) mod logs;
pub(crate) mod market;
pub(crate) mod review;
pub(crate) mod service;
pub(crate) mod session;
pub(crate) mod status;
mod status_telemetry;
pub(crate) mod up;
pub(crate) mod watch;

/// Runs every command except `up` (which needs no async runtime).
pub(crate) async fn dispatch(state_dir: &Path, command: Command) -> Result<ExitCode, CliError> {
    match command {
        Command::Up(up) => up::run(state_dir, up.demo),
        Command::Down => down::run(state_dir),
        Command::Status(a) if a.watch => watch::run(state_dir, a.json).await,
        Command::Status(a) => status::run(state_dir, a.json).await,
        Command::Connector(c) => match c {
            ConnectorCommand::Install(a) if market::is_market_source(&a.source) => {
                market::install(state_dir, &a).await
            }
            ConnectorCommand::Install(a) => connector::install(state_dir, a).await,
            ConnectorCommand::Uninstall(a) => connector::uninstall(state_dir, a).await,
            ConnectorCommand::Connect(a) => connector::connect(state_dir, a).await,
            ConnectorCommand::Disconnect(a) => connector::disconnect(state_dir, a).await,
            ConnectorCommand::Probe(a) => connector::probe(state_dir, a).await,
            ConnectorCommand::Available(a) => connector::available(state_dir, a.json).await,
            ConnectorCommand::Review(a) => review::review(state_dir, a).await,
            ConnectorCommand::Approve(a) => review::approve(state_dir, a).await,
            ConnectorCommand::Search(a) => market::search(state_dir, a).await,
            ConnectorCommand::Import(a) => crate::import::run(state_dir, a).await,
            ConnectorCommand::Lock(a) => lockfile::lock(state_dir, a).await,
            ConnectorCommand::Sync(a) => lockfile::sync(state_dir, a).await,
            ConnectorCommand::Outdated(a) => lockfile::upgrade::outdated(state_dir, a).await,
            ConnectorCommand::Upgrade(a) => lockfile::upgrade::upgrade(state_dir, a).await,
        },
        Command::Registry(r) => market::registry(state_dir, r).await,
        Command::Logs(a) => logs::run(state_dir, a).await,
        Command::Doctor(a) => doctor::run(state_dir, a.json).await,
        Command::Session(s) => match s {
            SessionCommand::Issue(a) => session::issue(state_dir, a).await,
            SessionCommand::Revoke(a) => session::revoke(state_dir, a).await,
        },
        Command::Confirm(c) => match c {
            ConfirmCommand::List(a) => confirm::list(state_dir, a.json).await,
            ConfirmCommand::Allow(a) => confirm::answer(state_dir, a.id, true).await,
            ConfirmCommand::Deny(a) => confirm::answer(state_dir, a.id, false).await,
        },
        Command::Service(s) => match s {
            ServiceCommand::Install(a) => service::install(state_dir, a),
            ServiceCommand::Uninstall(a) => service::uninstall(a.user),
            ServiceCommand::Status(a) => service::status(state_dir, a).await,
        },
        Command::Console(a) => crate::console::run(state_dir, a).await,
        Command::McpStdio(a) => crate::bridge::run(state_dir, a).await,
    }
}

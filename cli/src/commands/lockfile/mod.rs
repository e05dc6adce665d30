//! `tutti connector lock` and `sync` (SPEC §17): one JSON document naming every installed
//! connector (its source and the choices that build it again, the release SHA-256, its
//! artefacts' hashes from the release's `tutti-lock.json`, secret names, risk overrides and
//! allow flags), and a runtime brought to exactly that set. Never a secret value: secrets
//! are names in a release, and the source's `--set` values are refused for secrets.

mod document;
mod sync;
pub(crate) mod upgrade;

use std::path::Path;
use std::process::ExitCode;

use serde_json::Value;
use tutti_market::origin;
use tutti_proto::kernel::{ConnectorStatus, Empty};

use document::{FORMAT, LockFile, LockedConnector, read_json, release_dir, strings};

use crate::args::LockArgs;
use crate::error::CliError;
use crate::kernel::Kernel;
use crate::output::{emit, json_line};

pub(crate) use sync::sync;

pub(crate) async fn lock(state_dir: &Path, args: LockArgs) -> Result<ExitCode, CliError> {
    let mut kernel = Kernel::connect(state_dir).await?;
    let status = kernel
        .client
        .status(Empty {})
        .await
        .map_err(|s| kernel.error(s))?
        .into_inner();
    let registry = read_json(&tutti_rules::state_dir::layout::registry(state_dir));
    let connectors = status
        .connectors
        .iter()
        .map(|c| locked(state_dir, c, &registry["connectors"][&c.key]))
        .collect::<Result<Vec<_>, _>>()?;
    let file = LockFile {
        format: FORMAT,
        connectors,
    };
    let mut text =
        serde_json::to_string_pretty(&file).map_err(|e| CliError::Market(e.to_string()))?;
    text.push('\n');
    std::fs::write(&args.output, text).map_err(|e| CliError::io("write", &args.output, e))?;
    let count = file.connectors.len();
    emit(&if args.json {
        json_line(&serde_json::json!({"path": args.output, "connectors": count}))?
    } else {
        format!("locked {count} connector(s) in {}\n", args.output.display())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// One connector's lock entry, from its installed release copy and its record in
/// `registry.json` (`record`: the allow flags).
fn locked(
    state_dir: &Path,
    c: &ConnectorStatus,
    record: &Value,
) -> Result<LockedConnector, CliError> {
    let dir = release_dir(state_dir, &c.key, &c.sha256);
    let origin = origin::read(&dir).map_err(|e| CliError::Market(e.to_string()))?;
    let pinned = tutti_market::lock::read(&dir).ok();
    let manifest = read_json(&dir.join("connector.json"));
    let source = match &origin {
        None => "folder".to_owned(),
        Some(o) if o.source.is_empty() => "server.json".to_owned(),
        Some(o) => o.source.clone(),
    };
    Ok(LockedConnector {
        key: c.key.clone(),
        source,
        version: c.version.clone(),
        sha256: c.sha256.clone(),
        origin,
        artefacts: pinned
            .as_ref()
            .map(|p| p.artefacts.clone())
            .unwrap_or_default(),
        interpreter: pinned.and_then(|p| p.interpreter),
        secret_names: c.secret_names.clone(),
        tool_risk: manifest["toolRisk"]
            .as_object()
            .map(|m| m.clone().into_iter().collect())
            .unwrap_or_default(),
        allow_commands: strings(&record["allowCommands"]),
        allow_env: strings(&record["allowEnv"]),
        trust_updates: record["trustUpdates"] == true,
        allow_skill_findings: record["skillFindings"]
            .as_array()
            .is_some_and(|f| !f.is_empty()),
    })
}

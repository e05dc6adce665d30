//! `tutti connector outdated` and `upgrade KEY [--to VERSION]` (SPEC §17): a market release's
//! `tutti-source.json` names its source and version; the kernel asks the source (registry,
//! npm, PyPI) for its newest version; an upgrade stages the new pinned release through the
//! same path as `install` and installs it as an upgrade (the old release serves until the new
//! one commits; changed definitions are reviewed as SPEC §12 says).

use std::path::Path;
use std::process::ExitCode;

use serde::Serialize;
use tutti_market::origin::{self, Origin};
use tutti_proto::kernel::{ConnectorStatus, Empty, LatestRequest};

use super::document::{read_json, release_dir, stage_request, strings};
use crate::args::{InstallArgs, JsonFlag, MarketInstallArgs, UpgradeArgs};
use crate::error::CliError;
use crate::kernel::Kernel;
use crate::output::{emit, json_line, note, table, visible};

/// A connector whose source publishes another version.
#[derive(Serialize)]
struct Outdated {
    key: String,
    source: String,
    installed: String,
    latest: String,
}

pub(crate) async fn outdated(state_dir: &Path, args: JsonFlag) -> Result<ExitCode, CliError> {
    let mut kernel = Kernel::connect(state_dir).await?;
    let status = kernel.client.status(Empty {}).await;
    let status = status.map_err(|s| kernel.error(s))?.into_inner();
    let mut found = Vec::new();
    for c in &status.connectors {
        let Some(origin) = market_origin(state_dir, c) else {
            continue;
        };
        let Some((kind, _)) = origin.source.split_once(':') else {
            continue;
        };
        match latest(&kernel, kind, &origin.name).await {
            Ok(Some(v)) if v != origin.version => found.push(Outdated {
                key: c.key.clone(),
                source: origin.source.clone(),
                installed: origin.version.clone(),
                latest: v,
            }),
            Ok(_) => {}
            Err(e) => note(&format!("tutti: {}: {}", c.key, visible(&e.to_string()))),
        }
    }
    if args.json {
        emit(&json_line(&found)?)?;
    } else if found.is_empty() {
        emit("every market-installed connector is at its source's latest version\n")?;
    } else {
        let rows: Vec<Vec<String>> = found
            .iter()
            .map(|o| {
                vec![
                    o.key.clone(),
                    visible(&o.source),
                    visible(&o.installed),
                    visible(&o.latest),
                ]
            })
            .collect();
        emit(&table(&["KEY", "SOURCE", "INSTALLED", "LATEST"], &rows))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The source record of a connector's installed release, when it came from the market.
fn market_origin(state_dir: &Path, c: &ConnectorStatus) -> Option<Origin> {
    origin::read(&release_dir(state_dir, &c.key, &c.sha256))
        .ok()
        .flatten()
}

/// The newest version of `name` at its source `kind`; `None` for a source without versions.
async fn latest(kernel: &Kernel, kind: &str, name: &str) -> Result<Option<String>, CliError> {
    if !matches!(kind, "registry" | "npm" | "pypi") || name.is_empty() {
        return Ok(None);
    }
    let request = LatestRequest {
        kind: kind.to_owned(),
        name: name.to_owned(),
    };
    let reply = kernel.market().latest(request).await;
    Ok(Some(
        reply.map_err(|s| kernel.error(s))?.into_inner().version,
    ))
}

pub(crate) async fn upgrade(state_dir: &Path, args: UpgradeArgs) -> Result<ExitCode, CliError> {
    let mut kernel = Kernel::connect(state_dir).await?;
    let status = kernel.client.status(Empty {}).await;
    let status = status.map_err(|s| kernel.error(s))?.into_inner();
    let Some(c) = status.connectors.iter().find(|c| c.key == args.key) else {
        return Err(CliError::Market(format!(
            "no connector {:?} is installed; see `tutti status`",
            args.key
        )));
    };
    let Some(origin) = market_origin(state_dir, c) else {
        return Err(CliError::Market(format!(
            "{} was installed from a release folder; upgrade it with `tutti connector install DIR`",
            args.key
        )));
    };
    let kind = origin.source.split_once(':').map_or("", |(k, _)| k);
    let target = match &args.to {
        Some(v) => v.clone(),
        None => latest(&kernel, kind, &origin.name)
            .await?
            .unwrap_or_default(),
    };
    if origin.at_version(&target).is_none() || target.is_empty() {
        return Err(CliError::Market(format!(
            "{}'s source ({}) has no versions to choose from; install the newer bundle or server.json with `tutti connector install`",
            args.key,
            visible(&origin.source)
        )));
    }
    if target == origin.version {
        let what = if args.to.is_some() {
            ""
        } else {
            ", its source's latest"
        };
        emit(&format!(
            "{} is at {} already{what}\n",
            args.key,
            visible(&target)
        ))?;
        return Ok(ExitCode::SUCCESS);
    }
    let install = install_args(state_dir, &args, &origin, &target);
    let request = stage_request(&origin, Some(&target));
    crate::commands::market::install_staged(state_dir, request, &install).await
}

/// The install of the new version keeps what the person allowed for the installed one.
fn install_args(
    state_dir: &Path,
    args: &UpgradeArgs,
    origin: &Origin,
    target: &str,
) -> InstallArgs {
    let registry = read_json(&tutti_rules::state_dir::layout::registry(state_dir));
    let record = &registry["connectors"][&args.key];
    InstallArgs {
        source: origin.at_version(target).unwrap_or_default(),
        market: MarketInstallArgs::default(),
        yes: args.yes,
        allow_commands: strings(&record["allowCommands"]),
        allow_env: strings(&record["allowEnv"]),
        trust_updates: record["trustUpdates"] == true,
        json: args.json,
        allow_skill_findings: false,
        probe: false,
    }
}

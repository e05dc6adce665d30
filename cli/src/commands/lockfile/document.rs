//! The lock file's document (`tutti.lock.json`) and what `lock`, `sync` and `upgrade` read
//! of an installed release.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tutti_market::origin::Origin;
use tutti_market::plan::LockedArtefact;
use tutti_proto::kernel::StageRequest;

use crate::error::CliError;

/// The lock file's format version; a reader refuses any other.
pub(super) const FORMAT: u32 = 1;

/// `tutti.lock.json`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct LockFile {
    pub(super) format: u32,
    pub(super) connectors: Vec<LockedConnector>,
}

/// One installed connector as the lock names it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct LockedConnector {
    pub(super) key: String,
    /// `folder`, `server.json`, or the install argument that builds it again.
    pub(super) source: String,
    pub(super) version: String,
    /// The release's SHA-256.
    pub(super) sha256: String,
    /// How a market release is built again (`None`: a folder install).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) origin: Option<Origin>,
    #[serde(default)]
    pub(super) artefacts: Vec<LockedArtefact>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) interpreter: Option<String>,
    #[serde(default)]
    pub(super) secret_names: Vec<String>,
    /// The manifest's `toolRisk` overrides.
    #[serde(default)]
    pub(super) tool_risk: BTreeMap<String, Value>,
    #[serde(default)]
    pub(super) allow_commands: Vec<String>,
    #[serde(default)]
    pub(super) allow_env: Vec<String>,
    #[serde(default)]
    pub(super) trust_updates: bool,
    #[serde(default)]
    pub(super) allow_skill_findings: bool,
}

/// The kernel's copy of release `key`/`sha256`.
pub(super) fn release_dir(state_dir: &Path, key: &str, sha256: &str) -> PathBuf {
    tutti_rules::state_dir::layout::releases(state_dir)
        .join(key)
        .join(sha256)
}

/// The strings of a JSON array (none for anything else).
pub(super) fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_owned))
        .collect()
}

/// A JSON file, `null` when it is missing or not JSON.
pub(super) fn read_json(path: &Path) -> Value {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null)
}

/// Reads a lock file written by `lock`.
pub(super) fn read_lock_file(path: &Path) -> Result<LockFile, CliError> {
    let bytes = std::fs::read(path).map_err(|e| CliError::io("read", path, e))?;
    let file: LockFile = serde_json::from_slice(&bytes).map_err(|e| {
        CliError::Market(format!(
            "{}: not a lock file ({e}); give a file written by `tutti connector lock`",
            path.display()
        ))
    })?;
    if file.format != FORMAT {
        return Err(CliError::Market(format!(
            "{}: lock format {} is not the supported {FORMAT}; write it again with this version's `tutti connector lock`",
            path.display(),
            file.format
        )));
    }
    Ok(file)
}

/// The install request that builds `origin` again (at `version`, when given).
pub(super) fn stage_request(origin: &Origin, version: Option<&str>) -> StageRequest {
    let c = &origin.choices;
    let index = |n: Option<u32>| n.map_or(-1, |n| i32::try_from(n).unwrap_or(i32::MAX));
    let source = version
        .and_then(|v| origin.at_version(v))
        .unwrap_or_else(|| origin.source.clone());
    StageRequest {
        source,
        server_json: origin
            .server_json
            .as_ref()
            .map(|doc| serde_json::to_vec(doc).unwrap_or_default())
            .unwrap_or_default(),
        source_label: "from the lock".into(),
        set: c.set.clone().into_iter().collect(),
        package_index: index(c.package_index),
        remote_index: index(c.remote_index),
        key: c.key.clone(),
        allow_scripts: c.allow_scripts,
        allow_sdist: c.allow_sdist,
        extra_args: c.extra_args.clone(),
        extra_runtime_args: c.extra_runtime_args.clone(),
        extra_env: c.extra_env.clone().into_iter().collect(),
        extra_secrets: c.extra_secrets.clone(),
    }
}

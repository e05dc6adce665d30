//! A market release's `tutti-source.json`: where it came from and the choices it was built
//! with, exactly enough to build it again (`connector sync`) or to ask its source for a newer
//! version (`connector outdated`, `upgrade`). Written into the staged release, so the release's
//! SHA-256 covers it. Never holds a secret value: `--set` values are refused for secrets, and
//! secrets are names only.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::MarketError;

/// The origin's file name inside a release folder.
pub const ORIGIN_FILE: &str = "tutti-source.json";

/// The contents of `tutti-source.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Origin {
    /// The install argument that builds this release again, version included
    /// (`registry:NAME@1.2.0`, `npm:pkg@1.2.0`, `mcpb:URL#sha256=…`, a bundle's path); empty
    /// for a `server.json` document (then `server_json` holds it).
    pub source: String,
    /// The registry the server was found in (`registry:` sources).
    pub registry: String,
    /// `registry:`/`npm:`/`pypi:` sources: the name to ask for newer versions.
    pub name: String,
    /// The version that was resolved.
    pub version: String,
    /// The `server.json` document a file source gave.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_json: Option<serde_json::Value>,
    /// What the person chose at install (`--set`, `--package`, `--remote`, `--key`, ...).
    pub choices: OriginChoices,
}

/// The choices of an install that a rebuild repeats.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct OriginChoices {
    pub set: BTreeMap<String, String>,
    pub package_index: Option<u32>,
    pub remote_index: Option<u32>,
    pub key: String,
    pub allow_scripts: bool,
    pub allow_sdist: bool,
    pub extra_args: Vec<String>,
    pub extra_runtime_args: Vec<String>,
    pub extra_env: BTreeMap<String, String>,
    pub extra_secrets: Vec<String>,
}

impl Origin {
    /// The same source at another version (`registry:`, `npm:`, `pypi:` only).
    pub fn at_version(&self, version: &str) -> Option<String> {
        let kind = self.source.split_once(':')?.0;
        matches!(kind, "registry" | "npm" | "pypi")
            .then(|| format!("{kind}:{}@{version}", self.name))
    }
}

/// Writes `release_dir/tutti-source.json`.
pub fn write(release_dir: &Path, origin: &Origin) -> Result<(), MarketError> {
    let path = release_dir.join(ORIGIN_FILE);
    let mut text = serde_json::to_string_pretty(origin).map_err(|e| MarketError::Lock {
        path: path.clone(),
        problem: e.to_string(),
    })?;
    text.push('\n');
    std::fs::write(&path, text).map_err(|source| MarketError::Io { path, source })
}

/// Reads `release_dir/tutti-source.json`; `Ok(None)` when the release has none (a folder).
pub fn read(release_dir: &Path) -> Result<Option<Origin>, MarketError> {
    let path = release_dir.join(ORIGIN_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(MarketError::Io { path, source }),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| MarketError::Lock {
            path,
            problem: format!("not a source record: {e}"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_origin_reads_back_and_names_its_source_at_another_version() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let origin = Origin {
            source: "registry:io.example/x@1.0.0".into(),
            registry: "fix".into(),
            name: "io.example/x".into(),
            version: "1.0.0".into(),
            ..Default::default()
        };
        write(dir.path(), &origin).unwrap_or_else(|e| panic!("write: {e}"));
        let back = read(dir.path()).unwrap_or_else(|e| panic!("read: {e}"));
        assert_eq!(back, Some(origin.clone()));
        assert_eq!(
            origin.at_version("1.1.0").as_deref(),
            Some("registry:io.example/x@1.1.0")
        );
        let bundle = Origin {
            source: "/tmp/x.mcpb".into(),
            ..Default::default()
        };
        assert_eq!(bundle.at_version("2"), None);
        let empty = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        assert_eq!(read(empty.path()).unwrap_or_else(|e| panic!("{e}")), None);
    }
}

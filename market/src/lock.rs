//! A release's `tutti-lock.json`: what was pinned into it (source, resolved version, every
//! artefact with its URL, version, hash and size), the interpreter seen at install, and which
//! install scripts were allowed. Written by [`crate::pin::pin`]; read back by `tutti doctor`,
//! `connector lock` and `sync`.

use std::path::{Path, PathBuf};

use crate::error::MarketError;
use crate::plan::{LockedArtefact, PackageRef, PinOptions, Pinned};

/// The lock's file name inside a release folder.
pub const LOCK_FILE: &str = "tutti-lock.json";

/// The document's format version; a reader refuses any other.
pub const LOCK_FORMAT: u32 = 1;

/// The contents of `tutti-lock.json`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseLock {
    pub format: u32,
    /// The package as its source named it.
    pub source: PackageRef,
    /// The version that was pinned.
    pub version: String,
    /// Every artefact fetched, in a stable order.
    pub artefacts: Vec<LockedArtefact>,
    /// `node --version`, `python3 --version` or the container engine's version at install.
    pub interpreter: Option<String>,
    pub scripts: ScriptsLock,
}

/// Install scripts in the package's tree and whether they ran.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScriptsLock {
    /// `--allow-scripts` was given.
    pub allowed: bool,
    /// Packages of the tree that have install scripts (they ran only when `allowed`).
    pub packages: Vec<String>,
}

impl ReleaseLock {
    /// The lock of a package just pinned.
    pub fn new(source: &PackageRef, pinned: &Pinned, options: &PinOptions) -> Self {
        ReleaseLock {
            format: LOCK_FORMAT,
            source: source.clone(),
            version: pinned.version.clone(),
            artefacts: pinned.artefacts.clone(),
            interpreter: pinned.interpreter.clone(),
            scripts: ScriptsLock {
                allowed: options.allow_scripts,
                packages: pinned.scripts.clone(),
            },
        }
    }

    /// Bytes of all artefacts together.
    pub fn total_size(&self) -> u64 {
        self.artefacts.iter().map(|a| a.size).sum()
    }
}

/// Writes `release_dir/tutti-lock.json`.
pub fn write(release_dir: &Path, lock: &ReleaseLock) -> Result<(), MarketError> {
    let path = release_dir.join(LOCK_FILE);
    let mut text = serde_json::to_string_pretty(lock).map_err(|e| MarketError::Lock {
        path: path.clone(),
        problem: e.to_string(),
    })?;
    text.push('\n');
    std::fs::write(&path, text).map_err(|source| MarketError::Io { path, source })
}

/// Reads `release_dir/tutti-lock.json`.
pub fn read(release_dir: &Path) -> Result<ReleaseLock, MarketError> {
    let path: PathBuf = release_dir.join(LOCK_FILE);
    let text = std::fs::read_to_string(&path).map_err(|source| MarketError::Io {
        path: path.clone(),
        source,
    })?;
    let lock: ReleaseLock = serde_json::from_str(&text).map_err(|e| MarketError::Lock {
        path: path.clone(),
        problem: format!("not a lock file: {e}"),
    })?;
    if lock.format != LOCK_FORMAT {
        return Err(MarketError::Lock {
            path,
            problem: format!("format {} is not the supported {LOCK_FORMAT}", lock.format),
        });
    }
    Ok(lock)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ReleaseLock {
        ReleaseLock {
            format: LOCK_FORMAT,
            source: PackageRef::Npm {
                name: "@scope/pkg".into(),
                version: "1.2.3".into(),
            },
            version: "1.2.3".into(),
            artefacts: vec![LockedArtefact {
                name: "@scope/pkg".into(),
                version: "1.2.3".into(),
                url: "https://registry.npmjs.org/@scope/pkg/-/pkg-1.2.3.tgz".into(),
                hash: "sha512-AAAA".into(),
                size: 1234,
            }],
            interpreter: Some("v22.1.0".into()),
            scripts: ScriptsLock {
                allowed: false,
                packages: vec![],
            },
        }
    }

    #[test]
    fn a_written_lock_reads_back_the_same() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let lock = sample();
        write(dir.path(), &lock).unwrap_or_else(|e| panic!("write: {e}"));
        let text = std::fs::read_to_string(dir.path().join(LOCK_FILE))
            .unwrap_or_else(|e| panic!("read: {e}"));
        assert!(text.contains("\"kind\": \"npm\""), "{text}");
        assert_eq!(
            read(dir.path()).unwrap_or_else(|e| panic!("read: {e}")),
            lock
        );
        assert_eq!(lock.total_size(), 1234);
    }

    #[test]
    fn a_lock_of_another_format_is_refused_with_its_path() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let mut lock = sample();
        lock.format = 9;
        write(dir.path(), &lock).unwrap_or_else(|e| panic!("write: {e}"));
        let err = read(dir.path()).err().map(|e| e.to_string());
        let err = err.unwrap_or_default();
        assert!(err.contains("tutti-lock.json: format 9"), "{err}");
    }
}

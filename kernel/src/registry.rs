//! `registry.json`: the single authoritative record of installed connectors. Only the
//! kernel writes it, by atomic replace (write temp, fsync, rename, fsync dir).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tutti_rules::atomic_file;

use crate::error::KernelError;

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Registry {
    #[serde(default)]
    pub revision: u64,
    /// Increased at every kernel start; logged with the kernel's start line (generation
    /// numbers come from `generation_ceiling`, not from this).
    #[serde(default)]
    pub boot_epoch: u32,
    /// Generation numbers up to this one may have been handed out; a new kernel starts
    /// above it, so generations never repeat across restarts.
    #[serde(default)]
    pub generation_ceiling: u64,
    #[serde(default)]
    pub connectors: BTreeMap<String, Installed>,
    /// Connectors an uninstall took out of `connectors` in the same write, until their
    /// secrets and release copies are deleted: a kernel killed in between deletes them at its
    /// next start (`housekeeping::reclaim`), and only what this names.
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub uninstalling: std::collections::BTreeSet<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Installed {
    pub version: String,
    pub sha256: String,
    /// Absolute path of the immutable release copy.
    pub release_dir: PathBuf,
    pub installed_at_unix: u64,
    /// Trust: the exact argv or URL the user confirmed at install.
    #[serde(default)]
    pub confirmed_launch: Vec<String>,
    #[serde(default)]
    pub allow_commands: Vec<String>,
    /// `--allow-env`: injection variables (SPEC §12) the user allowed in `env` or as secrets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_env: Vec<String>,
    /// `ready` when connected and every declared secret is stored, else `required`.
    pub auth: AuthState,
    /// False after `tutti connector disconnect` until the next `connect`.
    #[serde(default = "yes")]
    pub connected: bool,
    /// While an upgrade's first generation has not committed: the release it replaces (the
    /// last one that committed). The upgrade becomes the current release when its generation
    /// commits; if its tools are refused or it never starts, this one is current again, so a
    /// restart (of a worker or of the kernel) never brings back a release that failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<Box<Installed>>,
    /// What the skill scan found in this release and the user installed anyway
    /// (`--allow-skill-findings`, SPEC §12), one `file:line: what` line each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skill_findings: Vec<String>,
    /// The pinned definitions (SPEC §12, `release/pin.rs`) of the release that committed last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pin: Option<crate::release::pin::Pin>,
    /// `install --trust-updates`: offers commit without review.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub trust_updates: bool,
}

impl Installed {
    /// An upgrade that needs a secret not stored yet (and was not disconnected): it waits
    /// for `connect`, and the release it replaces, if live, keeps serving meanwhile.
    pub fn upgrade_waits_for_secrets(&self) -> bool {
        self.auth == AuthState::Required && self.connected && self.previous.is_some()
    }
}

fn yes() -> bool {
    true
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuthState {
    Ready,
    Required,
}

impl Registry {
    pub fn load(path: &Path) -> Result<Registry, KernelError> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| KernelError::Registry {
                path: path.to_path_buf(),
                detail: format!("not valid: {e} (fix or move it away; the kernel never guesses)"),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Registry::default()),
            Err(e) => Err(KernelError::Registry {
                path: path.to_path_buf(),
                detail: e.to_string(),
            }),
        }
    }

    /// Bumps the revision and replaces the file atomically.
    pub fn save(&mut self, path: &Path) -> Result<(), KernelError> {
        self.revision += 1;
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| KernelError::Registry {
            path: path.to_path_buf(),
            detail: e.to_string(),
        })?;
        write_private(path, &bytes).map_err(|e| KernelError::Registry {
            path: path.to_path_buf(),
            detail: e.to_string(),
        })
    }
}

/// Write temp, fsync, rename, fsync the directory ([`atomic_file::write`]); the file is
/// owner-only (0600 on Unix).
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    atomic_file::write(path, bytes, Some(0o600))
}

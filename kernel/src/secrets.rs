//! Credential values: `secrets/<key>.json` (0600) in `secrets/` (0700). Nowhere else.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::KernelError;
use crate::registry::write_private;

pub struct SecretStore {
    dir: PathBuf,
}

impl SecretStore {
    pub fn open(state_dir: &Path) -> Result<Self, KernelError> {
        let dir = state_dir.join("secrets");
        crate::paths::create_private_dir(&dir).map_err(|source| KernelError::Io {
            context: format!("creating {}", dir.display()),
            source,
        })?;
        Ok(Self { dir })
    }

    fn file(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.json"))
    }

    pub fn load(&self, key: &str) -> BTreeMap<String, String> {
        std::fs::read(self.file(key))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    /// Merges `values` into the connector's stored secrets.
    pub fn store(&self, key: &str, values: &BTreeMap<String, String>) -> Result<(), KernelError> {
        let mut all = self.load(key);
        all.extend(values.iter().map(|(k, v)| (k.clone(), v.clone())));
        let bytes = serde_json::to_vec(&all).map_err(|e| KernelError::Io {
            context: "encoding secrets".into(),
            source: std::io::Error::other(e),
        })?;
        write_private(&self.file(key), &bytes).map_err(|source| KernelError::Io {
            context: format!("writing secrets of {key}"),
            source,
        })
    }

    pub fn delete(&self, key: &str) {
        let _ = std::fs::remove_file(self.file(key));
    }

    /// Every stored value of every connector (for redaction).
    pub fn all_values(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Ok(rd) = std::fs::read_dir(&self.dir) {
            for e in rd.flatten() {
                if let Some(key) = e.path().file_stem().and_then(|s| s.to_str()) {
                    out.extend(crate::oauth_record::secret_values(&self.load(key)));
                }
            }
        }
        out
    }
}

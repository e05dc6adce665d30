//! Credential values: `secrets/<key>.json` (0600) in `secrets/` (0700). Nowhere else.
//!
//! What the kernel asks of them often (`status`'s token expiry) is kept in memory beside the
//! files: filled at `open`, updated by every `store` and `delete`, so those questions read
//! no file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::KernelError;
use crate::registry::write_private;

/// What is kept in memory of one connector's stored secrets.
#[derive(Clone, Debug, Default, PartialEq)]
struct Summary {
    /// When the OAuth access token expires (0 when unknown or not logged in).
    token_expires_unix_ms: i64,
}

impl Summary {
    fn of(stored: &BTreeMap<String, String>) -> Summary {
        let rec = crate::oauth_record::record(stored);
        Summary {
            token_expires_unix_ms: rec
                .grant
                .filter(|_| !rec.needs_login)
                .map_or(0, |g| g.expires_unix_ms),
        }
    }
}

/// A panic while holding the lock leaves plain data behind; keep serving.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub struct SecretStore {
    dir: PathBuf,
    /// Per connector with a secrets file. Its lock is held across each change of a file, so
    /// the two never disagree.
    known: Mutex<BTreeMap<String, Summary>>,
}

impl SecretStore {
    pub fn open(state_dir: &Path) -> Result<Self, KernelError> {
        let dir = state_dir.join("secrets");
        crate::paths::create_private_dir(&dir).map_err(|source| KernelError::Io {
            context: format!("creating {}", dir.display()),
            source,
        })?;
        let store = Self {
            dir,
            known: Mutex::default(),
        };
        let known = store
            .keys()
            .into_iter()
            .map(|key| {
                let summary = Summary::of(&store.load(&key));
                (key, summary)
            })
            .collect();
        *lock(&store.known) = known;
        Ok(store)
    }

    fn file(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.json"))
    }

    /// The connectors with a secrets file.
    fn keys(&self) -> Vec<String> {
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        rd.flatten()
            .filter_map(|e| {
                let path = e.path();
                let is_json = path.extension().is_some_and(|x| x == "json");
                let key = path.file_stem().and_then(|s| s.to_str()).map(str::to_owned);
                key.filter(|_| is_json)
            })
            .collect()
    }

    pub fn load(&self, key: &str) -> BTreeMap<String, String> {
        std::fs::read(self.file(key))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    /// Merges `values` into the connector's stored secrets.
    pub fn store(&self, key: &str, values: &BTreeMap<String, String>) -> Result<(), KernelError> {
        let mut known = lock(&self.known);
        let mut all = self.load(key);
        all.extend(values.iter().map(|(k, v)| (k.clone(), v.clone())));
        let bytes = serde_json::to_vec(&all).map_err(|e| KernelError::Io {
            context: "encoding secrets".into(),
            source: std::io::Error::other(e),
        })?;
        write_private(&self.file(key), &bytes).map_err(|source| KernelError::Io {
            context: format!("writing secrets of {key}"),
            source,
        })?;
        known.insert(key.to_owned(), Summary::of(&all));
        Ok(())
    }

    pub fn delete(&self, key: &str) {
        let mut known = lock(&self.known);
        let _ = std::fs::remove_file(self.file(key));
        known.remove(key);
    }

    /// When the connector's OAuth access token expires (0 when unknown or not logged in),
    /// from memory.
    pub fn token_expiry(&self, key: &str) -> i64 {
        lock(&self.known)
            .get(key)
            .map_or(0, |s| s.token_expires_unix_ms)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oauth_record::LOGIN;

    fn login(expires_unix_ms: i64, needs_login: bool) -> BTreeMap<String, String> {
        let record = serde_json::json!({
            "grant": {
                "url": "https://mcp.example.com/mcp",
                "metadata": {
                    "authorization_endpoint": "https://as.example.com/authorize",
                    "token_endpoint": "https://as.example.com/token"
                },
                "clientId": "c",
                "redirectUri": "http://127.0.0.1:1/callback",
                "credentials": {"client_id": "c", "token_response": null},
                "expiresUnixMs": expires_unix_ms
            },
            "needsLogin": needs_login
        });
        BTreeMap::from([(LOGIN.to_owned(), record.to_string())])
    }

    #[test]
    fn the_token_expiry_is_kept_from_open_and_every_store_not_read_per_question() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = SecretStore::open(dir.path()).expect("store");
        store.store("a", &login(1_000, false)).expect("stored");
        // Kept at start from the stored record.
        let store = SecretStore::open(dir.path()).expect("store again");
        assert_eq!(store.token_expiry("a"), 1_000);
        // A refresh stores new tokens: the new expiry, at once.
        store.store("a", &login(2_000, false)).expect("stored");
        assert_eq!(store.token_expiry("a"), 2_000);
        // Answered from memory: the file is not read for it.
        std::fs::remove_file(dir.path().join("secrets").join("a.json")).expect("removed");
        assert_eq!(store.token_expiry("a"), 2_000);
        // A login marked for renewal has no usable token; a deleted one none at all.
        store.store("a", &login(3_000, true)).expect("stored");
        assert_eq!(store.token_expiry("a"), 0);
        store.store("b", &login(4_000, false)).expect("stored");
        store.delete("b");
        assert_eq!(store.token_expiry("b"), 0);
    }
}

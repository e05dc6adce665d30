//! Credential values: `secrets/<key>.json` (0600) in `secrets/` (0700). Nowhere else.
//!
//! What the kernel asks of them often (`status`'s token expiry, the redactor that masks every
//! stored value, which secrets a connector still lacks) is kept in memory beside the files: filled at `open`, updated by every
//! `store` and `delete`, so those questions read no file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tutti_rules::redact::{Redactor, worth_masking};

use crate::error::KernelError;
use crate::registry::write_private;

/// What is kept in memory of one connector's stored secrets (no `Debug`: it holds values).
#[derive(Default)]
struct Summary {
    /// When the OAuth access token expires (0 when unknown or not logged in).
    token_expires_unix_ms: i64,
    /// The account the OAuth login belongs to (empty when unknown or not logged in).
    account: String,
    /// The values to mask (`oauth_record::secret_values`).
    values: Vec<String>,
    /// The names stored with a non-empty value.
    present: BTreeSet<String>,
    /// The OAuth login is usable (`oauth_record::Record::logged_in`).
    logged_in: bool,
}

impl Summary {
    fn of(stored: &BTreeMap<String, String>) -> Summary {
        let rec = crate::connect::oauth_record::record(stored);
        Summary {
            token_expires_unix_ms: rec
                .grant
                .as_ref()
                .filter(|_| !rec.needs_login)
                .map_or(0, |g| g.expires_unix_ms),
            account: rec
                .grant
                .as_ref()
                .filter(|_| !rec.needs_login)
                .and_then(|g| g.account.as_ref()?.display().map(str::to_owned))
                .unwrap_or_default(),
            values: crate::connect::oauth_record::secret_values(stored),
            present: stored
                .iter()
                .filter(|(_, v)| !v.is_empty())
                .map(|(n, _)| n.clone())
                .collect(),
            logged_in: rec.logged_in(),
        }
    }
}

/// A panic while holding the lock leaves plain data behind; keep serving.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub struct SecretStore {
    dir: PathBuf,
    /// Its lock is held across each change of a file, so the two never disagree.
    known: Mutex<Known>,
}

/// The memory beside the files.
#[derive(Default)]
struct Known {
    /// Per connector with a secrets file.
    each: BTreeMap<String, Summary>,
    /// Masks every value in `each`; rebuilt whenever `each` changes.
    redactor: Arc<Redactor>,
}

impl Known {
    fn set(&mut self, key: &str, summary: Option<Summary>) {
        match summary {
            Some(s) => self.each.insert(key.to_owned(), s),
            None => self.each.remove(key),
        };
        self.rebuild();
    }

    fn rebuild(&mut self) {
        let all = self.each.values().flat_map(|s| s.values.iter().cloned());
        self.redactor = Arc::new(Redactor::new(worth_masking(all)));
    }
}

impl SecretStore {
    pub fn open(state_dir: &Path) -> Result<Self, KernelError> {
        let dir = tutti_rules::state_dir::layout::secrets(state_dir);
        crate::paths::create_private_dir(&dir).map_err(|source| KernelError::Io {
            context: format!("creating {}", dir.display()),
            source,
        })?;
        let store = Self {
            dir,
            known: Mutex::default(),
        };
        let mut known = Known::default();
        for key in store.keys() {
            let summary = Summary::of(&store.load(&key));
            known.each.insert(key, summary);
        }
        known.rebuild();
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
        known.set(key, Some(Summary::of(&all)));
        Ok(())
    }

    pub fn delete(&self, key: &str) {
        let mut known = lock(&self.known);
        let _ = std::fs::remove_file(self.file(key));
        known.set(key, None);
    }

    /// When the connector's OAuth access token expires (0 when unknown or not logged in),
    /// from memory.
    pub fn token_expiry(&self, key: &str) -> i64 {
        lock(&self.known)
            .each
            .get(key)
            .map_or(0, |s| s.token_expires_unix_ms)
    }

    /// The account of the connector's OAuth login (empty when unknown), from memory.
    pub fn account(&self, key: &str) -> String {
        lock(&self.known)
            .each
            .get(key)
            .map_or_else(String::new, |s| s.account.clone())
    }

    /// Which of `names` the connector has no non-empty value for, from memory.
    pub fn missing(&self, key: &str, names: &[String]) -> Vec<String> {
        let known = lock(&self.known);
        let present = known.each.get(key).map(|s| &s.present);
        names
            .iter()
            .filter(|n| !present.is_some_and(|p| p.contains(*n)))
            .cloned()
            .collect()
    }

    /// Whether the connector's OAuth login is usable (`Record::logged_in`), from memory.
    pub fn logged_in(&self, key: &str) -> bool {
        lock(&self.known).each.get(key).is_some_and(|s| s.logged_in)
    }

    /// Masks every stored value of every connector (the one built at the last change).
    pub fn redactor(&self) -> Arc<Redactor> {
        lock(&self.known).redactor.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connect::oauth_record::LOGIN;

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
                "credentials": {
                    "client_id": "c",
                    "token_response": {"access_token": "at-value", "token_type": "bearer"}
                },
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

    #[test]
    fn the_redactor_is_rebuilt_when_secrets_change_and_served_from_memory() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = SecretStore::open(dir.path()).expect("store");
        let secret = |v: &str| BTreeMap::from([("API".to_owned(), v.to_owned())]);
        store
            .store("a", &secret("first-secret-value"))
            .expect("stored");
        let store = SecretStore::open(dir.path()).expect("store again");
        assert_eq!(store.redactor().redact("x first-secret-value"), "x ***");
        // A new value replaces the old one in the masks at once.
        store
            .store("a", &secret("second-secret-value"))
            .expect("stored");
        let redactor = store.redactor();
        assert_eq!(redactor.redact("second-secret-value"), "***");
        assert_eq!(redactor.redact("first-secret-value"), "first-secret-value");
        // Served from memory: the file is not read per use.
        std::fs::remove_file(dir.path().join("secrets").join("a.json")).expect("removed");
        assert_eq!(store.redactor().redact("second-secret-value"), "***");
        // Deleted (disconnect, uninstall): no longer masked.
        store
            .store("a", &secret("second-secret-value"))
            .expect("stored");
        store.delete("a");
        assert_eq!(
            store.redactor().redact("second-secret-value"),
            "second-secret-value"
        );
    }

    #[test]
    fn missing_secrets_and_the_login_are_known_without_reading_the_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = SecretStore::open(dir.path()).expect("store");
        let names = ["A".to_owned(), "B".to_owned()];
        assert_eq!(store.missing("k", &names), names.to_vec());
        assert!(!store.logged_in("k"));
        let a = BTreeMap::from([
            ("A".to_owned(), "a-value".to_owned()),
            ("B".to_owned(), String::new()),
        ]);
        store.store("k", &a).expect("stored");
        store.store("k", &login(5_000, false)).expect("stored");
        let store = SecretStore::open(dir.path()).expect("store again");
        assert_eq!(store.missing("k", &names), vec!["B".to_owned()]);
        assert!(store.logged_in("k"));
        // Answered from memory, updated by each store.
        std::fs::remove_file(dir.path().join("secrets").join("k.json")).expect("removed");
        assert_eq!(store.missing("k", &names), vec!["B".to_owned()]);
        store.store("k", &login(5_000, true)).expect("stored");
        assert!(!store.logged_in("k"));
        store.delete("k");
        assert_eq!(store.missing("k", &names), names.to_vec());
    }
}

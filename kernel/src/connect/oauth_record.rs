//! The stored side of OAuth connectors (SPEC §10): the login record kept in a connector's
//! `secrets/` file, the values to mask in it, and the logins in progress. No I/O of its own;
//! the flows are in `oauth.rs`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tutti_oauth::{Grant, RegisteredClient};

use crate::release::manifest::{Auth, Manifest, Mcp, OauthSettings};

/// The secrets entry of an OAuth connector's login (`:` never appears in a declared name).
pub const LOGIN: &str = "oauth:login";
/// What the kernel keeps of an OAuth connector's login.
#[derive(Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant: Option<Grant>,
    /// The refresh failed or the server asked for more scope: a new login is needed.
    #[serde(default)]
    pub needs_login: bool,
    /// The scope a `403 insufficient_scope` named; the next login asks for it too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_up: Option<String>,
    /// The client a login registered dynamically; later logins use it again until the
    /// server refuses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<RegisteredClient>,
}

impl Record {
    pub fn logged_in(&self) -> bool {
        !self.needs_login
            && self
                .grant
                .as_ref()
                .is_some_and(|g| g.access_token().is_some())
    }
}

/// Logins in progress and the per-connector refresh turn.
#[derive(Default)]
pub struct Logins {
    pub(crate) pending: Mutex<HashMap<String, (String, Instant, tutti_oauth::login::Pending)>>,
    pub(crate) refresh: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

pub fn oauth_of(manifest: &Manifest) -> Option<(&str, &OauthSettings)> {
    match &manifest.mcp {
        Some(Mcp::Http {
            url,
            auth: Auth::Oauth(o),
        }) => Some((url.as_str(), o)),
        _ => None,
    }
}

pub fn record(stored: &BTreeMap<String, String>) -> Record {
    stored
        .get(LOGIN)
        .and_then(|v| serde_json::from_str(v).ok())
        .unwrap_or_default()
}

/// The values to mask of a connector's stored secrets: each plain value, and the tokens and
/// client secret inside a login record (never the record's JSON as one value).
pub fn secret_values(stored: &BTreeMap<String, String>) -> Vec<String> {
    let mut out: Vec<String> = stored
        .iter()
        .filter(|(name, v)| name.as_str() != LOGIN && !v.is_empty())
        .map(|(_, v)| v.clone())
        .collect();
    let record = record(stored);
    if let Some(grant) = record.grant {
        out.extend(grant.secret_values());
    }
    let client_secret = record.client.and_then(|c| c.client_secret);
    out.extend(client_secret.filter(|s| !s.is_empty()));
    out
}

//! A completed login as it is stored (under `secrets/` only): refreshable after a restart
//! without discovery, revocable.

use oauth2::TokenResponse;
use rmcp::transport::auth::{
    AuthorizationManager, AuthorizationMetadata, CredentialStore, InMemoryCredentialStore,
    OAuthClientConfig, StoredCredentials,
};
use serde::{Deserialize, Serialize};

use crate::common::{OAuthError, now_unix_ms};

/// How long one revocation request may take.
const REVOKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// One connector's login: the authorization server's metadata, the client identity (a
/// registered client's secret too) and the tokens. `Debug` shows no secret.
#[derive(Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Grant {
    /// The MCP endpoint the login was for.
    pub url: String,
    /// The `resource` (RFC 8707) the login asked for: the protected resource metadata's
    /// `resource` where the server published one, else the MCP endpoint. Refreshes name the
    /// same resource (absent in records written before it was kept: then `url`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    pub metadata: AuthorizationMetadata,
    pub client_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    pub redirect_uri: String,
    /// The scopes the login asked for.
    #[serde(default)]
    pub scopes: Vec<String>,
    pub credentials: StoredCredentials,
    /// When the access token expires, Unix epoch ms; 0 when the server gave no lifetime.
    #[serde(default)]
    pub expires_unix_ms: i64,
}

impl std::fmt::Debug for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grant")
            .field("url", &self.url)
            .field("resource", &self.resource)
            .field("issuer", &self.metadata.issuer)
            .field("client_id", &self.client_id)
            .field("scopes", &self.scopes)
            .field("expires_unix_ms", &self.expires_unix_ms)
            .finish_non_exhaustive()
    }
}

/// Unix ms at which a token received now with this response expires (0: no lifetime given).
pub(crate) fn expiry_of(credentials: &StoredCredentials) -> i64 {
    credentials
        .token_response
        .as_ref()
        .and_then(|t| t.expires_in())
        .map_or(0, |d| {
            now_unix_ms().saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        })
}

impl Grant {
    pub fn access_token(&self) -> Option<&str> {
        let token = self.credentials.token_response.as_ref()?;
        Some(token.access_token().secret().as_str())
    }

    pub fn refresh_token(&self) -> Option<&str> {
        let token = self.credentials.token_response.as_ref()?;
        token.refresh_token().map(|t| t.secret().as_str())
    }

    /// The `resource` (RFC 8707) of this login's refreshes: the one its authorization named,
    /// else (a record from before it was kept) the MCP endpoint.
    pub fn resource(&self) -> &str {
        self.resource.as_deref().unwrap_or(self.url.as_str())
    }

    /// Every secret value the grant holds (access and refresh token, client secret), for
    /// redaction.
    pub fn secret_values(&self) -> Vec<String> {
        [
            self.access_token(),
            self.refresh_token(),
            self.client_secret.as_deref(),
        ]
        .into_iter()
        .flatten()
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
        .collect()
    }

    /// Whether the access token expires within `margin_ms` (false when no lifetime is known).
    pub fn expires_within(&self, margin_ms: i64) -> bool {
        self.expires_unix_ms != 0 && self.expires_unix_ms - now_unix_ms() <= margin_ms
    }

    fn client_config(&self) -> OAuthClientConfig {
        let config = OAuthClientConfig::new(self.client_id.clone(), self.redirect_uri.clone())
            .with_scopes(self.scopes.clone());
        match &self.client_secret {
            Some(secret) => config.with_client_secret(secret.clone()),
            None => config,
        }
    }

    /// A manager that knows this grant's server and client, with its credentials loaded. Its
    /// base URL is the login's `resource`: rmcp names the base URL as the `resource` of a
    /// refresh when it has not discovered one itself (it has not: no discovery here).
    async fn manager(&self) -> Result<(AuthorizationManager, InMemoryCredentialStore), String> {
        let mut manager = AuthorizationManager::new_allowing_private_addresses(self.resource())
            .await
            .map_err(|e| e.to_string())?;
        manager.set_metadata(self.metadata.clone());
        manager
            .configure_client(self.client_config())
            .map_err(|e| e.to_string())?;
        let store = InMemoryCredentialStore::new();
        store
            .save(self.credentials.clone())
            .await
            .map_err(|e| e.to_string())?;
        manager.set_credential_store(store.clone());
        Ok((manager, store))
    }

    /// Refreshes the access token (RFC 6749 §6 with `resource`, RFC 8707). A rotated refresh
    /// token replaces the old one; a response without one keeps it.
    pub async fn refresh(&self) -> Result<Grant, OAuthError> {
        if self.refresh_token().is_none() {
            return Err(OAuthError::NoRefreshToken);
        }
        let (manager, store) = self.manager().await.map_err(OAuthError::Refresh)?;
        manager
            .refresh_token()
            .await
            .map_err(|e| OAuthError::Refresh(e.to_string()))?;
        let credentials = store
            .load()
            .await
            .map_err(|e| OAuthError::Refresh(e.to_string()))?
            .ok_or_else(|| OAuthError::Refresh("no credentials after the refresh".into()))?;
        let mut next = self.clone();
        next.expires_unix_ms = expiry_of(&credentials);
        next.credentials = credentials;
        Ok(next)
    }

    /// Revokes the refresh token, then the access token, at the server's
    /// `revocation_endpoint` (RFC 7009). `Ok(false)` when the server offers none.
    pub async fn revoke(&self) -> Result<bool, OAuthError> {
        let Some(endpoint) = self
            .metadata
            .additional_fields
            .get("revocation_endpoint")
            .and_then(serde_json::Value::as_str)
        else {
            return Ok(false);
        };
        // Bounded: `disconnect` and `uninstall` wait for this.
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(REVOKE_TIMEOUT)
            .build()
            .map_err(|e| OAuthError::Revoke(e.without_url().to_string()))?;
        let tokens = [
            (self.refresh_token(), "refresh_token"),
            (self.access_token(), "access_token"),
        ];
        for (token, hint) in tokens {
            let Some(token) = token else { continue };
            let mut form = vec![("token", token), ("token_type_hint", hint)];
            let mut request = http.post(endpoint);
            match &self.client_secret {
                Some(secret) => request = request.basic_auth(&self.client_id, Some(secret)),
                None => form.push(("client_id", self.client_id.as_str())),
            }
            let response = request
                .form(&form)
                .send()
                .await
                .map_err(|e| OAuthError::Revoke(e.without_url().to_string()))?;
            if !response.status().is_success() {
                return Err(OAuthError::Revoke(format!(
                    "the revocation endpoint answered {}",
                    response.status()
                )));
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(resource: Option<&str>) -> Grant {
        let mut json = serde_json::json!({
            "url": "https://mcp.example.com/mcp",
            "metadata": {
                "authorization_endpoint": "https://as.example.com/authorize",
                "token_endpoint": "https://as.example.com/token"
            },
            "clientId": "c",
            "redirectUri": "http://127.0.0.1:1/callback",
            "credentials": {"client_id": "c", "token_response": null}
        });
        if let Some(r) = resource {
            json["resource"] = r.into();
        }
        serde_json::from_value(json).unwrap_or_else(|e| panic!("a grant record: {e}"))
    }

    #[test]
    fn refreshes_name_the_resource_the_login_named() {
        assert_eq!(
            grant(Some("https://mcp.example.com/")).resource(),
            "https://mcp.example.com/"
        );
        // A record written before the resource was kept: the MCP endpoint, as before.
        let old = grant(None);
        assert_eq!(old.resource(), "https://mcp.example.com/mcp");
        let json = serde_json::to_value(&old).unwrap_or_default();
        assert!(json.get("resource").is_none(), "{json}");
    }
}

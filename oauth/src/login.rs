//! The browser login (authorization code with PKCE S256), in two steps: [`begin`] discovers
//! the server, establishes the client identity and returns the URL to open; the redirect's
//! code and state go to [`Pending::complete`], which exchanges them for a [`Grant`].

use rmcp::transport::auth::{
    AuthorizationManager, AuthorizationMetadata, AuthorizationRequest, AuthorizationSession,
    CredentialStore, InMemoryCredentialStore,
};

use crate::common::{ClientSettings, OAuthError, check_url};
use crate::grant::{Grant, expiry_of};
use crate::probe;

/// The client name a dynamic registration gives.
const CLIENT_NAME: &str = "Tutti connector runtime";

/// A login between [`begin`] and [`Pending::complete`]: the PKCE verifier and the client
/// identity live here, in memory only.
pub struct Pending {
    session: AuthorizationSession,
    store: InMemoryCredentialStore,
    url: String,
    metadata: AuthorizationMetadata,
    client_id: String,
    client_secret: Option<String>,
    redirect_uri: String,
    scopes: Vec<String>,
    state: String,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("url", &self.url)
            .field("client_id", &self.client_id)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

/// Starts a login. `extra_scope` is a scope a `403 insufficient_scope` asked for (step-up);
/// it is added to what the selection rule picks.
pub async fn begin(
    settings: &ClientSettings,
    redirect_uri: &str,
    extra_scope: Option<&str>,
) -> Result<Pending, OAuthError> {
    check_url(&settings.url)?;
    let challenge = match probe::legacy_challenge(&settings.url).await {
        Some(challenge) => Some(challenge),
        None => probe::modern_challenge(&settings.url).await,
    };
    let discovery = |e: rmcp::transport::auth::AuthError| OAuthError::Discovery(e.to_string());
    let mut manager = AuthorizationManager::new_allowing_private_addresses(settings.url.as_str())
        .await
        .map_err(discovery)?;
    let metadata = manager
        .resolve_metadata_from_challenge(challenge.as_deref())
        .await
        .map_err(discovery)?
        .metadata;
    let s256 = metadata
        .code_challenge_methods_supported
        .as_ref()
        .is_some_and(|m| m.iter().any(|m| m == "S256"));
    if !s256 {
        return Err(OAuthError::NoPkce);
    }
    manager.set_metadata(metadata.clone());
    let store = InMemoryCredentialStore::new();
    manager.set_credential_store(store.clone());
    let scopes = select_scopes(&manager, settings, extra_scope).await;
    let (request, client_id, client_secret) =
        identity(&mut manager, &metadata, settings, redirect_uri, &scopes).await?;
    let session = AuthorizationSession::new(manager, request.with_scopes(scopes.clone()))
        .await
        .map_err(|(_, e)| OAuthError::Registration(e.to_string()))?;
    let state = query_value(session.get_authorization_url(), "state")
        .ok_or_else(|| OAuthError::Discovery("the authorization URL carries no state".into()))?;
    Ok(Pending {
        session,
        store,
        url: settings.url.clone(),
        metadata,
        client_id,
        client_secret,
        redirect_uri: redirect_uri.to_owned(),
        scopes,
        state,
    })
}

/// SPEC §10: the 401 challenge's scope, else the resource metadata's `scopes_supported`,
/// else the manifest's, else none; `offline_access` added only where the server supports it
/// (rmcp's initial selection); a step-up scope joins them.
async fn select_scopes(
    manager: &AuthorizationManager,
    settings: &ClientSettings,
    extra_scope: Option<&str>,
) -> Vec<String> {
    let defaults: Vec<&str> = settings.scopes.iter().map(String::as_str).collect();
    let mut scopes = manager.select_initial_scopes(&defaults).await;
    for extra in extra_scope.unwrap_or_default().split_whitespace() {
        if !scopes.iter().any(|s| s == extra) {
            scopes.push(extra.to_owned());
        }
    }
    scopes
}

/// The client identity in SPEC order: pre-registered, then a client ID metadata document
/// where the server supports them, then dynamic registration (done here, so that the
/// registered client is part of the stored grant).
async fn identity(
    manager: &mut AuthorizationManager,
    metadata: &AuthorizationMetadata,
    settings: &ClientSettings,
    redirect_uri: &str,
    scopes: &[String],
) -> Result<(AuthorizationRequest, String, Option<String>), OAuthError> {
    let request = AuthorizationRequest::new(redirect_uri);
    if let Some(id) = &settings.client_id {
        let mut request = request.with_preregistered_client(id.clone());
        if let Some(secret) = &settings.client_secret {
            request = request.with_client_secret(secret.clone());
        }
        return Ok((request, id.clone(), settings.client_secret.clone()));
    }
    let cimd = metadata
        .additional_fields
        .get("client_id_metadata_document_supported")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    if let Some(url) = &settings.client_metadata_url
        && cimd
    {
        return Ok((
            request.with_client_metadata_url(url.clone()),
            url.clone(),
            None,
        ));
    }
    if metadata.registration_endpoint.is_none() {
        return Err(OAuthError::Registration(
            "the authorization server offers no dynamic client registration; \
             name a pre-registered client with auth.clientId in connector.json"
                .into(),
        ));
    }
    let refs: Vec<&str> = scopes.iter().map(String::as_str).collect();
    let config = manager
        .register_client(CLIENT_NAME, redirect_uri, &refs)
        .await
        .map_err(|e| OAuthError::Registration(e.to_string()))?;
    let mut request = request.with_preregistered_client(config.client_id.clone());
    if let Some(secret) = &config.client_secret {
        request = request.with_client_secret(secret.clone());
    }
    Ok((request, config.client_id, config.client_secret))
}

fn query_value(url: &str, name: &str) -> Option<String> {
    let url = reqwest::Url::parse(url).ok()?;
    url.query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

impl Pending {
    /// The URL the user's browser opens (no secret in it: the PKCE challenge, the state, the
    /// client id).
    pub fn authorization_url(&self) -> &str {
        self.session.get_authorization_url()
    }

    /// The `state` the redirect must carry.
    pub fn state(&self) -> &str {
        &self.state
    }

    pub fn scopes(&self) -> &[String] {
        &self.scopes
    }

    /// Checks the redirect's `state` and `iss` and exchanges the code (PKCE verifier and
    /// `resource` on the token request).
    pub async fn complete(
        self,
        code: &str,
        state: &str,
        iss: Option<&str>,
    ) -> Result<Grant, OAuthError> {
        if state != self.state {
            return Err(OAuthError::StateMismatch);
        }
        self.session
            .handle_callback_with_issuer(code, state, iss)
            .await
            .map_err(|e| OAuthError::Exchange(e.to_string()))?;
        let credentials = self
            .store
            .load()
            .await
            .map_err(|e| OAuthError::Exchange(e.to_string()))?
            .ok_or_else(|| OAuthError::Exchange("the server returned no tokens".into()))?;
        // The resource the authorization (and so the code exchange) named.
        let resource = query_value(self.session.get_authorization_url(), "resource");
        Ok(Grant {
            url: self.url,
            resource,
            metadata: self.metadata,
            client_id: self.client_id,
            client_secret: self.client_secret,
            redirect_uri: self.redirect_uri,
            scopes: self.scopes,
            expires_unix_ms: expiry_of(&credentials),
            credentials,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_is_read_from_the_authorization_url() {
        let url = "https://as.example/authorize?response_type=code&state=abc%2F1&x=y";
        assert_eq!(query_value(url, "state").as_deref(), Some("abc/1"));
        assert_eq!(query_value(url, "code"), None);
    }
}

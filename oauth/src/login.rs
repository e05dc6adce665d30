//! The browser login (authorization code with PKCE S256), in two steps: [`begin`] discovers
//! the server, establishes the client identity and returns the URL to open; the redirect's
//! code and state go to [`Pending::complete`], which exchanges them for a [`Grant`].

use std::sync::Arc;

use rmcp::transport::auth::{
    AuthorizationManager, AuthorizationMetadata, AuthorizationRequest, AuthorizationSession,
    CredentialStore, InMemoryCredentialStore,
};
use serde::{Deserialize, Serialize};

use crate::common::{ClientSettings, OAuthError, check_url};
use crate::grant::{Grant, expiry_of};
use crate::net::{OAuthHttp, Reach};
use crate::{account, par, probe};

/// The client name a dynamic registration gives.
const CLIENT_NAME: &str = "Tutti connector runtime";

/// A login between [`begin`] and [`Pending::complete`]: the PKCE verifier and the client
/// identity live here, in memory only.
pub struct Pending {
    session: AuthorizationSession,
    http: OAuthHttp,
    /// The URL the browser opens: rmcp's authorization URL, or the pushed request's.
    open: String,
    store: InMemoryCredentialStore,
    url: String,
    metadata: AuthorizationMetadata,
    client_id: String,
    client_secret: Option<String>,
    registered: Option<RegisteredClient>,
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
/// it is added to what the selection rule picks. `known` is the client an earlier login of
/// this connector registered: it is used again when it was registered at this server, and
/// when the server refuses it (`invalid_client` to the pushed request) a new one is
/// registered, once.
pub async fn begin(
    settings: &ClientSettings,
    redirect_uri: &str,
    extra_scope: Option<&str>,
    known: Option<&RegisteredClient>,
) -> Result<Pending, OAuthError> {
    check_url(&settings.url)?;
    match begin_with(settings, redirect_uri, extra_scope, known).await {
        Err(e) if known.is_some() && e.refuses_client() => {
            begin_with(settings, redirect_uri, extra_scope, None).await
        }
        other => other,
    }
}

/// The probes and discovery: the connector's OAuth client, rmcp's manager over it and the
/// authorization server's metadata, every endpoint of which passed the endpoint rule.
async fn discover(
    settings: &ClientSettings,
) -> Result<(OAuthHttp, AuthorizationManager, AuthorizationMetadata), OAuthError> {
    let http = OAuthHttp::for_mcp_url(&settings.url).await?;
    let challenge = match probe::legacy_challenge(&http, &settings.url).await {
        Some(challenge) => Some(challenge),
        None => probe::modern_challenge(&http, &settings.url).await,
    };
    let discovery =
        |e: rmcp::transport::auth::AuthError| http.explain(OAuthError::Discovery(e.to_string()));
    let mut manager = AuthorizationManager::new_with_oauth_http_client(
        settings.url.as_str(),
        Arc::new(http.clone()),
    )
    .await
    .map_err(discovery)?;
    let metadata = manager
        .resolve_metadata_from_challenge(challenge.as_deref())
        .await
        .map_err(discovery)?
        .metadata;
    check_endpoints(http.reach(), &metadata)?;
    let s256 = metadata
        .code_challenge_methods_supported
        .as_ref()
        .is_some_and(|m| m.iter().any(|m| m == "S256"));
    if !s256 {
        return Err(OAuthError::NoPkce);
    }
    manager.set_metadata(metadata.clone());
    Ok((http, manager, metadata))
}

async fn begin_with(
    settings: &ClientSettings,
    redirect_uri: &str,
    extra_scope: Option<&str>,
    known: Option<&RegisteredClient>,
) -> Result<Pending, OAuthError> {
    let (http, mut manager, metadata) = discover(settings).await?;
    let store = InMemoryCredentialStore::new();
    manager.set_credential_store(store.clone());
    let mut scopes = select_scopes(&manager, settings, extra_scope).await;
    // `openid` (to learn the account) only where the server lists it.
    let openid = metadata.scopes_supported.as_deref().unwrap_or_default();
    if openid.iter().any(|s| s == "openid") && !scopes.iter().any(|s| s == "openid") {
        scopes.push("openid".to_owned());
    }
    let identity = identity(
        &mut manager,
        &metadata,
        settings,
        redirect_uri,
        &scopes,
        known,
    )
    .await
    .map_err(|e| http.explain(e))?;
    let session = AuthorizationSession::new(manager, identity.request.with_scopes(scopes.clone()))
        .await
        .map_err(|(_, e)| http.explain(OAuthError::Registration(e.to_string())))?;
    let url = http
        .reach()
        .check_endpoint("authorization_endpoint", session.get_authorization_url())?;
    let state = query_value(url.as_str(), "state")
        .ok_or_else(|| OAuthError::Discovery("the authorization URL carries no state".into()))?;
    let secret = identity.client_secret.as_deref();
    let open = match par::push(&http, &metadata, &url, &identity.client_id, secret).await? {
        Some(pushed) => http
            .reach()
            .check_endpoint("authorization_endpoint", pushed.as_str())?,
        None => url,
    };
    Ok(Pending {
        session,
        http,
        open: open.to_string(),
        store,
        url: settings.url.clone(),
        metadata,
        client_id: identity.client_id,
        client_secret: identity.client_secret,
        registered: identity.registered,
        redirect_uri: redirect_uri.to_owned(),
        scopes,
        state,
    })
}

/// The endpoint rule for every endpoint the metadata names, before any of them is used: a
/// server that names one the rule refuses (even one used only later, as revocation is at
/// `disconnect`) gets no login at all. Each is checked again where it is used.
fn check_endpoints(reach: &Reach, metadata: &AuthorizationMetadata) -> Result<(), OAuthError> {
    reach.check_endpoint("authorization_endpoint", &metadata.authorization_endpoint)?;
    reach.check_endpoint("token_endpoint", &metadata.token_endpoint)?;
    let named = [
        (
            "registration_endpoint",
            metadata.registration_endpoint.as_deref(),
        ),
        ("jwks_uri", metadata.jwks_uri.as_deref()),
    ];
    let extra = [
        "revocation_endpoint",
        "userinfo_endpoint",
        "pushed_authorization_request_endpoint",
    ]
    .map(|name| (name, metadata.additional_fields.get(name)));
    for (name, url) in named {
        if let Some(url) = url {
            reach.check_endpoint(name, url)?;
        }
    }
    for (name, value) in extra {
        if let Some(value) = value {
            let url = value.as_str().unwrap_or_default();
            reach.check_endpoint(name, url)?;
        }
    }
    Ok(())
}

/// The scopes a registration names: only those the authorization server lists in
/// `scopes_supported` (RFC 7591 makes `scope` optional; a server that keeps its scopes under
/// its resources refuses others), none when it lists none.
fn registration_scopes<'a>(metadata: &AuthorizationMetadata, scopes: &'a [String]) -> Vec<&'a str> {
    let supported = metadata.scopes_supported.as_deref().unwrap_or_default();
    scopes
        .iter()
        .filter(|s| supported.contains(s))
        .map(String::as_str)
        .collect()
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

/// A client registered dynamically by an earlier login, kept with the connector's login
/// record and used again by its later logins at the same server.
#[derive(Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RegisteredClient {
    /// The authorization server's issuer (absent where its metadata named none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    pub registration_endpoint: String,
    pub client_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// The `scope` it was registered with (a server may allow it no other scope); empty
    /// when the registration named none.
    #[serde(default)]
    pub scopes: Vec<String>,
}

impl std::fmt::Debug for RegisteredClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredClient")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

impl RegisteredClient {
    /// Whether this client was registered at the server `metadata` describes for every
    /// scope of `wanted` a registration would name.
    fn serves(&self, metadata: &AuthorizationMetadata, wanted: &[&str]) -> bool {
        metadata.issuer == self.issuer
            && metadata.registration_endpoint.as_deref()
                == Some(self.registration_endpoint.as_str())
            && (self.scopes.is_empty() || wanted.iter().all(|w| self.scopes.iter().any(|s| s == w)))
    }
}

/// The client identity a login uses.
struct Identity {
    request: AuthorizationRequest,
    client_id: String,
    client_secret: Option<String>,
    /// The dynamically registered client (registered now or by an earlier login).
    registered: Option<RegisteredClient>,
}

/// The client identity in SPEC order: pre-registered, then a client ID metadata document
/// where the server supports them, then dynamic registration (done here, so that the
/// registered client is part of the stored login), or the client an earlier login registered.
async fn identity(
    manager: &mut AuthorizationManager,
    metadata: &AuthorizationMetadata,
    settings: &ClientSettings,
    redirect_uri: &str,
    scopes: &[String],
    known: Option<&RegisteredClient>,
) -> Result<Identity, OAuthError> {
    let request = AuthorizationRequest::new(redirect_uri);
    if let Some(id) = &settings.client_id {
        return Ok(preregistered(
            request,
            id,
            settings.client_secret.as_deref(),
            None,
        ));
    }
    let cimd = metadata
        .additional_fields
        .get("client_id_metadata_document_supported")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    if let Some(url) = &settings.client_metadata_url
        && cimd
    {
        return Ok(Identity {
            request: request.with_client_metadata_url(url.clone()),
            client_id: url.clone(),
            client_secret: None,
            registered: None,
        });
    }
    let wanted = registration_scopes(metadata, scopes);
    if let Some(known) = known.filter(|c| c.serves(metadata, &wanted)) {
        let secret = known.client_secret.as_deref();
        return Ok(preregistered(
            request,
            &known.client_id,
            secret,
            Some(known.clone()),
        ));
    }
    let Some(registration_endpoint) = metadata.registration_endpoint.clone() else {
        return Err(OAuthError::Registration(
            "the authorization server offers no dynamic client registration; \
             name a pre-registered client with auth.clientId in connector.json"
                .into(),
        ));
    };
    let config = manager
        .register_client(CLIENT_NAME, redirect_uri, &wanted)
        .await
        .map_err(|e| OAuthError::Registration(e.to_string()))?;
    let registered = RegisteredClient {
        issuer: metadata.issuer.clone(),
        registration_endpoint,
        client_id: config.client_id,
        client_secret: config.client_secret,
        scopes: wanted.iter().map(|s| (*s).to_owned()).collect(),
    };
    let secret = registered.client_secret.clone();
    let id = registered.client_id.clone();
    Ok(preregistered(
        request,
        &id,
        secret.as_deref(),
        Some(registered),
    ))
}

fn preregistered(
    request: AuthorizationRequest,
    id: &str,
    secret: Option<&str>,
    registered: Option<RegisteredClient>,
) -> Identity {
    let mut request = request.with_preregistered_client(id.to_owned());
    if let Some(secret) = secret {
        request = request.with_client_secret(secret.to_owned());
    }
    Identity {
        request,
        client_id: id.to_owned(),
        client_secret: secret.map(str::to_owned),
        registered,
    }
}

fn query_value(url: &str, name: &str) -> Option<String> {
    let url = reqwest::Url::parse(url).ok()?;
    url.query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

impl Pending {
    /// The URL the user's browser opens (no secret in it: the PKCE challenge, the state, the
    /// client id; or, for a pushed request, only the client id and the `request_uri`).
    pub fn authorization_url(&self) -> &str {
        &self.open
    }

    /// The `state` the redirect must carry.
    pub fn state(&self) -> &str {
        &self.state
    }

    pub fn scopes(&self) -> &[String] {
        &self.scopes
    }

    /// The dynamically registered client this login uses (to keep for later logins).
    pub fn registered_client(&self) -> Option<&RegisteredClient> {
        self.registered.as_ref()
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
            .map_err(|e| self.http.explain(OAuthError::Exchange(e.to_string())))?;
        let credentials = self
            .store
            .load()
            .await
            .map_err(|e| OAuthError::Exchange(e.to_string()))?
            .ok_or_else(|| OAuthError::Exchange("the server returned no tokens".into()))?;
        // The resource the authorization (and so the code exchange) named.
        let resource = query_value(self.session.get_authorization_url(), "resource");
        let account = match &credentials.token_response {
            Some(token) => {
                account::of_login(&self.http, &self.metadata, &self.client_id, token).await
            }
            None => None,
        };
        Ok(Grant {
            account,
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

    fn metadata(scopes_supported: Option<&[&str]>) -> AuthorizationMetadata {
        let mut metadata = AuthorizationMetadata::default();
        metadata.issuer = Some("https://as.example".into());
        metadata.registration_endpoint = Some("https://as.example/reg".into());
        metadata.scopes_supported =
            scopes_supported.map(|s| s.iter().map(|s| (*s).to_owned()).collect());
        metadata
    }

    #[test]
    fn a_registration_names_only_scopes_the_server_lists() {
        let wanted: Vec<String> = ["mcp:tools", "offline_access", "openid"]
            .map(str::to_owned)
            .to_vec();
        let listed = metadata(Some(&["openid", "offline_access"]));
        assert_eq!(
            registration_scopes(&listed, &wanted),
            ["offline_access", "openid"]
        );
        assert!(registration_scopes(&metadata(None), &wanted).is_empty());
    }

    #[test]
    fn a_registered_client_serves_the_same_server_for_the_scopes_it_has() {
        let client = RegisteredClient {
            issuer: Some("https://as.example".into()),
            registration_endpoint: "https://as.example/reg".into(),
            client_id: "c".into(),
            client_secret: None,
            scopes: vec!["mcp:tools".into(), "offline_access".into()],
        };
        let here = metadata(None);
        assert!(client.serves(&here, &["mcp:tools"]));
        assert!(!client.serves(&here, &["mcp:tools", "mcp:admin"]));
        let mut elsewhere = metadata(None);
        elsewhere.issuer = Some("https://other.example".into());
        assert!(!client.serves(&elsewhere, &["mcp:tools"]));
        let unscoped = RegisteredClient {
            scopes: Vec::new(),
            ..client
        };
        assert!(unscoped.serves(&here, &["mcp:admin"]));
    }

    #[test]
    fn the_state_is_read_from_the_authorization_url() {
        let url = "https://as.example/authorize?response_type=code&state=abc%2F1&x=y";
        assert_eq!(query_value(url, "state").as_deref(), Some("abc/1"));
        assert_eq!(query_value(url, "code"), None);
    }
}

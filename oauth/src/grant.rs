//! A completed login as it is stored (under `secrets/` only): refreshable after a restart
//! without discovery, revocable.

use oauth2::{RefreshToken, TokenResponse};
use rmcp::transport::auth::{AuthorizationMetadata, OAuthTokenResponse, StoredCredentials};
use serde::{Deserialize, Serialize};

use crate::common::{OAuthError, now_unix_ms};
use crate::net::OAuthHttp;

/// `application/x-www-form-urlencoded` encoding of one value (RFC 6749 §2.3.1, Appendix B).
pub(crate) fn form_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                out.push(char::from(b));
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The reason of a refused token request: its status and OAuth `error` (RFC 6749 §5.2).
pub(crate) fn token_error(status: reqwest::StatusCode, body: &[u8]) -> String {
    let answer: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    match answer["error"].as_str() {
        Some(error) => {
            let detail = answer["error_description"]
                .as_str()
                .map_or(String::new(), |d| format!(" ({d})"));
            format!("the token endpoint answered {status}: {error}{detail}")
        }
        None => format!("the token endpoint answered {status}"),
    }
}

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
    /// The account the login belongs to, where the server said which.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<crate::account::Account>,
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

    /// The access token's lifetime as the server gave it (`expires_in`), in ms; 0 when it
    /// gave none.
    pub fn lifetime_ms(&self) -> i64 {
        self.credentials
            .token_response
            .as_ref()
            .and_then(|t| t.expires_in())
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }

    /// This client's authentication at the token and revocation endpoints: HTTP Basic with
    /// the form-encoded id and secret (RFC 6749 §2.3.1) for a confidential client, else
    /// `client_id` in the form.
    fn authenticate<'a>(
        &'a self,
        request: reqwest::RequestBuilder,
        form: &mut Vec<(&'static str, &'a str)>,
    ) -> reqwest::RequestBuilder {
        match &self.client_secret {
            Some(secret) => {
                request.basic_auth(form_encode(&self.client_id), Some(form_encode(secret)))
            }
            None => {
                form.push(("client_id", self.client_id.as_str()));
                request
            }
        }
    }

    /// Refreshes the access token (RFC 6749 §6) with the `resource` (RFC 8707) exactly as the
    /// login named it. A rotated refresh token replaces the old one; a response without one
    /// keeps it. (Not rmcp's refresh: it names its base URL, parsed, as the resource when it
    /// did not discover one, and a refresh here does no discovery.)
    pub async fn refresh(&self) -> Result<Grant, OAuthError> {
        let refresh_token = self.refresh_token().ok_or(OAuthError::NoRefreshToken)?;
        let http = OAuthHttp::for_mcp_url(&self.url).await?;
        let endpoint = http
            .reach()
            .check_endpoint("token_endpoint", &self.metadata.token_endpoint)?;
        let mut form = vec![
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh_token),
            ("resource", self.resource()),
        ];
        let request = http
            .request(reqwest::Method::POST, endpoint)
            .header(reqwest::header::ACCEPT, "application/json");
        let request = self.authenticate(request, &mut form).form(&form);
        let answer = http.send("token_endpoint", request, false).await?;
        if !answer.status.is_success() {
            return Err(OAuthError::Refresh(token_error(
                answer.status,
                &answer.body,
            )));
        }
        let mut token: OAuthTokenResponse = serde_json::from_slice(&answer.body).map_err(|e| {
            OAuthError::Refresh(format!("the token endpoint's answer is not a token: {e}"))
        })?;
        if token.refresh_token().is_none() {
            token.set_refresh_token(Some(RefreshToken::new(refresh_token.to_owned())));
        }
        let mut next = self.clone();
        next.credentials.token_response = Some(token);
        next.credentials.token_received_at = u64::try_from(now_unix_ms() / 1000).ok();
        next.expires_unix_ms = expiry_of(&next.credentials);
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
        let http = OAuthHttp::for_mcp_url(&self.url).await?;
        let endpoint = http
            .reach()
            .check_endpoint("revocation_endpoint", endpoint)?;
        let tokens = [
            (self.refresh_token(), "refresh_token"),
            (self.access_token(), "access_token"),
        ];
        for (token, hint) in tokens {
            let Some(token) = token else { continue };
            let mut form = vec![("token", token), ("token_type_hint", hint)];
            let request = http.request(reqwest::Method::POST, endpoint.clone());
            let request = self.authenticate(request, &mut form).form(&form);
            let answer = http.send("revocation_endpoint", request, false).await?;
            if !answer.status.is_success() {
                return Err(OAuthError::Revoke(format!(
                    "the revocation endpoint answered {}",
                    answer.status
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
    fn client_credentials_are_form_encoded_for_basic_auth() {
        assert_eq!(form_encode("a-Z_0.9*"), "a-Z_0.9*");
        assert_eq!(form_encode("s p:é/+"), "s+p%3A%C3%A9%2F%2B");
    }

    #[test]
    fn a_refused_refresh_says_what_the_server_answered() {
        let body = br#"{"error":"invalid_grant","error_description":"grant request is invalid"}"#;
        assert_eq!(
            token_error(reqwest::StatusCode::BAD_REQUEST, body),
            "the token endpoint answered 400 Bad Request: invalid_grant (grant request is invalid)"
        );
        assert_eq!(
            token_error(reqwest::StatusCode::BAD_GATEWAY, b"<html>"),
            "the token endpoint answered 502 Bad Gateway"
        );
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

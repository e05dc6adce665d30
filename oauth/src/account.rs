//! Which account a login's grant belongs to, where the server says so: the `id_token`'s claims
//! (it came straight from the token endpoint, over a connection both rules allowed, and must
//! name this server and this client), else the userinfo endpoint's answer. Only `sub`, `email`
//! and `name` are kept; nothing secret.

use base64::Engine;
use oauth2::TokenResponse;
use rmcp::transport::auth::{AuthorizationMetadata, OAuthTokenResponse};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::net::OAuthHttp;

/// The account a grant belongs to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Account {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Account {
    /// How the account is shown: its email, else its name, else its subject.
    pub fn display(&self) -> Option<&str> {
        [&self.email, &self.name, &self.sub]
            .into_iter()
            .find_map(|v| v.as_deref().filter(|v| !v.is_empty()))
    }

    fn of_claims(claims: &Value) -> Option<Account> {
        let text = |name: &str| claims[name].as_str().map(|v| v.chars().take(200).collect());
        let account = Account {
            sub: text("sub"),
            email: text("email"),
            name: text("name"),
        };
        account.display().is_some().then_some(account)
    }
}

/// The account of a login that received `token` as `client_id`.
pub(crate) async fn of_login(
    http: &OAuthHttp,
    metadata: &AuthorizationMetadata,
    client_id: &str,
    token: &OAuthTokenResponse,
) -> Option<Account> {
    if let Some(claims) = id_token_claims(token, metadata.issuer.as_deref(), client_id) {
        return Account::of_claims(&claims);
    }
    const NAME: &str = "userinfo_endpoint";
    let endpoint = metadata.additional_fields.get(NAME)?.as_str()?;
    let url = http.reach().check_endpoint(NAME, endpoint).ok()?;
    let request = http
        .request(reqwest::Method::GET, url)
        .bearer_auth(token.access_token().secret())
        .header(reqwest::header::ACCEPT, "application/json");
    let answer = http.send(NAME, request, false).await.ok()?;
    if !answer.status.is_success() {
        return None;
    }
    Account::of_claims(&serde_json::from_slice(&answer.body).ok()?)
}

/// The claims of the token response's `id_token` when it names `issuer` and `client_id`.
fn id_token_claims(
    token: &OAuthTokenResponse,
    issuer: Option<&str>,
    client_id: &str,
) -> Option<Value> {
    let jwt = token.extra_fields().0.get("id_token")?.as_str()?;
    let payload = jwt.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let claims: Value = serde_json::from_slice(&bytes).ok()?;
    let audience = match &claims["aud"] {
        Value::String(aud) => aud == client_id,
        Value::Array(auds) => auds.iter().any(|a| a == client_id),
        _ => false,
    };
    let issued_here = issuer.is_none_or(|issuer| claims["iss"] == issuer);
    (audience && issued_here).then_some(claims)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_account_is_shown_by_email_then_name_then_subject() {
        let of = |v: Value| Account::of_claims(&v).and_then(|a| a.display().map(str::to_owned));
        let all = serde_json::json!({"sub": "u1", "email": "a@example.com", "name": "Alice"});
        assert_eq!(of(all).as_deref(), Some("a@example.com"));
        let named = serde_json::json!({"sub": "u1", "name": "Alice"});
        assert_eq!(of(named).as_deref(), Some("Alice"));
        assert_eq!(of(serde_json::json!({"sub": "u1"})).as_deref(), Some("u1"));
        assert_eq!(of(serde_json::json!({"aud": "x"})), None);
    }
}

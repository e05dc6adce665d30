//! Pushed authorization requests (RFC 9126): where the server offers them, the authorization
//! request's parameters go to its endpoint directly and the URL the browser opens holds only
//! `client_id` and the `request_uri` the server answered.

use rmcp::transport::auth::AuthorizationMetadata;

use crate::error::OAuthError;
use crate::grant::{form_encode, token_error};
use crate::net::OAuthHttp;

/// The server's `pushed_authorization_request_endpoint`, if it offers one.
fn endpoint(metadata: &AuthorizationMetadata) -> Option<&str> {
    metadata
        .additional_fields
        .get("pushed_authorization_request_endpoint")
        .and_then(serde_json::Value::as_str)
}

/// Pushes the parameters of `authorization_url` (built for the client `client_id`) and returns
/// the URL to open instead; `None` where the server offers no pushed requests. A confidential
/// client authenticates with HTTP Basic as at the token endpoint.
pub(crate) async fn push(
    http: &OAuthHttp,
    metadata: &AuthorizationMetadata,
    authorization_url: &reqwest::Url,
    client_id: &str,
    client_secret: Option<&str>,
) -> Result<Option<reqwest::Url>, OAuthError> {
    const NAME: &str = "pushed_authorization_request_endpoint";
    let Some(url) = endpoint(metadata) else {
        return Ok(None);
    };
    let url = http.reach().check_endpoint(NAME, url)?;
    let form: Vec<(String, String)> = authorization_url.query_pairs().into_owned().collect();
    let mut request = http
        .request(reqwest::Method::POST, url)
        .header(reqwest::header::ACCEPT, "application/json");
    if let Some(secret) = client_secret {
        request = request.basic_auth(form_encode(client_id), Some(form_encode(secret)));
    }
    let answer = http.send(NAME, request.form(&form), false).await?;
    if !answer.status.is_success() {
        let reason = token_error(answer.status, &answer.body);
        return Err(OAuthError::Par(reason.replacen(
            "token",
            "pushed authorization request",
            1,
        )));
    }
    let pushed: serde_json::Value = serde_json::from_slice(&answer.body).unwrap_or_default();
    let request_uri = pushed["request_uri"]
        .as_str()
        .ok_or_else(|| OAuthError::Par("the answer holds no request_uri".into()))?;
    let mut open = authorization_url.clone();
    open.set_query(None);
    open.query_pairs_mut()
        .append_pair("client_id", client_id)
        .append_pair("request_uri", request_uri);
    Ok(Some(open))
}

//! OAuth 2.1 for remote MCP upstreams (SPEC §10), as the MCP authorization specification of
//! 2025-11-25 and 2026-07-28 defines it.
//!
//! The protocol steps rmcp's `auth` module implements well are used as they are: discovery
//! (RFC 9728 from the 401's `resource_metadata`, then the well-known paths; RFC 8414, then
//! OpenID discovery), the `issuer` checks of metadata and of the redirect's `iss` (RFC 9207),
//! PKCE S256, the `resource` parameter (RFC 8707), the scope selection rules and the token
//! requests. What this crate adds (see ARCHITECTURE.md, *oauth20*):
//!
//! - a login that spans two processes and two RPCs ([`login::begin`] returns the URL, the
//!   redirect arrives later at [`login::Pending::complete`]);
//! - the persisted form of a login, [`Grant`], which holds everything a refresh needs (the
//!   server metadata, the client identity, the tokens) so that a refresh after a restart
//!   needs no discovery ([`Grant::refresh`]);
//! - dynamic registration called by us, so the registered client (its secret too) is part of
//!   the [`Grant`] and never only in rmcp's memory;
//! - revocation (RFC 7009), which rmcp does not offer ([`Grant::revoke`]);
//! - the manifest URL rule ([`check_url`]).
//!
//! Nothing here logs or displays a token: [`Grant`]'s `Debug` shows none.

#![forbid(unsafe_code)]

mod grant;
pub mod login;

pub use grant::Grant;

/// Everything that can go wrong in an OAuth step; each message names the step and, where it
/// helps, the fix. No variant carries a token.
#[derive(Debug, thiserror::Error)]
pub enum OAuthError {
    #[error("the URL {url:?} {problem}")]
    BadUrl { url: String, problem: &'static str },
    #[error("discovering the authorization server failed: {0}")]
    Discovery(String),
    #[error("the authorization server does not support PKCE with S256")]
    NoPkce,
    #[error("the client could not be registered: {0}")]
    Registration(String),
    #[error("the redirect's state does not match this login")]
    StateMismatch,
    #[error("exchanging the authorization code failed: {0}")]
    Exchange(String),
    #[error("refreshing the access token failed: {0}")]
    Refresh(String),
    #[error("the login holds no refresh token")]
    NoRefreshToken,
    #[error("revoking the tokens failed: {0}")]
    Revoke(String),
}

/// What the manifest says about a connector's login (`mcp.auth` of kind `oauth`).
#[derive(Clone, Debug, Default)]
pub struct ClientSettings {
    /// The MCP endpoint (the protected resource).
    pub url: String,
    /// Scopes to ask for when neither the resource's challenge nor its metadata names any.
    pub scopes: Vec<String>,
    /// A pre-registered client.
    pub client_id: Option<String>,
    /// The pre-registered client's secret (the value, read from `secrets/`).
    pub client_secret: Option<String>,
    /// A client ID metadata document, used when the server supports them.
    pub client_metadata_url: Option<String>,
}

/// The manifest rule for an OAuth connector's URL: `https`, or `http` to a loopback host.
pub fn check_url(url: &str) -> Result<(), OAuthError> {
    let bad = |problem| OAuthError::BadUrl {
        url: url.to_owned(),
        problem,
    };
    let parsed = reqwest::Url::parse(url).map_err(|_| bad("is not a URL"))?;
    match parsed.scheme() {
        "https" => Ok(()),
        "http" if is_loopback(&parsed) => Ok(()),
        "http" => Err(bad(
            "must use https (plain http only to 127.0.0.1, [::1] or localhost)",
        )),
        _ => Err(bad("must be an https URL")),
    }
}

fn is_loopback(url: &reqwest::Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Unix epoch milliseconds now.
pub(crate) fn now_unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn https_or_loopback_http_only() {
        for ok in [
            "https://mcp.example.com/mcp",
            "http://127.0.0.1:8080/mcp",
            "http://localhost/mcp",
            "http://[::1]:9/mcp",
        ] {
            assert!(check_url(ok).is_ok(), "{ok}");
        }
        for bad in [
            "http://mcp.example.com/mcp",
            "http://10.0.0.1/mcp",
            "ftp://x/y",
            "not a url",
        ] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
    }
}

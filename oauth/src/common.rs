//! What every step shares: the error type, the manifest's client settings, the URL rule.

/// Everything that can go wrong in an OAuth step; each message names the step and, where it
/// helps, the fix. No variant carries a token.
#[derive(Clone, Debug, thiserror::Error)]
pub enum OAuthError {
    /// A URL from the server's documents broke the endpoint rule (`crate::Reach`).
    #[error(
        "refused the authorization server's {endpoint} {url:?}: {rule}; nothing was opened or \
         sent to it"
    )]
    RefusedEndpoint {
        endpoint: String,
        url: String,
        rule: &'static str,
    },
    /// A connection would have gone to an address the address rule refuses.
    #[error(
        "refused to connect to {host}: it is a {class} address, which OAuth requests reach only \
         when the connector's MCP URL is one too; nothing was sent"
    )]
    AddressRefused {
        host: String,
        class: crate::net::AddressClass,
    },
    #[error("the answer of the {endpoint} is larger than 1 MiB: refused")]
    TooLarge { endpoint: String },
    #[error("the request to the {endpoint} failed: {reason}")]
    Http { endpoint: String, reason: String },
    #[error("the URL {url:?} {problem}")]
    BadUrl { url: String, problem: &'static str },
    #[error("discovering the authorization server failed: {0}")]
    Discovery(String),
    #[error("the authorization server does not support PKCE with S256")]
    NoPkce,
    #[error("the client could not be registered: {0}")]
    Registration(String),
    /// The redirect's `state` is not the login's: the CLI's redirect check and
    /// [`crate::login::Pending::complete`] both refuse it with this text.
    #[error(
        "the redirect's state does not match this login: refused (it came from another or older \
         login, or was forged); nothing was stored, run the connect command again"
    )]
    StateMismatch,
    #[error("exchanging the authorization code failed: {0}")]
    Exchange(String),
    #[error("refreshing the access token failed: {0}")]
    Refresh(String),
    #[error("the login holds no refresh token")]
    NoRefreshToken,
    #[error("revoking the tokens failed: {0}")]
    Revoke(String),
    #[error("pushing the authorization request failed: {0}")]
    Par(String),
}

impl OAuthError {
    /// Whether the endpoint, address or size rule refused a request.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            OAuthError::RefusedEndpoint { .. }
                | OAuthError::AddressRefused { .. }
                | OAuthError::TooLarge { .. }
        )
    }

    /// Whether the server refused the client itself (`invalid_client`, RFC 6749 §5.2): a
    /// registered client it no longer knows is registered again at the next login.
    pub fn refuses_client(&self) -> bool {
        match self {
            OAuthError::Exchange(reason)
            | OAuthError::Refresh(reason)
            | OAuthError::Par(reason) => reason.contains("invalid_client"),
            _ => false,
        }
    }
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

/// The rule the CLI applies to the authorization URL it is handed, right before opening or
/// printing it: `https`, or `http` to a loopback host (the kernel already applied the whole
/// endpoint rule, which allows the latter only for a loopback MCP URL). Anything else
/// (`file:`, `smb:`, `javascript:`, `data:`, plain http off loopback) is refused.
pub fn check_authorization_url(url: &str) -> Result<(), OAuthError> {
    crate::net::Reach::loopback()
        .check_scheme("authorization_endpoint", url)
        .map(|_| ())
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

    #[test]
    fn the_cli_opens_only_https_or_loopback_http() {
        for (url, open) in [
            ("https://as.example.com/authorize?client_id=c", true),
            ("http://127.0.0.1:9/authorize?client_id=c", true),
            ("http://as.example.com/authorize", false),
            ("http://0.0.0.0:9/authorize", false),
            ("file:///etc/passwd", false),
            ("smb://attacker.example/share", false),
            ("javascript:alert(1)", false),
            ("data:text/html,<b>x</b>", false),
        ] {
            assert_eq!(check_authorization_url(url).is_ok(), open, "{url}");
        }
    }
}

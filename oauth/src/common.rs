//! What every step shares: the manifest's client settings, the URL rules.

pub use crate::error::OAuthError;

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

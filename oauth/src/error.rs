//! The crate's one error type.

use crate::address::AddressClass;

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
    AddressRefused { host: String, class: AddressClass },
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

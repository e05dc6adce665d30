//! The one HTTP client of every OAuth request (the probes, discovery, registration, PAR, the
//! code exchange, refresh, revocation, userinfo) and the rules it enforces:
//!
//! - the endpoint rule ([`Reach::check_endpoint`]): a URL taken from a remote document is
//!   `https`, or `http` to a loopback host only when the MCP URL itself is loopback;
//! - the address rule ([`Reach::allows`]): a connection goes to a public address, or to one of
//!   a class ([`AddressClass`]) the MCP URL's own host is in; names are resolved by a resolver
//!   that drops every other address, IP-literal hosts are checked before sending;
//! - no proxy, redirects only where discovery needs them (each hop checked again), a timeout,
//!   and answers read in chunks up to [`MAX_BODY`] (Content-Length is not trusted).

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use rmcp::transport::auth::{
    OAuthHttpClient, OAuthHttpClientFuture, OAuthHttpRedirectPolicy, OAuthHttpRequest,
};

pub use crate::address::AddressClass;
use crate::error::OAuthError;

/// The largest answer read from an OAuth endpoint.
pub const MAX_BODY: usize = 1024 * 1024;
/// How long one OAuth request may take, answer included.
const TIMEOUT: Duration = Duration::from_secs(20);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Redirects followed by discovery requests (each hop passes the rules).
const MAX_REDIRECTS: usize = 5;

const HTTPS_RULE: &str = "an endpoint must be https (plain http only to a loopback host, and only when the MCP URL \
     is loopback too)";
const ADDRESS_RULE: &str = "its address is not public and the MCP URL's host is not in its class";

/// Where the OAuth requests of one connector may go, decided by its MCP URL (the one URL the
/// person chose).
#[derive(Clone, Debug)]
pub struct Reach {
    /// The MCP URL's host is loopback: plain http to a loopback endpoint is allowed.
    loopback_mcp: bool,
    /// The classes of the MCP URL host's addresses; besides public addresses only these are
    /// reached (never unspecified, multicast or reserved ones).
    classes: BTreeSet<AddressClass>,
}

impl Reach {
    /// The reach of a connector whose MCP URL is `mcp_url` (its host is resolved when it is a
    /// name, to learn its class).
    pub async fn of_mcp_url(mcp_url: &str) -> Reach {
        let Some(url) = reqwest::Url::parse(mcp_url).ok() else {
            return Reach::new(false, []);
        };
        let port = url.port_or_known_default().unwrap_or(443);
        let addrs: Vec<IpAddr> = match url.host() {
            Some(url::Host::Ipv4(ip)) => vec![IpAddr::V4(ip)],
            Some(url::Host::Ipv6(ip)) => vec![IpAddr::V6(ip)],
            Some(url::Host::Domain(name)) if is_localhost(name) => {
                vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]
            }
            Some(url::Host::Domain(name)) => tokio::net::lookup_host((name, port))
                .await
                .map(|addrs| addrs.map(|a| a.ip()).collect())
                .unwrap_or_default(),
            None => Vec::new(),
        };
        let loopback = url.host().is_some_and(|h| host_is_loopback(&h));
        Reach::new(loopback, addrs)
    }

    /// The reach of a loopback MCP URL.
    pub(crate) fn loopback() -> Reach {
        Reach::new(true, [IpAddr::V4(Ipv4Addr::LOCALHOST)])
    }

    fn new(loopback_mcp: bool, addrs: impl IntoIterator<Item = IpAddr>) -> Reach {
        Reach {
            loopback_mcp,
            classes: addrs.into_iter().map(AddressClass::of).collect(),
        }
    }

    /// Whether a connection to `ip` is allowed.
    pub fn allows(&self, ip: IpAddr) -> bool {
        let class = AddressClass::of(ip);
        class == AddressClass::Public
            || (self.classes.contains(&class)
                && !matches!(
                    class,
                    AddressClass::Unspecified | AddressClass::Multicast | AddressClass::Reserved
                ))
    }

    /// The endpoint rule for `url`, the server's `endpoint` (named in the refusal).
    pub fn check_endpoint(&self, endpoint: &str, url: &str) -> Result<reqwest::Url, OAuthError> {
        let parsed = self.check_scheme(endpoint, url)?;
        if let Some(ip) = parsed.host().as_ref().and_then(literal)
            && !self.allows(ip)
        {
            return Err(refused(endpoint, url, ADDRESS_RULE));
        }
        Ok(parsed)
    }

    /// The scheme half of the endpoint rule: `https`, or `http` to a loopback host when the
    /// MCP URL is loopback.
    pub(crate) fn check_scheme(
        &self,
        endpoint: &str,
        url: &str,
    ) -> Result<reqwest::Url, OAuthError> {
        let parsed = reqwest::Url::parse(url).map_err(|_| refused(endpoint, url, HTTPS_RULE))?;
        let loopback = parsed.host().is_some_and(|h| host_is_loopback(&h));
        match parsed.scheme() {
            "https" if parsed.host().is_some() => Ok(parsed),
            "http" if self.loopback_mcp && loopback => Ok(parsed),
            _ => Err(refused(endpoint, url, HTTPS_RULE)),
        }
    }

    /// The address rule for an IP-literal host of `url` (names go through the resolver).
    fn check_literal(&self, url: &reqwest::Url) -> Result<(), OAuthError> {
        match url.host().as_ref().and_then(literal) {
            Some(ip) if !self.allows(ip) => Err(OAuthError::AddressRefused {
                host: url.host_str().unwrap_or_default().to_owned(),
                class: AddressClass::of(ip),
            }),
            _ => Ok(()),
        }
    }
}

fn refused(endpoint: &str, url: &str, rule: &'static str) -> OAuthError {
    OAuthError::RefusedEndpoint {
        endpoint: endpoint.to_owned(),
        url: shorten(url),
        rule,
    }
}

fn is_localhost(name: &str) -> bool {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost" || name.ends_with(".localhost")
}

fn host_is_loopback(host: &url::Host<&str>) -> bool {
    match host {
        url::Host::Domain(name) => is_localhost(name),
        url::Host::Ipv4(ip) => ip.is_loopback(),
        url::Host::Ipv6(ip) => AddressClass::of(IpAddr::V6(*ip)) == AddressClass::Loopback,
    }
}

fn literal(host: &url::Host<&str>) -> Option<IpAddr> {
    match host {
        url::Host::Ipv4(ip) => Some(IpAddr::V4(*ip)),
        url::Host::Ipv6(ip) => Some(IpAddr::V6(*ip)),
        url::Host::Domain(_) => None,
    }
}

/// A URL as a refusal quotes it: at most 120 characters (a `data:` URL can be long).
fn shorten(url: &str) -> String {
    match url.char_indices().nth(120) {
        Some((at, _)) => format!("{}…", &url[..at]),
        None => url.to_owned(),
    }
}

/// The resolver of the OAuth client: only the addresses [`Reach::allows`].
struct Resolver(Arc<Reach>);

impl reqwest::dns::Resolve for Resolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let reach = self.0.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let all: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = all
                .iter()
                .copied()
                .filter(|a| reach.allows(a.ip()))
                .collect();
            match (allowed.is_empty(), all.first()) {
                (true, Some(first)) => Err(Box::new(OAuthError::AddressRefused {
                    host,
                    class: AddressClass::of(first.ip()),
                })
                    as Box<dyn std::error::Error + Send + Sync>),
                _ => Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs),
            }
        })
    }
}

/// An endpoint's answer, read whole (at most [`MAX_BODY`]).
pub(crate) struct Answer {
    pub status: reqwest::StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub body: Vec<u8>,
}

/// The OAuth HTTP client of one connector (cheap to clone).
#[derive(Clone)]
pub struct OAuthHttp {
    reach: Arc<Reach>,
    direct: reqwest::Client,
    following: reqwest::Client,
    /// The last request the rules refused on rmcp's behalf (rmcp reports only that a step
    /// failed; the refusal says why).
    refusal: Arc<std::sync::Mutex<Option<OAuthError>>>,
}

impl std::fmt::Debug for OAuthHttp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthHttp")
            .field("reach", &self.reach)
            .finish_non_exhaustive()
    }
}

impl OAuthHttp {
    /// The client for a connector whose MCP URL is `mcp_url`.
    pub async fn for_mcp_url(mcp_url: &str) -> Result<OAuthHttp, OAuthError> {
        OAuthHttp::new(Reach::of_mcp_url(mcp_url).await)
    }

    /// The one builder of every OAuth HTTP client: no proxy, the filtering resolver, a
    /// timeout; `following` follows checked redirects, `direct` none.
    pub fn new(reach: Reach) -> Result<OAuthHttp, OAuthError> {
        let reach = Arc::new(reach);
        let build = |redirect: reqwest::redirect::Policy| {
            reqwest::Client::builder()
                .no_proxy()
                .dns_resolver(Arc::new(Resolver(reach.clone())))
                .redirect(redirect)
                .timeout(TIMEOUT)
                .connect_timeout(CONNECT_TIMEOUT)
                .build()
                .map_err(|e| failed("OAuth client", &e))
        };
        let policy = reach.clone();
        let follow = reqwest::redirect::Policy::custom(move |attempt| {
            let checked = policy
                .check_endpoint("redirect target", attempt.url().as_str())
                .and_then(|url| policy.check_literal(&url));
            match checked {
                Err(e) => attempt.error(e),
                Ok(()) if attempt.previous().len() > MAX_REDIRECTS => attempt.stop(),
                Ok(()) => attempt.follow(),
            }
        });
        Ok(OAuthHttp {
            direct: build(reqwest::redirect::Policy::none())?,
            following: build(follow)?,
            reach,
            refusal: Arc::default(),
        })
    }

    pub fn reach(&self) -> &Reach {
        &self.reach
    }

    /// The refusal behind a failed rmcp step, else `otherwise`.
    pub(crate) fn explain(&self, otherwise: OAuthError) -> OAuthError {
        let taken = self.refusal.lock().ok().and_then(|mut r| r.take());
        taken.unwrap_or(otherwise)
    }

    /// A request builder for `url` (sent with [`OAuthHttp::send`]).
    pub(crate) fn request(
        &self,
        method: reqwest::Method,
        url: reqwest::Url,
    ) -> reqwest::RequestBuilder {
        self.direct.request(method, url)
    }

    /// Sends `request` to the server's `endpoint` after both rules; the answer is read up to
    /// [`MAX_BODY`].
    pub(crate) async fn send(
        &self,
        endpoint: &str,
        request: reqwest::RequestBuilder,
        follow: bool,
    ) -> Result<Answer, OAuthError> {
        let response = self.start(endpoint, request, follow).await?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = read_capped(endpoint, response).await?;
        Ok(Answer {
            status,
            headers,
            body,
        })
    }

    /// Sends `request` and returns the response with its body unread (a probe reads only the
    /// headers).
    pub(crate) async fn start(
        &self,
        endpoint: &str,
        request: reqwest::RequestBuilder,
        follow: bool,
    ) -> Result<reqwest::Response, OAuthError> {
        let request = request.build().map_err(|e| failed(endpoint, &e))?;
        self.reach
            .check_endpoint(endpoint, request.url().as_str())?;
        self.reach.check_literal(request.url())?;
        let client = if follow {
            &self.following
        } else {
            &self.direct
        };
        client
            .execute(request)
            .await
            .map_err(|e| failed(endpoint, &e))
    }
}

/// Reads `response`'s body in chunks, refusing it past [`MAX_BODY`].
async fn read_capped(
    endpoint: &str,
    mut response: reqwest::Response,
) -> Result<Vec<u8>, OAuthError> {
    let too_large = || OAuthError::TooLarge {
        endpoint: endpoint.to_owned(),
    };
    if response
        .content_length()
        .is_some_and(|n| n > MAX_BODY as u64)
    {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| failed(endpoint, &e))? {
        if chunk.len() > MAX_BODY - body.len() {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A failed request as one line: one of our own refusals where the rules stopped it (found in
/// the error's sources), else the error and its sources (without the URL).
fn failed(endpoint: &str, error: &reqwest::Error) -> OAuthError {
    let mut reason = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(e) = source {
        if let Some(ours) = e.downcast_ref::<OAuthError>() {
            return ours.clone();
        }
        let text = e.to_string();
        if !reason.contains(&text) {
            reason = format!("{reason}: {text}");
        }
        source = e.source();
    }
    OAuthError::Http {
        endpoint: endpoint.to_owned(),
        reason: reason.replace(&format!(" for url ({})", url_of(error)), ""),
    }
}

fn url_of(error: &reqwest::Error) -> String {
    error.url().map(ToString::to_string).unwrap_or_default()
}

/// rmcp's discovery, registration and code exchange go through this client too.
impl OAuthHttpClient for OAuthHttp {
    fn execute(&self, request: OAuthHttpRequest) -> OAuthHttpClientFuture<'_> {
        Box::pin(async move {
            let follow = request.redirect_policy == OAuthHttpRedirectPolicy::Follow;
            let request = reqwest::Request::try_from(request.request)?;
            let builder = reqwest::RequestBuilder::from_parts(self.direct.clone(), request);
            let answer = match self.send("OAuth endpoint", builder, follow).await {
                Ok(answer) => answer,
                Err(e) => {
                    if e.is_refusal()
                        && let Ok(mut refusal) = self.refusal.lock()
                    {
                        *refusal = Some(e.clone());
                    }
                    return Err(e.into());
                }
            };
            let mut response = oauth2::http::Response::builder().status(answer.status);
            for (name, value) in &answer.headers {
                response = response.header(name, value);
            }
            Ok(response.body(answer.body)?)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::ip;

    #[test]
    fn only_public_addresses_and_the_mcp_hosts_own_class_are_reached() {
        let public = Reach::new(false, [ip("93.184.216.34")]);
        let loopback = Reach::new(true, [ip("127.0.0.1")]);
        let private = Reach::new(false, [ip("10.1.2.3")]);
        let unspecified = Reach::new(false, [ip("0.0.0.0")]);
        for (reach, address, allowed) in [
            (&public, "93.184.216.35", true),
            (&public, "127.0.0.1", false),
            (&public, "10.0.0.1", false),
            (&public, "169.254.169.254", false),
            (&public, "100.64.0.1", false),
            (&public, "0.0.0.0", false),
            (&public, "fc00::1", false),
            (&public, "::ffff:10.0.0.1", false),
            (&public, "224.0.0.1", false),
            (&loopback, "127.0.0.1", true),
            (&loopback, "::1", true),
            (&loopback, "0.0.0.0", false),
            (&loopback, "10.0.0.1", false),
            (&loopback, "93.184.216.34", true),
            (&private, "10.9.9.9", true),
            (&private, "192.168.0.1", true),
            (&private, "127.0.0.1", false),
            (&private, "169.254.169.254", false),
            (&unspecified, "0.0.0.0", false),
        ] {
            assert_eq!(reach.allows(ip(address)), allowed, "{reach:?} {address}");
        }
    }

    #[test]
    fn endpoints_are_https_or_loopback_http_for_a_loopback_mcp_url() {
        let public = Reach::new(false, [ip("93.184.216.34")]);
        let loopback = Reach::new(true, [ip("127.0.0.1")]);
        for (reach, url, allowed) in [
            (&public, "https://as.example.com/authorize", true),
            (&public, "https://93.184.216.34/token", true),
            (&public, "http://as.example.com/authorize", false),
            (&public, "http://127.0.0.1:9/authorize", false),
            (&public, "https://10.0.0.1/revoke", false),
            (&public, "https://169.254.169.254/latest", false),
            (&public, "https://[fc00::1]/token", false),
            (&public, "https://[::ffff:10.0.0.1]/token", false),
            (&public, "https://100.64.0.1/token", false),
            (&public, "file:///etc/passwd", false),
            (&public, "smb://attacker.example/share", false),
            (&public, "javascript:alert(1)", false),
            (&public, "data:text/html,<script>alert(1)</script>", false),
            (&public, "not a url", false),
            (&loopback, "http://127.0.0.1:9/authorize", true),
            (&loopback, "http://localhost:9/authorize", true),
            (&loopback, "http://[::1]:9/authorize", true),
            (&loopback, "https://127.0.0.1:9/authorize", true),
            (&loopback, "http://0.0.0.0:9/revoke", false),
            (&loopback, "https://0.0.0.0:9/revoke", false),
            (&loopback, "http://10.0.0.1/revoke", false),
            (&loopback, "https://10.0.0.1/revoke", false),
            (&loopback, "http://as.example.com/authorize", false),
            (&loopback, "file:///etc/passwd", false),
            (&loopback, "javascript:alert(1)", false),
        ] {
            let checked = reach.check_endpoint("authorization_endpoint", url);
            assert_eq!(checked.is_ok(), allowed, "{url}: {checked:?}");
        }
    }

    #[test]
    fn a_refusal_is_one_line_naming_the_endpoint_and_the_rule() {
        let reach = Reach::new(true, [ip("127.0.0.1")]);
        let line = reach
            .check_endpoint("authorization_endpoint", "file:///etc/passwd")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(!line.contains('\n'), "{line}");
        for part in [
            "authorization_endpoint",
            "file:///etc/passwd",
            "https",
            "refused",
        ] {
            assert!(line.contains(part), "{part} missing: {line}");
        }
        let long = format!("data:text/html,{}", "x".repeat(10_000));
        let line = reach
            .check_endpoint("authorization_endpoint", &long)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(line.len() < 400, "{line}");
    }
}

//! A loopback HTTP proxy that only adds `Authorization: Bearer <token>` to every request and
//! forwards it, unchanged otherwise, to the frontend. The conformance suite cannot send an
//! `Authorization` header, so it talks to the frontend through this proxy.
//!
//! Every request goes out on its own HTTP/1.1 connection with its method, request target,
//! headers (`Host` and `Origin` included) and body as received; the response comes back with
//! its status, headers and body streamed as they arrive (SSE included). When the client drops
//! a response, the upstream connection is dropped too, so closing a stream reaches the
//! frontend (modern cancellation). The token is never logged.

use std::net::SocketAddr;
use std::process::Command;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use axum::http::{Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

use crate::support::{Listening, bin};

#[derive(Clone)]
struct Target {
    upstream: SocketAddr,
    authorization: HeaderValue,
}

/// The bearer header value for `token`; `None` when the token has characters a header
/// cannot carry.
fn bearer(token: &str) -> Option<HeaderValue> {
    let mut value = HeaderValue::from_str(&format!("Bearer {}", token.trim())).ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// Serves the proxy on `listener`, forwarding to `upstream` with `token`, until the future is
/// dropped or the listener fails.
pub async fn serve(
    listener: TcpListener,
    upstream: SocketAddr,
    token: &str,
) -> std::io::Result<()> {
    let authorization = bearer(token).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the token cannot be sent in an HTTP header",
        )
    })?;
    let router = axum::Router::new().fallback(forward).with_state(Target {
        upstream,
        authorization,
    });
    axum::serve(listener, router).await
}

fn bad_gateway(what: &str) -> Response<Body> {
    let mut response = Response::new(Body::from(format!("tutti-auth-proxy: {what}\n")));
    *response.status_mut() = StatusCode::BAD_GATEWAY;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    response
}

async fn forward(State(target): State<Target>, request: Request) -> Response<Body> {
    let (mut parts, body) = request.into_parts();
    parts
        .headers
        .insert(AUTHORIZATION, target.authorization.clone());
    // Origin-form request target: the path and query exactly as received.
    if let Some(pq) = parts.uri.path_and_query().cloned() {
        parts.uri = pq.as_str().parse().unwrap_or_default();
    }
    let request = axum::http::Request::from_parts(parts, body);
    let stream = match TcpStream::connect(target.upstream).await {
        Ok(stream) => stream,
        Err(e) => return bad_gateway(&format!("cannot connect to {}: {e}", target.upstream)),
    };
    let (mut sender, connection) =
        match hyper::client::conn::http1::handshake::<_, Body>(TokioIo::new(stream)).await {
            Ok(pair) => pair,
            Err(e) => return bad_gateway(&format!("handshake failed: {e}")),
        };
    // The connection task ends when the response body is done or dropped.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    match sender.send_request(request).await {
        Ok(response) => response.map(Body::new),
        Err(e) => bad_gateway(&format!("request failed: {e}")),
    }
}

/// A running `tutti-auth-proxy` child. Dropping it closes the child's stdin (which makes it
/// exit), then kills and reaps it.
pub struct AuthProxy {
    _process: Listening,
    /// The proxy's port on 127.0.0.1.
    pub port: u16,
}

impl AuthProxy {
    /// Starts `tutti-auth-proxy --upstream <host:port of frontend_url>`, hands it `token` on
    /// stdin (never argv or the environment), and waits for `listening <port>`.
    pub fn start(frontend_url: &str, token: &str) -> AuthProxy {
        let authority = frontend_url
            .strip_prefix("http://")
            .and_then(|rest| rest.split('/').next())
            .unwrap_or_else(|| panic!("not an http:// URL: {frontend_url}"));
        let mut command = Command::new(bin("tutti-auth-proxy"));
        command.args(["--upstream", authority]);
        let process = Listening::start(command, "tutti-auth-proxy", Some(token));
        AuthProxy {
            port: process.port,
            _process: process,
        }
    }

    /// The MCP URL through the proxy: `http://127.0.0.1:<port>/mcp/connector`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp/connector", self.port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_values_are_sensitive_headers() {
        let v = bearer(" tts_abc\n").unwrap_or_else(|| panic!("valid token"));
        assert_eq!(v.to_str().ok(), Some("Bearer tts_abc"));
        assert!(v.is_sensitive());
        assert!(bearer("a\u{7f}b").is_none());
    }
}

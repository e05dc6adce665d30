//! The probes for a resource's 401 challenge before a login: its `WWW-Authenticate` names
//! the scope to ask for and the resource metadata. The legacy probe is an unauthenticated
//! `initialize`; a 2026-07-28 server may refuse that (no `MCP-Protocol-Version` header) with
//! a 400 before it looks at authorization, so the challenge is asked for again with the
//! modern request, `server/discover` with the version header.

use serde_json::{Value, json};

use crate::net::OAuthHttp;

/// The `WWW-Authenticate` of the resource's 401 to an unauthenticated `initialize`, if any.
pub(crate) async fn legacy_challenge(http: &OAuthHttp, url: &str) -> Option<String> {
    let body = json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "tutti", "version": env!("CARGO_PKG_VERSION")}}
    });
    challenge(http, url, &body, &[]).await
}

/// The `WWW-Authenticate` of the resource's 401 to an unauthenticated `server/discover`, if
/// any.
pub(crate) async fn modern_challenge(http: &OAuthHttp, url: &str) -> Option<String> {
    let body = json!({
        "jsonrpc": "2.0", "id": 0, "method": "server/discover",
        "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo":
                {"name": "tutti", "version": env!("CARGO_PKG_VERSION")},
            "io.modelcontextprotocol/clientCapabilities": {}
        }}
    });
    let headers = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "server/discover"),
    ];
    challenge(http, url, &body, &headers).await
}

/// The `WWW-Authenticate` of the resource's 401 to `body` POSTed without credentials (with
/// `headers`), if any. The body of the answer is not read.
async fn challenge(
    http: &OAuthHttp,
    url: &str,
    body: &Value,
    headers: &[(&str, &str)],
) -> Option<String> {
    let url = reqwest::Url::parse(url).ok()?;
    let mut request = http
        .request(reqwest::Method::POST, url)
        .header("accept", "application/json, text/event-stream");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = http
        .start("MCP endpoint", request.json(body), false)
        .await
        .ok()?;
    if response.status() != reqwest::StatusCode::UNAUTHORIZED {
        return None;
    }
    let value = response.headers().get(reqwest::header::WWW_AUTHENTICATE)?;
    value.to_str().ok().map(str::to_owned)
}

//! The second probe for a 401 challenge (conf20): a 2026-07-28 server may refuse the legacy
//! probe's `initialize` (no `MCP-Protocol-Version` header) with a 400 before it looks at
//! authorization, so its `WWW-Authenticate` (the scope to ask for, the resource metadata) is
//! asked for again with the modern request, `server/discover` with the version header.

/// The `WWW-Authenticate` of the resource's 401 to an unauthenticated `server/discover`, if
/// any.
pub(crate) async fn modern_challenge(url: &str) -> Option<String> {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .ok()?;
    let body = serde_json::json!({
        "jsonrpc": "2.0", "id": 0, "method": "server/discover",
        "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo":
                {"name": "tutti", "version": env!("CARGO_PKG_VERSION")},
            "io.modelcontextprotocol/clientCapabilities": {}
        }}
    });
    let response = http
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "server/discover")
        .json(&body)
        .send()
        .await
        .ok()?;
    if response.status() != reqwest::StatusCode::UNAUTHORIZED {
        return None;
    }
    let value = response.headers().get(reqwest::header::WWW_AUTHENTICATE)?;
    value.to_str().ok().map(str::to_owned)
}

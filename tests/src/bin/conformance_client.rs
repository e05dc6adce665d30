//! `tutti-conformance-client <server-url>`: the client side of the official MCP conformance
//! suite (`conformance client --command tutti-conformance-client`), built on the worker's own
//! upstream client (`tutti_upstream_worker::client`) and the runtime's OAuth crate
//! (`tutti_oauth`), not on a second client.
//!
//! It reads `MCP_CONFORMANCE_SCENARIO` and `MCP_CONFORMANCE_CONTEXT` as the suite sets them and
//! does what a connector's life does: for `auth/*` scenarios the login first (the suite's
//! authorization server approves at once, so the redirect is read from the `Location` header
//! instead of a browser), then the handshake, `tools/list` and a call of every tool. A call
//! refused with `403 insufficient_scope` is what makes a connector `auth_required`; here, as
//! `tutti connector connect` then does, a new login asks for the larger scope (at most
//! [`MAX_LOGINS`] logins). Tokens are never printed.
#![forbid(unsafe_code)]

use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::{Map, Value, json};
use tutti_oauth::{ClientSettings, Grant};
use tutti_upstream_worker::client::{HttpUpstream, OAuthCredentials, OAuthToken, Refresh};

/// The handshake and first listing, as a connector's default `startMs`.
const START: Duration = Duration::from_secs(20);
/// The redirect URI a login names (the suite's server only reads it back).
const REDIRECT_URI: &str = "http://127.0.0.1:1/callback";
/// The client ID metadata document a manifest may name (`auth.clientMetadataUrl`); the
/// suite's `auth/basic-cimd` expects exactly this URL.
const CLIENT_METADATA_URL: &str = "https://conformance-test.local/client-metadata.json";
/// The first login plus step-ups: a server that keeps asking for more scope is given up on.
const MAX_LOGINS: usize = 3;

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let url = std::env::args()
        .next_back()
        .filter(|u| u.starts_with("http"))
        .context("usage: tutti-conformance-client <server-url>")?;
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let context: Value = std::env::var("MCP_CONFORMANCE_CONTEXT")
        .ok()
        .and_then(|c| serde_json::from_str(&c).ok())
        .unwrap_or(Value::Null);
    eprintln!("scenario {scenario:?}");
    if scenario.starts_with("auth/") {
        run_with_login(&url, &context).await
    } else {
        let upstream = HttpUpstream::connect(&url, None, START).await?;
        let result = exercise(&upstream).await;
        upstream.stop().await;
        result
    }
}

/// Calls every listed tool (arguments from its schema); the first call that fails ends it.
async fn exercise(upstream: &HttpUpstream) -> anyhow::Result<()> {
    eprintln!(
        "connected ({}), {} tool(s)",
        upstream.protocol_version(),
        upstream.tools().len()
    );
    for tool in upstream.tools() {
        let name = tool["name"].as_str().unwrap_or_default();
        let arguments = arguments_for(name, &tool["inputSchema"], upstream.tools());
        match upstream.call_tool_answering(name, arguments, answer).await {
            Ok(result) => eprintln!("called {name}: {} bytes", result.len()),
            Err(why) => bail!("calling {name} failed: {why}"),
        }
    }
    Ok(())
}

/// A login, then the connector's work; a `403 insufficient_scope` leads to one more login
/// with the scope it names, as `tutti connector connect` does for an `auth_required` one.
async fn run_with_login(url: &str, context: &Value) -> anyhow::Result<()> {
    let settings = ClientSettings {
        url: url.to_owned(),
        scopes: Vec::new(),
        client_id: text(context, "client_id"),
        client_secret: text(context, "client_secret"),
        client_metadata_url: Some(CLIENT_METADATA_URL.to_owned()),
    };
    let mut step_up: Option<String> = None;
    for _ in 0..MAX_LOGINS {
        let grant = login(&settings, step_up.as_deref()).await?;
        eprintln!("logged in (scopes {:?})", grant.scopes);
        let credentials = OAuthCredentials::new(token_of(grant));
        let result = match HttpUpstream::connect(url, Some(&credentials), START).await {
            Ok(upstream) => {
                let result = exercise(&upstream).await;
                upstream.stop().await;
                result
            }
            Err(e) => Err(e.into()),
        };
        // As for a connector: refused credentials (a refresh that failed, a 403
        // `insufficient_scope`) make it `auth_required`, and `tutti connector connect` logs
        // in again from fresh discovery, asking for the scope the 403 named.
        match (result, credentials.needs_login()) {
            (Ok(()), _) => return Ok(()),
            (Err(e), Some((why, scope))) => {
                eprintln!("{e:#}; needs a new login: {why}");
                step_up = (!scope.is_empty()).then_some(scope);
            }
            (Err(e), None) => return Err(e),
        }
    }
    bail!("the server still refuses the credentials after {MAX_LOGINS} logins")
}

/// The browser login without a browser: the suite's authorization endpoint redirects at once.
async fn login(settings: &ClientSettings, step_up: Option<&str>) -> anyhow::Result<Grant> {
    let pending = tutti_oauth::login::begin(settings, REDIRECT_URI, step_up, None).await?;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let response = http.get(pending.authorization_url()).send().await?;
    let location = response
        .headers()
        .get(reqwest::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .context("the authorization endpoint did not redirect")?;
    let redirect = reqwest::Url::parse(location).context("the redirect is not a URL")?;
    let param = |name: &str| {
        redirect
            .query_pairs()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    };
    if let Some(error) = param("error") {
        bail!("the authorization server refused the login: {error}");
    }
    let code = param("code").context("the redirect carries no code")?;
    let state = param("state").unwrap_or_default();
    Ok(pending
        .complete(&code, &state, param("iss").as_deref())
        .await?)
}

/// The access token as a worker gets it, renewed through the grant's refresh token (the
/// kernel's part in the runtime).
fn token_of(grant: Grant) -> OAuthToken {
    let access_token = grant.access_token().unwrap_or_default().to_owned();
    let expires_unix_ms = grant.expires_unix_ms;
    let grant = std::sync::Arc::new(tokio::sync::Mutex::new(grant));
    let refresh: Refresh = std::sync::Arc::new(move |_rejected| {
        let grant = grant.clone();
        Box::pin(async move {
            let mut grant = grant.lock().await;
            let next = grant.refresh().await.map_err(|e| e.to_string())?;
            *grant = next;
            let token = grant.access_token().unwrap_or_default().to_owned();
            Ok((token, grant.expires_unix_ms))
        })
    });
    OAuthToken {
        access_token,
        expires_unix_ms,
        refresh,
    }
}

fn text(context: &Value, name: &str) -> Option<String> {
    context[name].as_str().map(str::to_owned)
}

/// What the agent answers a request the upstream sends during a call (relayed by the
/// worker, SPEC §11): a form elicitation is accepted with the defaults its schema gives; other
/// requests are refused as a client without the capability does.
fn answer(method: &str, params: Value) -> Result<Value, (i32, String)> {
    if method != "elicitation/create" {
        return Err((-32601, format!("{method} is not supported by this client")));
    }
    let mut content = Map::new();
    if let Some(properties) = params["requestedSchema"]["properties"].as_object() {
        for (name, property) in properties {
            if let Some(default) = property.get("default") {
                content.insert(name.clone(), default.clone());
            }
        }
    }
    Ok(json!({"action": "accept", "content": content}))
}

/// Arguments for a tool: every required property gets a value of its type (the suite's tools
/// check that the call arrives, not what it says); `test_custom_headers` (`http-custom-headers`)
/// gets the values its parameters describe, so that every `Mcp-Param-*` header encoding is
/// exercised, and `json_schema_echo` the schema the worker listed for its sibling tool.
fn arguments_for(tool: &str, schema: &Value, tools: &[Value]) -> Option<Map<String, Value>> {
    match tool {
        "test_custom_headers" => return custom_header_arguments(),
        // `json-schema-2020-12-preservation`: the listed schema, passed back as received.
        "json_schema_echo" => {
            let echoed = tools
                .iter()
                .find(|t| t["name"] == "json_schema_2020_12_tool")?;
            return json!({"schema": echoed["inputSchema"]})
                .as_object()
                .cloned();
        }
        _ => {}
    }
    let properties = schema["properties"].as_object()?;
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut arguments = Map::new();
    for (name, property) in properties {
        if !required.contains(&name.as_str()) {
            continue;
        }
        let value = match property["type"].as_str() {
            Some("number") => json!(1.0),
            Some("integer") => json!(1),
            Some("boolean") => json!(true),
            Some("array") => json!([]),
            Some("object") => json!({}),
            _ => json!("test"),
        };
        arguments.insert(name.clone(), value);
    }
    Some(arguments)
}

/// One value per parameter description of the suite's `test_custom_headers`.
fn custom_header_arguments() -> Option<Map<String, Value>> {
    let arguments = json!({
        "region": "us-west1",
        "priority": 5,
        "verbose": false,
        "debug": true,
        "empty_val": "",
        "method_val": "GET",
        "float_val": 1.5,
        "non_ascii_val": "Zürich 東京",
        "whitespace_val": "  padded  ",
        "leading_space_val": " leading",
        "trailing_space_val": "trailing ",
        "internal_space_val": "a b c",
        "control_char_val": "bell\u{7}end",
        "crlf_val": "line1\r\nline2",
        "tab_val": "\tindented",
        "query": "test"
    });
    arguments.as_object().cloned()
}

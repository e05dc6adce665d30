//! The OAuth end-to-end harness: the authorization server and protected resource of
//! `tests/oauth/provider.mjs` (oidc-provider, installed by `scripts/install-test-tools`), and
//! a headless "browser" that completes its login and consent pages over plain HTTP the way a
//! user's browser would (cookies, redirects, form posts).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};

use serde_json::Value;

use crate::support::{npm_package, repo_root, require_node22, tools_dir};

/// A running `provider.mjs`. Dropping it closes its stdin (it exits), then kills and reaps it.
pub struct OAuthServer {
    child: Child,
    stdin: Option<ChildStdin>,
    /// The authorization server's URL (what the resource metadata names).
    pub issuer: String,
    /// The MCP URL of the protected resource (`http://127.0.0.1:R/mcp`).
    pub mcp_url: String,
    /// The resource identifier of its metadata (`http://127.0.0.1:R/`).
    pub resource: String,
    base: String,
}

impl OAuthServer {
    /// Starts `provider.mjs --upstream <upstream> <args…>` with `envs` (stderr to `stderr`)
    /// and waits for its ready line. A missing Node or oidc-provider fails the test with the
    /// way to install them.
    pub fn start(
        upstream: &str,
        args: &[&str],
        envs: &[(&str, &str)],
        stderr: &Path,
    ) -> OAuthServer {
        let node = require_node22();
        assert!(
            npm_package("oidc-provider").is_some(),
            "this test needs oidc-provider under .tools/npm: run scripts/install-test-tools"
        );
        let err = std::fs::File::create(stderr)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", stderr.display()));
        let mut child = Command::new(node)
            .arg(repo_root().join("tests").join("oauth").join("provider.mjs"))
            .args(["--upstream", upstream])
            .args(args)
            .env("TUTTI_NPM_DIR", tools_dir().join("npm"))
            .envs(envs.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start provider.mjs: {e}"));
        let stdin = child.stdin.take();
        let stdout = child
            .stdout
            .take()
            .unwrap_or_else(|| panic!("no stdout pipe for provider.mjs"));
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let ready: Value = serde_json::from_str(line.trim()).unwrap_or_else(|e| {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "provider.mjs did not print its ready line ({e}): {line:?}\n{}",
                crate::support::file_tail(stderr, 30)
            )
        });
        let text = |k: &str| ready[k].as_str().unwrap_or_default().to_owned();
        OAuthServer {
            issuer: text("issuer"),
            mcp_url: text("mcp"),
            base: text("resource").trim_end_matches('/').to_owned(),
            resource: text("resource"),
            child,
            stdin,
        }
    }

    async fn control(&self, path: &str, body: Value) -> String {
        let response = reqwest::Client::new()
            .post(format!("{}/control/{path}", self.base))
            .json(&body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("control {path}: {e}"));
        assert!(
            response.status().is_success(),
            "control {path}: {}",
            response.status()
        );
        response.text().await.unwrap_or_default()
    }

    /// The server revokes every grant: access and refresh tokens stop working.
    pub async fn revoke_all(&self) {
        self.control("revoke", Value::Null).await;
    }

    /// The server drops every access token (as if they had expired); refresh tokens still work.
    pub async fn drop_access_tokens(&self) {
        self.control("drop-access-tokens", Value::Null).await;
    }

    /// Calls of upstream tool `tool` need `scope` from now on (403 `insufficient_scope`).
    pub async fn require_scope(&self, tool: &str, scope: &str) {
        self.control(
            "require-scope",
            serde_json::json!({"tool": tool, "scope": scope}),
        )
        .await;
    }

    /// The next `tools/call` answers 500 with the request's headers (its token too) as body.
    pub async fn echo_headers_once(&self) {
        self.control("echo-headers", Value::Null).await;
    }

    /// Every authorization code, access token, refresh token and client secret the server
    /// issued so far.
    pub async fn issued_secrets(&self) -> Vec<String> {
        let issued: Value = reqwest::get(format!("{}/control/issued", self.base))
            .await
            .unwrap_or_else(|e| panic!("control issued: {e}"))
            .json()
            .await
            .unwrap_or_else(|e| panic!("control issued: {e}"));
        ["codes", "accessTokens", "refreshTokens", "clientSecrets"]
            .iter()
            .flat_map(|k| issued[*k].as_array().cloned().unwrap_or_default())
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect()
    }

    /// How many refresh grants the authorization server answered so far.
    pub async fn refreshes(&self) -> usize {
        self.seen("token")
            .await
            .iter()
            .filter(|e| e["grantType"] == "refresh_token")
            .count()
    }

    /// What the servers saw so far (endpoint, status, grant type, resource; no token).
    pub async fn log(&self) -> Vec<Value> {
        let text = reqwest::get(format!("{}/control/log", self.base))
            .await
            .unwrap_or_else(|e| panic!("control log: {e}"))
            .text()
            .await
            .unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The events of the authorization server's endpoint `route` (e.g. `token`, `revocation`,
    /// `authorization`, `registration`).
    pub async fn seen(&self, route: &str) -> Vec<Value> {
        self.log()
            .await
            .into_iter()
            .filter(|e| e["server"] == "as" && e["route"] == route)
            .collect()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for OAuthServer {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An OAuth connector manifest for the MCP server at `url`, with extra `auth` fields.
pub fn oauth_connector(key: &str, url: &str, auth: Value) -> Value {
    let mut kind = serde_json::json!({"kind": "oauth"});
    if let (Some(kind), Some(extra)) = (kind.as_object_mut(), auth.as_object()) {
        kind.extend(extra.clone());
    }
    serde_json::json!({
        "key": key,
        "name": format!("Remote {key}"),
        "description": format!("Remote MCP server {key} behind an OAuth login"),
        "version": "1.0.0",
        "mcp": {"transport": "http", "url": url, "auth": kind},
    })
}

/// The value of query parameter `name` of `url`.
pub fn query_param(url: &str, name: &str) -> Option<String> {
    let url = reqwest::Url::parse(url).ok()?;
    url.query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// `application/x-www-form-urlencoded` encoding of `pairs`.
fn form_body(pairs: &[(&str, String)]) -> String {
    reqwest::Url::parse_with_params("http://form.invalid/", pairs)
        .ok()
        .and_then(|u| u.query().map(str::to_owned))
        .unwrap_or_default()
}

/// A headless browser: a cookie jar (name → value; the test servers set no two cookies of one
/// name that matter at once) and no automatic redirects.
pub struct Browser {
    http: reqwest::Client,
    cookies: BTreeMap<String, String>,
}

impl Default for Browser {
    fn default() -> Self {
        Self::new()
    }
}

impl Browser {
    pub fn new() -> Browser {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_else(|e| panic!("cannot build an HTTP client: {e}"));
        Browser {
            http,
            cookies: BTreeMap::new(),
        }
    }

    fn cookie_header(&self) -> String {
        self.cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    fn keep_cookies(&mut self, response: &reqwest::Response) {
        for value in response.headers().get_all(reqwest::header::SET_COOKIE) {
            let Some(pair) = value.to_str().ok().and_then(|v| v.split(';').next()) else {
                continue;
            };
            if let Some((name, value)) = pair.split_once('=') {
                self.cookies
                    .insert(name.trim().to_owned(), value.trim().to_owned());
            }
        }
    }

    async fn send(&mut self, request: reqwest::RequestBuilder) -> (u16, Option<String>, String) {
        let response = request
            .header(reqwest::header::COOKIE, self.cookie_header())
            .send()
            .await
            .unwrap_or_else(|e| panic!("browser request failed: {e}"));
        self.keep_cookies(&response);
        let status = response.status().as_u16();
        let location = response
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        (status, location, response.text().await.unwrap_or_default())
    }

    /// Opens `authorization_url`, signs in as `user` and consents, and returns the redirect
    /// to the client's `redirect_uri` (with its `code`, `state` and `iss`) without following
    /// it. Panics when the server answers anything a login page flow would not.
    pub async fn authorize(&mut self, authorization_url: &str, user: &str) -> String {
        // A pushed request's URL names no redirect_uri: then the first `/callback` is it.
        let redirect_uri = query_param(authorization_url, "redirect_uri").unwrap_or_default();
        let reached = |next: &str| match redirect_uri.as_str() {
            "" => reqwest::Url::parse(next).is_ok_and(|u| u.path() == "/callback"),
            uri => next.starts_with(uri),
        };
        let mut url = authorization_url.to_owned();
        let mut body = None::<Vec<(&str, String)>>;
        for _ in 0..20 {
            let request = match body.take() {
                Some(form) => self
                    .http
                    .post(&url)
                    .header(
                        reqwest::header::CONTENT_TYPE,
                        "application/x-www-form-urlencoded",
                    )
                    .body(form_body(&form)),
                None => self.http.get(&url),
            };
            let (status, location, page) = self.send(request).await;
            if let Some(location) = location {
                let next = reqwest::Url::parse(&url)
                    .and_then(|base| base.join(&location))
                    .unwrap_or_else(|e| panic!("bad redirect {location:?}: {e}"))
                    .to_string();
                if reached(&next) {
                    return next;
                }
                url = next;
                continue;
            }
            assert_eq!(
                status, 200,
                "the login page {url} answered {status}: {page}"
            );
            body = Some(if page.contains(r#"name="prompt" value="login""#) {
                vec![
                    ("prompt", "login".to_owned()),
                    ("login", user.to_owned()),
                    ("password", "any".to_owned()),
                ]
            } else if page.contains(r#"name="prompt" value="consent""#) {
                vec![("prompt", "consent".to_owned())]
            } else {
                panic!("neither a login nor a consent page at {url}: {page}")
            });
        }
        panic!("the login did not reach the callback within 20 steps (last {url})")
    }

    /// A plain GET (the loopback callback): status and body.
    pub async fn get(&mut self, url: &str) -> (u16, String) {
        let request = self.http.get(url);
        let (status, _, body) = self.send(request).await;
        (status, body)
    }
}

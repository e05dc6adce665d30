//! The MCP Registry API v0.1 (SPEC §17): the list of configured registries, search with
//! cursor paging, one server version, and what a registry status allows.
//!
//! `GET /v0.1/servers?search=&limit=&cursor=&version=latest` and
//! `GET /v0.1/servers/{name}/versions/{version|latest}` answer `{"server": {...}, "_meta":
//! {...}}` (a list: `{"servers": [...], "metadata": {"nextCursor": ...}}`).

use std::time::Duration;

use serde_json::Value;

use crate::MarketError;

/// The official registry, present by default and removable.
pub const OFFICIAL_NAME: &str = "official";
pub const OFFICIAL_URL: &str = "https://registry.modelcontextprotocol.io";
/// Where the registry writes its status of a server version.
const OFFICIAL_META: &str = "io.modelcontextprotocol.registry/official";
/// Pages followed for one search at most (a registry that never stops paging ends here).
const MAX_PAGES: usize = 20;
/// Servers asked for per page.
const PAGE_LIMIT: usize = 50;
/// Longest registry name.
const MAX_NAME: usize = 32;

/// One configured registry.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Registry {
    pub name: String,
    pub url: String,
}

/// The configured registries, in the order they are asked.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Registries {
    pub registries: Vec<Registry>,
}

impl Default for Registries {
    fn default() -> Self {
        Self {
            registries: vec![Registry {
                name: OFFICIAL_NAME.to_owned(),
                url: OFFICIAL_URL.to_owned(),
            }],
        }
    }
}

impl Registries {
    /// `TUTTI_REGISTRIES=name=url,...`: the whole list (empty: no registry at all).
    pub fn from_env_value(value: &str) -> Result<Self, MarketError> {
        let mut list = Self {
            registries: Vec::new(),
        };
        for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let Some((name, url)) = item.split_once('=') else {
                return Err(MarketError::Registries(format!(
                    "TUTTI_REGISTRIES: {item:?} is not name=url; write TUTTI_REGISTRIES=name=https://host,..."
                )));
            };
            list.add(name.trim(), url.trim())
                .map_err(|e| MarketError::Registries(format!("TUTTI_REGISTRIES: {e}")))?;
        }
        Ok(list)
    }

    /// Adds a registry at the end. Refuses a taken name and a URL that is not https (or http
    /// to a loopback address).
    pub fn add(&mut self, name: &str, url: &str) -> Result<(), MarketError> {
        check_name(name)?;
        let url = check_url(url)?;
        if self.find(name).is_some() {
            return Err(MarketError::Registries(format!(
                "a registry named {name:?} exists already; remove it first with `tutti registry remove {name}`"
            )));
        }
        self.registries.push(Registry {
            name: name.to_owned(),
            url,
        });
        Ok(())
    }

    pub fn remove(&mut self, name: &str) -> Result<(), MarketError> {
        let before = self.registries.len();
        self.registries.retain(|r| r.name != name);
        if self.registries.len() == before {
            return Err(unknown(name));
        }
        Ok(())
    }

    pub fn find(&self, name: &str) -> Option<&Registry> {
        self.registries.iter().find(|r| r.name == name)
    }

    /// The registries to ask: the one named, or all of them.
    pub fn select(&self, name: Option<&str>) -> Result<Vec<Registry>, MarketError> {
        let chosen: Vec<Registry> = match name {
            Some(n) => vec![self.find(n).cloned().ok_or_else(|| unknown(n))?],
            None => self.registries.clone(),
        };
        if chosen.is_empty() {
            return Err(MarketError::Registries(
                "no registry is configured; add one with `tutti registry add NAME URL`".into(),
            ));
        }
        Ok(chosen)
    }

    /// The names, for messages.
    pub fn names(list: &[Registry]) -> String {
        list.iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn unknown(name: &str) -> MarketError {
    MarketError::Registries(format!(
        "no registry named {name:?}; see `tutti registry list`"
    ))
}

fn check_name(name: &str) -> Result<(), MarketError> {
    let ok = matches!(name.bytes().next(), Some(b'a'..=b'z'))
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(MarketError::Registries(format!(
            "registry name {name:?} must be lowercase letters, digits and '-', starting with a letter, at most {MAX_NAME} characters"
        )))
    }
}

/// An `https://` URL, or `http://` to a loopback address; returned without a trailing `/`.
pub fn check_url(raw: &str) -> Result<String, MarketError> {
    let refuse = || {
        MarketError::Registries(format!(
            "registry URL must be https:// (or http:// to 127.0.0.1, [::1] or localhost), got {raw:?}"
        ))
    };
    let url = url::Url::parse(raw).map_err(|_| refuse())?;
    if !secure(&url)
        || !url.username().is_empty()
        || url.password().is_some()
        || url.query().is_some()
    {
        return Err(refuse());
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

/// `https://`, or `http://` to a loopback address: the rule for a registry and for every
/// redirect it answers with.
fn secure(url: &url::Url) -> bool {
    let loopback = match url.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => return false,
    };
    url.scheme() == "https" || (url.scheme() == "http" && loopback)
}

/// Follows at most 3 redirects, each to a URL the registry rule allows (a registry over
/// https is never read over plain http off this machine).
fn redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        if attempt.previous().len() >= 3 {
            attempt.error("more than 3 redirects")
        } else if secure(attempt.url()) {
            attempt.follow()
        } else {
            let to = attempt.url().to_string();
            attempt.error(format!("a redirect to {to}, which is not https://"))
        }
    })
}

/// A registry's status of a server version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    Active,
    Deprecated,
    /// `deleted` or anything else the registry may say.
    Other(String),
}

/// One server version as a registry answers it.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The `server.json` document.
    pub server: Value,
    /// The registry's `_meta`.
    pub meta: Value,
    /// The registry that answered.
    pub registry: String,
}

impl Entry {
    fn from_answer(answer: Value, registry: &Registry) -> Result<Self, String> {
        let Value::Object(mut map) = answer else {
            return Err("a server entry that is not an object".into());
        };
        let server = map.remove("server").unwrap_or(Value::Null);
        if !server.is_object() || server["name"].as_str().is_none() {
            return Err("a server entry without server.name".into());
        }
        Ok(Self {
            server,
            meta: map.remove("_meta").unwrap_or(Value::Null),
            registry: registry.name.clone(),
        })
    }

    pub fn name(&self) -> &str {
        self.server["name"].as_str().unwrap_or_default()
    }

    pub fn version(&self) -> &str {
        self.server["version"].as_str().unwrap_or_default()
    }

    /// The registry's status (`_meta`, else the document's own `status`; absent: active).
    pub fn status(&self) -> Status {
        let status = self.meta[OFFICIAL_META]["status"]
            .as_str()
            .or_else(|| self.server["status"].as_str())
            .unwrap_or("active");
        match status {
            "active" => Status::Active,
            "deprecated" => Status::Deprecated,
            other => Status::Other(other.to_owned()),
        }
    }

    /// What its status allows: `Ok(None)` active, `Ok(Some(warning))` deprecated (installable
    /// once the person confirms), an error for every other status.
    pub fn installable(&self) -> Result<Option<String>, MarketError> {
        match self.status() {
            Status::Active => Ok(None),
            Status::Deprecated => Ok(Some(format!(
                "warning: {} {} is deprecated in registry {}; install it only if you mean to (--yes)",
                self.name(),
                self.version(),
                self.registry
            ))),
            Status::Other(status) => Err(MarketError::NotInstallable {
                name: self.name().to_owned(),
                version: self.version().to_owned(),
                status,
            }),
        }
    }
}

/// The HTTP side of the registry API.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
}

impl Client {
    pub fn new() -> Result<Self, MarketError> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .connect_timeout(Duration::from_secs(10))
            .redirect(redirects())
            .user_agent(concat!("tutti/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| MarketError::Registries(format!("cannot start an HTTP client: {e}")))?;
        Ok(Self { http })
    }

    /// The latest version of every server matching `words`, following the cursor up to
    /// `max` servers.
    pub async fn search(
        &self,
        registry: &Registry,
        words: &str,
        max: usize,
    ) -> Result<Vec<Entry>, MarketError> {
        let mut found = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let mut url = endpoint(registry, &["v0.1", "servers"])?;
            {
                let mut q = url.query_pairs_mut();
                q.append_pair("search", words);
                q.append_pair("limit", &PAGE_LIMIT.to_string());
                q.append_pair("version", "latest");
                if let Some(c) = &cursor {
                    q.append_pair("cursor", c);
                }
            }
            let page = self.get(registry, url).await?.ok_or_else(|| {
                answer(
                    registry,
                    "404 Not Found to a search (is this an MCP registry?)",
                )
            })?;
            let servers = page["servers"]
                .as_array()
                .ok_or_else(|| answer(registry, "a search without a \"servers\" list"))?;
            for item in servers {
                let entry =
                    Entry::from_answer(item.clone(), registry).map_err(|e| answer(registry, &e))?;
                found.push(entry);
            }
            cursor = page["metadata"]["nextCursor"]
                .as_str()
                .filter(|c| !c.is_empty())
                .map(str::to_owned);
            if cursor.is_none() || found.len() >= max {
                break;
            }
        }
        found.truncate(max);
        Ok(found)
    }

    /// One version of a server (`None`: the latest). `Ok(None)` when the registry has no such
    /// server or version.
    pub async fn version(
        &self,
        registry: &Registry,
        name: &str,
        version: Option<&str>,
    ) -> Result<Option<Entry>, MarketError> {
        let url = endpoint(
            registry,
            &[
                "v0.1",
                "servers",
                name,
                "versions",
                version.unwrap_or("latest"),
            ],
        )?;
        match self.get(registry, url).await? {
            None => Ok(None),
            Some(body) => Entry::from_answer(body, registry)
                .map(Some)
                .map_err(|e| answer(registry, &e)),
        }
    }

    /// Whether a remote MCP server asks for an OAuth login: it answers an unauthenticated
    /// `initialize` with 401 and names protected-resource metadata (`WWW-Authenticate:
    /// resource_metadata=…`, or the RFC 9728 well-known document exists). Unreachable: no.
    pub async fn wants_oauth(&self, url: &str) -> bool {
        let init = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "tutti", "version": env!("CARGO_PKG_VERSION")}}});
        let Ok(resp) = self
            .http
            .post(url)
            .header("accept", "application/json, text/event-stream")
            .json(&init)
            .send()
            .await
        else {
            return false;
        };
        if resp.status() != reqwest::StatusCode::UNAUTHORIZED {
            return false;
        }
        let named = resp
            .headers()
            .get_all("www-authenticate")
            .iter()
            .any(|v| v.to_str().is_ok_and(|v| v.contains("resource_metadata")));
        if named {
            return true;
        }
        let Ok(mut well_known) = url::Url::parse(url) else {
            return false;
        };
        let path = well_known.path().trim_end_matches('/').to_owned();
        well_known.set_path(&format!("/.well-known/oauth-protected-resource{path}"));
        well_known.set_query(None);
        matches!(self.http.get(well_known).send().await, Ok(r) if r.status().is_success())
    }

    /// The latest version a package index publishes: npm's `dist-tags.latest` (from
    /// `npm_config_registry`, else the public registry), PyPI's JSON API `info.version`.
    /// `Ok(None)` when the index does not know the package.
    pub async fn package_latest(
        &self,
        kind: &str,
        name: &str,
    ) -> Result<Option<String>, MarketError> {
        let npm = std::env::var("npm_config_registry")
            .unwrap_or_else(|_| "https://registry.npmjs.org/".to_owned());
        self.package_latest_at(kind, name, &npm, "https://pypi.org/pypi/")
            .await
    }

    /// [`Self::package_latest`] against these indexes (npm registry, PyPI JSON API base).
    async fn package_latest_at(
        &self,
        kind: &str,
        name: &str,
        npm: &str,
        pypi: &str,
    ) -> Result<Option<String>, MarketError> {
        let (base, segments, pointer) = match kind {
            "npm" => (npm, vec![name.to_owned()], "/dist-tags/latest"),
            "pypi" => (
                pypi,
                vec![name.to_owned(), "json".to_owned()],
                "/info/version",
            ),
            other => {
                return Err(MarketError::Source(format!(
                    "a {other} source has no index to ask for newer versions; install the version you want by name"
                )));
            }
        };
        let index = Registry {
            name: kind.to_owned(),
            url: base.to_owned(),
        };
        let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
        let url = endpoint(&index, &segments)?;
        Ok(self.get(&index, url).await?.and_then(|v| {
            v.pointer(pointer)
                .and_then(Value::as_str)
                .map(str::to_owned)
        }))
    }

    /// `GET` a JSON answer: `Ok(None)` on 404.
    async fn get(&self, registry: &Registry, url: url::Url) -> Result<Option<Value>, MarketError> {
        let unreachable = |reason: String| MarketError::RegistryUnreachable {
            url: registry.url.clone(),
            reason,
        };
        let resp = self
            .http
            .get(url)
            .header("accept", "application/json")
            .send()
            .await
            .map_err(|e| unreachable(one_line_error(&e)))?;
        let status = resp.status();
        if status == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !status.is_success() {
            return Err(unreachable(format!("HTTP {status}")));
        }
        let body = resp
            .json::<Value>()
            .await
            .map_err(|_| answer(registry, "something that is not JSON"))?;
        Ok(Some(body))
    }
}

/// Finds `name` (at `version`, else the latest) in the registries, in order.
pub async fn resolve(
    client: &Client,
    registries: &[Registry],
    name: &str,
    version: Option<&str>,
) -> Result<Entry, MarketError> {
    for registry in registries {
        if let Some(entry) = client.version(registry, name, version).await? {
            return Ok(entry);
        }
        if let Some(v) = version
            && client.version(registry, name, None).await?.is_some()
        {
            return Err(MarketError::NoSuchVersion {
                name: name.to_owned(),
                version: v.to_owned(),
                registry: registry.name.clone(),
            });
        }
    }
    Err(MarketError::NoSuchServer {
        name: name.to_owned(),
        registries: Registries::names(registries),
    })
}

fn endpoint(registry: &Registry, segments: &[&str]) -> Result<url::Url, MarketError> {
    let mut url = url::Url::parse(&registry.url).map_err(|_| {
        MarketError::Registries(format!("registry URL {:?} is not a URL", registry.url))
    })?;
    url.path_segments_mut()
        .map_err(|()| {
            MarketError::Registries(format!(
                "registry URL {:?} cannot take a path",
                registry.url
            ))
        })?
        .pop_if_empty()
        .extend(segments);
    Ok(url)
}

fn answer(registry: &Registry, reason: &str) -> MarketError {
    MarketError::RegistryAnswer {
        url: registry.url.clone(),
        reason: reason.to_owned(),
    }
}

/// A reqwest error with its causes, on one line (the connect error is in the chain).
fn one_line_error(e: &reqwest::Error) -> String {
    let mut text = if e.is_timeout() {
        "timed out".to_owned()
    } else if e.is_connect() {
        "cannot connect".to_owned()
    } else {
        "request failed".to_owned()
    };
    let mut source = std::error::Error::source(e);
    if let Some(s) = source {
        text.push_str(&format!(" ({s}"));
        source = s.source();
        while let Some(s) = source {
            text.push_str(&format!(": {s}"));
            source = s.source();
        }
        text.push(')');
    }
    text.replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_https_or_loopback_http() {
        for ok in [
            "https://registry.modelcontextprotocol.io",
            "https://r.example/",
            "http://127.0.0.1:8080",
            "http://localhost:9",
            "http://[::1]:5/base/",
        ] {
            assert!(check_url(ok).is_ok(), "{ok}");
        }
        assert_eq!(
            check_url("https://r.example/").unwrap_or_default(),
            "https://r.example"
        );
        for bad in [
            "http://r.example",
            "ftp://127.0.0.1",
            "file:///etc",
            "https://u:p@r.example",
            "r.example",
            "http://10.0.0.1",
        ] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
    }

    /// Serves `app` on a loopback port; the port.
    async fn serve(app: axum::Router) -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("bind: {e}"));
        let port = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("addr: {e}"))
            .port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        port
    }

    #[tokio::test]
    async fn the_latest_version_comes_from_npm_dist_tags_and_the_pypi_json_api() {
        use axum::routing::get;
        let npm_doc =
            || async { axum::Json(serde_json::json!({"dist-tags": {"latest": "2.0.0"}})) };
        let pypi_doc = || async { axum::Json(serde_json::json!({"info": {"version": "3.1"}})) };
        let app = axum::Router::new()
            .route("/npm/@scope%2Fpkg", get(npm_doc))
            .route("/pypi/mcp-x/json", get(pypi_doc));
        let port = serve(app).await;
        let npm = format!("http://127.0.0.1:{port}/npm/");
        let pypi = format!("http://127.0.0.1:{port}/pypi/");
        let client = Client::new().unwrap_or_else(|e| panic!("{e}"));
        let latest =
            async |kind: &str, name: &str| client.package_latest_at(kind, name, &npm, &pypi).await;
        let got = latest("npm", "@scope/pkg")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got.as_deref(), Some("2.0.0"));
        let got = latest("pypi", "mcp-x")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got.as_deref(), Some("3.1"));
        let unknown = latest("npm", "nope")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(unknown, None);
        let oci = latest("oci", "x")
            .await
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(oci.contains("no index to ask"), "{oci:?}");
    }

    #[tokio::test]
    async fn a_redirect_off_https_is_not_followed() {
        let app = axum::Router::new().fallback(|| async {
            axum::response::Redirect::temporary("http://registry.example/v0.1/servers")
        });
        let port = serve(app).await;
        let registry = Registry {
            name: "r".into(),
            url: format!("http://127.0.0.1:{port}"),
        };
        let client = Client::new().unwrap_or_else(|e| panic!("{e}"));
        let err = client
            .search(&registry, "x", 10)
            .await
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.starts_with(&format!("registry {} is unreachable", registry.url))
                && err.contains(
                    "a redirect to http://registry.example/v0.1/servers, which is not https://"
                ),
            "{err}"
        );
    }

    #[test]
    fn the_list_adds_removes_and_reads_the_environment() {
        let mut list = Registries::default();
        assert_eq!(list.registries[0].url, OFFICIAL_URL);
        list.add("mine", "http://127.0.0.1:1/")
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(list.add("mine", "https://x.example").is_err());
        assert!(list.add("Bad_Name", "https://x.example").is_err());
        list.remove(OFFICIAL_NAME).unwrap_or_else(|e| panic!("{e}"));
        assert!(list.remove(OFFICIAL_NAME).is_err());
        assert_eq!(
            list.registries,
            vec![Registry {
                name: "mine".into(),
                url: "http://127.0.0.1:1".into()
            }]
        );
        let env = Registries::from_env_value("a=https://a.example, b=http://localhost:3")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(Registries::names(&env.registries), "a, b");
        assert!(Registries::from_env_value("a").is_err());
        assert!(Registries::from_env_value("").is_ok_and(|l| l.select(None).is_err()));
    }

    #[test]
    fn statuses() {
        let reg = Registry {
            name: "r".into(),
            url: "https://r.example".into(),
        };
        let entry = |status: &str| {
            Entry::from_answer(
                serde_json::json!({"server": {"name": "a/b", "version": "1"},
                    "_meta": {OFFICIAL_META: {"status": status}}}),
                &reg,
            )
            .unwrap_or_else(|e| panic!("{e}"))
        };
        assert!(matches!(entry("active").installable(), Ok(None)));
        assert!(
            matches!(entry("deprecated").installable(), Ok(Some(w)) if w.contains("deprecated"))
        );
        let deleted = entry("deleted")
            .installable()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(deleted.contains("is deleted"), "{deleted}");
        assert!(Entry::from_answer(serde_json::json!({"server": {}}), &reg).is_err());
    }

    #[test]
    fn names_with_slashes_are_one_path_segment() {
        let reg = Registry {
            name: "r".into(),
            url: "http://127.0.0.1:9/base".into(),
        };
        let url = endpoint(
            &reg,
            &["v0.1", "servers", "io.github.a/b", "versions", "latest"],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            url.as_str(),
            "http://127.0.0.1:9/base/v0.1/servers/io.github.a%2Fb/versions/latest"
        );
    }
}

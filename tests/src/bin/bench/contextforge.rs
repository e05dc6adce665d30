//! IBM ContextForge (`mcp-contextforge-gateway`, Python) as a peer of the echo rows, started
//! by the bench, offline: its gateway (`mcpgateway`, one uvicorn process) on its SQLite
//! default in a fresh directory, in front of the fixture upstream through its own
//! stdio → Streamable HTTP bridge (`python -m mcpgateway.translate`). The bridge is registered
//! as a gateway, its tools are bundled into a virtual server, and the bench calls that server's
//! MCP endpoint with a bearer token signed by the gateway's secret (random per run, passed to
//! its processes only). Every address is on loopback.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use super::systems::Proc;

/// The pinned release (scripts/install-test-tools installs it into `.tools/venv-contextforge`):
/// the newest one that runs on Python 3.11; 1.1.0 needs Python ≥ 3.12.
pub const CONTEXTFORGE: &str = "ContextForge 1.0.7.post20260921";

/// The fixture's echo tool as the gateway names it (`<gateway>-<tool>`).
pub const TOOL: &str = "echo-echo";

/// The platform administrator the gateway creates at its first start (the token's subject).
const ADMIN: &str = "admin@example.com";

/// A fresh database is migrated at the first start: 35 s on a loaded 2-core machine.
const START_WITHIN: Duration = Duration::from_secs(180);

/// The gateway and its bridge, with the virtual server's MCP URL, a token and a session.
pub struct ContextForge {
    pub gateway: Proc,
    pub bridge: Proc,
    pub url: String,
    pub token: String,
    pub session: String,
    _dir: tempfile::TempDir,
}

impl ContextForge {
    /// Its processes (the roots of its process tree).
    pub fn pids(&self) -> Vec<u32> {
        vec![self.gateway.pid(), self.bridge.pid()]
    }
}

/// The venv's interpreter, if installed.
fn python() -> Result<PathBuf> {
    let python = tutti_tests::tools_dir().join("venv-contextforge/bin/python");
    if !python.is_file() {
        bail!("{CONTEXTFORGE} missing (scripts/install-test-tools)");
    }
    Ok(python)
}

/// 32 random bytes from the kernel, hex-encoded (the gateway's secrets).
fn secret() -> Result<String> {
    let mut bytes = [0u8; 32];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The settings both processes read from their environment: the required secrets, the
/// database in `dir`, and three changes from the defaults without which the bench cannot run:
/// loopback upstreams are allowed (SSRF protection refuses them by default), the rate limit
/// is off (100 calls a minute by default) and sessions are stateful (the default opens a new
/// upstream session for every call; a client session keeps one).
fn settings(dir: &Path) -> Result<Vec<(&'static str, String)>> {
    Ok(vec![
        ("JWT_SECRET_KEY", secret()?),
        ("AUTH_ENCRYPTION_SECRET", secret()?),
        ("PLATFORM_ADMIN_EMAIL", ADMIN.to_owned()),
        ("PLATFORM_ADMIN_PASSWORD", format!("Bench-{}", secret()?)),
        (
            "DATABASE_URL",
            format!("sqlite:///{}", dir.join("mcp.db").display()),
        ),
        ("SSRF_ALLOW_LOCALHOST", "true".to_owned()),
        ("RATE_LIMITING_ENABLED", "false".to_owned()),
        ("USE_STATEFUL_SESSIONS", "true".to_owned()),
    ])
}

/// Starts the bridge and the gateway, registers the bridge and opens a client session.
pub async fn start(fixture: PathBuf, ports: (u16, u16)) -> Result<ContextForge> {
    let python = python()?;
    let dir = tempfile::tempdir()?;
    let env = settings(dir.path())?;
    let (bridge_port, port) = ports;
    let fixture = fixture.display().to_string();
    if fixture.contains(char::is_whitespace) {
        bail!("the fixture's path has a space; the bridge splits its command at spaces");
    }
    let spawn = |args: &[&str], log: &str| -> Result<Proc> {
        let log = std::fs::File::create(dir.path().join(log))?;
        let child = Command::new(&python)
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting ContextForge")?;
        Ok(Proc(child))
    };
    let bridge = spawn(
        &[
            "-m",
            "mcpgateway.translate",
            "--stdio",
            &format!("{fixture} --tools echo,big"),
            "--expose-streamable-http",
            "--port",
            &bridge_port.to_string(),
            "--logLevel",
            "error",
        ],
        "bridge.log",
    )?;
    // The module of its `mcpgateway` command (`python -m mcpgateway` takes no options).
    let mut gateway = spawn(
        &[
            "-m",
            "mcpgateway.cli",
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
        ],
        "gateway.log",
    )?;
    let base = format!("http://127.0.0.1:{port}");
    let ready = async {
        let token = token(&python, &env).await?;
        let http = reqwest::Client::builder().no_proxy().build()?;
        wait_healthy(&http, &base, &mut gateway).await?;
        let server = register(&http, &base, &token, bridge_port).await?;
        let url = format!("{base}/servers/{server}/mcp");
        let session = open_session(&http, &url, &token).await?;
        Ok::<_, anyhow::Error>((url, token, session))
    };
    let (url, token, session) = ready.await.map_err(|e| {
        let tail = tutti_tests::file_tail(&dir.path().join("gateway.log"), 5);
        e.context(format!(
            "{CONTEXTFORGE}; the gateway's last log lines:\n{tail}"
        ))
    })?;
    Ok(ContextForge {
        gateway,
        bridge,
        url,
        token,
        session,
        _dir: dir,
    })
}

/// A token for the administrator from the gateway's own tool, signed with its secret.
async fn token(python: &Path, env: &[(&'static str, String)]) -> Result<String> {
    let out = tokio::process::Command::new(python)
        .args(["-m", "mcpgateway.utils.create_jwt_token"])
        .args(["--username", ADMIN, "--exp", "1440"])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .await
        .context("running mcpgateway.utils.create_jwt_token")?;
    let text = String::from_utf8_lossy(&out.stdout);
    match text.lines().last().map(str::trim) {
        Some(t) if out.status.success() && t.split('.').count() == 3 => Ok(t.to_owned()),
        _ => bail!(
            "mcpgateway.utils.create_jwt_token printed no token ({})",
            out.status
        ),
    }
}

/// Waits until `/health` answers 200 (the gateway migrates its fresh database first).
async fn wait_healthy(http: &reqwest::Client, base: &str, gateway: &mut Proc) -> Result<()> {
    let deadline = Instant::now() + START_WITHIN;
    loop {
        if let Some(status) = gateway.0.try_wait()? {
            bail!("the gateway exited while starting ({status})");
        }
        let r = http.get(format!("{base}/health")).send().await;
        if r.is_ok_and(|r| r.status().is_success()) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the gateway did not answer /health within {START_WITHIN:?}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Registers the bridge as gateway `echo` (retried while the bridge starts), then bundles its
/// tools into a virtual server; returns the server's id.
async fn register(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    bridge_port: u16,
) -> Result<String> {
    let upstream = json!({"name": "echo", "url": format!("http://127.0.0.1:{bridge_port}/mcp"),
        "transport": "STREAMABLEHTTP"});
    let deadline = Instant::now() + Duration::from_secs(30);
    let gateway = loop {
        match post(http, &format!("{base}/gateways"), token, &upstream).await {
            Ok(g) => break g,
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e.context("registering the bridge")),
        }
    };
    let tools: Value = http
        .get(format!("{base}/tools"))
        .bearer_auth(token)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let tools = tools.as_array().context("GET /tools: not a list")?;
    if !tools.iter().any(|t| t["name"] == TOOL) {
        bail!("the gateway does not list {TOOL} after registering the bridge: {gateway}");
    }
    let ids: Vec<&Value> = tools.iter().map(|t| &t["id"]).collect();
    let server = json!({"server": {"name": "bench", "associated_tools": ids}});
    let server = post(http, &format!("{base}/servers"), token, &server).await?;
    server["id"]
        .as_str()
        .map(str::to_owned)
        .context("POST /servers: no id")
}

/// A POST of the gateway's REST API; its JSON answer (a non-2xx answer is an error).
async fn post(http: &reqwest::Client, url: &str, token: &str, body: &Value) -> Result<Value> {
    let r = http.post(url).bearer_auth(token).json(body).send().await?;
    let status = r.status();
    let text = r.text().await?;
    if !status.is_success() {
        bail!("POST {url}: HTTP {status}: {text}");
    }
    Ok(serde_json::from_str(&text)?)
}

/// `initialize` and `notifications/initialized` on the virtual server; the session id.
async fn open_session(http: &reqwest::Client, url: &str, token: &str) -> Result<String> {
    let send = |body: Value, session: Option<&str>| {
        let mut r = http
            .post(url)
            .bearer_auth(token)
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2025-06-18")
            .json(&body);
        if let Some(s) = session {
            r = r.header("mcp-session-id", s);
        }
        r.send()
    };
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},
        "clientInfo":{"name":"bench","version":"1"}}});
    let r = send(init, None).await?.error_for_status()?;
    let session = r
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .context("the virtual server issued no session id")?;
    r.text().await?;
    let initialized = json!({"jsonrpc":"2.0","method":"notifications/initialized"});
    send(initialized, Some(&session))
        .await?
        .error_for_status()?;
    Ok(session)
}

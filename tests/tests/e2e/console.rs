//! `tutti console` (SPEC §13), end to end over the real binaries.
//!
//! - In a real browser (Debian's headless `chromium` through `chromedriver`, driven with
//!   fantoccini over WebDriver): login, the demo cards `ready`, a connector's tools with risk,
//!   "test connection", install from a folder seeing the launch line, connect a secret the page
//!   never shows back, revoke a session (its token then gets 401), a tools/call showing in
//!   Activity within 1 s, uninstall. Screenshots of each view go to
//!   `target/console-screenshots/`.
//! - Without a browser (plain HTTP): no cookie → refused; the login URL works once; a foreign
//!   Host/Origin → 403; a change without its CSRF token → refused; no body carries a secret
//!   value or a session token; an uninstall from a page that saw an older release is refused
//!   as stale; bad input (missing folder, invalid manifest, a stopped kernel) says why and
//!   changes nothing; Ctrl-C stops the console.

mod confirmations;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tutti_tests::fixture::RUG_PULL_DESCRIPTION;
use tutti_tests::{
    Mcp, Runtime, RuntimeOptions, fixture_connector, free_port, repo_root, require_python_venv,
};

#[cfg(unix)]
mod market;

const READY: Duration = Duration::from_secs(30);
/// A test-only secret value (never a real credential).
const SECRET: &str = "console-secret-value-93";

// ---------------------------------------------------------------------------------------
// the console process

/// A running `tutti console --no-open` on a runtime's state dir.
struct Console {
    child: Child,
    /// `http://127.0.0.1:<port>`
    base: String,
    /// The one-time login URL it printed.
    login: String,
}

impl Console {
    fn start(rt: &Runtime) -> Console {
        let mut child = rt
            .tutti_cmd(&["console", "--no-open"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start `tutti console`: {e}"));
        let stdout = child
            .stdout
            .take()
            .unwrap_or_else(|| panic!("no stdout pipe"));
        let mut lines = BufReader::new(stdout).lines();
        let login = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some(url) = line.strip_prefix("Console: ") {
                        break url.trim().to_owned();
                    }
                }
                other => panic!("`tutti console` printed no login URL (got {other:?})"),
            }
        };
        // Keep draining stdout so the console never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        let base = login.split("/login").next().unwrap_or_default().to_owned();
        assert!(base.starts_with("http://127.0.0.1:"), "login URL: {login}");
        Console { child, base, login }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Sends SIGINT (Ctrl-C) and returns the exit status and stderr.
    #[cfg(unix)]
    fn interrupt(mut self) -> (Option<std::process::ExitStatus>, String) {
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGINT);
        let status = wait_exit(&mut self.child, Duration::from_secs(10));
        (status, self.stderr())
    }

    fn stderr(&mut self) -> String {
        let mut text = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut text);
        }
        text
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_exit(child: &mut Child, timeout: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// A release folder whose upstream is the fixture server, declaring one secret.
fn fixture_release(rt: &mut Runtime, key: &str, version: &str) -> PathBuf {
    let mut manifest = rt.private_fixture_connector(key, &["--tools", "echo,env"]);
    manifest["version"] = json!(version);
    manifest["mcp"]["secrets"] = json!(["FIXTURE_TOKEN"]);
    rt.write_release(&manifest, &[])
}

// ---------------------------------------------------------------------------------------
// plain HTTP

/// A cookie-less HTTP client that never follows redirects.
fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap_or_else(|e| panic!("http client: {e}"))
}

/// Signs in with the login URL and returns the `Cookie` header value.
async fn sign_in(c: &Console) -> String {
    let r = http()
        .get(&c.login)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET login: {e}"));
    assert_eq!(r.status().as_u16(), 303, "the login redirects to the page");
    let set = r
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert!(set.contains("HttpOnly"), "{set}");
    assert!(set.contains("SameSite=Strict"), "{set}");
    set.split(';').next().unwrap_or_default().to_owned()
}

/// `(status, body)` of a GET with the cookie.
async fn get(c: &Console, cookie: &str, path: &str) -> (u16, String) {
    let r = http()
        .get(c.url(path))
        .header("Cookie", cookie)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let status = r.status().as_u16();
    assert!(
        r.headers().get("access-control-allow-origin").is_none(),
        "no CORS header is ever sent"
    );
    (status, r.text().await.unwrap_or_default())
}

fn form_encode(fields: &[(&str, &str)]) -> String {
    let enc = |s: &str| {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    fields
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// `(status, body)` of a form POST with the cookie.
async fn post(c: &Console, cookie: &str, path: &str, fields: &[(&str, &str)]) -> (u16, String) {
    let r = http()
        .post(c.url(path))
        .header("Cookie", cookie)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(form_encode(fields))
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {path}: {e}"));
    (r.status().as_u16(), r.text().await.unwrap_or_default())
}

/// The value of the first `<input name=NAME value=…>` of a page.
fn input_value(html: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    html.split_once(&marker)
        .and_then(|(_, rest)| rest.split_once('"'))
        .map(|(v, _)| v.to_owned())
        .unwrap_or_else(|| panic!("no input {name} in the page:\n{html}"))
}

/// The unescaped text of a page is the same as its HTML for the strings we scan for.
fn assert_clean(body: &str, secrets: &[&str], what: &str) {
    for s in secrets {
        assert!(!body.contains(s), "{what} shows a secret value or a token");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_refuses_strangers_and_forms_without_their_token() {
    let rt = Runtime::start(RuntimeOptions {
        demo: true,
        ..Default::default()
    });
    rt.wait_status("hello", "ready", READY);
    let c = Console::start(&rt);
    assert_strangers_refused(&c, &rt).await;
    // The login URL works once.
    let cookie = sign_in(&c).await;
    let again = http()
        .get(&c.login)
        .send()
        .await
        .map(|r| r.status().as_u16());
    assert_eq!(again.ok(), Some(401), "a used login URL is refused");
    let (status, page) = get(&c, &cookie, "/").await;
    assert_eq!(status, 200);
    assert!(page.contains("data-key=\"hello\""), "{page}");
    assert_foreign_and_forged_refused(&c, &cookie, &rt).await;
    // The page's headers: CSP without inline script or foreign origins.
    let r = http()
        .get(c.url("/"))
        .header("Cookie", &cookie)
        .send()
        .await
        .ok();
    let csp = r
        .as_ref()
        .and_then(|r| r.headers().get("content-security-policy"))
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert!(csp.contains("default-src 'none'"), "{csp}");
    #[cfg(unix)]
    {
        let (status, _) = c.interrupt();
        assert!(
            status.is_some_and(|s| s.success()),
            "Ctrl-C stops the console: {status:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_never_shows_a_secret_or_a_token_and_refuses_a_stale_uninstall() {
    let mut rt = Runtime::start(RuntimeOptions {
        demo: true,
        ..Default::default()
    });
    let v1 = fixture_release(&mut rt, "fx", "1.0.0");
    let v2 = fixture_release(&mut rt, "fx", "2.0.0");
    let c = Console::start(&rt);
    let cookie = sign_in(&c).await;
    // Install v1 from the page: plan (with the launch line), then confirm.
    install_from_page(&c, &cookie, &v1).await;
    rt.wait_status("fx", "auth_required", READY);
    // Connect the secret from the page.
    let (_, form) = get(&c, &cookie, "/connectors/fx/connect").await;
    assert!(form.contains("type=\"password\""), "{form}");
    let (status, body) = post(
        &c,
        &cookie,
        "/connectors/fx/connect",
        &[
            ("csrf", &input_value(&form, "csrf")),
            ("expected", &input_value(&form, "expected")),
            ("secret.FIXTURE_TOKEN", SECRET),
        ],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    rt.wait_status("fx", "ready", READY);
    let token = rt.issue_token("ws", "scan");
    // Page A opens the uninstall confirmation of v1 …
    let (_, page_a) = get(&c, &cookie, "/connectors/fx/uninstall").await;
    let revision = rt.status_json()["registryRevision"].as_u64().unwrap_or(0);
    assert!(revision > 0, "status --json shows the registry revision");
    // … page B upgrades fx to v2 …
    install_from_page(&c, &cookie, &v2).await;
    let upgraded = rt.status_json()["registryRevision"].as_u64().unwrap_or(0);
    assert!(
        upgraded > revision,
        "an upgrade raises the registry revision"
    );
    // … and page A's uninstall is refused as stale: nothing changes.
    let (status, body) = post(
        &c,
        &cookie,
        "/connectors/fx/uninstall",
        &[
            ("csrf", &input_value(&page_a, "csrf")),
            ("expected", &input_value(&page_a, "expected")),
        ],
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body.contains("changed since you opened this page; reload"),
        "{body}"
    );
    assert!(
        rt.connector_status("fx").is_some(),
        "a stale uninstall changed nothing"
    );
    // No page or stream shows the secret value or the session token.
    let bodies = every_view(&c, &cookie).await;
    for (what, body) in &bodies {
        assert_clean(body, &[SECRET, &token, &token[4..]], what);
    }
    assert!(
        bodies.iter().any(|(_, b)| b.contains("FIXTURE_TOKEN")),
        "the secret's name is shown"
    );
}

/// A rug pull (SPEC §12) held for review shows on the card and the
/// detail page as a line diff; an approval without the page's CSRF token is refused and
/// changes nothing; with it, the offer is committed and status no longer awaits review.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_shows_held_changes_and_approves_them_only_with_the_page_token() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let state = rt.root().join("rug-pulled").to_string_lossy().into_owned();
    let manifest = fixture_connector(
        "rp",
        &[
            "--tools",
            "echo,add",
            "--rug-pull-after-ms",
            "1500",
            "--rug-pull-state",
            &state,
        ],
    );
    let dir = rt
        .write_release(&manifest, &[])
        .to_string_lossy()
        .into_owned();
    rt.tutti_ok(&["connector", "install", &dir, "--yes"]);
    rt.wait_connector("rp", Duration::from_secs(30), "changes await review", |c| {
        c["changesAwaitReview"] == true && c["review"] == "added exfiltrate; changed echo"
    });
    let c = Console::start(&rt);
    let cookie = sign_in(&c).await;
    let (_, cards) = get(&c, &cookie, "/").await;
    assert!(cards.contains("changes await review"), "{cards}");
    assert!(cards.contains("added exfiltrate; changed echo"), "{cards}");
    let (status, detail) = get(&c, &cookie, "/connectors/rp").await;
    assert_eq!(status, 200, "{detail}");
    for want in [
        "added tool exfiltrate".to_owned(),
        "changed tool echo".to_owned(),
        "- Echoes the message back".to_owned(),
        format!("+ {RUG_PULL_DESCRIPTION}"),
    ] {
        assert!(
            detail.contains(&want),
            "the detail page shows {want:?}:\n{detail}"
        );
    }
    let (_, review) = get(&c, &cookie, "/connectors/rp/approve").await;
    let offered = input_value(&review, "offered");
    assert!(offered.starts_with("sha256:"), "{review}");
    // Without the page's CSRF token: refused, nothing changes.
    let (status, body) = post(
        &c,
        &cookie,
        "/connectors/rp/approve",
        &[("offered", &offered), ("confirm", "yes")],
    )
    .await;
    assert_eq!(status, 403, "{body}");
    let entry = rt.connector_status("rp").unwrap_or_default();
    assert_eq!(
        entry["changesAwaitReview"], true,
        "a refused approval changed nothing"
    );
    // With it: committed.
    let fields = [
        ("csrf", input_value(&review, "csrf")),
        ("offered", offered),
        ("confirm", "yes".to_owned()),
    ];
    let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (status, body) = post(&c, &cookie, "/connectors/rp/approve", &fields).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("approved rp"), "{body}");
    let entry = rt.connector_status("rp").unwrap_or_default();
    assert_ne!(entry["changesAwaitReview"], true, "{entry}");
    let (_, cards) = get(&c, &cookie, "/").await;
    assert!(!cards.contains("changes await review"), "{cards}");
}

/// Installs a release folder from the console: the plan (showing the launch line), then the
/// confirmation.
async fn install_from_page(c: &Console, cookie: &str, dir: &std::path::Path) {
    let csrf = csrf_of(c, cookie, "/install").await;
    let fields = [("csrf", csrf.as_str()), ("dir", &dir.to_string_lossy())];
    let (status, plan) = post(c, cookie, "/install/plan", &fields).await;
    assert_eq!(status, 200, "{plan}");
    assert!(
        plan.contains("tutti-fixture-server"),
        "the plan shows the launch line: {plan}"
    );
    let confirm = [
        ("csrf", input_value(&plan, "csrf")),
        ("dir", input_value(&plan, "dir")),
    ];
    let confirm: Vec<(&str, &str)> = confirm.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (status, done) = post(c, cookie, "/install", &confirm).await;
    assert_eq!(status, 200, "{done}");
}

/// The body of every view and of the activity stream, with what it is.
async fn every_view(c: &Console, cookie: &str) -> Vec<(&'static str, String)> {
    let mut bodies = Vec::new();
    for path in [
        "/",
        "/fragment/connectors",
        "/connectors/fx",
        "/connectors/fx/connect",
        "/connectors/fx/uninstall",
        "/sessions",
        "/activity",
        "/connectors/hello",
        "/install",
    ] {
        bodies.push((path, get(c, cookie, path).await.1));
    }
    let csrf = csrf_of(c, cookie, "/connectors/fx").await;
    let probed = post(c, cookie, "/connectors/fx/probe", &[("csrf", &csrf)]).await;
    bodies.push(("probe", probed.1));
    bodies.push(("activity events", sse_head(c, cookie).await));
    bodies
}

/// A CSRF token from a page that has forms.
async fn csrf_of(c: &Console, cookie: &str, path: &str) -> String {
    input_value(&get(c, cookie, path).await.1, "csrf")
}

/// The first events of the activity stream (whatever arrives within a second).
async fn sse_head(c: &Console, cookie: &str) -> String {
    let Ok(mut r) = http()
        .get(c.url("/activity/events"))
        .header("Cookie", cookie)
        .send()
        .await
    else {
        return String::new();
    };
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
    while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(deadline, r.chunk()).await {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(
        text.contains("event: audit"),
        "the activity stream sends audit events: {text}"
    );
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_bad_input_says_why_and_changes_nothing() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let c = Console::start(&rt);
    let cookie = sign_in(&c).await;
    let missing = rt.root().join("no-such-folder");
    let (status, body) = post(
        &c,
        &cookie,
        "/install/plan",
        &[
            ("csrf", &csrf_of(&c, &cookie, "/install").await),
            ("dir", &missing.to_string_lossy()),
        ],
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("is not a directory; give the path of a connector release"),
        "{body}"
    );
    assert_invalid_manifest_refused(&c, &cookie, &mut rt).await;
    // The kernel stops while the page is open.
    let install_csrf = csrf_of(&c, &cookie, "/install").await;
    let good = fixture_release(&mut rt, "late", "1.0.0");
    rt.stop();
    let (status, body) = post(
        &c,
        &cookie,
        "/install/plan",
        &[("csrf", &install_csrf), ("dir", &good.to_string_lossy())],
    )
    .await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("the runtime is not running"), "{body}");
    assert!(
        body.contains("start it with `tutti up --state-dir"),
        "{body}"
    );
    // The console then ends with a clear line (after a grace for open pages).
    let mut c = c;
    let status = wait_exit(&mut c.child, Duration::from_secs(60));
    assert!(
        status.is_some_and(|s| !s.success()),
        "the console ends after the kernel: {status:?}"
    );
    let stderr = c.stderr();
    assert!(stderr.contains("the runtime stopped"), "{stderr}");
    assert!(
        stderr.contains("start it again with `tutti up --state-dir"),
        "{stderr}"
    );
}

/// Without the cookie every page and action is refused, and nothing changes.
async fn assert_strangers_refused(c: &Console, rt: &Runtime) {
    // Without the cookie every page and action is refused.
    for path in [
        "/",
        "/connectors/hello",
        "/install",
        "/sessions",
        "/activity",
        "/activity/events",
        "/static/console.js",
    ] {
        let (status, _) = get(c, "tutti_console=forged", path).await;
        assert_eq!(status, 401, "GET {path} without a valid cookie");
    }
    for path in [
        "/connectors/hello/uninstall",
        "/connectors/hello/probe",
        "/install/plan",
        "/sessions/revoke-all",
    ] {
        let (status, _) = post(c, "", path, &[]).await;
        assert_eq!(status, 401, "POST {path} without the cookie");
    }
    assert!(
        rt.connector_status("hello").is_some(),
        "nothing was uninstalled"
    );
}

/// A foreign Host/Origin gets 403 even with the cookie; a change without (or with a forged)
/// CSRF token is refused and changes nothing.
async fn assert_foreign_and_forged_refused(c: &Console, cookie: &str, rt: &Runtime) {
    // A foreign Host or Origin gets 403, even with the cookie.
    for (name, value) in [
        ("Host", "evil.example"),
        ("Origin", "http://evil.example"),
        ("Origin", "null"),
    ] {
        let r = http()
            .get(c.url("/"))
            .header("Cookie", cookie)
            .header(name, value)
            .send()
            .await
            .map(|r| r.status().as_u16());
        assert_eq!(r.ok(), Some(403), "{name}: {value}");
    }
    // A change without (or with a forged) CSRF token is refused and changes nothing.
    let (_, confirm) = get(c, cookie, "/connectors/hello/uninstall").await;
    let expected = input_value(&confirm, "expected");
    for csrf in ["", "forged"] {
        let (status, body) = post(
            c,
            cookie,
            "/connectors/hello/uninstall",
            &[("csrf", csrf), ("expected", &expected)],
        )
        .await;
        assert_eq!(status, 403, "uninstall with csrf {csrf:?}: {body}");
    }
    assert!(
        rt.connector_status("hello").is_some(),
        "nothing was uninstalled"
    );
}

/// An invalid manifest: one line per problem on the page, as the CLI prints them; nothing
/// is installed.
async fn assert_invalid_manifest_refused(c: &Console, cookie: &str, rt: &mut Runtime) {
    // An invalid manifest: one line per problem, as the CLI prints them.
    let bad = rt.write_release(
        &json!({"key": "Bad Key!", "version": "", "mcp": {"transport": "stdio"}}),
        &[],
    );
    let cli = rt.tutti(&["connector", "install", &bad.to_string_lossy(), "--yes"]);
    let cli_lines: Vec<String> = String::from_utf8_lossy(&cli.stderr)
        .lines()
        .map(str::to_owned)
        .collect();
    assert!(
        cli_lines.len() > 1,
        "the CLI lists several problems: {cli_lines:?}"
    );
    let (status, body) = post(
        c,
        cookie,
        "/install/plan",
        &[
            ("csrf", &csrf_of(c, cookie, "/install").await),
            ("dir", &bad.to_string_lossy()),
        ],
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let problems = body
        .split("<div class=\"problem\" role=\"alert\">")
        .nth(1)
        .unwrap_or_default();
    let shown = problems.matches("<p>").count();
    assert!(shown > 1, "one paragraph per problem: {body}");
    for line in cli_lines.iter().filter(|l| l.contains("key")) {
        let field = line.split(':').next().unwrap_or_default().trim();
        assert!(body.contains(field), "the page names {field}: {body}");
    }
    assert_eq!(
        rt.status_json()["connectors"].as_array().map(Vec::len),
        Some(0),
        "nothing installed"
    );
}

// ---------------------------------------------------------------------------------------
// the browser

/// The official Python `mcp` SDK client in legacy mode: calls one tool and prints `called`
/// once the result is in. The token comes from the environment, never argv.
const PY_CALL: &str = r#"
import asyncio, json, os, sys
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

async def main():
    url, tool, args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    hc = httpx2.AsyncClient(headers={"Authorization": "Bearer " + os.environ["TUTTI_TEST_TOKEN"]},
                            timeout=30)
    async with Client(streamable_http_client(url, http_client=hc), mode="legacy") as c:
        result = await c.call_tool(tool, args)
        assert not result.is_error, result
        print("called", flush=True)

asyncio.run(main())
"#;

/// Starts [`PY_CALL`]; the channel gets the moment its call returned.
fn python_call(
    rt: &Runtime,
    token: &str,
    tool: &str,
    args: Value,
) -> std::sync::mpsc::Receiver<Instant> {
    let python = require_python_venv().join("bin").join("python");
    let script = rt.root().join("console-client.py");
    std::fs::write(&script, PY_CALL).unwrap_or_else(|e| panic!("cannot write the client: {e}"));
    let mut child = std::process::Command::new(&python)
        .arg(&script)
        .arg(rt.frontend_url())
        .arg(tool)
        .arg(args.to_string())
        .env("TUTTI_TEST_TOKEN", token)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    let stdout = child
        .stdout
        .take()
        .unwrap_or_else(|| panic!("no stdout pipe"));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.trim() == "called" {
                let _ = tx.send(Instant::now());
            }
        }
        let _ = child.wait();
    });
    rx
}

/// chromedriver on a free port, stopped when dropped.
struct Driver {
    child: Child,
    port: u16,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn require(program: &str) -> PathBuf {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join(program))
            .find(|p| p.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "this test needs {program}: install Debian's chromium and chromium-driver \
             (`apt-get install -y chromium chromium-driver`; scripts/test does it as root)"
        )
    })
}

fn start_driver() -> Driver {
    let chromedriver = require("chromedriver");
    let port = free_port();
    let child = std::process::Command::new(chromedriver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start chromedriver: {e}"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "chromedriver did not listen on {port}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    Driver { child, port }
}

async fn browser(driver: &Driver, profile: &std::path::Path) -> fantoccini::Client {
    let chromium = require("chromium");
    let mut caps = serde_json::Map::new();
    let args = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1100,800",
    ]
    .iter()
    .map(|a| (*a).to_owned())
    .chain([format!("--user-data-dir={}", profile.display())])
    .collect::<Vec<_>>();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({"binary": chromium.to_string_lossy(), "args": args}),
    );
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    fantoccini::ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .unwrap_or_else(|e| panic!("cannot start a Chromium session: {e}"))
}

/// A Chromium session signed in to the console `c` with its login URL: chromedriver and the
/// browser's profile folder (both kept as long as the browser), and the browser.
async fn signed_in(c: &Console) -> (Driver, tempfile::TempDir, fantoccini::Client) {
    let driver = start_driver();
    let profile = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let b = browser(&driver, profile.path()).await;
    b.goto(&c.login)
        .await
        .unwrap_or_else(|e| panic!("goto login: {e}"));
    (driver, profile, b)
}

fn screenshots_dir() -> PathBuf {
    let dir = repo_root().join("target").join("console-screenshots");
    let _ = std::fs::create_dir_all(&dir);
    dir
}

async fn shot(b: &fantoccini::Client, name: &str) {
    if let Ok(png) = b.screenshot().await {
        let _ = std::fs::write(screenshots_dir().join(format!("{name}.png")), png);
    }
}

/// Waits until the text of the first element matching `css` contains `want`.
async fn wait_text(b: &fantoccini::Client, css: &str, want: &str, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let text = match b.find(fantoccini::Locator::Css(css)).await {
            Ok(e) => e.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        if text.contains(want) {
            return text;
        }
        if Instant::now() > deadline {
            let source = b.source().await.unwrap_or_default();
            panic!(
                "{css} did not show {want:?} within {timeout:?} (it shows {text:?}); page:\n{source}"
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn click(b: &fantoccini::Client, css: &str) {
    b.find(fantoccini::Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no {css}: {e}"))
        .click()
        .await
        .unwrap_or_else(|e| panic!("cannot click {css}: {e}"));
}

async fn assert_page_clean(b: &fantoccini::Client, secrets: &[&str], what: &str) {
    let source = b.source().await.unwrap_or_default();
    assert_clean(&source, secrets, what);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_in_a_real_browser() {
    let mut rt = Runtime::start(RuntimeOptions {
        demo: true,
        ..Default::default()
    });
    for key in ["hello", "clock"] {
        rt.wait_status(key, "ready", READY);
    }
    let release = fixture_release(&mut rt, "fx", "1.0.0");
    let c = Console::start(&rt);
    // 1, 2: login, the demo cards ready.
    let (_driver, _profile, b) = signed_in(&c).await;
    let t = Duration::from_secs(20);
    for key in ["hello", "clock"] {
        wait_text(
            &b,
            &format!("li.card[data-key=\"{key}\"] .status"),
            "ready",
            t,
        )
        .await;
    }
    shot(&b, "1-connectors").await;
    // 3, 4: a connector's tools with risk; test connection.
    click(&b, "a[href=\"/connectors/hello\"]").await;
    wait_text(&b, "tr[data-tool=\"hello_echo\"] .risk", "medium", t).await;
    shot(&b, "2-connector").await;
    click(&b, "#probe").await;
    wait_text(&b, ".probe-result", "ok:", Duration::from_secs(60)).await;
    shot(&b, "3-test-connection").await;
    browser_install_and_connect(&b, &c, &rt, &release).await;
    browser_sessions_and_activity(&b, &c, &rt).await;
    // 9: uninstall, with its confirmation.
    b.goto(&c.url("/connectors/fx/uninstall"))
        .await
        .unwrap_or_else(|e| panic!("goto: {e}"));
    shot(&b, "8-uninstall").await;
    click(&b, "form button[type=submit]").await;
    wait_text(&b, ".notice", "fx is uninstalled", t).await;
    assert!(
        rt.connector_status("fx").is_none(),
        "fx is gone from status"
    );
    let _ = b.close().await;
}

/// 5, 6: install from a folder seeing the launch line; connect a secret never shown back.
async fn browser_install_and_connect(
    b: &fantoccini::Client,
    c: &Console,
    rt: &Runtime,
    release: &std::path::Path,
) {
    let t = Duration::from_secs(20);
    b.goto(&c.url("/install"))
        .await
        .unwrap_or_else(|e| panic!("goto: {e}"));
    let dir = b
        .find(fantoccini::Locator::Css("input[name=dir]"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    dir.send_keys(&release.to_string_lossy())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    click(b, "form button[type=submit]").await;
    let launch = wait_text(b, "#launch-line", "tutti-fixture-server", t).await;
    assert!(
        launch.contains("--tools echo,env"),
        "the exact launch line: {launch}"
    );
    assert!(
        rt.connector_status("fx").is_none(),
        "nothing is installed before the confirmation"
    );
    shot(b, "4-install-plan").await;
    click(b, "form[action=\"/install\"] button[type=submit]").await;
    wait_text(b, ".notice", "fx installed", t).await;
    b.goto(&c.url("/connectors/fx/connect"))
        .await
        .unwrap_or_else(|e| panic!("goto: {e}"));
    let field = b
        .find(fantoccini::Locator::Css(
            "input[name=\"secret.FIXTURE_TOKEN\"]",
        ))
        .await
        .unwrap_or_else(|e| panic!("no secret field: {e}"));
    assert_eq!(
        field.attr("type").await.ok().flatten().as_deref(),
        Some("password")
    );
    field
        .send_keys(SECRET)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    shot(b, "5-connect").await;
    click(b, "form button[type=submit]").await;
    wait_text(b, ".notice", "fx is connected", t).await;
    assert_page_clean(b, &[SECRET], "the page after connect").await;
    rt.wait_status("fx", "ready", READY);
    for path in ["/connectors/fx/connect", "/connectors/fx", "/"] {
        b.goto(&c.url(path))
            .await
            .unwrap_or_else(|e| panic!("goto: {e}"));
        assert_page_clean(b, &[SECRET], path).await;
    }
}

/// 7, 8: revoke a session (its token then gets 401); a call shows in Activity within 1 s.
async fn browser_sessions_and_activity(b: &fantoccini::Client, c: &Console, rt: &Runtime) {
    let t = Duration::from_secs(20);
    let doomed = rt.issue_token("ws", "doomed");
    let mcp = Mcp::legacy(rt.frontend_url(), &doomed);
    let (status, _, _) = mcp.request("ping", json!({})).await;
    assert_eq!(status, 200, "the token works before the revocation");
    b.goto(&c.url("/sessions"))
        .await
        .unwrap_or_else(|e| panic!("goto: {e}"));
    wait_text(b, "tr[data-session=\"doomed\"]", "ws", t).await;
    assert_page_clean(b, &[&doomed, &doomed[4..]], "sessions").await;
    shot(b, "6-sessions").await;
    click(b, "tr[data-session=\"doomed\"] button").await;
    wait_text(b, ".notice", "revoked 1 session", t).await;
    let (status, _, _) = mcp.request("ping", json!({})).await;
    assert_eq!(status, 401, "a revoked token gets 401 at the MCP URL");

    b.goto(&c.url("/activity?connector=hello"))
        .await
        .unwrap_or_else(|e| panic!("goto: {e}"));
    // The view is live (its backlog shown) before the call is made.
    wait_text(b, "#activity tbody", "hello", t).await;
    let token = rt.issue_token("ws", "caller");
    let called = python_call(
        rt,
        &token,
        "hello_echo",
        json!({"message": "from the test"}),
    );
    let called = called
        .recv_timeout(Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("the Python client made no call: {e}"));
    let deadline = called + Duration::from_secs(1);
    loop {
        let text = match b.find(fantoccini::Locator::Css("#activity tbody")).await {
            Ok(body) => body.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        if text.contains("hello_echo") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the call did not show in Activity within 1 s of its result"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    shot(b, "7-activity").await;
}

/// SPEC §13: the connectors page updates without reloading, from a server-sent
/// event stream fed by the kernel's route stream: an install (a committed generation) reaches
/// an open stream as a `changed` event within a second of `ready`; without the cookie the
/// stream is refused like every page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connectors_page_hears_of_a_committed_generation_at_once() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let dir = rt.write_release(&fixture_connector("live", &["--tools", "echo"]), &[]);
    let c = Console::start(&rt);
    let cookie = sign_in(&c).await;
    let (status, _) = get(&c, "", "/fragment/connectors/events").await;
    assert_eq!(status, 401, "the event stream needs the cookie");
    let mut r = http()
        .get(c.url("/fragment/connectors/events"))
        .header("Cookie", &cookie)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET events: {e}"));
    assert_eq!(r.status().as_u16(), 200);
    // The first event answers the kernel's snapshot; read it before the change.
    let mut seen = String::new();
    let first = tokio::time::Instant::now() + Duration::from_secs(5);
    while !seen.contains("event: changed") {
        match tokio::time::timeout_at(first, r.chunk()).await {
            Ok(Ok(Some(chunk))) => seen.push_str(&String::from_utf8_lossy(&chunk)),
            _ => panic!("no first event on the stream: {seen:?}"),
        }
    }
    let dir = dir.to_string_lossy().into_owned();
    tokio::task::block_in_place(|| {
        rt.tutti_ok(&["connector", "install", &dir, "--yes"]);
        rt.wait_status("live", "ready", READY);
    });
    let mut after = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
    while !after.contains("event: changed") {
        match tokio::time::timeout_at(deadline, r.chunk()).await {
            Ok(Ok(Some(chunk))) => after.push_str(&String::from_utf8_lossy(&chunk)),
            _ => panic!("no `changed` event within 1 s of ready: {after:?}"),
        }
    }
}

/// `(status, page)` of the install plan of the release folder `dir`.
async fn plan_page(c: &Console, cookie: &str, dir: &std::path::Path) -> (u16, String) {
    let csrf = csrf_of(c, cookie, "/install").await;
    let fields = [("csrf", csrf.as_str()), ("dir", &dir.to_string_lossy())];
    post(c, cookie, "/install/plan", &fields).await
}

/// A manifest cannot reorder what the person confirming reads: U+202E in the name, the
/// URL, `cwd` and an `env` value is written out (`\u{202e}`) as the CLI writes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_install_plan_writes_hidden_characters_out() {
    const RLO: &str = "\u{202e}";
    const SHOWN: &str = "\\u{202e}";
    let mut rt = Runtime::start(RuntimeOptions::default());
    let c = Console::start(&rt);
    let cookie = sign_in(&c).await;
    let mut stdio = rt.private_fixture_connector("bidi", &["--tools", "echo"]);
    stdio["name"] = json!(format!("Safe{RLO}gpj.exe"));
    stdio["mcp"]["cwd"] = json!(format!("${{release}}/wo{RLO}rk"));
    stdio["mcp"]["env"] = json!({"LABEL": format!("ok{RLO}kcab")});
    let stdio_dir = rt.write_release(&stdio, &[(&format!("wo{RLO}rk/keep"), b"x")]);
    let mut http = fixture_connector("bidiurl", &[]);
    http["mcp"] = json!({"transport": "http", "url": format!("http://127.0.0.1:9/m{RLO}cp")});
    let http_dir = rt.write_release(&http, &[]);
    let mut shown = String::new();
    for dir in [&stdio_dir, &http_dir] {
        let (status, page) = plan_page(&c, &cookie, dir).await;
        assert_eq!(status, 200, "{page}");
        assert!(!page.contains(RLO), "a raw U+202E in the plan:\n{page}");
        shown.push_str(&page);
    }
    for what in [
        format!("Safe{SHOWN}gpj.exe"),
        format!("/wo{SHOWN}rk"),
        format!("LABEL=$'ok{SHOWN}kcab'"),
        format!("http://127.0.0.1:9/m{SHOWN}cp"),
    ] {
        assert!(shown.contains(&what), "the plan shows {what}:\n{shown}");
    }
}

//! OAuth 2.1 upstreams end to end (SPEC §10) against a real authorization server:
//! oidc-provider (`tests/oauth/provider.mjs`) in front of the fixture server's HTTP mode.
//! The test plays the user's browser over plain HTTP (login and consent pages, the redirect
//! to `tutti connector connect`'s loopback callback).
//!
//! Needs `cargo build --workspace --bins` and `scripts/install-test-tools` (Node 22 and
//! oidc-provider in `.tools/`); a missing tool fails the test with the way to install it.

mod browser_handoff;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tutti_tests::oauth::{Browser, OAuthServer, oauth_connector, query_param};
use tutti_tests::{FixtureHttp, Mcp, Runtime, RuntimeOptions, result_texts, secret_scan};

const READY: Duration = Duration::from_secs(60);

/// The fixture MCP server and, in front of it, the authorization server and the protected
/// resource. `args` go to `provider.mjs`.
pub(crate) struct Remote {
    pub(crate) server: OAuthServer,
    _fixture: FixtureHttp,
}

impl Remote {
    pub(crate) fn start(rt: &Runtime, args: &[&str]) -> Remote {
        Self::start_with(rt, args, &[])
    }

    fn start_with(rt: &Runtime, args: &[&str], envs: &[(&str, &str)]) -> Remote {
        let fixture = FixtureHttp::start(&["--tools", "echo,add"]);
        let upstream = format!("http://127.0.0.1:{}/mcp", fixture.port);
        let stderr = rt.root().join(format!("provider-{}.stderr", fixture.port));
        Remote {
            server: OAuthServer::start(&upstream, args, envs, &stderr),
            _fixture: fixture,
        }
    }
}

/// A running `tutti connector connect KEY --no-browser --json`: its stderr is read as it
/// comes (the URL to open is printed there).
pub(crate) struct Login {
    child: Child,
    lines: mpsc::Receiver<String>,
    stderr: Vec<String>,
}

impl Login {
    pub(crate) fn start(rt: &Runtime, key: &str) -> Login {
        Self::start_with(rt, key, &[], &[])
    }

    /// With more arguments (e.g. `--from-env NAME`) and environment.
    fn start_with(rt: &Runtime, key: &str, args: &[&str], env: &[(&str, &str)]) -> Login {
        let mut argv = vec!["connector", "connect", key, "--no-browser", "--json"];
        argv.extend_from_slice(args);
        let mut child = rt
            .tutti_cmd(&argv)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run tutti connector connect {key}: {e}"));
        let stderr = child
            .stderr
            .take()
            .unwrap_or_else(|| panic!("no stderr pipe"));
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Login {
            child,
            lines,
            stderr: Vec::new(),
        }
    }

    /// The authorization URL the command prints (it must within 60 s).
    pub(crate) fn url(&mut self) -> String {
        let deadline = Instant::now() + READY;
        while let Ok(line) = self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            self.stderr.push(line.clone());
            if line.starts_with("http://") || line.starts_with("https://") {
                return line;
            }
        }
        let _ = self.child.kill();
        panic!("connect printed no URL:\n{}", self.stderr.join("\n"));
    }

    /// Whether the command printed a line holding `text` by now (without waiting).
    pub(crate) fn printed(&mut self, text: &str) -> bool {
        while let Ok(line) = self.lines.try_recv() {
            self.stderr.push(line);
        }
        self.stderr.iter().any(|l| l.contains(text))
    }

    /// Whether the command ended, and if so whether it succeeded (without waiting).
    pub(crate) fn ended(&mut self) -> Option<bool> {
        self.child
            .try_wait()
            .ok()
            .flatten()
            .map(|status| status.success())
    }

    /// Waits for the command's end: (success, stdout, stderr).
    pub(crate) fn finish(mut self) -> (bool, String, String) {
        let mut stdout = String::new();
        if let Some(mut out) = self.child.stdout.take() {
            let _ = std::io::Read::read_to_string(&mut out, &mut stdout);
        }
        let status = self.child.wait().unwrap_or_else(|e| panic!("connect: {e}"));
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.stderr.push(line);
        }
        (status.success(), stdout, self.stderr.join("\n"))
    }
}

/// Runs a whole login as the user: `connect`, the browser, the callback. Returns the
/// authorization URL, the callback URL and the command's outcome.
pub(crate) async fn log_in(rt: &Runtime, key: &str) -> (String, String, (bool, String, String)) {
    finish_login(Login::start(rt, key)).await
}

async fn finish_login(mut login: Login) -> (String, String, (bool, String, String)) {
    let url = login.url();
    let callback = Browser::new().authorize(&url, "alice").await;
    let (status, page) = Browser::new().get(&callback).await;
    assert_eq!(status, 200, "the callback page: {page}");
    let outcome = tokio::task::spawn_blocking(move || login.finish())
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"));
    (url, callback, outcome)
}

pub(crate) fn audit_events(rt: &Runtime, event: &str, key: &str) -> Vec<Value> {
    rt.audit_lines()
        .into_iter()
        .filter(|l| l["event"] == event && l["connector"] == key)
        .collect()
}

async fn client(rt: &Runtime) -> Mcp {
    let token = rt.issue_token("ws", "oauth");
    let mcp = Mcp::legacy(rt.frontend_url(), &token);
    mcp.initialize().await;
    mcp
}

async fn echo(mcp: &Mcp, key: &str, message: &str) {
    let result = mcp
        .call_tool_ok(&format!("{key}_echo"), json!({"message": message}))
        .await;
    assert_eq!(result_texts(&result), message, "{result}");
}

/// The login record's tokens under `secrets/` (access, refresh), for the scans.
fn stored_tokens(rt: &Runtime, key: &str) -> Vec<String> {
    let path = rt.state_dir().join("secrets").join(format!("{key}.json"));
    let stored: Value = std::fs::read(&path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    let record: Value = stored["oauth:login"]
        .as_str()
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default();
    let tokens = &record["grant"]["credentials"]["token_response"];
    ["access_token", "refresh_token"]
        .iter()
        .filter_map(|k| tokens[*k].as_str().map(str::to_owned))
        .collect()
}

fn secrets_file(rt: &Runtime, key: &str) -> PathBuf {
    rt.state_dir().join("secrets").join(format!("{key}.json"))
}

// === install to use ===

/// `connect` logs in with PKCE (S256), the resource and its scope; status shows the expiry
/// and the account.
async fn log_in_with_pkce_and_the_resource(rt: &Runtime, server: &OAuthServer) {
    let (url, _, (ok, stdout, stderr)) = log_in(rt, "remote").await;
    assert!(ok, "connect failed: {stdout}{stderr}");
    let printed: Value = serde_json::from_str(stdout.trim()).unwrap_or_default();
    assert_eq!(
        printed,
        json!({"key": "remote", "status": "ready"}),
        "{stdout}"
    );
    // The account is the one the browser logged in as (the id_token's subject).
    assert!(stderr.contains("remote is logged in as alice"), "{stderr}");
    assert_eq!(
        query_param(&url, "code_challenge_method").as_deref(),
        Some("S256")
    );
    assert_eq!(
        query_param(&url, "resource").as_deref(),
        Some(server.resource.as_str())
    );
    assert!(
        query_param(&url, "scope").is_some_and(|s| s.split(' ').any(|s| s == "mcp:tools")),
        "the login does not ask for the resource's scope: {url}"
    );
    let ready = rt.wait_status("remote", "ready", READY);
    assert!(
        ready["tokenExpiresAt"].is_string(),
        "status shows no expiry: {ready}"
    );
    assert_eq!(
        ready["oauthAccount"], "alice",
        "status shows no account: {ready}"
    );
    assert_eq!(audit_events(rt, "oauth_login", "remote").len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn oauth_connector_from_install_to_use_survives_expiry_and_a_kernel_kill() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    // Access tokens live 8 s; the worker renews them when 5 s are left.
    let remote = Remote::start(&rt, &["--ttl", "8"]);
    let server = &remote.server;
    rt.install_ok(&oauth_connector("remote", &server.mcp_url, json!({})), &[]);
    let waiting = rt.wait_status("remote", "auth_required", READY);
    assert!(
        waiting["lastError"]
            .as_str()
            .is_some_and(|e| e.contains("tutti connector connect remote")),
        "{waiting}"
    );

    log_in_with_pkce_and_the_resource(&rt, server).await;

    // Tools listed and called through the runtime.
    let mcp = client(&rt).await;
    let names: Vec<String> = mcp
        .list_tools()
        .await
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect();
    assert!(names.iter().any(|n| n == "remote_echo"), "{names:?}");
    echo(&mcp, "remote", "first").await;

    // Renewal before expiry: after 6 s the token has less than 5 s left.
    tokio::time::sleep(Duration::from_secs(6)).await;
    echo(&mcp, "remote", "renewed").await;
    assert!(
        !audit_events(&rt, "oauth_refresh", "remote").is_empty(),
        "no refresh before expiry in the audit log"
    );
    // The server forgets the access token (as if it expired early): the worker's 401 makes
    // one refresh and the call goes through.
    let before = audit_events(&rt, "oauth_refresh", "remote").len();
    server.drop_access_tokens().await;
    echo(&mcp, "remote", "after a 401").await;
    let refreshed = audit_events(&rt, "oauth_refresh", "remote");
    assert!(refreshed.len() > before);
    // Rotation honoured: each refresh got a new refresh token, and the next refresh (after
    // the 401) used it (the server refuses a rotated-away one).
    assert!(
        refreshed.iter().all(|e| e["rotated"] == true),
        "{refreshed:?}"
    );
    let refreshes = server.seen("token").await;
    assert!(
        refreshes
            .iter()
            .filter(|e| e["grantType"] == "refresh_token")
            .all(|e| e["status"] == 200 && e["resource"] == server.resource.as_str()),
        "a refresh was refused or named another resource: {refreshes:?}"
    );

    // Kernel SIGKILL, `tutti up`: still ready, no new login, calls work.
    let authorizations = server.seen("authorization").await.len();
    rt.kill();
    rt.restart();
    rt.wait_status("remote", "ready", READY);
    let mcp = client(&rt).await;
    echo(&mcp, "remote", "after the restart").await;
    assert_eq!(audit_events(&rt, "oauth_login", "remote").len(), 1);
    assert_eq!(server.seen("authorization").await.len(), authorizations);
}

/// Logs `key` in on a fresh runtime-side connector and waits for `ready`.
async fn install_and_log_in(rt: &mut Runtime, server: &OAuthServer, key: &str, auth: Value) {
    rt.install_ok(&oauth_connector(key, &server.mcp_url, auth), &[]);
    rt.wait_status(key, "auth_required", READY);
    let (_, _, (ok, stdout, stderr)) = log_in(rt, key).await;
    assert!(ok, "connect {key} failed: {stdout}{stderr}");
    rt.wait_status(key, "ready", READY);
}

fn assert_names_connect(status: &Value, key: &str) {
    let command = format!("tutti connector connect {key}");
    assert!(
        status["lastError"]
            .as_str()
            .is_some_and(|e| e.contains(&command)),
        "lastError does not name `{command}`: {status}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bare_origin_resource_is_refreshed_as_it_was_named() {
    // The resource metadata names `http://127.0.0.1:R` (no path at all) and the server
    // compares resources exactly: a refresh must send the string the login sent.
    let mut rt = Runtime::start(RuntimeOptions::default());
    let remote = Remote::start(&rt, &["--ttl", "300", "--bare-origin"]);
    let server = &remote.server;
    install_and_log_in(&mut rt, server, "remote", json!({})).await;
    let mcp = client(&rt).await;
    echo(&mcp, "remote", "one").await;
    server.drop_access_tokens().await;
    echo(&mcp, "remote", "two").await;
    let refreshes: Vec<Value> = server
        .seen("token")
        .await
        .into_iter()
        .filter(|e| e["grantType"] == "refresh_token")
        .collect();
    assert!(
        !refreshes.is_empty()
            && refreshes
                .iter()
                .all(|e| e["status"] == 200 && e["resource"] == server.resource.as_str()),
        "{refreshes:?}"
    );
}

// === failure paths ===

/// The pids of `key`'s workers.
fn worker_pids(rt: &Runtime, key: &str) -> Vec<u32> {
    rt.workers()
        .iter()
        .filter(|w| w.key == key)
        .map(|w| w.pid)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_refresh_makes_only_that_connector_auth_required() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let remote = Remote::start(&rt, &["--ttl", "300"]);
    let other = rt.private_fixture_connector("other", &["--tools", "echo"]);
    rt.install_ok(&other, &[]);
    rt.wait_status("other", "ready", READY);
    install_and_log_in(&mut rt, &remote.server, "remote", json!({})).await;
    let other_worker = worker_pids(&rt, "other");
    let mcp = client(&rt).await;
    echo(&mcp, "remote", "before").await;

    // The server revokes the grant: the next call's 401 makes a refresh, which is refused.
    remote.server.revoke_all().await;
    let (_, _, body) = mcp
        .call_tool("remote_echo", json!({"message": "after"}))
        .await;
    assert!(
        !body.to_string().contains("\"after\""),
        "a call went through after the revocation: {body}"
    );
    let failed = rt.wait_status("remote", "auth_required", READY);
    assert_names_connect(&failed, "remote");
    assert!(!audit_events(&rt, "oauth_refresh_failed", "remote").is_empty());
    let refused = remote.server.seen("token").await;
    assert!(
        refused
            .iter()
            .any(|e| e["grantType"] == "refresh_token" && e["status"] == 400),
        "no refused refresh at the server: {refused:?}"
    );

    // The other connector is untouched: same worker, still ready, still answering.
    assert_eq!(
        rt.wait_status("other", "ready", READY)["restarts"],
        json!(0)
    );
    assert_eq!(worker_pids(&rt, "other"), other_worker);
    echo(&mcp, "other", "still here").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn insufficient_scope_asks_for_the_larger_scope_at_the_next_connect() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let remote = Remote::start(&rt, &["--ttl", "300"]);
    install_and_log_in(&mut rt, &remote.server, "remote", json!({})).await;
    let mcp = client(&rt).await;
    let sum = mcp
        .call_tool_ok("remote_add", json!({"a": 1, "b": 2}))
        .await;
    assert_eq!(result_texts(&sum), "3", "{sum}");

    // The resource now wants mcp:admin for `add`: 403 insufficient_scope → auth_required.
    remote.server.require_scope("add", "mcp:admin").await;
    let (_, _, body) = mcp.call_tool("remote_add", json!({"a": 1, "b": 2})).await;
    assert!(
        body.get("error").is_some() || body["result"]["isError"] == json!(true),
        "{body}"
    );
    let stepped = rt.wait_status("remote", "auth_required", READY);
    assert_names_connect(&stepped, "remote");

    // The next connect asks for the larger scope (and keeps the one it had).
    let mut login = Login::start(&rt, "remote");
    let url = login.url();
    let scope = query_param(&url, "scope").unwrap_or_default();
    let scopes: Vec<&str> = scope.split(' ').collect();
    assert!(
        scopes.contains(&"mcp:admin") && scopes.contains(&"mcp:tools"),
        "the step-up login asks for {scope:?}"
    );
    let callback = Browser::new().authorize(&url, "alice").await;
    let (status, page) = Browser::new().get(&callback).await;
    assert_eq!(status, 200, "{page}");
    let (ok, stdout, stderr) = tokio::task::spawn_blocking(move || login.finish())
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"));
    assert!(ok, "{stdout}{stderr}");
    rt.wait_status("remote", "ready", READY);
    let mcp = client(&rt).await;
    let sum = mcp
        .call_tool_ok("remote_add", json!({"a": 2, "b": 2}))
        .await;
    assert_eq!(result_texts(&sum), "4", "{sum}");
}

#[tokio::test(flavor = "multi_thread")]
async fn disconnect_and_uninstall_revoke_at_the_server_and_delete_the_tokens() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let remote = Remote::start(&rt, &["--ttl", "300"]);
    let server = &remote.server;
    install_and_log_in(&mut rt, server, "remote", json!({})).await;
    assert_eq!(
        stored_tokens(&rt, "remote").len(),
        2,
        "no access and refresh token stored"
    );

    rt.tutti_ok(&["connector", "disconnect", "remote"]);
    let seen = server.seen("revocation").await;
    assert!(
        seen.len() == 2 && seen.iter().all(|e| e["status"] == 200),
        "disconnect did not revoke both tokens: {seen:?}"
    );
    assert!(
        stored_tokens(&rt, "remote").is_empty(),
        "tokens left in secrets/"
    );
    let revoked = audit_events(&rt, "oauth_revoke", "remote");
    assert_eq!(revoked.len(), 1);
    assert_eq!(revoked[0]["outcome"], "revoked", "{revoked:?}");
    let after = rt.wait_status("remote", "auth_required", READY);
    assert_names_connect(&after, "remote");

    // Log in again, then uninstall: revoked too, and nothing left.
    let (_, _, (ok, stdout, stderr)) = log_in(&rt, "remote").await;
    assert!(ok, "{stdout}{stderr}");
    rt.wait_status("remote", "ready", READY);
    rt.tutti_ok(&["connector", "uninstall", "remote"]);
    let seen = server.seen("revocation").await;
    assert!(
        seen.len() == 4 && seen.iter().all(|e| e["status"] == 200),
        "uninstall did not revoke both tokens: {seen:?}"
    );
    assert!(!secrets_file(&rt, "remote").exists());
    assert_eq!(audit_events(&rt, "oauth_revoke", "remote").len(), 2);
}

// === bad input ===

fn one_line(text: &str) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "not one line: {text:?}");
    lines[0].to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_input_gets_one_clear_line_and_changes_nothing() {
    let mut rt = Runtime::start(RuntimeOptions::default());

    // A plain-http URL that is not loopback: refused at install.
    let plain = oauth_connector("plain", "http://mcp.example.com/mcp", json!({}));
    let out = rt.install_dir(&plain, &[]);
    assert!(!out.status.success(), "a non-https OAuth URL was installed");
    let line = one_line(&String::from_utf8_lossy(&out.stderr));
    assert!(line.contains("https"), "{line}");
    assert!(rt.connector_status("plain").is_none(), "plain is installed");

    // An authorization server whose metadata names another issuer: refused at connect.
    let liar = Remote::start(&rt, &["--wrong-issuer"]);
    rt.install_ok(
        &oauth_connector("liar", &liar.server.mcp_url, json!({})),
        &[],
    );
    rt.wait_status("liar", "auth_required", READY);
    let out = rt.tutti(&["connector", "connect", "liar", "--no-browser"]);
    assert!(!out.status.success(), "a login with a lying issuer went on");
    let line = one_line(&String::from_utf8_lossy(&out.stderr));
    assert!(line.to_lowercase().contains("issuer"), "{line}");
    assert!(stored_tokens(&rt, "liar").is_empty());
    assert!(liar.server.seen("authorization").await.is_empty());
    rt.wait_status("liar", "auth_required", READY);

    // A callback with a forged state: answered and ignored (the login goes on waiting),
    // nothing stored, no code exchanged; Ctrl-C then ends the login.
    let remote = Remote::start(&rt, &["--ttl", "300"]);
    rt.install_ok(
        &oauth_connector("remote", &remote.server.mcp_url, json!({})),
        &[],
    );
    rt.wait_status("remote", "auth_required", READY);
    let mut login = Login::start(&rt, "remote");
    let url = login.url();
    let callback = Browser::new().authorize(&url, "alice").await;
    let state = query_param(&callback, "state").unwrap_or_default();
    let forged = callback.replace(&format!("state={state}"), "state=forged");
    assert_ne!(forged, callback);
    let (status, page) = Browser::new().get(&forged).await;
    assert_eq!(status, 400, "{page}");
    assert!(page.contains("ignored"), "{page}");
    assert!(
        matches!(login.child.try_wait(), Ok(None)),
        "a forged state ended the login"
    );
    let pid = nix::unistd::Pid::from_raw(login.child.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
    let (ok, _, stderr) = tokio::task::spawn_blocking(move || login.finish())
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"));
    assert!(!ok, "connect succeeded with a forged state");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.contains("cancelled"), "{stderr}");
    assert!(stored_tokens(&rt, "remote").is_empty());
    assert!(
        !remote
            .server
            .seen("token")
            .await
            .iter()
            .any(|e| e["grantType"] == "authorization_code"),
        "a code was exchanged"
    );
    rt.wait_status("remote", "auth_required", READY);
}

// === secret hygiene ===

/// A value no test run shares (the std hasher is seeded from the OS).
fn random_hex() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

/// Runs `tutti args` with `env`, keeps its stdout and stderr for the scan, and requires
/// success.
fn run_kept(
    rt: &Runtime,
    outputs: &mut Vec<(String, Vec<u8>)>,
    args: &[&str],
    env: &[(&str, &str)],
) -> String {
    let out = rt
        .tutti_cmd(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("tutti {}: {e}", args.join(" ")));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let what = format!("tutti {}", args.join(" "));
    assert!(
        out.status.success(),
        "{what} failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    outputs.push((format!("{what} (stdout)"), out.stdout));
    outputs.push((format!("{what} (stderr)"), out.stderr));
    stdout
}

/// Calls, a renewal before expiry, a renewal after a 401: every token seen is a needle.
async fn calls_through_renewals(rt: &Runtime, server: &OAuthServer, needles: &mut Vec<String>) {
    let mcp = client(rt).await;
    echo(&mcp, "remote", "one").await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    echo(&mcp, "remote", "two").await;
    needles.extend(stored_tokens(rt, "remote"));
    server.drop_access_tokens().await;
    echo(&mcp, "remote", "three").await;
    needles.extend(stored_tokens(rt, "remote"));
    assert!(audit_events(rt, "oauth_refresh", "remote").len() >= 2);
    needles.sort();
    needles.dedup();
    assert!(
        needles.len() >= 6,
        "too few values to look for: {}",
        needles.len()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn oauth_tokens_codes_and_client_secrets_appear_nowhere_but_secrets() {
    let client_secret = format!("cs-{}-{}", random_hex(), random_hex());
    let mut rt = Runtime::start(RuntimeOptions::default());
    let remote = Remote::start_with(
        &rt,
        &["--ttl", "8"],
        &[("E2E_CLIENT_SECRET", client_secret.as_str())],
    );
    let server = &remote.server;
    let mut outputs = Vec::new();
    let mut needles = vec![client_secret.clone()];

    // A pre-registered confidential client; its secret is given like any secret.
    let auth = json!({"clientId": "tutti-e2e", "clientSecret": "OAUTH_CLIENT_SECRET"});
    let dir = rt.write_release(&oauth_connector("remote", &server.mcp_url, auth), &[]);
    let dir = dir.to_string_lossy().into_owned();
    let env = [("OAUTH_CLIENT_SECRET", client_secret.as_str())];
    run_kept(
        &rt,
        &mut outputs,
        &["connector", "install", &dir, "--yes"],
        &env,
    );
    // `connect` takes the client secret and runs the login in one go.
    let login = Login::start_with(&rt, "remote", &["--from-env", "OAUTH_CLIENT_SECRET"], &env);
    let (url, callback, (ok, stdout, stderr)) = finish_login(login).await;
    assert!(ok, "connect failed: {stdout}{stderr}");
    assert_eq!(query_param(&url, "client_id").as_deref(), Some("tutti-e2e"));
    assert!(
        server.seen("registration").await.is_empty(),
        "a client was registered"
    );
    needles.extend(query_param(&callback, "code"));
    outputs.push((
        "tutti connector connect remote".into(),
        [stdout, stderr].concat().into(),
    ));
    rt.wait_status("remote", "ready", READY);
    needles.extend(stored_tokens(&rt, "remote"));

    calls_through_renewals(&rt, server, &mut needles).await;
    for args in [
        &["status"][..],
        &["status", "--json"],
        &["connector", "available", "--json"],
    ] {
        run_kept(&rt, &mut outputs, args, &[]);
    }

    // Argv and environment of the runtime's processes, while they run.
    let mut leaks = secret_scan::environ_leaks(&needles, &rt.process_set(), |_| false);
    let running = secret_scan::Scan::default();
    leaks.extend(secret_scan::leaks(&needles, rt.state_dir(), &running));

    // Then every file outside secrets/ (logs flushed by the stop), the runtime's own output
    // and every command's output.
    let state = rt.state_dir().to_path_buf();
    stop_and_assert_no_leak(&mut rt, &needles, outputs, leaks);

    // The current tokens and the client secret are where they belong.
    let stored = std::fs::read(state.join("secrets").join("remote.json")).unwrap_or_default();
    assert!(secret_scan::contains(&stored, &client_secret));
    assert!(
        audit_events_in(&state)
            .iter()
            .any(|l| l["event"] == "oauth_login")
    );
}

fn audit_events_in(state: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(state.join("logs").join("audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

// === tokens renewed: one header, a margin that scales, nothing in any log ===

/// Echo calls every `every` for `span`; how many were made.
async fn echo_for(mcp: &Mcp, key: &str, span: Duration, every: Duration) -> usize {
    let until = Instant::now() + span;
    let mut calls = 0;
    while Instant::now() < until {
        echo(mcp, key, &format!("call {calls}")).await;
        calls += 1;
        tokio::time::sleep(every).await;
    }
    calls
}

#[tokio::test(flavor = "multi_thread")]
async fn calls_after_a_refresh_carry_only_the_fresh_token() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    // Tokens live 10 s; the resource reads a request's last `Authorization` header, so a
    // request that still carries the first token after it (expired) is refused.
    let remote = Remote::start(&rt, &["--ttl", "10", "--last-authorization"]);
    let server = &remote.server;
    install_and_log_in(&mut rt, server, "remote", json!({})).await;
    let mcp = client(&rt).await;
    echo_for(
        &mcp,
        "remote",
        Duration::from_secs(16),
        Duration::from_millis(500),
    )
    .await;
    assert!(
        server.refreshes().await >= 2,
        "the first token's lifetime passed without two renewals: {:?}",
        server.seen("token").await
    );
    let status = rt.connector_status("remote").unwrap_or_default();
    assert_eq!(status["status"], "ready", "{status}");
    let repeated: Vec<Value> = server
        .log()
        .await
        .into_iter()
        .filter(|e| e.get("authorizationHeaders").is_some())
        .collect();
    assert!(
        repeated.is_empty(),
        "requests carried more than one Authorization header: {repeated:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn short_lived_tokens_are_renewed_near_their_expiry_not_before_every_call() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    // 20 s tokens: renewed when 5 s are left, so about every 15 s.
    let remote = Remote::start(&rt, &["--ttl", "20"]);
    let server = &remote.server;
    install_and_log_in(&mut rt, server, "remote", json!({})).await;
    let mcp = client(&rt).await;
    let before = server.refreshes().await;
    let calls = echo_for(
        &mcp,
        "remote",
        Duration::from_secs(60),
        Duration::from_millis(200),
    )
    .await;
    let refreshes = server.refreshes().await - before;
    assert!(
        (3..=4).contains(&refreshes),
        "{refreshes} refreshes for {calls} calls over 60 s of 20 s tokens (expected 3 or 4)"
    );
}

/// `tutti console --no-open` signed in: the HTML of its page `path`.
async fn console_page(rt: &Runtime, path: &str) -> String {
    let mut console = rt
        .tutti_cmd(&["console", "--no-open"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start `tutti console`: {e}"));
    let stdout = console.stdout.take();
    let mut lines = stdout
        .map(BufReader::new)
        .into_iter()
        .flat_map(BufRead::lines)
        .map_while(Result::ok);
    let login = lines
        .find_map(|l| l.strip_prefix("Console: ").map(|u| u.trim().to_owned()))
        .unwrap_or_else(|| panic!("`tutti console` printed no login URL"));
    // Its stdout stays open (a closed pipe would end the console).
    std::thread::spawn(move || lines.for_each(drop));
    let base = login.split("/login").next().unwrap_or_default().to_owned();
    let mut browser = Browser::new();
    let (signed_in, _) = browser.get(&login).await;
    assert_eq!(signed_in, 303, "the console's login URL");
    let (status, page) = browser.get(&format!("{base}{path}")).await;
    let _ = console.kill();
    let _ = console.wait();
    assert_eq!(status, 200, "console {path}: {page}");
    page
}

/// A line holding `token` put into the connector's log as if a process had written it:
/// `tutti logs` and the console's connector page show it masked by the kernel. The line is
/// taken out again afterwards.
async fn planted_token_is_masked(rt: &Runtime, outputs: &mut Vec<(String, Vec<u8>)>, token: &str) {
    let log = rt.state_dir().join("logs").join("connector-remote.log");
    let planted = format!("planted line: {token}");
    let mut text = std::fs::read_to_string(&log).unwrap_or_default();
    text.push_str(&planted);
    text.push('\n');
    std::fs::write(&log, &text).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
    let shown = run_kept(rt, outputs, &["logs", "remote"], &[]);
    assert!(shown.contains("planted line: ***"), "tutti logs: {shown}");
    let page = console_page(rt, "/connectors/remote").await;
    assert!(page.contains("planted line: ***"), "console page: {page}");
    outputs.push(("console /connectors/remote (planted)".into(), page.into()));
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let kept: String = text
        .split_inclusive('\n')
        .filter(|l| !l.contains(&planted))
        .collect();
    std::fs::write(&log, kept).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
}

/// Three renewals (8 s tokens are renewed when 5 s are left), then a call the upstream
/// answers with a 500 page that echoes the request's headers, then calls again.
async fn renew_three_times_then_an_echoing_error_page(rt: &Runtime, server: &OAuthServer) {
    let mcp = client(rt).await;
    let before = server.refreshes().await;
    for n in 0..3 {
        tokio::time::sleep(Duration::from_millis(3_500)).await;
        echo(&mcp, "remote", &format!("renewed {n}")).await;
    }
    assert!(
        server.refreshes().await >= before + 3,
        "fewer than three renewals"
    );
    server.echo_headers_once().await;
    let (_, _, failed) = mcp
        .call_tool("remote_echo", json!({"message": "echoed"}))
        .await;
    assert!(
        failed.to_string().contains("HTTP 500"),
        "the error page did not fail the call: {failed}"
    );
    echo(&mcp, "remote", "after the error page").await;
}

/// Stops the runtime, then scans every file outside `secrets/` (logs flushed by the stop), its
/// own output and `outputs` for `needles`; fails naming every place one was found (`leaks`
/// holds what an earlier scan found).
fn stop_and_assert_no_leak(
    rt: &mut Runtime,
    needles: &[String],
    outputs: Vec<(String, Vec<u8>)>,
    mut leaks: Vec<String>,
) {
    let (root, state) = (rt.root().to_path_buf(), rt.state_dir().to_path_buf());
    rt.stop();
    let scan = secret_scan::Scan {
        files: vec![root.join("up.stdout"), root.join("up.stderr")],
        outputs,
        skip_pids: &[],
    };
    leaks.extend(secret_scan::leaks(needles, &state, &scan));
    assert!(
        leaks.is_empty(),
        "an OAuth secret leaked into:\n{}",
        leaks.join("\n")
    );
}

/// Every place `needles` leak to: the runtime's processes (argv, environment), the state
/// dir outside `secrets/`, and `outputs`.
fn leaks_while_running(
    rt: &Runtime,
    needles: &[String],
    outputs: &[(String, Vec<u8>)],
) -> Vec<String> {
    let mut leaks = secret_scan::environ_leaks(needles, &rt.process_set(), |_| false);
    leaks.extend(secret_scan::leaks(
        needles,
        rt.state_dir(),
        &secret_scan::Scan::default(),
    ));
    leaks.extend(secret_scan::output_leaks(needles, outputs));
    leaks
}

#[tokio::test(flavor = "multi_thread")]
async fn at_debug_level_no_code_or_token_reaches_a_log_an_output_or_an_argv() {
    let debug = |k: &str| (k.to_owned(), "debug".to_owned());
    let mut rt = Runtime::start(RuntimeOptions {
        env: vec![debug("RUST_LOG"), debug("TUTTI_WORKER_LOG")],
        ..RuntimeOptions::default()
    });
    let remote = Remote::start(&rt, &["--ttl", "8"]);
    let server = &remote.server;
    let mut outputs = Vec::new();
    rt.install_ok(&oauth_connector("remote", &server.mcp_url, json!({})), &[]);
    rt.wait_status("remote", "auth_required", READY);
    let login = Login::start_with(&rt, "remote", &[], &[("TUTTI_LOG", "debug")]);
    let (_, _, (ok, stdout, stderr)) = finish_login(login).await;
    assert!(ok, "connect failed: {stdout}{stderr}");
    outputs.push((
        "tutti connector connect".into(),
        [stdout, stderr].concat().into(),
    ));
    rt.wait_status("remote", "ready", READY);
    renew_three_times_then_an_echoing_error_page(&rt, server).await;
    for args in [&["status", "--json"][..], &["logs", "remote"], &["logs"]] {
        run_kept(&rt, &mut outputs, args, &[]);
    }
    let page = console_page(&rt, "/connectors/remote").await;
    outputs.push(("console /connectors/remote".into(), page.into()));
    let needles = server.issued_secrets().await;
    assert!(
        needles.len() >= 9,
        "too few values to look for: {}",
        needles.len()
    );
    let leaks = leaks_while_running(&rt, &needles, &outputs);
    assert!(
        leaks.is_empty(),
        "an OAuth secret leaked into:\n{}",
        leaks.join("\n")
    );
    let log = rt.log("connector-remote.log");
    assert!(
        log.contains("HTTP 500 Internal Server Error ("),
        "the 500 is not in the connector's log as status and length: {log}"
    );

    // The kernel masks what `tutti logs` and the console show, should a log hold a token.
    let current = stored_tokens(&rt, "remote");
    planted_token_is_masked(&rt, &mut outputs, &current[0]).await;
    run_kept(
        &rt,
        &mut outputs,
        &["connector", "disconnect", "remote"],
        &[],
    );
    run_kept(&rt, &mut outputs, &["logs", "remote"], &[]);
    let leaks = leaks_while_running(&rt, &needles, &outputs);
    stop_and_assert_no_leak(&mut rt, &needles, outputs, leaks);
}

// === hostile authorization servers ===

/// A fake browser opener first on `PATH` (`xdg-open`, `open`): it records its argv in the
/// file it returns (absent while nothing was opened).
fn fake_opener(rt: &Runtime) -> (String, PathBuf) {
    let dir = rt.root().join("opener");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let opened = rt.root().join("opened.txt");
    let script = format!(
        "#!/bin/sh\nprintf '%s\\n' \"$@\" >> '{}'\n",
        opened.display()
    );
    for name in ["xdg-open", "open"] {
        let path = dir.join(name);
        std::fs::write(&path, &script).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::Permissions::from_mode(0o755);
            std::fs::set_permissions(&path, mode).unwrap_or_else(|e| panic!("{e}"));
        }
    }
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    (path, opened)
}

/// `tutti connector connect KEY` with the browser opener of `path` (no `--no-browser`).
fn connect_with_opener(rt: &Runtime, key: &str, path: &str) -> std::process::Output {
    rt.tutti_cmd(&["connector", "connect", key])
        .env("PATH", path)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run tutti connector connect {key}: {e}"))
}

/// The resource's `/trap/` requests and the endless answers' byte counts so far.
async fn events_of(server: &OAuthServer, kind: &str) -> Vec<Value> {
    server
        .log()
        .await
        .into_iter()
        .filter(|e| e["server"] == kind)
        .collect()
}

/// Installs `key` behind a server whose metadata carries `overrides`, runs `connect` (with the
/// browser opener of `path`, else `--no-browser`) and checks that it fails with one line
/// naming `endpoint` as refused, and that nothing was registered, authorized or stored.
/// Returns the line and the server.
async fn refused_at_connect(
    rt: &mut Runtime,
    key: &str,
    overrides: &Value,
    endpoint: &str,
    path: Option<&str>,
) -> (String, Remote) {
    let overrides = overrides.to_string();
    let remote = Remote::start(rt, &["--ttl", "300", "--metadata-override", &overrides]);
    rt.install_ok(
        &oauth_connector(key, &remote.server.mcp_url, json!({})),
        &[],
    );
    rt.wait_status(key, "auth_required", READY);
    let out = match path {
        Some(path) => connect_with_opener(rt, key, path),
        None => rt.tutti(&["connector", "connect", key, "--no-browser"]),
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "connect {key} went on: {stderr}");
    let line = one_line(&stderr);
    assert!(
        line.contains(endpoint) && line.contains("refused"),
        "{line}"
    );
    let server = &remote.server;
    assert!(
        server.seen("registration").await.is_empty(),
        "{key}: registered"
    );
    assert!(server.seen("authorization").await.is_empty(), "{key}");
    assert!(stored_tokens(rt, key).is_empty());
    (line, remote)
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_authorization_endpoints_are_refused_and_nothing_is_opened() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let (path, opened) = fake_opener(&rt);
    for (key, endpoint) in [
        ("file", "file:///etc/passwd"),
        ("smb", "smb://attacker.example/share"),
        ("script", "javascript:alert(document.cookie)"),
        ("plain", "http://as.example.com/authorize"),
    ] {
        let overrides = json!({ "authorization_endpoint": endpoint });
        let name = "authorization_endpoint";
        let (line, _) = refused_at_connect(&mut rt, key, &overrides, name, Some(&path)).await;
        assert!(line.contains(&endpoint[..10]), "{line}");
        assert!(
            !opened.exists(),
            "the opener was run: {:?}",
            std::fs::read_to_string(&opened)
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_revocation_endpoint_at_a_private_address_gets_no_login_and_no_token() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    for (key, endpoint) in [
        ("unspecified", "http://0.0.0.0:RESOURCE_PORT/trap/revoke"),
        ("private", "https://10.0.0.1/trap/revoke"),
    ] {
        let overrides = json!({ "revocation_endpoint": endpoint });
        let name = "revocation_endpoint";
        let (_, remote) = refused_at_connect(&mut rt, key, &overrides, name, None).await;
        assert!(
            events_of(&remote.server, "trap").await.is_empty(),
            "{key}: sent"
        );
    }
}

/// The kernel's resident set, in MiB (from /proc).
fn kernel_rss_mib(rt: &Runtime) -> u64 {
    let pid = rt.pid().unwrap_or_else(|| panic!("no kernel pid"));
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kib| kib / 1024)
}

/// `login` runs while the kernel's RSS is sampled every 50 ms; returns the outcome and the
/// largest sample.
async fn with_peak_rss<F: std::future::Future>(rt: &Runtime, login: F) -> (F::Output, u64) {
    let mut peak = kernel_rss_mib(rt);
    tokio::pin!(login);
    loop {
        tokio::select! {
            out = &mut login => return (out, peak.max(kernel_rss_mib(rt))),
            () = tokio::time::sleep(Duration::from_millis(50)) => peak = peak.max(kernel_rss_mib(rt)),
        }
    }
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread")]
async fn endless_answers_are_cut_at_one_mebibyte_and_the_kernel_stays_small() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    // The metadata: connect fails at discovery.
    let remote = Remote::start(&rt, &["--endless", "metadata"]);
    rt.install_ok(
        &oauth_connector("meta", &remote.server.mcp_url, json!({})),
        &[],
    );
    rt.wait_status("meta", "auth_required", READY);
    let connect = tokio::task::spawn_blocking({
        let cmd = rt.tutti_cmd(&["connector", "connect", "meta", "--no-browser"]);
        move || {
            let mut cmd = cmd;
            cmd.stdin(Stdio::null()).output()
        }
    });
    let (out, peak) = with_peak_rss(&rt, connect).await;
    let out = out
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("{e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(one_line(&stderr).contains("1 MiB"), "{stderr}");
    assert!(peak < 100, "the kernel grew to {peak} MiB");

    // The token answer: the login gets to the code exchange, which is cut.
    let remote = Remote::start(&rt, &["--endless", "token"]);
    rt.install_ok(
        &oauth_connector("token", &remote.server.mcp_url, json!({})),
        &[],
    );
    rt.wait_status("token", "auth_required", READY);
    let ((_, _, (ok, _, stderr)), peak) = with_peak_rss(&rt, log_in(&rt, "token")).await;
    assert!(!ok, "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.contains("1 MiB"), "{stderr}");
    assert!(peak < 100, "the kernel grew to {peak} MiB");
    let sent: Vec<Value> = events_of(&remote.server, "endless").await;
    assert!(
        sent.iter()
            .all(|e| e["sent"].as_u64().unwrap_or(0) < 256 << 20),
        "the client read on: {sent:?}"
    );
    assert!(stored_tokens(&rt, "token").is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_with_scopes_only_under_its_resource_logs_in_and_keeps_its_client() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let remote = Remote::start(&rt, &["--ttl", "300", "--resource-scopes-only"]);
    let server = &remote.server;
    install_and_log_in(&mut rt, server, "remote", json!({})).await;
    echo(&client(&rt).await, "remote", "scoped").await;
    let registrations = server.seen("registration").await;
    assert!(
        registrations.len() == 1 && registrations[0]["status"] == 201,
        "{registrations:?}"
    );

    // A second login of the same connector uses the client the first one registered.
    let (_, _, (ok, stdout, stderr)) = log_in(&rt, "remote").await;
    assert!(ok, "{stdout}{stderr}");
    rt.wait_status("remote", "ready", READY);
    echo(&client(&rt).await, "remote", "again").await;
    assert_eq!(
        server.seen("registration").await.len(),
        1,
        "registered again"
    );
    assert_eq!(server.seen("authorization").await.len(), 2);
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread")]
async fn an_endless_refresh_answer_is_cut_and_the_kernel_stays_small() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let remote = Remote::start(&rt, &["--ttl", "300", "--endless", "refresh"]);
    let server = &remote.server;
    install_and_log_in(&mut rt, server, "remote", json!({})).await;
    let mcp = client(&rt).await;
    echo(&mcp, "remote", "before").await;
    // The access token stops working: the worker asks the kernel for a refresh, whose
    // answer never ends.
    server.drop_access_tokens().await;
    let call = mcp.call_tool("remote_echo", json!({"message": "after"}));
    let (_, peak) = with_peak_rss(&rt, call).await;
    assert!(peak < 100, "the kernel grew to {peak} MiB");
    let status = rt.wait_status("remote", "auth_required", READY);
    let error = status["lastError"].as_str().unwrap_or_default();
    assert!(error.contains("1 MiB"), "{status}");
    assert_names_connect(&status, "remote");
    let sent = events_of(server, "endless").await;
    assert!(
        !sent.is_empty()
            && sent
                .iter()
                .all(|e| e["sent"].as_u64().unwrap_or(0) < 256 << 20),
        "the kernel read on: {sent:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_offering_pushed_requests_gets_them_and_the_url_names_only_the_request() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let remote = Remote::start(&rt, &["--ttl", "300", "--par"]);
    let server = &remote.server;
    rt.install_ok(&oauth_connector("remote", &server.mcp_url, json!({})), &[]);
    rt.wait_status("remote", "auth_required", READY);
    let (url, _, (ok, stdout, stderr)) = log_in(&rt, "remote").await;
    assert!(ok, "{stdout}{stderr}");
    let names: Vec<String> = reqwest::Url::parse(&url)
        .unwrap_or_else(|e| panic!("{url}: {e}"))
        .query_pairs()
        .map(|(k, _)| k.into_owned())
        .collect();
    assert_eq!(names, ["client_id", "request_uri"], "{url}");
    let pushed = server.seen("pushed_authorization_request").await;
    assert!(
        pushed.len() == 1
            && pushed[0]["status"] == 201
            && pushed[0]["resource"] == server.resource.as_str()
            && pushed[0]["scope"]
                .as_str()
                .is_some_and(|s| s.split(' ').any(|s| s == "mcp:tools")),
        "{pushed:?}"
    );
    rt.wait_status("remote", "ready", READY);
    echo(&client(&rt).await, "remote", "pushed").await;
}

//! `tutti connector connect KEY` of an OAuth connector (SPEC §10): the browser login.
//!
//! The CLI owns the user's side: the loopback redirect listener (127.0.0.1, an ephemeral
//! port, `/callback`), the browser (through [`crate::browser`]: a private page leading to the
//! URL, so the `state` is on no command line) or the printed URL, the 5-minute bound and
//! Ctrl-C. The listener serves every connection on its own, each with [`CONNECTION_TIMEOUT`]:
//! the first `/callback` carrying the login's `state` ends the wait; one with another `state`
//! is answered and ignored. The kernel owns the server side (discovery, client identity, the
//! code exchange) and the tokens, which never reach this process: it passes on the code and
//! state of the redirect only.

use std::collections::HashMap;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tutti_proto::kernel::{BeginLoginRequest, CompleteLoginRequest, Empty};

use crate::error::CliError;
use crate::kernel::Kernel;
use crate::output::emit;

/// How long the login may take, from the URL to the connector's status.
const LOGIN_BOUND: Duration = Duration::from_secs(5 * 60);
/// The longest request head the callback listener reads.
const MAX_HEAD: usize = 16 * 1024;
/// How long one connection to the callback listener may take to send its request head (and
/// to take the answer): a slow or silent one is closed after that.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections served at once; more wait in the listen queue.
const MAX_CONNECTIONS: usize = 64;

pub(crate) async fn is_oauth(kernel: &mut Kernel, key: &str) -> Result<bool, CliError> {
    let status = kernel
        .client
        .status(Empty {})
        .await
        .map_err(|s| kernel.error(s))?
        .into_inner();
    Ok(status.connectors.iter().any(|c| c.key == key && c.oauth))
}

fn login_error(key: &str, reason: impl Into<String>) -> CliError {
    CliError::Login {
        key: key.to_owned(),
        reason: reason.into(),
    }
}

pub(crate) async fn run(
    kernel: &mut Kernel,
    state_dir: &Path,
    key: &str,
    no_browser: bool,
    json: bool,
) -> Result<ExitCode, CliError> {
    let listener = TcpListener::bind(("127.0.0.1", 0))
        .await
        .map_err(|e| login_error(key, format!("cannot listen on 127.0.0.1: {e}")))?;
    let port = listener
        .local_addr()
        .map_err(|e| login_error(key, e.to_string()))?
        .port();
    let begin = BeginLoginRequest {
        key: key.to_owned(),
        redirect_uri: format!("http://127.0.0.1:{port}/callback"),
    };
    let begun = kernel
        .client
        .begin_login(begin)
        .await
        .map_err(|s| kernel.error(s))?
        .into_inner();
    tutti_oauth::check_authorization_url(&begun.authorization_url)
        .map_err(|e| login_error(key, e.to_string()))?;
    let page = show_login_page(state_dir, key, &begun.authorization_url, no_browser);
    eprintln!("waiting for the login on 127.0.0.1:{port} (at most 5 minutes; Ctrl-C cancels)");
    let callback = tokio::select! {
        got = tokio::time::timeout(LOGIN_BOUND, callback(&listener, &begun.state)) => match got {
            Ok(got) => got.map_err(|reason| login_error(key, reason))?,
            Err(_) => return Err(login_error(key, "no login within 5 minutes")),
        },
        _ = tokio::signal::ctrl_c() => return Err(login_error(key, "cancelled")),
    };
    // The browser is past the page: it goes.
    drop(page);
    eprintln!("login received; exchanging the code");
    let complete = CompleteLoginRequest {
        key: key.to_owned(),
        login_id: begun.login_id,
        code: callback.code,
        state: callback.state,
        iss: callback.iss.unwrap_or_default(),
    };
    kernel
        .client
        .complete_login(complete)
        .await
        .map_err(|s| kernel.error(s))?;
    eprintln!("waiting for {key} to start");
    let (status, account) = settled_status(kernel, key).await?;
    report_connected(key, &status, &account, json)
}

/// Opens the login page in a browser (unless `--no-browser` or none opens), else prints its
/// URL; the page is kept open until the login is received.
fn show_login_page(
    state_dir: &Path,
    key: &str,
    url: &str,
    no_browser: bool,
) -> Option<crate::browser::Opened> {
    let page = (!no_browser)
        .then(|| crate::browser::open(state_dir, url))
        .and_then(|opened| {
            opened
                .map_err(|reason| eprintln!("tutti: cannot open a browser ({reason})"))
                .ok()
        });
    if page.is_none() {
        eprintln!("open this URL in a browser to log in to {key}:");
        // To the person's terminal only: the state in it is on no command line.
        eprintln!("{url}");
    } else {
        eprintln!("opened the login page of {key} in your browser");
    }
    page
}

/// The connected line (or the contract's JSON) and the exit code: success once ready.
fn report_connected(
    key: &str,
    status: &str,
    account: &str,
    json: bool,
) -> Result<ExitCode, CliError> {
    let line = if json {
        // The contract's `{"key","status"}`; the account goes with the progress lines.
        if !account.is_empty() {
            eprintln!("{key} is logged in as {account}");
        }
        format!("{}\n", serde_json::json!({"key": key, "status": status}))
    } else if account.is_empty() {
        format!("connected {key} ({status})\n")
    } else {
        format!("connected {key} ({status}) as {account}\n")
    };
    emit(&line)?;
    Ok(if status == "ready" {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The connector's status once it is no longer starting (at most 60 s), and the account its
/// login belongs to (empty when the server did not say).
async fn settled_status(kernel: &mut Kernel, key: &str) -> Result<(String, String), CliError> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let reply = kernel
            .client
            .status(Empty {})
            .await
            .map_err(|s| kernel.error(s))?
            .into_inner();
        let (status, account) = reply
            .connectors
            .iter()
            .find(|c| c.key == key)
            .map(|c| (c.status.clone(), c.oauth_account.clone()))
            .unwrap_or_default();
        let settled = !matches!(status.as_str(), "starting" | "restarting" | "auth_required");
        if settled || tokio::time::Instant::now() >= deadline {
            return Ok((status, account));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

struct Callback {
    code: String,
    state: String,
    iss: Option<String>,
}

/// What the winning `/callback` request ends the login with.
type Outcome = Result<Callback, String>;

/// Serves connections until the first `/callback` request with the login's `state` (its
/// outcome is the login's). Other paths (e.g. a browser's favicon request) get a 404; a
/// `/callback` with another `state` gets a page saying it was ignored.
async fn callback(listener: &TcpListener, expected_state: &str) -> Outcome {
    let expected: Arc<str> = Arc::from(expected_state);
    let taken = Arc::new(AtomicBool::new(false));
    let (won, mut outcomes) = mpsc::channel::<Outcome>(1);
    // Dropped on return: connections still open are closed.
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            Some(outcome) = outcomes.recv() => return outcome,
            accepted = listener.accept(), if connections.len() < MAX_CONNECTIONS => {
                let Ok((stream, _)) = accepted else {
                    // E.g. out of descriptors: a connection that ends frees one.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let turn = Turn {
                    expected: expected.clone(),
                    taken: taken.clone(),
                    won: won.clone(),
                };
                connections.spawn(serve(stream, turn));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// What one connection needs to know to take part.
struct Turn {
    expected: Arc<str>,
    /// Set by the first request with the expected `state`.
    taken: Arc<AtomicBool>,
    won: mpsc::Sender<Outcome>,
}

/// One connection: at most one request, read and answered within [`CONNECTION_TIMEOUT`] each.
async fn serve(mut stream: TcpStream, turn: Turn) {
    let Ok(Some(target)) = tokio::time::timeout(CONNECTION_TIMEOUT, read_target(&mut stream)).await
    else {
        return;
    };
    let (path, query) = target.split_once('?').unwrap_or((target.as_str(), ""));
    if path != "/callback" {
        answer(&mut stream, "404 Not Found", "not found").await;
        return;
    }
    let params = parse_query(query);
    let state = params.get("state").map_or("", String::as_str);
    if !same_secret(state, &turn.expected) {
        answer(&mut stream, "400 Bad Request", IGNORED).await;
        return;
    }
    if turn.taken.swap(true, Ordering::SeqCst) {
        answer(&mut stream, "409 Conflict", ALREADY).await;
        return;
    }
    let outcome = check(&params);
    match &outcome {
        Ok(_) => answer(&mut stream, "200 OK", DONE).await,
        Err(reason) => answer(&mut stream, "400 Bad Request", reason).await,
    }
    let _ = turn.won.send(outcome).await;
}

const DONE: &str = "Login complete. You can close this tab and return to the terminal.";
const IGNORED: &str = "This request does not belong to the login in progress (its state does \
                       not match); it was ignored.";
const ALREADY: &str = "This login was received already; this request was ignored.";

/// Compares in time independent of where the values differ.
fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |diff, (x, y)| diff | (x ^ y))
            == 0
}

/// The redirect of the login in progress (its `state` matched): the code, or the
/// authorization server's refusal.
fn check(params: &HashMap<String, String>) -> Outcome {
    let state = params.get("state").cloned().unwrap_or_default();
    if let Some(error) = params.get("error") {
        let detail = params
            .get("error_description")
            .map_or(String::new(), |d| format!(": {d}"));
        return Err(format!("the authorization server answered {error}{detail}"));
    }
    let code = params
        .get("code")
        .filter(|c| !c.is_empty())
        .cloned()
        .ok_or_else(|| "the redirect carries no code".to_owned())?;
    Ok(Callback {
        code,
        state,
        iss: params.get("iss").cloned(),
    })
}

/// The request target of a `GET` (None for anything else or an unreadable head).
async fn read_target(stream: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut buf = [0u8; 2048];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD {
        let read = stream.read(&mut buf).await.ok()?;
        if read == 0 {
            break;
        }
        head.extend_from_slice(&buf[..read]);
    }
    let text = String::from_utf8_lossy(&head);
    let mut parts = text.lines().next()?.split(' ');
    (parts.next()? == "GET").then(|| parts.next().map(str::to_owned))?
}

/// Answers with a short text page (given [`CONNECTION_TIMEOUT`]; a peer that does not read
/// is left).
async fn answer(stream: &mut TcpStream, status: &str, body: &str) {
    let _ = tokio::time::timeout(CONNECTION_TIMEOUT, respond(stream, status, body)).await;
}

async fn respond(stream: &mut TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    let text = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(text.as_bytes()).await?;
    stream.shutdown().await
}

fn parse_query(query: &str) -> HashMap<String, String> {
    query
        .split('&')
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            Some((percent_decode(k)?, percent_decode(v)?))
        })
        .collect()
}

/// `application/x-www-form-urlencoded` decoding (`+` is a space); None for bad escapes.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_redirect_gives_the_code_or_the_refusal() {
        let params = parse_query("code=abc%2Fd&state=s1&iss=https%3A%2F%2Fas.example");
        let ok = check(&params);
        assert!(
            ok.as_ref()
                .is_ok_and(|c| c.code == "abc/d" && c.state == "s1"),
            "{:?}",
            ok.err()
        );
        assert_eq!(
            ok.ok().and_then(|c| c.iss).as_deref(),
            Some("https://as.example")
        );
        let denied = parse_query("error=access_denied&state=s1");
        assert!(check(&denied).is_err_and(|e| e.contains("access_denied")));
        assert!(check(&parse_query("state=s1")).is_err());
        assert_eq!(percent_decode("%zz"), None);
        assert!(same_secret("s1", "s1"));
        assert!(!same_secret("s1", "s2"));
        assert!(!same_secret("s1", "s11"));
        assert!(!same_secret("", "s1"));
    }

    /// A listener on 127.0.0.1 and the task waiting for its callback with state `s1`.
    async fn listening() -> (u16, tokio::task::JoinHandle<Outcome>) {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
        (
            port,
            tokio::spawn(async move { callback(&listener, "s1").await }),
        )
    }

    async fn get(port: u16, target: &str) -> String {
        let mut stream = TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let request = format!("GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
        let _ = stream.write_all(request.as_bytes()).await;
        let mut text = String::new();
        let _ = stream.read_to_string(&mut text).await;
        text
    }

    #[tokio::test]
    async fn a_wrong_state_is_ignored_and_a_silent_peer_stalls_nothing() {
        let (port, login) = listening().await;
        let silent = TcpStream::connect(("127.0.0.1", port)).await;
        let forged = get(port, "/callback?code=x&state=forged").await;
        assert!(forged.starts_with("HTTP/1.1 400"), "{forged}");
        assert!(forged.contains("ignored"), "{forged}");
        assert!(!login.is_finished(), "a wrong state ended the login");
        let real = get(port, "/callback?code=c1&state=s1").await;
        assert!(real.starts_with("HTTP/1.1 200"), "{real}");
        let outcome = login.await.unwrap_or_else(|e| panic!("{e}"));
        assert!(outcome.is_ok_and(|c| c.code == "c1"));
        drop(silent);
    }
}

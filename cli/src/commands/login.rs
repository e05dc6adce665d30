//! `tutti connector connect KEY` of an OAuth connector (SPEC §10): the browser login.
//!
//! The CLI owns the user's side: the loopback redirect listener (127.0.0.1, an ephemeral
//! port, `/callback`, one request, `state` checked), the browser (the platform's own opener,
//! no shell) or the printed URL, the 5-minute bound and Ctrl-C. The kernel owns the server
//! side (discovery, client identity, the code exchange) and the tokens, which never reach
//! this process: it passes on the code and state of the redirect only.

use std::collections::HashMap;
use std::process::ExitCode;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tutti_proto::kernel::{BeginLoginRequest, CompleteLoginRequest, Empty};

use crate::error::CliError;
use crate::kernel::Kernel;
use crate::output::emit;

/// How long the login may take, from the URL to the connector's status.
const LOGIN_BOUND: Duration = Duration::from_secs(5 * 60);
/// The longest request head the callback listener reads.
const MAX_HEAD: usize = 16 * 1024;

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
    if no_browser || !open_browser(&begun.authorization_url) {
        eprintln!("open this URL in a browser to log in to {key}:");
        // The URL holds no secret (the PKCE challenge, the state and the client id).
        eprintln!("{}", begun.authorization_url);
    } else {
        eprintln!("opened the login page of {key} in your browser");
    }
    eprintln!("waiting for the login on 127.0.0.1:{port} (at most 5 minutes; Ctrl-C cancels)");
    let callback = tokio::select! {
        got = tokio::time::timeout(LOGIN_BOUND, callback(&listener, &begun.state)) => match got {
            Ok(got) => got.map_err(|reason| login_error(key, reason))?,
            Err(_) => return Err(login_error(key, "no login within 5 minutes")),
        },
        _ = tokio::signal::ctrl_c() => return Err(login_error(key, "cancelled")),
    };
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
    let line = if json {
        let mut out = serde_json::json!({"key": key, "status": status});
        if !account.is_empty() {
            out["account"] = account.into();
        }
        format!("{out}\n")
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

/// Serves the one `/callback` request (other paths, e.g. a browser's favicon request, get a
/// 404 and are not counted). A wrong `state` is refused.
async fn callback(listener: &TcpListener, expected_state: &str) -> Result<Callback, String> {
    loop {
        let (mut stream, _) = listener.accept().await.map_err(|e| e.to_string())?;
        let Some(target) = read_target(&mut stream).await else {
            continue;
        };
        let (path, query) = target.split_once('?').unwrap_or((target.as_str(), ""));
        if path != "/callback" {
            let _ = respond(&mut stream, "404 Not Found", "not found").await;
            continue;
        }
        let params = parse_query(query);
        let outcome = check(&params, expected_state);
        let page = match &outcome {
            Ok(_) => "Login complete. You can close this tab and return to the terminal.",
            Err(reason) => reason.as_str(),
        };
        let code = if outcome.is_ok() {
            "200 OK"
        } else {
            "400 Bad Request"
        };
        let _ = respond(&mut stream, code, page).await;
        return outcome;
    }
}

fn check(params: &HashMap<String, String>, expected_state: &str) -> Result<Callback, String> {
    let state = params.get("state").cloned().unwrap_or_default();
    if state != expected_state {
        return Err(tutti_oauth::OAuthError::StateMismatch.to_string());
    }
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
async fn read_target(stream: &mut tokio::net::TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut buf = [0u8; 2048];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD {
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
            .await
            .ok()?
            .ok()?;
        if read == 0 {
            break;
        }
        head.extend_from_slice(&buf[..read]);
    }
    let text = String::from_utf8_lossy(&head);
    let mut parts = text.lines().next()?.split(' ');
    (parts.next()? == "GET").then(|| parts.next().map(str::to_owned))?
}

async fn respond(
    stream: &mut tokio::net::TcpStream,
    status: &str,
    body: &str,
) -> std::io::Result<()> {
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

/// Opens `url` with the platform's own opener, without a shell. False when none started.
fn open_browser(url: &str) -> bool {
    #[cfg(target_os = "macos")]
    let mut command = std::process::Command::new("open");
    #[cfg(windows)]
    let mut command = {
        let mut c = std::process::Command::new("rundll32");
        c.arg("url.dll,FileProtocolHandler");
        c
    };
    #[cfg(all(unix, not(target_os = "macos")))]
    let mut command = std::process::Command::new("xdg-open");
    command
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_callback_is_checked_state_first() {
        let params = parse_query("code=abc%2Fd&state=s1&iss=https%3A%2F%2Fas.example");
        let ok = check(&params, "s1").map_err(|e| e.to_string());
        assert!(
            ok.as_ref().is_ok_and(|c| c.code == "abc/d"),
            "{:?}",
            ok.err()
        );
        assert_eq!(
            ok.ok().and_then(|c| c.iss).as_deref(),
            Some("https://as.example")
        );
        let wrong = check(&params, "other").err().unwrap_or_default();
        assert!(wrong.contains("state does not match"), "{wrong}");
        let denied = parse_query("error=access_denied&state=s1");
        assert!(check(&denied, "s1").is_err());
        assert_eq!(percent_decode("%zz"), None);
    }
}

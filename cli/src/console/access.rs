//! Who may use the console (SPEC §13): the loopback Host/Origin rule of SPEC §5 (403), the
//! one-time login that sets an `HttpOnly`, `SameSite=Strict` cookie, the cookie on every
//! other request (401), and a per-page CSRF token on every change (403). Only SHA-256
//! hashes of the login token, cookies and CSRF tokens are kept, and lookups are by hash.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;

use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};
use tutti_rules::loopback;

/// What every handler shares (here, beside the access tables it holds, so that every
/// module of the console depends on this one and none on the console's root).
pub(crate) struct Console {
    pub(crate) state_dir: std::path::PathBuf,
    pub(crate) access: Access,
    /// The page that hands the login URL to the browser, until the login is used.
    pub(crate) page: Mutex<Option<crate::browser::Opened>>,
}

impl Console {
    pub(crate) fn keep_page(&self, page: crate::browser::Opened) {
        *self.page.lock().unwrap_or_else(|p| p.into_inner()) = Some(page);
    }

    /// The login URL did its work: its page goes.
    fn drop_page(&self) {
        drop(self.page.lock().unwrap_or_else(|p| p.into_inner()).take());
    }
}

pub(crate) type Shared = std::sync::Arc<Console>;

const COOKIE: &str = "tutti_console";
/// CSRF tokens kept (the oldest go first): one per page shown.
const MAX_CSRF: usize = 4096;

/// The content security policy: nothing inline, nothing from another origin.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

type Hash = [u8; 32];

fn hash(value: &str) -> Hash {
    Sha256::digest(value.as_bytes()).into()
}

/// 32 random bytes from the OS, base64url.
fn random_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

/// The login token, the signed-in browsers and the CSRF tokens of the pages shown.
#[derive(Default)]
pub(crate) struct Access {
    inner: Mutex<Tables>,
}

#[derive(Default)]
struct Tables {
    /// Cleared when used: the login URL works once.
    login: Option<Hash>,
    sessions: HashSet<Hash>,
    /// CSRF token → the browser session it was shown to.
    csrf: HashMap<Hash, Hash>,
    csrf_order: VecDeque<Hash>,
}

/// The signed-in browser a request comes from (its cookie's hash).
#[derive(Clone, Copy)]
pub(crate) struct Session(Hash);

impl Access {
    fn tables(&self) -> std::sync::MutexGuard<'_, Tables> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new one-time login token (replacing any unused one).
    pub(crate) fn new_login(&self) -> std::io::Result<String> {
        let token = random_token()?;
        self.tables().login = Some(hash(&token));
        Ok(token)
    }

    /// Uses the login token: a new browser session's cookie value if it matched.
    fn sign_in(&self, token: &str) -> Option<String> {
        let mut t = self.tables();
        if t.login != Some(hash(token)) {
            return None;
        }
        let cookie = random_token().ok()?;
        t.login = None;
        t.sessions.insert(hash(&cookie));
        Some(cookie)
    }

    fn session_of(&self, headers: &HeaderMap) -> Option<Session> {
        let value = cookie_value(headers)?;
        let h = hash(value);
        self.tables().sessions.contains(&h).then_some(Session(h))
    }

    /// A fresh CSRF token for one page shown to `session`.
    pub(crate) fn csrf_for(&self, session: Session) -> String {
        // Without randomness no form works; the page then says to reload.
        let Ok(token) = random_token() else {
            return String::new();
        };
        let mut t = self.tables();
        let h = hash(&token);
        t.csrf.insert(h, session.0);
        t.csrf_order.push_back(h);
        while t.csrf_order.len() > MAX_CSRF {
            if let Some(old) = t.csrf_order.pop_front() {
                t.csrf.remove(&old);
            }
        }
        token
    }

    /// The token was shown by this console to this browser.
    pub(crate) fn csrf_ok(&self, session: Session, token: &str) -> bool {
        !token.is_empty() && self.tables().csrf.get(&hash(token)) == Some(&session.0)
    }
}

/// The value of our cookie in the request's `Cookie` headers.
fn cookie_value(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| {
            let (name, value) = pair.trim().split_once('=')?;
            (name == COOKIE && !value.is_empty()).then_some(value)
        })
}

/// SPEC §5's rule: one `Host` naming a loopback host; an `Origin`, if any, `http://` loopback.
fn host_and_origin_allowed(headers: &HeaderMap) -> bool {
    let single = |name: header::HeaderName| {
        let mut values = headers.get_all(name).iter();
        match (values.next(), values.next()) {
            (None, _) => Ok(None),
            (Some(v), None) => v.to_str().map(|v| Some(v.trim())).map_err(|_| ()),
            _ => Err(()),
        }
    };
    let host_ok = matches!(single(header::HOST), Ok(Some(h)) if loopback::is_loopback_authority(h));
    let origin_ok = match single(header::ORIGIN) {
        Ok(None) => true,
        Ok(Some(o)) => loopback::is_loopback_origin(o),
        Err(()) => false,
    };
    host_ok && origin_ok
}

/// Every request: Host/Origin (403), then the cookie (401) except for the login itself.
pub(crate) async fn guard(State(console): State<Shared>, mut req: Request, next: Next) -> Response {
    if !host_and_origin_allowed(req.headers()) {
        return refusal(
            StatusCode::FORBIDDEN,
            "forbidden: the console answers only to http://127.0.0.1 (Host and Origin)",
        );
    }
    if req.uri().path() == "/login" {
        return next.run(req).await;
    }
    match console.access.session_of(req.headers()) {
        Some(session) => {
            req.extensions_mut().insert(session);
            next.run(req).await
        }
        None => refusal(
            StatusCode::UNAUTHORIZED,
            "not signed in: open the one-time login URL that `tutti console` printed (run it again for a new one)",
        ),
    }
}

fn refusal(status: StatusCode, text: &'static str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        text,
    )
        .into_response()
}

#[derive(serde::Deserialize)]
pub(crate) struct LoginQuery {
    #[serde(default)]
    token: String,
}

/// `GET /login?token=…`: works once; sets the cookie and goes to the connectors page.
pub(crate) async fn login(State(console): State<Shared>, Query(q): Query<LoginQuery>) -> Response {
    let Some(cookie) = console.access.sign_in(&q.token) else {
        return refusal(
            StatusCode::UNAUTHORIZED,
            "this login link is not valid or was used already: run `tutti console` again for a new one",
        );
    };
    console.drop_page();
    let set = format!("{COOKIE}={cookie}; HttpOnly; SameSite=Strict; Path=/");
    let mut response = Redirect::to("/").into_response();
    match HeaderValue::from_str(&set) {
        Ok(v) => {
            response.headers_mut().insert(header::SET_COOKIE, v);
            response
        }
        Err(_) => refusal(StatusCode::INTERNAL_SERVER_ERROR, "cannot set the cookie"),
    }
}

/// On every response: the CSP, no caching, no referrer to other origins (the login URL;
/// `no-referrer` would make browsers send `Origin: null` on our own forms), no framing, no
/// sniffing. No CORS header is ever added.
pub(crate) async fn security_headers(req: Request, next: Next) -> Response {
    let mut response = next.run(req).await;
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn login_works_once_and_csrf_is_bound_to_the_browser() {
        let access = Access::default();
        let login = access.new_login().unwrap_or_default();
        assert!(access.sign_in("wrong").is_none());
        let cookie = access.sign_in(&login).unwrap_or_default();
        assert!(!cookie.is_empty());
        assert!(access.sign_in(&login).is_none(), "the login URL works once");
        let mut headers = HeaderMap::new();
        let value = format!("a=b; {COOKIE}={cookie}");
        headers.insert(
            header::COOKIE,
            HeaderValue::from_str(&value).unwrap_or(HeaderValue::from_static("")),
        );
        let session = access.session_of(&headers);
        assert!(session.is_some());
        if let Some(session) = session {
            let token = access.csrf_for(session);
            assert!(access.csrf_ok(session, &token));
            assert!(!access.csrf_ok(session, ""));
            assert!(!access.csrf_ok(Session([0; 32]), &token));
        }
    }

    #[test]
    fn host_and_origin_follow_the_frontend_rule() {
        let mut h = HeaderMap::new();
        assert!(!host_and_origin_allowed(&h), "a missing Host fails");
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:9"));
        assert!(host_and_origin_allowed(&h));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        assert!(!host_and_origin_allowed(&h));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://localhost:9"),
        );
        assert!(host_and_origin_allowed(&h));
        h.insert(header::HOST, HeaderValue::from_static("evil.example"));
        assert!(!host_and_origin_allowed(&h));
    }
}

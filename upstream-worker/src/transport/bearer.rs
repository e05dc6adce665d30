//! The access token of an OAuth upstream (SPEC §10). The kernel holds the login and does the
//! refresh (one at a time per connector, rotation stored under `secrets/`); this is the
//! worker's copy of the current access token: renewed before it expires (the margin scales
//! with the token's lifetime, `tutti_rules::token_refresh`) and once after a 401, by
//! asking the kernel (`RefreshWorkerToken`, through the [`Refresher`] the worker gives). Every
//! token is added to the log's redactor before it is used.

use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use tutti_rules::token_refresh::refresh_margin_ms;

/// Asks the kernel for a fresh token; the argument is the token the upstream refused (empty
/// for a renewal before expiry). `Err` is the reason, without any token.
pub(crate) type Refresher =
    Arc<dyn Fn(String) -> BoxFuture<'static, Result<(String, i64), String>> + Send + Sync>;

pub(crate) struct Bearer {
    current: tokio::sync::Mutex<Token>,
    refresher: Refresher,
    /// Why a refresh failed (the connector needs a new login).
    failure: Mutex<Option<String>>,
    /// The scope a `403 insufficient_scope` asked for.
    step_up: Mutex<Option<String>>,
}

/// One access token as the worker received it.
struct Token {
    value: String,
    /// Unix ms; 0 when the server gave no lifetime (never renewed before a 401).
    expires_unix_ms: i64,
    /// Renewed once it has this little left: from its lifetime as seen when it was received.
    margin_ms: i64,
}

impl Token {
    /// A token just received: known to the log's redactor from now on.
    fn received(value: String, expires_unix_ms: i64) -> Self {
        crate::redact::learn(&value);
        Self {
            margin_ms: refresh_margin_ms(expires_unix_ms - now_ms()),
            value,
            expires_unix_ms,
        }
    }

    fn due(&self) -> bool {
        self.expires_unix_ms != 0 && self.expires_unix_ms - now_ms() <= self.margin_ms
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl Bearer {
    /// `authorization` is the launch spec's `Authorization` header (`Bearer …`).
    pub(crate) fn new(authorization: &str, expires_unix_ms: i64, refresher: Refresher) -> Self {
        let token = authorization
            .strip_prefix("Bearer ")
            .unwrap_or_default()
            .to_owned();
        Self {
            current: tokio::sync::Mutex::new(Token::received(token, expires_unix_ms)),
            refresher,
            failure: Mutex::new(None),
            step_up: Mutex::new(None),
        }
    }

    /// The token to send now: renewed first when it expires within the margin.
    pub(crate) async fn token(&self) -> Result<String, String> {
        let mut current = self.current.lock().await;
        if current.due() {
            *current = self.renew(String::new()).await?;
        }
        Ok(current.value.clone())
    }

    /// The upstream refused `rejected`: one renewal (another request may have renewed it
    /// meanwhile; then that token is used).
    pub(crate) async fn after_401(&self, rejected: &str) -> Result<String, String> {
        let mut current = self.current.lock().await;
        if current.value == rejected {
            *current = self.renew(rejected.to_owned()).await?;
        }
        Ok(current.value.clone())
    }

    async fn renew(&self, rejected: String) -> Result<Token, String> {
        match (self.refresher)(rejected).await {
            Ok((value, expires_unix_ms)) => Ok(Token::received(value, expires_unix_ms)),
            Err(reason) => {
                *self.failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason.clone());
                Err(reason)
            }
        }
    }

    /// A `403` whose challenge is `insufficient_scope`: remembers the scope it names.
    pub(crate) fn note_forbidden(&self, challenge: &str) {
        if !challenge.contains("insufficient_scope") {
            return;
        }
        let scope = challenge
            .split("scope=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .unwrap_or_default();
        *self.step_up.lock().unwrap_or_else(|p| p.into_inner()) = Some(scope.to_owned());
    }

    /// Why this worker's connector needs a new login, and the step-up scope if any.
    pub(crate) fn needs_login(&self) -> Option<(String, String)> {
        if let Some(scope) = self
            .step_up
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        {
            let message = format!(
                "the upstream asked for more access (403 insufficient_scope, scope \"{scope}\")"
            );
            return Some((message, scope));
        }
        let failure = self
            .failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        failure.map(|reason| (reason, String::new()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn counting(calls: Arc<AtomicU32>) -> Refresher {
        Arc::new(move |_rejected| {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            Box::pin(async move { Ok((format!("t{n}"), now_ms() + 3_600_000)) })
        })
    }

    #[tokio::test]
    async fn renews_before_expiry_and_once_per_refused_token() {
        let calls = Arc::new(AtomicU32::new(0));
        let b = Bearer::new("Bearer t0", now_ms() + 1_000, counting(calls.clone()));
        assert_eq!(b.token().await.as_deref(), Ok("t1"));
        assert_eq!(b.token().await.as_deref(), Ok("t1"));
        // Two requests refused with the same token: one renewal.
        assert_eq!(b.after_401("t1").await.as_deref(), Ok("t2"));
        assert_eq!(b.after_401("t1").await.as_deref(), Ok("t2"));
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_short_lived_token_is_renewed_only_in_its_last_seconds() {
        let calls = Arc::new(AtomicU32::new(0));
        // 20 s: renewed 5 s before expiry, not before every request.
        let b = Bearer::new("Bearer t0", now_ms() + 20_000, counting(calls.clone()));
        assert_eq!(b.token().await.as_deref(), Ok("t0"));
        let b = Bearer::new("Bearer t0", now_ms() + 4_000, counting(calls.clone()));
        assert_eq!(b.token().await.as_deref(), Ok("t1"));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn insufficient_scope_names_the_scope() {
        let b = Bearer::new("Bearer x", 0, counting(Arc::default()));
        b.note_forbidden("Bearer error=\"invalid_token\"");
        assert!(b.needs_login().is_none());
        b.note_forbidden("Bearer error=\"insufficient_scope\", scope=\"tools:write\"");
        assert_eq!(b.needs_login().map(|n| n.1).as_deref(), Some("tools:write"));
    }
}

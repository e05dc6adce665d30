//! OAuth connectors (SPEC §10) on the kernel's side: the login's server steps (begin,
//! complete), the refreshes workers ask for, the step-up and revocation. The tokens live in
//! the connector's `secrets/` file under [`LOGIN`] and leave the kernel only in the
//! LaunchSpec and the refresh answers of that connector's own workers.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tonic::Status;
use tutti_oauth::{ClientSettings, Grant, OAuthError};
use tutti_proto::kernel as pb;
use tutti_rules::token_refresh::refresh_margin_ms;

use crate::audit::Event;
use crate::connect::oauth_record::{LOGIN, Record, oauth_of, record};
use crate::state::{Kernel, lock};

/// A login not completed within this is forgotten (the CLI gives up after 5 minutes).
const PENDING_FOR: Duration = Duration::from_secs(6 * 60);

fn save(k: &Kernel, key: &str, record: &Record) -> Result<(), Status> {
    let json = serde_json::to_string(record).map_err(|e| Status::internal(e.to_string()))?;
    k.secrets
        .store(key, &BTreeMap::from([(LOGIN.to_owned(), json)]))
        .map_err(|e| Status::internal(e.to_string()))
}

/// Sets the registry's auth state from the stored secrets and login (after a login, a
/// failed refresh, a step-up).
fn settle_auth(k: &Kernel, key: &str) -> Result<(), Status> {
    let mut inner = lock(&k.inner);
    let Some(manifest) = inner.manifests.get(key).cloned() else {
        return Ok(());
    };
    let auth = k.auth_state(key, &manifest, true);
    if let Some(c) = inner.registry.connectors.get_mut(key) {
        c.connected = true;
        c.auth = auth;
    }
    k.save_registry(&mut inner)
        .map_err(|e| Status::internal(e.to_string()))
}

fn settings(k: &Kernel, key: &str) -> Result<ClientSettings, Status> {
    let manifest = lock(&k.inner)
        .manifests
        .get(key)
        .cloned()
        .ok_or_else(|| Status::not_found(format!("{key} is not installed")))?;
    let Some((url, o)) = oauth_of(&manifest) else {
        return Err(Status::failed_precondition(format!(
            "{key} does not use an OAuth login; give its secrets with --from-env NAME or --stdin NAME"
        )));
    };
    let stored = k.secrets.load(key);
    let client_secret = match &o.client_secret {
        Some(name) => Some(stored.get(name).cloned().ok_or_else(|| {
            Status::failed_precondition(format!(
                "{key} needs its client secret {name}; run `tutti connector connect {key} --from-env {name}`"
            ))
        })?),
        None => None,
    };
    Ok(ClientSettings {
        url: url.to_owned(),
        scopes: o.scopes.clone(),
        client_id: o.client_id.clone(),
        client_secret,
        client_metadata_url: o.client_metadata_url.clone(),
    })
}

/// Only the loopback redirect of our own CLI (RFC 8252 §7.3).
fn check_redirect(uri: &str) -> Result<(), Status> {
    let ok = uri
        .strip_prefix("http://127.0.0.1:")
        .and_then(|rest| rest.strip_suffix("/callback"))
        .is_some_and(|port| port.parse::<u16>().is_ok_and(|p| p != 0));
    if ok {
        Ok(())
    } else {
        Err(Status::invalid_argument(
            "the redirect URI must be http://127.0.0.1:<port>/callback",
        ))
    }
}

fn login_id() -> String {
    let mut bytes = [0u8; 16];
    let _ = getrandom::fill(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn refused(key: &str, e: &OAuthError) -> Status {
    Status::failed_precondition(format!("the login of {key} failed: {e}"))
}

pub async fn begin(k: &Kernel, req: pb::BeginLoginRequest) -> Result<pb::BeginLoginReply, Status> {
    check_redirect(&req.redirect_uri)?;
    let settings = settings(k, &req.key)?;
    let stored = record(&k.secrets.load(&req.key));
    let pending = tutti_oauth::login::begin(
        &settings,
        &req.redirect_uri,
        stored.step_up.as_deref(),
        stored.client.as_ref(),
    )
    .await
    .map_err(|e| refused(&req.key, &e))?;
    // The URL goes to the user's browser: the endpoint rule once more, right before it leaves.
    tutti_oauth::OAuthHttp::for_mcp_url(&settings.url)
        .await
        .and_then(|http| {
            http.reach()
                .check_endpoint("authorization_endpoint", pending.authorization_url())
        })
        .map_err(|e| refused(&req.key, &e))?;
    let reply = pb::BeginLoginReply {
        login_id: login_id(),
        authorization_url: pending.authorization_url().to_owned(),
        state: pending.state().to_owned(),
        scopes: pending.scopes().join(" "),
    };
    let mut logins = lock(&k.oauth.pending);
    logins.retain(|_, (_, started, _)| started.elapsed() < PENDING_FOR);
    logins.insert(
        reply.login_id.clone(),
        (req.key.clone(), Instant::now(), pending),
    );
    Ok(reply)
}

/// Exchanges the code, stores the login and marks the connector ready to start (the caller
/// reloads it).
pub async fn complete(k: &Kernel, req: pb::CompleteLoginRequest) -> Result<(), Status> {
    let pending = lock(&k.oauth.pending).remove(&req.login_id);
    let Some((key, _, pending)) = pending.filter(|(key, _, _)| *key == req.key) else {
        return Err(Status::failed_precondition(format!(
            "no login of {} is in progress (it expired or was completed); run `tutti connector connect {}` again",
            req.key, req.key
        )));
    };
    let iss = (!req.iss.is_empty()).then_some(req.iss.as_str());
    let client = pending.registered_client().cloned();
    let grant = match pending.complete(&req.code, &req.state, iss).await {
        Ok(grant) => grant,
        Err(e @ OAuthError::StateMismatch) => return Err(Status::invalid_argument(e.to_string())),
        Err(e) => {
            if e.refuses_client() {
                forget_client(k, &key);
            }
            return Err(refused(&key, &e));
        }
    };
    k.audit.record(Event::OauthLogin {
        connector: key.clone(),
        scopes: grant.scopes.clone(),
        expires_unix_ms: grant.expires_unix_ms,
    });
    save(
        k,
        &key,
        &Record {
            grant: Some(grant),
            client,
            ..Record::default()
        },
    )?;
    settle_auth(k, &key)
}

/// The server refused the registered client: the next login registers a new one.
fn forget_client(k: &Kernel, key: &str) {
    let mut rec = record(&k.secrets.load(key));
    if rec.client.take().is_some()
        && let Err(e) = save(k, key, &rec)
    {
        tracing::warn!(key, error = %e.message(), "could not forget the refused client");
    }
}

fn refresh_turn(k: &Kernel, key: &str) -> Arc<tokio::sync::Mutex<()>> {
    lock(&k.oauth.refresh)
        .entry(key.to_owned())
        .or_default()
        .clone()
}

fn token_reply(grant: &Grant) -> pb::RefreshWorkerTokenReply {
    pb::RefreshWorkerTokenReply {
        access_token: grant.access_token().unwrap_or_default().to_owned(),
        expires_unix_ms: grant.expires_unix_ms,
    }
}

/// A worker's refresh (the caller checked that it is a live worker of `key`): one at a time
/// per connector; a worker whose token another refresh already replaced gets the new one.
pub async fn refresh(
    k: &Kernel,
    key: &str,
    rejected: &str,
) -> Result<pb::RefreshWorkerTokenReply, Status> {
    let turn = refresh_turn(k, key);
    let _turn = turn.lock().await;
    let mut rec = record(&k.secrets.load(key));
    let Some(grant) = rec.grant.clone().filter(|_| !rec.needs_login) else {
        return Err(Status::failed_precondition(format!(
            "{key} is not logged in; run `tutti connector connect {key}`"
        )));
    };
    let replaced = !rejected.is_empty() && grant.access_token() != Some(rejected);
    if (rejected.is_empty() || replaced)
        && !grant.expires_within(refresh_margin_ms(grant.lifetime_ms()))
    {
        return Ok(token_reply(&grant));
    }
    match grant.refresh().await {
        Ok(next) => {
            k.audit.record(Event::OauthRefresh {
                connector: key.to_owned(),
                rotated: next.refresh_token() != grant.refresh_token(),
                expires_unix_ms: next.expires_unix_ms,
            });
            let reply = token_reply(&next);
            rec.grant = Some(next);
            save(k, key, &rec)?;
            tracing::info!(key, "access token refreshed");
            Ok(reply)
        }
        Err(e) => {
            let reason = e.to_string();
            tracing::warn!(key, %reason, "refresh failed");
            k.audit.record(Event::OauthRefreshFailed {
                connector: key.to_owned(),
                reason: reason.clone(),
            });
            rec.needs_login = true;
            if e.refuses_client() {
                rec.client = None;
            }
            save(k, key, &rec)?;
            settle_auth(k, key)?;
            Err(Status::failed_precondition(format!(
                "the login expired ({reason})"
            )))
        }
    }
}

/// A worker saw `403 insufficient_scope`: the next login asks for `scope` too.
pub fn step_up(k: &Kernel, key: &str, scope: &str) {
    let mut rec = record(&k.secrets.load(key));
    rec.needs_login = true;
    if !scope.is_empty() {
        rec.step_up = Some(scope.to_owned());
    }
    if let Err(e) = save(k, key, &rec).and_then(|()| settle_auth(k, key)) {
        tracing::warn!(key, error = %e.message(), "could not record the step-up");
    }
}

/// `disconnect`: revoke at the server where it offers revocation (before the tokens are
/// deleted by the caller).
pub async fn revoke(k: &Kernel, key: &str) {
    revoke_stored(k, key, &k.secrets.load(key)).await;
}

/// The OAuth logins among the secrets [`crate::housekeeping::reclaim`] deleted at start (an
/// uninstall or a disconnect a crash cut short before they were revoked): revoked at their
/// servers in the background, as the uninstall or disconnect would have.
pub fn revoke_reclaimed(k: &Arc<Kernel>, reclaimed: crate::housekeeping::Reclaimed) {
    for (key, stored) in reclaimed {
        tracing::info!(
            key,
            "deleted the secrets of a connector no longer installed or connected"
        );
        if record(&stored).grant.is_some() {
            let k = k.clone();
            tokio::spawn(async move { revoke_stored(&k, &key, &stored).await });
        }
    }
}

async fn revoke_stored(k: &Kernel, key: &str, stored: &BTreeMap<String, String>) {
    let Some(grant) = record(stored).grant else {
        return;
    };
    let outcome = match grant.revoke().await {
        Ok(true) => "revoked".to_owned(),
        Ok(false) => "not_offered".to_owned(),
        Err(e) => {
            tracing::warn!(key, error = %e, "the tokens were deleted but not revoked at the server");
            format!("failed: {e}")
        }
    };
    k.audit.record(Event::OauthRevoke {
        connector: key.to_owned(),
        outcome,
    });
}

/// For `status`: when the access token expires (0 when unknown or not logged in), as kept
/// by the secret store when the tokens were stored (no file is read).
pub fn expiry(k: &Kernel, key: &str) -> i64 {
    k.secrets.token_expiry(key)
}

/// For `status`: the account the login belongs to, where the server said which (empty
/// otherwise), kept in memory like the expiry.
pub fn account(k: &Kernel, key: &str) -> String {
    k.secrets.account(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connect::oauth_record::secret_values;

    #[test]
    fn only_our_loopback_callback_is_a_redirect() {
        assert!(check_redirect("http://127.0.0.1:43123/callback").is_ok());
        for bad in [
            "http://localhost:43123/callback",
            "http://127.0.0.1:0/callback",
            "https://evil.example/callback",
            "http://127.0.0.1:43123/other",
        ] {
            assert!(check_redirect(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_login_record_is_masked_by_its_tokens_not_as_one_value() {
        let stored = BTreeMap::from([
            ("API".to_owned(), "plain-secret".to_owned()),
            (LOGIN.to_owned(), "{\"needsLogin\":true}".to_owned()),
        ]);
        assert_eq!(secret_values(&stored), vec!["plain-secret".to_owned()]);
        assert!(!record(&stored).logged_in());
    }
}

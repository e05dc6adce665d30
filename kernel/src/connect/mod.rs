//! Connecting a connector: its secrets ([`connect`], [`disconnect`]), or an OAuth login
//! (`oauth`, with the token record it keeps in `oauth_record`; [`complete_login`]).

pub(crate) mod oauth;
pub(crate) mod oauth_record;

use std::collections::BTreeMap;
use std::sync::Arc;

use tonic::Status;
use tutti_proto::kernel as pb;

use crate::audit::Event;
use crate::guards::{check_unchanged, manifest_of, not_installed, precondition};
use crate::lifecycle::Input;
use crate::registry::AuthState;
use crate::state::{Kernel, lock};
use crate::supervisor::{reload, step_now};

/// Stores the secrets given for a connector and (re)starts it; refuses a name it does not
/// declare or an empty value, and names the secrets it still lacks.
pub async fn connect(k: &Arc<Kernel>, req: pb::ConnectRequest) -> Result<(), Status> {
    let _admin = k.admin.lock().await;
    let declared = {
        let inner = lock(&k.inner);
        let declared = manifest_of(&inner, &req.key)?.secret_names();
        check_unchanged(&inner, &req.key, &req.expected_sha256)?;
        declared
    };
    check_given(&req, &declared)?;
    let values: BTreeMap<String, String> = req.secrets.into_iter().collect();
    k.secrets
        .store(&req.key, &values)
        .map_err(|e| Status::internal(e.to_string()))?;
    let missing: Vec<String> = {
        let stored = k.secrets.load(&req.key);
        declared
            .iter()
            .filter(|n| !stored.contains_key(*n))
            .cloned()
            .collect()
    };
    {
        let mut inner = lock(&k.inner);
        let manifest = manifest_of(&inner, &req.key)?.clone();
        let auth = k.auth_state(&req.key, &manifest, true);
        if let Some(c) = inner.registry.connectors.get_mut(&req.key) {
            c.connected = true;
            c.auth = auth;
        }
        k.save_registry(&mut inner).map_err(|e| {
            Status::internal(format!(
                "the values of {} were saved, but the registry could not be written: {e}",
                values.keys().cloned().collect::<Vec<_>>().join(", ")
            ))
        })?;
    }
    k.audit.record(Event::Connect {
        connector: req.key.clone(),
        secrets: values.keys().cloned().collect(),
        missing: missing.clone(),
    });
    reload(k, &req.key);
    if !missing.is_empty() {
        return Err(precondition(missing_secrets_message(
            &req.key,
            &missing,
            !values.is_empty(),
        )));
    }
    Ok(())
}

/// Every secret given is one the connector declares, and none is empty.
fn check_given(req: &pb::ConnectRequest, declared: &[String]) -> Result<(), Status> {
    for name in req.secrets.keys() {
        if !declared.contains(name) {
            return Err(Status::invalid_argument(format!(
                "{name} is not a secret of {} (declared: {})",
                req.key,
                if declared.is_empty() {
                    "none".to_string()
                } else {
                    declared.join(", ")
                }
            )));
        }
    }
    for (name, value) in &req.secrets {
        if value.is_empty() {
            return Err(Status::invalid_argument(format!(
                "the value given for {name} is empty"
            )));
        }
    }
    Ok(())
}

/// Stops the connector and forgets its credentials (an OAuth login is revoked first).
pub async fn disconnect(k: &Arc<Kernel>, key: &str, expected_sha256: &str) -> Result<(), Status> {
    let _admin = k.admin.lock().await;
    {
        let mut inner = lock(&k.inner);
        check_unchanged(&inner, key, expected_sha256)?;
        let c = inner
            .registry
            .connectors
            .get_mut(key)
            .ok_or_else(|| not_installed(key))?;
        c.connected = false;
        c.auth = AuthState::Required;
        step_now(k, &mut inner, key, Input::Disconnect);
        k.save_registry(&mut inner)
            .map_err(|e| Status::internal(e.to_string()))?;
    }
    oauth::revoke(k, key).await;
    k.secrets.delete(key);
    k.audit.record(Event::Disconnect {
        connector: key.to_owned(),
    });
    reload(k, key);
    Ok(())
}

/// The redirect of an OAuth login came back: exchange the code, store the tokens, start the
/// connector.
pub async fn complete_login(k: &Arc<Kernel>, req: pb::CompleteLoginRequest) -> Result<(), Status> {
    let _admin = k.admin.lock().await;
    let key = req.key.clone();
    oauth::complete(k, req).await?;
    reload(k, &key);
    Ok(())
}

/// `connect` stored what it was given but the connector still lacks secrets: name them and
/// the command that supplies them.
fn missing_secrets_message(key: &str, missing: &[String], stored_some: bool) -> String {
    let first = missing.first().map(String::as_str).unwrap_or("NAME");
    let plural = missing.len() > 1;
    format!(
        "connector {key} still needs the secret{s} {names} before it can run{stored}; run \
         `tutti connector connect {key} --from-env {first}` (or `--stdin {first}`){each}",
        s = if plural { "s" } else { "" },
        names = missing.join(", "),
        stored = if stored_some {
            " (the values given were stored)"
        } else {
            ""
        },
        each = if plural {
            ", naming every missing secret"
        } else {
            ""
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_secret_message_names_the_secrets_and_the_fix() {
        let one = missing_secrets_message("gh", &["GITHUB_TOKEN".into()], true);
        assert_eq!(
            one,
            "connector gh still needs the secret GITHUB_TOKEN before it can run (the values given were stored); run `tutti connector connect gh --from-env GITHUB_TOKEN` (or `--stdin GITHUB_TOKEN`)"
        );
        let two = missing_secrets_message("gh", &["A".into(), "B".into()], false);
        assert!(two.starts_with("connector gh still needs the secrets A, B before it can run; run `tutti connector connect gh --from-env A`"), "{two}");
        assert!(two.ends_with("naming every missing secret"), "{two}");
    }
}

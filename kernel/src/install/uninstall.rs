//! Taking a connector away: stop and fence it, forget it, revoke its OAuth login, delete its
//! secrets and its releases.

use std::sync::Arc;

use tonic::Status;

use crate::audit::Event;
use crate::guards::{check_unchanged, not_installed};
use crate::lifecycle::{Input, Msg};
use crate::state::{Kernel, lock};

/// Uninstalls `key`; `expected_sha256` (a console page) refuses it if the installed release
/// changed since the page was opened.
pub async fn uninstall(k: &Arc<Kernel>, key: &str, expected_sha256: &str) -> Result<(), Status> {
    let _admin = k.admin.lock().await;
    let tx = {
        let inner = lock(&k.inner);
        if !inner.registry.connectors.contains_key(key) {
            return Err(not_installed(key));
        }
        check_unchanged(&inner, key, expected_sha256)?;
        inner.actors.get(key).cloned()
    };
    if let Some(tx) = tx {
        let (done, wait) = tokio::sync::oneshot::channel();
        let _ = tx.send(Msg {
            input: Input::Stop {
                reason: "uninstalled".into(),
                drain: crate::supervisor::UNINSTALL_DRAIN,
            },
            reply: Some(done),
        });
        let _ = wait.await;
    }
    {
        let mut inner = lock(&k.inner);
        k.fence(&mut inner, key, None, "uninstalled");
        inner.actors.remove(key);
        inner.conns.remove(key);
        inner.manifests.remove(key);
        inner.live_releases.remove(key);
        inner.registry.connectors.remove(key);
        // The deletes below follow this write; if the kernel dies first, the next start
        // does them (`housekeeping::reclaim`).
        inner.registry.uninstalling.insert(key.to_owned());
        k.save_registry(&mut inner)
            .map_err(|e| Status::internal(e.to_string()))?;
    }
    // An OAuth login is revoked at the server before its tokens are deleted (SPEC §10).
    crate::connect::oauth::revoke(k, key).await;
    k.secrets.delete(key);
    // Off the kernel's one runtime thread: a release can hold many files.
    let releases = k.paths.releases().join(key);
    let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(releases)).await;
    {
        let mut inner = lock(&k.inner);
        if inner.registry.uninstalling.remove(key)
            && let Err(e) = k.save_registry(&mut inner)
        {
            tracing::warn!(key, error = %e, "the uninstall is done but not recorded; the next start finishes it again");
        }
    }
    k.audit.record(Event::Uninstall {
        connector: key.to_owned(),
    });
    tracing::info!(key, "uninstalled");
    Ok(())
}

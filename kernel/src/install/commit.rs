//! The second half of an install: what the person confirmed is copied into an immutable
//! release, recorded in the registry and started, or nothing is.

use std::sync::Arc;

use tonic::Status;
use tutti_proto::kernel as pb;

use super::plan::{Install, Plan, plan};
use crate::audit::Event;
use crate::guards::precondition;
use crate::lifecycle::Input;
use crate::registry::{AuthState, Installed};
use crate::state::{Kernel, Status as CStatus, lock};
use crate::supervisor::{reload, step_now};

/// Installs (or upgrades) the release in `req.folder`: plan, check that it is what the person
/// confirmed and that nothing refuses it, copy, record, start.
pub async fn install(k: &Arc<Kernel>, req: Install) -> Result<pb::InstallReply, Status> {
    let _admin = k.admin.lock().await;
    let plan = plan(k, &req).await?;
    // SPEC §12: what the user confirmed is what is installed, or nothing.
    if !req.expected_sha256.is_empty() && !plan.sha.is_empty() && req.expected_sha256 != plan.sha {
        return Err(precondition(crate::release::changed_after_confirmation(
            &req.folder,
            &req.expected_sha256,
            &plan.sha,
        )));
    }
    if !plan.summary.problems.is_empty() {
        return Err(precondition(plan.summary.problems.join("\n")));
    }
    // Copying a whole release is blocking file work: off the (single) runtime thread.
    // The copy is hashed again: a folder changed during the copy installs nothing.
    let (source, dest) = (req.folder.clone(), plan.release_dir.clone());
    let sha = plan.sha.clone();
    tokio::task::spawn_blocking(move || crate::release::copy_release(&source, &dest, &sha))
        .await
        .map_err(|e| Status::internal(format!("release copy task: {e}")))?
        .map_err(precondition)?;
    let key = plan.manifest.key.clone();
    let (upgraded, status) = record_install(k, &req, &plan)?;
    audit_install(k, &req, &plan, upgraded);
    tracing::info!(key, version = %plan.manifest.version, sha = %plan.sha, upgraded, "installed");
    reload(k, &key);
    Ok(pb::InstallReply {
        key,
        version: plan.manifest.version,
        sha256: plan.sha,
        upgraded,
        status: status.as_str().into(),
    })
}

/// The trust step in the audit log: what the user confirmed (names and the launch line, no
/// values), and the skill findings they allowed.
fn audit_install(k: &Kernel, req: &Install, plan: &Plan, upgraded: bool) {
    let key = &plan.manifest.key;
    k.audit.record(Event::Install {
        connector: key.clone(),
        version: plan.manifest.version.clone(),
        sha256: plan.sha.clone(),
        upgraded,
        confirmed_launch: confirmed_launch(&plan.summary),
        allow_commands: req.allow_commands.clone(),
        allow_env: req.allow_env.clone(),
    });
    if !plan.summary.skill_findings.is_empty() {
        k.audit.record(Event::SkillFindingsAllowed {
            connector: key.clone(),
            sha256: plan.sha.clone(),
            findings: plan.summary.skill_findings.clone(),
        });
    }
}

/// Records the copied release in the registry (with the release it falls back to) and
/// steps the connector's lifecycle; whether it was an upgrade, and its status now.
fn record_install(k: &Arc<Kernel>, req: &Install, plan: &Plan) -> Result<(bool, CStatus), Status> {
    let key = plan.manifest.key.clone();
    let mut inner = lock(&k.inner);
    let current = inner.registry.connectors.get(&key);
    let connected = current
        .map(|c| c.auth == AuthState::Ready || c.connected)
        .unwrap_or(true);
    let upgraded = current.is_some();
    // What the new release falls back to if it fails before its first commit: the
    // release an unfinished upgrade was going to replace, else the current one (read
    // from the registry, so it holds after a kernel restart too).
    let previous = current.and_then(|entry| {
        let mut entry = entry.clone();
        let fallback = match entry.previous.take() {
            Some(older) => *older,
            None => entry,
        };
        (fallback.release_dir != plan.release_dir).then(|| Box::new(fallback))
    });
    let pin = current.and_then(|c| c.pin.clone());
    let auth = k.auth_state(&key, &plan.manifest, connected);
    let installed = Installed {
        version: plan.manifest.version.clone(),
        sha256: plan.sha.clone(),
        release_dir: plan.release_dir.clone(),
        installed_at_unix: now_unix(),
        skill_findings: plan.summary.skill_findings.clone(),
        confirmed_launch: confirmed_launch(&plan.summary),
        allow_commands: req.allow_commands.clone(),
        allow_env: req.allow_env.clone(),
        auth,
        connected,
        previous,
        pin,
        trust_updates: req.trust_updates,
    };
    if req.trust_updates {
        k.audit.record(Event::TrustUpdates {
            connector: key.clone(),
            version: plan.manifest.version.clone(),
        });
    }
    // An upgrade waiting for a secret leaves the live release serving (and ready).
    let waits = installed.upgrade_waits_for_secrets() && inner.table.live(&key).is_some();
    inner.registry.connectors.insert(key.clone(), installed);
    inner.manifests.insert(key.clone(), plan.manifest.clone());
    let install = Input::Install {
        auth_required: auth == AuthState::Required,
        waits,
    };
    step_now(k, &mut inner, &key, install);
    let status = inner
        .conns
        .get(&key)
        .map_or(CStatus::Starting, |c| c.life.status());
    k.save_registry(&mut inner)
        .map_err(|e| Status::internal(e.to_string()))?;
    Ok((upgraded, status))
}

/// The exact argv (stdio) or URL (http) the install confirmation showed.
fn confirmed_launch(plan: &pb::InstallPlan) -> Vec<String> {
    if plan.url.is_empty() {
        plan.argv.clone()
    } else {
        vec![plan.url.clone()]
    }
}

fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

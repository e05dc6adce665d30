//! `tutti connector probe DIR|KEY`: start the upstream exactly as a worker would (it *is* a
//! worker, under a probe generation that is never committed), page tools/list, validate
//! every schema, report, stop. No tool is called.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tonic::Status;
use tutti_proto::kernel as pb;
use tutti_rules::child_env;

use crate::naming::local_name;
use crate::release::manifest::{self, Manifest};
use crate::state::{Credentials, Kernel, ProbeSlot, lock, sha256};
use crate::supervisor::spawn::{self, ChildSpec};
use crate::toolset::{OfferedTool, validate};

/// The manifest and release directory a probe of `target` (a release directory or an
/// installed key) runs.
fn target(k: &Kernel, target: &str) -> Result<(Manifest, PathBuf), Status> {
    let key = target;
    let target = PathBuf::from(target);
    if target.is_absolute() && target.is_dir() {
        let m = manifest::load(&target).map_err(|p| Status::failed_precondition(p.join("\n")))?;
        Ok((m, target))
    } else {
        let inner = lock(&k.inner);
        let m = inner.manifests.get(key).cloned().ok_or_else(|| {
            Status::not_found(format!(
                "{:?} is neither a release directory nor an installed connector",
                key
            ))
        })?;
        let dir = Kernel::release_dir(&inner, key).unwrap_or_default();
        Ok((m, dir))
    }
}

pub async fn probe(k: &Arc<Kernel>, req: pb::ProbeRequest) -> Result<pb::ProbeReply, Status> {
    let (manifest, release) = target(k, &req.target)?;
    if manifest.mcp.is_none() {
        return Err(Status::failed_precondition(format!(
            "{} has no mcp interface to probe",
            manifest.key
        )));
    }
    // Stored secrets go only to the installed release itself (probed by key or by its path): a
    // folder that merely claims an installed key could send them anywhere.
    let is_installed_release = lock(&k.inner)
        .registry
        .connectors
        .get(&manifest.key)
        .is_some_and(|c| c.release_dir == release);
    // A folder runs unconfirmed by install: the same launch rules for its environment.
    let injection = manifest::injection_problems(&manifest, &req.allow_env);
    if !is_installed_release && !injection.is_empty() {
        return Err(Status::failed_precondition(injection.join("\n")));
    }
    let credentials = if is_installed_release {
        Credentials::Stored
    } else {
        Credentials::Withheld
    };
    let withheld_hint = withheld_hint(k, &manifest.key, credentials);
    let launch = k
        .launch_spec(&manifest.key, &manifest, &release, credentials)
        .map_err(Status::failed_precondition)?;
    check_command(k, &req, &release, &launch, is_installed_release)?;
    let generation = k.next_generation();
    let token =
        crate::sessions::tokens::new_token().map_err(|e| Status::internal(e.to_string()))?;
    let (tx, rx) = oneshot::channel();
    let key = manifest.key.clone();
    let start_ms = manifest.start_ms;
    lock(&k.inner).probes.insert(
        generation,
        ProbeSlot {
            key: key.clone(),
            token_hash: sha256(&token),
            launch,
            manifest,
            done: Some(tx),
        },
    );
    let mut child = match spawn_worker(k, &key, generation, token) {
        Ok(c) => c,
        Err(e) => {
            lock(&k.inner).probes.remove(&generation);
            return Err(e);
        }
    };
    let wait = Duration::from_millis(u64::from(start_ms)) + Duration::from_secs(3);
    let outcome = tokio::select! {
        // Biased: the worker reports (`OfferTools`, `ReportWorker`) before it exits, so when
        // both are ready the report, which says why, wins over the bare exit status.
        biased;
        r = rx => r.unwrap_or_else(|_| Err("the probe worker ended without a result".into())),
        st = child.wait() => {
            Err(format!("the upstream ended before listing its tools ({})", st.map(|s| s.to_string()).unwrap_or_default()))
        }
        _ = tokio::time::sleep(wait) => Err(format!("the upstream did not answer within startMs = {start_ms} ms")),
    };
    lock(&k.inner).probes.remove(&generation);
    spawn::stop_group(&mut child, Duration::from_secs(2)).await;
    tutti_proto::transport::remove_endpoint(&tutti_proto::transport::worker_endpoint(
        &k.paths.state,
        generation,
    ));
    tutti_proto::transport::remove_endpoint(&tutti_proto::transport::worker_data_endpoint(
        &k.paths.state,
        generation,
    ));
    outcome.map_err(|e| {
        let hint = withheld_hint.as_deref().unwrap_or_default();
        Status::failed_precondition(k.redact(&format!("{e}{hint}")))
    })
}

/// The launch allowlist for a probed folder's command (an installed release was allowed at
/// install time).
fn check_command(
    k: &Kernel,
    req: &pb::ProbeRequest,
    release: &std::path::Path,
    launch: &pb::LaunchSpec,
    is_installed_release: bool,
) -> Result<(), Status> {
    if launch.transport() == pb::Transport::Stdio {
        let owner = crate::release::allowlist::owner_allowed();
        let rules = crate::release::allowlist::Rules {
            release,
            source: None,
            runtime_dir: &k.paths.libexec,
            owner_allowed: &owner,
            install_allowed: &req.allow_commands,
            path_var: k.path_var(),
        };
        crate::release::allowlist::check(std::path::Path::new(&launch.command), &rules).or_else(
            |e| {
                // An installed connector was allowed at install time.
                if is_installed_release {
                    Ok(())
                } else {
                    Err(Status::failed_precondition(e))
                }
            },
        )?;
    }
    Ok(())
}

/// Why a probe of a folder may fail where the installed release would not: it ran without
/// the stored credentials.
fn withheld_hint(k: &Kernel, key: &str, credentials: Credentials) -> Option<String> {
    (credentials == Credentials::Withheld && !k.secrets.load(key).is_empty()).then(|| {
        format!(
            " (the stored credentials of the installed connector {key} are given only to its installed release: probe that with `tutti connector probe {key}`)"
        )
    })
}

/// The probe's worker process, started like a connector's worker.
fn spawn_worker(
    k: &Kernel,
    key: &str,
    generation: u64,
    token: String,
) -> Result<tokio::process::Child, Status> {
    let program = k.paths.sibling("tutti-upstream-worker");
    let log = crate::housekeeping::open_log(&k.paths.logs().join(format!("probe-{key}.log"))).ok();
    // The same environment as a supervised worker (it starts the upstream the same way).
    let env = child_env::worker(child_env::from_process, key, generation, &token);
    let spawned = spawn::spawn(ChildSpec {
        program: &program,
        args: vec![
            "--state-dir".into(),
            k.paths.state.to_string_lossy().into_owned(),
            "--key".into(),
            key.to_string(),
        ],
        env,
        stderr: log,
        death_signal_term: true,
        listener: None,
    });
    spawned.map_err(|e| Status::internal(format!("cannot start {}: {e}", program.display())))
}

/// Called by OfferTools for a probe generation.
/// Its problems are exactly the ones the commit of this tool set would refuse it for
/// ([`validate`], SPEC §5.1), so a clean probe means the generation would commit.
/// `size_problem` is the offer's refusal by size (`tutti_proto::limits`), which comes first.
pub fn finish(
    slot: &mut ProbeSlot,
    tools: &[OfferedTool],
    size_problem: Option<String>,
    protocol_version: &str,
    server_name: &str,
) {
    let problems = match size_problem {
        Some(p) => vec![p],
        None => validate(&slot.key, tools, &slot.manifest.tool_risk)
            .err()
            .unwrap_or_default(),
    };
    let mut out = Vec::new();
    for t in tools {
        let local = local_name(&slot.key, &t.upstream_name);
        out.push(pb::ProbeTool {
            upstream_name: t.upstream_name.clone(),
            local_name: local,
            description: t
                .definition
                .get("description")
                .and_then(|d| d.as_str())
                .unwrap_or("")
                .to_string(),
        });
    }
    if let Some(done) = slot.done.take() {
        let _ = done.send(Ok(pb::ProbeReply {
            key: slot.key.clone(),
            protocol_version: protocol_version.to_string(),
            server_name: server_name.to_string(),
            tools: out,
            problems,
        }));
    }
}

pub fn fail(slot: &mut ProbeSlot, message: String) {
    if let Some(done) = slot.done.take() {
        let _ = done.send(Err(message));
    }
}

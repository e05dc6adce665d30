//! A worker registers: it proves its generation and gets its launch spec, secrets included
//! (secrets never travel in argv). The launch is checked again and recorded in the audit log
//! by names only.

use std::sync::Arc;

use tonic::Status;
use tutti_proto::kernel as pb;

use super::admit::{check_worker, probe_of, worker_release};
use crate::audit::Event;
use crate::guards::{manifest_of, precondition};
use crate::lifecycle::{Input, Msg, ReportKind};
use crate::state::{Credentials, Kernel, lock};

/// The launch spec of the registering worker's generation, or why it cannot launch.
pub async fn register(
    k: &Arc<Kernel>,
    req: pb::RegisterWorkerRequest,
) -> Result<pb::RegisterWorkerReply, Status> {
    if let Some(slot) = probe_of(
        &mut lock(&k.inner),
        &req.key,
        req.generation,
        &req.worker_token,
    ) {
        return Ok(pb::RegisterWorkerReply {
            launch: Some(slot.launch.clone()),
        });
    }
    let (manifest, release) = {
        let inner = lock(&k.inner);
        check_worker(&inner, &req.key, req.generation, &req.worker_token)?;
        // The release this generation was spawned for (an install may have come since).
        match worker_release(&inner, &req.key, req.generation) {
            Some(r) => (r.manifest, r.release_dir),
            None => (
                manifest_of(&inner, &req.key)?.clone(),
                Kernel::release_dir(&inner, &req.key).unwrap_or_default(),
            ),
        }
    };
    accept_data_endpoint(k, &req);
    let launch = k
        .launch_spec(&req.key, &manifest, &release, Credentials::Stored)
        .and_then(|launch| {
            k.launch_allowed(&req.key, &release, &launch)
                .map(|()| launch)
        });
    let launch = match launch {
        Ok(launch) => launch,
        Err(why) => {
            // The worker exits on this; `status` should say why, not only "exit status 2".
            let actor = lock(&k.inner).actors.get(&req.key).cloned();
            if let Some(a) = actor {
                let _ = a.send(Msg::step(Input::Report {
                    generation: req.generation,
                    kind: ReportKind::StartFailed,
                    message: format!("cannot launch the upstream: {why}"),
                }));
            }
            return Err(precondition(why));
        }
    };
    audit_launch(k, &req, &launch);
    tracing::info!(key = %req.key, generation = req.generation, pid = req.pid, "worker registered");
    Ok(pb::RegisterWorkerReply {
        launch: Some(launch),
    })
}

/// The launch in the audit log: argv, cwd, URL, and the names (never the values) of the
/// environment variables and headers.
fn audit_launch(k: &Kernel, req: &pb::RegisterWorkerRequest, launch: &pb::LaunchSpec) {
    let mut env_names: Vec<&String> = launch.env.keys().collect();
    env_names.sort();
    let mut header_names: Vec<&String> = launch.headers.keys().collect();
    header_names.sort();
    k.audit.record(Event::Launch {
        connector: req.key.clone(),
        generation: req.generation,
        transport: launch.transport().label().to_owned(),
        argv: std::iter::once(&launch.command)
            .chain(launch.args.iter())
            .filter(|a| !a.is_empty())
            .cloned()
            .collect(),
        cwd: launch.cwd.clone(),
        url: launch.url.clone(),
        env: env_names.into_iter().cloned().collect(),
        headers: header_names.into_iter().cloned().collect(),
    });
}

/// Keeps a registering worker's frame endpoint for its route, but only the one the
/// kernel derives for that generation (a worker names no other socket for the frontend).
fn accept_data_endpoint(k: &Kernel, req: &pb::RegisterWorkerRequest) {
    if req.data_endpoint.is_empty() {
        return;
    }
    let expected = tutti_proto::transport::worker_data_endpoint(&k.paths.state, req.generation);
    if req.data_endpoint != expected.as_str() {
        tracing::warn!(key = %req.key, generation = req.generation, "the worker registered a frame endpoint other than its own; its calls use gRPC");
        return;
    }
    let mut inner = lock(&k.inner);
    let pending = inner
        .conns
        .get_mut(&req.key)
        .and_then(|c| c.workers.get_mut(&req.generation));
    if let Some(pending) = pending {
        pending.data_endpoint = req.data_endpoint.clone();
    }
}

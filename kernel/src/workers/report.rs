//! What a worker observed (auth failures, start failures, exits, non-JSON stdout lines,
//! dropped spans) goes to its connector's lifecycle; a worker of an OAuth connector gets a
//! fresh access token.

use std::sync::Arc;

use tonic::Status;
use tutti_proto::kernel as pb;

use super::admit::{check_worker, probe_of};
use crate::lifecycle::{Input, Msg, ReportKind};
use crate::state::{Kernel, lock};

/// Takes in one report of the worker's generation.
pub async fn report(k: &Arc<Kernel>, req: pb::WorkerReport) -> Result<(), Status> {
    let actor = {
        let mut inner = lock(&k.inner);
        if let Some(slot) = probe_of(&mut inner, &req.key, req.generation, &req.worker_token) {
            if matches!(
                req.kind(),
                pb::WorkerReportKind::StartFailed | pb::WorkerReportKind::AuthFailed
            ) {
                crate::supervisor::probe::fail(slot, req.message.clone());
            }
            return Ok(());
        }
        check_worker(&inner, &req.key, req.generation, &req.worker_token)?;
        if req.kind() == pb::WorkerReportKind::TelemetryDropped {
            k.telemetry_drops
                .note_worker(&req.key, req.generation, req.count);
            return Ok(());
        }
        if req.kind() == pb::WorkerReportKind::NonJsonStdout
            && let Some(c) = inner.conns.get_mut(&req.key)
        {
            c.non_json_lines = c.non_json_lines.max(req.count);
        }
        inner.actors.get(&req.key).cloned()
    };
    if req.kind() == pb::WorkerReportKind::AuthRequired {
        crate::connect::oauth::step_up(k, &req.key, &req.scope);
    }
    if let Some(a) = actor {
        let _ = a.send(Msg::step(Input::Report {
            generation: req.generation,
            kind: ReportKind::from_wire(req.kind()),
            message: req.message,
        }));
    }
    Ok(())
}

/// A fresh access token for the worker's OAuth connector (one refresh at a time per
/// connector).
pub async fn refresh_token(
    k: &Arc<Kernel>,
    req: pb::RefreshWorkerTokenRequest,
) -> Result<pb::RefreshWorkerTokenReply, Status> {
    check_worker(&lock(&k.inner), &req.key, req.generation, &req.worker_token)?;
    crate::connect::oauth::refresh(k, &req.key, &req.rejected).await
}

//! Agent sessions: issue, revoke, verify and list session tokens (`tokens`); a revocation
//! returns once every session cache has dropped the token (`revocation`, `caches`).

pub(crate) mod caches;
pub(crate) mod revocation;
pub(crate) mod tokens;

use std::sync::Arc;

use tonic::Status;
use tutti_proto::kernel as pb;

use crate::audit::Event;
use crate::state::{Kernel, lock};
use revocation::{Revocation, revoke};

/// Issues a session token for `workspace`/`session` (a reissue revokes the previous one).
pub async fn issue(
    k: &Arc<Kernel>,
    req: pb::IssueSessionRequest,
) -> Result<pb::IssueSessionReply, Status> {
    if req.workspace.is_empty() || req.session.is_empty() {
        return Err(Status::invalid_argument(
            "--workspace and --session must not be empty",
        ));
    }
    let url = lock(&k.frontend_url).clone().ok_or_else(|| {
        Status::unavailable("the MCP frontend is not running yet; try again in a moment")
    })?;
    let token = tokens::new_token().map_err(|e| Status::internal(format!("random: {e}")))?;
    let id = tokens::SessionId {
        workspace: req.workspace.clone(),
        session: req.session.clone(),
    };
    // Reissue revokes the previous token; its listen streams end, and no session cache
    // accepts it once this returns.
    let tools = req.tools();
    let options = tokens::TokenOptions {
        tools,
        confirm_high: req.confirm_high,
        confirm_via: tokens::ConfirmVia::or_person(req.confirm_via_person, req.confirm_via_agent),
    };
    let reissue = Revocation::Reissue {
        id,
        token: &token,
        options,
    };
    revoke(k, reissue).await;
    // One stable root: the shim manager keeps every live connector's
    // skills in it, so a connector that becomes ready after this session was issued
    // still reaches it, and a removed one leaves it.
    let skill_roots = vec![k.paths.skills().to_string_lossy().into_owned()];
    k.audit.record(Event::SessionIssue {
        workspace: req.workspace.clone(),
        session: req.session.clone(),
    });
    tracing::info!(workspace = %req.workspace, session = %req.session, tools = ?tools, confirm_high = req.confirm_high, confirm_via = ?options.confirm_via, "session issued");
    Ok(pb::IssueSessionReply {
        token,
        url,
        skill_roots,
        bin_dir: k.paths.bin().to_string_lossy().into_owned(),
        tools: tools.into(),
    })
}

/// Revokes one session or all; returns how many tokens it revoked.
pub async fn revoke_sessions(
    k: &Arc<Kernel>,
    req: pb::RevokeSessionRequest,
) -> Result<u32, Status> {
    if !req.all && (req.workspace.is_empty() || req.session.is_empty()) {
        return Err(Status::invalid_argument(
            "give --workspace and --session, or --all",
        ));
    }
    let id = tokens::SessionId {
        workspace: req.workspace.clone(),
        session: req.session.clone(),
    };
    // "A revocation holds for every request that starts after the command returns": the
    // frontend's session cache has dropped the token (or the frontend was stopped).
    let revoked = if req.all {
        revoke(k, Revocation::All).await
    } else {
        revoke(k, Revocation::One(&id)).await
    };
    k.audit.record(Event::SessionRevoke {
        workspace: req.workspace.clone(),
        session: req.session.clone(),
        all: req.all,
        revoked,
    });
    tracing::info!(all = req.all, workspace = %req.workspace, session = %req.session, revoked, "sessions revoked");
    Ok(revoked)
}

/// Who a session token belongs to and how it was issued; `valid: false` for any other.
pub fn verify(k: &Kernel, token: &str) -> pb::VerifySessionReply {
    let tokens = lock(&k.tokens);
    match tokens.record(token) {
        Some(record) => pb::VerifySessionReply {
            valid: true,
            workspace: record.id.workspace.clone(),
            session: record.id.session.clone(),
            tools: record.tools.into(),
            confirm_high: record.confirm_high,
            confirm_via_person: record.confirm_via.person,
            confirm_via_agent: record.confirm_via.agent,
        },
        None => pb::VerifySessionReply::default(),
    }
}

/// The live sessions, sorted by workspace and session (names and issue times only).
pub fn list(k: &Kernel) -> pb::ListSessionsReply {
    let tokens = lock(&k.tokens);
    pb::ListSessionsReply {
        sessions: tokens
            .list()
            .into_iter()
            .map(|(id, issued_unix_ms)| pb::SessionSummary {
                workspace: id.workspace,
                session: id.session,
                issued_unix_ms,
            })
            .collect(),
    }
}

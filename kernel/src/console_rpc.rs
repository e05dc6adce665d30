//! What the kernel adds for `tutti console` (SPEC §13): the stale-form check every change
//! from a page carries, and the list of live sessions (names and issue times only).

use tonic::Status;
use tutti_proto::kernel as pb;

use crate::state::Inner;

/// The message of a refused stale change; the page shows it as is.
pub const STALE: &str = "changed since you opened this page; reload";

/// A change made from a page names the installed release it saw (`expected_sha256`); if the
/// connector was upgraded or reinstalled since, the change is refused and nothing changes.
/// An empty expectation (the CLI) checks nothing.
pub fn check_unchanged(inner: &Inner, key: &str, expected_sha256: &str) -> Result<(), Status> {
    if expected_sha256.is_empty() {
        return Ok(());
    }
    match inner.registry.connectors.get(key) {
        Some(installed) if installed.sha256 == expected_sha256 => Ok(()),
        Some(installed) => Err(Status::failed_precondition(format!(
            "connector {key} {STALE} (it is now version {})",
            installed.version
        ))),
        None => Err(Status::failed_precondition(format!(
            "connector {key} is no longer installed: {STALE}"
        ))),
    }
}

/// The live sessions, sorted by workspace and session.
pub fn list_sessions(tokens: &crate::sessions::tokens::TokenTable) -> pb::ListSessionsReply {
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

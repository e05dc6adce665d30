//! `notifications/cancelled` for a request the worker gives up on: sent before the reply when
//! the call is interrupted, in the background when its future is dropped.

use std::time::Duration;

use rmcp::Peer;
use rmcp::model::{CancelledNotificationParam, RequestId};
use rmcp::service::RoleClient;

/// The `reason` of the `notifications/cancelled` we send.
const CANCEL_REASON: &str = "request cancelled";
/// How long sending `notifications/cancelled` may hold up the reply to the caller.
const CANCEL_SEND_LIMIT: Duration = Duration::from_secs(1);

/// Sends `notifications/cancelled` (in the background) for a request whose `call_tool` future
/// was dropped: the gRPC caller went away.
pub(super) struct CancelOnDrop {
    pub(super) peer: Peer<RoleClient>,
    pub(super) id: Option<RequestId>,
}

impl CancelOnDrop {
    pub(super) fn disarm(&mut self) {
        self.id = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let peer = self.peer.clone();
        runtime.spawn(async move { send_cancelled(&peer, id).await });
    }
}

/// Sends `notifications/cancelled` for request `id` (bounded: never holds up a reply).
pub(super) async fn send_cancelled(peer: &Peer<RoleClient>, id: RequestId) {
    tracing::debug!(request_id = %id, "cancelling the upstream request");
    let params = CancelledNotificationParam::new(Some(id), Some(CANCEL_REASON.to_owned()));
    match tokio::time::timeout(CANCEL_SEND_LIMIT, peer.notify_cancelled(params)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!(error = %e, "could not send notifications/cancelled"),
        Err(_) => tracing::debug!("sending notifications/cancelled timed out"),
    }
}

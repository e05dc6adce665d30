//! The worker's frame endpoint: plain tool calls as length-prefixed frames
//! ([`tutti_proto::frames`]) beside the gRPC service, for the frontend's fast path.
//!
//! Each call runs through exactly the gRPC `CallTool` handler's code ([`Shared::call`]), so
//! the generation check, fencing, registration under its call id (gRPC `Cancel` reaches it),
//! timeout and answers are the same; a failure that gRPC would give as a status comes back
//! as a [`Kind::Status`] frame. One call at a time per connection: while one is in flight,
//! the connection is watched for its end, which drops the call as a dropped gRPC handler
//! would (the upstream gets `notifications/cancelled`).

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::io::AsyncReadExt;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tutti_proto::frames::{self, Kind};
use tutti_proto::transport::{Incoming, IpcConn};
use tutti_proto::worker::CallToolRequest;

use crate::serve::Shared;
use crate::upstream::Upstream;

/// The send buffer asked for on each frame connection: a reply up to this size (a 1 MiB
/// result) is written in one go where the system allows it (Linux caps it at
/// `net.core.wmem_max`, 208 KiB by default).
const REPLY_SEND_BUFFER: usize = 4 * 1024 * 1024;

/// A connection's frame buffer larger than this after a call is given up: up to 64 idle
/// connections per worker must not each keep the room a call with big arguments needed.
const IDLE_BUFFER_KEPT: usize = 64 * 1024;

/// After a failed accept (e.g. out of descriptors), wait this long before the next.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// The running frame endpoint: [`FrameServer::stop`] ends it.
pub(crate) struct FrameServer {
    stop: watch::Sender<bool>,
    accept: tokio::task::JoinHandle<JoinSet<()>>,
}

impl FrameServer {
    /// Serves `incoming` until [`FrameServer::stop`].
    pub(crate) fn start<U: Upstream>(incoming: Incoming, shared: Arc<Shared<U>>) -> Self {
        let (stop, stopped) = watch::channel(false);
        let accept = tokio::spawn(accept(incoming, shared, stopped));
        Self { stop, accept }
    }

    /// Stops accepting, closes idle connections and gives calls in flight up to `grace` to
    /// write their answer (they are answered already when the worker stops; this only lets
    /// the bytes go out).
    pub(crate) async fn stop(self, grace: Duration) {
        let _ = self.stop.send(true);
        let Ok(mut connections) = self.accept.await else {
            return;
        };
        let drained = tokio::time::timeout(grace, async {
            while connections.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::debug!("frame connections still open at exit");
            connections.abort_all();
        }
    }
}

async fn accept<U: Upstream>(
    mut incoming: Incoming,
    shared: Arc<Shared<U>>,
    mut stopped: watch::Receiver<bool>,
) -> JoinSet<()> {
    let mut connections = JoinSet::new();
    loop {
        let next = tokio::select! {
            next = incoming.next() => next,
            _ = stopped.wait_for(|s| *s) => return connections,
        };
        match next {
            Some(Ok(conn)) => {
                conn.widen_send_buffer(REPLY_SEND_BUFFER);
                connections.spawn(serve(conn, shared.clone(), stopped.clone()));
            }
            Some(Err(e)) => {
                tracing::warn!(error = %e, "cannot accept a frame connection");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
            None => return connections,
        }
        // Reap the finished ones so the set does not grow with every connection.
        while connections.try_join_next().is_some() {}
    }
}

/// One connection: a call frame, its answer, and so on until either side ends it.
async fn serve<U: Upstream>(
    mut conn: IpcConn,
    shared: Arc<Shared<U>>,
    mut stopped: watch::Receiver<bool>,
) {
    let mut buf = Vec::new();
    loop {
        let read = tokio::select! {
            read = frames::read_frame(&mut conn, &mut buf) => read,
            _ = stopped.wait_for(|s| *s) => return,
        };
        let request = match read {
            Ok(Some(Kind::Call)) => frames::decode::<CallToolRequest>(&buf),
            Ok(None) => return,
            Ok(Some(kind)) => {
                tracing::debug!(?kind, "unexpected frame; closing the connection");
                return;
            }
            Err(e) => {
                tracing::debug!(error = %e, "frame connection failed");
                return;
            }
        };
        let request = match request {
            Ok(request) => request,
            Err(e) => {
                tracing::debug!(error = %e, "undecodable call frame; closing the connection");
                return;
            }
        };
        // Boxed: the call's future is large, and an idle connection waiting for its next
        // frame should not keep room for one (the frontend keeps up to 64 idle per worker).
        let answer = tokio::select! {
            answer = Box::pin(shared.call(request, None)) => answer,
            () = peer_gone(&mut conn) => return,
        };
        let written = match answer {
            Ok(reply) => frames::write_reply(&mut conn, &reply, &mut buf).await,
            Err(status) => {
                let body = frames::status_body(&status);
                frames::write_frame(&mut conn, Kind::Status, &body, &mut buf).await
            }
        };
        if let Err(e) = written {
            tracing::debug!(error = %e, "cannot write a reply frame");
            return;
        }
        if buf.capacity() > IDLE_BUFFER_KEPT {
            buf = Vec::new();
        }
    }
}

/// Completes when the caller closed the connection (or broke the protocol by sending while
/// its call is in flight): the call is dropped then.
async fn peer_gone(conn: &mut IpcConn) {
    let mut byte = [0u8; 1];
    let _ = conn.read(&mut byte).await;
}

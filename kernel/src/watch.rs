//! Watching routes: a full snapshot first, then every committed change as an event, each
//! with a higher revision; a watcher that caches sessions acknowledges what it applied.

use std::pin::Pin;
use std::sync::Arc;

use futures_util::Stream;
use tokio::sync::broadcast::error::RecvError;
use tonic::Status;
use tutti_proto::kernel as pb;

use crate::state::{Kernel, lock};

/// The route events a watcher receives.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<pb::RouteEvent, Status>> + Send>>;

type Events = tokio::sync::broadcast::Receiver<Arc<pb::RouteEvent>>;
type Sender = tokio::sync::mpsc::Sender<Result<pb::RouteEvent, Status>>;

/// The event stream of watcher `watcher_id`. One that caches sessions is registered under
/// the lock that orders revisions: every revocation published after its snapshot waits for
/// its acknowledgement.
pub fn watch(
    k: &Arc<Kernel>,
    watcher_id: u64,
    caches_sessions: bool,
) -> Result<EventStream, Status> {
    let (snapshot, rx, registration) = {
        let inner = lock(&k.inner);
        let snapshot = Kernel::snapshot_event(&inner);
        let registration = match caches_sessions {
            true => Some(
                k.session_caches
                    .register(watcher_id, snapshot.revision)
                    .ok_or_else(|| {
                        Status::already_exists(format!(
                            "watcher id {watcher_id} is already watching routes; watch with a new id"
                        ))
                    })?,
            ),
            false => None,
        };
        (snapshot, k.events.subscribe(), registration)
    };
    let shutdown = k.shutdown.subscribe();
    let k = k.clone();
    let (tx, out) = tokio::sync::mpsc::channel(256);
    tokio::spawn(async move {
        // Lives as long as the stream: a watcher that is gone is not waited for.
        let _registration = registration;
        let last = snapshot.revision;
        if tx.send(Ok(snapshot)).await.is_ok() {
            forward(&k, (rx, shutdown), &tx, last).await;
        }
    });
    Ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(out)))
}

/// Sends every event after revision `last` until the watcher goes away or the kernel stops.
async fn forward(
    k: &Kernel,
    (mut rx, mut shutdown): (Events, tokio::sync::watch::Receiver<bool>),
    tx: &Sender,
    mut last: u64,
) {
    loop {
        tokio::select! {
            ev = rx.recv() => match ev {
                Ok(ev) => {
                    if ev.revision <= last { continue; }
                    last = ev.revision;
                    if tx.send(Ok((*ev).clone())).await.is_err() { return; }
                }
                Err(RecvError::Lagged(_)) => {
                    // Too slow: start over from a fresh snapshot.
                    let snap = { let inner = lock(&k.inner); Kernel::snapshot_event(&inner) };
                    last = snap.revision;
                    if tx.send(Ok(snap)).await.is_err() { return; }
                }
                Err(RecvError::Closed) => return,
            },
            // The watcher went away: end now (and drop its registration).
            _ = tx.closed() => return,
            _ = shutdown.changed() => {
                let _ = tx.send(Ok(pb::RouteEvent { revision: last + 1, event: Some(pb::route_event::Event::Shutdown(pb::RuntimeShutdown {})) })).await;
                return;
            }
        }
    }
}

/// Watcher `watcher_id` has applied every event up to `revision`.
pub fn ack(k: &Kernel, watcher_id: u64, revision: u64) {
    k.session_caches.ack(watcher_id, revision);
}

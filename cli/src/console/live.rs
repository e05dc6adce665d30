//! Live updates of the connectors page (SPEC §13): a server-sent event stream fed by the
//! kernel's route stream (`WatchRoutes`). Every route event (a snapshot, a committed or fenced
//! generation) becomes one `changed` event, and the page fetches its cards again at once.
//! The stream ends when the kernel's does (the page then keeps its slower poll, which also
//! shows status-only changes such as restarts).

use std::convert::Infallible;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::{Stream, StreamExt};
use tutti_proto::kernel as pb;

use super::access::Shared;
use super::link;

/// `GET /fragment/connectors/events`.
pub(crate) async fn events(
    State(c): State<Shared>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let routes = match link::kernel(&c.state_dir).await {
        Ok(mut k) => k
            .routes
            .watch_routes(pb::WatchRoutesRequest {
                watcher_id: watcher_id(),
                caches_sessions: false,
            })
            .await
            .ok()
            .map(tonic::Response::into_inner),
        Err(_) => None,
    };
    let changes = futures_util::stream::iter(routes)
        .flatten()
        .take_while(|event| std::future::ready(event.is_ok()))
        .map(|_| Ok(Event::default().event("changed").data("routes")));
    Sse::new(changes).keep_alive(KeepAlive::default())
}

/// A watcher id of our own (the kernel names watchers by id; this one caches no sessions).
fn watcher_id() -> u64 {
    let mut bytes = [0u8; 8];
    match getrandom::fill(&mut bytes) {
        Ok(()) => u64::from_le_bytes(bytes),
        Err(_) => u64::from(std::process::id()) << 32,
    }
}

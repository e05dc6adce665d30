//! Follows the kernel's route stream and applies it to the shared state.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::time::Instant;

use crate::app::App;
use crate::backend::RouteStream;
use crate::error::Error;
use tutti_proto::kernel::route_event;

use crate::catalog::routes::{Effect, RouteState};

/// How long a lost route stream may take to come back before the frontend gives up.
const RECONNECT_WINDOW: Duration = Duration::from_secs(5);
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// Why the watcher stopped.
pub(crate) enum WatchEnd {
    /// The kernel announced its shutdown.
    Shutdown,
    /// The stream could not be re-established in time.
    Lost(Error),
}

/// How long route changes must have settled before free heap goes back to the system.
const RELEASE_QUIET: Duration = Duration::from_secs(1);

pub(crate) async fn run(app: Arc<App>) -> WatchEnd {
    let mut state = RouteState::new();
    // A replaced table's tools (definitions, projections) are freed when its last request
    // ends, a gone worker's connection when its log stream ends; glibc keeps that memory
    // unless asked (`tutti_os::memory::AfterChanges`).
    app.memory.release_when_quiet(RELEASE_QUIET);
    // When the stream was lost (None while healthy); the window to reconnect starts here.
    let mut lost_since: Option<Instant> = Some(Instant::now());
    loop {
        let since = lost_since.unwrap_or_else(Instant::now);
        let mut stream = match connect(&app, since + RECONNECT_WINDOW).await {
            Ok(stream) => stream,
            Err(e) => return WatchEnd::Lost(e),
        };
        loop {
            match stream.next().await {
                Some(Ok(event)) => {
                    lost_since = None;
                    let revision = event.revision;
                    // A snapshot (the first, or a resync after the stream lagged or was lost)
                    // may follow revocations this frontend never saw: everything that relied on
                    // an earlier verdict starts afresh before the snapshot is acknowledged (the
                    // session cache, listen streams, listens being opened), as SPEC §6 holds.
                    let resync = matches!(event.event, Some(route_event::Event::Snapshot(_)));
                    if resync {
                        app.sessions.reset(app.backend.caches_sessions());
                        app.listeners.end_open();
                    }
                    app.skills.apply(&event);
                    match state.apply(event) {
                        Effect::Routes { tools_changed } => {
                            let table = state.table();
                            tracing::debug!(tools = table.len(), tools_changed, "routes updated");
                            crate::observe::unclaimed::follow(&app, &table);
                            app.publish_routes(table, tools_changed);
                            crate::catalog::beyond::resubscribe(&app);
                            app.memory.changed();
                        }
                        Effect::Revoked(revoked) => {
                            app.sessions.revoke(&revoked);
                            app.listeners.revoke(&revoked);
                            app.notifier.revoke(&revoked);
                            acknowledge(&app, revision).await;
                        }
                        Effect::Shutdown => return WatchEnd::Shutdown,
                        Effect::Nothing => {}
                    }
                    if resync {
                        acknowledge(&app, revision).await;
                    }
                }
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "the kernel's route stream failed; reconnecting");
                    break;
                }
                None => {
                    tracing::warn!("the kernel's route stream ended; reconnecting");
                    break;
                }
            }
        }
        // Revocations may be missed while there is no stream: verify every request again.
        app.sessions.reset(false);
        lost_since.get_or_insert_with(Instant::now);
    }
}

/// Tells the kernel that every event up to `revision` is applied (the session cache no longer
/// holds anything revoked by them). Without it the kernel stops this process after a grace
/// period, so a failure only needs the cache off.
async fn acknowledge(app: &App, revision: u64) {
    if !app.backend.caches_sessions() {
        return;
    }
    if let Err(e) = app.backend.ack_routes(revision).await {
        tracing::warn!(error = %e, revision, "cannot confirm route events to the kernel; session cache off");
        app.sessions.reset(false);
    }
}

async fn connect(app: &App, deadline: Instant) -> Result<RouteStream, Error> {
    let mut last = String::from("no attempt finished in time");
    loop {
        match tokio::time::timeout_at(deadline, app.backend.watch_routes()).await {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(e)) => last = e.to_string(),
            Err(_) => break,
        }
        if Instant::now() + RETRY_PAUSE >= deadline {
            break;
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
    Err(Error::RoutesLost {
        seconds: RECONNECT_WINDOW.as_secs(),
        detail: last,
    })
}

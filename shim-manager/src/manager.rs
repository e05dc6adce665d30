//! Follows the kernel's `WatchRoutes` stream and keeps `<state>/bin` in sync with it.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;
use tonic::Streaming;
use tutti_proto::kernel::kernel_client::KernelClient;
use tutti_proto::kernel::route_event::Event;
use tutti_proto::kernel::{RouteEvent, WatchRoutesRequest};
use tutti_proto::transport::{self, LocalEndpoint};

use crate::Error;
use crate::publish::Publisher;
use crate::shimfile;
use crate::table::{Action, RouteView, ShimTable};

/// How long the kernel may stay unreachable (at start, or after the stream ended).
const RECONNECT_BUDGET: Duration = Duration::from_secs(5);
const RECONNECT_FIRST_DELAY: Duration = Duration::from_millis(50);
const RECONNECT_MAX_DELAY: Duration = Duration::from_millis(500);
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether the event loop goes on.
#[derive(Debug, PartialEq, Eq)]
enum Flow {
    Continue,
    Shutdown,
}

pub(crate) struct Manager {
    endpoint: LocalEndpoint,
    table: ShimTable,
    publisher: Publisher,
}

impl Manager {
    pub(crate) fn new(endpoint: LocalEndpoint, publisher: Publisher) -> Self {
        Self {
            endpoint,
            table: ShimTable::default(),
            publisher,
        }
    }

    /// Runs until the kernel announces shutdown (`Ok`) or stays unreachable (`Err`).
    pub(crate) async fn run(mut self) -> Result<(), Error> {
        loop {
            let mut stream = self.open_watch().await?;
            tracing::info!(endpoint = %self.endpoint, "following the kernel's route table");
            loop {
                match stream.message().await {
                    Ok(Some(event)) => {
                        if self.handle(event) == Flow::Shutdown {
                            tracing::info!("runtime shutdown announced; exiting");
                            return Ok(());
                        }
                    }
                    Ok(None) => {
                        tracing::warn!("the route stream ended; reconnecting");
                        break;
                    }
                    Err(status) => {
                        tracing::warn!(code = ?status.code(), message = status.message(),
                            "the route stream failed; reconnecting");
                        break;
                    }
                }
            }
        }
    }

    /// Connects and opens `WatchRoutes`, retrying for up to [`RECONNECT_BUDGET`].
    async fn open_watch(&self) -> Result<Streaming<RouteEvent>, Error> {
        let deadline = Instant::now() + RECONNECT_BUDGET;
        let mut delay = RECONNECT_FIRST_DELAY;
        loop {
            let last_error = match tokio::time::timeout(ATTEMPT_TIMEOUT, self.try_open()).await {
                Ok(Ok(stream)) => return Ok(stream),
                Ok(Err(e)) => e,
                Err(_) => "timed out".to_owned(),
            };
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::KernelUnreachable {
                    endpoint: self.endpoint.to_string(),
                    waited_ms: u64::try_from(RECONNECT_BUDGET.as_millis()).unwrap_or(u64::MAX),
                    last_error,
                });
            }
            tracing::debug!(error = %last_error, "kernel not reachable yet");
            tokio::time::sleep(delay.min(deadline - now)).await;
            delay = (delay * 2).min(RECONNECT_MAX_DELAY);
        }
    }

    async fn try_open(&self) -> Result<Streaming<RouteEvent>, String> {
        let channel = transport::connect(&self.endpoint)
            .await
            .map_err(|e| e.to_string())?;
        let reply = KernelClient::new(channel)
            .watch_routes(WatchRoutesRequest {})
            .await
            .map_err(|status| format!("WatchRoutes: {}", status.message()))?;
        Ok(reply.into_inner())
    }

    fn handle(&mut self, event: RouteEvent) -> Flow {
        let revision = event.revision;
        match event.event {
            Some(Event::Snapshot(snapshot)) => {
                let routes = snapshot
                    .connectors
                    .iter()
                    .filter(|r| accept_key(&r.key))
                    .map(|r| RouteView {
                        key: &r.key,
                        generation: r.generation,
                        has_cli: r.has_cli,
                    });
                let actions = self.table.snapshot(routes);
                tracing::info!(
                    revision,
                    shims = actions
                        .iter()
                        .filter(|a| matches!(a, Action::Publish { .. }))
                        .count(),
                    "route snapshot"
                );
                for action in actions {
                    self.apply(action, true);
                }
                self.sweep();
            }
            Some(Event::Upsert(route)) => {
                if accept_key(&route.key) {
                    let view = RouteView {
                        key: &route.key,
                        generation: route.generation,
                        has_cli: route.has_cli,
                    };
                    match self.table.upsert(view) {
                        Some(action) => self.apply(action, false),
                        None => tracing::debug!(revision, key = %route.key,
                            generation = route.generation, "upsert changes no shim"),
                    }
                }
            }
            Some(Event::Removed(removed)) => {
                if accept_key(&removed.key) {
                    match self.table.removed(&removed.key, removed.generation) {
                        Some(action) => self.apply(action, false),
                        None => tracing::debug!(revision, key = %removed.key,
                            generation = removed.generation,
                            "removal of an older or unpublished generation ignored"),
                    }
                }
            }
            Some(Event::Shutdown(_)) => return Flow::Shutdown,
            Some(Event::SessionsRevoked(_)) | None => {}
        }
        Flow::Continue
    }

    fn apply(&mut self, action: Action, from_snapshot: bool) {
        match action {
            Action::Publish { key, generation } => {
                match self.publisher.publish(&key, from_snapshot) {
                    Ok(()) => tracing::info!(%key, generation, "shim published"),
                    Err(e) => tracing::error!(%key, generation, error = %e, "shim not published"),
                }
            }
            Action::Remove { key, generation } => match self.publisher.remove(&key) {
                Ok(()) => tracing::info!(%key, generation, "shim removed"),
                Err(e) => tracing::error!(%key, generation, error = %e, "shim not removed"),
            },
        }
    }

    /// After a snapshot: delete shims of connectors that are not in the table.
    fn sweep(&mut self) {
        let keep: BTreeSet<String> = self.table_keys();
        match self.publisher.sweep(&keep) {
            Ok(deleted) if !deleted.is_empty() => {
                tracing::info!(bin = %self.publisher.bin_dir().display(), ?deleted,
                    "stale shims deleted");
            }
            Ok(_) => {}
            Err(e) => tracing::error!(error = %e, "cannot sweep stale shims"),
        }
    }

    fn table_keys(&self) -> BTreeSet<String> {
        self.table.keys().map(str::to_owned).collect()
    }
}

fn accept_key(key: &str) -> bool {
    let ok = shimfile::valid_key(key);
    if !ok {
        tracing::warn!(key = ?key, "ignoring a route with an invalid connector key");
    }
    ok
}

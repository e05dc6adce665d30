//! Follows the kernel's `WatchRoutes` stream and keeps `<state>/bin` in sync with it.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;
use tonic::Streaming;
use tutti_proto::kernel::route_event::Event;
use tutti_proto::kernel::routes_client::RoutesClient;
use tutti_proto::kernel::{RouteEvent, WatchRoutesRequest};
use tutti_proto::transport::{self, LocalEndpoint};

use crate::Error;
use crate::publish::Publisher;
use crate::skills_root::SkillsRoot;
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
    skills: SkillsRoot,
}

impl Manager {
    pub(crate) fn new(endpoint: LocalEndpoint, publisher: Publisher, skills: SkillsRoot) -> Self {
        Self {
            endpoint,
            table: ShimTable::default(),
            publisher,
            skills,
        }
    }

    /// Runs until the kernel announces shutdown or a stop signal arrives (`Ok`), or the
    /// kernel stays unreachable (`Err`). Every way out first removes every shim this manager
    /// published (SPEC §8: a shim exists only while its connector has a live generation, and
    /// without a runtime there is none).
    pub(crate) async fn run(mut self) -> Result<(), Error> {
        // Registered before anything else, so a stop signal never kills the process with
        // shims left behind.
        let stop = stop_signal::listen();
        tokio::pin!(stop);
        // Each event carries every tool of its connectors (a snapshot: all of them), decoded
        // and dropped here; glibc keeps that memory unless asked.
        let release = tutti_os::memory::AfterChanges::spawn(std::time::Duration::from_secs(1));
        loop {
            let opened = tokio::select! {
                opened = self.open_watch() => opened,
                signal = &mut stop => return self.stopped_by(signal),
            };
            let mut stream = match opened {
                Ok(stream) => stream,
                Err(e) => {
                    self.retire_all();
                    return Err(e);
                }
            };
            tracing::info!(endpoint = %self.endpoint, "following the kernel's route table");
            loop {
                let message = tokio::select! {
                    message = stream.message() => message,
                    signal = &mut stop => return self.stopped_by(signal),
                };
                match message {
                    Ok(Some(event)) => {
                        release.changed();
                        if self.handle(event) == Flow::Shutdown {
                            tracing::info!(
                                "runtime shutdown announced; removing every shim and exiting"
                            );
                            self.retire_all();
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

    /// A stop signal arrived: the same way out as a shutdown event.
    fn stopped_by(&mut self, signal: &str) -> Result<(), Error> {
        tracing::info!(signal, "stop signal; removing every shim and exiting");
        self.retire_all();
        Ok(())
    }

    /// No generation is live any more: removes every published shim, then anything else of
    /// ours left in `bin/` (a shim of a previous manager, a sidecar, a temp file).
    fn retire_all(&mut self) {
        for action in self.table.clear() {
            self.apply(action, false);
        }
        self.sweep();
        self.skills.clear();
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
        let reply = RoutesClient::new(channel)
            // A snapshot holds every connector's tools.
            .max_decoding_message_size(tutti_proto::limits::MAX_KERNEL_REPLY_BYTES)
            .watch_routes(WatchRoutesRequest::default())
            .await
            .map_err(|status| format!("WatchRoutes: {}", status.message()))?;
        Ok(reply.into_inner())
    }

    fn handle(&mut self, event: RouteEvent) -> Flow {
        self.skills.apply(&event);
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
    let ok = tutti_proto::key::is_valid(key);
    if !ok {
        tracing::warn!(key = ?key, "ignoring a route with an invalid connector key");
    }
    ok
}

/// The signals that stop the manager like a shutdown event: SIGTERM and SIGINT (the kernel
/// stops its children with SIGTERM), Ctrl-C on Windows.
#[cfg(unix)]
mod stop_signal {
    use std::future::Future;

    use tokio::signal::unix::{SignalKind, signal};

    /// Registers the handlers now; the future resolves with the signal's name.
    pub(super) fn listen() -> impl Future<Output = &'static str> + Send {
        let term = signal(SignalKind::terminate());
        let int = signal(SignalKind::interrupt());
        if let Err(e) = term.as_ref().and(int.as_ref()) {
            tracing::warn!(error = %e, "cannot listen for stop signals");
        }
        async move {
            match (term, int) {
                (Ok(mut term), Ok(mut int)) => tokio::select! {
                    _ = term.recv() => "SIGTERM",
                    _ = int.recv() => "SIGINT",
                },
                (Ok(mut term), Err(_)) => {
                    term.recv().await;
                    "SIGTERM"
                }
                (Err(_), Ok(mut int)) => {
                    int.recv().await;
                    "SIGINT"
                }
                (Err(_), Err(_)) => std::future::pending().await,
            }
        }
    }
}

#[cfg(windows)]
mod stop_signal {
    use std::future::Future;

    /// Registers the handler now; the future resolves on Ctrl-C.
    pub(super) fn listen() -> impl Future<Output = &'static str> + Send {
        let ctrl_c = tokio::signal::windows::ctrl_c();
        if let Err(e) = &ctrl_c {
            tracing::warn!(error = %e, "cannot listen for Ctrl-C");
        }
        async move {
            match ctrl_c {
                Ok(mut ctrl_c) => {
                    ctrl_c.recv().await;
                    "Ctrl-C"
                }
                Err(_) => std::future::pending().await,
            }
        }
    }
}

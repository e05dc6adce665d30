//! Shared state of one running frontend.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{oneshot, watch};

use crate::backend::{Backend, Identity};
use crate::catalog::routes::RouteTable;
use crate::http::listeners::Listeners;

/// How long a request waits for the kernel's first route snapshot.
const FIRST_SNAPSHOT_WAIT: Duration = Duration::from_secs(5);

/// A legacy in-flight call, addressable by `notifications/cancelled`.
type PendingKey = (Identity, String);

pub(crate) struct App {
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) page_size: usize,
    /// `None` until the kernel's first snapshot arrived.
    routes: watch::Sender<Option<Arc<RouteTable>>>,
    /// Bumped whenever the visible tool list changed.
    pub(crate) tools_version: watch::Sender<u64>,
    pub(crate) listeners: Listeners,
    pending: Mutex<HashMap<PendingKey, (u64, oneshot::Sender<()>)>>,
    call_seq: AtomicU64,
    call_prefix: String,
    /// `true` once the frontend is stopping.
    pub(crate) stopping: watch::Sender<bool>,
    /// Audit records of calls, shipped to the kernel off the hot path.
    pub(crate) audit: crate::observe::audit::CallAudit,
    /// Verified session tokens (hashes); see `session/sessions.rs` for why this is safe.
    pub(crate) sessions: crate::session::sessions::SessionCache,
    /// Each connector's circuit breaker (SPEC §12).
    pub(crate) circuits: crate::call::circuit::Circuits,
    /// List changes and resource updates for clients, and resource subscriptions.
    pub(crate) notifier: Arc<crate::session::notify::Notifier>,
    /// Per-token client state, relayed requests and parked calls.
    pub(crate) clients: crate::session::clients::Clients,
    /// The generations whose unclaimed log messages are followed.
    pub(crate) server_logs: crate::observe::server_logs::Followed,
    /// The search index of the newest route table searched (SPEC §15).
    pub(crate) search_index: crate::catalog::search_index::IndexCache,
    /// Every live generation's skills (SPEC §11 skills over MCP).
    pub(crate) skills: crate::catalog::skills::SkillCatalogue,
    /// The slots for argument checks off the request's task.
    pub(crate) checks: crate::call::validate::Checks,
    /// The key every token's `Mcp-Session-Id` is derived under (SPEC §11).
    pub(crate) session_ids: crate::session::ids::SessionIds,
    /// Told of every route change and every ended worker stream; free heap goes back to the
    /// system once they settle (the watcher starts its task).
    pub(crate) memory: tutti_os::memory::AfterChanges,
}

impl App {
    pub(crate) fn new(
        backend: Arc<dyn Backend>,
        page_size: usize,
        session_ids: crate::session::ids::SessionIds,
    ) -> Self {
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or_default();
        Self {
            audit: crate::observe::audit::CallAudit::start(backend.clone()),
            circuits: crate::call::circuit::Circuits::start(backend.clone()),
            backend,
            page_size: page_size.max(1),
            routes: watch::channel(None).0,
            tools_version: watch::channel(0).0,
            listeners: Listeners::default(),
            pending: Mutex::new(HashMap::new()),
            call_seq: AtomicU64::new(0),
            call_prefix: format!("f{:x}-{:x}", std::process::id(), started),
            stopping: watch::channel(false).0,
            sessions: crate::session::sessions::SessionCache::default(),
            notifier: Arc::default(),
            clients: crate::session::clients::Clients::default(),
            server_logs: crate::observe::server_logs::Followed::default(),
            search_index: crate::catalog::search_index::IndexCache::default(),
            skills: crate::catalog::skills::SkillCatalogue::default(),
            checks: crate::call::validate::Checks::default(),
            session_ids,
            memory: tutti_os::memory::AfterChanges::new(),
        }
    }

    /// Who `token` belongs to: from the session cache, or asked of the kernel (and cached
    /// when the kernel's revocations are acknowledged by this frontend).
    pub(crate) async fn verify_session(
        &self,
        token: &str,
        key: &crate::session::sessions::TokenKey,
    ) -> Result<Option<Identity>, crate::error::Error> {
        if let Some(identity) = self.sessions.lookup(key) {
            return Ok(Some(identity));
        }
        let ticket = self.sessions.ticket();
        let verified = self.backend.verify_session(token).await?;
        if let Some(identity) = &verified {
            self.sessions.insert(ticket, key, identity);
        }
        Ok(verified)
    }

    /// The current route table, waiting (boundedly) for the first snapshot.
    pub(crate) async fn routes(&self) -> Option<Arc<RouteTable>> {
        // Fast path (every request after the first snapshot): no receiver, no timer.
        if let Some(table) = self.routes.borrow().as_ref() {
            return Some(table.clone());
        }
        let mut rx = self.routes.subscribe();
        let ready = tokio::time::timeout(FIRST_SNAPSHOT_WAIT, rx.wait_for(Option::is_some)).await;
        match ready {
            Ok(Ok(table)) => table.clone(),
            _ => None,
        }
    }

    pub(crate) fn publish_routes(&self, table: Arc<RouteTable>, tools_changed: bool) {
        self.backend.retain_endpoints(&table.endpoints());
        let previous = self.routes.send_replace(Some(table.clone()));
        if tools_changed {
            self.tools_version.send_modify(|v| *v += 1);
        }
        self.notify_changes(previous.as_deref(), &table, tools_changed);
    }

    /// The list changes a client can see, as notes.
    fn notify_changes(&self, previous: Option<&RouteTable>, table: &RouteTable, tools: bool) {
        use crate::session::notify::Note;
        let Some(previous) = previous else {
            return; // the first snapshot: nobody has listed anything yet
        };
        let (prompts, resources) = table.catalog.differs(&previous.catalog);
        for (changed, note) in [
            (tools, Note::ToolsListChanged),
            (prompts, Note::PromptsListChanged),
            (resources, Note::ResourcesListChanged),
        ] {
            if changed {
                self.notifier.publish(note);
            }
        }
    }

    pub(crate) fn next_call_id(&self) -> String {
        let n = self.call_seq.fetch_add(1, Ordering::Relaxed);
        format!("{}-{n}", self.call_prefix)
    }

    fn lock_pending(&self) -> MutexGuard<'_, HashMap<PendingKey, (u64, oneshot::Sender<()>)>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a legacy call so `notifications/cancelled` can reach it.
    pub(crate) fn register_pending(
        self: &Arc<Self>,
        identity: &Identity,
        request_id: &serde_json::Value,
    ) -> (PendingGuard, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        let key = (identity.clone(), request_id.to_string());
        let ticket = self.call_seq.fetch_add(1, Ordering::Relaxed);
        self.lock_pending().insert(key.clone(), (ticket, tx));
        (
            PendingGuard {
                app: self.clone(),
                key,
                ticket,
            },
            rx,
        )
    }

    /// Cancels a legacy call; `false` when no such call is in flight.
    pub(crate) fn cancel_pending(
        &self,
        identity: &Identity,
        request_id: &serde_json::Value,
    ) -> bool {
        let key = (identity.clone(), request_id.to_string());
        match self.lock_pending().remove(&key) {
            Some((_, tx)) => tx.send(()).is_ok(),
            None => false,
        }
    }

    /// Starts stopping: ends every listen stream, stops accepting.
    pub(crate) fn stop(&self) {
        // The kernel stops waiting for this frontend's confirmations once it is stopping.
        self.sessions.reset(false);
        self.listeners.close_all();
        self.stopping.send_replace(true);
    }
}

/// Removes a legacy call's cancellation entry when the call ends.
pub(crate) struct PendingGuard {
    app: Arc<App>,
    key: PendingKey,
    ticket: u64,
}

impl Drop for PendingGuard {
    fn drop(&mut self) {
        let mut pending = self.app.lock_pending();
        if pending
            .get(&self.key)
            .is_some_and(|(t, _)| *t == self.ticket)
        {
            pending.remove(&self.key);
        }
    }
}

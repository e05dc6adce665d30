//! A started upstream: the rmcp client ([`RmcpUpstream`]) after the handshake, the era it
//! speaks, its first complete tool list, and what it takes to watch and stop it.

use std::sync::Arc;
use std::time::Duration;

use rmcp::Peer;
use rmcp::handler::client::progress::ProgressDispatcher;
use rmcp::model::{ServerNotification, SubscriptionFilter};
use rmcp::service::{
    ClientCacheConfig, RoleClient, RunningService, RunningServiceCancellationToken,
};
use serde_json::Value;
use tokio::sync::{Notify, broadcast, mpsc, oneshot, watch};

use crate::platform;
use crate::redact::Redactor;
use crate::transport::results::CallResults;
use crate::transport::{NonJsonCounter, SessionEvent};
use crate::upstream::contract::{CallFailure, Offers, Upstream as _};
use crate::upstream::handler::Handler;
use crate::upstream::mrtr;
use crate::upstream::relay::Relay;

/// How long rmcp gets to wind down its transport when we stop.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// [`Upstream`](super::Upstream) over an initialized rmcp client; its requests are in
/// [`super::requests`] and [`super::rounds`].
pub(crate) struct RmcpUpstream {
    pub(super) peer: Peer<RoleClient>,
    pub(super) redactor: Arc<Redactor>,
    /// The upstream's progress notifications, by the token rmcp put on each request.
    pub(super) progress: ProgressDispatcher,
    /// tools/call results the stdout pump keeps as text (stdio upstreams only).
    pub(super) results: Option<Arc<CallResults>>,
    /// What the upstream offers beyond tools.
    pub(crate) offers: Offers,
    /// Its `notifications/resources/updated`, as JSON params.
    pub(super) updates: broadcast::Sender<String>,
    /// The calls in flight, for the upstream's requests to the client.
    pub(super) relay: Arc<Relay>,
    /// Resource subscriptions to a 2026-07-28 upstream (its `subscriptions/listen`).
    pub(super) listens: crate::upstream::listen::ResourceListens,
    /// Its log messages that no call claimed.
    pub(super) logs: broadcast::Sender<String>,
    /// The upstream speaks 2026-07-28 or later: it may answer `input_required`.
    pub(super) mrtr: bool,
}

// === impl Session ===

/// A started upstream: the client plus what it takes to watch and stop it.
pub(crate) struct Session {
    pub(crate) upstream: Arc<RmcpUpstream>,
    pub(crate) protocol_version: String,
    /// The upstream's `serverInfo.name` (shown by `tutti connector probe`).
    pub(crate) server_name: String,
    /// Woken on every `notifications/tools/list_changed`.
    pub(crate) list_changed: Arc<Notify>,
    /// Non-JSON stdout lines (stdio only).
    pub(crate) non_json: Option<Arc<NonJsonCounter>>,
    /// What the HTTP client says about the upstream's session (http only).
    pub(super) session_events: Option<mpsc::UnboundedReceiver<SessionEvent>>,
    pub(super) service: ServiceWatch,
    pub(super) child: Option<ChildHandle>,
}

/// What the HTTP client says about a remote upstream's session.
pub(crate) struct SessionEvents(Option<mpsc::UnboundedReceiver<SessionEvent>>);

impl SessionEvents {
    /// The next event; never, for stdio. Cancel-safe.
    pub(crate) async fn next(&mut self) -> SessionEvent {
        if let Some(events) = self.0.as_mut()
            && let Some(event) = events.recv().await
        {
            return event;
        }
        std::future::pending().await
    }
}

/// A started upstream and its first complete tool list.
pub(crate) struct Started {
    pub(crate) session: Session,
    pub(crate) tools: Vec<Value>,
}

impl Session {
    /// Resolves when the upstream went away on its own, describing how ("exited with status
    /// 1", "connection closed"). Cancel-safe.
    pub(crate) async fn ended(&mut self) -> String {
        match self.child.as_mut() {
            Some(child) => {
                tokio::select! {
                    how = child.exited() => how,
                    () = self.service.closed() => {
                        // The client side ended (stdout closed): prefer the exit status.
                        match tokio::time::timeout(Duration::from_secs(1), child.exited()).await {
                            Ok(how) => how,
                            Err(_) => "closed its stdout".to_owned(),
                        }
                    }
                }
            }
            None => {
                self.service.closed().await;
                "connection closed".to_owned()
            }
        }
    }

    /// What the HTTP client will say about the upstream's session (nothing, for stdio).
    pub(crate) fn take_session_events(&mut self) -> SessionEvents {
        SessionEvents(self.session_events.take())
    }

    /// Stops the upstream: close the MCP connection (for stdio: its stdin), then SIGTERM,
    /// then SIGKILL after 2 s.
    pub(crate) async fn stop(mut self) {
        self.service.close().await;
        if let Some(child) = self.child.take() {
            let how = child.stop().await;
            tracing::info!(upstream = %how, "upstream stopped");
        }
    }
}

/// Watches the rmcp service task.
pub(super) struct ServiceWatch {
    cancel: Option<RunningServiceCancellationToken>,
    done: watch::Receiver<bool>,
}

impl ServiceWatch {
    pub(super) fn spawn(running: RunningService<RoleClient, Handler>) -> Self {
        let cancel = Some(running.cancellation_token());
        let (done_tx, done) = watch::channel(false);
        tokio::spawn(async move {
            let reason = running.waiting().await;
            tracing::debug!(?reason, "MCP client session ended");
            let _ = done_tx.send(true);
        });
        Self { cancel, done }
    }

    async fn closed(&mut self) {
        let _ = self.done.wait_for(|done| *done).await;
    }

    async fn close(&mut self) {
        if let Some(cancel) = self.cancel.take() {
            cancel.cancel();
        }
        let _ = tokio::time::timeout(CLOSE_GRACE, self.closed()).await;
    }
}

/// The stdio child, owned by a supervisor task that reaps it.
pub(super) struct ChildHandle {
    stop: Option<oneshot::Sender<()>>,
    status: watch::Receiver<Option<String>>,
}

impl ChildHandle {
    pub(super) fn spawn(
        mut child: tokio::process::Child,
        contained: platform::Containment,
    ) -> Self {
        let (stop_tx, mut stop_rx) = oneshot::channel::<()>();
        let (status_tx, status) = watch::channel(None);
        tokio::spawn(async move {
            let status = tokio::select! {
                status = child.wait() => status,
                // A stop request, or the handle was dropped: stop it.
                _ = &mut stop_rx => platform::stop_child(&mut child).await,
            };
            // Whatever the upstream started and left behind goes with it.
            contained.end_tree();
            let _ = status_tx.send(Some(platform::describe_exit(&status)));
        });
        Self {
            stop: Some(stop_tx),
            status,
        }
    }

    /// Resolves once the child has exited, describing how. Cancel-safe.
    pub(super) async fn exited(&mut self) -> String {
        match self.status.wait_for(Option::is_some).await {
            Ok(status) => status.clone().unwrap_or_default(),
            Err(_) => "exited".to_owned(),
        }
    }

    /// The current exit description, if it has exited.
    pub(super) fn exit_now(&self) -> Option<String> {
        self.status.borrow().clone()
    }

    pub(super) async fn stop(mut self) -> String {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.exited().await
    }
}

/// The one wording of a start timeout (stdio and http).
pub(super) fn start_timeout(within: Duration) -> String {
    format!(
        "timed out after {} ms (startMs) waiting for the MCP handshake and tools/list",
        within.as_millis()
    )
}

/// The running client, the upstream, (protocol version, server name), the tools.
pub(super) type Listed = (
    RunningService<RoleClient, Handler>,
    Arc<RmcpUpstream>,
    (String, String),
    Vec<Value>,
);

/// After the handshake: no response caching (every list is fresh), then every tools page.
pub(super) async fn first_listing(
    running: RunningService<RoleClient, Handler>,
    redactor: Arc<Redactor>,
    results: Option<Arc<CallResults>>,
) -> Result<Listed, String> {
    let peer = running.peer().clone();
    peer.set_response_cache_config(ClientCacheConfig::disabled())
        .await;
    let (protocol_version, server_name) = peer
        .peer_info()
        .map(|info| {
            (
                info.protocol_version.as_str().to_owned(),
                info.server_info
                    .as_ref()
                    .map(|s| s.name.clone())
                    .unwrap_or_default(),
            )
        })
        .unwrap_or_default();
    let offers = peer
        .peer_info()
        .map(|info| offers(&info.capabilities))
        .unwrap_or_default();
    let upstream = Arc::new(RmcpUpstream {
        peer,
        redactor,
        progress: running.service().progress.clone(),
        relay: running.service().relay.clone(),
        results,
        offers,
        updates: running.service().updates.clone(),
        listens: Default::default(),
        logs: running.service().logs.clone(),
        mrtr: protocol_version.as_str() >= mrtr::MRTR_SINCE,
    });
    let tools = upstream.list_tools().await.map_err(|f| match f {
        CallFailure::Rpc { code, message, .. } => {
            format!("tools/list failed: JSON-RPC error {code}: {message}")
        }
        CallFailure::Closed => "connection closed during tools/list".to_owned(),
        CallFailure::TooLarge(limit) => {
            format!("tools/list failed: a page larger than {limit} bytes")
        }
        CallFailure::Auth(detail)
        | CallFailure::Unavailable(detail)
        | CallFailure::Other(detail) => {
            format!("tools/list failed: {detail}")
        }
    })?;
    tracing::info!(
        protocol_version = %protocol_version,
        tools = tools.len(),
        "upstream initialized"
    );
    Ok((running, upstream, (protocol_version, server_name), tools))
}

/// What the upstream's capabilities offer beyond tools.
fn offers(capabilities: &rmcp::model::ServerCapabilities) -> Offers {
    Offers {
        prompts: capabilities.prompts.is_some(),
        resources: capabilities.resources.is_some(),
        completions: capabilities.completions.is_some(),
        subscribe: capabilities
            .resources
            .as_ref()
            .and_then(|r| r.subscribe)
            .unwrap_or(false),
    }
}

/// On a 2026-07-28 connection list changes arrive on a `subscriptions/listen` stream.
pub(super) fn subscribe_list_changed(
    running: &RunningService<RoleClient, Handler>,
    notify: Arc<Notify>,
) {
    let peer = running.peer().clone();
    let Some(info) = peer.peer_info() else {
        return;
    };
    let caps = &info.capabilities;
    let tools = caps.tools.as_ref().and_then(|t| t.list_changed) == Some(true);
    let prompts = caps.prompts.as_ref().and_then(|p| p.list_changed) == Some(true);
    let resources = caps.resources.as_ref().and_then(|r| r.list_changed) == Some(true);
    if info.protocol_version.has_initialize() || !(tools || prompts || resources) {
        return;
    }
    tokio::spawn(async move {
        let mut filter = SubscriptionFilter::builder();
        if tools {
            filter = filter.tools_list_changed();
        }
        if prompts {
            filter = filter.prompts_list_changed();
        }
        if resources {
            filter = filter.resources_list_changed();
        }
        let filter = filter.build();
        let mut subscription = match peer.listen(filter).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot subscribe to the upstream's tool list changes");
                return;
            }
        };
        loop {
            match subscription.next().await {
                Ok(Some(
                    ServerNotification::ToolListChangedNotification(_)
                    | ServerNotification::PromptListChangedNotification(_)
                    | ServerNotification::ResourceListChangedNotification(_),
                )) => {
                    notify.notify_one();
                }
                Ok(Some(_)) => {}
                Ok(None) => {
                    tracing::debug!(end = ?subscription.end(), "tool list subscription ended");
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "tool list subscription failed");
                    return;
                }
            }
        }
    });
}

//! The upstream's requests and notifications to its client: elicitation, sampling and roots
//! relayed to the client of the call they belong to, log messages, progress, list changes and
//! resource updates.

use std::sync::Arc;

use rmcp::ClientHandler;
use rmcp::handler::client::progress::ProgressDispatcher;
use rmcp::model::{
    ClientCapabilities, ClientConfig, Implementation, ProgressNotificationParam, ProtocolVersion,
    ResourceUpdatedNotificationParam,
};
use rmcp::service::{InboundStreamOrigin, NotificationContext, RequestContext, RoleClient};
use serde_json::Value;
use tokio::sync::{Notify, broadcast};

use crate::upstream::relay::{Origin, Relay};

/// `notifications/resources/updated` buffered for a slow `WatchResources` stream; older ones are
/// dropped (an update says "read again", so a later one stands for a lost one).
const RESOURCE_UPDATES: usize = 256;

/// Our rmcp client handler: notices `notifications/tools/list_changed`, routes progress, and
/// relays the upstream's elicitation, sampling and roots requests and its log messages to
/// the client of the call they belong to ([`crate::upstream::relay`]). It declares all three client
/// capabilities always: which client a request reaches is only known when it comes, and a
/// client without the capability makes the upstream get an error (SPEC §11).
#[derive(Clone)]
pub(super) struct Handler {
    info: ClientConfig,
    list_changed: Arc<Notify>,
    pub(super) progress: ProgressDispatcher,
    /// `notifications/resources/updated` params, for the frontend's `WatchResources`.
    pub(super) updates: broadcast::Sender<String>,
    /// `notifications/message` params no call claimed, for the frontend's `WatchLogs`.
    pub(super) logs: broadcast::Sender<String>,
    pub(super) relay: Arc<Relay>,
}

impl Handler {
    pub(super) fn new(list_changed: Arc<Notify>) -> Self {
        let info = ClientConfig::new(
            relayed_capabilities(),
            Implementation::new("tutti-upstream-worker", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE);
        Self {
            info,
            list_changed,
            progress: ProgressDispatcher::new(),
            updates: broadcast::channel(RESOURCE_UPDATES).0,
            logs: broadcast::channel(RESOURCE_UPDATES).0,
            relay: Arc::new(Relay::default()),
        }
    }

    /// Relays one request of the upstream and decodes the client's answer as `T`.
    async fn relay_request<T: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        params: Value,
        context: &RequestContext<RoleClient>,
    ) -> Result<T, rmcp::ErrorData> {
        let origin = origin(&context.extensions);
        let answer = self
            .relay
            .ask(origin, method, params, context.ct.clone())
            .await?;
        serde_json::from_value(answer).map_err(|e| {
            rmcp::ErrorData::internal_error(
                format!("{method}: the client's answer is not a valid result: {e}"),
                None,
            )
        })
    }
}

/// Where rmcp says a request or notification of the upstream came from.
fn origin(extensions: &rmcp::model::Extensions) -> Origin<'_> {
    match extensions.get::<InboundStreamOrigin>() {
        Some(InboundStreamOrigin::OutboundRequest(id)) => Origin::Call(id),
        Some(InboundStreamOrigin::Unassociated) => Origin::Unassociated,
        None => Origin::Unknown,
    }
}

/// The client capabilities the worker declares to its upstream: elicitation (form and URL),
/// sampling and roots, each relayed to the calling client.
fn relayed_capabilities() -> ClientCapabilities {
    let mut capabilities = ClientCapabilities::default();
    capabilities.elicitation = Some(
        rmcp::model::ElicitationCapability::default()
            .with_form(Default::default())
            .with_url(Default::default()),
    );
    capabilities.sampling = Some(Default::default());
    capabilities.roots = Some(Default::default());
    capabilities
}

fn to_value<T: serde::Serialize>(params: &T) -> Value {
    serde_json::to_value(params).unwrap_or(Value::Null)
}

#[expect(
    deprecated,
    reason = "sampling, roots and logging are deprecated by 2026-07-28 but served"
)]
impl ClientHandler for Handler {
    async fn create_elicitation(
        &self,
        params: rmcp::model::ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        self.relay_request("elicitation/create", to_value(&params), &context)
            .await
    }

    async fn create_message(
        &self,
        params: rmcp::model::CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, rmcp::ErrorData> {
        self.relay_request("sampling/createMessage", to_value(&params), &context)
            .await
    }

    async fn list_roots(
        &self,
        context: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ListRootsResult, rmcp::ErrorData> {
        self.relay_request("roots/list", Value::Null, &context)
            .await
    }

    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        context: NotificationContext<RoleClient>,
    ) {
        let origin = origin(&context.extensions);
        if let Some(unclaimed) = self.relay.log(origin, to_value(&params).to_string()) {
            // Nobody watching (no frontend stream yet) is fine.
            let _ = self.logs.send(unclaimed);
        }
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.list_changed.notify_one();
    }

    // Prompts and resources are offered with the tools as one candidate: any of
    // the three lists changing means listing and offering again.
    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.list_changed.notify_one();
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.list_changed.notify_one();
    }

    async fn on_resource_updated(
        &self,
        mut params: ResourceUpdatedNotificationParam,
        context: NotificationContext<RoleClient>,
    ) {
        // rmcp takes the params' `_meta` out of them (into the context's `extensions`, where
        // its dispatch leaves it, rather than `meta`): put it back, so the update reaches
        // clients as the upstream sent it.
        if params.meta.is_none() {
            params.meta = Some(context.meta)
                .filter(|meta| !meta.is_empty())
                .or_else(|| {
                    context
                        .extensions
                        .get::<rmcp::model::NotificationMetaObject>()
                        .cloned()
                });
        }
        if let Ok(params) = serde_json::to_string(&params) {
            // Nobody listening (no subscriber in the frontend) is fine.
            let _ = self.updates.send(params);
        }
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.handle_notification(params).await;
    }

    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }
}

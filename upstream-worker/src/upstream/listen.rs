//! Resource subscriptions to a 2026-07-28 upstream.
//!
//! That revision has no `resources/subscribe`: a client asks for a resource's updates with a
//! `subscriptions/listen` request whose `resourceSubscriptions` names the URI, and the updates
//! arrive on that request's stream. The frontend's `Subscribe` / `Unsubscribe` are the same
//! for both eras; for a modern upstream the worker keeps one listen stream per subscribed URI
//! here and relays its `notifications/resources/updated` into the same broadcast the legacy
//! notifications go to (`WatchResources`), so clients see no difference.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use rmcp::Peer;
use rmcp::model::{ServerNotification, SubscriptionFilter};
use rmcp::service::RoleClient;
use tokio::sync::broadcast;
use tokio::task::AbortHandle;

/// The `_meta` key naming the listen stream a notification belongs to.
const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// The open listen streams of one upstream, by URI.
#[derive(Default)]
pub(crate) struct ResourceListens {
    streams: Arc<Mutex<HashMap<String, AbortHandle>>>,
}

impl ResourceListens {
    /// Opens a listen stream for `uri` (once) and waits for its acknowledgement; each update
    /// goes to `updates` as its JSON params. `Err`: why the upstream did not honour it.
    pub(crate) async fn subscribe(
        &self,
        peer: &Peer<RoleClient>,
        uri: &str,
        updates: broadcast::Sender<String>,
    ) -> Result<(), String> {
        if self.lock().contains_key(uri) {
            return Ok(());
        }
        let filter = SubscriptionFilter::builder()
            .resource_subscriptions([uri.to_owned()])
            .build();
        let mut subscription = peer
            .listen(filter)
            .await
            .map_err(|e| format!("subscriptions/listen for {uri} failed: {e}"))?;
        let honoured = subscription
            .acknowledged()
            .resource_subscriptions
            .as_ref()
            .is_some_and(|uris| uris.iter().any(|u| u == uri));
        if !honoured {
            return Err(format!(
                "the upstream did not honour a subscription to {uri}"
            ));
        }
        let streams = Arc::clone(&self.streams);
        let key = uri.to_owned();
        let task = tokio::spawn(async move {
            loop {
                match subscription.next().await {
                    Ok(Some(ServerNotification::ResourceUpdatedNotification(n))) => {
                        let mut params = n.params;
                        // Our stream's id means nothing to the clients.
                        if let Some(meta) = params.meta.as_mut() {
                            meta.remove(SUBSCRIPTION_ID);
                        }
                        if let Ok(params) = serde_json::to_string(&params) {
                            // Nobody listening in the frontend is fine.
                            let _ = updates.send(params);
                        }
                    }
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(e) => {
                        tracing::warn!(uri = %key, error = %e, "resource subscription failed");
                        break;
                    }
                }
            }
            tracing::debug!(uri = %key, "resource subscription ended");
            streams
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&key);
        });
        let previous = self.lock().insert(uri.to_owned(), task.abort_handle());
        if let Some(previous) = previous {
            // Two subscribes raced: keep one stream.
            previous.abort();
        }
        Ok(())
    }

    /// Closes the listen stream of `uri`, if any (closing it ends the subscription).
    pub(crate) fn unsubscribe(&self, uri: &str) {
        if let Some(task) = self.lock().remove(uri) {
            task.abort();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, AbortHandle>> {
        self.streams.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for ResourceListens {
    fn drop(&mut self) {
        for task in self.lock().values() {
            task.abort();
        }
    }
}

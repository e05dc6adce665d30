//! The `WatchLogs` streams of live generations and their delivery to legacy GET streams
//! (see `observe/server_logs.rs` for the rule).

use std::collections::BTreeMap;
use std::sync::Arc;

use futures_util::StreamExt as _;
use serde_json::json;

use crate::app::App;
use crate::catalog::routes::{Connector, RouteTable};

/// After a route change: a `WatchLogs` stream for every live generation that has none yet.
pub(crate) fn follow(app: &Arc<App>, table: &RouteTable) {
    let live: BTreeMap<(String, u64), Arc<Connector>> = table
        .tools()
        .iter()
        .map(|t| &t.connector)
        .chain(table.catalog.connectors())
        .map(|c| ((c.key.clone(), c.generation), Arc::clone(c)))
        .collect();
    for ((key, generation), connector) in live {
        if app.server_logs.start(&key, generation) {
            tokio::spawn(relay(Arc::clone(app), connector));
        }
    }
}

/// Relays one generation's unclaimed log messages until its stream ends.
async fn relay(app: Arc<App>, connector: Arc<Connector>) {
    let (key, generation) = (connector.key.as_str(), connector.generation);
    match app
        .backend
        .watch_logs(&connector.endpoint, generation)
        .await
    {
        Ok(mut logs) => {
            while let Some(note) = logs.next().await {
                deliver(&app, key, &note);
            }
        }
        Err(e) => tracing::debug!(connector = %key, generation, error = %e, "no log stream"),
    }
    app.server_logs.stop(key, generation);
    // The stream's connection to the worker is usually the last one it had.
    app.memory.changed();
}

/// Puts one message of connector `key` on the GET streams of the tokens whose level admits it.
fn deliver(app: &App, key: &str, note: &str) {
    for (token, level) in app.clients.log_listeners() {
        if let Some(params) = crate::call::relay::log_params(key, note, level) {
            let message =
                json!({"jsonrpc": "2.0", "method": "notifications/message", "params": params});
            crate::http::get_stream::deliver(app, &token, &message);
        }
    }
}

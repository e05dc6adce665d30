//! What the rest of the worker sees of the upstream: the [`Upstream`] trait, why a request
//! failed ([`CallFailure`]), where progress goes and what the upstream offers beyond tools.

use std::future::Future;

use bytes::Bytes;
use rmcp::model::JsonObject;
use serde_json::Value;
use tokio::sync::broadcast;

use crate::upstream::relay::RelayTo;

/// Why a request to the upstream did not produce a result.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum CallFailure {
    /// The upstream answered with a JSON-RPC error: passed on unchanged.
    Rpc {
        code: i32,
        message: String,
        data: Option<Value>,
    },
    /// The connection to the upstream is gone.
    Closed,
    /// The upstream refused our credentials: the HTTP status line (401/403).
    Auth(String),
    /// The answer's line was longer than this many bytes (`stdio::MAX_STDOUT_LINE`) and was
    /// discarded unread.
    TooLarge(usize),
    /// A remote upstream cannot serve the request now (it failed, or lost our session and a
    /// call that may have reached it is not repeated); redacted detail.
    Unavailable(String),
    /// Anything else (an unusable response, …); redacted detail.
    Other(String),
}

/// Where the upstream's `notifications/progress` for one call go: the params as a JSON object
/// (progress, total, message) without the upstream's token, in the order they came.
pub(crate) type ProgressSink = tokio::sync::mpsc::Sender<String>;

/// The one upstream MCP server this worker is the client of.
pub(crate) trait Upstream: Send + Sync + 'static {
    /// Every page of `tools/list`, each tool as the upstream's JSON object.
    fn list_tools(&self) -> impl Future<Output = Result<Vec<Value>, CallFailure>> + Send;

    /// One `tools/call`: the upstream's `CallToolResult` as JSON text (serialized once, straight
    /// from rmcp's model), or why there is none.
    ///
    /// Cancellable two ways, both of which send `notifications/cancelled` for the request to
    /// the upstream: when `interrupt` resolves first (timeout, `Cancel`, fencing) the
    /// notification is sent before this returns `Err(why)`; when the returned future is
    /// dropped (the gRPC caller went away) it is sent in the background.
    ///
    /// With `progress`, the upstream's progress notifications for this call are forwarded
    /// there (all of them before this returns); a sink that is full or gone loses them, the
    /// call goes on.
    ///
    /// With `relay`, the upstream's requests to the client and its log messages during this
    /// call go there ([`crate::upstream::relay`]); without, such requests get an error.
    fn call_tool<W: Send>(
        &self,
        name: String,
        arguments: Option<JsonObject>,
        meta: Option<JsonObject>,
        progress: Option<ProgressSink>,
        relay: Option<RelayTo>,
        interrupt: impl Future<Output = W> + Send,
    ) -> impl Future<Output = Result<Result<Bytes, CallFailure>, W>> + Send;

    /// One `prompts/get` whose upstream requests (or 2026-07-28 `input_required` rounds) go
    /// to `relay` exactly as [`Upstream::call_tool`]'s do: the upstream's
    /// `GetPromptResult` as JSON text. The default forwards it without relaying.
    fn get_prompt<W: Send>(
        &self,
        name: String,
        arguments: Option<JsonObject>,
        meta: Option<JsonObject>,
        relay: Option<RelayTo>,
        interrupt: impl Future<Output = W> + Send,
    ) -> impl Future<Output = Result<Result<Bytes, CallFailure>, W>> + Send {
        let _ = (meta, relay);
        let mut params = JsonObject::new();
        params.insert("name".to_owned(), Value::String(name));
        if let Some(arguments) = arguments {
            params.insert("arguments".to_owned(), Value::Object(arguments));
        }
        self.request("prompts/get", Some(params), interrupt)
    }

    /// The client's answer to relayed request `id`; false when no such request waits.
    fn answer_request(&self, id: &str, answer: crate::upstream::relay::Answer) -> bool {
        let _ = (id, answer);
        false
    }

    /// One other request (`prompts/get`, `resources/read`, `completion/complete`,
    /// `resources/subscribe`, a list page, …) with `params` as given: the upstream's
    /// result as JSON text, as sent where the transport lets us take it so, or why there is
    /// none. Interrupted and cancelled exactly like [`Upstream::call_tool`].
    fn request<W: Send>(
        &self,
        method: &'static str,
        params: Option<JsonObject>,
        interrupt: impl Future<Output = W> + Send,
    ) -> impl Future<Output = Result<Result<Bytes, CallFailure>, W>> + Send {
        let _ = (method, params, interrupt);
        std::future::ready(Ok(Err(CallFailure::Other(
            "this upstream forwards tools only".to_owned(),
        ))))
    }

    /// The upstream's `notifications/resources/updated` params (JSON objects), as they come.
    fn resource_updates(&self) -> Option<broadcast::Receiver<String>> {
        None
    }

    /// The upstream's `notifications/message` params that no call claimed, as they come.
    fn unclaimed_logs(&self) -> Option<broadcast::Receiver<String>> {
        None
    }
}

/// What the upstream declared beyond tools in its capabilities.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Offers {
    pub(crate) prompts: bool,
    pub(crate) resources: bool,
    pub(crate) completions: bool,
    pub(crate) subscribe: bool,
}

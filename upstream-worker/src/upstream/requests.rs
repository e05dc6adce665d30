//! [`Upstream`] over the rmcp client: paged `tools/list`, the relaying calls (through
//! [`crate::upstream::rounds`]) and every other request forwarded as given.

use std::future::Future;

use bytes::Bytes;
use rmcp::model::{
    ClientRequest, CustomRequest, JsonObject, ListToolsRequest, PaginatedRequestParams,
    ServerResult,
};
use rmcp::service::PeerRequestOptions;
use serde_json::Value;
use tokio::sync::broadcast;

use crate::transport::results::Expected;
use crate::upstream::cancel::{CancelOnDrop, send_cancelled};
use crate::upstream::contract::{CallFailure, ProgressSink, Upstream};
use crate::upstream::mrtr;
use crate::upstream::relay::RelayTo;
use crate::upstream::rounds::Called;
use crate::upstream::session::RmcpUpstream;

impl Upstream for RmcpUpstream {
    async fn list_tools(&self) -> Result<Vec<Value>, CallFailure> {
        // Paged here rather than with rmcp's `list_all_tools`: that one needs every tool to
        // decode as rmcp's `Tool`, so one tool without an `inputSchema` would fail the whole
        // list ("Unexpected response type") and end the worker at every restart. A page rmcp
        // cannot type arrives as its raw JSON instead, and the kernel refuses the generation
        // naming the tool and the field (SPEC §5.1).
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        let mut seen_cursors = std::collections::HashSet::new();
        loop {
            let params = PaginatedRequestParams::default().with_cursor(cursor.take());
            let request = ClientRequest::ListToolsRequest(ListToolsRequest {
                method: Default::default(),
                params: Some(params),
                extensions: Default::default(),
            });
            let result = self
                .peer
                .send_request(request)
                .await
                .map_err(|e| self.failure(e))?;
            let (page, next) = tools_page(result)?;
            tools.extend(page);
            match next {
                None => return Ok(tools),
                Some(next) if !seen_cursors.insert(next.clone()) => {
                    return Err(CallFailure::Other(format!(
                        "tools/list: the upstream returned the cursor {next:?} twice; \
                         its pagination never ends"
                    )));
                }
                Some(next) => cursor = Some(next),
            }
        }
    }

    async fn call_tool<W: Send>(
        &self,
        name: String,
        arguments: Option<JsonObject>,
        meta: Option<JsonObject>,
        progress: Option<ProgressSink>,
        relay: Option<RelayTo>,
        interrupt: impl Future<Output = W> + Send,
    ) -> Result<Result<Bytes, CallFailure>, W> {
        let call = (Called::Tool, name, arguments, meta);
        self.rounds(call, progress, relay, interrupt).await
    }

    async fn get_prompt<W: Send>(
        &self,
        name: String,
        arguments: Option<JsonObject>,
        meta: Option<JsonObject>,
        relay: Option<RelayTo>,
        interrupt: impl Future<Output = W> + Send,
    ) -> Result<Result<Bytes, CallFailure>, W> {
        let call = (Called::Prompt, name, arguments, meta);
        self.rounds(call, None, relay, interrupt).await
    }

    fn answer_request(&self, id: &str, answer: crate::upstream::relay::Answer) -> bool {
        self.relay.answer(id, answer)
    }

    async fn request<W: Send>(
        &self,
        method: &'static str,
        params: Option<JsonObject>,
        interrupt: impl Future<Output = W> + Send,
    ) -> Result<Result<Bytes, CallFailure>, W> {
        if matches!(method, "resources/subscribe" | "resources/unsubscribe") && self.modern() {
            return self
                .listen_request(method, params.as_ref(), interrupt)
                .await;
        }
        // A custom request: rmcp writes method and params as given (no typed model in between).
        let request =
            ClientRequest::CustomRequest(CustomRequest::new(method, params.map(Value::Object)));
        let mut interrupt = std::pin::pin!(interrupt);
        let sent = tokio::select! {
            sent = self.peer.send_request_with_option(request, PeerRequestOptions::no_options()) => sent,
            why = &mut interrupt => return Err(why),
        };
        let handle = match sent {
            Ok(handle) => handle,
            Err(e) => return Ok(Err(self.failure(e))),
        };
        let id = handle.id.clone();
        // As for tools/call: registered before rmcp can have written the request.
        let expected = self.results.as_ref().map(|r| r.expect_any(id.clone()));
        let mut guard = CancelOnDrop {
            peer: self.peer.clone(),
            id: Some(id.clone()),
        };
        let response = tokio::select! {
            response = handle.await_response() => response,
            why = &mut interrupt => {
                guard.disarm();
                send_cancelled(&self.peer, id).await;
                return Err(why);
            }
        };
        guard.disarm();
        let result = match response {
            Ok(result) => result,
            Err(e) => return Ok(Err(self.failure(e))),
        };
        if let Some(text) = expected.as_ref().and_then(Expected::take) {
            return Ok(Ok(text));
        }
        if let Some(limit) = expected.as_ref().and_then(Expected::too_large) {
            return Ok(Err(CallFailure::TooLarge(limit)));
        }
        if mrtr::input_required(&result).is_some() {
            // Never passed on: its requestState is the upstream's, and this request has no
            // caller to relay to (only tools/call and prompts/get stream).
            return Ok(Err(CallFailure::Other(format!(
                "the upstream needs input from the client (input_required) to answer {method}; \
                 the runtime relays an upstream's requests to the client during tools/call and \
                 prompts/get, for a client that declares the capability it needs"
            ))));
        }
        Ok(serde_json::to_vec(&result)
            .map(Bytes::from)
            .map_err(|e| CallFailure::Other(format!("cannot encode the result: {e}"))))
    }

    fn resource_updates(&self) -> Option<broadcast::Receiver<String>> {
        Some(self.updates.subscribe())
    }

    fn unclaimed_logs(&self) -> Option<broadcast::Receiver<String>> {
        Some(self.logs.subscribe())
    }
}

impl RmcpUpstream {
    /// Whether the upstream speaks 2026-07-28 (no `initialize`, so no `resources/subscribe`).
    fn modern(&self) -> bool {
        self.peer
            .peer_info()
            .is_some_and(|info| !info.protocol_version.has_initialize())
    }

    /// `resources/subscribe` / `unsubscribe` to a 2026-07-28 upstream: one listen stream per
    /// URI (`listen.rs`); the answer is the empty result the legacy request has.
    async fn listen_request<W>(
        &self,
        method: &str,
        params: Option<&JsonObject>,
        interrupt: impl Future<Output = W>,
    ) -> Result<Result<Bytes, CallFailure>, W> {
        let Some(uri) = params.and_then(|p| p.get("uri")).and_then(Value::as_str) else {
            return Ok(Err(CallFailure::Rpc {
                code: -32602,
                message: "Invalid params: uri is required".to_owned(),
                data: None,
            }));
        };
        if method == "resources/unsubscribe" {
            self.listens.unsubscribe(uri);
            return Ok(Ok(Bytes::from_static(b"{}")));
        }
        let subscribed = self
            .listens
            .subscribe(&self.peer, uri, self.updates.clone());
        tokio::select! {
            done = subscribed => Ok(done
                .map(|()| Bytes::from_static(b"{}"))
                .map_err(CallFailure::Other)),
            why = interrupt => Err(why),
        }
    }
}

/// One `tools/list` page: the tools as JSON objects and the next cursor.
fn tools_page(result: ServerResult) -> Result<(Vec<Value>, Option<String>), CallFailure> {
    let unusable = |why: &str| CallFailure::Other(format!("tools/list: {why}"));
    match result {
        ServerResult::ListToolsResult(page) => {
            let tools = page
                .tools
                .iter()
                .map(|tool| {
                    serde_json::to_value(tool)
                        .map_err(|e| unusable(&format!("cannot encode a tool: {e}")))
                })
                .collect::<Result<_, _>>()?;
            Ok((tools, page.next_cursor))
        }
        // Not decodable as rmcp's typed list (a tool without `inputSchema`, …): as sent.
        ServerResult::CustomResult(raw) => {
            let Value::Object(mut page) = raw.0 else {
                return Err(unusable("the result is not a JSON object"));
            };
            let Some(Value::Array(tools)) = page.remove("tools") else {
                return Err(unusable("the result has no \"tools\" array"));
            };
            let next = match page.remove("nextCursor") {
                None | Some(Value::Null) => None,
                Some(Value::String(c)) => Some(c),
                Some(other) => {
                    return Err(unusable(&format!("nextCursor {other} is not a string")));
                }
            };
            Ok((tools, next))
        }
        _ => Err(unusable("the upstream answered with another result type")),
    }
}

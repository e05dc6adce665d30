//! The legacy surface: MCP 2025-06-18 (also 2025-03-26 and 2025-11-25 at initialize),
//! without sessions: no `Mcp-Session-Id` is ever issued.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};

use crate::call;
use crate::era::{Revision, server_info};
use crate::progress;
use crate::rpc::{self, METHOD_NOT_FOUND, Message, RESOURCE_NOT_FOUND, RpcError, SERVER_ERROR};
use crate::search;
use crate::shared::{
    Ctx, PROTOCOL_VERSION_HEADER, empty_list, empty_list_field, get_prompt, list_tools,
    read_resource,
};
use crate::skills::{self, skill_uri};

/// Versions this surface speaks; the first is the one offered when the client's is unknown.
pub(crate) const VERSIONS: [&str; 3] = ["2025-06-18", "2025-03-26", "2025-11-25"];

pub(crate) async fn handle(ctx: Ctx, message: Message) -> Response {
    let id = match &message {
        Message::Request { id, .. } => id.clone(),
        _ => Value::Null,
    };
    if let Some(value) = ctx.headers.get(PROTOCOL_VERSION_HEADER) {
        let requested = value.to_str().map(str::trim).unwrap_or_default();
        if !VERSIONS.contains(&requested) {
            return rpc::error_response(
                StatusCode::BAD_REQUEST,
                &id,
                &RpcError::new(
                    SERVER_ERROR,
                    format!(
                        "Bad Request: unsupported MCP-Protocol-Version (supported: {})",
                        VERSIONS.join(", ")
                    ),
                )
                .with_data(json!({"supported": VERSIONS, "requested": requested})),
            );
        }
    }
    match message {
        Message::Response => rpc::accepted(),
        Message::Notification { method, params } => {
            if method == "notifications/cancelled"
                && let Some(request_id) = params.as_ref().and_then(|p| p.get("requestId"))
                && ctx.app.cancel_pending(&ctx.identity, request_id)
            {
                tracing::debug!("legacy call cancelled by the client");
            }
            rpc::accepted()
        }
        Message::Request { id, method, params } => {
            let answer = match method.as_str() {
                "initialize" => Ok(initialize(params.as_ref())),
                "ping" => Ok(json!({})),
                "tools/list" => {
                    if search::listing(&ctx).await {
                        return search::list_response(&id, Map::new());
                    }
                    match list_tools(&ctx.app, params.as_ref(), revision(&ctx), Map::new()).await {
                        Ok(page) => return page.respond(&id),
                        Err(error) => Err(error),
                    }
                }
                "tools/call" => return tools_call(ctx, id, params).await,
                "skills/list" => Ok(Value::Object(skills::list(&ctx.app.skills).await)),
                "skills/get" => skills::get(&ctx.app.skills, params.as_ref())
                    .await
                    .map(Value::Object),
                "resources/list" => Ok(json!({
                    "resources": skills::list_resources(&ctx.app.skills).await
                })),
                "resources/read" => match skill_uri(params.as_ref()) {
                    Some(uri) => skills::read(&ctx.app.skills, uri, RESOURCE_NOT_FOUND)
                        .await
                        .unwrap_or_else(|| Ok(Map::new()))
                        .map(Value::Object),
                    None => read_resource(params.as_ref(), RESOURCE_NOT_FOUND),
                },
                "prompts/get" => get_prompt(params.as_ref()),
                other => match empty_list_field(other) {
                    Some(field) => Ok(Value::Object(empty_list(field))),
                    None => Err(RpcError::new(
                        METHOD_NOT_FOUND,
                        format!("Method not found: {other}"),
                    )),
                },
            };
            rpc::answer_response(&id, answer)
        }
    }
}

fn initialize(params: Option<&Value>) -> Value {
    let requested = params
        .and_then(|p| p.get("protocolVersion"))
        .and_then(Value::as_str);
    let version = match requested {
        Some(v) if VERSIONS.contains(&v) => v,
        _ => VERSIONS[0],
    };
    json!({
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": false}, "resources": {}, "prompts": {},
            "extensions": {skills::EXTENSION: {}}},
        "serverInfo": server_info(),
    })
}

/// `tools/call`: the answer as JSON, or as an event stream of the upstream's progress and then
/// the answer when the client asked for progress (see [`progress`]). A legacy
/// `notifications/cancelled` for `id` cancels it either way.
async fn tools_call(ctx: Ctx, id: Value, params: Option<Value>) -> Response {
    let revision = revision(&ctx);
    let (tool, params) = match call::tool_name(params.as_ref()) {
        Ok(name) => match search::route(&ctx, name, params.as_ref()).await {
            search::Routed::Direct => (call::resolve(&ctx.app, name).await, params),
            search::Routed::Answer(answer) => {
                return call::call_response(&id, answer.map(|r| r.in_era(revision)));
            }
            search::Routed::Call { tool, params } => (Ok(tool), params),
        },
        Err(e) => (Err(e), None),
    };
    let tool = match tool {
        Ok(tool) => tool,
        Err(e) => return call::call_response(&id, Err(e)),
    };
    let progress = progress::requested(params.as_ref(), &ctx.headers);
    let arguments = params.and_then(|mut p| p.get_mut("arguments").map(Value::take));
    let (pending, cancelled) = ctx.app.register_pending(&ctx.identity, &id);
    let Some(token) = progress else {
        let answer = call::execute(
            &ctx.app,
            &ctx.identity,
            &tool,
            arguments.as_ref(),
            Some(cancelled),
            None,
        )
        .await
        .map(|r| r.in_era(revision));
        drop(pending);
        return call::call_response(&id, answer);
    };
    let (app, identity) = (ctx.app.clone(), ctx.identity.clone());
    progress::respond(id, token, move |sink| async move {
        let _pending = pending;
        call::execute(
            &app,
            &identity,
            &tool,
            arguments.as_ref(),
            Some(cancelled),
            Some(sink),
        )
        .await
        .map(|r| r.in_era(revision))
    })
    .await
}

/// The revision this request is answered in (its `MCP-Protocol-Version` header).
fn revision(ctx: &Ctx) -> Revision {
    Revision::legacy(
        ctx.headers
            .get(PROTOCOL_VERSION_HEADER)
            .and_then(|v| v.to_str().ok()),
    )
}

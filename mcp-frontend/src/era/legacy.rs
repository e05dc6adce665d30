//! The legacy surface: MCP 2025-06-18 (also 2025-03-26 and 2025-11-25 at initialize),
//! without protocol session state: `initialize` names the token's `Mcp-Session-Id`, derived
//! from the token (`session/ids.rs`).

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};

use crate::call::path::{self, Caller, Cancel, Sending};
use crate::call::progress;
use crate::call::relay::Era;
use crate::catalog::beyond::{self, List};
use crate::catalog::search;
use crate::catalog::skills;
use crate::era::shared::{Ctx, PROTOCOL_VERSION_HEADER, list_tools};
use crate::era::tables::{Revision, server_info};
use crate::rpc::{self, METHOD_NOT_FOUND, Message, RESOURCE_NOT_FOUND, RpcError, SERVER_ERROR};

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
        Message::Response { id, answer } => {
            let token = ctx.token_key;
            if !crate::call::relay::answer_legacy(&ctx.app, token, &id, answer) {
                tracing::debug!("a client response names no request waiting for one");
            }
            rpc::accepted()
        }
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
                "initialize" => return initialize_response(&ctx, &id, params.as_ref()).await,
                "logging/setLevel" => set_level(&ctx, params.as_ref()),
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
                "prompts/get" => return prompts_get(ctx, id, params).await,
                "skills/list" => Ok(Value::Object(skills::list(&ctx.app.skills).await)),
                "skills/get" => skills::get(&ctx.app.skills, params.as_ref())
                    .await
                    .map(Value::Object),
                other => beyond_tools(&ctx, other, params).await,
            };
            rpc::answer_response(&id, answer)
        }
    }
}

/// The methods beyond tools (SPEC §11) on this surface, and method-not-found for the rest.
async fn beyond_tools(ctx: &Ctx, method: &str, params: Option<Value>) -> Result<Value, RpcError> {
    let (app, who) = (&ctx.app, &ctx.identity);
    let answer = match method {
        "resources/read" => beyond::read_resource(app, who, params, RESOURCE_NOT_FOUND).await,
        "completion/complete" => beyond::complete(app, who, params).await,
        "resources/subscribe" => beyond::subscribe(app, who, params, RESOURCE_NOT_FOUND).await,
        "resources/unsubscribe" => beyond::unsubscribe(app, who, params).await,
        other => match List::of(other) {
            Some(list) => beyond::list(app, list).await.map(Value::Object),
            None => Err(RpcError::new(
                METHOD_NOT_FOUND,
                format!("Method not found: {other}"),
            )),
        },
    };
    answer.map(|result| beyond::in_era(result, false))
}

/// The `initialize` answer: the client's capabilities are kept for its token, and the answer
/// names the token's session id in `Mcp-Session-Id` (SPEC §11).
async fn initialize_response(ctx: &Ctx, id: &Value, params: Option<&Value>) -> Response {
    let capabilities = params.and_then(|p| p.get("capabilities"));
    let caps = crate::session::clients::Caps::from_json(capabilities);
    ctx.app.clients.set_caps(ctx.token_key, caps);
    let mut response = rpc::answer_response(id, Ok(initialize(&ctx.app, params).await));
    let session_id = ctx.app.session_ids.id(&ctx.token_key);
    if let Ok(value) = axum::http::HeaderValue::from_str(&session_id) {
        response
            .headers_mut()
            .insert(crate::session::ids::SESSION_ID_HEADER, value);
    }
    response
}

async fn initialize(app: &crate::app::App, params: Option<&Value>) -> Value {
    let requested = params
        .and_then(|p| p.get("protocolVersion"))
        .and_then(Value::as_str);
    let version = match requested {
        Some(v) if VERSIONS.contains(&v) => v,
        _ => VERSIONS[0],
    };
    let mut capabilities = match crate::http::get_stream::legacy_capabilities() {
        Value::Object(caps) => caps,
        _ => Map::new(),
    };
    beyond::declare(app, &mut capabilities).await;
    json!({
        "protocolVersion": version,
        "capabilities": capabilities,
        "serverInfo": server_info(),
    })
}

/// `tools/call`, sent the way the one call path decides ([`path`]). A legacy
/// `notifications/cancelled` for `id` cancels it however it is sent.
async fn tools_call(ctx: Ctx, id: Value, params: Option<Value>) -> Response {
    let revision = revision(&ctx);
    let (tool, params) = match path::target(&ctx, &id, params, revision).await {
        Ok(target) => (target.tool, target.params),
        Err(answer) => return answer,
    };
    let mut caller = caller(&ctx, params.as_ref(), revision);
    caller.cancel = Some(cancel(&ctx, &id));
    let confirm = crate::call::confirm::required(&ctx.identity, &tool);
    path::tools_call(&ctx, &id, tool, params, caller, confirm).await
}

/// A legacy client as the call path sees it: the capabilities it declared at `initialize`,
/// the level it set with `logging/setLevel`, and whether it takes an event stream.
fn caller(ctx: &Ctx, params: Option<&Value>, revision: Revision) -> Caller {
    let client = ctx.app.clients.state(&ctx.token_key);
    Caller {
        era: Era::Legacy,
        revision,
        caps: client.caps,
        streams: progress::accepts_event_stream(&ctx.headers),
        progress: progress::requested(params, &ctx.headers),
        logs: client.log_level.is_some(),
        log_level: client.log_level,
        resuming: false,
        own_answers: None,
        cancel: None,
    }
}

/// Registers request `id` for the client's `notifications/cancelled`.
fn cancel(ctx: &Ctx, id: &Value) -> Cancel {
    let (pending, cancelled) = ctx.app.register_pending(&ctx.identity, id);
    Cancel {
        hold: Box::new(pending),
        cancelled: Some(cancelled),
    }
}

/// `prompts/get`: relayed when the call path would relay a call of this client (its upstream
/// may ask it something or send it log messages), else forwarded.
async fn prompts_get(ctx: Ctx, id: Value, params: Option<Value>) -> Response {
    let mut caller = caller(&ctx, None, revision(&ctx));
    if path::how_sent(&caller, None) != Sending::Relayed {
        let answer = beyond::get_prompt(&ctx.app, &ctx.identity, params).await;
        return rpc::answer_response(&id, answer.map(|result| beyond::in_era(result, false)));
    }
    caller.cancel = Some(cancel(&ctx, &id));
    crate::call::prompt_relay::relayed(&ctx, &id, params, caller).await
}

/// `logging/setLevel`: log messages of this token's calls at or above `level` from now on.
fn set_level(ctx: &Ctx, params: Option<&Value>) -> Result<Value, RpcError> {
    let level = params.and_then(|p| p.get("level")).and_then(Value::as_str);
    let Some(rank) = level.and_then(crate::session::clients::level_rank) else {
        return Err(RpcError::new(
            crate::rpc::INVALID_PARAMS,
            "Invalid params: level must be one of debug, info, notice, warning, error, \
             critical, alert, emergency",
        ));
    };
    let token = ctx.token_key;
    ctx.app.clients.set_log_level(token, rank);
    Ok(json!({}))
}

/// The revision this request is answered in (its `MCP-Protocol-Version` header).
fn revision(ctx: &Ctx) -> Revision {
    Revision::legacy(
        ctx.headers
            .get(PROTOCOL_VERSION_HEADER)
            .and_then(|v| v.to_str().ok()),
    )
}

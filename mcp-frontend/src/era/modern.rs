//! The modern surface: MCP 2026-07-28, stateless, with per-request `_meta` and the
//! standard request headers (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`,
//! `Mcp-Param-*`).

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};

use crate::call::execute;
use crate::call::path::{self, Caller, Sending};
use crate::call::relay::Era;
use crate::catalog::beyond::{self, List};
use crate::era::shared::{
    Ctx, META_PROTOCOL_VERSION, MODERN_VERSION, PROTOCOL_VERSION_HEADER, list_tools, target_param,
};
use crate::era::tables::{META_SERVER_INFO, Revision, server_info};
use crate::http::headers::{self, HeaderProblem};
use crate::http::listen;
use crate::rpc::{
    self, HEADER_MISMATCH, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, Message, RpcError,
    UNSUPPORTED_VERSION,
};
use crate::session::clients::Caps;

const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key of a request's log level.
const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
/// Cache hints on discover and list results.
const DISCOVER_TTL_MS: u64 = 3_600_000;
/// The tool list changes whenever a connector is installed, upgraded, crashes or is
/// removed, and listing it is local and cheap: a client without a `subscriptions/listen`
/// stream must not keep a stale list (the Python SDK caches for `ttlMs`: with 60 s, a client
/// told to list tools again after a -32602 would get the same stale list for a minute).
const TOOLS_TTL_MS: u64 = 0;
/// Skills change with installs, like tools: never cached.
const SKILLS_TTL_MS: u64 = 0;

fn bad(id: &Value, error: RpcError) -> Response {
    rpc::error_response(StatusCode::BAD_REQUEST, id, &error)
}

fn mismatch(message: String) -> RpcError {
    RpcError::new(HEADER_MISMATCH, format!("Header mismatch: {message}"))
}

/// A header that must carry exactly `expected`.
fn expect_header(ctx: &Ctx, name: &str, display: &str, expected: &str) -> Result<(), RpcError> {
    match headers::decoded(&ctx.headers, name) {
        Ok(value) if value == expected => Ok(()),
        Ok(value) => Err(mismatch(format!(
            "{display} header value '{value}' does not match body value '{expected}'"
        ))),
        Err(problem) => Err(mismatch(problem.describe(display))),
    }
}

/// A cacheable result: `resultType`, `ttlMs`, `cacheScope` and the server's identity.
fn cacheable(fields: Map<String, Value>, ttl_ms: u64) -> Value {
    Value::Object(cacheable_fields(fields, ttl_ms))
}

fn cacheable_fields(mut fields: Map<String, Value>, ttl_ms: u64) -> Map<String, Value> {
    fields.insert("resultType".into(), json!("complete"));
    fields.insert("ttlMs".into(), json!(ttl_ms));
    fields.insert("cacheScope".into(), json!("private"));
    fields.insert("_meta".into(), json!({ META_SERVER_INFO: server_info() }));
    fields
}

/// The request's `_meta` and headers: required `_meta` fields (-32602), then header vs
/// `_meta` (-32020), then support (-32022), then `Mcp-Method`. `Err` is answered 400.
fn check_request(ctx: &Ctx, method: &str, params: Option<&Value>) -> Result<(), RpcError> {
    let meta = params
        .and_then(|p| p.get("_meta"))
        .and_then(Value::as_object);
    let Some(meta) = meta else {
        return Err(RpcError::new(
            INVALID_PARAMS,
            "Invalid params: params._meta is required",
        ));
    };
    let Some(version) = meta.get(META_PROTOCOL_VERSION).and_then(Value::as_str) else {
        return Err(RpcError::new(
            INVALID_PARAMS,
            format!("Invalid params: _meta[\"{META_PROTOCOL_VERSION}\"] is required (a string)"),
        ));
    };
    if !meta
        .get(META_CLIENT_CAPABILITIES)
        .is_some_and(Value::is_object)
    {
        return Err(RpcError::new(
            INVALID_PARAMS,
            format!(
                "Invalid params: _meta[\"{META_CLIENT_CAPABILITIES}\"] is required (an object)"
            ),
        ));
    }
    expect_header(
        ctx,
        PROTOCOL_VERSION_HEADER,
        "MCP-Protocol-Version",
        version,
    )?;
    if version != MODERN_VERSION {
        return Err(RpcError::new(
            UNSUPPORTED_VERSION,
            format!("Unsupported protocol version: {version}"),
        )
        .with_data(json!({"supported": [MODERN_VERSION], "requested": version})));
    }
    expect_header(ctx, "mcp-method", "Mcp-Method", method)
}

pub(crate) async fn handle(ctx: Ctx, message: Message) -> Response {
    let (id, method, params) = match message {
        Message::Notification { .. } => return rpc::accepted(),
        Message::Response { .. } => {
            return bad(
                &Value::Null,
                RpcError::new(
                    INVALID_REQUEST,
                    "Invalid Request: clients must not send responses",
                ),
            );
        }
        Message::Request { id, method, params } => (id, method, params),
    };

    if let Err(e) = check_request(&ctx, &method, params.as_ref()) {
        return bad(&id, e);
    }

    let answer = match method.as_str() {
        "server/discover" => Ok(discover(&ctx.app).await),
        "tools/list" => {
            let extra = cacheable_fields(Map::new(), TOOLS_TTL_MS);
            if crate::catalog::search::listing(&ctx).await {
                return crate::catalog::search::list_response(&id, extra);
            }
            match list_tools(&ctx.app, params.as_ref(), Revision::V2026_07_28, extra).await {
                Ok(page) => return page.respond(&id),
                Err(error) => Err(error),
            }
        }
        "tools/call" => return tools_call(&ctx, &id, params).await,
        "skills/list" | "skills/get" => skills_answer(&ctx, &method, params.as_ref()).await,
        "subscriptions/listen" => {
            return listen::open(
                ctx.app.clone(),
                ctx.identity.clone(),
                &ctx.token,
                ctx.ticket,
                id,
                params.as_ref(),
            )
            .await;
        }
        "resources/read" | "prompts/get" => return get_or_read(&ctx, &id, &method, params).await,
        "completion/complete" => beyond::complete(&ctx.app, &ctx.identity, params)
            .await
            .map(|result| beyond::in_era(result, true)),
        other => {
            if let Some(list) = List::of(other) {
                // The lists change with every commit, like the tool list: not cached.
                let answer = beyond::list(&ctx.app, list)
                    .await
                    .map(|fields| cacheable(fields, TOOLS_TTL_MS));
                return rpc::answer_response(&id, answer);
            }
            return rpc::error_response(
                StatusCode::NOT_FOUND,
                &id,
                &RpcError::new(METHOD_NOT_FOUND, format!("Method not found: {other}")),
            );
        }
    };
    rpc::answer_response(&id, answer)
}

/// The skills extension's own methods (`skills/list`, `skills/get`), as uncached results;
/// its `skill://` resources are listed and read with the other resources (`catalog/beyond.rs`).
async fn skills_answer(ctx: &Ctx, method: &str, params: Option<&Value>) -> Result<Value, RpcError> {
    let skills = &ctx.app.skills;
    let fields = if method == "skills/list" {
        Ok(crate::catalog::skills::list(skills).await)
    } else {
        crate::catalog::skills::get(skills, params).await
    };
    fields.map(|fields| cacheable(fields, SKILLS_TTL_MS))
}

/// A `prompts/get` the call path would relay (it declares a capability an upstream request
/// needs, resumes a parked one, or asks for log messages on an event stream): the client as
/// it sees it, else `None`. Its progress token and own `inputResponses` are not relayed.
fn prompt_caller(ctx: &Ctx, params: Option<&Value>) -> Option<Caller> {
    let caller = Caller {
        progress: None,
        own_answers: None,
        ..caller(ctx, params)
    };
    (path::how_sent(&caller, None) == Sending::Relayed).then_some(caller)
}

/// `prompts/get` (relayed when the call path would relay it) or `resources/read`, in this
/// era's form. `Mcp-Name` carries `params.name` / `params.uri` (SEP-2243).
async fn get_or_read(ctx: &Ctx, id: &Value, method: &str, params: Option<Value>) -> Response {
    let prompt = method == "prompts/get";
    let field = if prompt { "name" } else { "uri" };
    if let Ok(target) = target_param(params.as_ref(), field)
        && let Err(e) = expect_header(ctx, "mcp-name", "Mcp-Name", target)
    {
        return bad(id, e);
    }
    if prompt && let Some(caller) = prompt_caller(ctx, params.as_ref()) {
        return crate::call::prompt_relay::relayed(ctx, id, params, caller).await;
    }
    let (app, who) = (&ctx.app, &ctx.identity);
    let answer = if prompt {
        beyond::get_prompt(app, who, params).await
    } else {
        beyond::read_resource(app, who, params, INVALID_PARAMS)
            .await
            .map(beyond::with_cache_hints)
    };
    rpc::answer_response(id, answer.map(|result| beyond::in_era(result, true)))
}

async fn discover(app: &crate::app::App) -> Value {
    let mut fields = Map::new();
    fields.insert("supportedVersions".into(), json!([MODERN_VERSION]));
    let mut capabilities = Map::new();
    capabilities.insert("tools".into(), json!({"listChanged": true}));
    beyond::declare(app, &mut capabilities).await;
    fields.insert("capabilities".into(), Value::Object(capabilities));
    cacheable(fields, DISCOVER_TTL_MS)
}

/// A call's `inputResponses` sent without a `requestState`: the client's own input to
/// the upstream, passed on when it is an object. They resume nothing here (only a
/// `requestState` this runtime issued does) and answer no request the runtime relayed.
fn own_answers(params: Option<&Value>) -> Option<&Value> {
    let params = params.filter(|p| p.get("requestState").is_none())?;
    params.get("inputResponses").filter(|r| r.is_object())
}

/// SEP-2243: every `Mcp-Param-*` header of a direct call matches its argument in the body;
/// the first mismatch, described for the client.
fn check_param_headers(
    ctx: &Ctx,
    tool: &crate::catalog::routes::Tool,
    params: Option<&Value>,
) -> Result<(), String> {
    let arguments = params.and_then(|p| p.get("arguments"));
    for param in &tool.param_headers {
        // The display name is only built for an error (this loop runs on every call).
        let display = || tutti_rules::mcp_header::display_name(&param.name);
        let body = headers::argument_at(arguments, &param.path);
        let problem = match (headers::decoded(&ctx.headers, &param.header), body) {
            (Err(HeaderProblem::Missing), None) => None,
            (Err(problem), _) => Some(problem.describe(&display())),
            (Ok(_), None) => Some(format!(
                "{} header is present but the body has no value for it",
                display()
            )),
            (Ok(value), Some(body)) => (!headers::param_matches(param, &value, body))
                .then(|| format!("{} header does not match the body value", display())),
        };
        if let Some(problem) = problem {
            return Err(problem);
        }
    }
    Ok(())
}

async fn tools_call(ctx: &Ctx, id: &Value, params: Option<Value>) -> Response {
    let name = match execute::tool_name(params.as_ref()) {
        Ok(name) => name,
        Err(e) => return rpc::answer_response(id, Err(e)),
    };
    if let Err(e) = expect_header(ctx, "mcp-name", "Mcp-Name", name) {
        return bad(id, e);
    }
    // Through `tutti_call_tool` the request's headers describe that call, not the inner one:
    // `Mcp-Param-*` headers are checked for direct calls only.
    let (tool, params, direct) = match path::target(ctx, id, params, Revision::V2026_07_28).await {
        Ok(target) => (target.tool, target.params, target.direct),
        Err(answer) => return answer,
    };
    if direct && let Err(problem) = check_param_headers(ctx, &tool, params.as_ref()) {
        return bad(id, mismatch(problem));
    }
    let caller = caller(ctx, params.as_ref());
    // A retry resumes a call that was confirmed (or asked) when it started.
    let confirm = crate::call::confirm::required(&ctx.identity, &tool).filter(|_| !caller.resuming);
    path::tools_call(ctx, id, tool, params, caller, confirm).await
}

/// A modern client as the call path sees it: all it says is in this request (`_meta`'s
/// capabilities and log level, a `requestState` it resumes, its own `inputResponses`).
fn caller(ctx: &Ctx, params: Option<&Value>) -> Caller {
    let streams = crate::call::progress::accepts_event_stream(&ctx.headers);
    let meta = params.and_then(|p| p.get("_meta"));
    // 2026-07-28: log messages only when the request names a level, on its event stream.
    let level = meta.and_then(|m| m.get(META_LOG_LEVEL)).filter(|_| streams);
    Caller {
        era: Era::Modern,
        revision: Revision::V2026_07_28,
        caps: Caps::from_json(meta.and_then(|m| m.get(META_CLIENT_CAPABILITIES))),
        streams,
        progress: crate::call::progress::requested(params, &ctx.headers),
        logs: level.is_some(),
        log_level: level
            .and_then(Value::as_str)
            .and_then(crate::session::clients::level_rank),
        resuming: params.is_some_and(|p| p.get("requestState").is_some()),
        // A client's own inputResponses go to the upstream on the relaying stream.
        own_answers: own_answers(params).map(Value::to_string),
        cancel: None,
    }
}

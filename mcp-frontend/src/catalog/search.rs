//! Search mode (SPEC §15): a session issued with `--tools search` (or `auto` over
//! [`AUTO_THRESHOLD`] tools) lists two tools instead of the full set:
//!
//! - `tutti_search_tools` ranks the live tools for a keyword query
//!   ([`crate::catalog::search_index`]) or fetches exact names with `select:a,b`;
//! - `tutti_call_tool` calls one of them by name. It resolves the name exactly as a direct
//!   `tools/call` does and hands the surface that binding and the inner arguments, so the
//!   call takes the direct call's path from there: validation, fencing, risk, audit under
//!   the real tool's name. A name that does not resolve (unknown, fenced, removed) gives the
//!   direct call's error text inside an `isError` result, so a model reads it and searches
//!   again. Errors from the call itself (the upstream's JSON-RPC errors, `[MCP_UNAVAILABLE]`,
//!   `[MCP_TIMEOUT]`) are the direct call's JSON-RPC errors, unchanged.
//!
//! Both tools exist only for sessions whose mode is not `all`; for those they are served
//! whatever the current size of the catalogue, so an `auto` session that has just switched
//! back to the full list can still finish what it started.

use std::sync::{Arc, LazyLock};

use axum::response::Response;
use jsonschema::Validator;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tutti_proto::kernel::ToolsMode;

use crate::call::execute;
use crate::call::result::CallResult;
use crate::call::validate;
use crate::catalog::routes::Tool;
use crate::era::shared::Ctx;
use crate::rpc::{self, INTERNAL_ERROR, RpcError};

pub(crate) const SEARCH_TOOL: &str = "tutti_search_tools";
pub(crate) const CALL_TOOL: &str = "tutti_call_tool";
/// `auto` lists the two search tools while the tool set holds more than this many tools.
pub(crate) const AUTO_THRESHOLD: usize = 80;
const DEFAULT_LIMIT: u64 = 5;
const MAX_LIMIT: u64 = 20;

const SEARCH_DESCRIPTION: &str = "Search the tools of every connector this session can use. \
This session lists only tutti_search_tools and tutti_call_tool instead of all tools: first \
search here for the tool you need, then call it with tutti_call_tool. `query` is a few \
keywords for what you want to do; they are matched against tool names, descriptions and \
parameter names, and a connector key (e.g. \"github\") favours that connector's tools. \
`query` may instead be `select:name1,name2` to fetch tools by their exact names. Returns up to \
`limit` tools (default 5, at most 20), best match first, each with its name, description, \
connector, risk (low, medium or high) and inputSchema. If nothing fits, try other words.";

const CALL_DESCRIPTION: &str = "Call a tool found with tutti_search_tools. `name` is the \
tool's exact name as tutti_search_tools returned it; `arguments` is an object that must match \
that tool's inputSchema. The answer is that tool's own result. The call is validated, checked \
and audited exactly like a direct call of the tool; an unknown or no longer available name \
gives an error result, after which search again.";

fn search_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "minLength": 1,
                "description": "Keywords describing the task, or select:name1,name2 for exact tool names"
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_LIMIT,
                "default": DEFAULT_LIMIT,
                "description": "How many tools to return at most (default 5, at most 20)"
            }
        },
        "required": ["query"],
        "additionalProperties": false
    })
}

fn call_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {
                "type": "string",
                "minLength": 1,
                "description": "The exact tool name returned by tutti_search_tools"
            },
            "arguments": {
                "type": "object",
                "description": "The tool's arguments, matching its inputSchema"
            }
        },
        "required": ["name"],
        "additionalProperties": false
    })
}

/// The two tools, as every era lists them (their fields are defined in all of them).
static LISTED: LazyLock<Value> = LazyLock::new(|| {
    json!([
        {
            "name": CALL_TOOL,
            "title": "Call a tool",
            "description": CALL_DESCRIPTION,
            "inputSchema": call_schema(),
            "annotations": {"title": "Call a tool", "openWorldHint": true},
        },
        {
            "name": SEARCH_TOOL,
            "title": "Search tools",
            "description": SEARCH_DESCRIPTION,
            "inputSchema": search_schema(),
            "annotations": {"title": "Search tools", "readOnlyHint": true, "openWorldHint": false},
        },
    ])
});

static VALIDATORS: LazyLock<Option<(Validator, Validator)>> = LazyLock::new(|| {
    Some((
        validate::compile(&search_schema()).ok()?,
        validate::compile(&call_schema()).ok()?,
    ))
});

/// Whether this request's session lists the two search tools now (`auto` is decided against
/// the live table at each list, so it switches both ways as connectors come and go).
pub(crate) async fn listing(ctx: &Ctx) -> bool {
    match ctx.identity.tools {
        ToolsMode::All => false,
        ToolsMode::Search => true,
        ToolsMode::Auto => ctx
            .app
            .routes()
            .await
            .is_some_and(|table| table.len() > AUTO_THRESHOLD),
    }
}

/// The `tools/list` answer of a session in search mode: the two tools and the era's `extra`
/// fields. One page: a cursor is ignored.
pub(crate) fn list_response(id: &Value, extra: Map<String, Value>) -> Response {
    let mut result = extra;
    result.insert("tools".into(), LISTED.clone());
    rpc::answer_response(id, Ok(Value::Object(result)))
}

/// Where a `tools/call` goes.
pub(crate) enum Routed {
    /// Not one of the search tools: the direct path.
    Direct,
    /// Answered here (a search, or an `isError` result).
    Answer(Result<CallResult, RpcError>),
    /// `tutti_call_tool`: call `tool` with these `tools/call` params (the inner `arguments`,
    /// and the outer `_meta`, so a progress token still works).
    Call {
        tool: Arc<Tool>,
        params: Option<Value>,
    },
}

/// Routes a `tools/call` of `name` with `params`.
pub(crate) async fn route(ctx: &Ctx, name: &str, params: Option<&Value>) -> Routed {
    if ctx.identity.tools == ToolsMode::All || (name != SEARCH_TOOL && name != CALL_TOOL) {
        return Routed::Direct;
    }
    let Some((search_validator, call_validator)) = VALIDATORS.as_ref() else {
        return Routed::Answer(Err(RpcError::new(
            INTERNAL_ERROR,
            "the search tools' schemas do not compile",
        )));
    };
    let empty = Value::Object(Map::new());
    let arguments = params
        .and_then(|p| p.get("arguments"))
        .filter(|a| !a.is_null())
        .unwrap_or(&empty);
    if name == SEARCH_TOOL {
        if let Err(text) = validate::check(search_validator, arguments) {
            return Routed::Answer(text_result(&text, true));
        }
        return Routed::Answer(search(ctx, arguments).await);
    }
    if let Err(text) = validate::check(call_validator, arguments) {
        return Routed::Answer(text_result(&text, true));
    }
    let inner = arguments.get("name").and_then(Value::as_str).unwrap_or("");
    match execute::resolve(&ctx.app, inner).await {
        Ok(tool) => {
            let mut inner_params = Map::new();
            if let Some(inner_arguments) = arguments.get("arguments") {
                inner_params.insert("arguments".into(), inner_arguments.clone());
            }
            if let Some(meta) = params.and_then(|p| p.get("_meta")) {
                inner_params.insert("_meta".into(), meta.clone());
            }
            Routed::Call {
                tool,
                params: Some(Value::Object(inner_params)),
            }
        }
        Err(error) => Routed::Answer(error_result(&error)),
    }
}

/// `tutti_search_tools` with valid arguments.
async fn search(ctx: &Ctx, arguments: &Value) -> Result<CallResult, RpcError> {
    let Some(table) = ctx.app.routes().await else {
        return error_result(&rpc::routes_not_ready());
    };
    let index = ctx.app.search_index.get(&table);
    let query = arguments
        .get("query")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let limit = arguments
        .get("limit")
        .and_then(Value::as_u64)
        .unwrap_or(DEFAULT_LIMIT)
        .clamp(1, MAX_LIMIT);
    let (tools, missing): (Vec<&RawValue>, Vec<&str>) = match query.trim().strip_prefix("select:") {
        Some(names) => {
            let names: Vec<&str> = names
                .split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .collect();
            index.select(&names)
        }
        None => (index.search(query, limit as usize), Vec::new()),
    };
    let mut found = json!({"tools": tools});
    if !missing.is_empty() {
        found["notFound"] = json!(missing);
    }
    if tools.is_empty() && missing.is_empty() {
        found["hint"] = json!("no tool matched; try other or fewer keywords");
    }
    let text = found.to_string();
    structured_result(text, found)
}

fn structured_result(text: String, structured: Value) -> Result<CallResult, RpcError> {
    let result = json!({
        "content": [{"type": "text", "text": text}],
        "structuredContent": structured,
    });
    CallResult::from_json(result.to_string())
        .ok_or_else(|| RpcError::new(INTERNAL_ERROR, "cannot encode a result"))
}

fn text_result(text: &str, is_error: bool) -> Result<CallResult, RpcError> {
    let result = json!({"content": [{"type": "text", "text": text}], "isError": is_error});
    CallResult::from_json(result.to_string())
        .ok_or_else(|| RpcError::new(INTERNAL_ERROR, "cannot encode a result"))
}

/// A direct call's JSON-RPC error as an `isError` result: the same message as text, and the
/// error (code, message, data) under `_meta["tutti/error"]` for programs.
fn error_result(error: &RpcError) -> Result<CallResult, RpcError> {
    let result = json!({
        "content": [{"type": "text", "text": error.message}],
        "isError": true,
        "_meta": {"tutti/error": error.to_json()},
    });
    CallResult::from_json(result.to_string())
        .ok_or_else(|| RpcError::new(INTERNAL_ERROR, "cannot encode a result"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listed_schemas_compile_and_name_their_tools() {
        assert!(VALIDATORS.is_some());
        let names: Vec<&str> = LISTED
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t.get("name").and_then(Value::as_str))
            .collect();
        assert_eq!(names, [CALL_TOOL, SEARCH_TOOL]);
    }

    #[test]
    fn bad_arguments_are_invalid_arguments() {
        let Some((search, call)) = VALIDATORS.as_ref() else {
            panic!("schemas");
        };
        let too_many = validate::check(search, &json!({"query": "x", "limit": 21}));
        assert!(too_many.is_err_and(|t| t.starts_with("invalid_arguments: /limit")));
        assert!(validate::check(call, &json!({"arguments": {}})).is_err());
        assert!(validate::check(call, &json!({"name": "x", "arguments": {"a": 1}})).is_ok());
    }
}

//! What both surfaces (`legacy`, `modern`) share, under them: the request context, the
//! protocol constants and `tools/list` (prompts and resources: `catalog/beyond.rs`). Depends
//! only on the layers below (`rpc`, the route table, the era tables), never on a surface or
//! on `http`.

use std::sync::Arc;

use axum::http::HeaderMap;
use axum::response::Response;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::app::App;
use crate::backend::Identity;
use crate::catalog::routes::{CursorError, Page};
use crate::era::tables::Revision;
use crate::rpc::{self, INVALID_PARAMS, RpcError, routes_not_ready};
use crate::session::sessions::Ticket;

/// The protocol version of the modern surface.
pub(crate) const MODERN_VERSION: &str = "2026-07-28";
pub(crate) const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub(crate) const PROTOCOL_VERSION_HEADER: &str = "mcp-protocol-version";

/// One authenticated request, ready for an era's surface.
pub(crate) struct Ctx {
    pub(crate) app: Arc<App>,
    pub(crate) identity: Identity,
    pub(crate) token: String,
    /// The token's SHA-256, computed once per request (`sessions::token_key`).
    pub(crate) token_key: crate::session::sessions::TokenKey,
    /// The session cache's epoch read before the token was verified (it moves with every
    /// revocation or resync, so a listen stream opened meanwhile checks the token again).
    pub(crate) ticket: Ticket,
    pub(crate) headers: HeaderMap,
}

/// A string parameter that names the target of a request (`uri`, `name`), or -32602.
pub(crate) fn target_param<'a>(
    params: Option<&'a Value>,
    field: &str,
) -> Result<&'a str, RpcError> {
    params
        .and_then(|p| p.get(field))
        .and_then(Value::as_str)
        .ok_or_else(|| {
            RpcError::new(
                INVALID_PARAMS,
                format!("Invalid params: {field} is required"),
            )
        })
}

/// A `tools/list` result: the page's pre-serialized tools, the next cursor and the era's
/// other fields.
#[derive(Serialize)]
pub(crate) struct ToolsResult {
    #[serde(rename = "nextCursor", skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
    tools: Page,
    #[serde(flatten)]
    extra: Map<String, Value>,
}

impl ToolsResult {
    /// The JSON-RPC response carrying this result.
    pub(crate) fn respond(&self, id: &Value) -> Response {
        rpc::result_response(id, self, self.tools.json_len() + 256)
    }
}

/// One `tools/list` result for either era, its tools in `revision`'s shape; `extra` are the
/// era's other result fields.
pub(crate) async fn list_tools(
    app: &App,
    params: Option<&Value>,
    revision: Revision,
    extra: Map<String, Value>,
) -> Result<ToolsResult, RpcError> {
    let cursor = match params.and_then(|p| p.get("cursor")) {
        None | Some(Value::Null) => None,
        Some(Value::String(cursor)) => Some(cursor.as_str()),
        Some(_) => {
            return Err(RpcError::new(
                INVALID_PARAMS,
                "Invalid params: cursor must be a string",
            ));
        }
    };
    let Some(table) = app.routes().await else {
        return Err(routes_not_ready());
    };
    table
        .page(cursor, app.page_size, revision)
        .map(|(tools, next_cursor)| ToolsResult {
            next_cursor,
            tools,
            extra,
        })
        .map_err(|e| match e {
            CursorError::Malformed => RpcError::new(INVALID_PARAMS, "Invalid params: invalid cursor"),
            CursorError::Stale => RpcError::new(
                INVALID_PARAMS,
                "Invalid params: the cursor belongs to an older tool list; list tools again from the start",
            ),
        })
}

//! What an upstream offers beyond tools (SPEC §11): its prompts, resources and
//! resource templates, listed page by page and offered to the kernel with the tools as one
//! candidate.
//!
//! Each page is taken as the upstream sent it (through [`Upstream::request`], which keeps the
//! result's text), so every definition reaches the kernel with every field the upstream gave,
//! as tools do (`definitions.rs`). A list the upstream did not declare (no `prompts` /
//! `resources` capability) is not asked for.

use std::collections::HashSet;

use rmcp::model::JsonObject;
use serde_json::Value;

use crate::upstream::{CallFailure, Offers, Upstream};

/// Pages one list can have before the listing is refused (a cursor loop that never repeats).
const MAX_PAGES: usize = 10_000;

/// Everything beyond tools, as the upstream sent it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Catalog {
    pub(crate) prompts: Vec<Value>,
    pub(crate) resources: Vec<Value>,
    pub(crate) templates: Vec<Value>,
    pub(crate) completions: bool,
    pub(crate) subscribe: bool,
}

/// Lists every page of every list the upstream declared.
pub(crate) async fn list<U: Upstream>(upstream: &U, offers: Offers) -> Result<Catalog, String> {
    let mut catalog = Catalog {
        completions: offers.completions,
        subscribe: offers.subscribe,
        ..Catalog::default()
    };
    if offers.prompts {
        catalog.prompts = list_all(upstream, "prompts/list", "prompts").await?;
    }
    if offers.resources {
        catalog.resources = list_all(upstream, "resources/list", "resources").await?;
        catalog.templates =
            list_all(upstream, "resources/templates/list", "resourceTemplates").await?;
    }
    Ok(catalog)
}

/// Every page of `method`, the objects of each page's `field` array in order.
async fn list_all<U: Upstream>(
    upstream: &U,
    method: &'static str,
    field: &str,
) -> Result<Vec<Value>, String> {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    let mut seen = HashSet::new();
    for _ in 0..MAX_PAGES {
        let mut params = JsonObject::new();
        if let Some(cursor) = cursor.take() {
            params.insert("cursor".into(), Value::String(cursor));
        }
        let answered = upstream
            .request(method, Some(params), std::future::pending::<()>())
            .await;
        let text = match answered {
            Ok(Ok(text)) => text,
            Ok(Err(failure)) => return Err(describe(method, &failure)),
            Err(()) => return Err(format!("{method}: interrupted")),
        };
        let (page, next) = page(&text, field).map_err(|why| format!("{method}: {why}"))?;
        items.extend(page);
        match next {
            None => return Ok(items),
            Some(next) if !seen.insert(next.clone()) => {
                return Err(format!(
                    "{method}: the upstream returned the cursor {next:?} twice; its pagination \
                     never ends"
                ));
            }
            Some(next) => cursor = Some(next),
        }
    }
    Err(format!("{method}: more than {MAX_PAGES} pages"))
}

/// One page: the objects of `field` and the next cursor.
fn page(text: &[u8], field: &str) -> Result<(Vec<Value>, Option<String>), String> {
    let Ok(Value::Object(mut page)) = serde_json::from_slice::<Value>(text) else {
        return Err("the result is not a JSON object".to_owned());
    };
    let items = match page.remove(field) {
        Some(Value::Array(items)) => items,
        // A result without the array (an empty result from a lax server) is an empty page.
        None | Some(Value::Null) => Vec::new(),
        Some(_) => return Err(format!("\"{field}\" is not an array")),
    };
    let next = match page.remove("nextCursor") {
        None | Some(Value::Null) => None,
        Some(Value::String(c)) => Some(c),
        Some(other) => return Err(format!("nextCursor {other} is not a string")),
    };
    Ok((items, next))
}

fn describe(method: &str, failure: &CallFailure) -> String {
    match failure {
        CallFailure::Rpc { code, message, .. } => {
            format!("{method} failed: JSON-RPC error {code}: {message}")
        }
        CallFailure::Closed => format!("connection closed during {method}"),
        CallFailure::TooLarge(limit) => {
            format!("{method} failed: a page larger than {limit} bytes")
        }
        CallFailure::Auth(detail)
        | CallFailure::Unavailable(detail)
        | CallFailure::Other(detail) => {
            format!("{method} failed: {detail}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_keeps_every_field_as_sent() {
        let text = r#"{"prompts":[{"name":"a","x-vendor":1}],"nextCursor":"c2"}"#;
        let (items, next) = page(text.as_bytes(), "prompts").unwrap_or_default();
        assert_eq!(items, vec![serde_json::json!({"name":"a","x-vendor":1})]);
        assert_eq!(next.as_deref(), Some("c2"));
    }

    #[test]
    fn odd_pages_are_refused_with_a_reason() {
        assert!(page(b"[]", "prompts").is_err());
        assert!(page(br#"{"prompts":{}}"#, "prompts").is_err());
        assert!(page(br#"{"prompts":[],"nextCursor":3}"#, "prompts").is_err());
        assert_eq!(page(b"{}", "resources"), Ok((Vec::new(), None)));
    }
}

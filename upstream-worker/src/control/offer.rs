//! What an offer carries: the wire form of the tools, prompts, resources and templates as the
//! upstream sent them, each list withheld whole when it is over its limits.

use tutti_proto::kernel::{OfferedResource, OfferedTool};
use tutti_proto::limits::OfferedList;

/// One list of an offer as sent: its items, or none when it is over its limits (it may not
/// even fit in one message), with how many items and bytes were withheld; the kernel then
/// refuses the offer by its size, naming the list and the limit.
pub(super) struct Bounded<T> {
    pub(super) items: Vec<T>,
    pub(super) withheld: u64,
    pub(super) withheld_bytes: u64,
}

pub(super) fn within_limits<T>(
    list: OfferedList,
    items: Vec<T>,
    bytes: impl Fn(&T) -> usize,
) -> Bounded<T> {
    let total: usize = items.iter().map(bytes).sum();
    match list.problem(items.len(), total) {
        None => Bounded {
            items,
            withheld: 0,
            withheld_bytes: 0,
        },
        Some(_) => Bounded {
            withheld: u64::try_from(items.len()).unwrap_or(u64::MAX),
            withheld_bytes: u64::try_from(total).unwrap_or(u64::MAX),
            items: Vec::new(),
        },
    }
}

/// The wire form of a tool list: the upstream name and the Tool object as JSON, unchanged.
pub(super) fn offered(tools: &[serde_json::Value]) -> Vec<OfferedTool> {
    tools
        .iter()
        .map(|tool| OfferedTool {
            upstream_name: tool
                .get("name")
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            definition_json: tool.to_string(),
        })
        .collect()
}

pub(super) fn string_field(value: &serde_json::Value, field: &str) -> String {
    value
        .get(field)
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// Resources (by `uri`) or templates (by `uriTemplate`), each object as the upstream sent it.
pub(super) fn offered_resources(items: &[serde_json::Value], field: &str) -> Vec<OfferedResource> {
    items
        .iter()
        .map(|item| OfferedResource {
            uri: string_field(item, field),
            definition_json: item.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offered_tools_keep_name_and_definition() {
        let tools = vec![serde_json::json!({"name": "echo", "inputSchema": {"type": "object"}})];
        let wire = offered(&tools);
        assert_eq!(wire.len(), 1);
        assert_eq!(wire[0].upstream_name, "echo");
        let back: serde_json::Value =
            serde_json::from_str(&wire[0].definition_json).unwrap_or_default();
        assert_eq!(back, tools[0]);
    }
}

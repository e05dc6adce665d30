//! Tool definitions as the upstream sent them.
//!
//! Why: rmcp types every `tools/list` page into its `Tool`, which has no field for
//! `execution` (2025-11-25 task support) nor for anything else it does not know (a vendor's
//! annotation hint, a newer revision's field), so the re-serialized definition lost them.
//! The worker offers each tool as the upstream gave it instead (SPEC §5: "every
//! other field as the upstream gave it").
//!
//! How: while the worker lists tools ([`Listing`], held around the handshake's listing and
//! every re-listing), the transport shows each message it reads from the upstream to
//! [`observe`], which keeps the tool objects of every `tools/list` result (a response whose
//! result has a `tools` array and no `content`) by name. rmcp's typed list still decides
//! which tools the listing has (and refuses what it must); [`as_sent`] then swaps each typed
//! tool for the definition that came on the wire under its name, and forgets the record. One
//! worker serves exactly one upstream, so the record is per process. Outside a listing nothing
//! is looked at, so tools/call traffic pays nothing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

/// Listings in progress; messages are observed only while this is not zero.
static LISTINGS: AtomicUsize = AtomicUsize::new(0);
/// Tool name → the definition as it came, from the pages observed.
static OBSERVED: Mutex<Option<HashMap<String, Value>>> = Mutex::new(None);

fn observed() -> MutexGuard<'static, Option<HashMap<String, Value>>> {
    OBSERVED.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A listing in progress: messages read from the upstream are observed until it is dropped.
#[derive(Debug)]
#[must_use = "messages are observed only while the listing is held"]
pub(crate) struct Listing(());

impl Listing {
    /// Starts observing; what an earlier listing left (one that failed) is forgotten.
    pub(crate) fn start() -> Self {
        if LISTINGS.fetch_add(1, Ordering::SeqCst) == 0 {
            *observed() = None;
        }
        Listing(())
    }
}

impl Drop for Listing {
    fn drop(&mut self) {
        LISTINGS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The parts of a JSON-RPC message this module reads.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    result: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Page {
    tools: Vec<Value>,
    content: Option<serde::de::IgnoredAny>,
}

/// One message read from the upstream (a JSON-RPC message; a stdio line without its
/// terminator). Keeps the tools of a `tools/list` result while a [`Listing`] is held.
pub(crate) fn observe(message: &[u8]) {
    if LISTINGS.load(Ordering::SeqCst) == 0 || !contains(message, br#""tools""#) {
        return;
    }
    let Ok(Envelope {
        result: Some(result),
    }) = serde_json::from_slice(message)
    else {
        return;
    };
    let Ok(Page {
        tools,
        content: None,
    }) = serde_json::from_str(result.get())
    else {
        return;
    };
    let mut observed = observed();
    let map = observed.get_or_insert_with(HashMap::new);
    for tool in tools {
        if let Some(name) = tool.get("name").and_then(Value::as_str) {
            map.insert(name.to_owned(), tool);
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The typed listing with each tool replaced by the definition the upstream sent under its
/// name (when one was observed). Call it once the listing is over: it takes what was observed,
/// so nothing of it stays resident in the worker.
pub(crate) fn as_sent(tools: Vec<Value>) -> Vec<Value> {
    let Some(mut sent) = observed().take() else {
        return tools;
    };
    tools
        .into_iter()
        .map(|typed| {
            let name = typed.get("name").and_then(Value::as_str);
            match name.and_then(|n| sent.remove(n)) {
                Some(sent) => sent,
                None => typed,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// One test (the record is per process): observation only while listing, pages only,
    /// and the typed list decides which tools there are.
    #[test]
    fn the_listing_gets_definitions_as_sent() {
        let page = br#"{"jsonrpc":"2.0","id":3,"result":{"tools":[{"name":"a","inputSchema":{"type":"object"},"execution":{"taskSupport":"required"}},{"name":"b","inputSchema":{"type":"object"}}]}}"#;
        observe(page);
        let typed = vec![json!({"name": "a", "inputSchema": {"type": "object"}})];
        assert_eq!(
            as_sent(typed.clone()),
            typed,
            "nothing observed outside a listing"
        );

        let listing = Listing::start();
        // A tools/call result that happens to carry a `tools` array is not a page.
        observe(
            br#"{"jsonrpc":"2.0","id":4,"result":{"content":[],"tools":[{"name":"a","x":1}]}}"#,
        );
        observe(b"not json \"tools\"");
        observe(page);
        drop(listing);
        let out = as_sent(vec![
            json!({"name": "a", "inputSchema": {"type": "object"}}),
            json!({"name": "c", "inputSchema": {"type": "object"}}),
        ]);
        assert_eq!(
            out,
            vec![
                json!({"name":"a","inputSchema":{"type":"object"},"execution":{"taskSupport":"required"}}),
                json!({"name": "c", "inputSchema": {"type": "object"}}),
            ]
        );
        // Nothing stays once the listing's definitions were taken.
        assert!(observed().is_none());
        let listing = Listing::start();
        drop(listing);
        assert_eq!(as_sent(typed.clone()), typed);
    }
}

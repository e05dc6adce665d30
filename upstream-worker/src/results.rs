//! tools/call results taken off the stdout stream as text, so rmcp never parses them.
//!
//! Why: a tools/call result goes to the frontend as JSON text (`CallToolReply.result_json`,
//! "the upstream CallToolResult as JSON, unchanged"). Through rmcp it was parsed into rmcp's
//! model (an untagged union of twenty result types, tried one after the other: ~11 µs for a
//! 79-byte echo answer, most of a megabyte result's cost) only to be serialized back to text.
//!
//! How: a call registers its request id here ([`CallResults::expect`]) before rmcp can have
//! written the request. When the stdout pump reads a JSON-RPC 2.0 response to a registered id
//! whose `result` is a plain tool result (an object naming `content`, no `resultType`), it keeps
//! the result's text for the call and hands rmcp a short response with an empty result in the
//! line's place ([`CallResults::divert`]). rmcp still sees every message, in the upstream's
//! order (progress notifications before the answer, request bookkeeping, cancellation), and
//! resolves the call; the call then takes the kept text ([`Expected::take`]) instead of what
//! rmcp parsed. Anything else (errors, other result types, unregistered ids, odd shapes) goes
//! to rmcp as it came.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use rmcp::model::RequestId;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;

/// Registered tools/call requests and the result text kept for them.
#[derive(Debug, Default)]
pub(crate) struct CallResults {
    /// Request id → the result text once the pump kept it.
    calls: Mutex<HashMap<RequestId, Option<String>>>,
}

/// One registered call; unregisters it (and drops any unclaimed text) when dropped.
#[derive(Debug)]
pub(crate) struct Expected {
    results: Arc<CallResults>,
    id: RequestId,
}

impl CallResults {
    /// Registers the tools/call request `id`: its result may be kept as text.
    pub(crate) fn expect(self: &Arc<Self>, id: RequestId) -> Expected {
        self.lock().insert(id.clone(), None);
        Expected {
            results: Arc::clone(self),
            id,
        }
    }

    /// If `line` is a JSON-RPC 2.0 response to a registered call with a plain tool result,
    /// keeps the result text for the call and returns the line rmcp gets instead.
    pub(crate) fn divert(&self, line: &[u8]) -> Option<String> {
        if self.lock().is_empty() {
            return None;
        }
        let envelope: Envelope<'_> = serde_json::from_slice(line).ok()?;
        let (Some("2.0"), Some(id), Some(result), None, None) = (
            envelope.jsonrpc,
            envelope.id,
            envelope.result,
            envelope.error,
            envelope.method,
        ) else {
            return None;
        };
        let text = result.get();
        // A tool result is an object with `content`; one with a `resultType` (an input
        // request, a task) is rmcp's to interpret. The key test is on the raw text: the quoted
        // name cannot occur inside a JSON string (its quotes would be escaped), so a miss is
        // certain and a hit only sends a nested key the slow way.
        if !text.starts_with('{')
            || !text.contains(r#""content""#)
            || (text.contains(r#""resultType""#) && !is_complete(text))
        {
            return None;
        }
        {
            let mut calls = self.lock();
            let slot = calls.get_mut(&id)?;
            if slot.is_some() {
                return None; // a second answer to one request: rmcp's to judge
            }
            *slot = Some(text.to_owned());
        }
        let id = serde_json::to_string(&id).ok()?;
        Some(format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RequestId, Option<String>>> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Expected {
    /// The result text kept for this call, if its answer came that way.
    pub(crate) fn take(&self) -> Option<String> {
        self.results.lock().get_mut(&self.id).and_then(Option::take)
    }
}

impl Drop for Expected {
    fn drop(&mut self) {
        self.results.lock().remove(&self.id);
    }
}

/// Whether a result's top-level `resultType` is absent or `"complete"` (a 2026-07-28 tool
/// result); another one (an input request, a task) is rmcp's to interpret.
fn is_complete(result: &str) -> bool {
    #[derive(Deserialize)]
    struct Kind<'a> {
        #[serde(rename = "resultType", borrow, default)]
        result_type: Option<std::borrow::Cow<'a, str>>,
    }
    serde_json::from_str::<Kind<'_>>(result)
        .is_ok_and(|k| k.result_type.is_none_or(|t| t == "complete"))
}

/// The top-level members of a JSON-RPC message; `result` borrowed as text.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default)]
    jsonrpc: Option<&'a str>,
    #[serde(default)]
    id: Option<RequestId>,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(default)]
    error: Option<IgnoredAny>,
    #[serde(default)]
    method: Option<IgnoredAny>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::NumberOrString;

    fn id(n: i64) -> RequestId {
        NumberOrString::Number(n)
    }

    #[test]
    fn a_registered_result_is_kept_as_text_and_rmcp_gets_an_empty_one() {
        let results = Arc::new(CallResults::default());
        let call = results.expect(id(7));
        let line = br#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"1.50"}],"x":{"y":1e3}}}"#;
        assert_eq!(
            results.divert(line).as_deref(),
            Some(r#"{"jsonrpc":"2.0","id":7,"result":{}}"#)
        );
        // Exactly the upstream's text: unknown members and number spelling kept.
        assert_eq!(
            call.take().as_deref(),
            Some(r#"{"content":[{"type":"text","text":"1.50"}],"x":{"y":1e3}}"#)
        );
        assert_eq!(call.take(), None, "taken once");
    }

    #[test]
    fn a_complete_2026_result_is_kept_too() {
        let results = Arc::new(CallResults::default());
        let call = results.expect(id(4));
        let line = br#"{"jsonrpc":"2.0","id":4,"result":{"content":[],"a":9007199254740993,"resultType":"complete"}}"#;
        assert!(results.divert(line).is_some());
        assert_eq!(
            call.take().as_deref(),
            Some(r#"{"content":[],"a":9007199254740993,"resultType":"complete"}"#)
        );
    }

    #[test]
    fn string_ids_work_too() {
        let results = Arc::new(CallResults::default());
        let call = results.expect(NumberOrString::String("a-1".into()));
        let line = br#"{"id":"a-1","jsonrpc":"2.0","result":{"content":[]}}"#;
        assert_eq!(
            results.divert(line).as_deref(),
            Some(r#"{"jsonrpc":"2.0","id":"a-1","result":{}}"#)
        );
        assert_eq!(call.take().as_deref(), Some(r#"{"content":[]}"#));
    }

    #[test]
    fn everything_else_goes_to_rmcp_unchanged() {
        let results = Arc::new(CallResults::default());
        let _call = results.expect(id(1));
        for line in [
            // not registered
            &br#"{"jsonrpc":"2.0","id":2,"result":{"content":[]}}"#[..],
            // an error, a request, a notification
            br#"{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"no"}}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"content":1}}"#,
            // not JSON-RPC 2.0, not a tool result, another result type
            br#"{"jsonrpc":"1.0","id":1,"result":{"content":[]}}"#,
            br#"{"id":1,"result":{"content":[]}}"#,
            br#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            br#"{"jsonrpc":"2.0","id":1,"result":[1]}"#,
            br#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"resultType":"input_required"}}"#,
            br#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"task","content":[],"x":{"resultType":"complete"}}}"#,
            // both result and error, duplicate members, not JSON, not an object
            br#"{"jsonrpc":"2.0","id":1,"result":{"content":[]},"error":{}}"#,
            br#"{"jsonrpc":"2.0","jsonrpc":"2.0","id":1,"result":{"content":[]}}"#,
            b"Server ready",
            b"[1,2]",
        ] {
            assert_eq!(
                results.divert(line),
                None,
                "{}",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn a_second_answer_and_an_unregistered_call_are_not_kept() {
        let results = Arc::new(CallResults::default());
        let line = br#"{"jsonrpc":"2.0","id":3,"result":{"content":[]}}"#;
        assert_eq!(results.divert(line), None, "nothing registered");
        let call = results.expect(id(3));
        assert!(results.divert(line).is_some());
        assert_eq!(results.divert(line), None, "the second answer goes to rmcp");
        drop(call);
        assert_eq!(
            results.divert(line),
            None,
            "unregistered when the call ends"
        );
        assert!(results.lock().is_empty(), "nothing left behind");
    }
}

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
use std::ops::Range;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use rmcp::model::RequestId;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;

/// Registered tools/call requests and the result text kept for them.
#[derive(Debug, Default)]
pub(crate) struct CallResults {
    /// Request id → what the pump kept for it.
    calls: Mutex<HashMap<RequestId, Slot>>,
}

/// What the pump kept for one registered call.
#[derive(Debug, Default)]
enum Slot {
    #[default]
    Waiting,
    /// Waiting for any result (not only a tool result): the answer to a forwarded
    /// `prompts/get`, `resources/read`, list page, …
    WaitingAny,
    /// The result text: a slice of the line it came in (never copied).
    Text(Bytes),
    /// The answer's line was longer than this many bytes and was discarded.
    TooLarge(usize),
    /// Taken by the call.
    Taken,
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
        self.lock().insert(id.clone(), Slot::Waiting);
        Expected {
            results: Arc::clone(self),
            id,
        }
    }

    /// Registers the forwarded request `id` (not a tools/call): any object result is kept as
    /// text, whatever its members.
    pub(crate) fn expect_any(self: &Arc<Self>, id: RequestId) -> Expected {
        self.lock().insert(id.clone(), Slot::WaitingAny);
        Expected {
            results: Arc::clone(self),
            id,
        }
    }

    /// If the line in `buf` (its terminator allowed) is a JSON-RPC 2.0 response to a
    /// registered call with a plain tool result, keeps the result text for the call and
    /// returns the line rmcp gets instead. The text kept is a slice of `buf`'s allocation,
    /// which is taken (`buf` is left empty): the result is not copied.
    pub(crate) fn divert(&self, buf: &mut Vec<u8>) -> Option<String> {
        if self.lock().is_empty() {
            return None;
        }
        let (id, range, tool_result) = result_in(tutti_rules::redact::trim_line_end(buf))?;
        self.keep(&id, tool_result, || {
            Bytes::from(std::mem::take(buf)).slice(range)
        })
    }

    /// [`Self::divert`] of a message that is not ours to take (an HTTP body, an event's
    /// data): the result text kept is a copy.
    pub(crate) fn divert_copy(&self, message: &[u8]) -> Option<String> {
        if self.lock().is_empty() {
            return None;
        }
        let (id, range, tool_result) = result_in(message)?;
        self.keep(&id, tool_result, || Bytes::copy_from_slice(&message[range]))
    }

    /// Keeps the text `take` gives for the call `id` if it waits for it, and returns the
    /// stand-in for rmcp.
    fn keep(
        &self,
        id: &RequestId,
        tool_result: bool,
        take: impl FnOnce() -> Bytes,
    ) -> Option<String> {
        {
            let mut calls = self.lock();
            let slot = calls.get_mut(id)?;
            let waiting = match slot {
                Slot::Waiting => tool_result,
                Slot::WaitingAny => true,
                _ => false,
            };
            if !waiting {
                // Not a tool result (rmcp's to interpret), or a second answer to one
                // request (rmcp's to judge).
                return None;
            }
            *slot = Slot::Text(take());
        }
        stand_in(id)
    }

    /// A stdout line longer than `limit` bytes was discarded; `head` is its beginning and
    /// `tail` its last bytes. If it was the answer to a registered call (its `id` found in
    /// either), that call fails as too large, and rmcp gets the returned stand-in instead so
    /// that the call ends now rather than at its timeout.
    pub(crate) fn oversized(&self, head: &[u8], tail: &[u8], limit: usize) -> Option<String> {
        if self.lock().is_empty() {
            return None;
        }
        let id = oversized_response_id(head, tail)?;
        {
            let mut calls = self.lock();
            let slot = calls.get_mut(&id)?;
            if !matches!(slot, Slot::Waiting | Slot::WaitingAny) {
                return None;
            }
            *slot = Slot::TooLarge(limit);
        }
        stand_in(&id)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RequestId, Slot>> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Expected {
    /// The result text kept for this call, if its answer came that way.
    pub(crate) fn take(&self) -> Option<Bytes> {
        let mut calls = self.results.lock();
        let slot = calls.get_mut(&self.id)?;
        match std::mem::replace(slot, Slot::Taken) {
            Slot::Text(text) => Some(text),
            other => {
                *slot = other;
                None
            }
        }
    }

    /// The limit this call's answer exceeded, if it did (its line was discarded).
    pub(crate) fn too_large(&self) -> Option<usize> {
        match self.results.lock().get(&self.id) {
            Some(Slot::TooLarge(limit)) => Some(*limit),
            _ => None,
        }
    }
}

/// Where the result of a JSON-RPC 2.0 response `line` is (its id, the byte range of the
/// result's text in `line`, and whether it names `content`), if it is one that may be kept:
/// an object, without a `resultType` other than `"complete"`. One parse of the line, which
/// also checks it is well-formed JSON (UTF-8 included).
fn result_in(line: &[u8]) -> Option<(RequestId, Range<usize>, bool)> {
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
    // A tool result is an object with `content`; one with a `resultType` (an input request, a
    // task) is rmcp's to interpret. The key test is on the raw text: the quoted name cannot
    // occur inside a JSON string (its quotes would be escaped), so a miss is certain and a
    // hit only sends a nested key the slow way.
    let names = |key: &[u8]| memchr::memmem::find(text.as_bytes(), key).is_some();
    if !text.starts_with('{') || (names(br#""resultType""#) && !is_complete(text)) {
        return None;
    }
    let tool_result = names(br#""content""#);
    // The text is borrowed from `line`: its offset is where it starts there.
    let start = (text.as_ptr() as usize).checked_sub(line.as_ptr() as usize)?;
    Some((id, start..start + text.len(), tool_result))
}

/// The response rmcp gets in place of an answer kept (or discarded) here.
fn stand_in(id: &RequestId) -> Option<String> {
    let id = serde_json::to_string(id).ok()?;
    Some(format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#))
}

/// The `id` of a JSON-RPC response whose line was cut: from its beginning when `id` comes
/// before `result`/`error` there (rmcp, the Python SDK), else from its end (the TypeScript SDK
/// writes `{"result":…,"jsonrpc":"2.0","id":…}`). `None` for anything else (a request, a
/// notification, an id that cannot be found).
fn oversized_response_id(head: &[u8], tail: &[u8]) -> Option<RequestId> {
    match id_in_head(head) {
        Head::Id(id) => Some(id),
        Head::NotAResponse => None,
        Head::IdAfterResult => id_in_tail(tail),
    }
}

/// What the beginning of a cut line says about its `id`.
enum Head {
    Id(RequestId),
    IdAfterResult,
    NotAResponse,
}

/// Reads the top-level members of `head` in order up to the first `result` or `error`.
fn id_in_head(head: &[u8]) -> Head {
    use serde::Deserializer as _;
    let mut seen = None;
    let mut de = serde_json::Deserializer::from_slice(head);
    // The visitor stops the parse with an error once it knows enough (the line is cut, so
    // the parse could not succeed anyway); what it learnt is in `seen`.
    let _ = de.deserialize_map(HeadVisitor(&mut seen));
    seen.unwrap_or(Head::NotAResponse)
}

struct HeadVisitor<'a>(&'a mut Option<Head>);

impl<'de> serde::de::Visitor<'de> for HeadVisitor<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON-RPC message")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut id = None;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                "id" => id = Some(map.next_value::<RequestId>()?),
                "result" | "error" => {
                    *self.0 = Some(id.take().map_or(Head::IdAfterResult, Head::Id));
                    return Err(serde::de::Error::custom("enough"));
                }
                "method" => {
                    *self.0 = Some(Head::NotAResponse);
                    return Err(serde::de::Error::custom("enough"));
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// The top-level members after a cut line's `result`: the longest suffix of `tail` that
/// starts after a comma and reads as the rest of an object (`,"jsonrpc":"2.0","id":5}` →
/// `{"jsonrpc":"2.0","id":5}`). A comma nested deeper, or inside a string, leaves unbalanced
/// brackets or quotes behind it, so its suffix does not read as an object.
fn id_in_tail(tail: &[u8]) -> Option<RequestId> {
    #[derive(Deserialize)]
    struct Rest {
        id: RequestId,
        #[serde(default)]
        method: Option<IgnoredAny>,
    }
    let mut candidate = Vec::with_capacity(tail.len() + 1);
    for (i, _) in tail.iter().enumerate().filter(|(_, b)| **b == b',') {
        candidate.clear();
        candidate.push(b'{');
        candidate.extend_from_slice(&tail[i + 1..]);
        if let Ok(rest) = serde_json::from_slice::<Rest>(&candidate) {
            return rest.method.is_none().then_some(rest.id);
        }
    }
    None
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

    /// [`CallResults::divert`] of a copy of `line`.
    fn divert(results: &CallResults, line: &[u8]) -> Option<String> {
        results.divert(&mut line.to_vec())
    }

    fn text(kept: Option<Bytes>) -> Option<String> {
        kept.map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    #[test]
    fn the_kept_text_is_the_line_buffer_itself() {
        let results = Arc::new(CallResults::default());
        let call = results.expect(id(2));
        let mut buf = br#"{"jsonrpc":"2.0","id":2,"result":{"content":[]}}"#.to_vec();
        buf.extend_from_slice(b"\r\n");
        let line_at = buf.as_ptr() as usize;
        assert!(results.divert(&mut buf).is_some());
        assert!(buf.is_empty(), "the buffer was taken");
        let kept = call.take().unwrap_or_default();
        assert_eq!(&kept[..], br#"{"content":[]}"#);
        // Not a copy: the result still lies where it was read, after `"result":`.
        assert_eq!(kept.as_ptr() as usize, line_at + 33);
    }

    #[test]
    fn a_registered_result_is_kept_as_text_and_rmcp_gets_an_empty_one() {
        let results = Arc::new(CallResults::default());
        let call = results.expect(id(7));
        let line = br#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"1.50"}],"x":{"y":1e3}}}"#;
        assert_eq!(
            divert(&results, line).as_deref(),
            Some(r#"{"jsonrpc":"2.0","id":7,"result":{}}"#)
        );
        // Exactly the upstream's text: unknown members and number spelling kept.
        assert_eq!(
            text(call.take()).as_deref(),
            Some(r#"{"content":[{"type":"text","text":"1.50"}],"x":{"y":1e3}}"#)
        );
        assert_eq!(call.take(), None, "taken once");
    }

    #[test]
    fn a_forwarded_request_keeps_any_result_a_tool_call_only_tool_results() {
        let results = Arc::new(CallResults::default());
        let read = results.expect_any(id(8));
        let call = results.expect(id(9));
        let contents =
            br#"{"jsonrpc":"2.0","id":8,"result":{"contents":[{"uri":"x://1","blob":"AAE="}]}}"#;
        assert!(divert(&results, contents).is_some());
        assert_eq!(
            text(read.take()).as_deref(),
            Some(r#"{"contents":[{"uri":"x://1","blob":"AAE="}]}"#)
        );
        let messages = br#"{"jsonrpc":"2.0","id":9,"result":{"messages":[]}}"#;
        assert_eq!(
            divert(&results, messages),
            None,
            "not a tool result: rmcp's"
        );
        assert_eq!(call.take(), None);
    }

    #[test]
    fn a_complete_2026_result_is_kept_too() {
        let results = Arc::new(CallResults::default());
        let call = results.expect(id(4));
        let line = br#"{"jsonrpc":"2.0","id":4,"result":{"content":[],"a":9007199254740993,"resultType":"complete"}}"#;
        assert!(divert(&results, line).is_some());
        assert_eq!(
            text(call.take()).as_deref(),
            Some(r#"{"content":[],"a":9007199254740993,"resultType":"complete"}"#)
        );
    }

    #[test]
    fn string_ids_work_too() {
        let results = Arc::new(CallResults::default());
        let call = results.expect(NumberOrString::String("a-1".into()));
        let line = br#"{"id":"a-1","jsonrpc":"2.0","result":{"content":[]}}"#;
        assert_eq!(
            divert(&results, line).as_deref(),
            Some(r#"{"jsonrpc":"2.0","id":"a-1","result":{}}"#)
        );
        assert_eq!(text(call.take()).as_deref(), Some(r#"{"content":[]}"#));
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
                divert(&results, line),
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
        assert_eq!(divert(&results, line), None, "nothing registered");
        let call = results.expect(id(3));
        assert!(divert(&results, line).is_some());
        assert_eq!(
            divert(&results, line),
            None,
            "the second answer goes to rmcp"
        );
        drop(call);
        assert_eq!(
            divert(&results, line),
            None,
            "unregistered when the call ends"
        );
        assert!(results.lock().is_empty(), "nothing left behind");
    }

    #[test]
    fn an_oversized_answer_fails_its_call_whatever_the_member_order() {
        let results = Arc::new(CallResults::default());
        let rmcp_order = results.expect(id(4));
        let ts_order = results.expect(NumberOrString::String("t-9".into()));
        let other = results.expect(id(5));
        let head = br#"{"jsonrpc":"2.0","id":4,"result":{"content":[{"type":"text","text":"xxxx"#;
        assert_eq!(
            results.oversized(head, br#"xxxx"}]}}"#, 64).as_deref(),
            Some(r#"{"jsonrpc":"2.0","id":4,"result":{}}"#)
        );
        assert_eq!(rmcp_order.too_large(), Some(64));
        assert_eq!(rmcp_order.take(), None);
        let head = br#"{"result":{"content":[{"type":"text","text":"yyy"#;
        let tail = br#"yy, "a":{"id":1}"}],"meta":{"id":5,"x":[1,2]}},"jsonrpc":"2.0","id":"t-9"}"#;
        assert_eq!(
            results.oversized(head, tail, 64).as_deref(),
            Some(r#"{"jsonrpc":"2.0","id":"t-9","result":{}}"#)
        );
        assert_eq!(ts_order.too_large(), Some(64));
        assert_eq!(other.too_large(), None, "only the call answered");
        // Requests and notifications are not answers; an unknown id is nobody's.
        for head in [
            &br#"{"jsonrpc":"2.0","id":5,"method":"sampling/createMessage","params":{"x":"#[..],
            br#"{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"#,
            br#"{"jsonrpc":"2.0","id":77,"result":{"content":["#,
            b"not json at all",
        ] {
            assert_eq!(results.oversized(head, b"", 64), None);
        }
        assert_eq!(
            results.oversized(
                br#"{"result":{"content":"#,
                br#"xx"}]},"method":"m","id":5}"#,
                64
            ),
            None
        );
        assert_eq!(other.too_large(), None);
    }
}

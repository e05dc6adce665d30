//! A `tools/call` answer: the worker's `CallToolResult` text as it came, the era's edits, and
//! the JSON-RPC response message written around it.

use std::ops::Range;

use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;
use serde_json::Value;

use crate::era::tables::{self, Piece, RawMembers, Revision};
use crate::http::body::Chunks;
use crate::rpc::{self, RpcError};

/// A `CallToolResult` as the worker sent it: JSON text checked (in one pass) to be one object,
/// its top-level members located (key and the byte range of the value's text), and written to
/// the client as it is or with only the top-level members its era needs changed
/// ([`CallResult::in_era`], [`crate::era::tables`]). Never parsed into a tree and serialized again:
/// for a 1 MiB result that round trip would be most of the frontend's work
/// (docs/PERFORMANCE.md), and every value keeps its exact text (key order, number spelling,
/// integers beyond 2^53). The text is the slice of the worker's frame it came in, and goes
/// into the response body as slices of it ([`crate::http::body`]).
#[derive(Debug)]
pub(crate) struct CallResult {
    /// Exactly one JSON object (surrounding whitespace allowed), UTF-8.
    text: Bytes,
    /// The object's members in order: key (unescaped) and where its value's text is.
    members: Vec<(String, Range<usize>)>,
    is_error: bool,
    /// How it is written; `None`: the text as it came.
    pieces: Option<Vec<Piece>>,
}

impl CallResult {
    /// `None` unless `text` is exactly one JSON object.
    pub(crate) fn from_json(text: String) -> Option<Self> {
        Self::from_bytes(Bytes::from(text))
    }

    /// `None` unless `text` is exactly one JSON object (in UTF-8). The one pass over it.
    pub(crate) fn from_bytes(text: Bytes) -> Option<Self> {
        let members = {
            let RawMembers(members) = serde_json::from_slice::<RawMembers<'_>>(&text).ok()?;
            let base = text.as_ptr() as usize;
            members
                .into_iter()
                .map(|(key, value)| {
                    // The value is borrowed from `text`: its offset is where it starts there.
                    let start = (value.get().as_ptr() as usize).checked_sub(base)?;
                    Some((key.into_owned(), start..start + value.get().len()))
                })
                .collect::<Option<Vec<_>>>()?
        };
        let is_error = members
            .iter()
            .any(|(key, value)| key == "isError" && text.get(value.clone()) == Some(b"true"));
        Some(Self {
            text,
            members,
            is_error,
            pieces: None,
        })
    }

    /// One of our own results (a JSON object built here).
    pub(crate) fn from_value(value: &Value) -> Option<Self> {
        Self::from_json(value.to_string())
    }

    /// `isError: true`.
    pub(crate) fn is_error(&self) -> bool {
        self.is_error
    }

    /// The form the client's era gets (the table in [`crate::era::tables`]): only the top-level
    /// members that era needs changed are changed, every other member is written as it came.
    pub(crate) fn in_era(self, revision: Revision) -> Self {
        let pieces = {
            let keys: Vec<&str> = self.members.iter().map(|(key, _)| key.as_str()).collect();
            tables::result_pieces(revision, &keys, |i| self.member_text(i))
        };
        Self { pieces, ..self }
    }

    /// The text of member `i`'s value (checked as UTF-8 when the result was read).
    fn member_text(&self, i: usize) -> &str {
        self.members
            .get(i)
            .and_then(|(_, range)| self.text.get(range.clone()))
            .and_then(|raw| std::str::from_utf8(raw).ok())
            .unwrap_or_default()
    }

    /// Appends the result's JSON text to `out`: the members kept as slices of the text.
    pub(crate) fn write_to(&self, out: &mut Chunks) {
        let Some(pieces) = &self.pieces else {
            out.append(&self.text.slice(trimmed(&self.text)));
            return;
        };
        out.push(b'{');
        for (n, piece) in pieces.iter().enumerate() {
            if n > 0 {
                out.push(b',');
            }
            match piece {
                Piece::Kept(i) => {
                    if let Some((key, range)) = self.members.get(*i) {
                        out.extend(tables::quoted(key).as_bytes());
                        out.push(b':');
                        out.append(&self.text.slice(range.clone()));
                    }
                }
                Piece::Written(member) => out.extend(member.as_bytes()),
            }
        }
        out.push(b'}');
    }

    /// Length of the JSON text as it would be written, whitespace around an unchanged text
    /// included (tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        let member_len = |i: usize| {
            self.members
                .get(i)
                .map_or(0, |(k, v)| k.len() + v.len() + 3)
        };
        match &self.pieces {
            None => self.text.len(),
            Some(pieces) => pieces.iter().fold(2, |n, piece| {
                n + 1
                    + match piece {
                        Piece::Kept(i) => member_len(*i),
                        Piece::Written(member) => member.len(),
                    }
            }),
        }
    }

    /// The text as written (tests).
    #[cfg(test)]
    pub(crate) fn written(&self) -> String {
        let mut out = Chunks::default();
        self.write_to(&mut out);
        String::from_utf8_lossy(&out.into_vec()).into_owned()
    }
}

/// `text` without the JSON whitespace around it.
fn trimmed(text: &[u8]) -> Range<usize> {
    let json_space = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    let start = text
        .iter()
        .position(|b| !json_space(b))
        .unwrap_or(text.len());
    let end = text
        .iter()
        .rposition(|b| !json_space(b))
        .map_or(start, |i| i + 1);
    start..end
}

/// Tests only: the response path writes the text itself (`rpc::call_message`).
#[cfg(test)]
impl serde::Serialize for CallResult {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serde_json::value::RawValue::from_string(self.written())
            .map_err(serde::ser::Error::custom)?
            .serialize(serializer)
    }
}

/// `200 OK` with a `tools/call` answer: the result's JSON text as the worker sent it, or the
/// error.
pub(crate) fn call_response(id: &Value, answer: Result<CallResult, RpcError>) -> Response {
    match call_chunks(id, &answer) {
        Ok(chunks) => crate::http::body::chunks_response(StatusCode::OK, chunks),
        Err(e) => rpc::unserializable(&e),
    }
}

/// The JSON-RPC response message of a `tools/call` answer as bytes (the body of a plain
/// answer, the last event of an event-stream one).
pub(crate) fn call_message(
    id: &Value,
    answer: &Result<CallResult, RpcError>,
) -> Result<Vec<u8>, serde_json::Error> {
    call_chunks(id, answer).map(Chunks::into_vec)
}

/// [`call_message`] as pieces: the result's text is not copied.
fn call_chunks(
    id: &Value,
    answer: &Result<CallResult, RpcError>,
) -> Result<Chunks, serde_json::Error> {
    let mut out = Chunks::default();
    match answer {
        Ok(result) => {
            // The same bytes as serializing `Envelope`, with the result's text as it came.
            out.extend(br#"{"jsonrpc":"2.0","id":"#);
            out.extend(&serde_json::to_vec(id)?);
            out.extend(br#","result":"#);
            result.write_to(&mut out);
            out.push(b'}');
        }
        Err(error) => out.extend(&serde_json::to_vec(&rpc::error_body(id, error))?),
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::era::tables::META_SERVER_INFO;
    use serde_json::json;

    #[test]
    fn result_text_is_checked_and_read_without_a_tree() {
        let shape = |t: &str| {
            CallResult::from_json(t.to_owned()).map(|r| {
                let has_result_type = r.members.iter().any(|(k, _)| k == "resultType");
                (r.is_error, has_result_type)
            })
        };
        assert_eq!(shape(r#"{"content":[]}"#), Some((false, false)));
        assert_eq!(
            shape(r#" {"isError": true, "content": []} "#),
            Some((true, false))
        );
        assert_eq!(
            shape(r#"{"isError":"yes","resultType":null}"#),
            Some((false, true))
        );
        // Keys are compared after unescaping.
        assert_eq!(shape(r#"{"is\u0045rror":true}"#), Some((true, false)));
        for bad in [
            "[1]",
            "1",
            "\"x\"",
            "{",
            r#"{"a":1} {"b":2}"#,
            r#"{"a":}"#,
            "",
        ] {
            assert!(CallResult::from_json(bad.to_owned()).is_none(), "{bad}");
        }
    }

    fn ours() -> Value {
        json!({"io.modelcontextprotocol/serverInfo": tables::server_info()})
    }

    #[test]
    fn the_modern_form_adds_result_type_once() {
        let modern = |t: &str| {
            let r = CallResult::from_json(t.to_owned())
                .expect("object")
                .in_era(Revision::V2026_07_28);
            serde_json::from_str::<Value>(&r.written()).expect("still JSON")
        };
        assert_eq!(
            modern("{}"),
            json!({"resultType": "complete", "_meta": ours()})
        );
        assert_eq!(
            modern("{ }"),
            json!({"resultType": "complete", "_meta": ours()})
        );
        assert_eq!(
            modern(r#"{"content":[],"isError":false}"#),
            json!({"resultType": "complete", "content": [], "isError": false, "_meta": ours()})
        );
        // The upstream's own `resultType` stays; a field 2026-07-28 does not define goes.
        assert_eq!(
            modern(r#"{"resultType":"incomplete","x":1}"#),
            json!({"resultType": "incomplete", "_meta": ours()})
        );
        let twice = CallResult::from_json("{\"a\":1}".into())
            .expect("object")
            .in_era(Revision::V2026_07_28)
            .in_era(Revision::V2026_07_28);
        assert_eq!(twice.written().matches("resultType").count(), 1);
        assert_eq!(twice.written().matches("serverInfo").count(), 1);
    }

    /// The frontend's era edits touch only the top-level members they must; every
    /// other member keeps its bytes (key order, number spelling, integers beyond 2^53, UTF-8).
    #[test]
    fn era_edits_keep_every_other_byte() {
        let structured = r#"{"z":1,"a":9007199254740993,"f":1.50,"s":"é"}"#;
        let content =
            r#"[{"type":"text","text":"{\"z\":1,\"a\":9007199254740993,\"f\":1.50,\"s\":\"é\"}"}]"#;
        let upstream = format!(
            r#"{{"resultType":"complete","content":{content},"structuredContent":{structured},"isError":false,"_meta":{{"io.modelcontextprotocol/serverInfo":{{"name":"upstream","version":"9"}},"ui/resourceUri":"ui://x","n":1.0}}}}"#
        );
        let written = |revision| {
            CallResult::from_json(upstream.clone())
                .expect("object")
                .in_era(revision)
                .written()
        };
        for legacy in [Revision::V2025_06_18, Revision::V2025_11_25] {
            assert_eq!(
                written(legacy),
                format!(
                    r#"{{"content":{content},"structuredContent":{structured},"isError":false,"_meta":{{"ui/resourceUri":"ui://x","n":1.0}}}}"#
                )
            );
        }
        assert_eq!(
            written(Revision::V2026_07_28),
            format!(
                r#"{{"resultType":"complete","content":{content},"structuredContent":{structured},"isError":false,"_meta":{{"ui/resourceUri":"ui://x","n":1.0,"io.modelcontextprotocol/serverInfo":{}}}}}"#,
                tables::server_info()
            )
        );
        // A legacy result that has nothing to lose is written exactly as it came.
        let plain = format!(r#"{{"content":{content}, "structuredContent" : {structured}}}"#);
        let result = CallResult::from_json(format!(" {plain}\n"))
            .expect("object")
            .in_era(Revision::V2025_06_18);
        assert_eq!(result.written(), plain);
        assert_eq!(result.len(), plain.len() + 2);
    }

    /// A call's answer is written as the serialized envelope would be, with the worker's text
    /// as it came (no whitespace around it), `resultType` in front for the modern surface.
    #[test]
    fn call_messages_carry_the_result_text_as_is() {
        let result = |t: &str| CallResult::from_json(t.to_owned()).expect("object");
        let text = |m: Result<Vec<u8>, serde_json::Error>| {
            String::from_utf8(m.expect("serializable")).expect("UTF-8")
        };
        assert_eq!(
            text(call_message(
                &json!(7),
                &Ok(result(r#" {"n":1.50,"content":[]} "#))
            )),
            r#"{"jsonrpc":"2.0","id":7,"result":{"n":1.50,"content":[]}}"#
        );
        assert_eq!(
            text(call_message(
                &json!("a"),
                &Ok(result(r#"{"content":[]}"#).in_era(Revision::V2026_07_28))
            )),
            format!(
                r#"{{"jsonrpc":"2.0","id":"a","result":{{"resultType":"complete","content":[],"_meta":{{"{META_SERVER_INFO}":{}}}}}}}"#,
                tables::server_info()
            )
        );
        assert_eq!(
            text(call_message(
                &json!(1),
                &Ok(result("{ }").in_era(Revision::V2026_07_28))
            )),
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"result":{{"resultType":"complete","_meta":{{"{META_SERVER_INFO}":{}}}}}}}"#,
                tables::server_info()
            )
        );
        // The legacy form of a result with nothing to lose is its text as it came; a field
        // no revision defines is left out.
        assert_eq!(
            text(call_message(
                &json!(3),
                &Ok(
                    result(r#" {"structuredContent":{"n":1.50}, "content":[]} "#)
                        .in_era(Revision::V2025_06_18)
                )
            )),
            r#"{"jsonrpc":"2.0","id":3,"result":{"structuredContent":{"n":1.50}, "content":[]}}"#
        );
        assert_eq!(
            text(call_message(
                &json!(4),
                &Ok(result(r#"{"n":1.50,"content":[]}"#).in_era(Revision::V2025_06_18))
            )),
            r#"{"jsonrpc":"2.0","id":4,"result":{"content":[]}}"#
        );
        let answer = Err(RpcError::new(-32602, "Unknown tool: x"));
        let parsed: Value =
            serde_json::from_slice(&call_message(&json!(2), &answer).expect("serializable"))
                .expect("JSON");
        assert_eq!(
            parsed,
            rpc::error_body(&json!(2), &RpcError::new(-32602, "Unknown tool: x"))
        );
    }
}

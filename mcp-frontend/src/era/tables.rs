//! Era hygiene (ARCHITECTURE.md, "Era hygiene"): what each protocol revision a client may
//! speak defines, in one table, and the two edits that follow it: the fields of a tool
//! definition in `tools/list`, and the top-level fields of a `tools/call` result.
//!
//! Whatever revision the upstream spoke, a client gets the shape of its own: a field its
//! revision does not define is left out, `resultType` exists only on the modern surface, and
//! `_meta["io.modelcontextprotocol/serverInfo"]` names this runtime there and never the
//! upstream anywhere.

use std::borrow::Cow;
use std::sync::OnceLock;

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Value, json};

/// The `_meta` key of a 2026-07-28 result that names the server that made it.
pub(crate) const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// `serverInfo` of this server.
pub(crate) fn server_info() -> Value {
    json!({"name": "connector", "version": env!("CARGO_PKG_VERSION")})
}

/// The protocol revision an answer is shaped for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Revision {
    /// The legacy surface: 2025-06-18, also 2025-03-26 and a request without a version header.
    V2025_06_18,
    /// The legacy surface for a request whose `MCP-Protocol-Version` is 2025-11-25.
    V2025_11_25,
    /// The modern surface.
    V2026_07_28,
}

impl Revision {
    /// Every revision, in [`Revision::index`] order.
    pub(crate) const ALL: [Revision; 3] = [
        Revision::V2025_06_18,
        Revision::V2025_11_25,
        Revision::V2026_07_28,
    ];

    /// Position in [`Revision::ALL`] and in the columns of the tables below.
    pub(crate) fn index(self) -> usize {
        match self {
            Revision::V2025_06_18 => 0,
            Revision::V2025_11_25 => 1,
            Revision::V2026_07_28 => 2,
        }
    }

    /// The revision of a legacy-surface request, from its `MCP-Protocol-Version` header
    /// (already checked to be one the surface speaks).
    pub(crate) fn legacy(header: Option<&str>) -> Self {
        match header.map(str::trim) {
            Some("2025-11-25") => Revision::V2025_11_25,
            _ => Revision::V2025_06_18,
        }
    }

    fn modern(self) -> bool {
        self == Revision::V2026_07_28
    }
}

/// Which revisions define a field: one flag per column of [`Revision::ALL`].
type Defined = [bool; 3];
const EVERY: Defined = [true, true, true];

/// The fields of a `Tool` each revision defines (schema `Tool`). A field not listed here is
/// left out of `tools/list` for every client.
const TOOL_FIELDS: &[(&str, Defined)] = &[
    ("name", EVERY),
    ("title", EVERY),
    ("description", EVERY),
    ("inputSchema", EVERY),
    ("outputSchema", EVERY),
    ("annotations", EVERY),
    ("icons", [false, true, true]),
    // Task augmentation: core in 2025-11-25, an extension (not a tool field) in 2026-07-28.
    ("execution", [false, true, false]),
    ("_meta", EVERY),
];

/// The top-level fields of a `CallToolResult` each revision defines. Any other field of the
/// upstream's result is left out.
const RESULT_FIELDS: &[(&str, Defined)] = &[
    ("content", EVERY),
    ("structuredContent", EVERY),
    ("isError", EVERY),
    ("_meta", EVERY),
    ("resultType", [false, false, true]),
];

fn defines(table: &[(&str, Defined)], revision: Revision, field: &str) -> bool {
    table
        .iter()
        .any(|(name, defined)| *name == field && defined[revision.index()])
}

/// Whether `revision` defines the tool field `field` (the definition table above).
pub(crate) fn tool_defines(revision: Revision, field: &str) -> bool {
    defines(TOOL_FIELDS, revision, field)
}

/// One piece of a result as written: a member of the upstream's object kept as it came, or
/// a member written here (`"key":value`, complete).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Piece {
    Kept(usize),
    Written(String),
}

/// How a `CallToolResult` with the top-level member `keys` (in order; `raw(i)` is the text of
/// member `i`'s value, asked for `_meta` only) is written for `revision`: `None` when it goes out exactly as it came, else the members in
/// order. Fields the revision does not define are left out; on the modern surface a missing
/// `resultType` is put first as `"complete"` and `_meta` gets this runtime's `serverInfo`;
/// on the legacy surface an upstream's `serverInfo` is removed from `_meta`.
pub(crate) fn result_pieces<'a>(
    revision: Revision,
    keys: &[&str],
    raw: impl Fn(usize) -> &'a str,
) -> Option<Vec<Piece>> {
    let mut pieces = Vec::with_capacity(keys.len() + 2);
    let mut changed = false;
    if revision.modern() && !keys.contains(&"resultType") {
        pieces.push(Piece::Written(r#""resultType":"complete""#.to_owned()));
        changed = true;
    }
    let mut saw_meta = false;
    for (i, key) in keys.iter().enumerate() {
        if !defines(RESULT_FIELDS, revision, key) {
            changed = true;
            continue;
        }
        if *key != "_meta" {
            pieces.push(Piece::Kept(i));
            continue;
        }
        saw_meta = true;
        match result_meta(revision, raw(i)) {
            MetaEdit::Keep => pieces.push(Piece::Kept(i)),
            MetaEdit::Drop => changed = true,
            MetaEdit::Write(text) => {
                pieces.push(Piece::Written(format!(r#""_meta":{text}"#)));
                changed = true;
            }
        }
    }
    if revision.modern() && !saw_meta {
        pieces.push(Piece::Written(format!(
            r#""_meta":{{{}}}"#,
            our_server_info()
        )));
        changed = true;
    }
    changed.then_some(pieces)
}

/// `"io.modelcontextprotocol/serverInfo":{…}` naming this runtime (built once).
fn our_server_info() -> &'static str {
    static MEMBER: OnceLock<String> = OnceLock::new();
    MEMBER.get_or_init(|| format!("\"{META_SERVER_INFO}\":{}", server_info()))
}

enum MetaEdit {
    Keep,
    Drop,
    Write(String),
}

/// A result's `_meta` for `revision`: the upstream's keys as they came, without its
/// `serverInfo`; on the modern surface ours is added. A `_meta` that is not an object is
/// left as it came.
fn result_meta(revision: Revision, raw: &str) -> MetaEdit {
    let Ok(RawMembers(members)) = serde_json::from_str::<RawMembers<'_>>(raw) else {
        return MetaEdit::Keep;
    };
    let kept: Vec<_> = members
        .iter()
        .filter(|(key, _)| key.as_ref() != META_SERVER_INFO)
        .collect();
    if !revision.modern() && kept.len() == members.len() {
        return MetaEdit::Keep;
    }
    if !revision.modern() && kept.is_empty() {
        return MetaEdit::Drop;
    }
    let mut text = String::with_capacity(raw.len() + 64);
    text.push('{');
    for (key, value) in kept {
        push_member(&mut text, key, value.get());
        text.push(',');
    }
    if revision.modern() {
        text.push_str(our_server_info());
    } else {
        text.pop();
    }
    text.push('}');
    MetaEdit::Write(text)
}

/// `key` as a JSON string. A key that came without escapes is written as it came.
pub(crate) fn quoted(key: &str) -> String {
    serde_json::Value::from(key).to_string()
}

/// Appends `"key":value` (the key escaped as JSON, the value as it came).
fn push_member(out: &mut String, key: &str, raw_value: &str) {
    out.push_str(&quoted(key));
    out.push(':');
    out.push_str(raw_value);
}

/// One JSON object's members in the order they came, each value as its raw text (borrowed
/// from the input, so nothing inside a value is parsed into a tree or written again).
pub(crate) struct RawMembers<'a>(pub(crate) Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de> Deserialize<'de> for RawMembers<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(MembersVisitor)
    }
}

struct MembersVisitor;

impl<'de> Visitor<'de> for MembersVisitor {
    type Value = RawMembers<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawMembers<'de>, A::Error> {
        let mut members = Vec::new();
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            let value: &'de RawValue = map.next_value()?;
            members.push((key, value));
        }
        Ok(RawMembers(members))
    }
}

/// An object key, borrowed from the input unless it had escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E: de::Error>(self, key: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(key)))
            }
            fn visit_str<E: de::Error>(self, key: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(key.to_owned())))
            }
            fn visit_string<E: de::Error>(self, key: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(key)))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(revision: Revision, text: &str) -> String {
        let RawMembers(members) = serde_json::from_str(text).expect("object");
        let pairs: Vec<(&str, &str)> = members.iter().map(|(k, v)| (k.as_ref(), v.get())).collect();
        let keys: Vec<&str> = pairs.iter().map(|(k, _)| *k).collect();
        match result_pieces(revision, &keys, |i| pairs[i].1) {
            None => text.to_owned(),
            Some(pieces) => {
                let mut out = String::from("{");
                for (n, piece) in pieces.iter().enumerate() {
                    if n > 0 {
                        out.push(',');
                    }
                    match piece {
                        Piece::Kept(i) => push_member(&mut out, pairs[*i].0, pairs[*i].1),
                        Piece::Written(member) => out.push_str(member),
                    }
                }
                out.push('}');
                out
            }
        }
    }

    fn ours() -> &'static str {
        our_server_info()
    }

    #[test]
    fn a_legacy_result_without_foreign_fields_is_untouched() {
        let text = r#"{"content":[],"structuredContent":{"z":1,"a":9007199254740993,"f":1.50,"s":"é"},"isError":false,"_meta":{"x":1}}"#;
        assert_eq!(write(Revision::V2025_06_18, text), text);
        assert_eq!(write(Revision::V2025_11_25, text), text);
    }

    #[test]
    fn legacy_loses_result_type_and_the_upstreams_server_info() {
        let text = r#"{"resultType":"complete","content":[{"type":"text","text":"1.50"}],"structuredContent":{"z":1,"a":9007199254740993,"f":1.50,"s":"é"},"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"up","version":"1"},"k":2.0}}"#;
        assert_eq!(
            write(Revision::V2025_06_18, text),
            r#"{"content":[{"type":"text","text":"1.50"}],"structuredContent":{"z":1,"a":9007199254740993,"f":1.50,"s":"é"},"_meta":{"k":2.0}}"#
        );
        // A `_meta` that held only the upstream's identity goes away with it.
        assert_eq!(
            write(
                Revision::V2025_06_18,
                r#"{"content":[],"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"up"}}}"#
            ),
            r#"{"content":[]}"#
        );
    }

    #[test]
    fn modern_gets_result_type_first_and_our_server_info() {
        assert_eq!(
            write(Revision::V2026_07_28, r#"{"content":[],"isError":false}"#),
            format!(
                r#"{{"resultType":"complete","content":[],"isError":false,"_meta":{{{}}}}}"#,
                ours()
            )
        );
        assert_eq!(
            write(
                Revision::V2026_07_28,
                r#"{"content":[],"resultType":"complete","_meta":{"a":1,"io.modelcontextprotocol/serverInfo":{"name":"up"},"b":[1.0]}}"#
            ),
            format!(
                r#"{{"content":[],"resultType":"complete","_meta":{{"a":1,"b":[1.0],{}}}}}"#,
                ours()
            )
        );
        assert!(ours().contains(r#""name":"connector""#));
    }

    #[test]
    fn undefined_fields_are_left_out() {
        assert_eq!(
            write(
                Revision::V2025_06_18,
                r#"{"content":[],"inputRequests":{},"requestState":"x","ttlMs":5}"#
            ),
            r#"{"content":[]}"#
        );
    }

    #[test]
    fn tool_fields_follow_the_table() {
        for field in [
            "name",
            "title",
            "description",
            "inputSchema",
            "outputSchema",
            "annotations",
            "_meta",
        ] {
            for revision in Revision::ALL {
                assert!(tool_defines(revision, field), "{field} {revision:?}");
            }
        }
        assert!(!tool_defines(Revision::V2025_06_18, "icons"));
        assert!(tool_defines(Revision::V2025_11_25, "icons"));
        assert!(tool_defines(Revision::V2026_07_28, "icons"));
        assert!(!tool_defines(Revision::V2025_06_18, "execution"));
        assert!(tool_defines(Revision::V2025_11_25, "execution"));
        assert!(!tool_defines(Revision::V2026_07_28, "execution"));
        assert!(!tool_defines(Revision::V2026_07_28, "vendorThing"));
    }

    #[test]
    fn legacy_revision_from_the_header() {
        assert_eq!(Revision::legacy(None), Revision::V2025_06_18);
        assert_eq!(Revision::legacy(Some("2025-03-26")), Revision::V2025_06_18);
        assert_eq!(
            Revision::legacy(Some(" 2025-11-25 ")),
            Revision::V2025_11_25
        );
    }

    /// Member text as an upstream may write it: numbers that do not survive a float, escapes,
    /// non-ASCII, nesting. Kept members must come out byte for byte.
    fn raw_value() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            Just("9007199254740993".to_owned()),
            Just("1.50".to_owned()),
            Just(r#""\u00e9\n""#.to_owned()),
            Just(r#"[{"type":"text","text":"x"}]"#.to_owned()),
            Just("null".to_owned()),
            "[a-z]{0,6}".prop_map(|s| format!("{s:?}")),
            any::<i64>().prop_map(|n| format!("{{ \"n\" : {n} }}")),
        ]
    }

    /// A result object's members in order: defined and undefined fields, a `_meta` whose
    /// members may include the upstream's `serverInfo`.
    fn result_members() -> impl proptest::strategy::Strategy<Value = Vec<(String, String)>> {
        use proptest::prelude::*;
        let key = prop::sample::select(vec![
            "content",
            "structuredContent",
            "isError",
            "resultType",
            "inputRequests",
            "ttlMs",
            "x",
        ]);
        let meta_key = prop::sample::select(vec![META_SERVER_INFO, "a", "trace", "é"]);
        let meta = prop::collection::vec((meta_key, raw_value()), 0..4).prop_map(|members| {
            let body: Vec<String> = members
                .iter()
                .map(|(k, v)| format!("{}:{v}", quoted(k)))
                .collect();
            format!("{{{}}}", body.join(","))
        });
        let member = prop_oneof![
            4 => (key, raw_value()).prop_map(|(k, v)| (k.to_owned(), v)),
            1 => meta.prop_map(|m| ("_meta".to_owned(), m)),
        ];
        prop::collection::vec(member, 0..6).prop_map(|members| {
            let mut seen = std::collections::BTreeSet::new();
            members
                .into_iter()
                .filter(|(k, _)| seen.insert(k.clone()))
                .collect()
        })
    }

    /// The members of a `_meta` object as written, but the server's identity.
    fn meta_members(raw: &str) -> Vec<(String, String)> {
        serde_json::from_str::<RawMembers<'_>>(raw)
            .map(|RawMembers(m)| {
                m.into_iter()
                    .filter(|(k, _)| k.as_ref() != META_SERVER_INFO)
                    .map(|(k, v)| (k.into_owned(), v.get().to_owned()))
                    .collect()
            })
            .unwrap_or_default()
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config { cases: 512, ..Default::default() })]

        /// For every revision: the result is JSON; each defined member other than `_meta`
        /// is byte-exact and in order; an undefined one is gone; `resultType` exists only on
        /// the modern surface; the upstream's `serverInfo` never reaches a client, ours only
        /// the modern one; every other `_meta` member is kept byte-exact.
        #[test]
        fn each_revision_edits_only_the_members_it_must(members in result_members()) {
            let text = format!(
                "{{{}}}",
                members.iter().map(|(k, v)| format!("{}:{v}", quoted(k))).collect::<Vec<_>>().join(",")
            );
            for revision in Revision::ALL {
                let out = write(revision, &text);
                let parsed: serde_json::Value = serde_json::from_str(&out)
                    .unwrap_or_else(|e| panic!("{out}: {e}"));
                let RawMembers(written) = serde_json::from_str(&out)
                    .unwrap_or_else(|e| panic!("{out}: {e}"));
                let kept: Vec<(&str, &str)> = members
                    .iter()
                    .filter(|(k, _)| k != "_meta" && defines(RESULT_FIELDS, revision, k))
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                let got: Vec<(&str, &str)> = written
                    .iter()
                    .map(|(k, v)| (k.as_ref(), v.get()))
                    .filter(|(k, _)| *k != "_meta" && !(revision.modern() && *k == "resultType" && !members.iter().any(|(m, _)| m == "resultType")))
                    .collect();
                proptest::prop_assert_eq!(&got, &kept, "{:?}: {} -> {}", revision, text, out);
                proptest::prop_assert_eq!(parsed.get("resultType").is_some(), revision.modern());
                let info = parsed.pointer("/_meta").and_then(|m| m.get(META_SERVER_INFO));
                match revision.modern() {
                    true => proptest::prop_assert_eq!(info, Some(&server_info())),
                    false => proptest::prop_assert!(info.is_none(), "{}", out),
                }
                let upstream_meta: Vec<_> = members
                    .iter()
                    .filter(|(k, _)| k == "_meta")
                    .flat_map(|(_, v)| meta_members(v))
                    .collect();
                let out_meta: Vec<_> = written
                    .iter()
                    .filter(|(k, _)| k == "_meta")
                    .flat_map(|(_, v)| meta_members(v.get()))
                    .collect();
                proptest::prop_assert_eq!(out_meta, upstream_meta, "{}", out);
            }
        }
    }
}

//! Property tests of `connector.json` parsing over generated documents built from its own
//! vocabulary: any document is a manifest or a list of problems (never a panic), every problem
//! is one non-empty line naming what is wrong, and an accepted manifest has a valid key that
//! is not the runtime's own.

use proptest::prelude::*;
use serde_json::{Map, Value};

use super::parse;

const WORDS: &[&str] = &[
    "key",
    "name",
    "description",
    "version",
    "mcp",
    "transport",
    "stdio",
    "http",
    "command",
    "args",
    "env",
    "secrets",
    "cwd",
    "url",
    "auth",
    "kind",
    "none",
    "bearer",
    "header",
    "secret",
    "oauth",
    "scopes",
    "clientId",
    "cli",
    "entrypoint",
    "skills",
    "toolRisk",
    "high",
    "low",
    "timeouts",
    "callMs",
    "startMs",
    "tutti",
    "npx",
    "${release}",
    "a-b",
    "LD_PRELOAD",
    "",
];

fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(WORDS).prop_map(str::to_owned),
        "\\PC{0,12}",
        "[a-z][a-z0-9-]{0,30}",
    ]
}

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        word().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(word(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A document whose top level has the fields a manifest has, each with any value.
fn document() -> impl Strategy<Value = Value> {
    prop::collection::btree_map(
        prop::sample::select(&WORDS[..22]).prop_map(str::to_owned),
        value(),
        0..8,
    )
    .prop_map(|m| Value::Object(m.into_iter().collect()))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn any_document_is_a_manifest_or_one_line_per_problem(doc in prop_oneof![document(), value()]) {
        let dir = std::env::temp_dir();
        match parse(&doc, &dir) {
            Ok(manifest) => {
                prop_assert!(tutti_proto::key::is_valid(&manifest.key), "{:?}", manifest.key);
                prop_assert_ne!(manifest.key.as_str(), "tutti");
            }
            Err(problems) => {
                prop_assert!(!problems.is_empty());
                for line in problems {
                    prop_assert!(!line.trim().is_empty() && !line.contains('\n'), "{line:?}");
                }
            }
        }
    }
}

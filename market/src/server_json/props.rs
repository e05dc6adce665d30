//! Property tests of the `server.json` mapping over generated documents: whatever a registry
//! serves, the mapping answers a plan or an error (never a panic); a plan's key is a valid
//! connector key; the value of an input marked secret never reaches `connector.json`; and an
//! argument's value is one argv item exactly as written (no shell ever reads it).

use proptest::prelude::*;
use serde_json::{Value, json};

use super::{Choices, normalise_key, parse, plan};

/// The marker every secret input's value and default carry in these documents.
const SECRET: &str = "S3CRET-VALUE";

/// Values an argument may hold: shell syntax, braces (variables), spaces, quotes.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9 ;|&$`'\"(){}*?<>~=-]{0,12}",
        Just("{var}".to_owned()),
        Just("$(rm -rf ~)".to_owned()),
    ]
}

fn input(secret: bool) -> impl Strategy<Value = Value> {
    (
        "[A-Za-z_]{1,8}",
        prop::option::of(text()),
        prop::option::of(text()),
        any::<bool>(),
        prop::option::of(any::<bool>()),
    )
        .prop_map(move |(name, value, default, required, var_secret)| {
            let mark =
                |v: Option<String>| v.map(|v| if secret { format!("{SECRET}{v}") } else { v });
            let mut input = json!({"name": name, "isRequired": required, "isSecret": secret});
            if let Some(v) = mark(value) {
                input["value"] = json!(v);
            }
            if let Some(d) = mark(default) {
                input["default"] = json!(d);
            }
            if let Some(s) = var_secret {
                input["variables"] =
                    json!({"var": {"isSecret": s, "default": if s { SECRET } else { "x" }}});
            }
            input
        })
}

fn argument() -> impl Strategy<Value = Value> {
    (
        prop::sample::select(vec!["positional", "named", "other"]),
        input(false),
        any::<bool>(),
    )
        .prop_map(|(kind, mut arg, secret)| {
            arg["type"] = json!(kind);
            arg["name"] = json!(format!("--{}", arg["name"].as_str().unwrap_or("x")));
            if secret {
                arg["isSecret"] = json!(true);
                arg["value"] = json!(SECRET);
            }
            arg
        })
}

fn package() -> impl Strategy<Value = Value> {
    (
        prop::sample::select(vec!["npm", "pypi", "mcpb", "oci", "cargo"]),
        "[a-z@/:.-]{1,16}",
        prop::collection::vec(argument(), 0..4),
        prop::collection::vec(any::<bool>().prop_flat_map(input), 0..4),
        prop::option::of(prop::sample::select(vec!["stdio", "sse"])),
    )
        .prop_map(|(kind, identifier, args, env, transport)| {
            let mut p = json!({"registryType": kind, "identifier": identifier,
                "packageArguments": args, "runtimeArguments": [], "environmentVariables": env});
            if let Some(t) = transport {
                p["transport"] = json!({"type": t});
            }
            p
        })
}

fn remote() -> impl Strategy<Value = Value> {
    (
        prop::sample::select(vec!["streamable-http", "sse"]),
        prop::collection::vec(any::<bool>().prop_flat_map(input), 0..3),
    )
        .prop_map(|(kind, headers)| {
            json!({"type": kind, "url": "https://example.test/{var}", "headers": headers,
                "variables": {"var": {"default": "mcp"}}})
        })
}

fn document() -> impl Strategy<Value = Value> {
    (
        "[a-zA-Z0-9./_ -]{0,30}",
        prop::collection::vec(package(), 0..3),
        prop::collection::vec(remote(), 0..2),
    )
        .prop_map(|(name, packages, remotes)| {
            json!({"name": name, "version": "1.0.0", "packages": packages, "remotes": remotes})
        })
}

fn choices() -> impl Strategy<Value = Choices> {
    (
        prop::collection::btree_map("[A-Za-z_]{1,8}", text(), 0..3),
        prop::option::of(0usize..3),
        prop::option::of(0usize..2),
    )
        .prop_map(|(set, package, remote)| Choices {
            set,
            package,
            remote,
            key: None,
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn any_document_maps_to_a_plan_without_secrets_or_to_an_error(doc in document(), choices in choices()) {
        let Ok(doc) = parse(doc.to_string().as_bytes()) else {
            return Ok(());
        };
        let Ok(plan) = plan(&doc, &choices) else {
            return Ok(());
        };
        let key = plan.manifest["key"].as_str().unwrap_or_default();
        prop_assert!(tutti_proto::key::is_valid(key) && key != "tutti", "key {key:?}");
        let written = format!("{} {:?} {:?}", plan.manifest, plan.package_args, plan.runtime_args);
        prop_assert!(!written.contains(SECRET), "a secret value in {written}");
    }

    /// Each positional value is one argv item, byte for byte (given with `--set`).
    #[test]
    fn an_argument_value_is_one_argv_item_as_written(value in text(), name in "[a-z]{1,8}") {
        let doc = json!({"name": "io.test/x", "version": "1", "packages": [{
            "registryType": "npm", "identifier": "x",
            "packageArguments": [{"type": "positional", "valueHint": name, "isRequired": true}]}]});
        let doc = parse(doc.to_string().as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        let choices = Choices { set: [(name, value.clone())].into(), ..Choices::default() };
        let plan = plan(&doc, &choices).unwrap_or_else(|e| panic!("{e}"));
        prop_assert_eq!(plan.package_args, vec![value]);
    }

    #[test]
    fn a_normalised_name_is_a_key_or_nothing(name in "\\PC{0,40}") {
        let key = normalise_key(&name);
        prop_assert!(key.is_empty() || tutti_proto::key::is_valid(&key), "{name:?} -> {key:?}");
    }
}

/// The generated documents reach the success path: without this, the first property could
/// hold only because every document was refused.
#[test]
fn the_generated_documents_reach_plans() {
    use proptest::strategy::ValueTree as _;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let plans = (0..400)
        .filter_map(|_| {
            let doc = document().new_tree(&mut runner).ok()?.current();
            let doc = parse(doc.to_string().as_bytes()).ok()?;
            plan(&doc, &Choices::default()).ok()
        })
        .count();
    assert!(
        plans > 40,
        "only {plans} of 400 generated documents mapped to a plan"
    );
}

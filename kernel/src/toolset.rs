//! Validation of a candidate tool set at commit (SPEC §5.1) and the risk level of each tool.
//! Pure: JSON in, validated tools or one error per problem out.

use std::collections::{BTreeMap, HashSet};

pub use crate::risk::Risk;
use serde_json::Value;
use tutti_rules::{mcp_header, schema_pattern};

use crate::naming::local_name;

/// One tool as the upstream offered it.
#[derive(Clone, Debug)]
pub struct OfferedTool {
    pub upstream_name: String,
    /// The upstream's Tool object, unchanged.
    pub definition: Value,
}

/// A tool that passed validation, with its local name and risk.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidTool {
    pub local_name: String,
    pub upstream_name: String,
    pub definition_json: String,
    pub risk: Risk,
}

const KNOWN_DIALECTS: &[&str] = &[
    "https://json-schema.org/draft/2020-12/schema",
    "https://json-schema.org/draft/2019-09/schema",
    "http://json-schema.org/draft-07/schema",
    "http://json-schema.org/draft-06/schema",
    "http://json-schema.org/draft-04/schema",
];

/// Validates the whole candidate; any problem refuses the whole set.
pub fn validate(
    key: &str,
    tools: &[OfferedTool],
    risk_overrides: &BTreeMap<String, String>,
) -> Result<Vec<ValidTool>, Vec<String>> {
    let mut problems = Vec::new();
    let mut seen: BTreeMap<String, &str> = BTreeMap::new();
    let mut out = Vec::with_capacity(tools.len());
    for tool in tools {
        let local = local_name(key, &tool.upstream_name);
        if tool.upstream_name.is_empty() {
            problems.push("a tool has an empty name".to_string());
            continue;
        }
        if let Some(other) = seen.insert(local.clone(), &tool.upstream_name) {
            problems.push(format!(
                "tools {other:?} and {:?} both map to the local name {local}",
                tool.upstream_name
            ));
            continue;
        }
        if let Err(p) = check_input_schema(tool.definition.get("inputSchema")) {
            problems.push(format!("tool {:?}: inputSchema: {p}", tool.upstream_name));
            continue;
        }
        let risk = risk_overrides
            .get(&tool.upstream_name)
            .and_then(|r| Risk::parse(r))
            .unwrap_or_else(|| risk_of(&tool.upstream_name, &tool.definition));
        out.push(ValidTool {
            local_name: local,
            upstream_name: tool.upstream_name.clone(),
            definition_json: tool.definition.to_string(),
            risk,
        });
    }
    if problems.is_empty() {
        out.sort_by(|a, b| a.local_name.cmp(&b.local_name));
        Ok(out)
    } else {
        Err(problems)
    }
}

/// The level of an upstream tool: [`crate::risk::assess`] (SPEC §12).
pub fn risk_of(upstream_name: &str, definition: &Value) -> Risk {
    crate::risk::assess(upstream_name, definition).0
}

/// Root must be an object schema with `"type": "object"`, a known dialect, local `$ref`s
/// only, valid `x-mcp-header` annotations, and it must compile.
pub fn check_input_schema(schema: Option<&Value>) -> Result<(), String> {
    let Some(schema) = schema else {
        return Err("missing".into());
    };
    let Some(obj) = schema.as_object() else {
        return Err("must be a JSON object".into());
    };
    if obj.get("type").and_then(Value::as_str) != Some("object") {
        return Err("root must have \"type\": \"object\"".into());
    }
    if let Some(dialect) = obj.get("$schema") {
        let d = dialect.as_str().unwrap_or("").trim_end_matches('#');
        if !KNOWN_DIALECTS.contains(&d) {
            return Err(format!("unknown $schema dialect {dialect}"));
        }
    }
    check_refs(schema)?;
    check_mcp_headers(schema)?;
    jsonschema::options()
        .with_pattern_options(
            jsonschema::PatternOptions::regex()
                .size_limit(schema_pattern::PATTERN_SIZE_LIMIT)
                .dfa_size_limit(schema_pattern::PATTERN_DFA_SIZE_LIMIT),
        )
        .build(schema)
        .map_err(|e| describe_build_error(&e))?;
    Ok(())
}

/// Why a schema does not compile; a `pattern` the linear-time engine refuses says what
/// patterns may be ([`schema_pattern`]).
fn describe_build_error(error: &jsonschema::ValidationError<'_>) -> String {
    match error.kind() {
        jsonschema::error::ValidationErrorKind::Format { format } if format == "regex" => format!(
            "does not compile: {error} (at {}): {}",
            error.schema_path().as_str(),
            schema_pattern::PATTERN_RULE
        ),
        _ => format!("does not compile: {error}"),
    }
}

/// Every `$ref` / `$dynamicRef` of every subschema must point into the document (`#…`).
fn check_refs(schema: &Value) -> Result<(), String> {
    visit_subschemas(schema, true, &mut |node, _| {
        for k in ["$ref", "$dynamicRef"] {
            match node.get(k) {
                None => {}
                Some(Value::String(r)) if r.starts_with('#') => {}
                Some(other) => return Err(format!("non-local {k} {other} is not allowed")),
            }
        }
        Ok(())
    })
}

/// SEP-2243 ([`mcp_header`]): `x-mcp-header` only on string/integer/boolean properties
/// reachable through `properties` alone ([`mcp_header::declarations`], the set the frontend
/// reads); names are RFC 9110 tokens, unique case-insensitively.
fn check_mcp_headers(schema: &Value) -> Result<(), String> {
    visit_subschemas(
        schema,
        true,
        &mut |node, reachable| match node.get(mcp_header::KEYWORD) {
            Some(h) if !reachable => Err(format!(
                "x-mcp-header {h} must be on a property reachable only through \"properties\""
            )),
            _ => Ok(()),
        },
    )?;
    // The root is no property; a declaration there is checked (and refused) like one.
    let root = schema
        .get(mcp_header::KEYWORD)
        .map(|value| mcp_header::Declaration {
            value,
            path: Vec::new(),
            kind: mcp_header::ParamKind::of_type(schema.get("type").and_then(Value::as_str)),
        });
    let mut names = HashSet::new();
    for declaration in root.into_iter().chain(mcp_header::declarations(schema)) {
        let h = declaration.value;
        let name = h.as_str().unwrap_or("");
        if !mcp_header::is_token(name) {
            return Err(format!("x-mcp-header {h} is not a valid header name token"));
        }
        if !names.insert(mcp_header::header_key(name)) {
            return Err(format!("x-mcp-header {h} is declared twice"));
        }
        if !declaration.kind.is_allowed() {
            return Err(format!(
                "x-mcp-header {h} must be on a string, integer or boolean property"
            ));
        }
    }
    Ok(())
}

/// Keywords whose value is one subschema.
const SCHEMA_KEYWORDS: &[&str] = &[
    "additionalProperties",
    "additionalItems",
    "items",
    "contains",
    "propertyNames",
    "if",
    "then",
    "else",
    "not",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
];
/// Keywords whose value is an array of subschemas (`items` in drafts before 2020-12 too).
const SCHEMA_ARRAY_KEYWORDS: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems", "items"];
/// Keywords whose value maps names to subschemas (`dependencies`: only its object values).
const SCHEMA_MAP_KEYWORDS: &[&str] = &[
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
    "dependencies",
];

/// Calls `f` on `schema` and on every subschema in it, following only the keywords whose
/// values are schemas: a property *named* `$ref`, or a `const`/`enum`/`default`/`examples`
/// value that looks like a schema, is data and never visited as one. The flag tells whether
/// the node is reached from the root through `properties` alone.
fn visit_subschemas(
    schema: &Value,
    via_properties: bool,
    f: &mut impl FnMut(&serde_json::Map<String, Value>, bool) -> Result<(), String>,
) -> Result<(), String> {
    let Value::Object(node) = schema else {
        return Ok(()); // `true` / `false` schemas hold nothing
    };
    f(node, via_properties)?;
    for (keyword, value) in node {
        let k = keyword.as_str();
        match value {
            Value::Object(map) if SCHEMA_MAP_KEYWORDS.contains(&k) => {
                let reachable = via_properties && k == "properties";
                for child in map.values() {
                    visit_subschemas(child, reachable, f)?;
                }
            }
            Value::Object(_) if SCHEMA_KEYWORDS.contains(&k) => {
                visit_subschemas(value, false, f)?;
            }
            Value::Array(items) if SCHEMA_ARRAY_KEYWORDS.contains(&k) => {
                for child in items {
                    visit_subschemas(child, false, f)?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, def: Value) -> OfferedTool {
        OfferedTool {
            upstream_name: name.into(),
            definition: def,
        }
    }

    fn obj() -> Value {
        json!({"type":"object","properties":{"a":{"type":"string"}}})
    }

    #[test]
    fn valid_set_is_sorted_with_local_names() {
        let t = vec![
            tool("zeta", json!({"name":"zeta","inputSchema": obj()})),
            tool("alpha", json!({"name":"alpha","inputSchema": obj()})),
        ];
        let v = validate("k", &t, &BTreeMap::new()).expect("valid");
        assert_eq!(v[0].local_name, "k_alpha");
        assert_eq!(v[1].local_name, "k_zeta");
    }

    #[test]
    fn collisions_are_refused() {
        let t = vec![
            tool("a.b", json!({"inputSchema": obj()})),
            tool("a_b", json!({"inputSchema": obj()})),
        ];
        let e = validate("k", &t, &BTreeMap::new()).expect_err("must be refused");
        assert!(e[0].contains("k_a_b"), "{e:?}");
    }

    #[test]
    fn bad_schemas_are_refused() {
        for (schema, needle) in [
            (json!({"type":"string"}), "\"type\": \"object\""),
            (
                json!({"type":"object","$schema":"http://example.com/s"}),
                "dialect",
            ),
            (
                json!({"type":"object","properties":{"a":{"$ref":"http://x/y"}}}),
                "non-local",
            ),
            (
                json!({"type":"object","properties":{"a":{"type":"number","x-mcp-header":"A"}}}),
                "string, integer",
            ),
            (
                json!({"type":"object","properties":{"a":{"type":"string","x-mcp-header":"bad name"}}}),
                "token",
            ),
            (
                json!({"type":"object","items":{"type":"string","x-mcp-header":"A"}}),
                "reachable",
            ),
            (
                json!({"type":"object","properties":{"a":{"type":"string","x-mcp-header":"A"},"b":{"type":"string","x-mcp-header":"a"}}}),
                "twice",
            ),
            (
                json!({"type":"object","properties":{"a":{"type":"strin"}}}),
                "compile",
            ),
            (
                json!({"type":"object","properties":{"a":{"type":"string","pattern":"(a)\\1"}}}),
                "linear-time",
            ),
            (
                json!({"type":"object","patternProperties":{"^(?=x)":{"type":"string"}}}),
                "linear-time",
            ),
            (
                json!({"type":"object","properties":{"a":{"pattern":"(?:\\p{L}{1,100}){1,100}"}}}),
                "1 MiB",
            ),
        ] {
            let e = validate(
                "k",
                &[tool("t", json!({"inputSchema": schema}))],
                &BTreeMap::new(),
            )
            .expect_err("must be refused");
            assert!(e[0].contains(needle), "{needle}: {e:?}");
        }
        let ok = json!({"type":"object","$schema":"https://json-schema.org/draft/2020-12/schema",
            "properties":{"a":{"type":"string","x-mcp-header":"Region"},"b":{"$ref":"#/$defs/x"},
                "c":{"type":"string","pattern":"^(a+)+$"},"d":{"pattern":"^[\\w.-]{1,64}$"}},
            "$defs":{"x":{"type":"integer"}}});
        assert!(
            validate(
                "k",
                &[tool("t", json!({"inputSchema": ok}))],
                &BTreeMap::new()
            )
            .is_ok()
        );
    }

    #[test]
    fn an_x_mcp_header_on_the_root_or_past_properties_is_refused() {
        for (schema, needle) in [
            (
                json!({"type":"object","x-mcp-header":"Root"}),
                "string, integer",
            ),
            (json!({"type":"object","x-mcp-header":7}), "token"),
            (
                json!({"type":"object","properties":{"a":{"type":"object","additionalProperties":{"type":"string","x-mcp-header":"A"}}}}),
                "reachable",
            ),
            (
                json!({"type":"object","properties":{"a":{"type":"string","x-mcp-header":7}}}),
                "token",
            ),
        ] {
            let e = check_input_schema(Some(&schema)).expect_err("must be refused");
            assert!(e.contains(needle), "{schema}: {e}");
        }
    }

    #[test]
    fn names_and_data_that_look_like_keywords_are_not_keywords() {
        // A property named `$ref` / `x-mcp-header`, and `const`/`default`/`enum` values shaped
        // like schemas, are data: valid.
        for schema in [
            json!({"type":"object","properties":{"$ref":{"type":"string"}}}),
            json!({"type":"object","properties":{"x-mcp-header":{"type":"number"}}}),
            json!({"type":"object","properties":{"a":{"const":{"$ref":"http://x/y"}}}}),
            json!({"type":"object","properties":{"a":{"default":{"x-mcp-header":"bad name"}}}}),
            json!({"type":"object","properties":{"a":{"enum":[{"$ref":"other.json"}]}}}),
        ] {
            assert_eq!(check_input_schema(Some(&schema)), Ok(()), "{schema}");
        }
        // Real subschemas are still checked, wherever they are.
        for (schema, needle) in [
            (
                json!({"type":"object","$defs":{"a":{"$ref":"other.json"}}}),
                "non-local",
            ),
            (
                json!({"type":"object","anyOf":[{"properties":{"a":{"$ref":"http://x"}}}]}),
                "non-local",
            ),
            (
                json!({"type":"object","properties":{"a":{"$ref":7}}}),
                "non-local",
            ),
            (
                json!({"type":"object","anyOf":[{"properties":{"a":{"type":"string","x-mcp-header":"A"}}}]}),
                "reachable",
            ),
        ] {
            let e = check_input_schema(Some(&schema)).expect_err("must be refused");
            assert!(e.contains(needle), "{schema}: {e}");
        }
    }

    #[test]
    fn risk_levels() {
        assert_eq!(
            risk_of("get", &json!({"annotations":{"readOnlyHint":true}})),
            Risk::Low
        );
        assert_eq!(
            risk_of("get", &json!({"annotations":{"destructiveHint":true}})),
            Risk::High
        );
        assert_eq!(risk_of("delete_item", &json!({})), Risk::High);
        assert_eq!(
            risk_of("lookup", &json!({"description":"Send an email"})),
            Risk::High
        );
        assert_eq!(risk_of("undeleteable", &json!({})), Risk::Medium);
        // As names and descriptions are written: camelCase, third person, -ing, -ed.
        for (name, description) in [
            ("deleteFile", ""),
            ("sendEmail", ""),
            ("HTTPPostRequest", ""),
            ("notify", "Sends a message to Slack"),
            ("cleanup", "Deletes old branches"),
            ("jobs", "Running a job on the cluster"),
            ("tables", "Dropped tables are gone"),
            ("git", "Pushes the branch"),
        ] {
            assert_eq!(
                risk_of(name, &json!({ "description": description })),
                Risk::High,
                "{name}: {description}"
            );
        }
        // A verb inside another word is no verb; read verbs in the name make these `low`;
        // `dropdown_values` says nothing and stays `medium`.
        for (name, description, want) in [
            ("getRunner", "Reads the runner's state", Risk::Low),
            ("postcode_lookup", "Finds a postcode", Risk::Low),
            ("list_sender_ids", "Lists the senders", Risk::Low),
            ("dropdown_values", "", Risk::Medium),
        ] {
            assert_eq!(
                risk_of(name, &json!({ "description": description })),
                want,
                "{name}: {description}"
            );
        }
        assert_eq!(risk_of("plain", &json!({})), Risk::Medium);
        let mut o = BTreeMap::new();
        o.insert("plain".to_string(), "high".to_string());
        let v = validate("k", &[tool("plain", json!({"inputSchema": obj()}))], &o).expect("ok");
        assert_eq!(v[0].risk, Risk::High);
    }
}

//! Validation of a candidate tool set at commit (SPEC §5.1) and the risk level of each tool.
//! Pure: JSON in, validated tools or one error per problem out.

use std::collections::{BTreeMap, HashSet};

use serde_json::Value;

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

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Risk {
    Low,
    Medium,
    High,
}

impl Risk {
    pub fn as_str(self) -> &'static str {
        match self {
            Risk::Low => "low",
            Risk::Medium => "medium",
            Risk::High => "high",
        }
    }
    pub fn parse(s: &str) -> Option<Risk> {
        match s {
            "low" => Some(Risk::Low),
            "medium" => Some(Risk::Medium),
            "high" => Some(Risk::High),
            _ => None,
        }
    }
}

const KNOWN_DIALECTS: &[&str] = &[
    "https://json-schema.org/draft/2020-12/schema",
    "https://json-schema.org/draft/2019-09/schema",
    "http://json-schema.org/draft-07/schema",
    "http://json-schema.org/draft-06/schema",
    "http://json-schema.org/draft-04/schema",
];

/// Verbs that make a tool `high` risk when they appear as a word in its name or description.
const OUTWARD_VERBS: &[&str] = &[
    "delete",
    "remove",
    "drop",
    "destroy",
    "erase",
    "purge",
    "truncate",
    "wipe",
    "kill",
    "send",
    "post",
    "publish",
    "email",
    "exec",
    "execute",
    "run",
    "write",
    "overwrite",
    "pay",
    "transfer",
    "deploy",
    "merge",
    "push",
    "revoke",
    "shutdown",
    "terminate",
    "uninstall",
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

/// `low` for readOnlyHint, `high` for destructiveHint or an outward verb, else `medium`.
pub fn risk_of(upstream_name: &str, definition: &Value) -> Risk {
    let annotations = definition.get("annotations");
    let hint = |name: &str| {
        annotations
            .and_then(|a| a.get(name))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    };
    if hint("destructiveHint") {
        return Risk::High;
    }
    let description = definition
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or("");
    let has_verb = |text: &str| {
        text.split(|c: char| !c.is_ascii_alphanumeric())
            .any(|w| OUTWARD_VERBS.contains(&w.to_ascii_lowercase().as_str()))
    };
    if hint("readOnlyHint") {
        return Risk::Low;
    }
    if has_verb(upstream_name) || has_verb(description) {
        return Risk::High;
    }
    Risk::Medium
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
        .build(schema)
        .map_err(|e| format!("does not compile: {e}"))?;
    Ok(())
}

fn check_refs(v: &Value) -> Result<(), String> {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                if (k == "$ref" || k == "$dynamicRef")
                    && !child.as_str().is_some_and(|r| r.starts_with('#'))
                {
                    return Err(format!("non-local {k} {child} is not allowed"));
                }
                check_refs(child)?;
            }
            Ok(())
        }
        Value::Array(a) => a.iter().try_for_each(check_refs),
        _ => Ok(()),
    }
}

/// SEP-2243: `x-mcp-header` only on string/integer/boolean properties reachable through
/// `properties` alone; names are RFC 9110 tokens, unique case-insensitively.
fn check_mcp_headers(schema: &Value) -> Result<(), String> {
    let mut names = HashSet::new();
    walk_headers(schema, true, &mut names)
}

fn walk_headers(v: &Value, reachable: bool, names: &mut HashSet<String>) -> Result<(), String> {
    match v {
        Value::Object(m) => {
            if let Some(h) = m.get("x-mcp-header") {
                let name = h.as_str().unwrap_or("");
                if !reachable {
                    return Err(format!(
                        "x-mcp-header {h} must be on a property reachable only through \"properties\""
                    ));
                }
                if name.is_empty() || !name.bytes().all(is_tchar) {
                    return Err(format!("x-mcp-header {h} is not a valid header name token"));
                }
                if !names.insert(name.to_ascii_lowercase()) {
                    return Err(format!("x-mcp-header {h} is declared twice"));
                }
                let ty = m.get("type").and_then(Value::as_str).unwrap_or("");
                if !matches!(ty, "string" | "integer" | "boolean") {
                    return Err(format!(
                        "x-mcp-header {h} must be on a string, integer or boolean property"
                    ));
                }
            }
            for (k, child) in m {
                if k == "properties" {
                    if let Value::Object(props) = child {
                        for p in props.values() {
                            walk_headers(p, reachable, names)?;
                        }
                    }
                } else if k != "x-mcp-header" {
                    walk_headers(child, false, names)?;
                }
            }
            Ok(())
        }
        Value::Array(a) => a.iter().try_for_each(|c| walk_headers(c, false, names)),
        _ => Ok(()),
    }
}

/// An RFC 9110 token character (header names).
pub(crate) fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
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
            "properties":{"a":{"type":"string","x-mcp-header":"Region"},"b":{"$ref":"#/$defs/x"}},"$defs":{"x":{"type":"integer"}}});
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
        assert_eq!(risk_of("plain", &json!({})), Risk::Medium);
        let mut o = BTreeMap::new();
        o.insert("plain".to_string(), "high".to_string());
        let v = validate("k", &[tool("plain", json!({"inputSchema": obj()}))], &o).expect("ok");
        assert_eq!(v[0].risk, Risk::High);
    }
}

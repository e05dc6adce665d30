//! The `x-mcp-header` rule (SEP-2243), shared by the kernel (which refuses a tool whose schema
//! breaks it) and the frontend (which checks the `Mcp-Param-<name>` headers of each call):
//!
//! - the schema keyword is [`KEYWORD`], on a property reachable from the root through
//!   `properties` alone ([`declarations`] finds exactly those);
//! - its value is an RFC 9110 header-name token ([`is_token`]), unique case-insensitively
//!   within the schema ([`header_key`] is the comparison and lookup form);
//! - the property's `type` is `string`, `integer` or `boolean` ([`ParamKind::of_type`],
//!   [`ParamKind::is_allowed`]);
//! - the client sends the value in the header `Mcp-Param-<name>` ([`display_name`]).

use serde_json::Value;

/// The JSON Schema keyword that declares a parameter header.
pub const KEYWORD: &str = "x-mcp-header";
/// The header-name prefix as written in messages.
pub const HEADER_PREFIX: &str = "Mcp-Param-";

/// The JSON type a declared parameter has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    String,
    Integer,
    Boolean,
    /// No `type`, or another one: refused by the kernel; compared by JSON text otherwise.
    Other,
}

impl ParamKind {
    /// The kind of a property whose `type` keyword is `ty` (`None`: no string `type`).
    pub fn of_type(ty: Option<&str>) -> Self {
        match ty {
            Some("string") => Self::String,
            Some("integer") => Self::Integer,
            Some("boolean") => Self::Boolean,
            _ => Self::Other,
        }
    }

    /// Whether a parameter header may be declared on a property of this kind.
    pub fn is_allowed(self) -> bool {
        self != Self::Other
    }
}

/// An RFC 9110 `tchar` (a byte of a header-name token).
pub fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Whether `name` is a valid header-name token (not empty, `tchar`s only).
pub fn is_token(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(is_tchar)
}

/// The lowercased full header name (`mcp-param-<name>`): how headers are compared and looked
/// up, and what makes two declarations the same.
pub fn header_key(name: &str) -> String {
    format!("{}{}", HEADER_PREFIX, name).to_ascii_lowercase()
}

/// The header as a user reads it in a message: `Mcp-Param-<name>`.
pub fn display_name(name: &str) -> String {
    format!("{HEADER_PREFIX}{name}")
}

/// One [`KEYWORD`] on a property reachable from the root through `properties` alone.
#[derive(Clone, Debug, PartialEq)]
pub struct Declaration<'a> {
    /// The keyword's value as written (a valid one is a string, see [`is_token`]).
    pub value: &'a Value,
    /// Property names from the arguments object down to the value.
    pub path: Vec<String>,
    /// From the property's `type`.
    pub kind: ParamKind,
}

/// Every reachable declaration of `schema`, in document order (member names sorted).
pub fn declarations(schema: &Value) -> Vec<Declaration<'_>> {
    let mut out = Vec::new();
    collect(schema, &mut Vec::new(), &mut out);
    out
}

fn collect<'a>(schema: &'a Value, path: &mut Vec<String>, out: &mut Vec<Declaration<'a>>) {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (name, property) in properties {
        path.push(name.clone());
        if let Some(value) = property.get(KEYWORD) {
            out.push(Declaration {
                value,
                path: path.clone(),
                kind: ParamKind::of_type(property.get("type").and_then(Value::as_str)),
            });
        }
        collect(property, path, out);
        path.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_declarations_reachable_through_properties_count() {
        let schema = json!({"type":"object","properties":{
            "region":{"type":"string","x-mcp-header":"Region"},
            "nested":{"type":"object","properties":{"flag":{"type":"boolean","x-mcp-header":"Flag"}}},
            "list":{"type":"array","items":{"type":"string","x-mcp-header":"Item"}},
            "x-mcp-header":{"type":"number"},
            "data":{"default":{"x-mcp-header":"NotOne"}}
        },"anyOf":[{"properties":{"a":{"type":"string","x-mcp-header":"A"}}}]});
        let found: Vec<(String, Vec<String>, ParamKind)> = declarations(&schema)
            .into_iter()
            .map(|d| (d.value.to_string(), d.path, d.kind))
            .collect();
        assert_eq!(
            found,
            [
                (
                    "\"Flag\"".to_owned(),
                    vec!["nested".to_owned(), "flag".to_owned()],
                    ParamKind::Boolean
                ),
                (
                    "\"Region\"".to_owned(),
                    vec!["region".to_owned()],
                    ParamKind::String
                ),
            ]
        );
    }

    #[test]
    fn tokens() {
        for ok in ["Region", "x-trace_id", "A1", "!#$%&'*+-.^_`|~"] {
            assert!(is_token(ok), "{ok}");
        }
        for bad in ["", "bad name", "a:b", "a/b", "é", "a\"b", "a\tb", "(x)"] {
            assert!(!is_token(bad), "{bad}");
        }
    }

    #[test]
    fn kinds() {
        assert_eq!(ParamKind::of_type(Some("string")), ParamKind::String);
        assert_eq!(ParamKind::of_type(Some("integer")), ParamKind::Integer);
        assert_eq!(ParamKind::of_type(Some("boolean")), ParamKind::Boolean);
        for other in [Some("number"), Some("object"), Some("String"), None] {
            assert_eq!(ParamKind::of_type(other), ParamKind::Other);
        }
        assert!(ParamKind::String.is_allowed() && ParamKind::Integer.is_allowed());
        assert!(ParamKind::Boolean.is_allowed() && !ParamKind::Other.is_allowed());
    }

    #[test]
    fn header_names() {
        assert_eq!(header_key("Region"), "mcp-param-region");
        assert_eq!(header_key("region"), header_key("REGION"));
        assert_eq!(display_name("Region"), "Mcp-Param-Region");
    }
}

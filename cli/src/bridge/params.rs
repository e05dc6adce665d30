//! The `Mcp-Param-*` headers of 2026-07-28 `tools/call` requests. An HTTP client derives them
//! from the tool's `x-mcp-header` declarations; a stdio client sends none, so the bridge
//! learns the declarations from the `tools/list` answers it relays and adds the headers.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::Value;
use tutti_rules::mcp_header;

/// A declared header: its name (after `Mcp-Param-`) and the argument path of its value.
type Declared = (String, Vec<String>);

/// Tool name → every parameter header it declares.
#[derive(Default)]
pub(super) struct ParamHeaders(Mutex<HashMap<String, Vec<Declared>>>);

impl ParamHeaders {
    /// Records the declarations of every tool in `tools/list` answer lines.
    pub(super) fn learn(&self, lines: &[String]) {
        let Ok(mut known) = self.0.lock() else {
            return;
        };
        for line in lines {
            let Ok(answer) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let tools = answer.pointer("/result/tools").and_then(Value::as_array);
            for tool in tools.into_iter().flatten() {
                let (Some(name), Some(schema)) = (
                    tool.get("name").and_then(Value::as_str),
                    tool.get("inputSchema"),
                ) else {
                    continue;
                };
                let declared = mcp_header::declarations(schema)
                    .into_iter()
                    .filter_map(|d| Some((d.value.as_str()?.to_owned(), d.path)))
                    .collect();
                known.insert(name.to_owned(), declared);
            }
        }
    }

    /// The `Mcp-Param-*` headers of a `tools/call` line: (header name, value text).
    pub(super) fn for_call(&self, line: &str) -> Vec<(String, String)> {
        let Ok(message) = serde_json::from_str::<Value>(line) else {
            return Vec::new();
        };
        let params = message.get("params");
        let name = params.and_then(|p| p.get("name")).and_then(Value::as_str);
        let Some(declared) = name.and_then(|n| self.0.lock().ok()?.get(n).cloned()) else {
            return Vec::new();
        };
        let arguments = params.and_then(|p| p.get("arguments"));
        declared
            .into_iter()
            .filter_map(|(header, path)| {
                let value = path
                    .iter()
                    .try_fold(arguments?, |v, key| v.get(key))
                    .filter(|v| !v.is_null())?;
                let text = match value {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                Some((mcp_header::display_name(&header), text))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_declaration_becomes_the_calls_header() {
        let params = ParamHeaders::default();
        params.learn(&[r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"fx_p","inputSchema":{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"},"n":{"type":"integer","x-mcp-header":"N"}}}}]}}"#.to_owned()]);
        let call = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"fx_p","arguments":{"region":"eu-west","n":3}}}"#;
        let mut got = params.for_call(call);
        got.sort();
        assert_eq!(
            got,
            [
                ("Mcp-Param-N".to_owned(), "3".to_owned()),
                ("Mcp-Param-Region".to_owned(), "eu-west".to_owned())
            ]
        );
        assert!(
            params
                .for_call(r#"{"method":"tools/call","params":{"name":"other"}}"#)
                .is_empty()
        );
    }
}

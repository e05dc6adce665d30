//! The field readers of the parser: each problem is one line naming the field; text fields
//! are capped ([`limits`]).

use std::path::{Component, Path};

use serde_json::{Map, Value};

/// The most bytes a text field of a manifest may hold, set here and only here
/// (ARCHITECTURE.md lists them). Such text is shown to people (install confirmation, `status`,
/// `available`) and travels in every `available` reply, so one release cannot make those
/// unusable. The whole `connector.json` is capped too ([`crate::release::MANIFEST_MAX_BYTES`]).
pub mod limits {
    /// `name`, and a skill's `name` and `title`.
    pub const NAME: usize = 256;
    /// `version`.
    pub const VERSION: usize = 128;
    /// `description`, and a skill's `description`.
    pub const DESCRIPTION: usize = 4096;
    /// `mcp.command`, `mcp.cwd`, `mcp.url`, `cli.entrypoint`, each `skills[i]`.
    pub const PATH: usize = 4096;
    /// Each `mcp.args` item and each `mcp.env` value.
    pub const ARG: usize = 32 * 1024;
}

pub(super) struct Problems(pub(super) Vec<String>);

impl Problems {
    pub(super) fn push(&mut self, field: &str, msg: impl std::fmt::Display) {
        self.0.push(format!("connector.json: {field}: {msg}"));
    }

    /// Refuses `value` when it is longer than `max` bytes; `true` when it fits.
    pub(super) fn fits(&mut self, field: &str, value: &str, max: usize) -> bool {
        if value.len() > max {
            self.push(
                field,
                format!(
                    "is {} bytes, longer than the {max}-byte limit for this field",
                    value.len()
                ),
            );
            return false;
        }
        true
    }
}

pub(super) fn string(
    obj: &Map<String, Value>,
    field: &str,
    path: &str,
    required: bool,
    p: &mut Problems,
) -> Option<String> {
    match obj.get(field) {
        None | Some(Value::Null) => {
            if required {
                p.push(path, "is required");
            }
            None
        }
        Some(Value::String(s)) if s.trim().is_empty() && required => {
            p.push(path, "must not be empty");
            None
        }
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => {
            p.push(path, format!("must be a string, got {}", kind(other)));
            None
        }
    }
}

pub(super) fn string_list(
    obj: &Map<String, Value>,
    field: &str,
    path: &str,
    p: &mut Problems,
) -> Vec<String> {
    match obj.get(field) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .filter_map(|(i, v)| match v {
                Value::String(s) => Some(s.clone()),
                other => {
                    p.push(
                        &format!("{path}[{i}]"),
                        format!("must be a string, got {}", kind(other)),
                    );
                    None
                }
            })
            .collect(),
        Some(other) => {
            p.push(
                path,
                format!("must be an array of strings, got {}", kind(other)),
            );
            Vec::new()
        }
    }
}

pub(super) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

pub(super) fn valid_env_name(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(f) if f.is_ascii_alphabetic() || f == '_')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
}

/// A relative path that stays inside the release (no `..`, not absolute).
pub(super) fn inside_release(rel: &str) -> bool {
    let p = Path::new(rel);
    !rel.is_empty()
        && p.is_relative()
        && p.components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// The text of `<dir>/connector.json`, read without following links and at most
/// [`crate::release::MANIFEST_MAX_BYTES`]. `Err` is the one refusal line.
pub(super) fn read_manifest(dir: &Path) -> Result<String, String> {
    crate::release::read_text(
        dir,
        Path::new("connector.json"),
        crate::release::MANIFEST_MAX_BYTES,
    )
    .map_err(|e| format!("connector.json: {e}"))
}

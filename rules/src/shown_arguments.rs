//! A tool call's arguments as a person sees them before confirming the call (SPEC §12): the
//! value of every secret-looking key masked (at any depth), each value cut at
//! [`MAX_VALUE_CHARS`], hidden characters written out, at most [`MAX_ARGUMENTS`] listed. One
//! rule for every place that shows them: the agent's elicitation question, `tutti confirm
//! list` and the console.

use serde_json::{Value, json};

use crate::redact::{MASK, escape_hidden, truncate_chars};

/// Words that make an argument's key secret-looking (compared ignoring ASCII case, as parts
/// of the key): its value is masked. Whoever shows the arguments may not hold the connector's
/// secret values, so the key is what it can judge by.
const SECRET_KEY_WORDS: &[&str] = &[
    "token",
    "password",
    "passwd",
    "secret",
    "key",
    "authorization",
    "cookie",
    "credential",
];
/// Most characters of one argument's value; a longer one is cut with `…`.
pub const MAX_VALUE_CHARS: usize = 200;
/// Most arguments listed; the rest are counted.
pub const MAX_ARGUMENTS: usize = 20;

/// The arguments as shown: `(name, value)` pairs (the value as JSON text) and how many were
/// left out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShownArguments {
    pub items: Vec<(String, String)>,
    pub more: usize,
}

fn secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    SECRET_KEY_WORDS.iter().any(|w| key.contains(w))
}

/// `value` with the value of every secret-looking key (at any depth) replaced by the mask.
fn masked(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let v = if secret_key(k) {
                        json!(MASK)
                    } else {
                        masked(v)
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(masked).collect()),
        other => other.clone(),
    }
}

fn shown_value(value: &Value) -> String {
    let text = value.to_string();
    let cut = truncate_chars(&text, MAX_VALUE_CHARS);
    escape_hidden(&cut, &[]).into_owned()
}

/// The call's `arguments` as a person sees them. Arguments that are not an object are one
/// item named by an empty string.
pub fn shown_arguments(arguments: Option<&Value>) -> ShownArguments {
    let map = match arguments {
        Some(Value::Object(map)) => map,
        None | Some(Value::Null) => return ShownArguments::default(),
        Some(other) => {
            return ShownArguments {
                items: vec![(String::new(), shown_value(&masked(other)))],
                more: 0,
            };
        }
    };
    let items = map
        .iter()
        .take(MAX_ARGUMENTS)
        .map(|(key, value)| {
            let value = if secret_key(key) {
                MASK.to_owned()
            } else {
                shown_value(&masked(value))
            };
            (escape_hidden(key, &[]).into_owned(), value)
        })
        .collect();
    ShownArguments {
        items,
        more: map.len().saturating_sub(MAX_ARGUMENTS),
    }
}

impl ShownArguments {
    /// One `  name: value` line each after `Arguments:`, or `No arguments.`
    pub fn lines(&self) -> String {
        match self.items.as_slice() {
            [] => "No arguments.".into(),
            [(name, value)] if name.is_empty() => format!("Arguments: {value}"),
            items => {
                let mut out = String::from("Arguments:");
                for (name, value) in items {
                    out.push_str(&format!("\n  {name}: {value}"));
                }
                if self.more > 0 {
                    out.push_str(&format!("\n  … and {} more", self.more));
                }
                out
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_shown_masked_cut_and_escaped() {
        let long = "x".repeat(500);
        let args = json!({
            "path": "/srv/data",
            "api_token": "tok-123",
            "options": {"Password": "hunter2", "depth": 2},
            "note": long,
            "label": "a\u{202e}b",
        });
        let shown = shown_arguments(Some(&args)).lines();
        assert!(shown.starts_with("Arguments:\n"), "{shown}");
        assert!(shown.contains("\n  path: \"/srv/data\""), "{shown}");
        assert!(shown.contains("\n  api_token: ***"), "{shown}");
        assert!(
            shown.contains(r#"options: {"Password":"***","depth":2}"#),
            "{shown}"
        );
        assert!(!shown.contains("tok-123") && !shown.contains("hunter2"));
        let note = shown
            .lines()
            .find(|l| l.contains("note:"))
            .unwrap_or_default();
        assert_eq!(
            note.chars().count(),
            "  note: ".len() + MAX_VALUE_CHARS + 1,
            "{note}"
        );
        assert!(note.ends_with('…'), "{note}");
        assert!(shown.contains("label: \"a\\u{202e}b\""), "{shown}");
        assert_eq!(shown_arguments(None).lines(), "No arguments.");
        assert_eq!(shown_arguments(Some(&json!({}))).lines(), "No arguments.");
    }

    #[test]
    fn only_the_first_arguments_are_listed_and_the_rest_counted() {
        let many: serde_json::Map<String, Value> =
            (0..25).map(|i| (format!("a{i:02}"), json!(i))).collect();
        let shown = shown_arguments(Some(&Value::Object(many)));
        assert_eq!((shown.items.len(), shown.more), (MAX_ARGUMENTS, 5));
        assert!(shown.lines().ends_with("\n  … and 5 more"));
    }
}

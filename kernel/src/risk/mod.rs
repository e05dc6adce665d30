//! The risk level of an upstream tool (SPEC §12), with the reason it has it.
//!
//! What the tool's *name* says is the strongest evidence and is never lowered: an outward or
//! destructive verb in it (`delete_all`, `sendEmail`) makes the tool `high` whatever its
//! annotations claim. Annotations are an upstream's hints, not trust: `destructiveHint`
//! raises to `high`, `readOnlyHint: false` and `openWorldHint` raise `low` to `medium`, and
//! `readOnlyHint: true` lowers nothing. A description raises to `high` only when its first
//! sentence carries an outward verb (what the tool does), not when a later sentence mentions
//! one or names another tool (`similar to force_terminate`). A read-only verb in the name
//! (`list_tables`, `git_status`) with no changing verb beside it is `low`. Anything else is
//! `medium`. Only the manifest's `toolRisk` (the user's own word) sets any level, lower too.

use serde_json::Value;

/// Verbs that read: one in the name (and no verb that changes something) makes a tool `low`.
const READ_VERBS: &[&str] = &[
    "get", "gets", "list", "lists", "read", "reads", "search", "find", "finds", "describe", "show",
    "shows", "view", "fetch", "fetches", "lookup", "count", "inspect", "stat", "stats", "info",
    "diff", "status", "explain", "browse", "preview",
];

/// Verbs that change something without being outward: beside a read verb they keep `medium`
/// (`stop_search`, `get_or_create`).
const CHANGE_VERBS: &[&str] = &[
    "create", "add", "update", "set", "edit", "modify", "move", "rename", "commit", "reset",
    "checkout", "init", "insert", "append", "stop", "start", "restart", "save", "upload", "put",
    "patch", "change", "replace", "apply", "install", "enable", "disable", "cancel", "close",
    "toggle", "trigger", "lock", "unlock", "grant", "assign", "clear", "force", "give", "interact",
    "mark", "import", "sync",
];

/// The level of `upstream_name` with `definition` (its `tools/list` entry), and why.
pub fn assess(upstream_name: &str, definition: &Value) -> (Risk, String) {
    let hint = |name: &str| {
        definition
            .get("annotations")
            .and_then(|a| a.get(name))
            .and_then(Value::as_bool)
    };
    let name_words: Vec<String> = words(upstream_name).collect();
    if let Some(verb) = name_words.iter().find(|w| is_name_verb(w)) {
        return (Risk::High, format!("verb `{verb}` in the name"));
    }
    if hint("destructiveHint") == Some(true) {
        return (Risk::High, "destructiveHint".into());
    }
    let description = definition
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or("");
    if let Some(verb) = description_verb(description) {
        return (Risk::High, format!("the description says `{verb}`"));
    }
    if let Some(verb) = name_words
        .iter()
        .find(|w| CHANGE_VERBS.contains(&w.as_str()))
    {
        return (Risk::Medium, format!("changing verb `{verb}` in the name"));
    }
    let Some(read) = name_words.iter().find(|w| READ_VERBS.contains(&w.as_str())) else {
        return (Risk::Medium, "no read-only verb in the name".into());
    };
    if hint("readOnlyHint") == Some(false) {
        return (
            Risk::Medium,
            format!("`{read}` in the name, but readOnlyHint: false"),
        );
    }
    if hint("openWorldHint") == Some(true) {
        return (
            Risk::Medium,
            format!("`{read}` in the name, but openWorldHint"),
        );
    }
    (Risk::Low, format!("read-only verb `{read}` in the name"))
}

/// An outward verb as a name writes the action: the verb or its third person (`delete`,
/// `deletes`, `sendEmail`); `list_deleted_items` and `long_running_operation` only qualify
/// what they list or do.
fn is_name_verb(word: &str) -> bool {
    is_outward_verb(word) && !word.ends_with("ing") && !word.ends_with("ed")
}

/// The first outward verb of the description's first sentence, skipping identifiers
/// (`force_terminate`, `` `rm` ``): the sentence that says what the tool does. Past and
/// -ing forms count only as its first word.
fn description_verb(description: &str) -> Option<String> {
    let first = description
        .trim_start()
        .split(['\n', '.', ':', ';'])
        .next()
        .unwrap_or("");
    first
        .split_whitespace()
        .filter(|token| !token.contains(['_', '`']))
        .flat_map(words)
        .enumerate()
        // `Running a job` leads with its verb; `List all running processes` only qualifies.
        .find(|(i, w)| {
            if *i == 0 {
                is_outward_verb(w)
            } else {
                is_name_verb(w)
            }
        })
        .map(|(_, w)| w)
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

/// The words of a name or a sentence, lower-cased: split at anything not alphanumeric and
/// at camelCase humps (`deleteFile` → `delete`, `file`; `HTTPRequest` → `http`, `request`).
pub(crate) fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .flat_map(|chunk| {
            let chars: Vec<char> = chunk.chars().collect();
            let mut out = Vec::new();
            let mut start = 0;
            for i in 1..chars.len() {
                let hump = chars[i].is_ascii_uppercase()
                    && (chars[i - 1].is_ascii_lowercase()
                        || chars[i - 1].is_ascii_digit()
                        || chars.get(i + 1).is_some_and(char::is_ascii_lowercase)
                            && chars[i - 1].is_ascii_uppercase());
                if hump {
                    out.push(chars[start..i].iter().collect::<String>());
                    start = i;
                }
            }
            out.push(chars[start..].iter().collect::<String>());
            out
        })
        .filter(|w| !w.is_empty())
        .map(|w| w.to_ascii_lowercase())
}

/// A listed verb, also as written in descriptions and names: `sends`, `pushes`, `deleted`,
/// `deleting`, `running`.
pub(crate) fn is_outward_verb(word: &str) -> bool {
    OUTWARD_VERBS.iter().any(|verb| {
        let Some(rest) = word.strip_prefix(verb) else {
            // `deleting` / `deleted` drop the verb's final `e`.
            return verb.strip_suffix('e').is_some_and(|stem| {
                word.strip_prefix(stem)
                    .is_some_and(|rest| matches!(rest, "ing" | "ed"))
            });
        };
        let last = verb.chars().last().unwrap_or('e');
        match rest {
            "" | "s" | "es" | "ing" | "ed" => true,
            // `running`, `dropped`: a doubled final consonant.
            r => r.len() > 2 && r.starts_with(last) && matches!(&r[1..], "ing" | "ed"),
        }
    })
}

#[cfg(test)]
mod tests;

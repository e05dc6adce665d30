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

use crate::toolset::{Risk, is_outward_verb, words};

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

#[cfg(test)]
mod tests;

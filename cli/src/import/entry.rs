//! MCP server entries as clients write them (JSON `mcpServers` / `servers`, Codex TOML
//! `[mcp_servers.*]`), and what a connector release makes of one: the key, the launch, and
//! which env values and headers are credentials (moved into secrets, named only).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

/// How an entry's server is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Launch {
    Stdio {
        command: String,
        args: Vec<String>,
        cwd: Option<String>,
        env: BTreeMap<String, String>,
    },
    Http {
        url: String,
        headers: BTreeMap<String, String>,
    },
}

/// One server entry of one client file.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) name: String,
    pub(crate) launch: Launch,
}

/// Entries of a JSON client file: `mcpServers` (most clients), `servers` (VS Code), and
/// Claude Code's per-project `projects.*.mcpServers`. Entries that are neither stdio nor
/// http come back as problems (one line each).
pub(crate) fn from_json(doc: &Value) -> (Vec<Entry>, Vec<String>) {
    let mut maps: Vec<&Map<String, Value>> = ["mcpServers", "servers"]
        .iter()
        .filter_map(|k| doc.get(*k).and_then(Value::as_object))
        .collect();
    if let Some(projects) = doc.get("projects").and_then(Value::as_object) {
        maps.extend(
            projects
                .values()
                .filter_map(|p| p.get("mcpServers").and_then(Value::as_object)),
        );
    }
    let mut entries = Vec::new();
    let mut problems = Vec::new();
    for map in maps {
        for (name, value) in map {
            match json_launch(value) {
                Some(launch) => entries.push(Entry {
                    name: name.clone(),
                    launch,
                }),
                None => problems.push(format!("{name}: neither a command nor a url; skipped")),
            }
        }
    }
    (entries, problems)
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn string_map(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

fn json_launch(v: &Value) -> Option<Launch> {
    if let Some(command) = v.get("command").and_then(Value::as_str) {
        return Some(Launch::Stdio {
            command: command.to_owned(),
            args: strings(v.get("args")),
            cwd: v.get("cwd").and_then(Value::as_str).map(str::to_owned),
            env: string_map(v.get("env")),
        });
    }
    // `url` (most), `serverUrl` (Windsurf), `httpUrl` (Gemini CLI).
    let url = ["url", "serverUrl", "httpUrl"]
        .iter()
        .find_map(|k| v.get(*k).and_then(Value::as_str))?;
    Some(Launch::Http {
        url: url.to_owned(),
        headers: string_map(v.get("headers")),
    })
}

/// Entries of a Codex `config.toml`: `[mcp_servers.NAME]` with `command`, `args`, `cwd`,
/// `env`, or `url`, `http_headers` and `bearer_token_env_var`.
pub(crate) fn from_toml(doc: &toml_edit::DocumentMut) -> (Vec<Entry>, Vec<String>) {
    let Some(servers) = doc
        .get("mcp_servers")
        .and_then(toml_edit::Item::as_table_like)
    else {
        return (Vec::new(), Vec::new());
    };
    let mut entries = Vec::new();
    let mut problems = Vec::new();
    for (name, item) in servers.iter() {
        match toml_to_json(item).as_ref().and_then(codex_launch) {
            Some(launch) => entries.push(Entry {
                name: name.to_owned(),
                launch,
            }),
            None => problems.push(format!("{name}: neither a command nor a url; skipped")),
        }
    }
    (entries, problems)
}

fn codex_launch(v: &Value) -> Option<Launch> {
    let mut launch = json_launch(v)?;
    if let Launch::Http { headers, .. } = &mut launch {
        headers.extend(string_map(v.get("http_headers")));
        if let Some(var) = v.get("bearer_token_env_var").and_then(Value::as_str) {
            headers.insert("Authorization".into(), format!("Bearer ${{env:{var}}}"));
        }
    }
    Some(launch)
}

/// A TOML item as JSON (strings, arrays and tables are all an entry holds).
fn toml_to_json(item: &toml_edit::Item) -> Option<Value> {
    use toml_edit::Item;
    match item {
        Item::Value(v) => value_to_json(v),
        Item::Table(t) => Some(Value::Object(
            t.iter()
                .filter_map(|(k, v)| toml_to_json(v).map(|j| (k.to_owned(), j)))
                .collect(),
        )),
        _ => None,
    }
}

fn value_to_json(v: &toml_edit::Value) -> Option<Value> {
    use toml_edit::Value as T;
    Some(match v {
        T::String(s) => json!(s.value()),
        T::Integer(i) => json!(i.value()),
        T::Boolean(b) => json!(b.value()),
        T::Float(f) => json!(f.value()),
        T::Array(a) => Value::Array(a.iter().filter_map(value_to_json).collect()),
        T::InlineTable(t) => Value::Object(
            t.iter()
                .filter_map(|(k, v)| value_to_json(v).map(|j| (k.to_owned(), j)))
                .collect(),
        ),
        T::Datetime(_) => return None,
    })
}

/// Whether an env or header name looks like it carries a credential: it contains one of
/// SPEC §18's words (`*TOKEN*`, `*KEY*`, `*SECRET*`, `*PASSWORD*`, `Authorization`, …), or
/// a part of it ends in `PAT` (a personal access token; `PATH` is not one).
pub(crate) fn looks_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    let contained = [
        "TOKEN",
        "KEY",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "CREDENTIAL",
        "AUTH",
        "COOKIE",
    ];
    contained.iter().any(|word| upper.contains(word))
        || upper
            .split(|c: char| !c.is_ascii_alphanumeric())
            .any(|part| part.ends_with("PAT"))
}

/// `${input:ID}` (VS Code) or `${env:NAME}` anywhere in a value: the reference's name.
pub(crate) fn reference(value: &str) -> Option<&str> {
    let start = value.find("${")?;
    let rest = &value[start + 2..];
    let body = &rest[..rest.find('}')?];
    body.strip_prefix("input:")
        .or_else(|| body.strip_prefix("env:"))
}

/// A connector key (`^[a-z][a-z0-9-]{0,23}$`) from an entry name.
pub(crate) fn key_of(name: &str) -> String {
    let mut key = String::new();
    for c in name.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_alphanumeric() {
            key.push(c);
        } else if !key.ends_with('-') && !key.is_empty() {
            key.push('-');
        }
    }
    let mut key = key.trim_end_matches('-').to_owned();
    if !key.starts_with(|c: char| c.is_ascii_lowercase()) {
        key.insert_str(0, "mcp-");
    }
    if key == "tutti" {
        key.push_str("-server");
    }
    key.truncate(24);
    key.trim_end_matches('-').to_owned()
}

/// A secret name (an environment variable name) from a header name or an input id.
pub(crate) fn secret_name(name: &str) -> String {
    tutti_rules::secret_name::from_any(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_names_are_recognised_and_others_are_not() {
        for name in [
            "GITHUB_TOKEN",
            "API_KEY",
            "Authorization",
            "X-Api-Key",
            "DB_PASSWORD",
            "client_secret",
            "SSH_KEYS",
            "KEYFILE_CONTENTS",
            "GITHUB_PAT",
        ] {
            assert!(looks_secret(name), "{name}");
        }
        for name in ["LOG_LEVEL", "HOME", "REGION", "PATHS", "Accept"] {
            assert!(!looks_secret(name), "{name}");
        }
    }

    #[test]
    fn keys_follow_the_release_pattern() {
        assert_eq!(key_of("GitHub Server"), "github-server");
        assert_eq!(key_of("1password"), "mcp-1password");
        assert_eq!(key_of("tutti"), "tutti-server");
        assert_eq!(
            key_of("a_very_long_server_name_that_goes_on"),
            "a-very-long-server-name"
        );
        assert_eq!(reference("Bearer ${input:api-key}"), Some("api-key"));
        assert_eq!(secret_name("api-key"), "API_KEY");
    }
}

//! One binding value (`url`, `token`, `skill_roots`, `bin_dir`, `tools`) and its five renderings
//! (SPEC §6), the ACP capability gate, and the merge of the Codex table into an existing
//! `config.toml`. Pure: no I/O here.

use std::path::Path;

use serde::Serialize;
use serde_json::Value as Json;
use toml_edit::{DocumentMut, InlineTable, Item, Table, TableLike, Value};
use tutti_proto::kernel::ToolsMode;

use crate::args::Format;
use crate::error::CliError;
use crate::output::json_line;

/// The MCP server name every agent sees.
pub(crate) const SERVER_NAME: &str = "connector";

/// Everything a binding needs, from one `IssueSession` reply. Every format renders this
/// same value, so providers never disagree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Binding {
    pub(crate) url: String,
    pub(crate) token: String,
    pub(crate) skill_roots: Vec<String>,
    pub(crate) bin_dir: String,
    /// The `--tools` mode the token was issued with (SPEC §15).
    pub(crate) tools: ToolsMode,
}

impl From<tutti_proto::kernel::IssueSessionReply> for Binding {
    fn from(r: tutti_proto::kernel::IssueSessionReply) -> Self {
        Self {
            tools: r.tools(),
            url: r.url,
            token: r.token,
            skill_roots: r.skill_roots,
            bin_dir: r.bin_dir,
        }
    }
}

/// The header that tells a reader of any binding format which `--tools` mode its token
/// carries. Informational: the frontend takes the mode from the token's record, never from
/// this header. Absent for the default mode (`all`), so default bindings stay as SPEC §6 shows.
pub(crate) const TOOLS_HEADER: &str = "X-Tutti-Tools";

impl Binding {
    fn authorization(&self) -> String {
        format!("Bearer {}", self.token)
    }

    /// The value of [`TOOLS_HEADER`], `None` for the default mode.
    fn tools_header(&self) -> Option<&'static str> {
        match self.tools {
            ToolsMode::All => None,
            ToolsMode::Search => Some("search"),
            ToolsMode::Auto => Some("auto"),
        }
    }

    fn headers(&self) -> AuthorizationHeader {
        AuthorizationHeader {
            authorization: self.authorization(),
            tools: self.tools_header(),
        }
    }
}

// === JSON shapes ===

#[derive(Serialize)]
struct AuthorizationHeader {
    #[serde(rename = "Authorization")]
    authorization: String,
    #[serde(rename = "X-Tutti-Tools", skip_serializing_if = "Option::is_none")]
    tools: Option<&'static str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RuntimeBinding<'a> {
    mcp_servers: [RuntimeServer<'a>; 1],
    skill_roots: &'a [String],
    path: Vec<&'a str>,
}

#[derive(Serialize)]
struct RuntimeServer<'a> {
    name: &'static str,
    #[serde(rename = "type")]
    kind: &'static str,
    url: &'a str,
    headers: AuthorizationHeader,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct AcpBinding<'a> {
    mcp_servers: Vec<AcpServer<'a>>,
}

#[derive(Serialize)]
struct AcpServer<'a> {
    name: &'static str,
    #[serde(rename = "type")]
    kind: &'static str,
    url: &'a str,
    headers: Vec<AcpHeader>,
}

#[derive(Serialize)]
struct AcpHeader {
    name: &'static str,
    value: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ClaudeBinding<'a> {
    mcp_servers: ClaudeServers<'a>,
}

#[derive(Serialize)]
struct ClaudeServers<'a> {
    connector: ClaudeServer<'a>,
}

#[derive(Serialize)]
struct ClaudeServer<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    url: &'a str,
    headers: AuthorizationHeader,
}

// === renderers ===

/// Renders the binding in one of the five formats (text ends with a newline).
pub(crate) fn render(binding: &Binding, format: Format) -> Result<String, CliError> {
    match format {
        Format::Runtime => json_line(&RuntimeBinding {
            mcp_servers: [RuntimeServer {
                name: SERVER_NAME,
                kind: "http",
                url: &binding.url,
                headers: binding.headers(),
            }],
            skill_roots: &binding.skill_roots,
            path: if binding.bin_dir.is_empty() {
                Vec::new()
            } else {
                vec![binding.bin_dir.as_str()]
            },
        }),
        Format::Acp => json_line(&AcpBinding {
            mcp_servers: vec![AcpServer {
                name: SERVER_NAME,
                kind: "http",
                url: &binding.url,
                headers: std::iter::once(AcpHeader {
                    name: "Authorization",
                    value: binding.authorization(),
                })
                .chain(binding.tools_header().map(|mode| AcpHeader {
                    name: TOOLS_HEADER,
                    value: mode.to_owned(),
                }))
                .collect(),
            }],
        }),
        Format::Claude => json_line(&ClaudeBinding {
            mcp_servers: ClaudeServers {
                connector: ClaudeServer {
                    kind: "http",
                    url: &binding.url,
                    headers: binding.headers(),
                },
            },
        }),
        Format::Codex | Format::Tutti => {
            let mut doc = DocumentMut::new();
            // A fresh document always has room for the table.
            let _ = merge_codex(&mut doc, binding);
            Ok(doc.to_string())
        }
    }
}

/// What `--format acp` prints when the agent cannot take an HTTP MCP server.
pub(crate) fn acp_empty() -> String {
    "{\"mcpServers\":[]}\n".to_owned()
}

// === ACP gate ===

/// Whether an ACP agent may be given the HTTP MCP server.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AcpGate {
    Bind,
    /// Do not bind; the reason is for stderr.
    Refuse(String),
}

/// Judges the agent's ACP `initialize` response (the result object, or the whole JSON-RPC
/// response): bind only if `agentCapabilities.mcpCapabilities.http` is JSON `true`.
pub(crate) fn acp_gate(initialize: &Json) -> AcpGate {
    let caps = initialize
        .get("agentCapabilities")
        .or_else(|| initialize.pointer("/result/agentCapabilities"));
    let Some(caps) = caps else {
        return AcpGate::Refuse("the agent's initialize response has no agentCapabilities".into());
    };
    match caps.pointer("/mcpCapabilities/http") {
        Some(Json::Bool(true)) => AcpGate::Bind,
        Some(Json::Bool(false)) => AcpGate::Refuse(
            "the agent declares agentCapabilities.mcpCapabilities.http = false".into(),
        ),
        Some(_) => AcpGate::Refuse(
            "the agent's agentCapabilities.mcpCapabilities.http is not the JSON value true".into(),
        ),
        None => AcpGate::Refuse(
            "the agent does not declare agentCapabilities.mcpCapabilities.http".into(),
        ),
    }
}

// === Codex config merge ===

/// Parses an existing Codex `config.toml` (empty text = empty document) and checks that the
/// table can be merged into it, before any token is issued.
pub(crate) fn parse_codex_config(path: &Path, text: &str) -> Result<DocumentMut, CliError> {
    let doc: DocumentMut =
        text.parse()
            .map_err(|e: toml_edit::TomlError| CliError::CodexConfig {
                path: path.to_path_buf(),
                reason: one_line_toml_error(&e),
            })?;
    match doc.get("mcp_servers") {
        None => Ok(doc),
        Some(item) if item.is_table_like() => Ok(doc),
        Some(_) => Err(CliError::CodexMcpServers {
            path: path.to_path_buf(),
        }),
    }
}

fn one_line_toml_error(e: &toml_edit::TomlError) -> String {
    let msg = e.message().trim().replace('\n', " ");
    match e.span() {
        Some(span) => format!("{msg} at byte {}", span.start),
        None => msg,
    }
}

/// Sets `[mcp_servers.connector]` in `doc` to this binding, replacing only that table and
/// keeping every other table, key, comment and format. Err(()) if `mcp_servers` is not a
/// table (checked earlier by [`parse_codex_config`]).
pub(crate) fn merge_codex(doc: &mut DocumentMut, binding: &Binding) -> Result<(), ()> {
    let servers = doc.as_table_mut().entry("mcp_servers").or_insert_with(|| {
        let mut t = Table::new();
        t.set_implicit(true);
        Item::Table(t)
    });
    let servers = servers.as_table_like_mut().ok_or(())?;
    match servers.get_mut(SERVER_NAME) {
        // In place, so the table keeps its position, the comments above its header and the
        // user's own settings for the server (timeouts, `enabled`, tool filters, …).
        Some(Item::Table(existing)) => {
            existing.set_implicit(false);
            update_connector(existing, binding);
        }
        Some(Item::Value(Value::InlineTable(existing))) => update_connector(existing, binding),
        _ => {
            let mut t = Table::new();
            fill_connector(&mut t, binding);
            servers.insert(SERVER_NAME, Item::Table(t));
        }
    }
    Ok(())
}

/// Keys of an existing `[mcp_servers.connector]` that would contradict the binding: a stdio
/// launch (`command`, `args`) or another source of the bearer token.
const CONTRADICTING_KEYS: &[&str] = &["command", "args", "bearer_token_env_var"];

/// Sets `url` and the `Authorization` header in an existing server table; everything else
/// in it (other headers included) stays.
fn update_connector(table: &mut dyn TableLike, binding: &Binding) {
    for key in CONTRADICTING_KEYS {
        table.remove(key);
    }
    table.insert("url", toml_edit::value(binding.url.as_str()));
    match table
        .get_mut("http_headers")
        .and_then(Item::as_table_like_mut)
    {
        Some(headers) => {
            let stale: Vec<String> = headers
                .iter()
                .map(|(k, _)| k.to_owned())
                .filter(|k| {
                    k.eq_ignore_ascii_case("authorization") || k.eq_ignore_ascii_case(TOOLS_HEADER)
                })
                .collect();
            for k in stale {
                headers.remove(&k);
            }
            headers.insert("Authorization", toml_edit::value(binding.authorization()));
            if let Some(mode) = binding.tools_header() {
                headers.insert(TOOLS_HEADER, toml_edit::value(mode));
            }
            headers.fmt();
        }
        None => {
            table.insert(
                "http_headers",
                Item::Value(Value::InlineTable(codex_headers(binding))),
            );
        }
    }
}

fn fill_connector(table: &mut Table, binding: &Binding) {
    table.insert("url", toml_edit::value(binding.url.as_str()));
    table.insert(
        "http_headers",
        Item::Value(Value::InlineTable(codex_headers(binding))),
    );
}

fn codex_headers(binding: &Binding) -> InlineTable {
    let mut headers = InlineTable::new();
    headers.insert("Authorization", Value::from(binding.authorization()));
    if let Some(mode) = binding.tools_header() {
        headers.insert(TOOLS_HEADER, Value::from(mode));
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn binding() -> Binding {
        Binding {
            url: "http://127.0.0.1:43123/mcp/connector".into(),
            token: "tts_abc-DEF_123".into(),
            skill_roots: vec![
                "/s/releases/github/aa/skills/github-workflow".into(),
                "/s/releases/notes/bb/skills/notes".into(),
            ],
            bin_dir: "/s/bin".into(),
            tools: ToolsMode::All,
        }
    }

    fn json_of(format: Format) -> Json {
        let text = render(&binding(), format).unwrap_or_default();
        assert!(text.ends_with('\n'));
        serde_json::from_str(&text).unwrap_or(Json::Null)
    }

    #[test]
    fn runtime_matches_spec() {
        assert_eq!(
            json_of(Format::Runtime),
            json!({
                "mcpServers": [{
                    "name": "connector",
                    "type": "http",
                    "url": "http://127.0.0.1:43123/mcp/connector",
                    "headers": {"Authorization": "Bearer tts_abc-DEF_123"}
                }],
                "skillRoots": [
                    "/s/releases/github/aa/skills/github-workflow",
                    "/s/releases/notes/bb/skills/notes"
                ],
                "path": ["/s/bin"]
            })
        );
    }

    #[test]
    fn acp_matches_spec() {
        assert_eq!(
            json_of(Format::Acp),
            json!({
                "mcpServers": [{
                    "name": "connector",
                    "type": "http",
                    "url": "http://127.0.0.1:43123/mcp/connector",
                    "headers": [{"name": "Authorization", "value": "Bearer tts_abc-DEF_123"}]
                }]
            })
        );
        let empty: Json = serde_json::from_str(&acp_empty()).unwrap_or(Json::Null);
        assert_eq!(empty, json!({"mcpServers": []}));
    }

    #[test]
    fn claude_matches_spec() {
        assert_eq!(
            json_of(Format::Claude),
            json!({
                "mcpServers": {
                    "connector": {
                        "type": "http",
                        "url": "http://127.0.0.1:43123/mcp/connector",
                        "headers": {"Authorization": "Bearer tts_abc-DEF_123"}
                    }
                }
            })
        );
    }

    fn check_codex_table(doc: &DocumentMut) {
        let conn = &doc["mcp_servers"]["connector"];
        assert_eq!(
            conn["url"].as_str(),
            Some("http://127.0.0.1:43123/mcp/connector")
        );
        assert_eq!(
            conn["http_headers"]["Authorization"].as_str(),
            Some("Bearer tts_abc-DEF_123")
        );
        assert!(conn["http_headers"].is_inline_table());
        let keys: Vec<&str> = conn
            .as_table_like()
            .map(|t| t.iter().map(|(k, _)| k).collect())
            .unwrap_or_default();
        assert!(
            keys.contains(&"url") && keys.contains(&"http_headers"),
            "{keys:?}"
        );
        for key in CONTRADICTING_KEYS {
            assert!(!keys.contains(key), "{keys:?}");
        }
    }

    #[test]
    fn codex_and_tutti_are_the_same_toml_table() {
        let codex = render(&binding(), Format::Codex).unwrap_or_default();
        let tutti = render(&binding(), Format::Tutti).unwrap_or_default();
        assert_eq!(codex, tutti);
        assert_eq!(
            codex,
            "[mcp_servers.connector]\nurl = \"http://127.0.0.1:43123/mcp/connector\"\n\
             http_headers = { Authorization = \"Bearer tts_abc-DEF_123\" }\n"
        );
        let doc: DocumentMut = codex.parse().unwrap_or_default();
        check_codex_table(&doc);
    }

    #[test]
    fn acp_gate_binds_only_on_json_true() {
        let ok = json!({"protocolVersion": 1, "agentCapabilities": {"mcpCapabilities": {"http": true, "sse": false}}});
        assert_eq!(acp_gate(&ok), AcpGate::Bind);
        let wrapped = json!({"jsonrpc": "2.0", "id": 0, "result": ok});
        assert_eq!(acp_gate(&wrapped), AcpGate::Bind);
        for refused in [
            json!({"agentCapabilities": {"mcpCapabilities": {"http": false}}}),
            json!({"agentCapabilities": {"mcpCapabilities": {"http": "true"}}}),
            json!({"agentCapabilities": {"mcpCapabilities": {"http": 1}}}),
            json!({"agentCapabilities": {"mcpCapabilities": {}}}),
            json!({"agentCapabilities": {}}),
            json!({"protocolVersion": 1}),
            json!({"jsonrpc": "2.0", "id": 0, "error": {"code": -1, "message": "x"}}),
        ] {
            assert!(
                matches!(acp_gate(&refused), AcpGate::Refuse(ref r) if !r.is_empty()),
                "{refused}"
            );
        }
    }

    const EXISTING: &str = r#"# my codex config
model = "o3"  # keep me

[model_providers.local]
name = "Local"   # provider comment
base_url = "http://localhost:11434/v1"

# other server
[mcp_servers.x]
command = "npx"
args = ["-y", "x-server"]

# connector goes here
[mcp_servers.connector]
url = "http://old"
command = "npx"
tool_timeout_sec = 120
http_headers = { authorization = "Bearer old", X-Team = "a" }

[mcp_servers.connector.env]
OLD = "1"

[profiles.fast]
model = "o4-mini"
"#;

    #[test]
    fn codex_merge_updates_the_connector_table_and_keeps_the_rest() {
        let path = Path::new("/c/config.toml");
        let mut doc = parse_codex_config(path, EXISTING).unwrap_or_default();
        assert_eq!(merge_codex(&mut doc, &binding()), Ok(()));
        let out = doc.to_string();
        let expected = r#"# my codex config
model = "o3"  # keep me

[model_providers.local]
name = "Local"   # provider comment
base_url = "http://localhost:11434/v1"

# other server
[mcp_servers.x]
command = "npx"
args = ["-y", "x-server"]

# connector goes here
[mcp_servers.connector]
url = "http://127.0.0.1:43123/mcp/connector"
tool_timeout_sec = 120
http_headers = { X-Team = "a", Authorization = "Bearer tts_abc-DEF_123" }

[mcp_servers.connector.env]
OLD = "1"

[profiles.fast]
model = "o4-mini"
"#;
        assert_eq!(out, expected);
        let reparsed: DocumentMut = out.parse().unwrap_or_default();
        check_codex_table(&reparsed);
        assert_eq!(reparsed["model"].as_str(), Some("o3"));
        assert_eq!(
            reparsed["mcp_servers"]["x"]["command"].as_str(),
            Some("npx")
        );
    }

    #[test]
    fn codex_merge_keeps_a_model_table_and_other_servers() {
        let text = "[model]\nname = \"gpt-5\"\n\n[mcp_servers.x]\nurl = \"http://x\"\n";
        let path = Path::new("/c/config.toml");
        let mut doc = parse_codex_config(path, text).unwrap_or_default();
        assert_eq!(merge_codex(&mut doc, &binding()), Ok(()));
        let out = doc.to_string();
        assert!(out.starts_with(text), "{out}");
        let reparsed: DocumentMut = out.parse().unwrap_or_default();
        check_codex_table(&reparsed);
        assert_eq!(reparsed["model"]["name"].as_str(), Some("gpt-5"));
        assert_eq!(
            reparsed["mcp_servers"]["x"]["url"].as_str(),
            Some("http://x")
        );
        // Merging again changes nothing.
        let mut again = parse_codex_config(path, &out).unwrap_or_default();
        assert_eq!(merge_codex(&mut again, &binding()), Ok(()));
        assert_eq!(again.to_string(), out);
    }

    #[test]
    fn codex_merge_into_an_empty_file_is_the_plain_table() {
        let path = Path::new("/c/config.toml");
        let mut doc = parse_codex_config(path, "").unwrap_or_default();
        assert_eq!(merge_codex(&mut doc, &binding()), Ok(()));
        assert_eq!(
            doc.to_string(),
            render(&binding(), Format::Codex).unwrap_or_default()
        );
    }

    #[test]
    fn codex_merge_handles_inline_servers() {
        let text = "mcp_servers = { x = { url = \"http://x\" }, connector = { url = \"old\" } }\n";
        let path = Path::new("/c/config.toml");
        let mut doc = parse_codex_config(path, text).unwrap_or_default();
        assert_eq!(merge_codex(&mut doc, &binding()), Ok(()));
        let reparsed: DocumentMut = doc.to_string().parse().unwrap_or_default();
        check_codex_table(&reparsed);
        assert_eq!(
            reparsed["mcp_servers"]["x"]["url"].as_str(),
            Some("http://x")
        );
    }

    #[test]
    fn codex_config_errors_name_the_file() {
        let path = Path::new("/c/config.toml");
        let err = parse_codex_config(path, "[broken\n").err();
        assert!(matches!(err, Some(CliError::CodexConfig { .. })), "{err:?}");
        let msg = err.map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.starts_with("/c/config.toml is not valid TOML"), "{msg}");
        assert!(!msg.contains('\n'), "{msg}");
        let err = parse_codex_config(path, "mcp_servers = 3\n").err();
        assert!(
            matches!(err, Some(CliError::CodexMcpServers { .. })),
            "{err:?}"
        );
    }

    #[test]
    fn a_search_mode_is_carried_in_every_format_and_the_default_adds_nothing() {
        let search = Binding {
            tools: ToolsMode::Search,
            ..binding()
        };
        let json = |b: &Binding, f| -> Json {
            serde_json::from_str(&render(b, f).unwrap_or_default()).unwrap_or(Json::Null)
        };
        let runtime = json(&search, Format::Runtime);
        assert_eq!(
            runtime["mcpServers"][0]["headers"]["X-Tutti-Tools"],
            "search"
        );
        let claude = json(&search, Format::Claude);
        assert_eq!(
            claude["mcpServers"]["connector"]["headers"]["X-Tutti-Tools"],
            "search"
        );
        let acp = json(&search, Format::Acp);
        assert_eq!(
            acp["mcpServers"][0]["headers"][1],
            json!({"name": "X-Tutti-Tools", "value": "search"})
        );
        for f in [Format::Codex, Format::Tutti] {
            let text = render(&search, f).unwrap_or_default();
            assert!(text.contains("X-Tutti-Tools = \"search\""), "{text}");
        }
        for f in [Format::Runtime, Format::Acp, Format::Claude, Format::Codex] {
            let text = render(&binding(), f).unwrap_or_default();
            assert!(!text.contains("X-Tutti-Tools"), "{text}");
        }
        // Merging an `all` binding over a `search` one drops the stale mode header.
        let mut doc = DocumentMut::new();
        let _ = merge_codex(&mut doc, &search);
        let _ = merge_codex(&mut doc, &binding());
        assert!(!doc.to_string().contains("X-Tutti-Tools"), "{doc}");
    }
}

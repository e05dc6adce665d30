//! `tutti session issue --via stdio` (SPEC §6, §18): bindings that launch the stdio bridge
//! (`tutti mcp-stdio`) instead of naming a URL and a token. No token is issued here: the
//! bridge asks for its own each time it starts, so the entry keeps working across restarts.

use std::path::Path;

use serde_json::json;
use toml_edit::{Array, DocumentMut, Item, Table, Value};

use crate::args::{ConfirmArgs, Format, ToolsArg};
use crate::binding::SERVER_NAME;
use crate::error::CliError;
use crate::output::json_line;

/// The bridge's launch: the absolute path of this `tutti` and its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Launch {
    pub(crate) command: String,
    pub(crate) args: Vec<String>,
}

impl Launch {
    /// `tutti mcp-stdio --workspace W --session S [--tools T] [--confirm high [--confirm-via C]] --state-dir D`.
    pub(crate) fn new(
        state_dir: &Path,
        workspace: &str,
        session: &str,
        tools: ToolsArg,
        confirm: &ConfirmArgs,
    ) -> Result<Launch, CliError> {
        let exe = std::env::current_exe()
            .and_then(std::fs::canonicalize)
            .map_err(|e| CliError::Bridge {
                reason: format!("cannot find the path of this tutti ({e})"),
            })?;
        let mut args: Vec<String> = ["mcp-stdio", "--workspace", workspace, "--session", session]
            .map(str::to_owned)
            .to_vec();
        let tools = match tools {
            ToolsArg::All => None,
            ToolsArg::Search => Some("search"),
            ToolsArg::Auto => Some("auto"),
        };
        if let Some(mode) = tools {
            args.extend(["--tools".to_owned(), mode.to_owned()]);
        }
        args.extend(confirm.argv());
        args.extend(["--state-dir".to_owned(), state_dir.display().to_string()]);
        Ok(Launch {
            command: exe.display().to_string(),
            args,
        })
    }
}

/// Renders the stdio binding in `format` (text ends with a newline).
pub(crate) fn render(
    launch: &Launch,
    format: Format,
    state_dir: &Path,
) -> Result<String, CliError> {
    let (command, args) = (&launch.command, &launch.args);
    match format {
        Format::Runtime => json_line(&json!({
            "mcpServers": [{"name": SERVER_NAME, "type": "stdio", "command": command, "args": args}],
            "skillRoots": [tutti_rules::state_dir::layout::skills(state_dir).display().to_string()],
            "path": [tutti_rules::state_dir::layout::bin(state_dir).display().to_string()],
        })),
        Format::Acp => json_line(&json!({
            "mcpServers": [{"name": SERVER_NAME, "command": command, "args": args, "env": []}],
        })),
        Format::Claude => json_line(&json!({
            "mcpServers": {SERVER_NAME: {"type": "stdio", "command": command, "args": args}},
        })),
        Format::Codex | Format::Tutti => {
            let mut doc = DocumentMut::new();
            // A fresh document always has room for the table.
            let _ = merge_codex(&mut doc, launch);
            Ok(doc.to_string())
        }
    }
}

/// Keys of an existing `[mcp_servers.connector]` that belong to an HTTP binding.
const HTTP_KEYS: &[&str] = &["url", "http_headers", "bearer_token_env_var"];

/// Puts the bridge's launch into `[mcp_servers.connector]` of a Codex `config.toml`; the
/// rest of the file (and the table's other settings) stays. `Err` when `mcp_servers` is not
/// a table.
pub(crate) fn merge_codex(doc: &mut DocumentMut, launch: &Launch) -> Result<(), ()> {
    let servers = doc.as_table_mut().entry("mcp_servers").or_insert_with(|| {
        let mut t = Table::new();
        t.set_implicit(true);
        Item::Table(t)
    });
    let servers = servers.as_table_like_mut().ok_or(())?;
    if !servers.contains_key(SERVER_NAME) {
        servers.insert(SERVER_NAME, Item::Table(Table::new()));
    }
    let table = servers
        .get_mut(SERVER_NAME)
        .and_then(Item::as_table_like_mut)
        .ok_or(())?;
    for key in HTTP_KEYS {
        table.remove(key);
    }
    table.insert("command", toml_edit::value(launch.command.as_str()));
    let args: Array = launch.args.iter().map(String::as_str).collect();
    table.insert("args", Item::Value(Value::Array(args)));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch() -> Launch {
        Launch {
            command: "/opt/tutti/bin/tutti".into(),
            args: [
                "mcp-stdio",
                "--workspace",
                "w",
                "--session",
                "s",
                "--state-dir",
                "/s",
            ]
            .map(str::to_owned)
            .to_vec(),
        }
    }

    #[test]
    fn every_format_names_the_bridge_and_no_token() {
        for format in [Format::Runtime, Format::Acp, Format::Claude, Format::Codex] {
            let text = render(&launch(), format, Path::new("/s")).unwrap_or_default();
            assert!(text.contains("/opt/tutti/bin/tutti"), "{format:?}: {text}");
            assert!(text.contains("mcp-stdio"), "{format:?}: {text}");
            assert!(
                !text.contains("Bearer") && !text.contains("url"),
                "{format:?}: {text}"
            );
        }
    }

    #[test]
    fn codex_merge_replaces_an_http_binding_and_keeps_the_rest() {
        let before = "# mine\nmodel = \"o3\"\n\n[mcp_servers.connector]\nurl = \"http://127.0.0.1:1/mcp/connector\"\nhttp_headers = { Authorization = \"Bearer tts_x\" }\nstartup_timeout_sec = 20\n";
        let mut doc: DocumentMut = before.parse().unwrap_or_default();
        assert_eq!(merge_codex(&mut doc, &launch()), Ok(()));
        let after = doc.to_string();
        assert!(after.starts_with("# mine\nmodel = \"o3\"\n"), "{after}");
        assert!(after.contains("startup_timeout_sec = 20"), "{after}");
        assert!(
            after.contains("command = \"/opt/tutti/bin/tutti\""),
            "{after}"
        );
        assert!(
            !after.contains("Bearer") && !after.contains("url ="),
            "{after}"
        );
    }
}

//! `import --rewrite`: the imported entries of a client file are replaced by one entry named
//! `connector` that runs the stdio bridge, after the original bytes are saved next to the
//! file; `import --undo CLIENT` puts them back. Everything else in the file stays: key order,
//! other keys, and (TOML) comments.

use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use serde_json::value::RawValue;

use super::sources::{self, Source};
use crate::binding::SERVER_NAME;
use crate::binding_stdio::{self, Launch};
use crate::error::CliError;
use crate::fsutil;

/// The backup of `path`: `<file>.tutti-backup` beside it.
pub(crate) fn backup_of(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tutti-backup");
    path.with_file_name(name)
}

/// Rewrites `source`'s file: `names` removed, the bridge's entry added. The first backup
/// is kept (a second rewrite must not replace the original bytes with rewritten ones).
pub(crate) fn apply(source: &Source, names: &[String], launch: &Launch) -> Result<(), CliError> {
    let path = &source.path;
    let backup = backup_of(path);
    if !backup.exists() {
        fsutil::write_atomic(&backup, &source.bytes, 0o600)
            .map_err(|e| CliError::io("write", &backup, e))?;
    }
    let text = String::from_utf8_lossy(&source.bytes);
    let rewritten = if source.is_toml() {
        rewrite_toml(&text, names, launch)
    } else {
        rewrite_json(&text, names, launch)
    }
    .map_err(|reason| CliError::ImportFile {
        path: path.clone(),
        reason,
    })?;
    fsutil::write_atomic(path, rewritten.as_bytes(), 0o600)
        .map_err(|e| CliError::io("write", path, e))
}

fn rewrite_toml(text: &str, names: &[String], launch: &Launch) -> Result<String, String> {
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .map_err(|e: toml_edit::TomlError| e.to_string())?;
    if let Some(servers) = doc
        .get_mut("mcp_servers")
        .and_then(toml_edit::Item::as_table_like_mut)
    {
        for name in names {
            servers.remove(name);
        }
    }
    binding_stdio::merge_codex(&mut doc, launch)
        .map_err(|()| "mcp_servers is not a table".to_owned())?;
    Ok(doc.to_string())
}

type Object = IndexMap<String, Box<RawValue>>;

fn rewrite_json(text: &str, names: &[String], launch: &Launch) -> Result<String, String> {
    // Comments of a JSONC file do not survive (the backup keeps them).
    let text = sources::plain_json(text);
    let mut top: Object = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    let field = if top.contains_key("servers") && !top.contains_key("mcpServers") {
        "servers"
    } else {
        "mcpServers"
    };
    let mut servers: Object = match top.get(field) {
        Some(raw) => serde_json::from_str(raw.get()).map_err(|e| e.to_string())?,
        None => Object::new(),
    };
    for name in names {
        servers.shift_remove(name);
    }
    let mut entry = serde_json::json!({"command": launch.command, "args": launch.args});
    if field == "servers" {
        entry["type"] = "stdio".into();
    }
    servers.insert(SERVER_NAME.to_owned(), raw(&entry)?);
    top.insert(field.to_owned(), raw(&servers)?);
    if let Some(projects) = top.get("projects") {
        let projects = without_project_entries(projects, names)?;
        top.insert("projects".to_owned(), projects);
    }
    let mut out = serde_json::to_string_pretty(&top).map_err(|e| e.to_string())?;
    out.push('\n');
    Ok(out)
}

/// Claude Code's `projects.*.mcpServers` without the imported `names` (the user-scope
/// `connector` entry serves every project); a project with none of them stays as it was.
fn without_project_entries(projects: &RawValue, names: &[String]) -> Result<Box<RawValue>, String> {
    let Ok(mut parsed) = serde_json::from_str::<Object>(projects.get()) else {
        return Ok(projects.to_owned());
    };
    for project in parsed.values_mut() {
        let Ok(mut fields) = serde_json::from_str::<Object>(project.get()) else {
            continue;
        };
        let Some(Ok(mut servers)) = fields
            .get("mcpServers")
            .map(|s| serde_json::from_str::<Object>(s.get()))
        else {
            continue;
        };
        let before = servers.len();
        servers.retain(|name, _| !names.contains(name));
        if servers.len() != before {
            fields.insert("mcpServers".to_owned(), raw(&servers)?);
            *project = raw(&fields)?;
        }
    }
    raw(&parsed)
}

fn raw(value: &impl serde::Serialize) -> Result<Box<RawValue>, String> {
    serde_json::value::to_raw_value(value).map_err(|e| e.to_string())
}

/// `--undo CLIENT|FILE`: restores every backed-up file of the client; the paths restored.
pub(crate) fn undo(what: &str, cwd: &Path) -> Result<Vec<PathBuf>, CliError> {
    let paths = if sources::CLIENTS.contains(&what) {
        sources::paths_of(what, cwd)
    } else {
        vec![std::path::absolute(what).unwrap_or_else(|_| PathBuf::from(what))]
    };
    let mut restored = Vec::new();
    for path in paths {
        let backup = backup_of(&path);
        if backup.is_file() {
            std::fs::rename(&backup, &path).map_err(|e| CliError::io("restore", &path, e))?;
            restored.push(path);
        }
    }
    if restored.is_empty() {
        return Err(CliError::NothingToUndo {
            what: what.to_owned(),
        });
    }
    Ok(restored)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_code_project_entries_that_were_imported_leave_the_file_too() {
        let text = r#"{"numStartups": 3,
  "mcpServers": {"code-add": {"command": "/x", "args": []}},
  "projects": {
    "/p": {"allowedTools": [], "mcpServers": {"project-echo": {"command": "/y"}, "kept": {"command": "/z"}}},
    "/q": {"history": [1, 2]}
  }}"#;
        let launch = Launch {
            command: "/bin/tutti".into(),
            args: vec!["mcp-stdio".into()],
        };
        let names = ["code-add".to_owned(), "project-echo".to_owned()];
        let out = rewrite_json(text, &names, &launch).unwrap_or_else(|e| panic!("{e}"));
        let doc: serde_json::Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        let servers = &doc["mcpServers"];
        assert!(servers.get("code-add").is_none(), "{out}");
        assert_eq!(servers["connector"]["command"], "/bin/tutti", "{out}");
        let project = &doc["projects"]["/p"];
        assert!(project["mcpServers"].get("project-echo").is_none(), "{out}");
        assert_eq!(project["mcpServers"]["kept"]["command"], "/z", "{out}");
        assert_eq!(project["allowedTools"], serde_json::json!([]), "{out}");
        assert_eq!(doc["projects"]["/q"]["history"], serde_json::json!([1, 2]));
        assert_eq!(doc["numStartups"], 3);
    }
}

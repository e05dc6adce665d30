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
    let mut out = serde_json::to_string_pretty(&top).map_err(|e| e.to_string())?;
    out.push('\n');
    Ok(out)
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

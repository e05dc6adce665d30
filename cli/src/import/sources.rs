//! Where each client keeps its MCP server entries, per OS (SPEC §18), and reading them.
//! Paths follow each client's documentation; the fixture files under
//! `tests/fixtures/import/` cite the page for each shape.

use std::path::{Path, PathBuf};

use super::entry::{self, Entry};
use crate::error::CliError;

/// The clients `--from` names.
pub(crate) const CLIENTS: &[&str] = &[
    "claude-desktop",
    "claude-code",
    "cursor",
    "vscode",
    "codex",
    "windsurf",
    "gemini",
];

/// One client file that exists, and what it holds.
#[derive(Debug)]
pub(crate) struct Source {
    /// The client's name, or `file` for a `--from FILE`.
    pub(crate) client: String,
    pub(crate) path: PathBuf,
    pub(crate) bytes: Vec<u8>,
    pub(crate) entries: Vec<Entry>,
    pub(crate) problems: Vec<String>,
}

impl Source {
    pub(crate) fn is_toml(&self) -> bool {
        self.path.extension().is_some_and(|e| e == "toml")
    }
}

fn home() -> Option<PathBuf> {
    let var = if cfg!(windows) { "USERPROFILE" } else { "HOME" };
    std::env::var_os(var).map(PathBuf::from)
}

/// The per-user application config dir: `%APPDATA%`, `~/Library/Application Support`, or
/// `$XDG_CONFIG_HOME` (`~/.config`).
fn app_config() -> Option<PathBuf> {
    if cfg!(windows) {
        return std::env::var_os("APPDATA").map(PathBuf::from);
    }
    if cfg!(target_os = "macos") {
        return home().map(|h| h.join("Library").join("Application Support"));
    }
    std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| home().map(|h| h.join(".config")))
}

/// Every file `client` may keep servers in (user files first, then the project's in `cwd`).
pub(crate) fn paths_of(client: &str, cwd: &Path) -> Vec<PathBuf> {
    let home = home().unwrap_or_default();
    let config = app_config().unwrap_or_default();
    match client {
        "claude-desktop" => vec![config.join("Claude").join("claude_desktop_config.json")],
        "claude-code" => vec![home.join(".claude.json"), cwd.join(".mcp.json")],
        "cursor" => vec![
            home.join(".cursor").join("mcp.json"),
            cwd.join(".cursor").join("mcp.json"),
        ],
        "vscode" => vec![
            config.join("Code").join("User").join("mcp.json"),
            cwd.join(".vscode").join("mcp.json"),
        ],
        "codex" => {
            let codex_home = std::env::var_os("CODEX_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| home.join(".codex"));
            vec![codex_home.join("config.toml")]
        }
        "windsurf" => vec![
            home.join(".codeium")
                .join("windsurf")
                .join("mcp_config.json"),
        ],
        "gemini" => vec![
            home.join(".gemini").join("settings.json"),
            cwd.join(".gemini").join("settings.json"),
        ],
        _ => Vec::new(),
    }
}

/// The sources `--from` names (clients or files); without `--from`, every client found.
pub(crate) fn gather(from: &[String], cwd: &Path) -> Result<Vec<Source>, CliError> {
    let wanted: Vec<String> = if from.is_empty() {
        CLIENTS.iter().map(|c| (*c).to_owned()).collect()
    } else {
        from.to_vec()
    };
    let mut sources = Vec::new();
    for item in &wanted {
        if CLIENTS.contains(&item.as_str()) {
            for path in paths_of(item, cwd) {
                if path.is_file() && !sources.iter().any(|s: &Source| s.path == path) {
                    sources.push(read(item, &path)?);
                }
            }
        } else {
            let path = PathBuf::from(item);
            if !path.is_file() {
                return Err(CliError::ImportSource {
                    what: item.clone(),
                    known: CLIENTS.join(", "),
                });
            }
            sources.push(read("file", &std::path::absolute(&path).unwrap_or(path))?);
        }
    }
    Ok(sources)
}

fn read(client: &str, path: &Path) -> Result<Source, CliError> {
    let bytes = std::fs::read(path).map_err(|e| CliError::io("read", path, e))?;
    let text = String::from_utf8_lossy(&bytes);
    let bad = |reason: String| CliError::ImportFile {
        path: path.to_path_buf(),
        reason,
    };
    let (entries, problems) = if path.extension().is_some_and(|e| e == "toml") {
        let doc: toml_edit::DocumentMut = text
            .parse()
            .map_err(|e: toml_edit::TomlError| bad(e.message().to_owned()))?;
        entry::from_toml(&doc)
    } else {
        let doc: serde_json::Value =
            serde_json::from_str(&plain_json(&text)).map_err(|e| bad(e.to_string()))?;
        entry::from_json(&doc)
    };
    Ok(Source {
        client: client.to_owned(),
        path: path.to_path_buf(),
        bytes,
        entries,
        problems,
    })
}

/// JSON as VS Code and other editors write it (JSONC): a BOM, `//` and `/* */` comments and
/// trailing commas removed, strings untouched.
pub(crate) fn plain_json(text: &str) -> String {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match c {
                '\\' => out.extend(chars.next()),
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match (c, chars.peek()) {
            ('"', _) => {
                in_string = true;
                out.push(c);
            }
            ('/', Some('/')) => while chars.next_if(|n| *n != '\n').is_some() {},
            ('/', Some('*')) => {
                chars.next();
                let mut last = ' ';
                for n in chars.by_ref() {
                    if last == '*' && n == '/' {
                        break;
                    }
                    last = n;
                }
            }
            (']' | '}', _) => {
                let kept = out.trim_end().len();
                if out[..kept].ends_with(',') {
                    out.truncate(kept - 1);
                }
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_and_trailing_commas_go_and_strings_stay() {
        let text = "\u{feff}{\n  // a comment\n  \"a\": \"x // not a comment\", /* b */\n  \"c\": [1, 2,],\n}";
        let plain = plain_json(text);
        let v: serde_json::Value =
            serde_json::from_str(&plain).unwrap_or_else(|e| panic!("{e}: {plain}"));
        assert_eq!(
            v,
            serde_json::json!({"a": "x // not a comment", "c": [1, 2]})
        );
    }
}

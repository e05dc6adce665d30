//! One imported entry as a connector release: `connector.json` (credentials named, never
//! held), the secret values to store after the install, and `tutti-import.json` (where it
//! came from, whether it is pinned).

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Value, json};

use super::entry::{self, Entry, Launch};
use crate::error::CliError;

/// The file in an imported release that records its origin.
pub(crate) const IMPORT_RECORD: &str = "tutti-import.json";

/// Launchers that fetch a package at start; pinning them is the market's (SPEC §17).
const PACKAGE_RUNNERS: &[&str] = &["npx", "bunx", "pnpm", "uvx", "pipx", "docker", "podman"];

/// A release built from an entry.
pub(crate) struct Built {
    pub(crate) manifest: Value,
    /// Secret name → value, stored with `connect` after the install.
    pub(crate) secrets: BTreeMap<String, String>,
    /// Secret names whose values are not known here (`${input:…}`, `${env:…}`).
    pub(crate) pending: Vec<String>,
    /// The bare program name a stdio entry runs: the launch allowlist decides whether it may
    /// (as for any release; `import --allow-command NAME` adds it).
    pub(crate) allow: Option<String>,
}

/// Whether the entry runs a package launcher (`npx`, `uvx`, `docker run`, …).
pub(crate) fn runs_a_package(e: &Entry) -> bool {
    let Launch::Stdio { command, .. } = &e.launch else {
        return false;
    };
    let program = Path::new(command)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    PACKAGE_RUNNERS.contains(&program)
}

/// What identifies "the same launch" among installed connectors.
pub(crate) fn fingerprint_of(launch: &Launch) -> Value {
    match launch {
        Launch::Stdio { command, args, .. } => json!([command, args]),
        Launch::Http { url, .. } => json!(url),
    }
}

/// The same fingerprint from an installed `connector.json`.
pub(crate) fn fingerprint_of_manifest(manifest: &Value) -> Option<Value> {
    let mcp = manifest.get("mcp")?;
    match mcp.get("command") {
        Some(command) => Some(json!([
            command,
            mcp.get("args").cloned().unwrap_or(json!([]))
        ])),
        None => mcp.get("url").cloned(),
    }
}

/// A secret's value: a `${input:…}`/`${env:…}` reference is read from the caller's
/// environment when `--from-env` names it (or the variable), else left to `connect`.
fn secret_value(var: &str, value: &str, from_env: &[String]) -> Option<String> {
    match entry::reference(value) {
        Some(reference) => from_env
            .iter()
            .find(|n| n.as_str() == reference || n.as_str() == var)
            .and_then(|n| std::env::var(n).ok()),
        None => Some(value.to_owned()),
    }
}

pub(crate) fn build(
    e: &Entry,
    key: &str,
    origin: &str,
    from_env: &[String],
) -> Result<Built, String> {
    let mut built = Built {
        manifest: Value::Null,
        secrets: BTreeMap::new(),
        pending: Vec::new(),
        allow: None,
    };
    let mut keep = |name: String, value: Option<String>, built: &mut Built| match value {
        Some(v) => {
            built.secrets.insert(name, v);
        }
        None => built.pending.push(name),
    };
    let mcp = match &e.launch {
        Launch::Stdio {
            command,
            args,
            cwd,
            env,
        } => {
            let mut plain = BTreeMap::new();
            for (name, value) in env {
                if entry::looks_secret(name) || entry::reference(value).is_some() {
                    keep(
                        name.clone(),
                        secret_value(name, value, from_env),
                        &mut built,
                    );
                } else {
                    plain.insert(name.clone(), value.clone());
                }
            }
            if !command.contains(['/', '\\']) {
                built.allow = Some(command.clone());
            }
            let mut mcp = json!({"transport": "stdio", "command": command, "args": args,
                "env": plain, "secrets": secret_names(&built)});
            if let Some(cwd) = cwd {
                mcp["cwd"] = json!(cwd);
            }
            mcp
        }
        Launch::Http { url, headers } => {
            let auth = http_auth(headers, from_env, &mut built, &mut keep)?;
            json!({"transport": "http", "url": url, "auth": auth})
        }
    };
    built.manifest = json!({
        "key": key,
        "name": e.name,
        "description": format!("{} (imported from {origin})", e.name),
        "version": "0.0.0",
        "mcp": mcp,
    });
    Ok(built)
}

fn secret_names(built: &Built) -> Vec<String> {
    let mut names: Vec<String> = built.secrets.keys().cloned().collect();
    names.extend(built.pending.iter().cloned());
    names.sort();
    names
}

type Keep<'a> = dyn FnMut(String, Option<String>, &mut Built) + 'a;

/// The one credential header an HTTP connector sends (`bearer` or `header` auth).
fn http_auth(
    headers: &BTreeMap<String, String>,
    from_env: &[String],
    built: &mut Built,
    keep: &mut Keep<'_>,
) -> Result<Value, String> {
    let mut auth = json!({"kind": "none"});
    for (name, value) in headers {
        if !entry::looks_secret(name) && entry::reference(value).is_none() {
            return Err(format!(
                "header {name} is not a credential and imported HTTP connectors send only one \
                 credential header; add it by hand"
            ));
        }
        if auth["kind"] != "none" {
            return Err("more than one credential header; add it by hand".to_owned());
        }
        let secret = entry::secret_name(name);
        let bearer = name.eq_ignore_ascii_case("authorization")
            && value
                .get(..7)
                .is_some_and(|p| p.eq_ignore_ascii_case("bearer "));
        let value = if bearer { &value[7..] } else { value.as_str() };
        keep(
            secret.clone(),
            secret_value(&secret, value, from_env),
            built,
        );
        auth = if bearer {
            json!({"kind": "bearer", "secret": secret})
        } else {
            json!({"kind": "header", "header": name, "secret": secret})
        };
    }
    Ok(auth)
}

/// Writes the release folder `dir` (`connector.json` and the import record).
pub(crate) fn write(dir: &Path, built: &Built, record: &Value) -> Result<(), CliError> {
    std::fs::create_dir_all(dir).map_err(|e| CliError::io("create", dir, e))?;
    write_json(&dir.join("connector.json"), &built.manifest)?;
    write_record(dir, record)
}

/// Writes the import record into the release folder `dir` (built here or staged pinned).
pub(crate) fn write_record(dir: &Path, record: &Value) -> Result<(), CliError> {
    write_json(&dir.join(IMPORT_RECORD), record)
}

fn write_json(path: &Path, value: &Value) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(value).unwrap_or_default();
    std::fs::write(path, text).map_err(|e| CliError::io("write", path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(headers: &[(&str, &str)]) -> Entry {
        Entry {
            name: "remote".into(),
            launch: Launch::Http {
                url: "https://mcp.example.com/mcp".into(),
                headers: headers
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            },
        }
    }

    #[test]
    fn a_bearer_header_becomes_bearer_auth_with_its_value_in_secrets_only() {
        let built = build(
            &http(&[("Authorization", "Bearer s3cr3t")]),
            "remote",
            "cursor",
            &[],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let manifest = built.manifest.to_string();
        assert!(!manifest.contains("s3cr3t"), "{manifest}");
        assert_eq!(
            built.manifest["mcp"]["auth"],
            json!({"kind": "bearer", "secret": "AUTHORIZATION"})
        );
        assert_eq!(
            built.secrets.get("AUTHORIZATION").map(String::as_str),
            Some("s3cr3t")
        );
        let keyed = build(
            &http(&[("X-Api-Key", "${input:key}")]),
            "remote",
            "vscode",
            &[],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(keyed.manifest["mcp"]["auth"]["header"], "X-Api-Key");
        assert_eq!(keyed.pending, ["X_API_KEY"]);
        assert!(build(&http(&[("Accept", "text/plain")]), "remote", "x", &[]).is_err());
    }

    #[test]
    fn credential_env_values_move_to_secrets_and_package_launchers_are_known() {
        let e = Entry {
            name: "gh".into(),
            launch: Launch::Stdio {
                command: "npx".into(),
                args: vec!["-y".into(), "server-github".into()],
                cwd: None,
                env: [("GITHUB_TOKEN", "ghp_x"), ("LOG_LEVEL", "warn")]
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            },
        };
        assert!(runs_a_package(&e));
        let built = build(&e, "gh", "claude-desktop", &[]).unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(built.manifest["mcp"]["env"], json!({"LOG_LEVEL": "warn"}));
        assert_eq!(built.manifest["mcp"]["secrets"], json!(["GITHUB_TOKEN"]));
        assert!(!built.manifest.to_string().contains("ghp_x"));
        assert_eq!(built.allow.as_deref(), Some("npx"));
    }
}

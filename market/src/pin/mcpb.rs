//! MCP bundles (`.mcpb`): a local file or an `https` URL (which must carry its SHA-256), the
//! bytes checked against the expected SHA-256, unpacked into `bundle/` of the release (no path
//! may leave it, no links), and `manifest.json`'s `server.mcp_config` turned into the launch.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use futures_util::StreamExt;

use super::event::{PinEvent, Progress};
use super::files::{blocking, io, sha256_hex};
use crate::error::MarketError;
use crate::plan::{LockedArtefact, Pinned};

/// The folder of the release the bundle is unpacked into.
const BUNDLE_DIR: &str = "bundle";
/// Most bytes a bundle may have, packed or unpacked.
const MAX_BYTES: u64 = 1024 * 1024 * 1024;

pub(super) async fn pin(
    location: &str,
    expected: Option<&str>,
    dir: &Path,
    progress: Progress<'_>,
) -> Result<Pinned, MarketError> {
    let (location, fragment) = match location.split_once("#sha256=") {
        Some((l, h)) => (l, Some(h)),
        None => (location, None),
    };
    let expected = expected.or(fragment).map(str::to_ascii_lowercase);
    progress(PinEvent::Resolving {
        source: format!("mcpb:{location}"),
    });
    let bytes = fetch(location, expected.is_some(), progress).await?;
    let size = bytes.len() as u64;
    let (bytes, got) = blocking(move || {
        let got = sha256_hex(&bytes);
        Ok((bytes, got))
    })
    .await?;
    if let Some(expected) = expected.filter(|e| *e != got) {
        return Err(MarketError::HashMismatch {
            artefact: format!("mcpb {location}"),
            expected: format!("sha256-{expected}"),
            got: format!("sha256-{got}"),
        });
    }
    progress(PinEvent::Installing { artefacts: 1 });
    let bundle = dir.join(BUNDLE_DIR);
    let owned = location.to_string();
    let manifest = blocking(move || {
        unpack(&bytes, &bundle, &owned)?;
        read_manifest(&bundle, &owned)
    })
    .await?;
    let launch = launch(&manifest, location)?;
    let name = manifest["name"].as_str().unwrap_or_default().to_string();
    let version = manifest["version"].as_str().unwrap_or_default().to_string();
    Ok(Pinned {
        interpreter: interpreter_version(&launch.command).await,
        command: launch.command,
        args: launch.args,
        env: launch.env,
        artefacts: vec![LockedArtefact {
            name,
            version: version.clone(),
            url: location.to_string(),
            hash: format!("sha256-{got}"),
            size,
        }],
        scripts: Vec::new(),
        version,
        secrets: launch.secrets,
    })
}

fn bundle_error(location: &str, problem: impl Into<String>) -> MarketError {
    MarketError::Bundle {
        bundle: location.to_string(),
        problem: problem.into(),
    }
}

/// The bundle's bytes: downloaded from an `https` URL (which needs an expected hash), or read
/// from a local file.
async fn fetch(
    location: &str,
    has_hash: bool,
    progress: Progress<'_>,
) -> Result<Vec<u8>, MarketError> {
    if location.starts_with("http://") {
        return Err(bundle_error(
            location,
            "a bundle is fetched over https only; use an https URL",
        ));
    }
    if !location.starts_with("https://") {
        let location = location.to_string();
        return blocking(move || {
            let path = Path::new(&location);
            let size = std::fs::metadata(path)
                .map_err(|source| io(path, source))?
                .len();
            if size > MAX_BYTES {
                return Err(bundle_error(
                    &location,
                    "larger than 1 GiB; a bundle must be smaller",
                ));
            }
            std::fs::read(path).map_err(|source| io(path, source))
        })
        .await;
    }
    if !has_hash {
        return Err(MarketError::Unpinnable {
            artefact: format!("mcpb {location}"),
            problem: "a bundle URL needs its SHA-256: append #sha256=HEX (the bundle's fileSha256)"
                .into(),
        });
    }
    let download = |problem: String| MarketError::Download {
        url: location.to_string(),
        problem,
    };
    // https only, redirects included; a server that stops sending ends the install.
    let client = reqwest::Client::builder()
        .https_only(true)
        .connect_timeout(std::time::Duration::from_secs(10))
        .read_timeout(std::time::Duration::from_secs(60))
        .build()
        .map_err(|e| download(e.to_string()))?;
    let response = client
        .get(location)
        .send()
        .await
        .map_err(|e| download(e.to_string()))?;
    let response = response
        .error_for_status()
        .map_err(|e| download(e.to_string()))?;
    let mut stream = response.bytes_stream();
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        bytes.extend_from_slice(&chunk.map_err(|e| download(e.to_string()))?);
        if bytes.len() as u64 > MAX_BYTES {
            return Err(download(
                "larger than 1 GiB; a bundle must be smaller".into(),
            ));
        }
        progress(PinEvent::Downloading {
            artefacts: 1,
            bytes: bytes.len() as u64,
        });
    }
    Ok(bytes)
}

/// Unpacks the zip into `dest`: every entry must stay inside it, links are refused, at most
/// [`MAX_BYTES`] in all; Unix execute bits are kept.
fn unpack(bytes: &[u8], dest: &Path, location: &str) -> Result<(), MarketError> {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes)).map_err(|e| {
        bundle_error(
            location,
            format!("not a zip file ({e}); a bundle is a zip with manifest.json"),
        )
    })?;
    std::fs::create_dir_all(dest).map_err(|source| io(dest, source))?;
    let mut total = 0u64;
    for i in 0..archive.len() {
        let mut entry = archive.by_index(i).map_err(|e| {
            bundle_error(
                location,
                format!("unreadable entry ({e}); rebuild the bundle"),
            )
        })?;
        let entry_name = String::from_utf8_lossy(entry.name_raw()).into_owned();
        let Some(rel) = entry.enclosed_name() else {
            return Err(bundle_error(
                location,
                format!(
                    "entry {entry_name:?} leaves the bundle folder; a bundle holds only paths inside it"
                ),
            ));
        };
        if entry.is_symlink() {
            return Err(bundle_error(
                location,
                format!("entry {entry_name:?} is a link; a bundle holds regular files only"),
            ));
        }
        let path = dest.join(rel);
        if entry.is_dir() {
            std::fs::create_dir_all(&path).map_err(|source| io(&path, source))?;
            continue;
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| io(parent, source))?;
        }
        let mut data = Vec::new();
        (&mut entry)
            .take(MAX_BYTES - total + 1)
            .read_to_end(&mut data)
            .map_err(|e| {
                bundle_error(
                    location,
                    format!("entry {entry_name:?} cannot be unpacked ({e}); rebuild the bundle"),
                )
            })?;
        total += data.len() as u64;
        if total > MAX_BYTES {
            return Err(bundle_error(
                location,
                "unpacks to more than 1 GiB; a bundle must be smaller",
            ));
        }
        write_new(&path, &data, entry.unix_mode())?;
    }
    Ok(())
}

/// Creates `path` (never overwriting: a duplicate entry is an error) with `data`.
fn write_new(path: &Path, data: &[u8], mode: Option<u32>) -> Result<(), MarketError> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(if mode.is_some_and(|m| m & 0o111 != 0) {
            0o755
        } else {
            0o644
        });
    }
    #[cfg(not(unix))]
    let _ = mode;
    let mut file = options.open(path).map_err(|source| io(path, source))?;
    file.write_all(data).map_err(|source| io(path, source))
}

fn read_manifest(bundle: &Path, location: &str) -> Result<serde_json::Value, MarketError> {
    let path = bundle.join("manifest.json");
    let text = std::fs::read_to_string(&path).map_err(|e| {
        bundle_error(
            location,
            format!("manifest.json: cannot read ({e}); a bundle needs manifest.json at its root"),
        )
    })?;
    serde_json::from_str(&text).map_err(|e| {
        bundle_error(
            location,
            format!("manifest.json: not JSON ({e}); fix the bundle's manifest"),
        )
    })
}

/// The launch a bundle's manifest describes.
#[derive(Debug, PartialEq, Eq)]
struct Launch {
    command: String,
    args: Vec<String>,
    env: BTreeMap<String, String>,
    secrets: Vec<String>,
}

/// `server.mcp_config` with `${__dirname}` → the bundle folder, non-sensitive `${user_config.X}`
/// → its default, an env entry that is exactly a sensitive `${user_config.X}` → a secret named
/// after the variable; other sensitive entries → a secret named after the entry (upper case).
fn launch(manifest: &serde_json::Value, location: &str) -> Result<Launch, MarketError> {
    let config = &manifest["server"]["mcp_config"];
    let user_config = manifest["user_config"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let sensitive = |key: &str| user_config.get(key).is_some_and(|c| c["sensitive"] == true);
    let expand = |text: &str, field: &str| expand(text, &user_config, location, field);
    let Some(command) = config["command"].as_str() else {
        return Err(bundle_error(
            location,
            "manifest.json: server.mcp_config.command is missing; the bundle must say how it starts",
        ));
    };
    let command = expand(command, "command")?;
    let mut args = Vec::new();
    for arg in config["args"].as_array().into_iter().flatten() {
        args.push(expand(arg.as_str().unwrap_or_default(), "args")?);
    }
    let mut env = BTreeMap::new();
    let mut secrets = Vec::new();
    let mut secret_entries = Vec::new();
    for (name, value) in config["env"].as_object().into_iter().flatten() {
        let value = value.as_str().unwrap_or_default();
        let key = value
            .strip_prefix("${user_config.")
            .and_then(|v| v.strip_suffix('}'));
        match key.filter(|k| sensitive(k)) {
            Some(key) => {
                secrets.push(name.clone());
                secret_entries.push(key.to_string());
            }
            None => {
                env.insert(name.clone(), expand(value, "env")?);
            }
        }
    }
    for key in user_config
        .keys()
        .filter(|k| sensitive(k) && !secret_entries.contains(*k))
    {
        secrets.push(tutti_rules::secret_name::from_any(key));
    }
    secrets.sort();
    secrets.dedup();
    Ok(Launch {
        command,
        args,
        env,
        secrets,
    })
}

/// Expands the placeholders of one manifest string; a sensitive or unset `user_config` value,
/// or a placeholder the runtime does not provide, is refused.
fn expand(
    text: &str,
    user_config: &serde_json::Map<String, serde_json::Value>,
    location: &str,
    field: &str,
) -> Result<String, MarketError> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let Some(end) = rest[start..].find('}') else {
            break;
        };
        let name = &rest[start + 2..start + end];
        rest = &rest[start + end + 1..];
        if name == "__dirname" {
            out.push_str(&format!("${{release}}/{BUNDLE_DIR}"));
            continue;
        }
        let problem = match name
            .strip_prefix("user_config.")
            .map(|k| (k, user_config.get(k)))
        {
            Some((_, Some(c))) if c["sensitive"] == true => {
                "a sensitive value there would be seen by every process; only env can carry it"
            }
            Some((_, Some(c))) if !c["default"].is_null() => {
                let default = &c["default"];
                out.push_str(
                    &default
                        .as_str()
                        .map_or_else(|| default.to_string(), str::to_string),
                );
                continue;
            }
            Some(_) => {
                "it has no default and the market cannot ask for it; write a release folder for this bundle"
            }
            None => "the runtime does not provide it; write a release folder for this bundle",
        };
        return Err(bundle_error(
            location,
            format!("manifest.json: server.mcp_config.{field} uses ${{{name}}}: {problem}"),
        ));
    }
    out.push_str(rest);
    Ok(out)
}

/// The version of the interpreter a bundle runs under, when it is `node` or Python.
async fn interpreter_version(command: &str) -> Option<String> {
    if !matches!(command, "node" | "python3" | "python") {
        return None;
    }
    let out = tokio::process::Command::new(command)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mcp_config_becomes_a_launch_with_secrets_named_after_their_variables() {
        let manifest = serde_json::json!({
            "server": {"mcp_config": {
                "command": "node",
                "args": ["${__dirname}/server/index.js", "--mode=${user_config.mode}"],
                "env": {"API_KEY": "${user_config.api_key}", "LEVEL": "warn"}
            }},
            "user_config": {
                "api_key": {"type": "string", "sensitive": true},
                "other_token": {"type": "string", "sensitive": true},
                "mode": {"type": "string", "default": "fast"}
            }
        });
        let launch = launch(&manifest, "x.mcpb").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(launch.command, "node");
        assert_eq!(
            launch.args,
            vec!["${release}/bundle/server/index.js", "--mode=fast"]
        );
        assert_eq!(launch.env.get("LEVEL").map(String::as_str), Some("warn"));
        assert!(!launch.env.contains_key("API_KEY"));
        assert_eq!(launch.secrets, vec!["API_KEY", "OTHER_TOKEN"]);
    }

    #[test]
    fn a_link_in_a_bundle_is_refused_and_not_created() {
        let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        let options = zip::write::SimpleFileOptions::default();
        zip.add_symlink("passwd", "/etc/passwd", options)
            .unwrap_or_else(|e| panic!("zip: {e}"));
        let bytes = zip
            .finish()
            .unwrap_or_else(|e| panic!("zip: {e}"))
            .into_inner();
        let dest = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let err = unpack(&bytes, &dest.path().join("bundle"), "x.mcpb").err();
        let err = err.map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(
            err,
            "x.mcpb: entry \"passwd\" is a link; a bundle holds regular files only"
        );
        assert!(!dest.path().join("bundle/passwd").exists());
    }

    #[tokio::test]
    async fn a_bundle_over_plain_http_is_refused() {
        let mut progress = |_: PinEvent| {};
        let err = fetch("http://example.com/x.mcpb", true, &mut progress)
            .await
            .err();
        let err = err.map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("a bundle is fetched over https only"), "{err}");
    }

    #[test]
    fn a_sensitive_value_on_the_command_line_is_refused() {
        let manifest = serde_json::json!({
            "server": {"mcp_config": {"command": "node", "args": ["--key=${user_config.k}"]}},
            "user_config": {"k": {"sensitive": true}}
        });
        let err = launch(&manifest, "x.mcpb").err().map(|e| e.to_string());
        assert!(
            err.as_deref()
                .is_some_and(|e| e.contains("mcp_config.args uses ${user_config.k}")),
            "{err:?}"
        );
    }
}

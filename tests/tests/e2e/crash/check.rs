//! The invariants of a state directory after a kill and a start, read from its files as a
//! person (or a backup tool) would find them, and what the restarted kernel says.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read as _;
use std::path::{Path, PathBuf};

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::model::{Conn, SECRET, State, VERSIONS, version_name};

/// Generation numbers come in blocks of this many, one block per start (`kernel/src/state.rs`).
const GENERATION_BLOCK: u64 = 1000;

/// One installed connector as `registry.json` holds it, its release copies checked.
#[derive(Debug)]
pub struct Entry {
    pub version: String,
    pub connected: bool,
    /// `auth` is `ready`.
    pub ready: bool,
}

/// Every invariant of the files that holds whatever the connectors are; the installed
/// connectors as found.
pub fn state_dir(state: &Path) -> Result<BTreeMap<String, Entry>, String> {
    let registry = registry(state)?;
    let connectors = registry["connectors"]
        .as_object()
        .ok_or("registry.json has no connectors object")?;
    let mut found = BTreeMap::new();
    for (key, entry) in connectors {
        found.insert(key.clone(), connector(state, key, entry)?);
    }
    no_temp_files(state)?;
    no_dead_worker_sockets(state, &registry)?;
    releases_belong(state, &found)?;
    secrets_belong(state, &found)?;
    audit_whole(state)?;
    Ok(found)
}

fn registry(state: &Path) -> Result<Value, String> {
    let bytes =
        std::fs::read(state.join("registry.json")).map_err(|e| format!("registry.json: {e}"))?;
    serde_json::from_slice(&bytes).map_err(|e| format!("registry.json does not parse: {e}"))
}

/// One registry entry: its release (and the one an unsettled upgrade replaces) whole, its
/// pin on one of them.
fn connector(state: &Path, key: &str, entry: &Value) -> Result<Entry, String> {
    let version = release(state, key, entry)?;
    let previous = match entry.get("previous") {
        Some(p) => Some(release(state, key, p)?),
        None => None,
    };
    if previous.as_ref() == Some(&version) {
        return Err(format!("{key}: an upgrade replaces its own release"));
    }
    if let Some(pin) = entry.get("pin") {
        let on = pin["releaseDir"].as_str();
        let dirs = [
            entry["releaseDir"].as_str(),
            entry.get("previous").and_then(|p| p["releaseDir"].as_str()),
        ];
        if on.is_none() || !dirs.contains(&on) {
            return Err(format!(
                "{key}: the pin is of {on:?}, neither the release nor the one it replaces"
            ));
        }
    }
    Ok(Entry {
        version,
        connected: entry["connected"].as_bool().unwrap_or(true),
        ready: entry["auth"] == "ready",
    })
}

/// The release an entry names: `releases/<key>/<sha256>/`, every file of its list present
/// and hashing to its name as the kernel hashes it. Returns its version.
fn release(state: &Path, key: &str, entry: &Value) -> Result<String, String> {
    let sha = entry["sha256"].as_str().unwrap_or("");
    let dir = PathBuf::from(entry["releaseDir"].as_str().unwrap_or(""));
    if dir != state.join("releases").join(key).join(sha) {
        return Err(format!(
            "{key}: release dir {} is not releases/{key}/{sha}",
            dir.display()
        ));
    }
    let hashed = hash_listed(&dir).map_err(|e| format!("{key}: release {sha}: {e}"))?;
    if hashed != sha {
        return Err(format!(
            "{key}: the copy {} hashes to {hashed}",
            dir.display()
        ));
    }
    Ok(entry["version"].as_str().unwrap_or("").to_owned())
}

/// SHA-256 over the files `.tutti-release-files` lists: path, executable bit, length, content.
fn hash_listed(copy: &Path) -> Result<String, String> {
    let list = std::fs::read(copy.join(".tutti-release-files"))
        .map_err(|e| format!("no file list: {e}"))?;
    let list: Vec<PathBuf> =
        serde_json::from_slice(&list).map_err(|e| format!("file list does not parse: {e}"))?;
    let mut h = Sha256::new();
    for rel in list {
        let path = copy.join(&rel);
        let meta =
            std::fs::symlink_metadata(&path).map_err(|e| format!("{}: {e}", rel.display()))?;
        if !meta.is_file() {
            return Err(format!("{} is not a regular file", rel.display()));
        }
        let mut bytes = Vec::new();
        std::fs::File::open(&path)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .map_err(|e| format!("{}: {e}", rel.display()))?;
        h.update(rel.to_string_lossy().as_bytes());
        h.update([0, u8::from(executable(&meta))]);
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(&bytes);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

fn executable(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    meta.permissions().mode() & 0o111 != 0
}

/// The stored secrets of `key` (`None`: no file); the file, if any, must parse.
pub fn stored(state: &Path, key: &str) -> Result<Option<BTreeMap<String, String>>, String> {
    let path = state.join("secrets").join(format!("{key}.json"));
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| format!("secrets/{key}.json does not parse: {e}"))
}

/// The CLI connectors of the random loop: auth `ready` exactly when connected with
/// [`SECRET`] stored (what the kernel decides from the stored secrets).
pub fn cli_connectors(state: &Path, found: &BTreeMap<String, Entry>) -> Result<State, String> {
    let mut now = State::new();
    for (key, e) in found {
        let secret =
            stored(state, key)?.and_then(|s| s.get(SECRET).filter(|v| !v.is_empty()).cloned());
        if e.ready != (e.connected && secret.is_some()) {
            return Err(format!(
                "{key}: auth ready {} but connected {} and {SECRET} {}",
                e.ready,
                e.connected,
                if secret.is_some() {
                    "stored"
                } else {
                    "not stored"
                }
            ));
        }
        let version = (0..VERSIONS)
            .find(|v| version_name(*v) == e.version)
            .ok_or_else(|| format!("{key}: unknown version {:?}", e.version))?;
        now.insert(
            key.clone(),
            Conn {
                version,
                connected: e.connected,
                secret,
            },
        );
    }
    Ok(now)
}

fn names(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The pid in a temp file's name (`.<name>.tutti-<pid>.tmp`).
fn temp_pid(name: &str) -> Option<u32> {
    name.strip_suffix(".tmp")?
        .rsplit_once(".tutti-")?
        .1
        .parse()
        .ok()
}

/// No temp file of an atomic write is left where the kernel writes them, but those of a
/// live process (the new frontend writing `run/frontend.json` as the check runs, say).
fn no_temp_files(state: &Path) -> Result<(), String> {
    for dir in [
        state.to_path_buf(),
        state.join("secrets"),
        state.join("run"),
    ] {
        let left = names(&dir).into_iter().find(|n| {
            n.ends_with(".tmp")
                && !temp_pid(n).is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists())
        });
        if let Some(t) = left {
            return Err(format!("temp file left: {}", dir.join(t).display()));
        }
    }
    Ok(())
}

/// No socket of a worker of an earlier start (`run/w-<gen>.sock`, `run/d-<gen>.sock`, the
/// generation in hex): this start's generations begin at its ceiling's block.
fn no_dead_worker_sockets(state: &Path, registry: &Value) -> Result<(), String> {
    let ceiling = registry["generationCeiling"].as_u64().unwrap_or(0);
    let first = ceiling.saturating_sub(GENERATION_BLOCK) + 1;
    for name in names(&state.join("run")) {
        let generation = ["w-", "d-"]
            .iter()
            .find_map(|p| name.strip_prefix(p)?.strip_suffix(".sock"))
            .and_then(|hex| u64::from_str_radix(hex, 16).ok());
        if generation.is_some_and(|g| g < first) {
            return Err(format!(
                "run/{name} is left of a worker of an earlier start"
            ));
        }
    }
    Ok(())
}

/// `releases/` holds copies of installed connectors only, and no temporary or damaged copy.
fn releases_belong(state: &Path, found: &BTreeMap<String, Entry>) -> Result<(), String> {
    let releases = state.join("releases");
    for key in names(&releases) {
        if !found.contains_key(&key) {
            return Err(format!(
                "releases/{key} is left of a connector not installed"
            ));
        }
        for copy in names(&releases.join(&key)) {
            if copy.starts_with(".tmp-") || copy.contains(".damaged-") {
                return Err(format!("releases/{key}/{copy} is left of a copy"));
            }
        }
    }
    Ok(())
}

/// Every file in `secrets/` is the secrets file of an installed, connected connector.
fn secrets_belong(state: &Path, found: &BTreeMap<String, Entry>) -> Result<(), String> {
    for name in names(&state.join("secrets")) {
        let owner = name
            .strip_suffix(".json")
            .and_then(|key| found.get(key))
            .filter(|e| e.connected);
        if owner.is_none() {
            return Err(format!(
                "secrets/{name} has no installed, connected connector"
            ));
        }
    }
    Ok(())
}

/// Every line of `logs/audit.jsonl` is one whole JSON object.
fn audit_whole(state: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(state.join("logs/audit.jsonl")).unwrap_or_default();
    if !text.is_empty() && !text.ends_with('\n') {
        return Err("logs/audit.jsonl ends in a torn line".into());
    }
    for line in text.lines() {
        let v: Value = serde_json::from_str(line)
            .map_err(|e| format!("audit line does not parse ({e}): {line}"))?;
        if !v.is_object() {
            return Err(format!("audit line is not an object: {line}"));
        }
    }
    Ok(())
}

/// How a connector came out of an interrupted command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Came {
    /// The command changes nothing the test sees (no command, a disconnect of a
    /// disconnected connector, a login again), and nothing changed.
    Unchanged,
    Old,
    /// The state after the first of a command's own steps (`connect` of an OAuth connector
    /// reconnects it, then logs in: two kernel commands, each whole).
    Between,
    New,
}

/// Each connector is wholly at its state before the command or after it (after it when the
/// command had said it succeeded), or after one of its own steps (`between`). Returns which.
pub fn old_or_new<S: PartialEq + std::fmt::Debug>(
    now: &S,
    old: &S,
    between: Option<&S>,
    new: &S,
    acked: bool,
) -> Result<Came, String> {
    if now == new && old == new {
        Ok(Came::Unchanged)
    } else if now == new {
        Ok(Came::New)
    } else if now == old && !acked {
        Ok(Came::Old)
    } else if between == Some(now) && !acked {
        Ok(Came::Between)
    } else {
        Err(format!(
            "neither the old nor the new state{}:\n  old {old:?}\n  new {new:?}\n  now {now:?}",
            if acked {
                " (the command had succeeded: new expected)"
            } else {
                ""
            }
        ))
    }
}

/// What the restarted kernel says matches the files: the same connectors, none failed (a
/// release it could not read or verify).
pub fn kernel_view(status: &Value, found: &BTreeMap<String, Entry>) -> Result<(), String> {
    let listed = status["connectors"].as_array().cloned().unwrap_or_default();
    let keys: BTreeSet<&str> = listed.iter().filter_map(|c| c["key"].as_str()).collect();
    let installed: BTreeSet<&str> = found.keys().map(String::as_str).collect();
    if keys != installed {
        return Err(format!(
            "status lists {keys:?}, the registry holds {installed:?}"
        ));
    }
    if let Some(c) = listed.iter().find(|c| c["status"] == "failed") {
        return Err(format!("a connector failed after the restart: {c}"));
    }
    Ok(())
}

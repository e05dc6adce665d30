//! Skills over MCP (SPEC §11; the `io.modelcontextprotocol/skills` extension, SEP-2640, as
//! the conformance suite 0.2.0-alpha.12 checks it).
//!
//! Every live generation's skills (from the route stream: name, directory in the release
//! copy, and the files of it that are part of the release) are served as
//! - `skills/list` / `skills/get`: one entry per skill, `uri` = `skill://<key>/<name>/SKILL.md`,
//!   `frontmatter` = the SKILL.md YAML front matter as a JSON object, `resources` = every
//!   file of the skill directory (SKILL.md included) that is part of the release (the install
//!   scanned it; a file an upstream wrote there later is logged and left out) with `sha256:`
//!   digest and size;
//! - `resources/read` of those `skill://` URIs ([`read`]), and `resources/list` entries for
//!   each SKILL.md ([`list_resources`]).
//!
//! A generation's entries are built (files hashed) on the first request after it was
//! committed, on a blocking thread, never on a tool call's path; a read checks the bytes
//! against the listed digest and size, so a client never gets content the listing does not
//! describe.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use tutti_proto::kernel::{ConnectorRoute, RouteEvent, route_event};
use tutti_rules::release_path::slashed;

use crate::rpc::{INTERNAL_ERROR, INVALID_PARAMS, RpcError};

/// The extension's identifier under `capabilities.extensions`.
pub(crate) const EXTENSION: &str = "io.modelcontextprotocol/skills";
const SKILL_FILE: &str = "SKILL.md";
/// A skill with more files or bytes than this is not served (the extension's SHOULD NOT).
const MAX_FILES: usize = 512;
const MAX_TOTAL_BYTES: u64 = 16 * 1024 * 1024;

/// One file of a skill.
struct SkillFile {
    uri: String,
    path: PathBuf,
    digest: String,
    size: u64,
}

/// One served skill.
struct Skill {
    /// `skill://<key>/<name>/SKILL.md`
    uri: String,
    frontmatter: Map<String, Value>,
    files: Vec<SkillFile>,
}

impl Skill {
    fn entry(&self) -> Value {
        let resources: Vec<Value> = self
            .files
            .iter()
            .map(|f| json!({"uri": f.uri, "digest": f.digest, "size": f.size}))
            .collect();
        json!({"uri": self.uri, "frontmatter": self.frontmatter, "resources": resources})
    }

    fn front(&self, field: &str) -> Option<&str> {
        self.frontmatter.get(field).and_then(Value::as_str)
    }
}

/// One skill directory of a generation, as the route names it.
#[derive(Clone)]
struct SkillDir {
    name: String,
    dir: PathBuf,
    /// The files that are part of the release (relative, `/`-separated): the install scanned
    /// these; any other file in `dir` is not served.
    files: BTreeSet<String>,
}

/// The skills of one live generation.
struct Source {
    generation: u64,
    dirs: Vec<SkillDir>,
    built: Option<Arc<Vec<Skill>>>,
}

/// A generation whose skills are not built yet: key, generation, skill directories.
type Unbuilt = (String, u64, Vec<SkillDir>);

/// Every live generation's skills, following the route stream.
#[derive(Default)]
pub(crate) struct SkillCatalogue {
    sources: Mutex<BTreeMap<String, Source>>,
}

fn source(route: &ConnectorRoute) -> Source {
    Source {
        generation: route.generation,
        dirs: route
            .skills
            .iter()
            .map(|s| SkillDir {
                name: s.name.clone(),
                dir: PathBuf::from(&s.dir),
                files: s.files.iter().cloned().collect(),
            })
            .collect(),
        built: None,
    }
}

impl SkillCatalogue {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Source>> {
        self.sources.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies one route event (called by the watcher before the route table applies it).
    pub(crate) fn apply(&self, event: &RouteEvent) {
        let mut sources = self.lock();
        match &event.event {
            Some(route_event::Event::Snapshot(snapshot)) => {
                *sources = snapshot
                    .connectors
                    .iter()
                    .map(|r| (r.key.clone(), source(r)))
                    .collect();
            }
            Some(route_event::Event::Upsert(route)) => {
                let unchanged = sources
                    .get(&route.key)
                    .is_some_and(|s| s.generation == route.generation);
                if !unchanged {
                    sources.insert(route.key.clone(), source(route));
                }
            }
            Some(route_event::Event::Removed(removed))
                if sources
                    .get(&removed.key)
                    .is_some_and(|s| s.generation <= removed.generation) =>
            {
                sources.remove(&removed.key);
            }
            _ => {}
        }
    }

    /// Every served skill, sorted by URI; builds what was committed since the last request.
    async fn skills(&self) -> Vec<Arc<Vec<Skill>>> {
        let missing: Vec<Unbuilt> = self
            .lock()
            .iter()
            .filter(|(_, s)| s.built.is_none() && !s.dirs.is_empty())
            .map(|(k, s)| (k.clone(), s.generation, s.dirs.clone()))
            .collect();
        for (key, generation, dirs) in missing {
            let key_for_build = key.clone();
            let built = tokio::task::spawn_blocking(move || build(&key_for_build, &dirs))
                .await
                .unwrap_or_default();
            if let Some(s) = self.lock().get_mut(&key)
                && s.generation == generation
            {
                s.built = Some(Arc::new(built));
            }
        }
        self.lock()
            .values()
            .filter_map(|s| s.built.clone())
            .collect()
    }
}

/// Builds one generation's skills; a skill that cannot be served is logged and left out.
fn build(key: &str, dirs: &[SkillDir]) -> Vec<Skill> {
    let mut out = Vec::new();
    for skill in dirs {
        match build_skill(key, skill) {
            Ok(built) => out.push(built),
            Err(problem) => {
                tracing::warn!(connector = %key, skill = %skill.name, %problem, "skill not served");
            }
        }
    }
    out.sort_by(|a, b| a.uri.cmp(&b.uri));
    out
}

fn build_skill(key: &str, skill: &SkillDir) -> Result<Skill, String> {
    let dir = &skill.dir;
    if !skill.files.contains(SKILL_FILE) {
        return Err(format!("{SKILL_FILE} is not part of the installed release"));
    }
    let text = std::fs::read_to_string(dir.join(SKILL_FILE))
        .map_err(|e| format!("cannot read {SKILL_FILE}: {e}"))?;
    let frontmatter = front_matter(&text)?;
    let base = format!("skill://{key}/{}", encode_segment(&skill.name));
    let mut relative = Vec::new();
    walk(dir, Path::new(""), &mut relative)?;
    relative.retain(|rel| {
        let listed = skill.files.contains(&slashed(rel));
        if !listed {
            tracing::warn!(connector = %key, skill = %skill.name, file = %slashed(rel),
                "skill file not served: it is not part of the installed release (written after install, so never scanned)");
        }
        listed
    });
    relative.sort();
    if relative.len() > MAX_FILES {
        return Err(format!("{} files (at most {MAX_FILES})", relative.len()));
    }
    let mut files = Vec::with_capacity(relative.len());
    let mut total = 0u64;
    for rel in relative {
        let path = dir.join(&rel);
        let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", rel.display()))?;
        total += bytes.len() as u64;
        if total > MAX_TOTAL_BYTES {
            return Err(format!("more than {MAX_TOTAL_BYTES} bytes"));
        }
        let segments: Vec<String> = rel
            .components()
            .map(|c| encode_segment(&c.as_os_str().to_string_lossy()))
            .collect();
        files.push(SkillFile {
            uri: format!("{base}/{}", segments.join("/")),
            path,
            digest: digest(&bytes),
            size: bytes.len() as u64,
        });
    }
    Ok(Skill {
        uri: format!("{base}/{SKILL_FILE}"),
        frontmatter,
        files,
    })
}

/// Regular files under `dir` (relative paths); links are not followed.
fn walk(root: &Path, rel: &Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries =
        std::fs::read_dir(root.join(rel)).map_err(|e| format!("{}: {e}", rel.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| e.to_string())?;
        let child = rel.join(entry.file_name());
        let kind = entry.file_type().map_err(|e| e.to_string())?;
        if kind.is_dir() {
            walk(root, &child, out)?;
        } else if kind.is_file() {
            out.push(child);
            if out.len() > MAX_FILES {
                return Err(format!("more than {MAX_FILES} files"));
            }
        }
    }
    Ok(())
}

/// The YAML front matter of a SKILL.md as a JSON object.
fn front_matter(text: &str) -> Result<Map<String, Value>, String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let rest = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
        .ok_or("no YAML front matter")?;
    let end = rest.find("\n---").ok_or("front matter is not closed")?;
    match serde_yaml_ng::from_str::<Value>(&rest[..end]) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err("front matter is not a mapping".into()),
        Err(e) => Err(format!("front matter: {e}")),
    }
}

fn digest(bytes: &[u8]) -> String {
    let hash = Sha256::digest(bytes);
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    for b in hash {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// Percent-encodes everything outside RFC 3986 unreserved characters.
fn encode_segment(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `skills/list`: every skill in one page (fields of the result).
pub(crate) async fn list(catalogue: &SkillCatalogue) -> Map<String, Value> {
    let skills: Vec<Value> = catalogue
        .skills()
        .await
        .iter()
        .flat_map(|set| set.iter().map(Skill::entry).collect::<Vec<_>>())
        .collect();
    let mut fields = Map::new();
    fields.insert("skills".into(), Value::Array(skills));
    fields
}

/// `skills/get {uri}`: the entry of the skill whose SKILL.md (or directory) is `uri`; -32602
/// for anything else.
pub(crate) async fn get(
    catalogue: &SkillCatalogue,
    params: Option<&Value>,
) -> Result<Map<String, Value>, RpcError> {
    let uri = params
        .and_then(|p| p.get("uri"))
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::new(INVALID_PARAMS, "Invalid params: uri is required"))?;
    for set in catalogue.skills().await {
        if let Some(skill) = set
            .iter()
            .find(|s| s.uri == uri || s.uri.strip_suffix("/SKILL.md") == Some(uri))
        {
            let mut fields = Map::new();
            fields.insert("skill".into(), skill.entry());
            return Ok(fields);
        }
    }
    Err(
        RpcError::new(INVALID_PARAMS, format!("Unknown skill: {uri}"))
            .with_data(json!({"uri": uri})),
    )
}

/// `resources/list` entries for the skills: one per SKILL.md, named and described by its
/// front matter.
pub(crate) async fn list_resources(catalogue: &SkillCatalogue) -> Vec<Value> {
    let mut out = Vec::new();
    for set in catalogue.skills().await {
        for skill in set.iter() {
            let size = skill
                .files
                .iter()
                .find(|f| f.uri == skill.uri)
                .map(|f| f.size);
            let mut resource = json!({
                "uri": skill.uri,
                "name": skill.front("name").unwrap_or_default(),
                "mimeType": "text/markdown",
            });
            if let Some(description) = skill.front("description") {
                resource["description"] = json!(description);
            }
            if let Some(title) = skill.front("title") {
                resource["title"] = json!(title);
            }
            if let Some(size) = size {
                resource["size"] = json!(size);
            }
            out.push(resource);
        }
    }
    out
}

/// The `uri` of a `resources/read` when it is a `skill://` URI.
pub(crate) fn skill_uri(params: Option<&Value>) -> Option<&str> {
    params
        .and_then(|p| p.get("uri"))
        .and_then(Value::as_str)
        .filter(|uri| uri.starts_with("skill://"))
}

/// `resources/read` of a `skill://` URI: `None` for any other URI (the caller's resources
/// path answers it), else the result fields or `not_found_code` for a URI no skill serves.
pub(crate) async fn read(
    catalogue: &SkillCatalogue,
    uri: &str,
    not_found_code: i64,
) -> Option<Result<Map<String, Value>, RpcError>> {
    if !uri.starts_with("skill://") {
        return None;
    }
    let mut found = None;
    for set in catalogue.skills().await {
        if let Some(file) = set
            .iter()
            .flat_map(|s| s.files.iter())
            .find(|f| f.uri == uri)
        {
            found = Some((file.path.clone(), file.digest.clone(), file.size));
            break;
        }
    }
    let Some((path, expected, size)) = found else {
        return Some(Err(RpcError::new(
            not_found_code,
            format!("Resource not found: {uri}"),
        )
        .with_data(json!({"uri": uri}))));
    };
    let bytes = match tokio::task::spawn_blocking(move || std::fs::read(path)).await {
        Ok(Ok(bytes)) => bytes,
        _ => {
            return Some(Err(RpcError::new(
                INTERNAL_ERROR,
                format!("cannot read {uri}"),
            )));
        }
    };
    if bytes.len() as u64 != size || digest(&bytes) != expected {
        return Some(Err(RpcError::new(
            INTERNAL_ERROR,
            format!("{uri} does not match its listed digest; list skills again"),
        )));
    }
    let mime = mime_type(uri);
    let content = match String::from_utf8(bytes) {
        Ok(text) => json!({"uri": uri, "mimeType": mime, "text": text}),
        Err(e) => json!({"uri": uri, "mimeType": mime, "blob": STANDARD.encode(e.into_bytes())}),
    };
    let mut fields = Map::new();
    fields.insert("contents".into(), json!([content]));
    Some(Ok(fields))
}

fn mime_type(uri: &str) -> &'static str {
    let ext = uri.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
    match ext.as_deref() {
        Some("md") => "text/markdown",
        Some("txt") => "text/plain",
        Some("json") => "application/json",
        Some("yaml" | "yml") => "application/yaml",
        Some("py") => "text/x-python",
        Some("sh") => "text/x-shellscript",
        Some("js") => "text/javascript",
        Some("html") => "text/html",
        Some("png") => "image/png",
        Some("pdf") => "application/pdf",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tutti_proto::kernel::{RouteSnapshot, RoutedSkill};

    fn temp_skill(root: &Path) -> PathBuf {
        let dir = root.join("skills").join("pdf-tools");
        std::fs::create_dir_all(dir.join("references")).unwrap_or_default();
        let skill_md = "---\nname: pdf-tools\ndescription: Work with PDFs\nmetadata:\n  version: 2\n---\nBody.\n";
        std::fs::write(dir.join("SKILL.md"), skill_md).unwrap_or_default();
        std::fs::write(dir.join("references").join("a b.md"), "ref").unwrap_or_default();
        dir
    }

    #[tokio::test]
    async fn lists_gets_and_reads_a_committed_skill() {
        let root = std::env::temp_dir().join(format!("tutti-skills-{}", std::process::id()));
        let dir = temp_skill(&root);
        // Written after install: not part of the release, never served.
        std::fs::write(dir.join("references").join("late.md"), "x").unwrap_or_default();
        let catalogue = SkillCatalogue::default();
        catalogue.apply(&RouteEvent {
            revision: 1,
            event: Some(route_event::Event::Snapshot(RouteSnapshot {
                connectors: vec![ConnectorRoute {
                    key: "docs".into(),
                    generation: 3,
                    skills: vec![RoutedSkill {
                        name: "pdf-tools".into(),
                        dir: dir.to_string_lossy().into_owned(),
                        files: vec!["SKILL.md".into(), "references/a b.md".into()],
                    }],
                    ..Default::default()
                }],
            })),
        });
        let listed = list(&catalogue).await;
        let entry = &listed["skills"][0];
        assert_eq!(entry["uri"], "skill://docs/pdf-tools/SKILL.md");
        assert_eq!(entry["frontmatter"]["metadata"]["version"], 2);
        let uris: Vec<&str> = entry["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["uri"].as_str())
            .collect();
        assert_eq!(
            uris,
            [
                "skill://docs/pdf-tools/SKILL.md",
                "skill://docs/pdf-tools/references/a%20b.md"
            ]
        );
        let got = get(
            &catalogue,
            Some(&json!({"uri": "skill://docs/pdf-tools/SKILL.md"})),
        )
        .await;
        assert!(got.is_ok_and(|g| g["skill"] == *entry));
        let unknown = get(&catalogue, Some(&json!({"uri": "skill://x/y/SKILL.md"}))).await;
        assert!(unknown.is_err_and(|e| e.code == INVALID_PARAMS));
        let read_back = read(&catalogue, "skill://docs/pdf-tools/references/a%20b.md", -1).await;
        let Some(Ok(read_back)) = read_back else {
            panic!("read failed");
        };
        assert_eq!(read_back["contents"][0]["text"], "ref");
        assert!(read(&catalogue, "file:///etc/passwd", -1).await.is_none());
        // A changed file is never served under the listed digest.
        std::fs::write(dir.join("references").join("a b.md"), "REF").unwrap_or_default();
        let changed = read(&catalogue, "skill://docs/pdf-tools/references/a%20b.md", -1).await;
        assert!(matches!(changed, Some(Err(_))));
        let _ = std::fs::remove_dir_all(&root);
    }
}

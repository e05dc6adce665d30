//! `connector.json` (SPEC §3): parsing, validation with one line per problem naming the
//! field, placeholder expansion and the exact launch plan.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use serde_json::{Map, Value};

pub const DEFAULT_START_MS: u32 = 30_000;
pub const DEFAULT_CALL_MS: u32 = 60_000;

#[derive(Clone, Debug)]
pub struct Manifest {
    pub key: String,
    pub name: String,
    pub description: String,
    pub version: String,
    pub mcp: Option<Mcp>,
    pub cli: Option<Cli>,
    pub skills: Vec<Skill>,
    pub start_ms: u32,
    pub call_ms: u32,
    pub tool_risk: BTreeMap<String, String>,
    /// `circuit` (SPEC §12), defaults filled in.
    pub circuit: crate::circuit::Settings,
}

#[derive(Clone, Debug)]
pub enum Mcp {
    Stdio {
        command: String,
        args: Vec<String>,
        cwd: String,
        env: BTreeMap<String, String>,
        secrets: Vec<String>,
    },
    Http {
        url: String,
        auth: Auth,
    },
}

#[derive(Clone, Debug)]
pub enum Auth {
    None,
    Bearer {
        secret: String,
    },
    Header {
        header: String,
        secret: String,
    },
    /// SPEC §10: a browser login; the tokens are kept by the kernel under `secrets/`.
    Oauth(OauthSettings),
}

/// `auth.kind: "oauth"` (SPEC §10).
#[derive(Clone, Debug, Default)]
pub struct OauthSettings {
    pub scopes: Vec<String>,
    pub client_id: Option<String>,
    /// The name of the secret that holds a pre-registered client's secret.
    pub client_secret: Option<String>,
    pub client_metadata_url: Option<String>,
}

#[derive(Clone, Debug)]
pub struct Cli {
    pub entrypoint: String,
    pub secrets: Vec<String>,
}

#[derive(Clone, Debug)]
pub struct Skill {
    /// Directory relative to the release.
    pub dir: String,
    pub name: String,
    pub title: Option<String>,
    pub description: String,
}

/// What a stdio upstream runs, after expansion.
#[derive(Clone, Debug, PartialEq)]
pub struct StdioLaunch {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub cwd: PathBuf,
    pub env: BTreeMap<String, String>,
}

impl Manifest {
    /// Every secret name the connector declares (mcp, http auth and cli), sorted, unique.
    pub fn secret_names(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        match &self.mcp {
            Some(Mcp::Stdio { secrets, .. }) => names.extend(secrets.iter().cloned()),
            Some(Mcp::Http {
                auth: Auth::Bearer { secret } | Auth::Header { secret, .. },
                ..
            }) => names.push(secret.clone()),
            Some(Mcp::Http {
                auth:
                    Auth::Oauth(OauthSettings {
                        client_secret: Some(secret),
                        ..
                    }),
                ..
            }) => names.push(secret.clone()),
            _ => {}
        }
        if let Some(cli) = &self.cli {
            names.extend(cli.secrets.iter().cloned());
        }
        names.sort();
        names.dedup();
        names
    }
}

/// Reads and validates `<dir>/connector.json`. `Err` holds one line per problem.
pub fn load(dir: &Path) -> Result<Manifest, Vec<String>> {
    let text = read_manifest(dir).map_err(|e| vec![e])?;
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| vec![format!("connector.json: not valid JSON: {e}")])?;
    parse(&value, dir)
}

/// The text of `<dir>/connector.json`, read without following links and at most
/// [`crate::release::MANIFEST_MAX_BYTES`]. `Err` is the one refusal line.
fn read_manifest(dir: &Path) -> Result<String, String> {
    crate::release::read_text(
        dir,
        Path::new("connector.json"),
        crate::release::MANIFEST_MAX_BYTES,
    )
    .map_err(|e| format!("connector.json: {e}"))
}

/// The launch problems (command not found, cwd not absolute, …) of a release whose
/// `connector.json` has other problems too, so that one refusal lists them all. Reads the
/// stdio fields leniently; a field `reported` already names is not reported twice.
pub fn launch_problems(
    dir: &Path,
    state: &Path,
    base_env: &BTreeMap<String, String>,
    reported: &[String],
) -> Vec<String> {
    let Some(value) = read_manifest(dir)
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
    else {
        return Vec::new();
    };
    let mcp = &value["mcp"];
    let Some(command) = mcp["command"].as_str().filter(|c| !c.is_empty()) else {
        return Vec::new();
    };
    if mcp["transport"] != "stdio" {
        return Vec::new();
    }
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let args = strings(&mcp["args"]);
    let cwd = mcp["cwd"].as_str().unwrap_or("${release}");
    let problems = match stdio_launch(command, &args, cwd, &BTreeMap::new(), dir, state, base_env) {
        Ok(_) => return Vec::new(),
        Err(p) => p,
    };
    let field_of =
        |line: &str| -> String { line.splitn(3, ": ").take(2).collect::<Vec<_>>().join(": ") };
    problems
        .into_iter()
        .filter(|p| {
            let field = field_of(p);
            !reported.iter().any(|r| field_of(r) == field)
        })
        .collect()
}

/// The loader and interpreter-injection variables (SPEC §12,
/// [`crate::allowlist::injection_variable`]) of `mcp.env` and of the secret names, one line
/// each, except those the install allows with `--allow-env NAME`.
pub fn injection_problems(m: &Manifest, allowed: &[String]) -> Vec<String> {
    let mut fields: Vec<(String, &str)> = Vec::new();
    if let Some(Mcp::Stdio { env, secrets, .. }) = &m.mcp {
        fields.extend(env.keys().map(|k| (format!("mcp.env.{k}"), k.as_str())));
        fields.extend(
            secrets
                .iter()
                .enumerate()
                .map(|(i, n)| (format!("mcp.secrets[{i}]"), n.as_str())),
        );
    }
    if let Some(cli) = &m.cli {
        fields.extend(
            cli.secrets
                .iter()
                .enumerate()
                .map(|(i, n)| (format!("cli.secrets[{i}]"), n.as_str())),
        );
    }
    fields
        .into_iter()
        .filter(|(_, name)| !crate::allowlist::env_allowed(name, allowed))
        .filter_map(|(field, name)| {
            let row = crate::allowlist::injection_variable(name)?;
            Some(format!(
                "connector.json: {field}: {name} is a loader or interpreter-injection variable ({}: the program could run code from outside the release); to allow it, install with --allow-env {name}",
                row.what
            ))
        })
        .collect()
}

/// The most bytes a text field of a manifest may hold, set here and only here
/// (ARCHITECTURE.md lists them). Such text is shown to people (install confirmation, `status`,
/// `available`) and travels in every `available` reply, so one release cannot make those
/// unusable. The whole `connector.json` is capped too ([`crate::release::MANIFEST_MAX_BYTES`]).
pub mod limits {
    /// `name`, and a skill's `name` and `title`.
    pub const NAME: usize = 256;
    /// `version`.
    pub const VERSION: usize = 128;
    /// `description`, and a skill's `description`.
    pub const DESCRIPTION: usize = 4096;
    /// `mcp.command`, `mcp.cwd`, `mcp.url`, `cli.entrypoint`, each `skills[i]`.
    pub const PATH: usize = 4096;
    /// Each `mcp.args` item and each `mcp.env` value.
    pub const ARG: usize = 32 * 1024;
}

struct Problems(Vec<String>);

impl Problems {
    fn push(&mut self, field: &str, msg: impl std::fmt::Display) {
        self.0.push(format!("connector.json: {field}: {msg}"));
    }

    /// Refuses `value` when it is longer than `max` bytes; `true` when it fits.
    fn fits(&mut self, field: &str, value: &str, max: usize) -> bool {
        if value.len() > max {
            self.push(
                field,
                format!(
                    "is {} bytes, longer than the {max}-byte limit for this field",
                    value.len()
                ),
            );
            return false;
        }
        true
    }
}

fn string(
    obj: &Map<String, Value>,
    field: &str,
    path: &str,
    required: bool,
    p: &mut Problems,
) -> Option<String> {
    match obj.get(field) {
        None | Some(Value::Null) => {
            if required {
                p.push(path, "is required");
            }
            None
        }
        Some(Value::String(s)) if s.trim().is_empty() && required => {
            p.push(path, "must not be empty");
            None
        }
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => {
            p.push(path, format!("must be a string, got {}", kind(other)));
            None
        }
    }
}

fn string_list(obj: &Map<String, Value>, field: &str, path: &str, p: &mut Problems) -> Vec<String> {
    match obj.get(field) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .filter_map(|(i, v)| match v {
                Value::String(s) => Some(s.clone()),
                other => {
                    p.push(
                        &format!("{path}[{i}]"),
                        format!("must be a string, got {}", kind(other)),
                    );
                    None
                }
            })
            .collect(),
        Some(other) => {
            p.push(
                path,
                format!("must be an array of strings, got {}", kind(other)),
            );
            Vec::new()
        }
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn valid_env_name(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(f) if f.is_ascii_alphabetic() || f == '_')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
}

/// A relative path that stays inside the release (no `..`, not absolute).
fn inside_release(rel: &str) -> bool {
    let p = Path::new(rel);
    !rel.is_empty()
        && p.is_relative()
        && p.components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// The key no connector may have: the runtime's own names start with `tutti_` (SPEC §16).
pub const RESERVED_KEY: &str = "tutti";

pub fn parse(value: &Value, dir: &Path) -> Result<Manifest, Vec<String>> {
    let mut p = Problems(Vec::new());
    let Some(root) = value.as_object() else {
        return Err(vec!["connector.json: must be a JSON object".into()]);
    };
    let key = string(root, "key", "key", true, &mut p).unwrap_or_default();
    if !key.is_empty() && !tutti_proto::key::is_valid(&key) {
        p.push(
            "key",
            format!("must match ^[a-z][a-z0-9-]{{0,23}}$, got {key:?}"),
        );
    }
    if key == RESERVED_KEY {
        p.push(
            "key",
            format!(
                "{key:?} is reserved for the runtime's own tools and prompts; choose another key"
            ),
        );
    }
    let name = string(root, "name", "name", true, &mut p).unwrap_or_default();
    let description = string(root, "description", "description", true, &mut p).unwrap_or_default();
    let version = string(root, "version", "version", true, &mut p).unwrap_or_default();
    p.fits("name", &name, limits::NAME);
    p.fits("description", &description, limits::DESCRIPTION);
    p.fits("version", &version, limits::VERSION);

    let mcp = match root.get("mcp") {
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) => parse_mcp(m, &mut p),
        Some(other) => {
            p.push("mcp", format!("must be an object, got {}", kind(other)));
            None
        }
    };
    let cli = match root.get("cli") {
        None | Some(Value::Null) => None,
        Some(Value::Object(c)) => parse_cli(c, dir, &mut p),
        Some(other) => {
            p.push("cli", format!("must be an object, got {}", kind(other)));
            None
        }
    };
    let skills = parse_skills(root, dir, &mut p);
    // Given means present, not null and not an empty list (`"mcp": null` or `"skills": []`
    // declare nothing); a field that is given but invalid has its own problem already.
    let given = |field: &str| match root.get(field) {
        None | Some(Value::Null) => false,
        Some(Value::Array(a)) => !a.is_empty(),
        Some(_) => true,
    };
    if !given("mcp") && !given("cli") && !given("skills") {
        p.push("mcp", "at least one of mcp, cli, skills must be present");
    }
    let (start_ms, call_ms) = parse_timeouts(root, &mut p);
    let tool_risk = parse_tool_risk(root, &mut p);
    let circuit = crate::circuit::parse(root).unwrap_or_else(|problems| {
        for (field, problem) in problems {
            p.push(&field, problem);
        }
        crate::circuit::Settings::default()
    });
    if p.0.is_empty() {
        Ok(Manifest {
            key,
            name,
            description,
            version,
            mcp,
            cli,
            skills,
            start_ms,
            call_ms,
            tool_risk,
            circuit,
        })
    } else {
        Err(p.0)
    }
}

/// `cli`: its entrypoint must be an executable file inside the release.
fn parse_cli(c: &serde_json::Map<String, Value>, dir: &Path, p: &mut Problems) -> Option<Cli> {
    let entrypoint = string(c, "entrypoint", "cli.entrypoint", true, p).unwrap_or_default();
    if p.fits("cli.entrypoint", &entrypoint, limits::PATH) && !entrypoint.is_empty() {
        if !inside_release(&entrypoint) {
            p.push(
                "cli.entrypoint",
                format!("must be a relative path inside the release, got {entrypoint:?}"),
            );
        } else if !dir.join(&entrypoint).is_file() {
            p.push(
                "cli.entrypoint",
                format!("{entrypoint:?} does not exist in the release"),
            );
        } else if cfg!(unix)
            && !std::fs::metadata(dir.join(&entrypoint))
                .is_ok_and(|m| crate::release::executable(&m))
        {
            // The shim execs it: caught here rather than as a failing command later.
            p.push(
                "cli.entrypoint",
                format!("{entrypoint:?} is not executable (chmod +x it in the release)"),
            );
        }
    }
    let secrets = string_list(c, "secrets", "cli.secrets", p);
    check_secret_names(&secrets, "cli.secrets", p);
    Some(Cli {
        entrypoint,
        secrets,
    })
}

/// `skills`: directories inside the release, each with a `SKILL.md` within limits.
fn parse_skills(root: &serde_json::Map<String, Value>, dir: &Path, p: &mut Problems) -> Vec<Skill> {
    let mut skills = Vec::new();
    for (i, rel) in string_list(root, "skills", "skills", p)
        .into_iter()
        .enumerate()
    {
        let field = format!("skills[{i}]");
        if !p.fits(&field, &rel, limits::PATH) {
            continue;
        }
        if !inside_release(&rel) {
            p.push(
                &field,
                format!("must be a directory inside the release, got {rel:?}"),
            );
            continue;
        }
        match crate::skills::read_skill(dir, Path::new(&rel)) {
            Ok(meta) if !skill_fits(&field, &meta, p) => {}
            Ok(meta) => skills.push(Skill {
                dir: rel,
                name: meta.name,
                title: meta.title,
                description: meta.description,
            }),
            Err(e) => p.push(&field, e),
        }
    }
    skills
}

/// `timeouts`: `startMs` and `callMs`, or their defaults.
fn parse_timeouts(root: &serde_json::Map<String, Value>, p: &mut Problems) -> (u32, u32) {
    let (mut start_ms, mut call_ms) = (DEFAULT_START_MS, DEFAULT_CALL_MS);
    if let Some(t) = root.get("timeouts") {
        match t.as_object() {
            Some(t) => {
                for (field, slot) in [("startMs", &mut start_ms), ("callMs", &mut call_ms)] {
                    if let Some(v) = t.get(field) {
                        match v.as_u64() {
                            Some(n) if n > 0 && n <= u64::from(u32::MAX) => *slot = n as u32,
                            _ => p.push(
                                &format!("timeouts.{field}"),
                                format!(
                                    "must be a positive integer of milliseconds, at most {}, got {v}",
                                    u32::MAX
                                ),
                            ),
                        }
                    }
                }
            }
            None => p.push("timeouts", "must be an object"),
        }
    }
    (start_ms, call_ms)
}

/// `toolRisk`: a risk level per upstream tool name.
fn parse_tool_risk(
    root: &serde_json::Map<String, Value>,
    p: &mut Problems,
) -> BTreeMap<String, String> {
    let mut tool_risk = BTreeMap::new();
    if let Some(r) = root.get("toolRisk") {
        match r.as_object() {
            Some(m) => {
                for (tool, level) in m {
                    match level.as_str() {
                        Some(l @ ("low" | "medium" | "high")) => {
                            tool_risk.insert(tool.clone(), l.to_string());
                        }
                        _ => p.push(
                            &format!("toolRisk.{tool}"),
                            "must be \"low\", \"medium\" or \"high\"",
                        ),
                    }
                }
            }
            None => p.push("toolRisk", "must be an object"),
        }
    }
    tool_risk
}

/// A skill's front matter within [`limits`] (each problem pushed).
fn skill_fits(field: &str, meta: &crate::skills::SkillMeta, p: &mut Problems) -> bool {
    let name = p.fits(&format!("{field}: SKILL.md name"), &meta.name, limits::NAME);
    let title = meta
        .title
        .as_deref()
        .is_none_or(|t| p.fits(&format!("{field}: SKILL.md title"), t, limits::NAME));
    let description = p.fits(
        &format!("{field}: SKILL.md description"),
        &meta.description,
        limits::DESCRIPTION,
    );
    name && title && description
}

fn check_secret_names(names: &[String], field: &str, p: &mut Problems) {
    for (i, n) in names.iter().enumerate() {
        if !valid_env_name(n) {
            p.push(
                &format!("{field}[{i}]"),
                format!("{n:?} is not a valid environment variable name"),
            );
        }
    }
}

fn parse_mcp(m: &Map<String, Value>, p: &mut Problems) -> Option<Mcp> {
    match string(m, "transport", "mcp.transport", true, p)?.as_str() {
        "stdio" => Some(parse_stdio(m, p)),
        "http" => Some(parse_http(m, p)),
        other => {
            p.push(
                "mcp.transport",
                format!("must be \"stdio\" or \"http\", got {other:?}"),
            );
            None
        }
    }
}

/// When `command` is a command line (a program and its arguments in one string, as a shell
/// would take it: `npx -y @modelcontextprotocol/server-memory`), the fields that say the same,
/// split at whitespace with `args` after: `"command": "npx", "args": ["-y", "…"]`. A path
/// holding spaces (`/opt/My Tools/server`) is a program when its first word is not one.
fn command_line_fix(command: &str, args: &[String]) -> Option<String> {
    let mut words = command.split_whitespace();
    let program = words.next()?;
    let rest: Vec<&str> = words.collect();
    if rest.is_empty() {
        return None;
    }
    let bare = !program.contains('/') && !program.contains('\\');
    if !bare && (Path::new(command).exists() || !Path::new(program).is_file()) {
        return None;
    }
    let quoted: Vec<String> = rest
        .into_iter()
        .chain(args.iter().map(String::as_str))
        .map(|a| Value::from(a).to_string())
        .collect();
    Some(format!(
        "\"command\": {}, \"args\": [{}]",
        Value::from(program),
        quoted.join(", ")
    ))
}

/// A stdio upstream: command, args, cwd, env and secrets.
fn parse_stdio(m: &Map<String, Value>, p: &mut Problems) -> Mcp {
    let command = string(m, "command", "mcp.command", true, p).unwrap_or_default();
    let args = string_list(m, "args", "mcp.args", p);
    if let Some(fix) = command_line_fix(&command, &args) {
        p.push(
            "mcp.command",
            format!("must be a program name or path, not a command line: {command:?}; put the program in \"command\" and each argument in \"args\": {fix}"),
        );
    }
    let cwd = string(m, "cwd", "mcp.cwd", false, p).unwrap_or_else(|| "${release}".into());
    p.fits("mcp.command", &command, limits::PATH);
    p.fits("mcp.cwd", &cwd, limits::PATH);
    for (i, a) in args.iter().enumerate() {
        p.fits(&format!("mcp.args[{i}]"), a, limits::ARG);
    }
    let mut env = BTreeMap::new();
    match m.get("env") {
        None | Some(Value::Null) => {}
        Some(Value::Object(e)) => {
            for (k, v) in e {
                if !valid_env_name(k) {
                    p.push(
                        &format!("mcp.env.{k}"),
                        "is not a valid environment variable name",
                    );
                }
                match v.as_str() {
                    Some(s) => {
                        p.fits(&format!("mcp.env.{k}"), s, limits::ARG);
                        env.insert(k.clone(), s.to_string());
                    }
                    None => p.push(&format!("mcp.env.{k}"), "must be a string"),
                }
            }
        }
        Some(other) => p.push("mcp.env", format!("must be an object, got {}", kind(other))),
    }
    let secrets = string_list(m, "secrets", "mcp.secrets", p);
    check_secret_names(&secrets, "mcp.secrets", p);
    Mcp::Stdio {
        command,
        args,
        cwd,
        env,
        secrets,
    }
}

/// A remote upstream: its URL and how its credentials are sent.
fn parse_http(m: &Map<String, Value>, p: &mut Problems) -> Mcp {
    let url = string(m, "url", "mcp.url", true, p).unwrap_or_default();
    p.fits("mcp.url", &url, limits::PATH);
    if !(url.is_empty() || url.starts_with("https://") || url.starts_with("http://")) {
        p.push(
            "mcp.url",
            format!("must be an http:// or https:// URL, got {url:?}"),
        );
    }
    let auth = match m.get("auth") {
        None | Some(Value::Null) => Auth::None,
        Some(Value::Object(a)) => match string(a, "kind", "mcp.auth.kind", true, p).as_deref() {
            Some("none") => Auth::None,
            Some("bearer") => Auth::Bearer {
                secret: string(a, "secret", "mcp.auth.secret", true, p).unwrap_or_default(),
            },
            Some("header") => Auth::Header {
                header: string(a, "header", "mcp.auth.header", true, p).unwrap_or_default(),
                secret: string(a, "secret", "mcp.auth.secret", true, p).unwrap_or_default(),
            },
            Some("oauth") => Auth::Oauth(parse_oauth(a, &url, p)),
            Some(other) => {
                p.push(
                    "mcp.auth.kind",
                    format!("must be none, bearer, header or oauth, got {other:?}"),
                );
                Auth::None
            }
            None => Auth::None,
        },
        Some(other) => {
            p.push(
                "mcp.auth",
                format!("must be an object, got {}", kind(other)),
            );
            Auth::None
        }
    };
    if let Auth::Header { header, .. } = &auth
        && !header.is_empty()
        && !tutti_rules::mcp_header::is_token(header)
    {
        p.push(
            "mcp.auth.header",
            format!("must be an HTTP header name such as \"X-Api-Key\" (no spaces or separators), got {header:?}"),
        );
    }
    if let Auth::Bearer { secret } | Auth::Header { secret, .. } = &auth
        && !secret.is_empty()
        && !valid_env_name(secret)
    {
        p.push(
            "mcp.auth.secret",
            format!("{secret:?} is not a valid secret name"),
        );
    }
    Mcp::Http { url, auth }
}

/// `auth.kind: "oauth"`: the URL rule (https, or http to loopback only) and the optional
/// `scopes`, `clientId`, `clientSecret` (a secret name, with `clientId`) and
/// `clientMetadataUrl` (https).
fn parse_oauth(a: &Map<String, Value>, url: &str, p: &mut Problems) -> OauthSettings {
    if !url.is_empty()
        && let Err(e) = tutti_oauth::check_url(url)
    {
        p.push("mcp.url", format!("{e} (auth.kind \"oauth\")"));
    }
    let scopes = string_list(a, "scopes", "mcp.auth.scopes", p);
    let client_id = string(a, "clientId", "mcp.auth.clientId", false, p);
    let client_secret = string(a, "clientSecret", "mcp.auth.clientSecret", false, p);
    let client_metadata_url = string(
        a,
        "clientMetadataUrl",
        "mcp.auth.clientMetadataUrl",
        false,
        p,
    );
    if let Some(secret) = &client_secret {
        if !valid_env_name(secret) {
            p.push(
                "mcp.auth.clientSecret",
                format!(
                    "{secret:?} is not a valid secret name (it names the secret, not its value)"
                ),
            );
        }
        if client_id.is_none() {
            p.push(
                "mcp.auth.clientSecret",
                "needs mcp.auth.clientId".to_string(),
            );
        }
    }
    if let Some(doc) = &client_metadata_url
        && !(doc.starts_with("https://") && tutti_oauth::check_url(doc).is_ok())
    {
        p.push(
            "mcp.auth.clientMetadataUrl",
            format!("must be an https URL, got {doc:?}"),
        );
    }
    OauthSettings {
        scopes,
        client_id,
        client_secret,
        client_metadata_url,
    }
}

/// Expands `${release}` and `${state}`.
pub fn expand(s: &str, release: &Path, state: &Path) -> String {
    s.replace("${release}", &release.to_string_lossy())
        .replace("${state}", &state.to_string_lossy())
}

/// The exact stdio launch: command resolved (absolute or on `path_var`), cwd absolute after
/// expansion, relative args that name existing files resolved against cwd, env = base + env
/// (secrets are added by the caller). Problems name the field.
pub fn stdio_launch(
    command: &str,
    args: &[String],
    cwd: &str,
    env: &BTreeMap<String, String>,
    release: &Path,
    state: &Path,
    base_env: &BTreeMap<String, String>,
) -> Result<StdioLaunch, Vec<String>> {
    stdio_launch_from(command, args, cwd, env, release, release, state, base_env)
}

/// [`stdio_launch`] for a release that is not copied yet: `${release}` expands to `release`
/// (where it will live), but files under it are looked up in `files` (the source directory
/// whose content the copy will hold). Without this, a release whose command is a file of
/// its own (`"command": "${release}/bin/server"`) could never be installed.
#[allow(clippy::too_many_arguments)]
pub fn stdio_launch_from(
    command: &str,
    args: &[String],
    cwd: &str,
    env: &BTreeMap<String, String>,
    release: &Path,
    files: &Path,
    state: &Path,
    base_env: &BTreeMap<String, String>,
) -> Result<StdioLaunch, Vec<String>> {
    // Where a path under `release` is on disk right now.
    let on_disk = |p: &Path| match p.strip_prefix(release) {
        Ok(rest) if release != files => files.join(rest),
        _ => p.to_path_buf(),
    };
    let mut problems = Vec::new();
    let cwd_expanded = expand(cwd, release, state);
    let cwd_path = PathBuf::from(&cwd_expanded);
    if !cwd_path.is_absolute() {
        problems.push(format!(
            "connector.json: mcp.cwd: must be an absolute path after expansion, got {cwd_expanded:?}"
        ));
    } else if !on_disk(&cwd_path).is_dir() {
        // Caught here, not as a crash loop once the upstream cannot start in it.
        problems.push(format!(
            "connector.json: mcp.cwd: {cwd_expanded:?} is not an existing directory"
        ));
    }
    let cmd = expand(command, release, state);
    let path_var = base_env.get("PATH").map(String::as_str).unwrap_or("");
    let program = match resolve_command(&cmd, release, files, path_var) {
        Ok(p) => Some(p),
        Err(e) => {
            problems.push(format!("connector.json: mcp.command: {e}"));
            None
        }
    };
    let args = args
        .iter()
        .map(|a| {
            let a = expand(a, release, state);
            let candidate = cwd_path.join(&a);
            if Path::new(&a).is_relative()
                && !a.starts_with('-')
                && cwd_path.is_absolute()
                && on_disk(&candidate).exists()
            {
                candidate.to_string_lossy().into_owned()
            } else {
                a
            }
        })
        .collect();
    let mut full_env = base_env.clone();
    for (k, v) in env {
        full_env.insert(k.clone(), expand(v, release, state));
    }
    match (problems.is_empty(), program) {
        (true, Some(program)) => Ok(StdioLaunch {
            program,
            args,
            cwd: cwd_path,
            env: full_env,
        }),
        _ => Err(problems),
    }
}

/// The program `cmd` (expanded) names, by its real path (`..` and symlinks resolved) before
/// any check (SPEC §12). A path into the release is looked up in `files` and comes back as
/// the same file in `release`, which is where it runs (the kernel's hashed copy); one whose
/// `..` lead out of the release comes back as its real path. Any other absolute path, and
/// the program PATH gives for a bare name, come back as they are: the launch allowlist
/// judges them by their real path ([`crate::allowlist::check`]), and they run by the path
/// the person confirmed (a multi-call binary behind a link still sees its name).
fn resolve_command(
    cmd: &str,
    release: &Path,
    files: &Path,
    path_var: &str,
) -> Result<PathBuf, String> {
    let cmd_path = Path::new(cmd);
    if !cmd_path.is_absolute() {
        return crate::spawn::resolve_program(cmd, path_var);
    }
    let Ok(rest) = cmd_path.strip_prefix(release) else {
        // Runs as written; the allowlist judges its real path.
        return crate::spawn::resolve_program(cmd, path_var);
    };
    let real = std::fs::canonicalize(files.join(rest))
        .map_err(|_| format!("{cmd:?} does not exist in the release"))?;
    if !real.is_file() {
        return Err(format!("{cmd:?} is not a file"));
    }
    let root = std::fs::canonicalize(files).map_err(|e| format!("{}: {e}", files.display()))?;
    Ok(match real.strip_prefix(&root) {
        Ok(inner) => release.join(inner),
        // `..` led out of the release: what it really is.
        Err(_) => real,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dir() -> PathBuf {
        std::env::temp_dir()
    }

    #[test]
    fn the_key_tutti_is_reserved() {
        let v = json!({"key":"tutti","name":"T","description":"d","version":"1",
            "cli":{"entrypoint":"bin/x"}});
        let e = parse(&v, &dir()).expect_err("must be refused");
        assert!(
            e.iter()
                .any(|l| l.starts_with("connector.json: key: \"tutti\" is reserved")),
            "{e:?}"
        );
        let ok = json!({"key":"tutti-x","name":"T","description":"d","version":"1",
            "cli":{"entrypoint":"bin/x"}});
        let e = parse(&ok, &dir()).err().unwrap_or_default();
        assert!(!e.iter().any(|l| l.contains("reserved")), "{e:?}");
    }

    #[test]
    fn problems_name_each_field() {
        let v = json!({"key":"Bad_Key","version":3,"mcp":{"transport":"stdio","command":"node server.js"},"timeouts":{"startMs":-1}});
        let e = parse(&v, &dir()).expect_err("must be refused");
        let all = e.join("\n");
        for needle in [
            "key: must match",
            "name: is required",
            "description: is required",
            "version: must be a string",
            "mcp.command: must be a program name or path, not a command line: \"node server.js\"; put the program in \"command\" and each argument in \"args\": \"command\": \"node\", \"args\": [\"server.js\"]",
            "timeouts.startMs",
        ] {
            assert!(all.contains(needle), "missing {needle:?} in\n{all}");
        }
        assert!(e.iter().all(|l| l.starts_with("connector.json: ")));
    }

    #[test]
    fn a_command_line_in_command_gets_the_split_fields() {
        let v = json!({"key":"memory","name":"M","description":"d","version":"1",
            "mcp":{"transport":"stdio","command":"npx -y @modelcontextprotocol/server-memory"}});
        let all = parse(&v, &dir()).expect_err("must be refused").join("\n");
        assert!(
            all.contains(
                r#""command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"]"#
            ),
            "{all}"
        );
        assert!(!all.contains("${release}"), "{all}");
        let with_args = json!({"key":"k","name":"K","description":"d","version":"1",
            "mcp":{"transport":"stdio","command":"uvx mcp-server-time","args":["--local-timezone","UTC"]}});
        let all = parse(&with_args, &dir())
            .expect_err("must be refused")
            .join("\n");
        assert!(
            all.contains(
                r#""command": "uvx", "args": ["mcp-server-time", "--local-timezone", "UTC"]"#
            ),
            "{all}"
        );
        assert_eq!(command_line_fix("/opt/My Tools/server", &[]), None);
        assert_eq!(command_line_fix("npx", &[]), None);
    }

    #[test]
    fn a_null_or_empty_interface_declares_nothing() {
        let base = json!({"key":"k","name":"K","description":"d","version":"1"});
        for extra in [
            json!({}),
            json!({"mcp": null}),
            json!({"cli": null, "skills": []}),
        ] {
            let mut v = base.clone();
            if let (Some(m), Some(e)) = (v.as_object_mut(), extra.as_object()) {
                m.extend(e.clone());
            }
            let e = parse(&v, &dir()).expect_err("no interface must be refused");
            assert_eq!(
                e,
                vec!["connector.json: mcp: at least one of mcp, cli, skills must be present"],
                "{v}"
            );
        }
        // An interface that is given but invalid is reported once, under its own field.
        let mut v = base.clone();
        v["mcp"] = json!({"transport": "ftp"});
        let e = parse(&v, &dir()).expect_err("must be refused");
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].contains("mcp.transport"), "{e:?}");
    }

    #[test]
    fn an_auth_header_must_be_a_header_name() {
        let mut v = json!({"key":"k","name":"K","description":"d","version":"1",
            "mcp":{"transport":"http","url":"https://x/mcp",
                   "auth":{"kind":"header","header":"X Api Key","secret":"API_KEY"}}});
        let e = parse(&v, &dir()).expect_err("must be refused");
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].starts_with("connector.json: mcp.auth.header: "),
            "{e:?}"
        );
        v["mcp"]["auth"]["header"] = json!("X-Api-Key");
        assert!(parse(&v, &dir()).is_ok());
    }

    #[test]
    fn an_oauth_connector_needs_https_or_loopback_and_names_its_client_secret() {
        let mut v = json!({"key":"k","name":"K","description":"d","version":"1",
            "mcp":{"transport":"http","url":"http://mcp.example.com/mcp",
                   "auth":{"kind":"oauth","scopes":["read"]}}});
        let e = parse(&v, &dir()).expect_err("plain http is refused");
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].starts_with("connector.json: mcp.url: "), "{e:?}");
        assert!(e[0].contains("must use https"), "{e:?}");
        for ok in ["https://mcp.example.com/mcp", "http://127.0.0.1:9/mcp"] {
            v["mcp"]["url"] = json!(ok);
            let m = parse(&v, &dir());
            assert!(
                m.as_ref().is_ok_and(|m| m.secret_names().is_empty()),
                "{ok}: {:?}",
                m.err()
            );
        }
        v["mcp"]["auth"]["clientSecret"] = json!("CLIENT_SECRET");
        let e = parse(&v, &dir()).expect_err("a client secret needs a client id");
        assert!(
            e[0].contains("mcp.auth.clientSecret: needs mcp.auth.clientId"),
            "{e:?}"
        );
        v["mcp"]["auth"]["clientId"] = json!("tutti");
        v["mcp"]["auth"]["clientMetadataUrl"] = json!("http://x.example/client.json");
        let e = parse(&v, &dir()).expect_err("the metadata document must be https");
        assert!(e[0].contains("mcp.auth.clientMetadataUrl"), "{e:?}");
        v["mcp"]["auth"]["clientMetadataUrl"] = json!("https://x.example/client.json");
        let m = parse(&v, &dir());
        assert_eq!(
            m.map(|m| m.secret_names()).ok(),
            Some(vec!["CLIENT_SECRET".to_string()])
        );
    }

    #[test]
    #[cfg_attr(
        windows,
        ignore = "its fixtures are Unix paths (/bin/sh, /nonexistent), which are not absolute on Windows"
    )]
    fn cwd_must_be_absolute_after_expansion() {
        let base = BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]);
        let e = stdio_launch(
            "/bin/sh",
            &[],
            "rel/dir",
            &BTreeMap::new(),
            Path::new("/r"),
            Path::new("/s"),
            &base,
        )
        .expect_err("must be refused");
        assert_eq!(e, vec!["connector.json: mcp.cwd: must be an absolute path after expansion, got \"rel/dir\"".to_string()]);
    }

    #[test]
    #[cfg_attr(
        windows,
        ignore = "its fixture runs `sh` from a Unix PATH, which Windows does not have"
    )]
    fn placeholders_and_relative_args() {
        let tmp = tempdir();
        let rel = tmp.path().to_path_buf();
        std::fs::write(rel.join("server.js"), "").expect("write");
        let base = BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]);
        let env = BTreeMap::from([("DATA".to_string(), "${state}/data".to_string())]);
        let l = stdio_launch(
            "sh",
            &["server.js".into(), "--x".into(), "missing.txt".into()],
            "${release}",
            &env,
            &rel,
            Path::new("/st"),
            &base,
        )
        .expect("ok");
        assert!(l.program.is_absolute());
        assert_eq!(l.args[0], rel.join("server.js").to_string_lossy());
        assert_eq!(l.args[1], "--x");
        assert_eq!(l.args[2], "missing.txt");
        assert_eq!(l.cwd, rel);
        assert_eq!(l.env.get("DATA").map(String::as_str), Some("/st/data"));
        let e = stdio_launch(
            "no-such-program-xyz",
            &[],
            "/",
            &BTreeMap::new(),
            &rel,
            Path::new("/st"),
            &base,
        )
        .expect_err("must be refused");
        assert!(e[0].contains("not found on PATH"), "{e:?}");
    }

    #[test]
    #[cfg_attr(
        windows,
        ignore = "its fixtures are Unix paths (/bin/sh, /nonexistent), which are not absolute on Windows"
    )]
    fn a_command_inside_a_release_not_copied_yet_is_checked_in_the_source() {
        let tmp = tempdir();
        let src = tmp.path().join("src-release");
        std::fs::create_dir_all(src.join("bin")).expect("mkdir");
        std::fs::write(src.join("bin/server"), "#!/bin/sh\n").expect("write");
        std::fs::write(src.join("data.txt"), "").expect("write");
        let dest = Path::new("/nonexistent/releases/k/abc");
        let base = BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]);
        let l = stdio_launch_from(
            "${release}/bin/server",
            &["data.txt".into()],
            "${release}",
            &BTreeMap::new(),
            dest,
            &src,
            Path::new("/st"),
            &base,
        )
        .expect("valid against the source");
        // What will run is the copy's path, not the source's.
        assert_eq!(l.program, dest.join("bin/server"));
        assert_eq!(
            l.args,
            vec![dest.join("data.txt").to_string_lossy().into_owned()]
        );
        assert_eq!(l.cwd, dest);
        let e = stdio_launch_from(
            "${release}/bin/missing",
            &[],
            "${release}",
            &BTreeMap::new(),
            dest,
            &src,
            Path::new("/st"),
            &base,
        )
        .expect_err("must be refused");
        assert!(
            e[0].contains("mcp.command") && e[0].contains("does not exist"),
            "{e:?}"
        );
        // A working directory that is not there (in the release or outside it) is refused
        // now, not found out by a crash loop later.
        for cwd in ["${release}/sub", "/nonexistent/dir"] {
            let e = stdio_launch_from(
                "${release}/bin/server",
                &[],
                cwd,
                &BTreeMap::new(),
                dest,
                &src,
                Path::new("/st"),
                &base,
            )
            .expect_err("must be refused");
            assert!(
                e[0].contains("mcp.cwd") && e[0].contains("not an existing directory"),
                "{cwd}: {e:?}"
            );
        }
        // Once copied, the release itself is checked.
        assert!(
            stdio_launch(
                "${release}/bin/server",
                &[],
                "${release}",
                &BTreeMap::new(),
                dest,
                Path::new("/st"),
                &base
            )
            .is_err()
        );
    }

    #[test]
    fn launch_problems_complete_field_problems_without_repeating_a_field() {
        let tmp = tempdir();
        let dir = tmp.path().join("launchy");
        std::fs::create_dir_all(&dir).expect("mkdir");
        let base = BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]);
        let write =
            |v: Value| std::fs::write(dir.join("connector.json"), v.to_string()).expect("write");
        write(
            json!({"key":"launchy","version":"1","mcp":{"transport":"stdio","command":"no-such-program-tutti","cwd":"rel/dir"}}),
        );
        let field_problems = load(&dir).expect_err("name and description are missing");
        let launch = launch_problems(&dir, Path::new("/st"), &base, &field_problems);
        assert_eq!(launch.len(), 2, "{launch:?}");
        assert!(
            launch
                .iter()
                .any(|l| l.starts_with("connector.json: mcp.command: ")),
            "{launch:?}"
        );
        assert!(
            launch
                .iter()
                .any(|l| l.starts_with("connector.json: mcp.cwd: ")),
            "{launch:?}"
        );
        // A shell command line is already refused by the field check: not twice.
        write(
            json!({"key":"launchy","version":"1","mcp":{"transport":"stdio","command":"node server.js"}}),
        );
        let field_problems = load(&dir).expect_err("refused");
        assert!(launch_problems(&dir, Path::new("/st"), &base, &field_problems).is_empty());
    }

    #[cfg(unix)]
    #[test]
    fn a_cli_entrypoint_must_be_executable() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempdir();
        let d = tmp.path().join("cli-exec");
        std::fs::create_dir_all(&d).expect("mkdir");
        std::fs::write(d.join("run.sh"), "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(d.join("run.sh"), std::fs::Permissions::from_mode(0o644))
            .expect("chmod");
        let v = json!({"key":"k","name":"K","description":"d","version":"1",
            "cli":{"entrypoint":"run.sh"}});
        let e = parse(&v, &d).expect_err("must be refused");
        assert!(
            e[0].contains("cli.entrypoint") && e[0].contains("not executable"),
            "{e:?}"
        );
        std::fs::set_permissions(d.join("run.sh"), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        assert!(parse(&v, &d).is_ok());
    }

    #[cfg(unix)]
    #[test]
    fn commands_resolve_to_their_real_path_and_release_files_to_the_copy() {
        let tmp = tempdir();
        let src = tmp.path().join("resolve-src");
        std::fs::create_dir_all(src.join("bin")).expect("mkdir");
        std::fs::create_dir_all(src.join("sub")).expect("mkdir");
        std::fs::write(src.join("bin/server"), "#!/bin/sh\n").expect("write");
        let dest = Path::new("/nonexistent/releases/k/abc");
        let resolve =
            |cmd: &str| resolve_command(&expand(cmd, dest, dest), dest, &src, "/usr/bin:/bin");
        assert_eq!(
            resolve("${release}/sub/../bin/server").as_deref(),
            Ok(dest.join("bin/server").as_path()),
            "`..` inside the release: the copy's file, written plainly"
        );
        let out =
            resolve(&format!("${{release}}/{}bin/sh", "../".repeat(40))).expect("resolves outside");
        assert!(!out.starts_with(dest), "{out:?}");
        assert!(
            !out.components().any(|c| c == Component::ParentDir),
            "{out:?}"
        );
        assert!(resolve("${release}/bin/missing").is_err());
        assert!(
            resolve("${release}/sub").is_err(),
            "a directory is not a program"
        );
    }

    #[test]
    fn injection_variables_are_refused_unless_allowed() {
        let v = json!({"key":"k","name":"K","description":"d","version":"1",
            "mcp":{"transport":"stdio","command":"/bin/sh",
                   "env":{"LOG_LEVEL":"warn","NODE_OPTIONS":"--require x","ld_preload":"/x"},
                   "secrets":["TOKEN","PYTHONPATH"]}});
        let m = parse(&v, &dir()).expect("valid fields");
        let p = injection_problems(&m, &[]);
        assert_eq!(p.len(), 3, "{p:?}");
        for needle in [
            "mcp.env.NODE_OPTIONS: ",
            "mcp.env.ld_preload: ",
            "mcp.secrets[1]: PYTHONPATH",
        ] {
            assert!(p.iter().any(|l| l.contains(needle)), "{needle}: {p:?}");
        }
        assert!(p.iter().all(|l| l.contains("--allow-env ")), "{p:?}");
        let allowed = [
            "NODE_OPTIONS".into(),
            "LD_PRELOAD".into(),
            "PYTHONPATH".into(),
        ];
        assert!(injection_problems(&m, &allowed).is_empty());
    }

    /// One row per variable: refused (the line names it and the way out) or left alone.
    #[test]
    fn variables_that_load_code_from_outside_the_release_are_refused() {
        let rows: &[(&str, bool)] = &[
            ("HOME", true),
            ("home", true),
            ("XDG_CONFIG_HOME", true),
            ("XDG_DATA_DIRS", true),
            ("npm_config_node_options", true),
            ("NPM_CONFIG_SCRIPT_SHELL", true),
            ("PIP_INDEX_URL", true),
            ("UV_INDEX_URL", true),
            ("UV_PYTHON", true),
            ("PYTHONUSERBASE", true),
            ("PYTHONSTARTUP", true),
            ("PYTHONBREAKPOINT", true),
            ("PERL5OPT", true),
            ("PERL5DB", true),
            ("RUBYOPT", true),
            ("RUBYLIB", true),
            ("JAVA_TOOL_OPTIONS", true),
            ("_JAVA_OPTIONS", true),
            ("GIT_SSH_COMMAND", true),
            ("GIT_CONFIG_GLOBAL", true),
            ("GIT_CONFIG_COUNT", true),
            ("GIT_EXEC_PATH", true),
            ("BASH_FUNC_X", true),
            ("LOG_LEVEL", false),
            ("GITHUB_TOKEN", false),
            ("GIT_AUTHOR_NAME", false),
            ("HOMEPAGE", false),
            ("PYTHONUNBUFFERED", false),
            ("NODE_ENV", false),
        ];
        for (name, refused) in rows {
            let v = json!({"key":"k","name":"K","description":"d","version":"1",
                "mcp":{"transport":"stdio","command":"/bin/sh","env":{*name: "/tmp/x"}}});
            let m = parse(&v, &dir()).expect("valid fields");
            let lines = injection_problems(&m, &[]);
            if *refused {
                assert_eq!(lines.len(), 1, "{name}: {lines:?}");
                assert!(
                    lines[0].starts_with(&format!("connector.json: mcp.env.{name}: {name} is "))
                        && lines[0].ends_with(&format!("install with --allow-env {name}")),
                    "{name}: {lines:?}"
                );
                assert!(injection_problems(&m, &[name.to_string()]).is_empty());
            } else {
                assert!(lines.is_empty(), "{name}: {lines:?}");
            }
        }
    }

    #[test]
    fn text_fields_have_limits() {
        let mut v = json!({"key":"k","name":"K","description":"d","version":"1",
            "mcp":{"transport":"stdio","command":"/bin/sh","args":["a"]}});
        assert!(parse(&v, &dir()).is_ok());
        v["description"] = json!("d".repeat(limits::DESCRIPTION + 1));
        v["name"] = json!("n".repeat(limits::NAME + 1));
        v["mcp"]["args"] = json!(["a".repeat(limits::ARG + 1)]);
        let e = parse(&v, &dir()).expect_err("too long");
        assert_eq!(e.len(), 3, "{e:?}");
        assert!(
            e[0].starts_with("connector.json: name: is 257 bytes, longer than the 256-byte limit"),
            "{e:?}"
        );
        assert!(
            e[1].starts_with("connector.json: description: is 4097 bytes"),
            "{e:?}"
        );
        assert!(e[2].starts_with("connector.json: mcp.args[0]: "), "{e:?}");
    }

    /// A fresh directory, removed when the returned value drops.
    fn tempdir() -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix("tutti-manifest-test-")
            .tempdir()
            .unwrap_or_else(|e| panic!("tempdir: {e}"))
    }
}

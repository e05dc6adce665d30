//! Parsing and validating `connector.json`, one line per problem naming the field.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value};

use super::fields::*;
use super::model::*;
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
pub(super) fn parse_cli(
    c: &serde_json::Map<String, Value>,
    dir: &Path,
    p: &mut Problems,
) -> Option<Cli> {
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
pub(super) fn parse_skills(
    root: &serde_json::Map<String, Value>,
    dir: &Path,
    p: &mut Problems,
) -> Vec<Skill> {
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
pub(super) fn parse_timeouts(
    root: &serde_json::Map<String, Value>,
    p: &mut Problems,
) -> (u32, u32) {
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
pub(super) fn parse_tool_risk(
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
pub(super) fn skill_fits(field: &str, meta: &crate::skills::SkillMeta, p: &mut Problems) -> bool {
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

pub(super) fn check_secret_names(names: &[String], field: &str, p: &mut Problems) {
    for (i, n) in names.iter().enumerate() {
        if !valid_env_name(n) {
            p.push(
                &format!("{field}[{i}]"),
                format!("{n:?} is not a valid environment variable name"),
            );
        }
    }
}

pub(super) fn parse_mcp(m: &Map<String, Value>, p: &mut Problems) -> Option<Mcp> {
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
pub(super) fn command_line_fix(command: &str, args: &[String]) -> Option<String> {
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
pub(super) fn parse_stdio(m: &Map<String, Value>, p: &mut Problems) -> Mcp {
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
pub(super) fn parse_http(m: &Map<String, Value>, p: &mut Problems) -> Mcp {
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
pub(super) fn parse_oauth(a: &Map<String, Value>, url: &str, p: &mut Problems) -> OauthSettings {
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

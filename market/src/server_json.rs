//! A `server.json` document (MCP Registry schema 2025-12-11; unknown fields tolerated) to a
//! `connector.json` (SPEC §3, §17).
//!
//! [`plan`] picks the package (or remote) and maps everything but the launch line: the key,
//! name, description, version, `env`, secret names and the package's own arguments. A package
//! is then pinned; [`compose`] puts the pinned launch (command, argument prefix, env) in front
//! of the package arguments. A remote needs no pinning: its plan is already whole.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::MarketError;
use crate::plan::{PackageRef, Pinned};

/// The package types the runtime pins and runs.
pub const SUPPORTED: [&str; 4] = ["npm", "pypi", "mcpb", "oci"];

/// The parts of `server.json` the mapping reads.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerJson {
    pub name: String,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    pub version: String,
    #[serde(default)]
    pub packages: Vec<Package>,
    #[serde(default)]
    pub remotes: Vec<Remote>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Package {
    pub registry_type: String,
    pub identifier: String,
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    pub file_sha256: Option<String>,
    #[serde(default)]
    pub transport: Option<Transport>,
    #[serde(default)]
    pub runtime_arguments: Vec<Argument>,
    #[serde(default)]
    pub package_arguments: Vec<Argument>,
    #[serde(default)]
    pub environment_variables: Vec<Input>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Transport {
    #[serde(rename = "type")]
    pub kind: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Remote {
    #[serde(rename = "type")]
    pub kind: String,
    pub url: String,
    #[serde(default)]
    pub headers: Vec<Input>,
    #[serde(default)]
    pub variables: BTreeMap<String, Input>,
}

/// An argument (`positional` or `named`).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Argument {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub value_hint: Option<String>,
    #[serde(flatten)]
    pub input: Input,
}

/// An input: an environment variable, a header, a variable or the value part of an argument.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Input {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub value: Option<String>,
    #[serde(default)]
    pub default: Option<String>,
    #[serde(default)]
    pub is_required: bool,
    #[serde(default)]
    pub is_secret: bool,
    #[serde(default)]
    pub variables: BTreeMap<String, Input>,
}

/// What the person chose for the mapping.
#[derive(Debug, Clone, Default)]
pub struct Choices {
    /// `--set NAME=VALUE`.
    pub set: BTreeMap<String, String>,
    /// `--package N` (0-based).
    pub package: Option<usize>,
    /// `--remote N` (0-based).
    pub remote: Option<usize>,
    /// `--key K`.
    pub key: Option<String>,
}

/// `connector.json` without its launch line, and what to pin for it.
#[derive(Debug, Clone, PartialEq)]
pub struct ReleasePlan {
    /// The manifest; for a package its `mcp` lacks `command` and `args` until [`compose`].
    pub manifest: Value,
    /// The package to pin (`None` for a remote).
    pub package: Option<PackageRef>,
    /// Arguments of the runtime (`docker run` options of an `oci` package).
    pub runtime_args: Vec<String>,
    /// The package's own arguments, after the pinned launch.
    pub package_args: Vec<String>,
}

impl ReleasePlan {
    /// The remote's URL, when the plan is a remote.
    pub fn remote_url(&self) -> Option<&str> {
        (self.manifest["mcp"]["transport"] == "http")
            .then(|| self.manifest["mcp"]["url"].as_str())
            .flatten()
    }

    /// A remote without a secret header: `auth.kind: oauth` (its server answered 401 with
    /// protected-resource metadata).
    pub fn use_oauth(&mut self) {
        if self.remote_url().is_some() && self.manifest["mcp"]["auth"]["kind"] == "none" {
            self.manifest["mcp"]["auth"] = json!({"kind": "oauth"});
        }
    }

    /// Adds what a launch line around the package gives (an imported entry, SPEC §18): its
    /// arguments after the package's, runtime options, plain env and secret names.
    pub fn extend_launch(
        &mut self,
        args: &[String],
        runtime_args: &[String],
        env: &BTreeMap<String, String>,
        secrets: &[String],
    ) {
        self.package_args.extend(args.iter().cloned());
        self.runtime_args.extend(runtime_args.iter().cloned());
        let mcp = &mut self.manifest["mcp"];
        if !env.is_empty() {
            let mut all: Map<String, Value> = mcp["env"].as_object().cloned().unwrap_or_default();
            all.extend(env.iter().map(|(k, v)| (k.clone(), json!(v))));
            mcp["env"] = Value::Object(all);
        }
        add_secrets(mcp, secrets);
    }

    /// Every secret name the manifest declares.
    pub fn secret_names(&self) -> Vec<String> {
        let mcp = &self.manifest["mcp"];
        let mut names: Vec<String> = mcp["secrets"]
            .as_array()
            .into_iter()
            .flatten()
            .chain(std::iter::once(&mcp["auth"]["secret"]))
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

/// Reads a document; unknown fields are tolerated.
pub fn parse(bytes: &[u8]) -> Result<ServerJson, MarketError> {
    serde_json::from_slice(bytes).map_err(|e| MarketError::ServerJson(e.to_string()))
}

/// Maps a document to a release plan (SPEC §17).
pub fn plan(doc: &ServerJson, choices: &Choices) -> Result<ReleasePlan, MarketError> {
    plan_with(doc, choices, None)
}

/// [`plan`] of a document the market composed for one package the person named (`given`:
/// a local bundle is allowed there, never in a document a registry serves).
pub(crate) fn plan_with(
    doc: &ServerJson,
    choices: &Choices,
    given: Option<&PackageRef>,
) -> Result<ReleasePlan, MarketError> {
    refuse_secret_settings(doc, choices)?;
    let key = key_for(doc, choices)?;
    let description = doc
        .description
        .clone()
        .filter(|d| !d.trim().is_empty())
        .unwrap_or_else(|| doc.name.clone());
    let mut manifest = json!({
        "key": key,
        "name": doc.title.clone().unwrap_or_else(|| doc.name.clone()),
        "description": description,
        "version": doc.version,
    });
    match choose(doc, choices)? {
        Chosen::Package(p) => {
            let (mcp, package_args, runtime_args) = package_launch(p, choices)?;
            manifest["mcp"] = mcp;
            Ok(ReleasePlan {
                manifest,
                package: Some(match given {
                    Some(given) => given.clone(),
                    None => package_ref(p, &doc.version)?,
                }),
                runtime_args,
                package_args,
            })
        }
        Chosen::Remote(r) => {
            manifest["mcp"] = remote(r, choices)?;
            Ok(ReleasePlan {
                manifest,
                package: None,
                runtime_args: Vec::new(),
                package_args: Vec::new(),
            })
        }
    }
}

/// The final `connector.json`: the pinned launch in front of the package arguments (an `oci`
/// package's runtime arguments go before the image, the prefix's last item).
pub fn compose(plan: &ReleasePlan, pinned: Option<&Pinned>) -> Result<Value, MarketError> {
    let mut manifest = plan.manifest.clone();
    let (Some(_), Some(pinned)) = (&plan.package, pinned) else {
        return if plan.package.is_none() {
            Ok(manifest)
        } else {
            Err(MarketError::Pin("the package was not pinned".into()))
        };
    };
    let mut args = pinned.args.clone();
    if matches!(plan.package, Some(PackageRef::Oci { .. })) && !plan.runtime_args.is_empty() {
        let image = args.pop();
        args.extend(plan.runtime_args.iter().cloned());
        args.extend(image);
    }
    args.extend(plan.package_args.iter().cloned());
    let mcp = &mut manifest["mcp"];
    mcp["command"] = json!(pinned.command);
    mcp["args"] = json!(args);
    let mut env: Map<String, Value> = mcp["env"].as_object().cloned().unwrap_or_default();
    for (name, value) in &pinned.env {
        env.insert(name.clone(), json!(value));
    }
    if !env.is_empty() {
        mcp["env"] = Value::Object(env);
    }
    add_secrets(mcp, &pinned.secrets);
    // A one-package source without a version: the version is the one pinned.
    if manifest["version"] == "" && !pinned.version.is_empty() {
        manifest["version"] = json!(pinned.version);
    }
    Ok(manifest)
}

/// Adds the secret names a pinned launch needs (a bundle's sensitive settings) to `mcp.secrets`.
fn add_secrets(mcp: &mut Value, extra: &[String]) {
    let mut names: Vec<Value> = mcp["secrets"].as_array().cloned().unwrap_or_default();
    for name in extra {
        if !names.iter().any(|n| n == name) {
            names.push(json!(name));
        }
    }
    if !names.is_empty() {
        mcp["secrets"] = Value::Array(names);
    }
}

enum Chosen<'a> {
    Package(&'a Package),
    Remote(&'a Remote),
}

fn choose<'a>(doc: &'a ServerJson, choices: &Choices) -> Result<Chosen<'a>, MarketError> {
    let out_of_range = |what: &str, n: usize, len: usize| {
        MarketError::ServerJson(format!(
            "--{what} {n}: the document has {len} {what}s (counted from 0)"
        ))
    };
    if let Some(n) = choices.remote {
        return doc
            .remotes
            .get(n)
            .map(Chosen::Remote)
            .ok_or_else(|| out_of_range("remote", n, doc.remotes.len()));
    }
    if let Some(n) = choices.package {
        let p = doc
            .packages
            .get(n)
            .ok_or_else(|| out_of_range("package", n, doc.packages.len()))?;
        return supported(p).map(|()| Chosen::Package(p));
    }
    if let Some(p) = doc
        .packages
        .iter()
        .find(|p| SUPPORTED.contains(&p.registry_type.as_str()))
    {
        return Ok(Chosen::Package(p));
    }
    if let Some(r) = doc.remotes.first() {
        return Ok(Chosen::Remote(r));
    }
    match doc.packages.first() {
        Some(p) => supported(p).map(|()| Chosen::Package(p)),
        None => Err(MarketError::ServerJson(
            "neither packages nor remotes: there is nothing to run".into(),
        )),
    }
}

fn supported(p: &Package) -> Result<(), MarketError> {
    if !SUPPORTED.contains(&p.registry_type.as_str()) {
        return Err(MarketError::UnsupportedType {
            kind: p.registry_type.clone(),
        });
    }
    match p.transport.as_ref().map(|t| t.kind.as_str()) {
        None | Some("stdio") => Ok(()),
        Some(other) => Err(MarketError::ServerJson(format!(
            "package {} runs over {other:?}; only stdio packages are run (a served URL is a remote: --remote N)",
            p.identifier
        ))),
    }
}

fn package_ref(p: &Package, doc_version: &str) -> Result<PackageRef, MarketError> {
    let version = p.version.clone().unwrap_or_else(|| doc_version.to_owned());
    Ok(match p.registry_type.as_str() {
        "npm" => PackageRef::Npm {
            name: p.identifier.clone(),
            version,
        },
        "pypi" => PackageRef::Pypi {
            name: p.identifier.clone(),
            version,
        },
        // A document names a bundle by URL; a local file is a source of its own (`./x.mcpb`),
        // never something a registry's document may point the kernel at.
        "mcpb" if !p.identifier.starts_with("https://") => {
            return Err(MarketError::ServerJson(format!(
                "mcpb package {:?}: the identifier must be an https:// URL with fileSha256; install a local bundle as ./x.mcpb",
                p.identifier
            )));
        }
        "mcpb" => PackageRef::Mcpb {
            location: p.identifier.clone(),
            sha256: p.file_sha256.clone(),
        },
        "oci" => PackageRef::Oci {
            image: match &p.version {
                Some(v) if !p.identifier.contains('@') && !has_tag(&p.identifier) => {
                    format!("{}:{v}", p.identifier)
                }
                _ => p.identifier.clone(),
            },
        },
        other => {
            return Err(MarketError::UnsupportedType {
                kind: other.to_owned(),
            });
        }
    })
}

fn has_tag(image: &str) -> bool {
    image
        .rsplit('/')
        .next()
        .is_some_and(|last| last.contains(':'))
}

/// `mcp` of a stdio package (without `command`/`args`), the package arguments and the runtime
/// arguments.
fn package_launch(
    p: &Package,
    choices: &Choices,
) -> Result<(Value, Vec<String>, Vec<String>), MarketError> {
    let package_args = arguments(&p.package_arguments, choices)?;
    let runtime_args = if p.registry_type == "oci" {
        arguments(&p.runtime_arguments, choices)?
    } else {
        // npx/uvx options of a runtime hint: the pinned launch has no such runtime.
        Vec::new()
    };
    let mut env = Map::new();
    let mut secrets = Vec::new();
    for var in &p.environment_variables {
        let name = var.name.clone().unwrap_or_default();
        if name.is_empty() {
            return Err(MarketError::ServerJson(
                "an environment variable without a name".into(),
            ));
        }
        if var.is_secret {
            secrets.push(name);
            continue;
        }
        let what = format!("environment variable {name}");
        if let Some(value) = input_value(var, &name, &what, choices)? {
            env.insert(name, json!(value));
        }
    }
    let mut mcp = json!({"transport": "stdio", "cwd": "${release}"});
    if !env.is_empty() {
        mcp["env"] = Value::Object(env);
    }
    if !secrets.is_empty() {
        mcp["secrets"] = json!(secrets);
    }
    Ok((mcp, package_args, runtime_args))
}

/// Argument lists as argv items (no shell: each value is one item).
fn arguments(list: &[Argument], choices: &Choices) -> Result<Vec<String>, MarketError> {
    let mut argv = Vec::new();
    for arg in list {
        let label = arg
            .name
            .clone()
            .or_else(|| arg.value_hint.clone())
            .unwrap_or_else(|| "argument".into());
        let set_name = arg
            .value_hint
            .clone()
            .or_else(|| {
                arg.name
                    .as_deref()
                    .map(|n| n.trim_start_matches('-').to_owned())
            })
            .unwrap_or_else(|| label.clone());
        if arg.input.is_secret {
            return Err(MarketError::ServerJson(format!(
                "argument {label} is a secret, and secrets never go on a command line; choose another entry with --package N or --remote N"
            )));
        }
        let what = format!("argument {label}");
        let value = input_value(&arg.input, &set_name, &what, choices)?;
        match (arg.kind.as_str(), value) {
            ("named", value) => {
                let Some(flag) = arg.name.clone() else {
                    return Err(MarketError::ServerJson(
                        "a named argument without a name".into(),
                    ));
                };
                match value {
                    Some(v) => argv.extend([flag, v]),
                    None if arg.input.is_required => argv.push(flag),
                    None => {}
                }
            }
            ("positional", Some(v)) => argv.push(v),
            ("positional", None) => {}
            (other, _) => {
                return Err(MarketError::ServerJson(format!(
                    "argument {label}: type {other:?} is neither positional nor named"
                )));
            }
        }
    }
    Ok(argv)
}

/// The value of an input: `--set NAME`, else its `value` (variables substituted), else its
/// `default`; missing and required is an error naming `--set NAME=…`.
fn input_value(
    input: &Input,
    set_name: &str,
    what: &str,
    choices: &Choices,
) -> Result<Option<String>, MarketError> {
    if let Some(v) = choices.set.get(set_name) {
        return Ok(Some(v.clone()));
    }
    if let Some(v) = &input.value {
        return substitute(v, &input.variables, what, choices).map(Some);
    }
    if let Some(v) = &input.default {
        return Ok(Some(v.clone()));
    }
    if input.is_required {
        return Err(MarketError::MissingInput {
            what: what.to_owned(),
            name: set_name.to_owned(),
        });
    }
    Ok(None)
}

/// `{name}` in `text` replaced from `--set`, else the variable's `default`; an unset required
/// variable is an error. Unknown `{…}` stay as written.
fn substitute(
    text: &str,
    vars: &BTreeMap<String, Input>,
    what: &str,
    choices: &Choices,
) -> Result<String, MarketError> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find('{') {
        let Some(len) = rest[start..].find('}') else {
            break;
        };
        let name = &rest[start + 1..start + len];
        out.push_str(&rest[..start]);
        let value = match (choices.set.get(name), vars.get(name)) {
            (_, Some(var)) if var.is_secret => {
                return Err(MarketError::ServerJson(format!(
                    "{what}: variable {name} is a secret inside a value, which connector.json cannot hold; choose another entry with --package N or --remote N"
                )));
            }
            (Some(v), _) => v.clone(),
            (None, Some(var)) => match (&var.default, var.is_required) {
                (Some(d), _) => d.clone(),
                (None, true) => {
                    return Err(MarketError::MissingInput {
                        what: format!("{what} (variable {name})"),
                        name: name.to_owned(),
                    });
                }
                (None, false) => String::new(),
            },
            (None, None) => rest[start..start + len + 1].to_owned(),
        };
        out.push_str(&value);
        rest = &rest[start + len + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// `mcp` of a remote: `transport: http`, the URL with its variables, a secret header as
/// `auth` (bearer for `Authorization`, else header), `auth.kind: none` otherwise.
fn remote(r: &Remote, choices: &Choices) -> Result<Value, MarketError> {
    if r.kind != "streamable-http" {
        return Err(MarketError::ServerJson(format!(
            "remote transport {:?} is not supported (streamable-http is); choose another with --remote N",
            r.kind
        )));
    }
    let url = substitute(&r.url, &r.variables, "the remote's URL", choices)?;
    let mut auth = json!({"kind": "none"});
    for header in &r.headers {
        let name = header.name.clone().unwrap_or_default();
        if !header.is_secret {
            if header.is_required && header.value.is_none() && header.default.is_none() {
                return Err(MarketError::ServerJson(format!(
                    "header {name} must be sent with a fixed value, which connector.json cannot hold; choose another entry with --package N or --remote N"
                )));
            }
            continue;
        }
        if auth["kind"] != "none" {
            return Err(MarketError::ServerJson(
                "the remote needs more than one secret header; connector.json holds one".into(),
            ));
        }
        auth = if name.eq_ignore_ascii_case("authorization") {
            json!({"kind": "bearer", "secret": secret_name(header, &name)})
        } else {
            json!({"kind": "header", "header": name, "secret": secret_name(header, &name)})
        };
    }
    Ok(json!({"transport": "http", "url": url, "auth": auth}))
}

/// A header's secret name: the one variable in its value (`Bearer {api_key}` → `API_KEY`),
/// else the header name (`X-Api-Key` → `X_API_KEY`).
fn secret_name(header: &Input, name: &str) -> String {
    let from = match header.variables.keys().next() {
        Some(var) if header.variables.len() == 1 => var.as_str(),
        _ => name,
    };
    tutti_rules::secret_name::from_any(from)
}

/// `--set` never carries a secret's value: those are given with `connect`.
fn refuse_secret_settings(doc: &ServerJson, choices: &Choices) -> Result<(), MarketError> {
    let secret = doc
        .packages
        .iter()
        .flat_map(|p| &p.environment_variables)
        .chain(doc.remotes.iter().flat_map(|r| &r.headers))
        .filter(|i| i.is_secret)
        .filter_map(|i| i.name.as_deref())
        .find(|n| choices.set.contains_key(*n));
    match secret {
        Some(name) => Err(MarketError::Source(format!(
            "--set {name}: {name} is a secret; give it after the install with `tutti connector connect KEY --from-env {name}`"
        ))),
        None => Ok(()),
    }
}

/// The key (SPEC §3): `--key`, else the name's last segment, lowercased, other characters
/// to `-`, cut to 24.
fn key_for(doc: &ServerJson, choices: &Choices) -> Result<String, MarketError> {
    if let Some(k) = &choices.key {
        if tutti_proto::key::is_valid(k) && k != "tutti" {
            return Ok(k.clone());
        }
        return Err(MarketError::Source(format!(
            "--key {k:?}: a key is lowercase letters, digits and '-', starting with a letter, at most 24 characters (and not \"tutti\")"
        )));
    }
    let key = normalise_key(doc.name.rsplit('/').next().unwrap_or_default());
    if tutti_proto::key::is_valid(&key) && key != "tutti" {
        Ok(key)
    } else {
        Err(MarketError::Source(format!(
            "server {:?} gives no usable connector key; choose one with --key K",
            doc.name
        )))
    }
}

pub fn normalise_key(segment: &str) -> String {
    let mut key = String::new();
    for c in segment.chars() {
        let c = c.to_ascii_lowercase();
        let c = if c.is_ascii_lowercase() || c.is_ascii_digit() {
            c
        } else {
            '-'
        };
        if c == '-' && (key.is_empty() || key.ends_with('-')) {
            continue;
        }
        if key.is_empty() && c.is_ascii_digit() {
            continue;
        }
        key.push(c);
    }
    key.truncate(tutti_proto::key::MAX_LEN);
    key.trim_end_matches('-').to_owned()
}

#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;

//! The exact launch of a stdio release: placeholders expanded, command resolved by its
//! real path, cwd absolute, and the environment variables that would load code from outside
//! the release refused unless allowed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::fields::read_manifest;
use super::model::*;

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
/// [`crate::release::allowlist::injection_variable`]) of `mcp.env` and of the secret names, one line
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
        .filter(|(_, name)| !crate::release::allowlist::env_allowed(name, allowed))
        .filter_map(|(field, name)| {
            let row = crate::release::allowlist::injection_variable(name)?;
            Some(format!(
                "connector.json: {field}: {name} is a loader or interpreter-injection variable ({}: the program could run code from outside the release); to allow it, install with --allow-env {name}",
                row.what
            ))
        })
        .collect()
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
/// judges them by their real path ([`crate::release::allowlist::check`]), and they run by the path
/// the person confirmed (a multi-call binary behind a link still sees its name).
pub(super) fn resolve_command(
    cmd: &str,
    release: &Path,
    files: &Path,
    path_var: &str,
) -> Result<PathBuf, String> {
    let cmd_path = Path::new(cmd);
    if !cmd_path.is_absolute() {
        return crate::supervisor::spawn::resolve_program(cmd, path_var);
    }
    let Ok(rest) = cmd_path.strip_prefix(release) else {
        // Runs as written; the allowlist judges its real path.
        return crate::supervisor::spawn::resolve_program(cmd, path_var);
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

//! The first half of an install: validate a release folder and describe exactly what would
//! run (the confirmation summary, SPEC §12). Writes nothing and starts no process.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tonic::Status;
use tutti_proto::kernel as pb;

use crate::guards::precondition;
use crate::release::manifest::{self, Manifest, Mcp};
use crate::state::{Inner, Kernel, lock};

/// What to install: a prepared release folder and what the person allowed for it.
#[derive(Clone, Debug, Default)]
pub struct Install {
    /// The folder that holds `connector.json` (absolute).
    pub folder: PathBuf,
    /// Program names allowed for this install (`--allow-command`).
    pub allow_commands: Vec<String>,
    /// Loader/interpreter-injection variables allowed (`--allow-env`).
    pub allow_env: Vec<String>,
    /// The release SHA-256 the person confirmed; empty binds to whatever the plan hashes now.
    pub expected_sha256: String,
    /// `--allow-skill-findings`: install although the skill scan found something.
    pub allow_skill_findings: bool,
    /// `--trust-updates`: offers of this connector commit without review.
    pub trust_updates: bool,
}

/// A validated release ready to install, with its confirmation summary.
pub struct Plan {
    pub manifest: Manifest,
    pub sha: String,
    pub release_dir: PathBuf,
    pub summary: pb::InstallPlan,
}

/// The plan of `req`, made on the blocking pool: it hashes every file of the release, which
/// must not stall the kernel's single runtime thread.
pub async fn plan(k: &Arc<Kernel>, req: &Install) -> Result<Plan, Status> {
    let (k, req) = (k.clone(), req.clone());
    tokio::task::spawn_blocking(move || plan_now(&k, &req))
        .await
        .map_err(|e| Status::internal(format!("install plan task: {e}")))?
}

fn plan_now(k: &Kernel, req: &Install) -> Result<Plan, Status> {
    let src = req.folder.as_path();
    if !src.is_absolute() {
        return Err(Status::invalid_argument(format!(
            "{}: the release directory must be given as an absolute path",
            src.display()
        )));
    }
    if !src.is_dir() {
        return Err(Status::invalid_argument(format!(
            "{}: not a directory (give the directory that holds connector.json)",
            src.display()
        )));
    }
    let mut summary = pb::InstallPlan {
        allowed_commands: req.allow_commands.clone(),
        allowed_env: req.allow_env.clone(),
        ..Default::default()
    };
    let manifest = match manifest::load(src) {
        Ok(m) => m,
        Err(mut problems) => {
            // List the launch problems in the same refusal, one line per problem.
            let launch = manifest::launch_problems(src, &k.paths.state, &k.base_env, &problems);
            problems.extend(launch);
            summary.problems = problems;
            return Ok(Plan {
                manifest: placeholder_manifest(),
                sha: String::new(),
                release_dir: PathBuf::new(),
                summary,
            });
        }
    };
    let sha = crate::release::hash_tree(src).map_err(precondition)?;
    let release_dir = k.paths.releases().join(&manifest.key).join(&sha);
    describe(k, req, &manifest, &sha, &mut summary);
    plan_launch(k, req, &manifest, &release_dir, &mut summary);
    Ok(Plan {
        manifest,
        sha,
        release_dir,
        summary,
    })
}

/// What the summary says of the release itself: names, version, secrets, skills, and what it
/// upgrades.
fn describe(k: &Kernel, req: &Install, manifest: &Manifest, sha: &str, s: &mut pb::InstallPlan) {
    s.key = manifest.key.clone();
    s.sha256 = sha.to_owned();
    s.name = manifest.name.clone();
    s.description = manifest.description.clone();
    s.version = manifest.version.clone();
    s.secret_names = manifest.secret_names();
    s.problems
        .extend(manifest::injection_problems(manifest, &req.allow_env));
    scan_skills(req, manifest, &req.folder, s);
    if let Some(cli) = &manifest.cli {
        s.cli_entrypoint = cli.entrypoint.clone();
    }
    let inner = lock(&k.inner);
    if let Some(serving) = serving_version(&inner, &manifest.key) {
        s.upgrades_version = serving;
    }
    s.same_release = inner
        .registry
        .connectors
        .get(&manifest.key)
        .is_some_and(|c| c.sha256 == sha && c.previous.is_none());
}

/// The launch part of an install plan: transport, argv, cwd and `env` as the upstream
/// gets them (SPEC §12: shown), or the problems that refuse them.
fn plan_launch(
    k: &Kernel,
    req: &Install,
    manifest: &Manifest,
    release_dir: &Path,
    s: &mut pb::InstallPlan,
) {
    match &manifest.mcp {
        Some(Mcp::Stdio {
            command,
            args,
            cwd,
            env,
            ..
        }) => {
            s.transport = pb::Transport::Stdio.label().into();
            // Validated against the source: the release copy does not exist yet.
            let src = req.folder.as_path();
            let launch = manifest::stdio_launch_from(
                command,
                args,
                cwd,
                env,
                release_dir,
                src,
                &k.paths.state,
                &k.base_env,
            );
            match launch {
                Ok(l) => show_stdio_launch(k, req, release_dir, env, l, s),
                Err(p) => s.problems.extend(p),
            }
        }
        Some(Mcp::Http { url, auth }) => {
            s.transport = pb::Transport::Http.label().into();
            s.url = url.clone();
            s.oauth_login = matches!(auth, manifest::Auth::Oauth(_));
        }
        None => {}
    }
}

/// A stdio launch in the summary: the program checked against the allowlist, the argv, the
/// cwd and what `env` sets, as the upstream gets it (SPEC §12: shown).
fn show_stdio_launch(
    k: &Kernel,
    req: &Install,
    release_dir: &Path,
    env: &BTreeMap<String, String>,
    l: manifest::StdioLaunch,
    s: &mut pb::InstallPlan,
) {
    let owner = crate::release::allowlist::owner_allowed();
    let rules = crate::release::allowlist::Rules {
        release: release_dir,
        source: Some(&req.folder),
        runtime_dir: &k.paths.libexec,
        owner_allowed: &owner,
        install_allowed: &req.allow_commands,
        path_var: k.path_var(),
    };
    if let Err(p) = crate::release::allowlist::check(&l.program, &rules) {
        s.problems.push(p);
    }
    s.argv = std::iter::once(l.program.to_string_lossy().into_owned())
        .chain(l.args)
        .collect();
    s.cwd = l.cwd.to_string_lossy().into_owned();
    s.env = env
        .keys()
        .filter_map(|name| {
            l.env.get(name).map(|value| pb::EnvVar {
                name: name.clone(),
                value: value.clone(),
            })
        })
        .collect();
}

/// SPEC §12: the skill scan. Its findings are shown in the plan; unless the install allows
/// them (`--allow-skill-findings`) each is a refusal line, followed by the way out.
fn scan_skills(req: &Install, manifest: &Manifest, src: &Path, s: &mut pb::InstallPlan) {
    let dirs: Vec<String> = manifest.skills.iter().map(|s| s.dir.clone()).collect();
    match crate::skills::scan::scan_release(src, &dirs) {
        Ok(findings) => {
            if !findings.is_empty() && !req.allow_skill_findings {
                s.problems.extend(findings.iter().cloned());
                s.problems.push(
                    "the skill scan found the above; review the skill files, or install with --allow-skill-findings to install anyway (the findings are recorded)"
                        .into(),
                );
            }
            s.skill_findings = findings;
        }
        Err(e) => s.problems.push(format!("skill scan: {e}")),
    }
}

fn placeholder_manifest() -> Manifest {
    Manifest {
        key: String::new(),
        name: String::new(),
        description: String::new(),
        version: String::new(),
        mcp: None,
        cli: None,
        skills: Vec::new(),
        start_ms: 0,
        call_ms: 0,
        tool_risk: BTreeMap::new(),
        circuit: Default::default(),
    }
}

/// The version agents are served now: the live release's, else the release an unfinished
/// upgrade would replace, else the installed one.
fn serving_version(inner: &Inner, key: &str) -> Option<String> {
    if let Some(live) = inner.serving(key) {
        return Some(live.manifest.version.clone());
    }
    let entry = inner.registry.connectors.get(key)?;
    Some(
        entry
            .previous
            .as_ref()
            .map_or(&entry.version, |p| &p.version)
            .clone(),
    )
}

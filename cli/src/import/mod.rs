//! `tutti connector import` (SPEC §18): MCP server entries from the clients' config files
//! become connectors. Each entry is built as a release folder in a staging dir, every one is
//! planned by the kernel, one confirmation covers them all, and each is installed through
//! the ordinary install path (then `connect` stores the credentials it moved into secrets).
//! Entries already installed (same launch) are skipped; `--rewrite` then points the client at
//! the stdio bridge; `--undo CLIENT` restores the file.

mod entry;
mod launch;
mod pinned;
mod release;
mod rewrite;
mod sources;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::{Value, json};
use tutti_proto::kernel::{ConnectRequest, Empty, InstallPlan, InstallRequest, StageReply};

use crate::args::{ImportArgs, ToolsArg};
use crate::binding_stdio::Launch as BridgeLaunch;
use crate::commands::connector::{Verb, confirm, confirmation};
use crate::error::CliError;
use crate::kernel::Kernel;
use crate::output::{emit, note, visible};
use entry::Entry;
use sources::Source;

/// Whether the installed release `key`/`sha256` was imported unpinned (`--no-pin`).
pub(crate) fn unpinned(state_dir: &Path, key: &str, sha256: &str) -> bool {
    import_record(state_dir, key, sha256).is_some_and(|r| r["unpinned"] == true)
}

/// What the import of release `key`/`sha256` recorded (client, entry, unpinned, launch).
pub(crate) fn import_record(state_dir: &Path, key: &str, sha256: &str) -> Option<Value> {
    let record = release_dir(state_dir, key, sha256).join(release::IMPORT_RECORD);
    std::fs::read(record)
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
}

/// The kernel's copy of release `key`/`sha256`.
fn release_dir(state_dir: &Path, key: &str, sha256: &str) -> PathBuf {
    tutti_rules::state_dir::layout::releases(state_dir)
        .join(key)
        .join(sha256)
}

/// One connector to create.
struct Planned {
    key: String,
    source: usize,
    entry_name: String,
    launch: entry::Launch,
    built: release::Built,
    unpinned: bool,
    /// The market's staged release of a pinned package entry (and the pinning line).
    staged: Option<(StageReply, String)>,
    request: InstallRequest,
    plan: InstallPlan,
}

/// What the installed connectors already are: keys and launches.
struct Installed {
    keys: BTreeSet<String>,
    launches: Vec<Value>,
}

pub(crate) async fn run(state_dir: &Path, args: ImportArgs) -> Result<ExitCode, CliError> {
    let cwd = std::env::current_dir().map_err(|e| CliError::io("read", Path::new("."), e))?;
    if let Some(what) = &args.undo {
        for path in rewrite::undo(what, &cwd)? {
            emit(&format!("restored {}\n", path.display()))?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let sources = sources::gather(&args.from, &cwd)?;
    let mut kernel = Kernel::connect(state_dir).await?;
    let mut installed = installed(&mut kernel, state_dir).await?;
    let staging = Staging::new()?;
    let mut imported: Vec<Vec<String>> = vec![Vec::new(); sources.len()];
    let mut planned = Vec::new();
    for (index, source) in sources.iter().enumerate() {
        for problem in &source.problems {
            note(&format!(
                "tutti: {}: {}",
                source.path.display(),
                visible(problem)
            ));
        }
        for e in source.entries.iter().filter(|e| wanted(&args.only, e)) {
            if installed
                .launches
                .contains(&release::fingerprint_of(&e.launch))
            {
                note(&format!(
                    "tutti: {}: already imported (same launch); skipped",
                    e.name
                ));
                imported[index].push(e.name.clone());
                continue;
            }
            let key = unique_key(&e.name, &mut installed.keys);
            let p = plan(&mut kernel, &staging, source, index, e, &key, &args).await;
            let p = match p {
                Ok(p) => p,
                Err(err) => {
                    discard_all(&mut kernel, &planned).await;
                    return Err(err);
                }
            };
            if let Some(p) = p {
                installed.launches.push(release::fingerprint_of(&e.launch));
                planned.push(p);
            }
        }
    }
    let done = install_all(&mut kernel, &planned, args.yes).await;
    if done.is_err() {
        discard_all(&mut kernel, &planned).await;
    }
    done?;
    for p in &planned {
        imported[p.source].push(p.entry_name.clone());
    }
    if args.rewrite {
        rewrite_all(state_dir, &sources, &imported)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn wanted(only: &[String], e: &Entry) -> bool {
    only.is_empty() || only.iter().any(|n| n == &e.name)
}

/// A key free among `taken` (suffixed `-2`, `-3`, … on a collision, which is reported).
fn unique_key(name: &str, taken: &mut BTreeSet<String>) -> String {
    let base = entry::key_of(name);
    let mut key = base.clone();
    let mut n = 2;
    while taken.contains(&key) {
        let suffix = format!("-{n}");
        let mut stem = base.clone();
        stem.truncate(24 - suffix.len());
        key = format!("{}{suffix}", stem.trim_end_matches('-'));
        n += 1;
    }
    if key != base {
        note(&format!(
            "tutti: {name}: key {base} is taken; it becomes {key}"
        ));
    }
    taken.insert(key.clone());
    key
}

async fn installed(kernel: &mut Kernel, state_dir: &Path) -> Result<Installed, CliError> {
    let reply = kernel
        .client
        .status(Empty {})
        .await
        .map_err(|s| kernel.error(s))?
        .into_inner();
    let mut out = Installed {
        keys: BTreeSet::new(),
        launches: Vec::new(),
    };
    for c in reply.connectors {
        let release = release_dir(state_dir, &c.key, &c.sha256);
        out.launches.extend(release_launches(&release));
        out.keys.insert(c.key);
    }
    Ok(out)
}

/// The launches an installed release stands for: its own, and for a pinned import the
/// entry's launch it was made from (recorded at import).
fn release_launches(release: &Path) -> Vec<Value> {
    let read = |name: &str| {
        std::fs::read(release.join(name))
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
    };
    let own = read("connector.json").and_then(|m| release::fingerprint_of_manifest(&m));
    let written = read(release::IMPORT_RECORD).map(|r| r["launch"].clone());
    own.into_iter()
        .chain(written.filter(|l| !l.is_null()))
        .collect()
}

/// One server entry of a client configuration, as `tutti doctor` checks it.
pub(crate) struct ClientEntry {
    pub(crate) client: String,
    pub(crate) path: PathBuf,
    pub(crate) name: String,
    /// The entry's launch as the installed connectors' launches are compared.
    pub(crate) launch: Value,
    /// The program of an entry that runs the stdio bridge (`… mcp-stdio`).
    pub(crate) bridge: Option<String>,
}

/// Every entry of every client configuration found (files that cannot be read are passed by).
pub(crate) fn client_entries(cwd: &Path) -> Vec<ClientEntry> {
    let sources = sources::gather(&[], cwd).unwrap_or_default();
    let mut out = Vec::new();
    for source in sources {
        for e in source.entries {
            let bridge = match &e.launch {
                entry::Launch::Stdio { command, args, .. }
                    if args.first().is_some_and(|a| a == "mcp-stdio") =>
                {
                    Some(command.clone())
                }
                _ => None,
            };
            out.push(ClientEntry {
                client: source.client.clone(),
                path: source.path.clone(),
                name: e.name.clone(),
                launch: release::fingerprint_of(&e.launch),
                bridge,
            });
        }
    }
    out
}

/// Each installed connector's key with the launches it stands for (`registry.json`).
pub(crate) fn installed_launches(state_dir: &Path) -> Vec<(String, Vec<Value>)> {
    let path = tutti_rules::state_dir::layout::registry(state_dir);
    let registry: Value = std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    let connectors = registry["connectors"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    connectors
        .into_iter()
        .map(|(key, c)| {
            let sha = c["sha256"].as_str().unwrap_or_default().to_owned();
            let launches = release_launches(&release_dir(state_dir, &key, &sha));
            (key, launches)
        })
        .collect()
}

/// Builds `e`'s release in the staging dir and asks the kernel for its install plan;
/// `None` (after the problems, one line each) when it cannot be installed.
async fn plan(
    kernel: &mut Kernel,
    staging: &Staging,
    source: &Source,
    index: usize,
    e: &Entry,
    key: &str,
    args: &ImportArgs,
) -> Result<Option<Planned>, CliError> {
    let origin = format!("{} {}", source.client, source.path.display());
    let built = match release::build(e, key, &origin, &args.from_env) {
        Ok(built) => built,
        Err(reason) => {
            note(&format!("tutti: {}: {}; skipped", e.name, visible(&reason)));
            return Ok(None);
        }
    };
    let unpinned = args.no_pin && release::runs_a_package(e);
    let record = json!({"client": source.client, "entry": e.name, "unpinned": unpinned,
        "launch": release::fingerprint_of(&e.launch)});
    let Some((dir, staged)) = folder(kernel, staging, e, &built, key, &record, args).await? else {
        return Ok(None);
    };
    // The launch allowlist holds as for `install`: only what the person names is added.
    let request = InstallRequest {
        source_dir: dir.display().to_string(),
        allow_commands: args.allow_commands.clone(),
        ..Default::default()
    };
    let planned = kernel.client.plan_install(request.clone()).await;
    let problems = planned
        .as_ref()
        .map_or(true, |p| !p.get_ref().problems.is_empty());
    if let (true, Some((staged, _))) = (problems, &staged) {
        pinned::discard(kernel, staged).await;
    }
    let plan = planned.map_err(|s| kernel.error(s))?.into_inner();
    if !plan.problems.is_empty() {
        for problem in &plan.problems {
            note(&format!("tutti: {}: {}; skipped", e.name, visible(problem)));
        }
        let refused = plan.problems.iter().any(|p| p.contains("launch allowlist"));
        if let (true, Some(program)) = (refused, &built.allow) {
            note(&format!(
                "tutti: {}: to run {} as written, import with --allow-command {}, if you trust it",
                e.name,
                visible(program),
                visible(program)
            ));
        }
        return Ok(None);
    }
    Ok(Some(Planned {
        key: key.to_owned(),
        source: index,
        entry_name: e.name.clone(),
        launch: e.launch.clone(),
        built,
        unpinned,
        staged,
        request,
        plan,
    }))
}

/// The release folder of an entry and the market's staging of it when pinned; `None` (after
/// one line) when the entry is refused or cannot be pinned.
async fn folder(
    kernel: &mut Kernel,
    staging: &Staging,
    e: &Entry,
    built: &release::Built,
    key: &str,
    record: &Value,
    args: &ImportArgs,
) -> Result<Option<Folder>, CliError> {
    match package_of(e, args.no_pin) {
        Err(reason) => {
            note(&format!(
                "tutti: {}: {}; pass --no-pin to run the command as written",
                e.name,
                visible(&reason)
            ));
            Ok(None)
        }
        Ok(Some(package)) => match pinned::stage(kernel, &package, built, key).await {
            Ok(staged) => {
                let dir = PathBuf::from(&staged.staging_dir);
                if let Err(err) = release::write_record(&dir, record) {
                    pinned::discard(kernel, &staged).await;
                    return Err(err);
                }
                let line = pinned::describe(&package, &staged);
                Ok(Some((dir, Some((staged, line)))))
            }
            Err(reason) => {
                note(&format!("tutti: {}: {}; skipped", e.name, visible(&reason)));
                Ok(None)
            }
        },
        Ok(None) => {
            let dir = staging.join(key);
            release::write(&dir, built, record)?;
            Ok(Some((dir, None)))
        }
    }
}

/// A release folder and its staging by the market (with the pinning line).
type Folder = (PathBuf, Option<(StageReply, String)>);

/// The market's staged folders of `planned` go (each once installed, or all on a failure).
async fn discard_all(kernel: &mut Kernel, planned: &[Planned]) {
    for p in planned {
        if let Some((staged, _)) = &p.staged {
            pinned::discard(kernel, staged).await;
        }
    }
}

/// The package an entry runs, when it is to be pinned (`--no-pin`: none).
fn package_of(e: &Entry, no_pin: bool) -> Result<Option<launch::Packaged>, String> {
    match &e.launch {
        entry::Launch::Stdio { command, args, .. } if !no_pin => launch::packaged(command, args),
        _ => Ok(None),
    }
}

/// One confirmation for every planned connector, then each install and its secrets.
async fn install_all(kernel: &mut Kernel, planned: &[Planned], yes: bool) -> Result<(), CliError> {
    if planned.is_empty() {
        note("tutti: nothing new to import");
        return Ok(());
    }
    for p in planned {
        show(p);
    }
    if !yes {
        confirm(Verb::Install)?;
    }
    for p in planned {
        let mut request = p.request.clone();
        request.expected_sha256 = p.plan.sha256.clone();
        let installed = kernel.client.install(request).await;
        if let Some((staged, _)) = &p.staged {
            pinned::discard(kernel, staged).await;
        }
        let reply = installed.map_err(|s| kernel.error(s))?.into_inner();
        if !p.built.secrets.is_empty() {
            let request = ConnectRequest {
                key: p.key.clone(),
                secrets: p.built.secrets.clone().into_iter().collect(),
                ..ConnectRequest::default()
            };
            kernel
                .client
                .connect_connector(request)
                .await
                .map_err(|s| kernel.error(s))?;
        }
        emit(&format!(
            "imported {} as {} ({})\n",
            visible(&p.entry_name),
            p.key,
            reply.status
        ))?;
        for name in &p.built.pending {
            emit(&format!(
                "  {} needs {name}: tutti connector connect {} --from-env {name}\n",
                p.key, p.key
            ))?;
        }
    }
    Ok(())
}

/// One connector's part of the confirmation: the kernel's plan, the launch as written, the
/// moved secrets, the pinning and the programs `--allow-command` allows.
fn show(p: &Planned) {
    note(confirmation(&p.plan, Verb::Install).trim_end());
    let moved: Vec<&str> = p.built.secrets.keys().map(String::as_str).collect();
    let pinning = match (&p.staged, p.unpinned) {
        (Some((_, line)), _) => line.as_str(),
        (None, true) => "not pinned (--no-pin: runs as written)",
        (None, false) => "not needed (runs the program named)",
    };
    if let (Some(_), entry::Launch::Stdio { command, args, .. }) = (&p.staged, &p.launch) {
        let written: Vec<String> = std::iter::once(command)
            .chain(args)
            .map(|a| visible(a))
            .collect();
        note(&format!("  launch as written: {}", written.join(" ")));
    }
    let allowed: Vec<String> = p
        .request
        .allow_commands
        .iter()
        .map(|a| visible(a))
        .collect();
    let allows = if allowed.is_empty() {
        String::new()
    } else {
        format!("; allows (--allow-command) {}", allowed.join(", "))
    };
    note(&format!(
        "  secrets moved: {}; pinning: {pinning}{allows}",
        if moved.is_empty() {
            "none".to_owned()
        } else {
            moved.join(", ")
        }
    ));
}

fn rewrite_all(
    state_dir: &Path,
    sources: &[Source],
    imported: &[Vec<String>],
) -> Result<(), CliError> {
    let state_dir =
        std::path::absolute(state_dir).map_err(|e| CliError::io("resolve", state_dir, e))?;
    for (source, names) in sources.iter().zip(imported) {
        if names.is_empty() {
            continue;
        }
        let launch = BridgeLaunch::new(
            &state_dir,
            &source.client,
            &source.client,
            ToolsArg::All,
            &Default::default(),
        )?;
        rewrite::apply(source, names, &launch)?;
        emit(&format!(
            "rewrote {} (backup {}; undo with `tutti connector import --undo {}`)\n",
            source.path.display(),
            rewrite::backup_of(&source.path).display(),
            if source.client == "file" {
                source.path.display().to_string()
            } else {
                source.client.clone()
            }
        ))?;
    }
    Ok(())
}

/// The staging dir of the releases being built: private (0700, a name no one can guess
/// beforehand in the shared temp dir), removed when dropped.
struct Staging(tempfile::TempDir);

impl Staging {
    fn new() -> Result<Staging, CliError> {
        tempfile::Builder::new()
            .prefix("tutti-import-")
            .tempdir()
            .map(Staging)
            .map_err(|e| CliError::io("create", std::env::temp_dir(), e))
    }

    fn join(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }
}

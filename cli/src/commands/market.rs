//! The connector market's commands (SPEC §17): `tutti registry list|add|remove`,
//! `tutti connector search`, and `tutti connector install` of a market source, which the
//! kernel stages as a release folder that the folder install then confirms and installs.

use std::path::Path;
use std::process::ExitCode;

use serde::Serialize;
use tutti_market::source::{self, Source};
use tutti_proto::kernel::stage_event::Event;
use tutti_proto::kernel::{
    DiscardRequest, Empty, MarketRegistry, RemoveRegistryRequest, SearchRequest, StageProgress,
    StageReply, StageRequest,
};

use crate::args::{InstallArgs, MarketInstallArgs, RegistryCommand, SearchArgs};
use crate::error::CliError;
use crate::kernel::Kernel;
use crate::output::{emit, json_line, note, one_line, table, visible};

/// Whether an install argument is a market source rather than a release folder.
pub(super) fn is_market_source(arg: &str) -> bool {
    let cwd = std::env::current_dir().unwrap_or_default();
    !matches!(source::parse(arg, &cwd), Ok(Source::Folder(_)))
}

// === registry ===

pub(crate) async fn registry(state_dir: &Path, cmd: RegistryCommand) -> Result<ExitCode, CliError> {
    let kernel = Kernel::connect(state_dir).await?;
    let mut market = kernel.market();
    match cmd {
        RegistryCommand::List(a) => {
            let reply = market
                .list_registries(Empty {})
                .await
                .map_err(|s| kernel.error(s))?
                .into_inner();
            let list: Vec<RegistryJson<'_>> = reply
                .registries
                .iter()
                .map(|r| RegistryJson {
                    name: &r.name,
                    url: &r.url,
                })
                .collect();
            if a.json {
                emit(&json_line(&list)?)?;
            } else {
                let rows: Vec<Vec<String>> = list
                    .iter()
                    .map(|r| vec![r.name.to_owned(), visible(r.url)])
                    .collect();
                emit(&table(&["NAME", "URL"], &rows))?;
                if reply.from_env {
                    note(
                        "tutti: these registries come from TUTTI_REGISTRIES in the kernel's environment",
                    );
                }
            }
        }
        RegistryCommand::Add(a) => {
            let request = MarketRegistry {
                name: a.name.clone(),
                url: a.url.clone(),
            };
            market
                .add_registry(request)
                .await
                .map_err(|s| kernel.error(s))?;
            emit(&format!(
                "added registry {} ({})\n",
                a.name,
                visible(&a.url)
            ))?;
        }
        RegistryCommand::Remove(a) => {
            let request = RemoveRegistryRequest {
                name: a.name.clone(),
            };
            market
                .remove_registry(request)
                .await
                .map_err(|s| kernel.error(s))?;
            emit(&format!("removed registry {}\n", a.name))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Serialize)]
struct RegistryJson<'a> {
    name: &'a str,
    url: &'a str,
}

// === search ===

#[derive(Serialize)]
struct HitJson<'a> {
    name: &'a str,
    version: &'a str,
    description: &'a str,
    transport: &'a str,
    packages: &'a [String],
    registry: &'a str,
    status: &'a str,
}

pub(crate) async fn search(state_dir: &Path, args: SearchArgs) -> Result<ExitCode, CliError> {
    let kernel = Kernel::connect(state_dir).await?;
    let request = SearchRequest {
        words: args.words.join(" "),
        registry: args.registry.unwrap_or_default(),
    };
    let reply = kernel
        .market()
        .search(request)
        .await
        .map_err(|s| kernel.error(s))?
        .into_inner();
    let hits: Vec<HitJson<'_>> = reply
        .servers
        .iter()
        .map(|h| HitJson {
            name: &h.name,
            version: &h.version,
            description: &h.description,
            transport: &h.transport,
            packages: &h.package_kinds,
            registry: &h.registry,
            status: &h.status,
        })
        .collect();
    if args.json {
        emit(&json_line(&hits)?)?;
    } else if hits.is_empty() {
        note("tutti: no server matches; try fewer or other words");
    } else {
        let rows: Vec<Vec<String>> = hits
            .iter()
            .map(|h| {
                vec![
                    visible(h.name),
                    visible(h.version),
                    visible(h.transport),
                    visible(&h.packages.join(", ")),
                    visible(&one_line(h.description, 80)),
                ]
            })
            .collect();
        emit(&table(
            &["NAME", "VERSION", "TRANSPORT", "PACKAGES", "DESCRIPTION"],
            &rows,
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}

// === install ===

/// `install` of a market source: the kernel stages the release, the folder install confirms
/// and installs it, and the staged folder goes whatever happened.
pub(super) async fn install(state_dir: &Path, args: &InstallArgs) -> Result<ExitCode, CliError> {
    install_staged(state_dir, stage_request(&args.source, &args.market)?, args).await
}

/// Stages `request` and installs the staged release as `install` does (also `upgrade`'s).
pub(crate) async fn install_staged(
    state_dir: &Path,
    request: StageRequest,
    args: &InstallArgs,
) -> Result<ExitCode, CliError> {
    let mut kernel = Kernel::connect(state_dir).await?;
    let mut market = kernel.market();
    let staged = stage(&kernel, request, args.json).await?;
    for warning in &staged.warnings {
        note(&format!("tutti: {}", visible(warning)));
    }
    if args.json {
        emit(&json_line(&StagedJson::from(&staged))?)?;
    }
    let dir = std::path::PathBuf::from(&staged.staging_dir);
    let outcome =
        super::connector::install_release(&mut kernel, &dir, args, Some(&confirmation(&staged)))
            .await;
    let discard = DiscardRequest {
        staging_dir: staged.staging_dir.clone(),
    };
    if let Err(status) = market.discard_staged(discard).await {
        tracing::warn!(error = %status.message(), "the staged release was not removed");
    }
    outcome
}

/// Stages a market source in the kernel, showing pinning progress while it runs (a line per
/// step on stderr; with `json`, `{"event":"progress",…}` lines on stdout), and returns the
/// staged release.
pub(crate) async fn stage(
    kernel: &Kernel,
    request: StageRequest,
    json: bool,
) -> Result<StageReply, CliError> {
    let mut events = kernel
        .market()
        .stage_install(request)
        .await
        .map_err(|s| kernel.error(s))?
        .into_inner();
    while let Some(event) = events.message().await.map_err(|s| kernel.error(s))? {
        match event.event {
            Some(Event::Progress(p)) if json => emit(&json_line(&ProgressJson::from(&p))?)?,
            Some(Event::Progress(p)) => note(&progress_line(&p)),
            Some(Event::Staged(staged)) => return Ok(staged),
            None => {}
        }
    }
    Err(CliError::Market(
        "the kernel ended the install before the release was staged; see `tutti logs kernel`"
            .into(),
    ))
}

fn progress_line(p: &StageProgress) -> String {
    match p.phase.as_str() {
        "resolving" => format!("tutti: resolving {}…", visible(&p.source)),
        "downloading" if p.bytes > 0 => format!(
            "tutti: downloaded {} artefact(s), {:.1} MB",
            p.artefacts,
            p.bytes as f64 / 1e6
        ),
        "downloading" => format!("tutti: downloading {} artefact(s)…", p.artefacts),
        "installing" => format!(
            "tutti: installing {} artefact(s) into the release…",
            p.artefacts
        ),
        other => format!("tutti: {}", visible(other)),
    }
}

/// A pinning step as `--json` prints it.
#[derive(Serialize)]
struct ProgressJson<'a> {
    event: &'static str,
    phase: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    source: &'a str,
    artefacts: u32,
    bytes: u64,
}

impl<'a> From<&'a StageProgress> for ProgressJson<'a> {
    fn from(p: &'a StageProgress) -> Self {
        Self {
            event: "progress",
            phase: &p.phase,
            source: &p.source,
            artefacts: p.artefacts,
            bytes: p.bytes,
        }
    }
}

/// The kernel's request to stage market source `source` with `m`'s choices (also the
/// console's Install view). A `server.json` path is read here, relative to this process.
pub(crate) fn stage_request(source: &str, m: &MarketInstallArgs) -> Result<StageRequest, CliError> {
    let index = |n: Option<u32>| n.map_or(-1, |n| i32::try_from(n).unwrap_or(i32::MAX));
    let mut request = StageRequest {
        source: source.to_owned(),
        set: m.set.iter().cloned().collect(),
        package_index: index(m.package),
        remote_index: index(m.remote),
        key: m.key.clone().unwrap_or_default(),
        allow_scripts: m.allow_scripts,
        allow_sdist: m.allow_sdist,
        ..Default::default()
    };
    let cwd = std::env::current_dir().map_err(|e| CliError::io("resolve", Path::new("."), e))?;
    match source::parse(source, &cwd).map_err(|e| CliError::Market(e.to_string()))? {
        Source::ServerJson(path) => {
            request.server_json =
                std::fs::read(&path).map_err(|e| CliError::io("read", &path, e))?;
            request.source_label = source.to_owned();
            request.source.clear();
        }
        Source::Package(tutti_market::plan::PackageRef::Mcpb {
            location,
            sha256: None,
        }) => {
            // A local bundle: the kernel reads it by its absolute path.
            request.source = location;
        }
        _ => {}
    }
    Ok(request)
}

/// What a market source adds to the install confirmation (SPEC §17).
pub(crate) fn confirmation(s: &StageReply) -> String {
    let mut out = format!("  source: {}\n", visible(&s.source));
    out.push_str(&format!("  resolved version: {}\n", visible(&s.version)));
    out.push_str(&format!(
        "  artefacts: {} ({} bytes)\n",
        s.artefacts, s.total_bytes
    ));
    let scripts = match (s.scripts.is_empty(), s.scripts_allowed) {
        (true, true) => "allowed (none ran)".to_owned(),
        (true, false) => "refused".to_owned(),
        (false, true) => format!("allowed: {}", visible(&s.scripts.join(", "))),
        (false, false) => format!("refused: {}", visible(&s.scripts.join(", "))),
    };
    out.push_str(&format!("  install scripts: {scripts}\n"));
    if !s.secret_names.is_empty() {
        out.push_str(&format!(
            "  secrets asked for after the install: {}\n",
            s.secret_names.join(", ")
        ));
    }
    out
}

/// The progress event a market install prints with `--json` before the install's result.
#[derive(Serialize)]
struct StagedJson<'a> {
    event: &'static str,
    source: &'a str,
    version: &'a str,
    artefacts: u32,
    bytes: u64,
    secrets: &'a [String],
    warnings: &'a [String],
}

impl<'a> From<&'a StageReply> for StagedJson<'a> {
    fn from(s: &'a StageReply) -> Self {
        Self {
            event: "staged",
            source: &s.source,
            version: &s.version,
            artefacts: s.artefacts,
            bytes: s.total_bytes,
            secrets: &s.secret_names,
            warnings: &s.warnings,
        }
    }
}

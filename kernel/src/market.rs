//! The `Market` gRPC service (SPEC §17): the kernel's registry list (`registries.json`, or
//! `TUTTI_REGISTRIES`), search, and a market source built into a staged release folder under
//! `<state>/staging/`. The folder is then installed by the folder install (`Kernel.PlanInstall`
//! / `Kernel.Install`, with its confirmation and checks) and discarded.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tutti_market::MarketError;
use tutti_market::origin::{self, Origin, OriginChoices};
use tutti_market::pin::{PinEvent, Progress};
use tutti_market::plan::{PackageRef, PinOptions, Pinned};
use tutti_market::registry::{self, Client, Registries};
use tutti_market::server_json::{self, Choices, ReleasePlan};
use tutti_market::source::{self, Source};
use tutti_proto::kernel as pb;
use tutti_proto::kernel::market_server::{Market, MarketServer};

use crate::error::KernelError;

/// Servers one search returns at most.
const SEARCH_MAX: usize = 100;

/// Cheap to clone: a staging step runs as a task of its own with a clone.
#[derive(Clone)]
pub struct MarketService {
    state: PathBuf,
    list: Arc<Mutex<Registries>>,
    from_env: bool,
    client: Client,
}

impl MarketService {
    /// The list from `TUTTI_REGISTRIES`, else `registries.json`, else the default; what an
    /// earlier run left in `staging/` goes.
    pub fn open(state: &Path) -> Result<Self, KernelError> {
        let refused = |e: MarketError| KernelError::Refused(e.to_string());
        let (list, from_env) = match std::env::var("TUTTI_REGISTRIES") {
            Ok(value) => (Registries::from_env_value(&value).map_err(refused)?, true),
            Err(_) => (read_list(&list_path(state))?, false),
        };
        let _ = std::fs::remove_dir_all(staging_root(state));
        Ok(Self {
            state: state.to_path_buf(),
            list: Arc::new(Mutex::new(list)),
            from_env,
            client: Client::new().map_err(refused)?,
        })
    }

    fn registries(&self) -> Registries {
        crate::state::lock(&self.list).clone()
    }

    /// Changes the list and writes it (atomically, 0600) before the change is seen.
    fn change(
        &self,
        f: impl FnOnce(&mut Registries) -> Result<(), MarketError>,
    ) -> Result<(), Status> {
        if self.from_env {
            return Err(Status::failed_precondition(
                "the registries come from TUTTI_REGISTRIES in the kernel's environment; change that variable and restart the kernel",
            ));
        }
        let mut guard = crate::state::lock(&self.list);
        let mut next = guard.clone();
        f(&mut next).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let bytes =
            serde_json::to_vec_pretty(&next).map_err(|e| Status::internal(e.to_string()))?;
        let path = list_path(&self.state);
        tutti_rules::atomic_file::write(&path, &bytes, Some(0o600))
            .map_err(|e| Status::internal(format!("{}: {e}", path.display())))?;
        *guard = next;
        Ok(())
    }

    /// Resolves the source to a release plan (a document, or one package).
    async fn resolve(&self, req: &pb::StageRequest) -> Result<Resolved, MarketError> {
        let choices = choices(req);
        if !req.server_json.is_empty() {
            let doc = server_json::parse(&req.server_json)?;
            let origin = Origin {
                server_json: serde_json::from_slice(&req.server_json).ok(),
                ..Default::default()
            };
            return Ok(Resolved {
                label: format!("server.json {}", req.source_label),
                plan: server_json::plan(&doc, &choices)?,
                warning: None,
                origin,
            });
        }
        match source::parse(&req.source, &self.state)? {
            Source::Registry { name, version } => {
                let list = self.registries().select(None)?;
                let entry =
                    registry::resolve(&self.client, &list, &name, version.as_deref()).await?;
                let warning = entry.installable()?;
                let bytes = serde_json::to_vec(&entry.server).unwrap_or_default();
                let doc = server_json::parse(&bytes)?;
                let origin = Origin {
                    source: format!("registry:{}@{}", entry.name(), entry.version()),
                    registry: entry.registry.clone(),
                    name: entry.name().to_owned(),
                    ..Default::default()
                };
                Ok(Resolved {
                    label: format!("registry {}: {}", entry.registry, entry.name()),
                    plan: server_json::plan(&doc, &choices)?,
                    warning,
                    origin,
                })
            }
            Source::Package(package) => Ok(Resolved {
                label: req.source.clone(),
                plan: source::package_plan(&package, &choices)?,
                warning: None,
                origin: Origin {
                    source: req.source.clone(),
                    ..Default::default()
                },
            }),
            Source::Folder(_) | Source::ServerJson(_) => Err(MarketError::Source(format!(
                "{:?} is a release folder or a server.json file: give it to the CLI, which reads it",
                req.source
            ))),
        }
    }

    /// Resolves and pins `req` into a new folder under `staging/`, reporting pinning progress.
    async fn stage(
        &self,
        req: pb::StageRequest,
        progress: Progress<'_>,
    ) -> Result<pb::StageReply, Status> {
        let mut resolved = self.resolve(&req).await.map_err(market_status)?;
        let extra_env: BTreeMap<String, String> = req.extra_env.clone().into_iter().collect();
        resolved.plan.extend_launch(
            &req.extra_args,
            &req.extra_runtime_args,
            &extra_env,
            &req.extra_secrets,
        );
        if let Some(url) = resolved.plan.remote_url()
            && self.client.wants_oauth(url).await
        {
            resolved.plan.use_oauth();
        }
        let dir = new_staging_dir(&self.state)?;
        let built = match self.build(&resolved.plan, &req, &dir, progress).await {
            Ok(p) => write_origin(
                &dir,
                resolved.origin.clone(),
                &resolved.plan,
                p.as_ref(),
                &req,
            )
            .map(|()| p),
            Err(e) => Err(e),
        };
        let pinned = match built {
            Ok(p) => p,
            Err(e) => {
                remove_staged(dir).await;
                return Err(market_status(e));
            }
        };
        let artefacts = pinned
            .as_ref()
            .map(|p| p.artefacts.as_slice())
            .unwrap_or_default();
        Ok(pb::StageReply {
            staging_dir: dir.display().to_string(),
            source: resolved.label,
            version: resolved.plan.manifest["version"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            artefacts: u32::try_from(artefacts.len()).unwrap_or(u32::MAX),
            total_bytes: artefacts.iter().map(|a| a.size).sum(),
            scripts: pinned
                .as_ref()
                .map(|p| p.scripts.clone())
                .unwrap_or_default(),
            scripts_allowed: req.allow_scripts,
            secret_names: resolved.plan.secret_names(),
            warnings: resolved.warning.into_iter().collect(),
        })
    }

    /// Pins the plan's package (if any) into `dir` and writes `connector.json` there.
    async fn build(
        &self,
        plan: &ReleasePlan,
        req: &pb::StageRequest,
        dir: &Path,
        progress: Progress<'_>,
    ) -> Result<Option<Pinned>, MarketError> {
        let pinned = match &plan.package {
            Some(package) => {
                let options = PinOptions {
                    allow_scripts: req.allow_scripts,
                    allow_sdist: req.allow_sdist,
                };
                Some(tutti_market::pin::pin(package, dir, &options, progress).await?)
            }
            None => None,
        };
        let manifest = server_json::compose(plan, pinned.as_ref())?;
        let path = dir.join("connector.json");
        let bytes = serde_json::to_vec_pretty(&manifest).unwrap_or_default();
        std::fs::write(&path, bytes).map_err(|source| MarketError::Io { path, source })?;
        Ok(pinned)
    }
}

struct Resolved {
    label: String,
    plan: ReleasePlan,
    warning: Option<String>,
    /// Where the release comes from, completed with the pinned version once built.
    origin: Origin,
}

/// Writes the staged release's `tutti-source.json`: its source at the version resolved, and
/// the choices that build it again.
fn write_origin(
    dir: &Path,
    mut origin: Origin,
    plan: &ReleasePlan,
    pinned: Option<&Pinned>,
    req: &pb::StageRequest,
) -> Result<(), MarketError> {
    origin.version = plan.manifest["version"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    if let (Some(PackageRef::Npm { name, .. } | PackageRef::Pypi { name, .. }), Some(pinned)) =
        (&plan.package, pinned)
        && origin.name.is_empty()
        && !origin.source.is_empty()
    {
        let kind = origin
            .source
            .split_once(':')
            .map_or("", |(k, _)| k)
            .to_owned();
        origin.source = format!("{kind}:{name}@{}", pinned.version);
        origin.name = name.clone();
        origin.version = pinned.version.clone();
    }
    let index = |n: i32| u32::try_from(n).ok();
    origin.choices = OriginChoices {
        set: req.set.clone().into_iter().collect(),
        package_index: index(req.package_index),
        remote_index: index(req.remote_index),
        key: req.key.clone(),
        allow_scripts: req.allow_scripts,
        allow_sdist: req.allow_sdist,
        extra_args: req.extra_args.clone(),
        extra_runtime_args: req.extra_runtime_args.clone(),
        extra_env: req.extra_env.clone().into_iter().collect(),
        extra_secrets: req.extra_secrets.clone(),
    };
    origin::write(dir, &origin)
}

fn choices(req: &pb::StageRequest) -> Choices {
    let index = |n: i32| usize::try_from(n).ok();
    Choices {
        set: req
            .set
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<BTreeMap<_, _>>(),
        package: index(req.package_index),
        remote: index(req.remote_index),
        key: Some(req.key.clone()).filter(|k| !k.is_empty()),
    }
}

fn list_path(state: &Path) -> PathBuf {
    state.join("registries.json")
}

fn staging_root(state: &Path) -> PathBuf {
    state.join("staging")
}

fn read_list(path: &Path) -> Result<Registries, KernelError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| KernelError::Registry {
            path: path.to_path_buf(),
            detail: format!("{e}; fix the file or remove it to get the default list back"),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Registries::default()),
        Err(source) => Err(KernelError::Io {
            context: format!("reading {}", path.display()),
            source,
        }),
    }
}

fn progress_event(event: &PinEvent) -> pb::StageEvent {
    let (phase, source, artefacts, bytes) = match event {
        PinEvent::Resolving { source } => ("resolving", source.clone(), 0, 0),
        PinEvent::Downloading { artefacts, bytes } => {
            ("downloading", String::new(), *artefacts, *bytes)
        }
        PinEvent::Installing { artefacts } => ("installing", String::new(), *artefacts, 0),
    };
    pb::StageEvent {
        event: Some(pb::stage_event::Event::Progress(pb::StageProgress {
            phase: phase.into(),
            source,
            artefacts: u32::try_from(artefacts).unwrap_or(u32::MAX),
            bytes,
        })),
    }
}

fn market_status(e: MarketError) -> Status {
    match e {
        MarketError::NoSuchServer { .. } | MarketError::NoSuchVersion { .. } => {
            Status::not_found(e.to_string())
        }
        _ => Status::failed_precondition(e.to_string()),
    }
}

fn hit(entry: &registry::Entry) -> pb::SearchHit {
    let s = &entry.server;
    let kinds: Vec<String> = s["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["registryType"].as_str().map(str::to_owned))
        .collect();
    let mut transports = Vec::new();
    if !kinds.is_empty() {
        transports.push("stdio");
    }
    if s["remotes"].as_array().is_some_and(|r| !r.is_empty()) {
        transports.push("http");
    }
    let description = s["description"].as_str().unwrap_or_default();
    pb::SearchHit {
        name: entry.name().to_owned(),
        version: entry.version().to_owned(),
        description: description.lines().next().unwrap_or_default().to_owned(),
        transport: transports.join(", "),
        package_kinds: kinds,
        registry: entry.registry.clone(),
        status: match entry.status() {
            registry::Status::Active => "active".into(),
            registry::Status::Deprecated => "deprecated".into(),
            registry::Status::Other(s) => s,
        },
    }
}

#[tonic::async_trait]
impl Market for MarketService {
    async fn list_registries(
        &self,
        _: Request<pb::Empty>,
    ) -> Result<Response<pb::RegistriesReply>, Status> {
        let registries = self
            .registries()
            .registries
            .into_iter()
            .map(|r| pb::MarketRegistry {
                name: r.name,
                url: r.url,
            })
            .collect();
        Ok(Response::new(pb::RegistriesReply {
            registries,
            from_env: self.from_env,
        }))
    }

    async fn add_registry(
        &self,
        req: Request<pb::MarketRegistry>,
    ) -> Result<Response<pb::Empty>, Status> {
        let r = req.into_inner();
        self.change(|list| list.add(&r.name, &r.url))?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn remove_registry(
        &self,
        req: Request<pb::RemoveRegistryRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        let name = req.into_inner().name;
        self.change(|list| list.remove(&name))?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn search(
        &self,
        req: Request<pb::SearchRequest>,
    ) -> Result<Response<pb::SearchReply>, Status> {
        let req = req.into_inner();
        let chosen = self
            .registries()
            .select(Some(req.registry.as_str()).filter(|r| !r.is_empty()))
            .map_err(market_status)?;
        let mut servers = Vec::new();
        for registry in &chosen {
            let found = self
                .client
                .search(registry, &req.words, SEARCH_MAX)
                .await
                .map_err(market_status)?;
            servers.extend(found.iter().map(hit));
        }
        Ok(Response::new(pb::SearchReply { servers }))
    }

    type StageInstallStream = ReceiverStream<Result<pb::StageEvent, Status>>;

    /// Staging runs as its own task and streams pinning progress, then the staged release. A
    /// caller gone before the end (Ctrl-C) gets nothing, and its staged folder goes at once.
    async fn stage_install(
        &self,
        req: Request<pb::StageRequest>,
    ) -> Result<Response<Self::StageInstallStream>, Status> {
        let (tx, rx) = mpsc::channel(32);
        let service = self.clone();
        let req = req.into_inner();
        tokio::spawn(async move {
            let events = tx.clone();
            // Progress is advisory: a full channel (a slow reader) drops an event, never waits.
            let mut progress = move |event: PinEvent| {
                let _ = events.try_send(Ok(progress_event(&event)));
            };
            let result = service.stage(req, &mut progress).await;
            let staged_dir = result.as_ref().ok().map(|r| PathBuf::from(&r.staging_dir));
            let event = result.map(|staged| pb::StageEvent {
                event: Some(pb::stage_event::Event::Staged(staged)),
            });
            if tx.send(event).await.is_err()
                && let Some(dir) = staged_dir
            {
                remove_staged(dir).await;
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn discard_staged(
        &self,
        req: Request<pb::DiscardRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        let dir = PathBuf::from(req.into_inner().staging_dir);
        // Only a folder directly under staging/ (never anything else the caller names).
        let root = staging_root(&self.state);
        if dir.parent() == Some(root.as_path()) && dir.file_name().is_some() {
            remove_staged(dir).await;
        }
        Ok(Response::new(pb::Empty {}))
    }

    async fn latest(
        &self,
        req: Request<pb::LatestRequest>,
    ) -> Result<Response<pb::LatestReply>, Status> {
        let req = req.into_inner();
        let version = if req.kind == "registry" {
            let list = self.registries().select(None).map_err(market_status)?;
            let entry = registry::resolve(&self.client, &list, &req.name, None).await;
            Some(entry.map_err(market_status)?.version().to_owned())
        } else {
            let found = self.client.package_latest(&req.kind, &req.name).await;
            found.map_err(market_status)?
        };
        let version = version.ok_or_else(|| {
            Status::not_found(format!(
                "the {} index does not know {:?}; check the name",
                req.kind, req.name
            ))
        })?;
        Ok(Response::new(pb::LatestReply { version }))
    }
}

/// The service as the kernel's gRPC server adds it (beside `Kernel`, on the same socket).
pub fn server(state: &Path) -> Result<MarketServer<MarketService>, KernelError> {
    Ok(MarketServer::new(MarketService::open(state)?))
}

/// Removes a staged release (a whole node_modules tree, say) on the blocking pool: the kernel
/// serves everything else from its one thread meanwhile.
async fn remove_staged(dir: PathBuf) {
    let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(dir)).await;
}

fn new_staging_dir(state: &Path) -> Result<PathBuf, Status> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|e| Status::internal(format!("random name: {e}")))?;
    let name: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let root = staging_root(state);
    crate::paths::create_private_dir(&root)
        .map_err(|e| Status::internal(format!("{}: {e}", root.display())))?;
    let dir = root.join(name);
    crate::paths::create_private_dir(&dir)
        .map_err(|e| Status::internal(format!("{}: {e}", dir.display())))?;
    Ok(dir)
}

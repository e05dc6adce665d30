//! The kernel's shared state: registry, manifests, generation table, per-connector runtime
//! status, and the route-event broadcast. One `std::sync::Mutex` guards it; no lock is held
//! across an `.await`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};
use tokio::sync::{broadcast, mpsc, watch};
use tutti_proto::kernel as pb;
use tutti_rules::child_env;
use tutti_rules::redact::worth_masking;

use crate::lifecycle::{Connector, Msg};
use crate::paths::Paths;
use crate::registry::{AuthState, Installed, Registry};
use crate::release::manifest::{Auth, Manifest, Mcp};
use crate::secrets::SecretStore;
use crate::sessions::tokens::TokenTable;
use crate::table::{Change, GenerationTable, Route};

pub use crate::lifecycle::Status;

/// A spawned worker the kernel has not stopped yet: proof of identity for its RPCs.
pub struct Pending {
    pub token_hash: [u8; 32],
    pub endpoint: String,
    /// The worker's frame endpoint, once it registered one; else empty.
    pub data_endpoint: String,
    /// The release this generation runs (it becomes the live release at commit).
    pub release: LiveRelease,
}

/// The release a live generation runs: what shims exec, which skill roots are bound and
/// which version status shows. May differ from the newest installed release while an
/// upgrade's candidate is starting, or when it was refused.
#[derive(Clone, Debug)]
pub struct LiveRelease {
    pub release_dir: PathBuf,
    pub manifest: Manifest,
}

/// Per connector: its lifecycle and what the kernel counts or checks beside it.
pub struct ConnState {
    /// Status, live and candidate generations, restart history (`lifecycle/`).
    pub life: Connector,
    pub non_json_lines: u64,
    /// Identities of the workers not stopped yet: their RPCs are checked against these.
    pub workers: BTreeMap<u64, Pending>,
    /// The frontend's circuit breaker, when not closed (`circuit.rs`, reported by `review.rs`).
    pub circuit: Option<crate::circuit::CircuitSeen>,
}

impl ConnState {
    pub fn new(key: &str) -> ConnState {
        ConnState {
            life: Connector::new(key),
            non_json_lines: 0,
            workers: BTreeMap::new(),
            circuit: None,
        }
    }
}

/// A probe in progress: the worker's identity, its launch spec and where its result goes.
pub struct ProbeSlot {
    pub key: String,
    pub token_hash: [u8; 32],
    pub launch: pb::LaunchSpec,
    pub manifest: Manifest,
    pub done: Option<tokio::sync::oneshot::Sender<Result<pb::ProbeReply, String>>>,
}

pub struct Inner {
    pub registry: Registry,
    pub manifests: BTreeMap<String, Manifest>,
    pub table: GenerationTable,
    pub conns: BTreeMap<String, ConnState>,
    pub actors: BTreeMap<String, mpsc::UnboundedSender<Msg>>,
    pub probes: BTreeMap<u64, ProbeSlot>,
    /// Per connector, the release of its live (or last committed) generation.
    pub live_releases: BTreeMap<String, LiveRelease>,
}

impl Inner {
    /// The release agents are served by now: the one of the connector's live generation
    /// (it differs from the installed one while an upgrade is pending); `None` when nothing
    /// of it is live.
    pub fn serving(&self, key: &str) -> Option<&LiveRelease> {
        self.table.live(key)?;
        self.live_releases.get(key)
    }
}

pub struct Kernel {
    pub paths: Paths,
    pub secrets: SecretStore,
    pub inner: Mutex<Inner>,
    pub tokens: Mutex<TokenTable>,
    pub events: broadcast::Sender<Arc<pb::RouteEvent>>,
    pub boot_epoch: u32,
    next_gen: AtomicU64,
    pub origin: Instant,
    pub frontend_url: Mutex<Option<String>>,
    pub shutdown: watch::Sender<bool>,
    /// Environment the kernel passes on to upstreams (PATH, HOME, LANG, TMPDIR…).
    pub base_env: BTreeMap<String, String>,
    pub audit: crate::audit::Audit,
    /// Per-connector tools/call figures over the last 5 minutes (`status`, SPEC §14).
    pub figures: crate::telemetry::figures::CallFigures,
    /// Spans the frontend and the workers dropped from their OpenTelemetry export queues.
    pub telemetry_drops: crate::telemetry::drops::TelemetryDrops,
    /// Route watchers that cache verified sessions; revocations wait for their confirmation.
    pub session_caches: Arc<crate::sessions::caches::SessionCaches>,
    /// Held for the whole of every command that changes what is installed or connected
    /// (install, uninstall, connect, disconnect, approve, the end of an OAuth login): they take
    /// turns, so one never acts on state another is half-way through changing (an uninstall
    /// deleting the release an install just copied, a disconnect racing a connect's reload).
    pub admin: tokio::sync::Mutex<()>,
    /// OAuth logins in progress and the refresh turns (SPEC §10, `connect/oauth.rs`).
    pub oauth: crate::connect::oauth_record::Logins,
    /// High-risk calls held for the person's confirmation (SPEC §12).
    pub confirmations: crate::confirmations::Confirmations,
    /// Told of every route change and reaped worker; free heap goes back to the system once
    /// they settle (`run.rs` starts its task).
    pub memory: tutti_os::memory::AfterChanges,
}

/// How many generation numbers one registry write reserves.
pub const GENERATION_BLOCK: u64 = 1000;

pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves plain data behind; keep serving.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub fn unix_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

pub fn sha256(s: &str) -> [u8; 32] {
    Sha256::digest(s.as_bytes()).into()
}

/// Whether a launch gets the connector's stored secrets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Credentials {
    /// The installed release: its stored secrets go into the environment or headers.
    Stored,
    /// Anything else that only claims the key (a probed folder): it could send them anywhere.
    Withheld,
}

impl Kernel {
    pub fn new(
        paths: Paths,
        secrets: SecretStore,
        registry: Registry,
        manifests: BTreeMap<String, Manifest>,
    ) -> Arc<Self> {
        let (events, _) = broadcast::channel(4096);
        let (shutdown, _) = watch::channel(false);
        let boot_epoch = registry.boot_epoch;
        let paths_audit = tutti_rules::state_dir::layout::audit_log(&paths.state);
        let first_generation = registry.generation_ceiling.saturating_sub(GENERATION_BLOCK) + 1;
        Arc::new(Self {
            paths,
            secrets,
            inner: Mutex::new(Inner {
                registry,
                manifests,
                table: GenerationTable::new(),
                conns: BTreeMap::new(),
                actors: BTreeMap::new(),
                probes: BTreeMap::new(),
                live_releases: BTreeMap::new(),
            }),
            tokens: Mutex::new(TokenTable::default()),
            events,
            boot_epoch,
            next_gen: AtomicU64::new(first_generation),
            origin: Instant::now(),
            frontend_url: Mutex::new(None),
            shutdown,
            base_env: base_env(),
            audit: crate::audit::Audit::start(paths_audit),
            figures: Default::default(),
            telemetry_drops: Default::default(),
            session_caches: Arc::default(),
            admin: tokio::sync::Mutex::new(()),
            oauth: Default::default(),
            confirmations: Default::default(),
            memory: tutti_os::memory::AfterChanges::new(),
        })
    }

    /// A generation number never used before, also across kernel restarts: numbers are
    /// handed out from blocks whose ceiling is persisted in `registry.json` before use.
    /// Must be called without holding `inner`.
    pub fn next_generation(&self) -> u64 {
        let g = self.draw_generation();
        self.reserve_generation(&mut lock(&self.inner), g);
        g
    }

    /// The next generation number; [`Kernel::reserve_generation`] must run before it is used.
    pub fn draw_generation(&self) -> u64 {
        self.next_gen.fetch_add(1, Ordering::Relaxed)
    }

    /// Persists a new ceiling when `g` is above the reserved block.
    pub fn reserve_generation(&self, inner: &mut Inner, g: u64) {
        if g > inner.registry.generation_ceiling {
            inner.registry.generation_ceiling = g + GENERATION_BLOCK;
            if let Err(e) = self.save_registry(inner) {
                tracing::error!("cannot persist the generation ceiling: {e}");
            }
        }
    }

    pub fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    pub fn save_registry(&self, inner: &mut Inner) -> Result<(), crate::error::KernelError> {
        inner.registry.save(&self.paths.registry())
    }

    /// Publishes a table change to every watcher (while the caller holds the lock, so the
    /// order of events matches the order of revisions).
    pub fn publish(&self, revision: u64, change: Change) {
        let event = match change {
            Change::Upsert { route, .. } => pb::route_event::Event::Upsert(route_to_pb(&route)),
            Change::Removed {
                key,
                generation,
                reason,
            } => pb::route_event::Event::Removed(pb::ConnectorRemoved {
                key,
                generation,
                deliberate: !crate::lifecycle::fence_is_failure(&reason),
                reason,
            }),
        };
        let _ = self.events.send(Arc::new(pb::RouteEvent {
            revision,
            event: Some(event),
        }));
    }

    /// Publishes an event that is not a table change; returns its revision.
    pub fn publish_other(&self, inner: &mut Inner, event: pb::route_event::Event) -> u64 {
        let revision = inner.table.bump();
        let _ = self.events.send(Arc::new(pb::RouteEvent {
            revision,
            event: Some(event),
        }));
        revision
    }

    pub fn snapshot_event(inner: &Inner) -> pb::RouteEvent {
        pb::RouteEvent {
            revision: inner.table.revision(),
            event: Some(pb::route_event::Event::Snapshot(pb::RouteSnapshot {
                connectors: inner.table.routes().map(route_to_pb).collect(),
            })),
        }
    }

    /// Fences whatever generation `key` has live; publishes the change.
    pub fn fence(&self, inner: &mut Inner, key: &str, generation: Option<u64>, reason: &str) {
        let now = self.now();
        let change = match generation {
            Some(g) => inner.table.fence(key, g, reason, now),
            None => inner.table.remove(key, reason, now),
        };
        if let Some((rev, change)) = change {
            if let Change::Removed { generation, .. } = &change {
                self.audit.record(crate::audit::Event::Fence {
                    connector: key.to_string(),
                    generation: *generation,
                    reason: reason.to_string(),
                });
            }
            tracing::info!(key, ?generation, reason, "fenced");
            self.publish(rev, change);
        }
    }

    /// Whether the connector may run now: connected and every declared secret stored.
    pub fn auth_state(&self, key: &str, manifest: &Manifest, connected: bool) -> AuthState {
        if !connected {
            return AuthState::Required;
        }
        let stored = self.secrets.load(key);
        let logged_in = crate::connect::oauth_record::oauth_of(manifest).is_none()
            || crate::connect::oauth_record::record(&stored).logged_in();
        if logged_in
            && manifest
                .secret_names()
                .iter()
                .all(|n| stored.get(n).is_some_and(|v| !v.is_empty()))
        {
            AuthState::Ready
        } else {
            AuthState::Required
        }
    }

    /// Sets every installed connector's auth state from what is stored now, as each
    /// command that changes secrets does after storing them ([`Kernel::auth_state`]): a
    /// crash between the secrets file and the registry leaves the registry's state behind
    /// the stored values. Saved when anything changed.
    pub fn settle_auth_at_start(&self) {
        let mut inner = lock(&self.inner);
        let inner = &mut *inner;
        let mut changed = false;
        for (key, entry) in inner.registry.connectors.iter_mut() {
            let Some(manifest) = inner.manifests.get(key) else {
                continue;
            };
            let auth = self.auth_state(key, manifest, entry.connected);
            if entry.auth != auth {
                tracing::info!(key, ?auth, "auth state set from the stored secrets");
                entry.auth = auth;
                changed = true;
            }
        }
        if changed && let Err(e) = self.save_registry(inner) {
            tracing::error!(error = %e, "cannot record the auth states");
        }
    }

    /// Replaces every known secret value in `text` with `***`.
    pub fn redact(&self, text: &str) -> String {
        self.redactor()(text)
    }

    /// A function that masks every stored secret value (the shared rule of
    /// `tutti_rules::redact`: longest first, multi-line values line by line), for callers
    /// that redact many texts in a row (`status`). The secret store keeps the redactor,
    /// rebuilt when secrets change; no file is read here.
    pub fn redactor(&self) -> impl Fn(&str) -> String + use<> {
        let redactor = self.secrets.redactor();
        move |text: &str| redactor.redact(text)
    }

    /// The LaunchSpec a worker gets (with `Credentials::Stored`, the connector's stored
    /// secrets; it travels only over the kernel socket).
    pub fn launch_spec(
        &self,
        key: &str,
        manifest: &Manifest,
        release_dir: &std::path::Path,
        credentials: Credentials,
    ) -> Result<pb::LaunchSpec, String> {
        // Withheld: neither the values nor the list of values to mask leave the kernel.
        let secrets = match credentials {
            Credentials::Stored => self.secrets.load(key),
            Credentials::Withheld => Default::default(),
        };
        let redact = worth_masking(crate::connect::oauth_record::secret_values(&secrets));
        let log_path = self.paths.connector_log(key).to_string_lossy().into_owned();
        match &manifest.mcp {
            Some(Mcp::Stdio {
                command,
                args,
                cwd,
                env,
                secrets: names,
            }) => {
                let launch = crate::release::manifest::stdio_launch(
                    command,
                    args,
                    cwd,
                    env,
                    release_dir,
                    &self.paths.state,
                    &self.base_env,
                )
                .map_err(|p| p.join("; "))?;
                let mut env = launch.env;
                for n in names {
                    if let Some(v) = secrets.get(n) {
                        env.insert(n.clone(), v.clone());
                    }
                }
                Ok(pb::LaunchSpec {
                    transport: pb::Transport::Stdio.into(),
                    command: launch.program.to_string_lossy().into_owned(),
                    args: launch.args,
                    cwd: launch.cwd.to_string_lossy().into_owned(),
                    env: env.into_iter().collect(),
                    url: String::new(),
                    headers: Default::default(),
                    start_timeout_ms: manifest.start_ms,
                    call_timeout_ms: manifest.call_ms,
                    redact,
                    log_path,
                    ..Default::default()
                })
            }
            Some(Mcp::Http { url, auth }) => Ok(pb::LaunchSpec {
                transport: pb::Transport::Http.into(),
                url: url.clone(),
                headers: auth_headers(auth, &secrets),
                oauth: matches!(auth, Auth::Oauth(_)),
                oauth_expires_unix_ms: crate::connect::oauth_record::record(&secrets)
                    .grant
                    .map_or(0, |g| g.expires_unix_ms),
                start_timeout_ms: manifest.start_ms,
                call_timeout_ms: manifest.call_ms,
                redact,
                log_path,
                ..Default::default()
            }),
            None => Err("connector has no mcp interface".into()),
        }
    }

    /// The PATH an upstream gets (bare command names are resolved on it).
    pub fn path_var(&self) -> &str {
        self.base_env.get("PATH").map(String::as_str).unwrap_or("")
    }

    /// The launch allowlist again at spawn (SPEC §12): the install checked it, but PATH, the
    /// owner's `TUTTI_ALLOW_COMMANDS` or the files it names may have changed since. The
    /// install's own `--allow-command` entries are those recorded for `release_dir`.
    pub fn launch_allowed(
        &self,
        key: &str,
        release_dir: &std::path::Path,
        launch: &pb::LaunchSpec,
    ) -> Result<(), String> {
        if launch.transport() != pb::Transport::Stdio {
            return Ok(());
        }
        let install_allowed = {
            let inner = lock(&self.inner);
            let entry = inner.registry.connectors.get(key);
            std::iter::successors(entry, |e| e.previous.as_deref())
                .find(|e| e.release_dir == release_dir)
                .map(|e| e.allow_commands.clone())
                .unwrap_or_default()
        };
        let owner = crate::release::allowlist::owner_allowed();
        let rules = crate::release::allowlist::Rules {
            release: release_dir,
            source: None,
            runtime_dir: &self.paths.libexec,
            owner_allowed: &owner,
            install_allowed: &install_allowed,
            path_var: self.path_var(),
        };
        crate::release::allowlist::check(std::path::Path::new(&launch.command), &rules)
    }

    /// A generation of `release_dir` committed: if it is an upgrade's, the upgrade is now
    /// the current release and the one it replaced is forgotten.
    pub fn settle_upgrade(&self, inner: &mut Inner, key: &str, release_dir: &std::path::Path) {
        let Some(entry) = inner.registry.connectors.get_mut(key) else {
            return;
        };
        if entry.previous.is_none() || entry.release_dir != release_dir {
            return;
        }
        entry.previous = None;
        if let Err(e) = self.save_registry(inner) {
            tracing::error!(key, error = %e, "cannot record the committed upgrade");
        }
    }

    /// Records the pin of `key` (SPEC §12) in the registry, if the pin's release is the
    /// installed one (an upgrade installed meanwhile starts a pin of its own).
    pub fn store_pin(&self, inner: &mut Inner, key: &str, pin: crate::release::pin::Pin) {
        let Some(entry) = inner.registry.connectors.get_mut(key) else {
            return;
        };
        let current = entry.release_dir == pin.release_dir
            || entry
                .previous
                .as_ref()
                .is_some_and(|p| p.release_dir == pin.release_dir);
        if !current {
            return;
        }
        tracing::info!(key, hash = %pin.hash, entries = pin.entries.len(), "definitions pinned");
        entry.pin = Some(pin);
        if let Err(e) = self.save_registry(inner) {
            tracing::error!(key, error = %e, "cannot record the pinned definitions");
        }
    }

    /// The upgrade of `key` failed before its first commit (`why`): the release it replaced
    /// becomes the current one again, in the registry and for the next worker. Returns the
    /// note shown in `status`, or `None` when no upgrade was pending.
    pub fn abandon_upgrade(&self, inner: &mut Inner, key: &str, why: &str) -> Option<String> {
        let entry = inner.registry.connectors.get(key)?;
        let previous = entry.previous.as_deref()?.clone();
        let manifest = match inner.live_releases.get(key) {
            Some(live) if live.release_dir == previous.release_dir => live.manifest.clone(),
            _ => match crate::release::manifest::load(&previous.release_dir) {
                Ok(m) => m,
                Err(problems) => {
                    tracing::error!(key, problems = %problems.join("; "),
                        "cannot go back to the release an upgrade replaced");
                    return None;
                }
            },
        };
        // Start failures are redacted already; refusal problems quote upstream text.
        let why = self.redact(why);
        let why = why.as_str();
        let failed = entry.version.clone();
        let connected = entry.connected;
        let auth = self.auth_state(key, &manifest, connected);
        let restored = Installed {
            auth,
            connected,
            previous: None,
            // The pin of the release that serves (an approval may have come since).
            pin: entry.pin.clone(),
            ..previous
        };
        let note = format!(
            "upgrade to {failed} not applied: {why}; {} stays the current release \
             (install a fixed release to upgrade)",
            restored.version
        );
        tracing::warn!(key, failed = %failed, current = %restored.version, why, "upgrade abandoned");
        self.audit.record(crate::audit::Event::UpgradeAbandoned {
            connector: key.to_string(),
            version: failed.clone(),
            current: restored.version.clone(),
            reason: why.to_string(),
        });
        inner.registry.connectors.insert(key.to_owned(), restored);
        inner.manifests.insert(key.to_owned(), manifest);
        if let Err(e) = self.save_registry(inner) {
            tracing::error!(key, error = %e, "cannot record the abandoned upgrade");
        }
        Some(note)
    }

    /// Makes `generation` of `key` the live route: `tools` is `None` for a connector
    /// without MCP. The release it runs becomes the live release (settling an upgrade of
    /// it); the generation it supersedes leaves the table in the same step. The one commit.
    pub fn commit(
        &self,
        inner: &mut Inner,
        key: &str,
        generation: u64,
        tools: Option<crate::catalog::Candidate>,
        release_dir: PathBuf,
    ) {
        self.reserve_generation(inner, generation);
        let pending = inner
            .conns
            .get(key)
            .and_then(|c| c.workers.get(&generation));
        let endpoint = pending.map(|p| p.endpoint.clone()).unwrap_or_default();
        let data_endpoint = pending.map(|p| p.data_endpoint.clone()).unwrap_or_default();
        let manifest = match (pending, inner.manifests.get(key)) {
            (Some(p), _) => p.release.manifest.clone(),
            (None, Some(m)) => m.clone(),
            (None, None) => return,
        };
        let has_mcp = tools.is_some();
        let crate::catalog::Candidate { tools, catalog } = tools.unwrap_or_default();
        let n = tools.len();
        let route = Route {
            key: key.to_string(),
            name: manifest.name.clone(),
            generation,
            endpoint,
            data_endpoint,
            call_timeout_ms: manifest.call_ms,
            has_cli: manifest.cli.is_some(),
            has_mcp,
            tools,
            circuit: manifest.circuit,
            catalog,
            skills: route_skills(&release_dir, &manifest),
        };
        let superseded = inner
            .table
            .live(key)
            .map(|r| r.generation)
            .filter(|g| *g != generation);
        self.settle_upgrade(inner, key, &release_dir);
        inner.live_releases.insert(
            key.to_string(),
            LiveRelease {
                release_dir,
                manifest,
            },
        );
        if let Some((rev, change)) = inner.table.commit(route, self.now()) {
            self.publish(rev, change);
        }
        self.audit.record(crate::audit::Event::Commit {
            connector: key.to_string(),
            generation,
            tools: n,
            superseded,
        });
        tracing::info!(key = %key, generation, tools = n, "committed");
    }

    pub fn release_dir(inner: &Inner, key: &str) -> Option<PathBuf> {
        inner
            .registry
            .connectors
            .get(key)
            .map(|c| c.release_dir.clone())
    }
}

/// The headers that carry a remote upstream's stored credentials.
fn auth_headers(
    auth: &Auth,
    secrets: &BTreeMap<String, String>,
) -> std::collections::HashMap<String, String> {
    let mut headers = std::collections::HashMap::new();
    match auth {
        Auth::None => {}
        Auth::Bearer { secret } => {
            if let Some(v) = secrets.get(secret) {
                headers.insert("Authorization".to_string(), format!("Bearer {v}"));
            }
        }
        Auth::Header { header, secret } => {
            if let Some(v) = secrets.get(secret) {
                headers.insert(header.clone(), v.clone());
            }
        }
        Auth::Oauth(_) => {
            let record = crate::connect::oauth_record::record(secrets);
            if let Some(token) = record.grant.as_ref().and_then(|g| g.access_token()) {
                headers.insert("Authorization".to_string(), format!("Bearer {token}"));
            }
        }
    }
    headers
}

pub fn route_to_pb(r: &Route) -> pb::ConnectorRoute {
    pb::ConnectorRoute {
        key: r.key.clone(),
        name: r.name.clone(),
        generation: r.generation,
        worker_endpoint: r.endpoint.clone(),
        worker_data_endpoint: r.data_endpoint.clone(),
        call_timeout_ms: r.call_timeout_ms,
        tools: r
            .tools
            .iter()
            .map(|t| pb::RoutedTool {
                name: t.local_name.clone(),
                upstream_name: t.upstream_name.clone(),
                definition_json: t.definition_json.clone(),
                risk: t.risk.as_str().into(),
            })
            .collect(),
        has_cli: r.has_cli,
        has_mcp: r.has_mcp,
        circuit_failures: r.circuit.failures,
        circuit_window_ms: r.circuit.window_ms,
        circuit_open_ms: r.circuit.open_ms,
        prompts: r
            .catalog
            .prompts
            .iter()
            .map(|p| pb::RoutedPrompt {
                name: p.local_name.clone(),
                upstream_name: p.upstream_name.clone(),
                definition_json: p.definition_json.clone(),
            })
            .collect(),
        resources: resources_to_pb(&r.catalog.resources),
        resource_templates: resources_to_pb(&r.catalog.templates),
        completions: r.catalog.completions,
        resources_subscribe: r.catalog.subscribe,
        skills: r
            .skills
            .iter()
            .map(|s| pb::RoutedSkill {
                name: s.name.clone(),
                dir: s.dir.to_string_lossy().into_owned(),
                files: s.files.clone(),
            })
            .collect(),
    }
}

/// The skills of a release copy as a route carries them: each with the files of its
/// directory that are part of the release (the copy's own list, which the install scanned).
fn route_skills(release_dir: &Path, manifest: &Manifest) -> Vec<crate::table::RouteSkill> {
    let listed = crate::release::listed_files(release_dir).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "cannot list the release's files; its skills serve no files");
        Vec::new()
    });
    manifest
        .skills
        .iter()
        .map(|s| crate::table::RouteSkill {
            name: s.name.clone(),
            dir: release_dir.join(&s.dir),
            files: crate::release::files_under(&listed, Path::new(&s.dir)),
        })
        .collect()
}

fn resources_to_pb(items: &[crate::catalog::ValidResource]) -> Vec<pb::OfferedResource> {
    items
        .iter()
        .map(|r| pb::OfferedResource {
            uri: r.uri.clone(),
            definition_json: r.definition_json.clone(),
        })
        .collect()
}

/// The base environment of an upstream ([`child_env::ChildKind::Upstream`]).
fn base_env() -> BTreeMap<String, String> {
    child_env::inherited(child_env::ChildKind::Upstream, child_env::from_process)
        .into_iter()
        .collect()
}

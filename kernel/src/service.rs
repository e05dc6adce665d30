//! The Kernel gRPC service: the control plane for the CLI, the frontend, the shims and the
//! workers. Errors become `tonic::Status` here and only here; their messages are
//! user-facing (the CLI prints them as they are) and never carry a secret.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use futures_util::Stream;
use tokio::sync::broadcast::error::RecvError;
use tonic::{Request, Response, Status};
use tutti_proto::kernel as pb;
use tutti_proto::kernel::kernel_server::Kernel as KernelRpc;

use crate::audit::Event;
use crate::lifecycle::{Input, Msg, ReportKind};
use crate::registry::{AuthState, Installed};
use crate::release::manifest::{self, Manifest, Mcp};
use crate::sessions::revocation::{Revocation, revoke};
use crate::state::{Credentials, Kernel, Status as CStatus, lock, sha256};
use crate::supervisor::{start_actor, step_now};
use crate::toolset::{OfferedTool, validate};

pub struct Service {
    pub k: Arc<Kernel>,
}

fn precondition(msg: impl Into<String>) -> Status {
    Status::failed_precondition(msg.into())
}

fn not_installed(key: &str) -> Status {
    Status::not_found(format!(
        "connector {key:?} is not installed (see `tutti connector available`)"
    ))
}

/// The manifest of an installed connector. One whose installed release could not be read at
/// kernel start is in the registry but has none: say so, and how to get out of it.
fn manifest_of<'a>(inner: &'a crate::state::Inner, key: &str) -> Result<&'a Manifest, Status> {
    inner.manifests.get(key).ok_or_else(|| {
        if inner.registry.connectors.contains_key(key) {
            precondition(format!(
                "the installed release of connector {key} cannot be read (see `tutti status`); reinstall it with `tutti connector install DIR` or remove it with `tutti connector uninstall {key}`"
            ))
        } else {
            not_installed(key)
        }
    })
}

/// A validated release ready to install.
struct Plan {
    manifest: Manifest,
    sha: String,
    release_dir: PathBuf,
    reply: pb::InstallPlan,
}

impl Service {
    /// [`Service::plan`] on the blocking pool: it hashes every file of the release, which
    /// must not stall the kernel's single runtime thread. (It starts no process.)
    async fn plan_off_thread(&self, req: pb::InstallRequest) -> Result<Plan, Status> {
        let svc = Service { k: self.k.clone() };
        tokio::task::spawn_blocking(move || svc.plan(&req))
            .await
            .map_err(|e| Status::internal(format!("install plan task: {e}")))?
    }

    fn plan(&self, req: &pb::InstallRequest) -> Result<Plan, Status> {
        let src = PathBuf::from(&req.source_dir);
        if !src.is_absolute() {
            return Err(Status::invalid_argument(format!(
                "{}: the release directory must be given as an absolute path",
                req.source_dir
            )));
        }
        if !src.is_dir() {
            return Err(Status::invalid_argument(format!(
                "{}: not a directory (give the directory that holds connector.json)",
                req.source_dir
            )));
        }
        let mut reply = pb::InstallPlan {
            allowed_commands: req.allow_commands.clone(),
            allowed_env: req.allow_env.clone(),
            ..Default::default()
        };
        let manifest = match manifest::load(&src) {
            Ok(m) => m,
            Err(mut problems) => {
                // List the launch problems in the same refusal, one line per problem.
                let launch = manifest::launch_problems(
                    &src,
                    &self.k.paths.state,
                    &self.k.base_env,
                    &problems,
                );
                problems.extend(launch);
                reply.problems = problems;
                return Ok(Plan {
                    manifest: placeholder_manifest(),
                    sha: String::new(),
                    release_dir: PathBuf::new(),
                    reply,
                });
            }
        };
        let sha = crate::release::hash_tree(&src).map_err(precondition)?;
        let release_dir = self.k.paths.releases().join(&manifest.key).join(&sha);
        reply.key = manifest.key.clone();
        reply.sha256 = sha.clone();
        reply.name = manifest.name.clone();
        reply.description = manifest.description.clone();
        reply.version = manifest.version.clone();
        reply.secret_names = manifest.secret_names();
        reply
            .problems
            .extend(manifest::injection_problems(&manifest, &req.allow_env));
        scan_skills(req, &manifest, &src, &mut reply);
        if let Some(cli) = &manifest.cli {
            reply.cli_entrypoint = cli.entrypoint.clone();
        }
        {
            let inner = lock(&self.k.inner);
            if let Some(serving) = serving_version(&inner, &manifest.key) {
                reply.upgrades_version = serving;
            }
            reply.same_release = inner
                .registry
                .connectors
                .get(&manifest.key)
                .is_some_and(|c| c.sha256 == sha && c.previous.is_none());
        }
        self.plan_launch(req, &manifest, &src, &release_dir, &mut reply);
        Ok(Plan {
            manifest,
            sha,
            release_dir,
            reply,
        })
    }

    /// The launch part of an install plan: transport, argv, cwd and `env` as the upstream
    /// gets them (SPEC §12: shown), or the problems that refuse them.
    fn plan_launch(
        &self,
        req: &pb::InstallRequest,
        manifest: &Manifest,
        src: &std::path::Path,
        release_dir: &std::path::Path,
        reply: &mut pb::InstallPlan,
    ) {
        match &manifest.mcp {
            Some(Mcp::Stdio {
                command,
                args,
                cwd,
                env,
                ..
            }) => {
                reply.transport = pb::Transport::Stdio.label().into();
                // Validated against the source: the release copy does not exist yet.
                match manifest::stdio_launch_from(
                    command,
                    args,
                    cwd,
                    env,
                    release_dir,
                    src,
                    &self.k.paths.state,
                    &self.k.base_env,
                ) {
                    Ok(l) => {
                        let owner = crate::release::allowlist::owner_allowed();
                        let rules = crate::release::allowlist::Rules {
                            release: release_dir,
                            source: Some(src),
                            runtime_dir: &self.k.paths.libexec,
                            owner_allowed: &owner,
                            install_allowed: &req.allow_commands,
                            path_var: self.k.path_var(),
                        };
                        if let Err(p) = crate::release::allowlist::check(&l.program, &rules) {
                            reply.problems.push(p);
                        }
                        reply.argv = std::iter::once(l.program.to_string_lossy().into_owned())
                            .chain(l.args)
                            .collect();
                        reply.cwd = l.cwd.to_string_lossy().into_owned();
                        // What `env` sets, as the upstream gets it (SPEC §12: shown).
                        reply.env = env
                            .keys()
                            .filter_map(|name| {
                                l.env.get(name).map(|value| pb::EnvVar {
                                    name: name.clone(),
                                    value: value.clone(),
                                })
                            })
                            .collect();
                    }
                    Err(p) => reply.problems.extend(p),
                }
            }
            Some(Mcp::Http { url, auth }) => {
                reply.transport = pb::Transport::Http.label().into();
                reply.url = url.clone();
                reply.oauth_login = matches!(auth, crate::release::manifest::Auth::Oauth(_));
            }
            None => {}
        }
    }

    /// Records the copied release in the registry (with the release it falls back to) and
    /// steps the connector's lifecycle; whether it was an upgrade, and its status now.
    fn record_install(
        &self,
        req: &pb::InstallRequest,
        plan: &Plan,
    ) -> Result<(bool, CStatus), Status> {
        let key = plan.manifest.key.clone();
        let mut inner = lock(&self.k.inner);
        let connected = inner
            .registry
            .connectors
            .get(&key)
            .map(|c| c.auth == AuthState::Ready || c.connected)
            .unwrap_or(true);
        let upgraded = inner.registry.connectors.contains_key(&key);
        // What the new release falls back to if it fails before its first commit: the
        // release an unfinished upgrade was going to replace, else the current one (read
        // from the registry, so it holds after a kernel restart too).
        let previous = inner.registry.connectors.get(&key).and_then(|entry| {
            let mut entry = entry.clone();
            let fallback = match entry.previous.take() {
                Some(older) => *older,
                None => entry,
            };
            (fallback.release_dir != plan.release_dir).then(|| Box::new(fallback))
        });
        let auth = self.k.auth_state(&key, &plan.manifest, connected);
        let installed = Installed {
            version: plan.manifest.version.clone(),
            sha256: plan.sha.clone(),
            release_dir: plan.release_dir.clone(),
            installed_at_unix: now_unix(),
            skill_findings: plan.reply.skill_findings.clone(),
            confirmed_launch: confirmed_launch(&plan.reply),
            allow_commands: req.allow_commands.clone(),
            allow_env: req.allow_env.clone(),
            auth,
            connected,
            previous,
            pin: inner
                .registry
                .connectors
                .get(&key)
                .and_then(|c| c.pin.clone()),
            trust_updates: req.trust_updates,
        };
        if req.trust_updates {
            self.k.audit.record(Event::TrustUpdates {
                connector: key.clone(),
                version: plan.manifest.version.clone(),
            });
        }
        // An upgrade waiting for a secret leaves the live release serving (and ready).
        let waits = installed.upgrade_waits_for_secrets() && inner.table.live(&key).is_some();
        inner.registry.connectors.insert(key.clone(), installed);
        inner.manifests.insert(key.clone(), plan.manifest.clone());
        let install = Input::Install {
            auth_required: auth == AuthState::Required,
            waits,
        };
        step_now(&self.k, &mut inner, &key, install);
        let status = inner
            .conns
            .get(&key)
            .map_or(CStatus::Starting, |c| c.life.status());
        self.k
            .save_registry(&mut inner)
            .map_err(|e| Status::internal(e.to_string()))?;
        Ok((upgraded, status))
    }

    fn reload(&self, key: &str) {
        let tx = lock(&self.k.inner).actors.get(key).cloned();
        match tx {
            Some(tx) => {
                let _ = tx.send(Msg::step(Input::Reload));
            }
            None => {
                start_actor(&self.k, key);
            }
        }
    }
}

/// SPEC §12: the skill scan. Its findings are shown in the plan; unless the install allows
/// them (`--allow-skill-findings`) each is a refusal line, followed by the way out.
fn scan_skills(
    req: &pb::InstallRequest,
    manifest: &Manifest,
    src: &std::path::Path,
    reply: &mut pb::InstallPlan,
) {
    let dirs: Vec<String> = manifest.skills.iter().map(|s| s.dir.clone()).collect();
    match crate::skills::scan::scan_release(src, &dirs) {
        Ok(findings) => {
            if !findings.is_empty() && !req.allow_skill_findings {
                reply.problems.extend(findings.iter().cloned());
                reply.problems.push(
                    "the skill scan found the above; review the skill files, or install with --allow-skill-findings to install anyway (the findings are recorded)"
                        .into(),
                );
            }
            reply.skill_findings = findings;
        }
        Err(e) => reply.problems.push(format!("skill scan: {e}")),
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

/// The agent-facing interface status of `tutti connector available` (SPEC §7). Refused
/// credentials (`auth_failed`) read as `auth_required`: for an agent the way out is the same,
/// the user runs `tutti connector connect` again.
fn interface_status(status: CStatus, live: bool) -> &'static str {
    match status {
        CStatus::Ready if live => "ready",
        CStatus::Starting | CStatus::Restarting => "starting",
        CStatus::AuthRequired | CStatus::AuthFailed => "auth_required",
        CStatus::Ready | CStatus::CrashLoop | CStatus::Failed | CStatus::Stopped => "unavailable",
    }
}

/// `connect` stored what it was given but the connector still lacks secrets: name them and
/// the command that supplies them.
fn missing_secrets_message(key: &str, missing: &[String], stored_some: bool) -> String {
    let first = missing.first().map(String::as_str).unwrap_or("NAME");
    let plural = missing.len() > 1;
    format!(
        "connector {key} still needs the secret{s} {names} before it can run{stored}; run \
         `tutti connector connect {key} --from-env {first}` (or `--stdin {first}`){each}",
        s = if plural { "s" } else { "" },
        names = missing.join(", "),
        stored = if stored_some {
            " (the values given were stored)"
        } else {
            ""
        },
        each = if plural {
            ", naming every missing secret"
        } else {
            ""
        },
    )
}

/// The exact argv (stdio) or URL (http) the install confirmation showed.
fn confirmed_launch(plan: &pb::InstallPlan) -> Vec<String> {
    if plan.url.is_empty() {
        plan.argv.clone()
    } else {
        vec![plan.url.clone()]
    }
}

fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pb::RouteEvent, Status>> + Send>>;

#[tonic::async_trait]
impl KernelRpc for Service {
    async fn plan_install(
        &self,
        req: Request<pb::InstallRequest>,
    ) -> Result<Response<pb::InstallPlan>, Status> {
        Ok(Response::new(
            self.plan_off_thread(req.into_inner()).await?.reply,
        ))
    }

    async fn install(
        &self,
        req: Request<pb::InstallRequest>,
    ) -> Result<Response<pb::InstallReply>, Status> {
        let _admin = self.k.admin.lock().await;
        let req = req.into_inner();
        let plan = self.plan_off_thread(req.clone()).await?;
        // SPEC §12: what the user confirmed is what is installed, or nothing.
        if !req.expected_sha256.is_empty()
            && !plan.sha.is_empty()
            && req.expected_sha256 != plan.sha
        {
            return Err(precondition(crate::release::changed_after_confirmation(
                std::path::Path::new(&req.source_dir),
                &req.expected_sha256,
                &plan.sha,
            )));
        }
        if !plan.reply.problems.is_empty() {
            return Err(precondition(plan.reply.problems.join("\n")));
        }
        // Copying a whole release is blocking file work: off the (single) runtime thread.
        // The copy is hashed again: a folder changed during the copy installs nothing.
        let (source, dest) = (PathBuf::from(&req.source_dir), plan.release_dir.clone());
        let sha = plan.sha.clone();
        tokio::task::spawn_blocking(move || crate::release::copy_release(&source, &dest, &sha))
            .await
            .map_err(|e| Status::internal(format!("release copy task: {e}")))?
            .map_err(precondition)?;
        let key = plan.manifest.key.clone();
        let (upgraded, status) = self.record_install(&req, &plan)?;
        // The trust step: what the user confirmed (names and the launch line, no values).
        self.k.audit.record(Event::Install {
            connector: key.clone(),
            version: plan.manifest.version.clone(),
            sha256: plan.sha.clone(),
            upgraded,
            confirmed_launch: confirmed_launch(&plan.reply),
            allow_commands: req.allow_commands.clone(),
            allow_env: req.allow_env.clone(),
        });
        if !plan.reply.skill_findings.is_empty() {
            self.k.audit.record(Event::SkillFindingsAllowed {
                connector: key.clone(),
                sha256: plan.sha.clone(),
                findings: plan.reply.skill_findings.clone(),
            });
        }
        tracing::info!(key, version = %plan.manifest.version, sha = %plan.sha, upgraded, "installed");
        self.reload(&key);
        Ok(Response::new(pb::InstallReply {
            key,
            version: plan.manifest.version,
            sha256: plan.sha,
            upgraded,
            status: status.as_str().into(),
        }))
    }

    async fn uninstall(&self, req: Request<pb::KeyRequest>) -> Result<Response<pb::Empty>, Status> {
        let _admin = self.k.admin.lock().await;
        let pb::KeyRequest {
            key,
            expected_sha256,
            ..
        } = req.into_inner();
        let tx = {
            let inner = lock(&self.k.inner);
            if !inner.registry.connectors.contains_key(&key) {
                return Err(not_installed(&key));
            }
            crate::console_rpc::check_unchanged(&inner, &key, &expected_sha256)?;
            inner.actors.get(&key).cloned()
        };
        if let Some(tx) = tx {
            let (done, wait) = tokio::sync::oneshot::channel();
            let _ = tx.send(Msg {
                input: Input::Stop {
                    reason: "uninstalled".into(),
                    drain: crate::supervisor::UNINSTALL_DRAIN,
                },
                reply: Some(done),
            });
            let _ = wait.await;
        }
        {
            let mut inner = lock(&self.k.inner);
            self.k.fence(&mut inner, &key, None, "uninstalled");
            inner.actors.remove(&key);
            inner.conns.remove(&key);
            inner.manifests.remove(&key);
            inner.live_releases.remove(&key);
            inner.registry.connectors.remove(&key);
            self.k
                .save_registry(&mut inner)
                .map_err(|e| Status::internal(e.to_string()))?;
        }
        // An OAuth login is revoked at the server before its tokens are deleted (SPEC §10).
        crate::connect::oauth::revoke(&self.k, &key).await;
        self.k.secrets.delete(&key);
        // Off the kernel's one runtime thread: a release can hold many files.
        let releases = self.k.paths.releases().join(&key);
        let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(releases)).await;
        self.k.audit.record(Event::Uninstall {
            connector: key.clone(),
        });
        tracing::info!(key, "uninstalled");
        Ok(Response::new(pb::Empty {}))
    }

    async fn connect_connector(
        &self,
        req: Request<pb::ConnectRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        let _admin = self.k.admin.lock().await;
        let req = req.into_inner();
        let declared = {
            let inner = lock(&self.k.inner);
            let declared = manifest_of(&inner, &req.key)?.secret_names();
            crate::console_rpc::check_unchanged(&inner, &req.key, &req.expected_sha256)?;
            declared
        };
        for name in req.secrets.keys() {
            if !declared.contains(name) {
                return Err(Status::invalid_argument(format!(
                    "{name} is not a secret of {} (declared: {})",
                    req.key,
                    if declared.is_empty() {
                        "none".to_string()
                    } else {
                        declared.join(", ")
                    }
                )));
            }
        }
        for (name, value) in &req.secrets {
            if value.is_empty() {
                return Err(Status::invalid_argument(format!(
                    "the value given for {name} is empty"
                )));
            }
        }
        let values: BTreeMap<String, String> = req.secrets.into_iter().collect();
        self.k
            .secrets
            .store(&req.key, &values)
            .map_err(|e| Status::internal(e.to_string()))?;
        let missing: Vec<String> = {
            let stored = self.k.secrets.load(&req.key);
            declared
                .iter()
                .filter(|n| !stored.contains_key(*n))
                .cloned()
                .collect()
        };
        {
            let mut inner = lock(&self.k.inner);
            let manifest = manifest_of(&inner, &req.key)?.clone();
            let auth = self.k.auth_state(&req.key, &manifest, true);
            if let Some(c) = inner.registry.connectors.get_mut(&req.key) {
                c.connected = true;
                c.auth = auth;
            }
            self.k.save_registry(&mut inner).map_err(|e| {
                Status::internal(format!(
                    "the values of {} were saved, but the registry could not be written: {e}",
                    values.keys().cloned().collect::<Vec<_>>().join(", ")
                ))
            })?;
        }
        self.k.audit.record(Event::Connect {
            connector: req.key.clone(),
            secrets: values.keys().cloned().collect(),
            missing: missing.clone(),
        });
        self.reload(&req.key);
        if !missing.is_empty() {
            return Err(precondition(missing_secrets_message(
                &req.key,
                &missing,
                !values.is_empty(),
            )));
        }
        Ok(Response::new(pb::Empty {}))
    }

    async fn disconnect_connector(
        &self,
        req: Request<pb::KeyRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        let _admin = self.k.admin.lock().await;
        let pb::KeyRequest {
            key,
            expected_sha256,
            ..
        } = req.into_inner();
        {
            let mut inner = lock(&self.k.inner);
            crate::console_rpc::check_unchanged(&inner, &key, &expected_sha256)?;
            let c = inner
                .registry
                .connectors
                .get_mut(&key)
                .ok_or_else(|| not_installed(&key))?;
            c.connected = false;
            c.auth = AuthState::Required;
            step_now(&self.k, &mut inner, &key, Input::Disconnect);
            self.k
                .save_registry(&mut inner)
                .map_err(|e| Status::internal(e.to_string()))?;
        }
        crate::connect::oauth::revoke(&self.k, &key).await;
        self.k.secrets.delete(&key);
        self.k.audit.record(Event::Disconnect {
            connector: key.clone(),
        });
        self.reload(&key);
        Ok(Response::new(pb::Empty {}))
    }

    async fn status(&self, _req: Request<pb::Empty>) -> Result<Response<pb::StatusReply>, Status> {
        let redact = self.k.redactor();
        let inner = lock(&self.k.inner);
        self.k.figures.retain_keys(&inner.registry.connectors);
        let mut connectors = Vec::new();
        for (key, installed) in &inner.registry.connectors {
            let m = inner.manifests.get(key);
            let c = inner.conns.get(key);
            let live = inner.table.live(key);
            let oauth = m.and_then(crate::connect::oauth_record::oauth_of).is_some();
            let mut s = pb::ConnectorStatus {
                key: key.clone(),
                name: m.map(|m| m.name.clone()).unwrap_or_default(),
                // The version that is live, else the installed one.
                version: inner
                    .serving(key)
                    .map_or(&installed.version, |l| &l.manifest.version)
                    .clone(),
                generation: live.map(|r| r.generation).unwrap_or(0),
                status: c.map_or("stopped", |c| c.life.status().as_str()).into(),
                tool_count: live.map(|r| r.tools.len() as u32).unwrap_or(0),
                restarts: c.map_or(0, |c| c.life.restarts()),
                reinitializations: c.map_or(0, |c| c.life.reinitializations()),
                oauth,
                token_expires_unix_ms: if oauth {
                    crate::connect::oauth::expiry(&self.k, key)
                } else {
                    0
                },
                oauth_account: crate::connect::oauth::account(&self.k, key),
                last_error: c
                    .map(|c| {
                        let (error, note) = (c.life.last_error(), c.life.upgrade_note());
                        match (error.is_empty(), note.is_empty()) {
                            (_, true) => redact(error),
                            (true, false) => redact(note),
                            (false, false) => redact(&format!("{error}; {note}")),
                        }
                    })
                    .unwrap_or_default(),
                next_retry_unix_ms: c.map_or(0, |c| c.life.next_retry_unix_ms()),
                non_json_stdout_lines: c.map(|c| c.non_json_lines).unwrap_or(0),
                has_mcp: m.is_some_and(|m| m.mcp.is_some()),
                has_cli: m.is_some_and(|m| m.cli.is_some()),
                changes_await_review: c.is_some_and(|c| c.life.held().is_some()),
                review_summary: c
                    .and_then(|c| c.life.held())
                    .map(|h| redact(&h.summary))
                    .unwrap_or_default(),
                circuit: c
                    .and_then(|c| c.circuit.as_ref())
                    .map_or("closed", |s| s.state.as_str())
                    .into(),
                circuit_note: c
                    .and_then(|c| c.circuit.as_ref())
                    .map(|s| s.note(key, crate::state::unix_ms(std::time::SystemTime::now())))
                    .unwrap_or_default(),
                call_figures: Some(self.k.figures.figures(key)),
                sha256: installed.sha256.clone(),
                secret_names: m.map(|m| m.secret_names()).unwrap_or_default(),
                ..self.k.telemetry_drops.connector(key)
            };
            if let Some(r) = live {
                count_live(&mut s, r);
            }
            connectors.push(s);
        }
        Ok(Response::new(pb::StatusReply {
            frontend_url: lock(&self.k.frontend_url).clone().unwrap_or_default(),
            route_revision: inner.table.revision(),
            state_dir: self.k.paths.state.to_string_lossy().into_owned(),
            kernel_pid: std::process::id(),
            connectors,
            audit_dropped: self.k.audit.dropped(),
            bin_dir: self.k.paths.bin().to_string_lossy().into_owned(),
            resource_clashes: resource_clashes(&inner.table),
            registry_revision: inner.registry.revision,
            ..self.k.telemetry_drops.reply()
        }))
    }

    async fn available(
        &self,
        _req: Request<pb::Empty>,
    ) -> Result<Response<pb::AvailableReply>, Status> {
        let inner = lock(&self.k.inner);
        let mut out = Vec::new();
        for key in inner.registry.connectors.keys() {
            // What agents are served: the live release while an upgrade is pending.
            let live_manifest = inner.serving(key).map(|l| &l.manifest);
            let Some(m) = live_manifest.or_else(|| inner.manifests.get(key)) else {
                // Installed, but its release cannot be read (SPEC §7 lists every installed
                // connector): nothing of it can run, and only `tutti status` has the details.
                out.push(pb::AvailableConnector {
                    key: key.clone(),
                    name: key.clone(),
                    description:
                        "not usable: its installed release cannot be read (`tutti status` says why)"
                            .into(),
                    skills: Vec::new(),
                    interfaces: Vec::new(),
                });
                continue;
            };
            let status = inner
                .conns
                .get(key)
                .map_or(CStatus::Stopped, |c| c.life.status());
            let iface_status = interface_status(status, inner.table.live(key).is_some());
            let mut interfaces = Vec::new();
            if m.mcp.is_some() {
                interfaces.push(pb::InterfaceStatus {
                    kind: "mcp".into(),
                    status: iface_status.into(),
                    server_name: "connector".into(),
                    tool_prefix: format!("{key}_"),
                    command: String::new(),
                });
            }
            if m.cli.is_some() {
                interfaces.push(pb::InterfaceStatus {
                    kind: "cli".into(),
                    status: iface_status.into(),
                    server_name: String::new(),
                    tool_prefix: String::new(),
                    command: format!("tutti-connector-{key}"),
                });
            }
            out.push(pb::AvailableConnector {
                key: key.clone(),
                name: m.name.clone(),
                description: m.description.clone(),
                skills: m
                    .skills
                    .iter()
                    .map(|s| pb::SkillSummary {
                        name: s.name.clone(),
                        title: s.title.clone().unwrap_or_default(),
                        description: s.description.clone(),
                    })
                    .collect(),
                interfaces,
            });
        }
        Ok(Response::new(pb::AvailableReply { connectors: out }))
    }

    async fn issue_session(
        &self,
        req: Request<pb::IssueSessionRequest>,
    ) -> Result<Response<pb::IssueSessionReply>, Status> {
        let req = req.into_inner();
        if req.workspace.is_empty() || req.session.is_empty() {
            return Err(Status::invalid_argument(
                "--workspace and --session must not be empty",
            ));
        }
        let url = lock(&self.k.frontend_url).clone().ok_or_else(|| {
            Status::unavailable("the MCP frontend is not running yet; try again in a moment")
        })?;
        let token = crate::sessions::tokens::new_token()
            .map_err(|e| Status::internal(format!("random: {e}")))?;
        let id = crate::sessions::tokens::SessionId {
            workspace: req.workspace.clone(),
            session: req.session.clone(),
        };
        // Reissue revokes the previous token; its listen streams end, and no session cache
        // accepts it once this returns.
        let tools = req.tools();
        revoke(
            &self.k,
            Revocation::Reissue {
                id,
                token: &token,
                tools,
                confirm_high: req.confirm_high,
            },
        )
        .await;
        // One stable root: the shim manager keeps every live connector's
        // skills in it, so a connector that becomes ready after this session was issued
        // still reaches it, and a removed one leaves it.
        let skill_roots = vec![self.k.paths.skills().to_string_lossy().into_owned()];
        self.k.audit.record(Event::SessionIssue {
            workspace: req.workspace.clone(),
            session: req.session.clone(),
        });
        tracing::info!(workspace = %req.workspace, session = %req.session, tools = ?tools, confirm_high = req.confirm_high, "session issued");
        Ok(Response::new(pb::IssueSessionReply {
            token,
            url,
            skill_roots,
            bin_dir: self.k.paths.bin().to_string_lossy().into_owned(),
            tools: tools.into(),
        }))
    }

    async fn revoke_session(
        &self,
        req: Request<pb::RevokeSessionRequest>,
    ) -> Result<Response<pb::RevokeSessionReply>, Status> {
        let req = req.into_inner();
        if !req.all && (req.workspace.is_empty() || req.session.is_empty()) {
            return Err(Status::invalid_argument(
                "give --workspace and --session, or --all",
            ));
        }
        let id = crate::sessions::tokens::SessionId {
            workspace: req.workspace.clone(),
            session: req.session.clone(),
        };
        // "A revocation holds for every request that starts after the command returns": the
        // frontend's session cache has dropped the token (or the frontend was stopped).
        let revoked = if req.all {
            revoke(&self.k, Revocation::All).await
        } else {
            revoke(&self.k, Revocation::One(&id)).await
        };
        self.k.audit.record(Event::SessionRevoke {
            workspace: req.workspace.clone(),
            session: req.session.clone(),
            all: req.all,
            revoked,
        });
        tracing::info!(all = req.all, workspace = %req.workspace, session = %req.session, revoked, "sessions revoked");
        Ok(Response::new(pb::RevokeSessionReply { revoked }))
    }

    async fn probe(
        &self,
        req: Request<pb::ProbeRequest>,
    ) -> Result<Response<pb::ProbeReply>, Status> {
        crate::supervisor::probe::probe(&self.k, req.into_inner())
            .await
            .map(Response::new)
    }

    async fn verify_session(
        &self,
        req: Request<pb::VerifySessionRequest>,
    ) -> Result<Response<pb::VerifySessionReply>, Status> {
        let tokens = lock(&self.k.tokens);
        Ok(Response::new(match tokens.record(&req.get_ref().token) {
            Some(record) => pb::VerifySessionReply {
                valid: true,
                workspace: record.id.workspace.clone(),
                session: record.id.session.clone(),
                tools: record.tools.into(),
                confirm_high: record.confirm_high,
            },
            None => pb::VerifySessionReply::default(),
        }))
    }

    async fn ack_routes(
        &self,
        req: Request<pb::AckRoutesRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        let req = req.into_inner();
        self.k.session_caches.ack(req.watcher_id, req.revision);
        Ok(Response::new(pb::Empty {}))
    }

    type WatchRoutesStream = EventStream;

    async fn watch_routes(
        &self,
        req: Request<pb::WatchRoutesRequest>,
    ) -> Result<Response<EventStream>, Status> {
        let req = req.into_inner();
        let (snapshot, mut rx, registration) = {
            let inner = lock(&self.k.inner);
            let snapshot = Kernel::snapshot_event(&inner);
            // Registered under the lock that orders revisions: every revocation published
            // after this snapshot is waited for.
            let registration = match req.caches_sessions {
                true => Some(
                    self.k
                        .session_caches
                        .register(req.watcher_id, snapshot.revision)
                        .ok_or_else(|| {
                            Status::already_exists(format!(
                                "watcher id {} is already watching routes; watch with a new id",
                                req.watcher_id
                            ))
                        })?,
                ),
                false => None,
            };
            (snapshot, self.k.events.subscribe(), registration)
        };
        let k = self.k.clone();
        let mut shutdown = self.k.shutdown.subscribe();
        let stream = async_stream(move |tx| async move {
            // Lives as long as the stream: a watcher that is gone is not waited for.
            let _registration = registration;
            let mut last = snapshot.revision;
            if tx.send(Ok(snapshot)).await.is_err() {
                return;
            }
            loop {
                tokio::select! {
                    ev = rx.recv() => match ev {
                        Ok(ev) => {
                            if ev.revision <= last { continue; }
                            last = ev.revision;
                            if tx.send(Ok((*ev).clone())).await.is_err() { return; }
                        }
                        Err(RecvError::Lagged(_)) => {
                            // Too slow: start over from a fresh snapshot.
                            let snap = { let inner = lock(&k.inner); Kernel::snapshot_event(&inner) };
                            last = snap.revision;
                            if tx.send(Ok(snap)).await.is_err() { return; }
                        }
                        Err(RecvError::Closed) => return,
                    },
                    // The watcher went away: end now (and drop its registration).
                    _ = tx.closed() => return,
                    _ = shutdown.changed() => {
                        let _ = tx.send(Ok(pb::RouteEvent { revision: last + 1, event: Some(pb::route_event::Event::Shutdown(pb::RuntimeShutdown {})) })).await;
                        return;
                    }
                }
            }
        });
        Ok(Response::new(stream))
    }

    async fn register_worker(
        &self,
        req: Request<pb::RegisterWorkerRequest>,
    ) -> Result<Response<pb::RegisterWorkerReply>, Status> {
        let req = req.into_inner();
        if let Some(slot) = lock(&self.k.inner).probes.get(&req.generation)
            && slot.key == req.key
            && slot.token_hash == sha256(&req.worker_token)
        {
            return Ok(Response::new(pb::RegisterWorkerReply {
                launch: Some(slot.launch.clone()),
            }));
        }
        let (manifest, release) = {
            let inner = lock(&self.k.inner);
            check_worker(&inner, &req.key, req.generation, &req.worker_token)?;
            // The release this generation was spawned for (an install may have come since).
            match worker_release(&inner, &req.key, req.generation) {
                Some(r) => (r.manifest, r.release_dir),
                None => (
                    manifest_of(&inner, &req.key)?.clone(),
                    Kernel::release_dir(&inner, &req.key).unwrap_or_default(),
                ),
            }
        };
        accept_data_endpoint(&self.k, &req);
        let launch = match self
            .k
            .launch_spec(&req.key, &manifest, &release, Credentials::Stored)
            .and_then(|launch| {
                self.k
                    .launch_allowed(&req.key, &release, &launch)
                    .map(|()| launch)
            }) {
            Ok(launch) => launch,
            Err(why) => {
                // The worker exits on this; `status` should say why, not only "exit status 2".
                let actor = lock(&self.k.inner).actors.get(&req.key).cloned();
                if let Some(a) = actor {
                    let _ = a.send(Msg::step(Input::Report {
                        generation: req.generation,
                        kind: ReportKind::StartFailed,
                        message: format!("cannot launch the upstream: {why}"),
                    }));
                }
                return Err(precondition(why));
            }
        };
        let mut env_names: Vec<&String> = launch.env.keys().collect();
        env_names.sort();
        let mut header_names: Vec<&String> = launch.headers.keys().collect();
        header_names.sort();
        self.k.audit.record(Event::Launch {
            connector: req.key.clone(),
            generation: req.generation,
            transport: launch.transport().label().to_owned(),
            argv: std::iter::once(&launch.command)
                .chain(launch.args.iter())
                .filter(|a| !a.is_empty())
                .cloned()
                .collect(),
            cwd: launch.cwd.clone(),
            url: launch.url.clone(),
            env: env_names.into_iter().cloned().collect(),
            headers: header_names.into_iter().cloned().collect(),
        });
        tracing::info!(key = %req.key, generation = req.generation, pid = req.pid, "worker registered");
        Ok(Response::new(pb::RegisterWorkerReply {
            launch: Some(launch),
        }))
    }

    async fn offer_tools(
        &self,
        req: Request<pb::OfferToolsRequest>,
    ) -> Result<Response<pb::OfferToolsReply>, Status> {
        let req = req.into_inner();
        let (actor, verdict) = {
            let mut inner = lock(&self.k.inner);
            if let Some(slot) = inner.probes.get_mut(&req.generation)
                && slot.key == req.key
                && slot.token_hash == sha256(&req.worker_token)
            {
                let offered = offered_tools(&req.tools);
                crate::supervisor::probe::finish(
                    slot,
                    &offered,
                    offer_size_problem(&req),
                    &req.protocol_version,
                    &req.server_name,
                );
                return Ok(Response::new(pb::OfferToolsReply {
                    committed: false,
                    error: "probe finished".into(),
                }));
            }
            check_worker(&inner, &req.key, req.generation, &req.worker_token)?;
            let manifest = match worker_release(&inner, &req.key, req.generation) {
                Some(r) => r.manifest,
                None => manifest_of(&inner, &req.key)?.clone(),
            };
            let verdict = match offer_size_problem(&req) {
                Some(problem) => Err(problem),
                None => validate_candidate(&req, &manifest.tool_risk),
            };
            (inner.actors.get(&req.key).cloned(), verdict)
        };
        // The connector's actor decides: commit (once), or refuse.
        let (reply, answer) = tokio::sync::oneshot::channel();
        let offer = Input::Offer {
            generation: req.generation,
            tools: verdict,
        };
        let sent = actor.is_some_and(|a| {
            a.send(Msg {
                input: offer,
                reply: Some(reply),
            })
            .is_ok()
        });
        let answer = match sent {
            true => answer
                .await
                .unwrap_or_else(|_| Err("the connector stopped".into())),
            false => Err(format!(
                "generation {} of {} is fenced",
                req.generation, req.key
            )),
        };
        if let Err(error) = &answer {
            tracing::warn!(key = %req.key, %error, "candidate refused");
        }
        Ok(Response::new(pb::OfferToolsReply {
            committed: answer.is_ok(),
            error: answer.err().unwrap_or_default(),
        }))
    }

    async fn report_worker(
        &self,
        req: Request<pb::WorkerReport>,
    ) -> Result<Response<pb::Empty>, Status> {
        let req = req.into_inner();
        let actor = {
            let mut inner = lock(&self.k.inner);
            if let Some(slot) = inner.probes.get_mut(&req.generation)
                && slot.key == req.key
                && slot.token_hash == sha256(&req.worker_token)
            {
                if matches!(
                    req.kind(),
                    pb::WorkerReportKind::StartFailed | pb::WorkerReportKind::AuthFailed
                ) {
                    crate::supervisor::probe::fail(slot, req.message.clone());
                }
                return Ok(Response::new(pb::Empty {}));
            }
            check_worker(&inner, &req.key, req.generation, &req.worker_token)?;
            if req.kind() == pb::WorkerReportKind::TelemetryDropped {
                let k = &self.k.telemetry_drops;
                k.note_worker(&req.key, req.generation, req.count);
                return Ok(Response::new(pb::Empty {}));
            }
            if req.kind() == pb::WorkerReportKind::NonJsonStdout
                && let Some(c) = inner.conns.get_mut(&req.key)
            {
                c.non_json_lines = c.non_json_lines.max(req.count);
            }
            inner.actors.get(&req.key).cloned()
        };
        if req.kind() == pb::WorkerReportKind::AuthRequired {
            crate::connect::oauth::step_up(&self.k, &req.key, &req.scope);
        }
        if let Some(a) = actor {
            let _ = a.send(Msg::step(Input::Report {
                generation: req.generation,
                kind: ReportKind::from_wire(req.kind()),
                message: req.message,
            }));
        }
        Ok(Response::new(pb::Empty {}))
    }

    async fn record_calls(
        &self,
        req: Request<tonic::Streaming<pb::CallRecord>>,
    ) -> Result<Response<pb::Empty>, Status> {
        let mut stream = req.into_inner();
        while let Some(record) = stream.message().await? {
            self.k.audit.note_frontend_dropped(record.dropped_total);
            self.k
                .telemetry_drops
                .note_frontend(record.telemetry_dropped_total);
            self.k
                .figures
                .record(&record.connector, record.duration_us, &record.outcome);
            self.k.audit.record(Event::Call {
                call_time: record.time_unix_ms,
                workspace: record.workspace,
                session: record.session,
                tool: record.tool,
                connector: record.connector,
                generation: record.generation,
                risk: record.risk,
                duration_us: record.duration_us,
                outcome: record.outcome,
                error_code: (record.error_code != 0).then_some(record.error_code),
                kind: match record.kind.as_str() {
                    "" | "tool" => None,
                    kind => Some(kind.to_owned()),
                },
                relayed: record.relayed,
                confirmation: (!record.confirmation.is_empty()).then_some(record.confirmation),
            });
        }
        Ok(Response::new(pb::Empty {}))
    }

    async fn review_changes(
        &self,
        req: Request<pb::KeyRequest>,
    ) -> Result<Response<pb::ReviewReply>, Status> {
        crate::review::review(&self.k, &req.into_inner().key).map(Response::new)
    }

    async fn approve_changes(
        &self,
        req: Request<pb::KeyRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        let _turn = self.k.admin.lock().await;
        let req = req.into_inner();
        let expected = (!req.expected_offered_hash.is_empty()).then_some(req.expected_offered_hash);
        crate::review::approve(&self.k, &req.key, expected).await?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn report_circuit(
        &self,
        req: Request<pb::CircuitReport>,
    ) -> Result<Response<pb::Empty>, Status> {
        crate::review::report_circuit(&self.k, req.into_inner());
        Ok(Response::new(pb::Empty {}))
    }

    async fn resolve_shim(
        &self,
        req: Request<pb::KeyRequest>,
    ) -> Result<Response<pb::ResolveShimReply>, Status> {
        let key = req.into_inner().key;
        let inner = lock(&self.k.inner);
        let status = inner
            .conns
            .get(&key)
            .map(|c| c.life.status().as_str())
            .unwrap_or("not installed");
        let (Some(route), Some(live)) = (inner.table.live(&key), inner.live_releases.get(&key))
        else {
            return Ok(Response::new(pb::ResolveShimReply {
                live: false,
                status: status.into(),
                ..Default::default()
            }));
        };
        let Some(cli) = (if route.has_cli {
            live.manifest.cli.as_ref()
        } else {
            None
        }) else {
            return Ok(Response::new(pb::ResolveShimReply {
                live: false,
                status: "no cli interface".into(),
                ..Default::default()
            }));
        };
        let stored = self.k.secrets.load(&key);
        let mut env: std::collections::HashMap<String, String> = cli
            .secrets
            .iter()
            .filter_map(|n| stored.get(n).map(|v| (n.clone(), v.clone())))
            .collect();
        env.insert("TUTTI_CONNECTOR_KEY".into(), key.clone());
        Ok(Response::new(pb::ResolveShimReply {
            live: true,
            status: status.into(),
            generation: route.generation,
            entrypoint: live
                .release_dir
                .join(&cli.entrypoint)
                .to_string_lossy()
                .into_owned(),
            env,
        }))
    }

    async fn list_sessions(
        &self,
        _req: Request<pb::Empty>,
    ) -> Result<Response<pb::ListSessionsReply>, Status> {
        let tokens = lock(&self.k.tokens);
        Ok(Response::new(crate::console_rpc::list_sessions(&tokens)))
    }

    async fn begin_login(
        &self,
        req: Request<pb::BeginLoginRequest>,
    ) -> Result<Response<pb::BeginLoginReply>, Status> {
        crate::connect::oauth::begin(&self.k, req.into_inner())
            .await
            .map(Response::new)
    }

    async fn complete_login(
        &self,
        req: Request<pb::CompleteLoginRequest>,
    ) -> Result<Response<pb::Empty>, Status> {
        let _admin = self.k.admin.lock().await;
        let req = req.into_inner();
        let key = req.key.clone();
        crate::connect::oauth::complete(&self.k, req).await?;
        self.reload(&key);
        Ok(Response::new(pb::Empty {}))
    }

    async fn refresh_worker_token(
        &self,
        req: Request<pb::RefreshWorkerTokenRequest>,
    ) -> Result<Response<pb::RefreshWorkerTokenReply>, Status> {
        let req = req.into_inner();
        check_worker(
            &lock(&self.k.inner),
            &req.key,
            req.generation,
            &req.worker_token,
        )?;
        crate::connect::oauth::refresh(&self.k, &req.key, &req.rejected)
            .await
            .map(Response::new)
    }

    async fn redact_text(
        &self,
        req: Request<pb::RedactTextRequest>,
    ) -> Result<Response<pb::RedactTextReply>, Status> {
        let text = self.k.redact(&req.into_inner().text);
        Ok(Response::new(pb::RedactTextReply { text }))
    }
}

/// Why an offer is refused by its size alone (`tutti_proto::limits`): the worker withheld a
/// list over its limits, or sent one anyway. Every list over its limits is named, one
/// sentence each.
fn offer_size_problem(req: &pb::OfferToolsRequest) -> Option<String> {
    use tutti_proto::limits::OfferedList;
    let lists = [
        (
            OfferedList::Tools,
            (req.withheld_tools, req.withheld_bytes),
            sent_size(
                req.tools
                    .iter()
                    .map(|t| (&t.upstream_name, &t.definition_json)),
            ),
        ),
        (
            OfferedList::Prompts,
            (req.withheld_prompts, req.withheld_prompt_bytes),
            sent_size(
                req.prompts
                    .iter()
                    .map(|p| (&p.upstream_name, &p.definition_json)),
            ),
        ),
        (
            OfferedList::Resources,
            (req.withheld_resources, req.withheld_resource_bytes),
            sent_size(req.resources.iter().map(|r| (&r.uri, &r.definition_json))),
        ),
        (
            OfferedList::ResourceTemplates,
            (req.withheld_templates, req.withheld_template_bytes),
            sent_size(
                req.resource_templates
                    .iter()
                    .map(|r| (&r.uri, &r.definition_json)),
            ),
        ),
    ];
    let problems: Vec<String> = lists
        .into_iter()
        .filter_map(|(list, withheld, sent)| list_size_problem(list, withheld, sent))
        .collect();
    (!problems.is_empty()).then(|| problems.join("; "))
}

/// How many items and bytes of definitions (`limits::item_bytes`) a list sent has.
fn sent_size<'a>(items: impl Iterator<Item = (&'a String, &'a String)>) -> (usize, usize) {
    items.fold((0, 0), |(count, bytes), (name, json)| {
        (
            count + 1,
            bytes + tutti_proto::limits::item_bytes(name, json),
        )
    })
}

/// One list's size problem: `withheld` (count, bytes) when the worker withheld it, else what
/// it sent.
fn list_size_problem(
    list: tutti_proto::limits::OfferedList,
    withheld: (u64, u64),
    sent: (usize, usize),
) -> Option<String> {
    if withheld.0 == 0 {
        return list.problem(sent.0, sent.1);
    }
    let count = usize::try_from(withheld.0).unwrap_or(usize::MAX);
    let bytes = usize::try_from(withheld.1).unwrap_or(usize::MAX);
    Some(list.problem(count, bytes).unwrap_or_else(|| {
        format!(
            "the worker withheld {count} {} that are within the limits",
            list.items()
        )
    }))
}

/// The whole candidate, tools and what comes with them, validated at once: every
/// problem of either refuses it, one line each.
fn validate_candidate(
    req: &pb::OfferToolsRequest,
    risk_overrides: &std::collections::BTreeMap<String, String>,
) -> Result<crate::catalog::Candidate, String> {
    use crate::catalog::{Candidate, Offered, OfferedPrompt, OfferedResource};
    let resources = |items: &[pb::OfferedResource]| {
        items
            .iter()
            .map(|r| OfferedResource {
                uri: r.uri.clone(),
                definition_json: r.definition_json.clone(),
            })
            .collect()
    };
    let offered = Offered {
        prompts: req
            .prompts
            .iter()
            .map(|p| OfferedPrompt {
                upstream_name: p.upstream_name.clone(),
                definition_json: p.definition_json.clone(),
            })
            .collect(),
        resources: resources(&req.resources),
        templates: resources(&req.resource_templates),
        completions: req.completions,
        subscribe: req.resources_subscribe,
    };
    let tools = validate(&req.key, &offered_tools(&req.tools), risk_overrides);
    let catalog = crate::catalog::validate(&req.key, &offered);
    match (tools, catalog) {
        (Ok(tools), Ok(catalog)) => Ok(Candidate { tools, catalog }),
        (tools, catalog) => {
            let mut problems = tools.err().unwrap_or_default();
            problems.extend(catalog.err().unwrap_or_default());
            Err(problems.join("; "))
        }
    }
}

/// What the live generation `r` serves, counted into its connector's status: prompts,
/// resources, templates and the tools by risk.
fn count_live(s: &mut pb::ConnectorStatus, r: &crate::table::Route) {
    s.prompt_count = r.catalog.prompts.len() as u32;
    s.resource_count = r.catalog.resources.len() as u32;
    s.resource_template_count = r.catalog.templates.len() as u32;
    for t in &r.tools {
        match t.risk {
            crate::toolset::Risk::Low => s.risk_low += 1,
            crate::toolset::Risk::Medium => s.risk_medium += 1,
            crate::toolset::Risk::High => {
                s.risk_high += 1;
                s.high_risk_tools.push(t.local_name.clone());
            }
        }
    }
}

/// Resource URIs (and identical templates) claimed by more than one live generation.
fn resource_clashes(table: &crate::table::GenerationTable) -> Vec<pb::ResourceClash> {
    let (_, routes) = table.snapshot();
    crate::catalog::clashes(routes.iter().map(|r| (r.key.as_str(), &r.catalog)))
        .into_iter()
        .map(|c| pb::ResourceClash {
            uri: c.uri,
            connectors: c.connectors,
            kind: c.kind.to_owned(),
        })
        .collect()
}

fn offered_tools(tools: &[pb::OfferedTool]) -> Vec<OfferedTool> {
    tools
        .iter()
        .map(|t| OfferedTool {
            upstream_name: t.upstream_name.clone(),
            definition: serde_json::from_str(&t.definition_json).unwrap_or(serde_json::Value::Null),
        })
        .collect()
}

/// The version agents are served now: the live release's, else the release an unfinished
/// upgrade would replace, else the installed one.
fn serving_version(inner: &crate::state::Inner, key: &str) -> Option<String> {
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

/// The release generation `generation` of `key` was spawned for.
fn worker_release(
    inner: &crate::state::Inner,
    key: &str,
    generation: u64,
) -> Option<crate::state::LiveRelease> {
    inner
        .conns
        .get(key)
        .and_then(|c| c.workers.get(&generation))
        .map(|p| p.release.clone())
}

/// Keeps a registering worker's frame endpoint for its route, but only the one the
/// kernel derives for that generation (a worker names no other socket for the frontend).
fn accept_data_endpoint(k: &Kernel, req: &pb::RegisterWorkerRequest) {
    if req.data_endpoint.is_empty() {
        return;
    }
    let expected = tutti_proto::transport::worker_data_endpoint(&k.paths.state, req.generation);
    if req.data_endpoint != expected.as_str() {
        tracing::warn!(key = %req.key, generation = req.generation, "the worker registered a frame endpoint other than its own; its calls use gRPC");
        return;
    }
    let mut inner = lock(&k.inner);
    let pending = inner
        .conns
        .get_mut(&req.key)
        .and_then(|c| c.workers.get_mut(&req.generation));
    if let Some(pending) = pending {
        pending.data_endpoint = req.data_endpoint.clone();
    }
}

/// A worker's RPC must come from the generation the kernel spawned and has not stopped.
fn check_worker(
    inner: &crate::state::Inner,
    key: &str,
    generation: u64,
    token: &str,
) -> Result<(), Status> {
    let ok = inner
        .conns
        .get(key)
        .and_then(|c| c.workers.get(&generation))
        .is_some_and(|p| p.token_hash == sha256(token));
    if ok {
        Ok(())
    } else {
        Err(precondition(format!(
            "generation {generation} of {key} is fenced"
        )))
    }
}

/// A stream fed by a task through a bounded channel.
fn async_stream<F, Fut>(f: F) -> EventStream
where
    F: FnOnce(tokio::sync::mpsc::Sender<Result<pb::RouteEvent, Status>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(256);
    tokio::spawn(f(tx));
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_statuses_are_the_four_of_the_spec() {
        assert_eq!(interface_status(CStatus::Ready, true), "ready");
        assert_eq!(interface_status(CStatus::Ready, false), "unavailable");
        assert_eq!(interface_status(CStatus::Restarting, false), "starting");
        assert_eq!(
            interface_status(CStatus::AuthFailed, false),
            "auth_required"
        );
        assert_eq!(interface_status(CStatus::CrashLoop, false), "unavailable");
        assert_eq!(interface_status(CStatus::Failed, false), "unavailable");
    }

    #[test]
    fn a_missing_secret_message_names_the_secrets_and_the_fix() {
        let one = missing_secrets_message("gh", &["GITHUB_TOKEN".into()], true);
        assert_eq!(
            one,
            "connector gh still needs the secret GITHUB_TOKEN before it can run (the values given were stored); run `tutti connector connect gh --from-env GITHUB_TOKEN` (or `--stdin GITHUB_TOKEN`)"
        );
        let two = missing_secrets_message("gh", &["A".into(), "B".into()], false);
        assert!(two.starts_with("connector gh still needs the secrets A, B before it can run; run `tutti connector connect gh --from-env A`"), "{two}");
        assert!(two.ends_with("naming every missing secret"), "{two}");
    }
}

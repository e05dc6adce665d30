//! The lifecycle of one installed connector as a pure state machine.
//!
//! A [`Connector`] holds everything the kernel decides about a connector at run time: its
//! live generation, its candidate, the workers still running, the status `tutti status`
//! shows (status, last error, upgrade note, restarts, next retry), whether its credentials
//! were refused, and its restart history. [`Connector::step`] takes one [`Input`] and the
//! [`Facts`] of the moment (clock, the installed release as the registry has it, fresh
//! generation numbers) and returns the [`Effect`]s to carry out, in order. It does no I/O:
//! the supervisor (`supervisor.rs`) interprets the effects, and the unit tests below are
//! tables of inputs → effects.
//!
//! Every status change goes through [`Connector::set_status`]; every commit is one
//! [`Effect::Commit`]; the upgrade rules (settle at the first commit, abandon when the
//! candidate is refused or never starts, wait for missing credentials) and the auth rules
//! (fence every generation when the stored credentials are refused) are written here once.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use tutti_proto::kernel::WorkerReportKind as WireReportKind;

use crate::audit::Event;
use crate::catalog::Candidate;
use crate::pin::{self, Pin};
use crate::restart::{Decision, RestartPolicy, RestartTracker};

/// How long a superseded generation may finish its calls after an update commits.
pub const UPDATE_DRAIN: Duration = Duration::from_secs(10);
/// How long a worker gets to stop when its credentials are removed or refused.
pub const AUTH_STOP_GRACE: Duration = Duration::from_secs(2);
/// Added to a manifest's `startMs` before a candidate that never offered is given up.
pub const START_SLACK: Duration = Duration::from_secs(2);

/// Connector status values (SPEC §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Starting,
    Ready,
    Restarting,
    CrashLoop,
    AuthRequired,
    AuthFailed,
    Failed,
    Stopped,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Starting => "starting",
            Status::Ready => "ready",
            Status::Restarting => "restarting",
            Status::CrashLoop => "crash_loop",
            Status::AuthRequired => "auth_required",
            Status::AuthFailed => "auth_failed",
            Status::Failed => "failed",
            Status::Stopped => "stopped",
        }
    }
}

/// What a worker reports about its upstream (`WorkerReport.kind`, read from the wire enum
/// here and only here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportKind {
    StartFailed,
    UpstreamExited,
    AuthFailed,
    /// An OAuth connector needs a new login (refresh failed, or step-up).
    AuthRequired,
    UpstreamReinitialized,
    UpstreamUnavailable,
    NonJsonStdout,
    Other,
}

impl ReportKind {
    pub fn from_wire(kind: WireReportKind) -> ReportKind {
        match kind {
            WireReportKind::StartFailed => ReportKind::StartFailed,
            WireReportKind::UpstreamExited => ReportKind::UpstreamExited,
            WireReportKind::AuthFailed => ReportKind::AuthFailed,
            WireReportKind::AuthRequired => ReportKind::AuthRequired,
            WireReportKind::UpstreamReinitialized => ReportKind::UpstreamReinitialized,
            WireReportKind::UpstreamUnavailable => ReportKind::UpstreamUnavailable,
            WireReportKind::NonJsonStdout => ReportKind::NonJsonStdout,
            WireReportKind::Unspecified | WireReportKind::TelemetryDropped => ReportKind::Other,
        }
    }
}

/// The installed connector as the registry has it when an input arrives.
#[derive(Clone, Debug, Default)]
pub struct View {
    pub version: String,
    pub release: PathBuf,
    pub has_mcp: bool,
    /// The manifest's `startMs`.
    pub start_ms: u32,
    /// Connected and every declared secret stored.
    pub auth_ready: bool,
    /// An upgrade that needs a secret not stored yet (see `Installed::upgrade_waits_for_secrets`).
    pub waits_for_secrets: bool,
    /// An installed upgrade has not committed yet (the registry names its fallback).
    pub upgrade_pending: bool,
    /// What `status` shows for `auth_required`: the missing secrets and the command.
    pub auth_hint: String,
    /// The `tutti connector connect …` command that stores every declared secret.
    pub connect_command: String,
    /// Where the connector's workers log (named when an exit has no better reason).
    pub log_path: String,
    /// The pinned definitions (`registry.json`), of whichever release pinned them last.
    pub pin: Option<Pin>,
    /// `install --trust-updates`: every offer commits and is pinned without review.
    pub trust_updates: bool,
}

/// The facts of the moment a step runs in.
pub struct Facts<'a> {
    /// Monotonic time since any fixed origin.
    pub now: Duration,
    /// Wall-clock time, for `next_retry_unix_ms`.
    pub unix_ms: i64,
    /// In [0, 1): spreads restarts of many connectors.
    pub jitter: f64,
    /// `None` when the connector is not installed (or its manifest cannot be read).
    pub installed: Option<View>,
    /// Whether the generation table serves a generation of this connector now.
    pub table_live: bool,
    /// Draws a generation number never used before.
    pub next_generation: &'a mut dyn FnMut() -> u64,
}

/// One thing that happened to the connector.
#[derive(Clone, Debug, PartialEq)]
pub enum Input {
    /// A new release was installed (the registry already holds it). Sets the status the
    /// install answers with; the `Reload` that follows starts it.
    Install { auth_required: bool, waits: bool },
    /// Manifest, secrets or connection changed (install, connect, disconnect, a manual
    /// retry): start a candidate when routable, else fence and stop.
    Reload,
    /// `tutti connector disconnect`: the route goes at once (the `Reload` stops the workers).
    Disconnect,
    /// A candidate (or the live generation, after `tools/list_changed`) offered its tools:
    /// `Ok` with the validated set, `Err` with the problems in one line.
    Offer {
        generation: u64,
        tools: Result<Candidate, String>,
    },
    /// The worker process of `generation` exited (redacted detail).
    Exited { generation: u64, detail: String },
    /// A worker's report (message redacted).
    Report {
        generation: u64,
        kind: ReportKind,
        message: String,
    },
    /// The candidate's start deadline passed.
    StartTimeout(u64),
    /// A retry timer fired.
    Retry(u64),
    /// An [`Effect::Abandon`] was carried out: the note `status` shows, or `None` when the
    /// release the upgrade replaced could not be restored.
    Abandoned { note: Option<String>, why: String },
    /// Uninstall or runtime shutdown: fence, stop everything; the actor ends.
    Stop { reason: String, drain: Duration },
    /// `tutti connector approve`: commit the held set and pin it; with `expected`, only if the
    /// held set is still the one with that hash (what the person reviewed).
    Approve { expected: Option<String> },
}

/// What the supervisor must do, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Start a worker for `generation` running `release` (draw its identity first).
    Spawn { generation: u64, release: PathBuf },
    /// Send `StartTimeout(generation)` after `after`.
    StartTimer { generation: u64, after: Duration },
    /// Stop the worker, letting its calls finish for up to `grace`.
    Stop { generation: u64, grace: Duration },
    /// Stop every worker with `drain`, wait until they are reaped.
    StopAll { drain: Duration },
    /// Revoke the identity of `generation`: its RPCs are refused from now on.
    Forget { generation: u64 },
    /// Revoke every identity of the connector.
    ForgetAll,
    /// Remove the connector's route (`None`: whatever is live; `Some`: only that generation).
    Fence {
        generation: Option<u64>,
        reason: String,
    },
    /// Make `generation` the live route (`tools` is `None` for a connector without MCP) and
    /// its release the live one; settles an upgrade of that release.
    Commit {
        generation: u64,
        tools: Option<Candidate>,
        release: PathBuf,
    },
    /// Go back to the release the pending upgrade replaced; answer with `Input::Abandoned`.
    Abandon { why: String },
    /// Write one audit record.
    Audit(Event),
    /// Send `Retry(epoch)` after `after`.
    RetryAfter { epoch: u64, after: Duration },
    /// The answer to an `Offer`: committed, or the error the worker gets.
    Answer(Result<(), String>),
    /// Store this pin in the registry (the release's first commit, an approval, a trusted
    /// update).
    Pin(Pin),
}

/// An offer that awaits review (SPEC §12): the newest offer of the pinned release that adds
/// or changes a definition.
#[derive(Clone, Debug)]
pub struct Held {
    /// The generation that offered it (it serves the pinned definitions meanwhile).
    pub generation: u64,
    pub tools: Candidate,
    pub hash: String,
    /// `added …; changed …` (names only).
    pub summary: String,
}

/// A worker process the connector has started and not seen exit.
#[derive(Clone, Debug)]
struct Running {
    started: Duration,
    release: PathBuf,
    /// Its identity was revoked: nothing it sends counts any more.
    revoked: bool,
}

/// The run-time state of one installed connector. See the module documentation.
#[derive(Debug)]
pub struct Connector {
    key: String,
    status: Status,
    last_error: String,
    upgrade_note: String,
    restarts: u32,
    reinitializations: u32,
    next_retry_unix_ms: i64,
    /// The tools the last commit made live.
    served: Option<Candidate>,
    live: Option<u64>,
    candidate: Option<u64>,
    running: BTreeMap<u64, Running>,
    tracker: RestartTracker,
    policy: RestartPolicy,
    retry_epoch: u64,
    auth_failed: bool,
    start_error: Option<String>,
    held: Option<Held>,
}

/// A worker's exit reason as `status` shows it, with where to look next: the connector's log
/// when the reason quotes one stderr line of the upstream, and `probe` once it crash-loops.
fn with_next_steps(key: &str, reason: String, status: Status) -> String {
    let mut out = reason;
    if out.contains("stderr: ") {
        out.push_str(&format!("; `tutti logs {key}` has the rest"));
    }
    if status == Status::CrashLoop {
        out.push_str(&format!(
            "; `tutti connector probe {key}` starts it once and shows why it fails"
        ));
    }
    out
}

impl Connector {
    pub fn new(key: &str) -> Connector {
        Connector {
            key: key.to_string(),
            status: Status::Starting,
            last_error: String::new(),
            upgrade_note: String::new(),
            restarts: 0,
            reinitializations: 0,
            next_retry_unix_ms: 0,
            served: None,
            live: None,
            candidate: None,
            running: BTreeMap::new(),
            tracker: RestartTracker::default(),
            policy: RestartPolicy::default(),
            retry_epoch: 0,
            auth_failed: false,
            start_error: None,
            held: None,
        }
    }

    /// A connector whose installed release cannot be read: failed until reinstalled.
    pub fn unreadable(key: &str, why: String) -> Connector {
        let mut c = Connector::new(key);
        c.set_status(Status::Failed, Some(why));
        c
    }

    pub fn status(&self) -> Status {
        self.status
    }
    pub fn last_error(&self) -> &str {
        &self.last_error
    }
    pub fn upgrade_note(&self) -> &str {
        &self.upgrade_note
    }
    pub fn restarts(&self) -> u32 {
        self.restarts
    }
    pub fn reinitializations(&self) -> u32 {
        self.reinitializations
    }
    pub fn next_retry_unix_ms(&self) -> i64 {
        self.next_retry_unix_ms
    }
    /// The offer that awaits review, if any (`status`: changes await review).
    pub fn held(&self) -> Option<&Held> {
        self.held.as_ref()
    }

    /// The one place the status changes. `error` replaces the last error when given; a
    /// status that is not waiting for a retry has no retry time.
    fn set_status(&mut self, status: Status, error: Option<String>) {
        self.status = status;
        if let Some(e) = error {
            self.last_error = e;
        }
        if !matches!(status, Status::Restarting | Status::CrashLoop) {
            self.next_retry_unix_ms = 0;
        }
    }

    /// Takes one input; returns what to do, in order.
    pub fn step(&mut self, input: Input, f: &mut Facts<'_>) -> Vec<Effect> {
        let mut out = Vec::new();
        match input {
            Input::Install {
                auth_required,
                waits,
            } => self.on_install(auth_required, waits),
            Input::Reload => {
                self.tracker.reset();
                self.auth_failed = false;
                self.retry_epoch += 1;
                self.reload(f, &mut out);
            }
            Input::Disconnect => out.push(fence(None, "disconnected")),
            Input::Offer { generation, tools } => match tools {
                Ok(tools) => self.on_offer(generation, tools, f, &mut out),
                Err(problems) => self.on_refused(generation, &problems, f, &mut out),
            },
            Input::Exited { generation, detail } => self.on_exit(generation, detail, f, &mut out),
            Input::Report {
                generation,
                kind,
                message,
            } => self.on_report(generation, kind, message, f, &mut out),
            Input::StartTimeout(g) => self.on_start_timeout(g, f, &mut out),
            Input::Retry(epoch) => {
                if epoch == self.retry_epoch && self.live.is_none() && self.candidate.is_none() {
                    self.reload(f, &mut out);
                }
            }
            Input::Abandoned { note, why } => self.on_abandoned(note, why, f, &mut out),
            Input::Stop { reason, drain } => {
                out.push(fence(None, &reason));
                out.push(Effect::ForgetAll);
                self.set_status(Status::Stopped, None);
                self.live = None;
                self.candidate = None;
                self.running.clear();
                self.held = None;
                out.push(Effect::StopAll { drain });
            }
            Input::Approve { expected } => self.on_approve(expected, f, &mut out),
        }
        out
    }

    fn on_install(&mut self, auth_required: bool, waits: bool) {
        self.upgrade_note.clear();
        if auth_required && !waits {
            self.set_status(Status::AuthRequired, None);
        } else if self.status != Status::Ready {
            self.set_status(Status::Starting, None);
        }
    }

    /// Start a candidate when routable; otherwise fence and stop.
    fn reload(&mut self, f: &mut Facts<'_>, out: &mut Vec<Effect>) {
        let Some(v) = f.installed.clone() else {
            return;
        };
        if v.waits_for_secrets && self.live.is_some() {
            // An upgrade that needs a secret not stored yet: the live release keeps serving
            // with its own credentials until `connect` provides it.
            self.drop_candidate(Duration::ZERO, out);
            self.upgrade_note = format!(
                "upgrade to {} waits for its credentials: {}",
                v.version, v.auth_hint
            );
            return;
        }
        if !v.auth_ready {
            // Identities first, then the fence: a candidate whose offer arrives now cannot
            // commit after the fence (a "ready" connector without a worker).
            self.drop_all("auth required", out);
            self.set_status(Status::AuthRequired, Some(v.auth_hint));
            return;
        }
        if matches!(self.status, Status::AuthRequired | Status::AuthFailed) {
            // Routable again: an auth hint from before no longer applies.
            self.last_error.clear();
        }
        if !v.has_mcp {
            // CLI/skills only: no worker; the generation marks the live release.
            let generation = (f.next_generation)();
            self.commit(generation, None, v.release, v.upgrade_pending, out);
            return;
        }
        // A superseded candidate's identity goes first: it must not commit after all.
        self.drop_candidate(Duration::ZERO, out);
        self.spawn_candidate(&v, f, out);
    }

    fn spawn_candidate(&mut self, v: &View, f: &mut Facts<'_>, out: &mut Vec<Effect>) {
        let generation = (f.next_generation)();
        if self.live.is_none() {
            let status = if self.restarts > 0 {
                Status::Restarting
            } else {
                Status::Starting
            };
            self.set_status(status, None);
        }
        self.candidate = Some(generation);
        self.start_error = None;
        self.running.insert(
            generation,
            Running {
                started: f.now,
                release: v.release.clone(),
                revoked: false,
            },
        );
        out.push(Effect::Spawn {
            generation,
            release: v.release.clone(),
        });
        out.push(Effect::StartTimer {
            generation,
            after: Duration::from_millis(u64::from(v.start_ms)) + START_SLACK,
        });
    }

    /// The route of `generation` goes live: status ready; the generation it supersedes
    /// (an update) drains, then stops.
    fn commit(
        &mut self,
        generation: u64,
        tools: Option<Candidate>,
        release: PathBuf,
        settles: bool,
        out: &mut Vec<Effect>,
    ) {
        if settles {
            self.upgrade_note.clear();
        }
        self.served.clone_from(&tools);
        out.push(Effect::Commit {
            generation,
            tools,
            release,
        });
        self.set_status(Status::Ready, None);
        self.last_error.clear();
        if self.candidate == Some(generation) {
            self.candidate = None;
            if let Some(old) = self.live.replace(generation) {
                self.forget(old, out);
                out.push(Effect::Stop {
                    generation: old,
                    grace: UPDATE_DRAIN,
                });
            }
        }
    }

    fn on_offer(&mut self, g: u64, tools: Candidate, f: &Facts<'_>, out: &mut Vec<Effect>) {
        let Some(release) = self
            .running
            .get(&g)
            .filter(|r| !r.revoked && (self.candidate == Some(g) || self.live == Some(g)))
            .map(|r| r.release.clone())
        else {
            out.push(Effect::Answer(Err(format!(
                "generation {g} of {} is fenced",
                self.key
            ))));
            return;
        };
        let settles = f
            .installed
            .as_ref()
            .is_some_and(|v| v.upgrade_pending && v.release == release);
        let (tools, unchanged) = self.pinned_offer(g, &release, tools, f, out);
        if !unchanged {
            self.commit(g, Some(tools), release, settles, out);
        }
        out.push(Effect::Answer(Ok(())));
    }

    /// Pinning (SPEC §12, `pin.rs`): what of an offer commits. The release's first offer (or
    /// any offer when updates are trusted) commits whole and is pinned; one that only removes
    /// entries commits whole; one that adds or changes entries is held, and the pinned
    /// definitions of the tools still offered serve meanwhile. The flag is true when that is
    /// what the live generation `g` serves already (nothing to commit).
    fn pinned_offer(
        &mut self,
        g: u64,
        release: &std::path::Path,
        tools: Candidate,
        f: &Facts<'_>,
        out: &mut Vec<Effect>,
    ) -> (Candidate, bool) {
        let Some(v) = f.installed.as_ref() else {
            return (tools, false);
        };
        let offered = pin::entries(&tools);
        let pinned = v.pin.as_ref().filter(|p| p.release_dir == release);
        let Some(pinned) = pinned.filter(|_| !v.trust_updates) else {
            self.held = None;
            if offered.is_empty() {
                // An empty set pins nothing: the first set with definitions is the pin.
                return (tools, false);
            }
            let new = Pin::new(release.to_path_buf(), offered);
            if v.pin.as_ref() != Some(&new) {
                out.push(Effect::Pin(new));
            }
            return (tools, false);
        };
        let d = pin::diff(&pinned.entries, &offered);
        if !d.needs_review() {
            self.held = None;
            return (tools, false);
        }
        let hash = pin::hash(&offered);
        let summary = d.summary();
        if self.held.as_ref().is_none_or(|h| h.hash != hash) {
            tracing::warn!(key = %self.key, generation = g, changes = %summary, "changes await review");
            out.push(Effect::Audit(Event::Hold {
                connector: self.key.clone(),
                generation: g,
                pinned: pinned.hash.clone(),
                offered: hash.clone(),
                changes: summary.clone(),
            }));
        }
        self.held = Some(Held {
            generation: g,
            tools: tools.clone(),
            hash,
            summary,
        });
        let serve = pin::serve_pinned(pinned, &tools);
        let unchanged = self.live == Some(g)
            && self.served.as_ref().map(pin::entries) == Some(pin::entries(&serve));
        (serve, unchanged)
    }

    /// `tutti connector approve`: the held offer commits (its generation must still be live)
    /// and becomes the pin.
    fn on_approve(&mut self, expected: Option<String>, f: &Facts<'_>, out: &mut Vec<Effect>) {
        let Some(held) = self.held.take() else {
            let error = format!("no changes of {} await review", self.key);
            out.push(Effect::Answer(Err(error)));
            return;
        };
        if expected.as_ref().is_some_and(|h| *h != held.hash) {
            let error = format!(
                "the changes of {} changed since they were reviewed; review them again",
                self.key
            );
            self.held = Some(held);
            out.push(Effect::Answer(Err(error)));
            return;
        }
        let g = held.generation;
        let release = self
            .running
            .get(&g)
            .filter(|r| !r.revoked && self.live == Some(g))
            .map(|r| r.release.clone());
        // While an upgrade is installed the registry keeps no pin for the serving release
        // (`Kernel::store_pin`): an approval now would serve definitions no pin records.
        let installed = f.installed.as_ref().map(|v| v.release.clone());
        if release.is_some() && release != installed {
            self.held = Some(held);
            let error = format!(
                "an upgrade of {} is being installed; approve once `tutti status` shows it settled",
                self.key
            );
            out.push(Effect::Answer(Err(error)));
            return;
        }
        let Some(release) = release.filter(|_| f.installed.is_some()) else {
            self.held = Some(held);
            let error = format!(
                "the worker that offered the changes of {} is not serving any more; wait until `tutti status` shows it ready and run this again",
                self.key
            );
            out.push(Effect::Answer(Err(error)));
            return;
        };
        let new = Pin::new(release.clone(), pin::entries(&held.tools));
        out.push(Effect::Audit(Event::Approve {
            connector: self.key.clone(),
            generation: g,
            pinned: new.hash.clone(),
            changes: held.summary,
        }));
        out.push(Effect::Pin(new));
        self.commit(g, Some(held.tools), release, false, out);
        out.push(Effect::Answer(Ok(())));
    }

    fn on_refused(&mut self, g: u64, problems: &str, f: &mut Facts<'_>, out: &mut Vec<Effect>) {
        let error = format!("generation {g} refused: {problems}");
        self.last_error = error.clone();
        if !f.table_live {
            self.set_status(Status::Failed, None);
        }
        out.push(Effect::Audit(Event::Refuse {
            connector: self.key.clone(),
            generation: g,
            reason: error.clone(),
        }));
        out.push(Effect::Answer(Err(error)));
        if self.candidate == Some(g) {
            self.drop_candidate(Duration::ZERO, out);
            self.upgrade_failed(&format!("its tools were refused ({problems})"), f, out);
        }
    }

    fn on_start_timeout(&mut self, g: u64, f: &Facts<'_>, out: &mut Vec<Effect>) {
        if self.candidate != Some(g) {
            return;
        }
        let ms = f.installed.as_ref().map_or(0, |v| v.start_ms);
        self.start_error = Some(format!(
            "upstream did not become ready within startMs = {ms} ms"
        ));
        // It stays the candidate until its exit is seen.
        self.forget(g, out);
        out.push(Effect::Stop {
            generation: g,
            grace: Duration::ZERO,
        });
    }

    fn on_report(
        &mut self,
        g: u64,
        kind: ReportKind,
        message: String,
        f: &mut Facts<'_>,
        out: &mut Vec<Effect>,
    ) {
        if self.running.get(&g).is_none_or(|r| r.revoked) {
            // Sent before its identity was revoked, heard after: it changes nothing.
            return;
        }
        let upgrade_pending = f.installed.as_ref().is_some_and(|v| v.upgrade_pending);
        match kind {
            ReportKind::AuthFailed if self.candidate == Some(g) && upgrade_pending => {
                // A new release whose upstream refuses the stored credentials (another
                // server, another scope): the upgrade failed; the release it replaces, which
                // these credentials work for, stays.
                self.drop_candidate(Duration::ZERO, out);
                let why = format!("its upstream refused the stored credentials ({message})");
                self.upgrade_failed(&why, f, out);
            }
            ReportKind::AuthFailed => self.on_auth_failed(g, &message, f, out),
            ReportKind::AuthRequired => {
                self.on_auth_failed(g, &message, f, out);
                self.set_status(Status::AuthRequired, None);
            }
            ReportKind::StartFailed | ReportKind::UpstreamExited => {
                self.start_error = Some(message);
            }
            ReportKind::UpstreamReinitialized => {
                // The generation goes on serving through a new upstream session: counted
                // and recorded, nothing fenced.
                self.reinitializations += 1;
                tracing::warn!(key = %self.key, generation = g, reason = %message, "upstream session re-initialized");
                out.push(Effect::Audit(Event::Reinit {
                    connector: self.key.clone(),
                    generation: g,
                    reason: message,
                }));
            }
            ReportKind::UpstreamUnavailable => {
                // Fenced now (calls end at once with [MCP_UNAVAILABLE]); the worker's exit,
                // which follows, restarts it like a crash, with backoff.
                let reason = format!("{FENCE_UPSTREAM_UNAVAILABLE}{message}");
                if self.live == Some(g) {
                    out.push(fence(Some(g), &reason));
                }
                self.start_error = Some(reason);
            }
            ReportKind::NonJsonStdout | ReportKind::Other => {}
        }
    }

    /// The stored credentials are the ones refused, so no generation goes on serving (one
    /// started with older credentials would answer an agent that is told the connector
    /// needs auth): fence every generation, then stop them.
    fn on_auth_failed(&mut self, g: u64, message: &str, f: &Facts<'_>, out: &mut Vec<Effect>) {
        self.auth_failed = true;
        tracing::warn!(key = %self.key, generation = g, "upstream refused the credentials");
        let connect = f
            .installed
            .as_ref()
            .map_or_else(String::new, |v| v.connect_command.clone());
        out.push(fence(None, "upstream refused the credentials"));
        for worker in self.live.take().into_iter().chain(self.candidate.take()) {
            self.forget(worker, out);
            out.push(Effect::Stop {
                generation: worker,
                grace: AUTH_STOP_GRACE,
            });
        }
        let hint = format!("{message}; run `{connect}` again");
        self.set_status(Status::AuthFailed, Some(hint));
    }

    fn on_exit(&mut self, g: u64, detail: String, f: &mut Facts<'_>, out: &mut Vec<Effect>) {
        let Some(run) = self.running.remove(&g) else {
            return;
        };
        out.push(Effect::Forget { generation: g });
        // Without a report from the worker all the kernel saw is the exit status: say where
        // the worker and its upstream wrote why.
        let log = f.installed.as_ref().map_or("", |v| v.log_path.as_str());
        let reason = self
            .start_error
            .take()
            .unwrap_or_else(|| format!("{detail}; see {log}"));
        let was_live = self.live == Some(g);
        if was_live {
            self.live = None;
            out.push(fence(Some(g), FENCE_WORKER_EXITED));
        } else if self.candidate == Some(g) {
            self.candidate = None;
        } else {
            return; // an old generation we stopped on purpose
        }
        if self.auth_failed {
            return;
        }
        if !was_live && self.upgrade_failed(&format!("it did not start ({reason})"), f, out) {
            return;
        }
        if self.live.is_some() {
            // A failed upgrade candidate: the live generation stays.
            self.last_error = format!("new generation failed to start: {reason}");
            return;
        }
        if self.status == Status::Failed && !was_live {
            return; // refused at commit: retrying cannot help until the release changes
        }
        let uptime = f.now.saturating_sub(run.started);
        self.schedule_restart(g, uptime, was_live, reason, f, out);
    }

    fn schedule_restart(
        &mut self,
        g: u64,
        uptime: Duration,
        was_live: bool,
        reason: String,
        f: &Facts<'_>,
        out: &mut Vec<Effect>,
    ) {
        let decision = self
            .tracker
            .on_exit(&self.policy, f.now, uptime, was_live, f.jitter);
        self.retry_epoch += 1;
        let (status, delay) = match decision {
            Decision::RestartAfter(d) => (Status::Restarting, d),
            Decision::GiveUp => (Status::CrashLoop, self.policy.crash_loop_retry),
        };
        tracing::warn!(key = %self.key, generation = g, %reason, ?delay, status = status.as_str(), "worker exited");
        let reason = with_next_steps(&self.key, reason, status);
        self.set_status(status, Some(reason));
        self.restarts += 1;
        let delay_ms = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
        self.next_retry_unix_ms = f.unix_ms.saturating_add(delay_ms);
        out.push(Effect::RetryAfter {
            epoch: self.retry_epoch,
            after: delay,
        });
    }

    /// A candidate failed before its first commit. If it was an upgrade's, the release the
    /// upgrade replaced becomes current again (`Effect::Abandon`, answered by
    /// `Input::Abandoned`). False when no upgrade was pending.
    fn upgrade_failed(&mut self, why: &str, f: &Facts<'_>, out: &mut Vec<Effect>) -> bool {
        if !f.installed.as_ref().is_some_and(|v| v.upgrade_pending) {
            return false;
        }
        out.push(Effect::Abandon {
            why: why.to_string(),
        });
        true
    }

    fn on_abandoned(
        &mut self,
        note: Option<String>,
        why: String,
        f: &mut Facts<'_>,
        out: &mut Vec<Effect>,
    ) {
        let Some(note) = note else {
            // The old release could not be restored: retry as after a failed start (a
            // refused candidate stays failed: retrying cannot help).
            let idle = self.live.is_none() && self.candidate.is_none();
            if idle && self.status != Status::Failed {
                self.schedule_restart(0, Duration::ZERO, false, why, f, out);
            }
            return;
        };
        // The note (shown by `status`) carries the reason; the candidate's own error line
        // would only repeat it.
        self.upgrade_note = note;
        self.last_error.clear();
        if self.live.is_none() {
            // The restored release starts at once (`f.installed` is it now).
            self.tracker.reset();
            self.reload(f, out);
        }
    }

    /// Revokes the identity of `g`: an offer or report it sends later changes nothing.
    fn forget(&mut self, g: u64, out: &mut Vec<Effect>) {
        if let Some(r) = self.running.get_mut(&g) {
            r.revoked = true;
        }
        out.push(Effect::Forget { generation: g });
    }

    /// Stops the candidate, if any, after revoking its identity.
    fn drop_candidate(&mut self, grace: Duration, out: &mut Vec<Effect>) {
        if let Some(old) = self.candidate.take() {
            self.forget(old, out);
            out.push(Effect::Stop {
                generation: old,
                grace,
            });
        }
    }

    /// Identities first, then the fence, then the workers stop.
    fn drop_all(&mut self, reason: &str, out: &mut Vec<Effect>) {
        let workers: Vec<u64> = self
            .live
            .take()
            .into_iter()
            .chain(self.candidate.take())
            .collect();
        for &g in &workers {
            self.forget(g, out);
        }
        out.push(fence(None, reason));
        for g in workers {
            out.push(Effect::Stop {
                generation: g,
                grace: AUTH_STOP_GRACE,
            });
        }
    }
}

/// A message to a connector's actor: one input, and where to send the answer (an offer's
/// verdict; `Ok` once a `Stop` has stopped every worker).
pub struct Msg {
    pub input: Input,
    pub reply: Option<tokio::sync::oneshot::Sender<Result<(), String>>>,
}

impl Msg {
    pub fn step(input: Input) -> Msg {
        Msg { input, reply: None }
    }
}

/// The fence reasons that say the connector failed; every other fence is the kernel's own
/// decision (uninstall, disconnect, shutdown, refused credentials).
const FENCE_WORKER_EXITED: &str = "worker exited";
const FENCE_UPSTREAM_UNAVAILABLE: &str = "upstream unavailable: ";

/// Whether a fence with `reason` says the connector failed: only then do the calls it ends
/// count toward the frontend's circuit breaker (`ConnectorRemoved.deliberate` is the
/// opposite).
pub fn fence_is_failure(reason: &str) -> bool {
    reason == FENCE_WORKER_EXITED || reason.starts_with(FENCE_UPSTREAM_UNAVAILABLE)
}

fn fence(generation: Option<u64>, reason: &str) -> Effect {
    Effect::Fence {
        generation,
        reason: reason.to_string(),
    }
}

/// `tutti connector connect KEY --from-env NAME…`: the command that stores `names`.
pub fn connect_command(key: &str, names: &[String]) -> String {
    let flags: String = names.iter().map(|n| format!(" --from-env {n}")).collect();
    format!("tutti connector connect {key}{flags}")
}

/// What `status` shows for `auth_required`: which secrets are missing and the command that
/// stores them, or that the connector was disconnected.
pub fn auth_hint(key: &str, missing: &[String]) -> String {
    if missing.is_empty() {
        return format!(
            "disconnected; run `{}` to route it again",
            connect_command(key, &[])
        );
    }
    format!(
        "needs {}; run `{}`",
        missing.join(", "),
        connect_command(key, missing)
    )
}

#[cfg(test)]
mod pin_tests;
#[cfg(test)]
mod tests;

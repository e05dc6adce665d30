//! The vocabulary of a connector's lifecycle: its inputs and effects, the facts it reads,
//! the status it shows, and the messages its actor receives.

use std::path::PathBuf;
use std::time::Duration;
use tutti_proto::kernel::WorkerReportKind as WireReportKind;

use crate::audit::Event;
use crate::catalog::Candidate;
use crate::release::pin::Pin;

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
pub(super) const FENCE_WORKER_EXITED: &str = "worker exited";
pub(super) const FENCE_UPSTREAM_UNAVAILABLE: &str = "upstream unavailable: ";

/// Whether a fence with `reason` says the connector failed: only then do the calls it ends
/// count toward the frontend's circuit breaker (`ConnectorRemoved.deliberate` is the
/// opposite).
pub fn fence_is_failure(reason: &str) -> bool {
    reason == FENCE_WORKER_EXITED || reason.starts_with(FENCE_UPSTREAM_UNAVAILABLE)
}

pub(super) fn fence(generation: Option<u64>, reason: &str) -> Effect {
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

//! The connector's state and its normal course: install, reload, spawn, commit an offer,
//! hold one for review and approve it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::vocabulary::*;
use crate::audit::Event;
use crate::catalog::Candidate;
use crate::release::pin::{self, Pin};
use crate::supervisor::restart::{RestartPolicy, RestartTracker};

/// A worker process the connector has started and not seen exit.
#[derive(Clone, Debug)]
pub(super) struct Running {
    pub(super) started: Duration,
    pub(super) release: PathBuf,
    /// Its identity was revoked: nothing it sends counts any more.
    pub(super) revoked: bool,
}

/// The run-time state of one installed connector. See the module documentation.
#[derive(Debug)]
pub struct Connector {
    pub(super) key: String,
    pub(super) status: Status,
    pub(super) last_error: String,
    pub(super) upgrade_note: String,
    pub(super) restarts: u32,
    pub(super) reinitializations: u32,
    pub(super) next_retry_unix_ms: i64,
    /// What the last commit made live, as its fingerprint (the set itself lives in the route
    /// table; a second copy per connector held megabytes at thousands of tools).
    pub(super) served: Option<[u8; 32]>,
    pub(super) live: Option<u64>,
    pub(super) candidate: Option<u64>,
    pub(super) running: BTreeMap<u64, Running>,
    pub(super) tracker: RestartTracker,
    pub(super) policy: RestartPolicy,
    pub(super) retry_epoch: u64,
    pub(super) auth_failed: bool,
    pub(super) start_error: Option<String>,
    pub(super) held: Option<Held>,
}

/// A worker's exit reason as `status` shows it, with where to look next: the connector's log
/// when the reason quotes one stderr line of the upstream, and `probe` once it crash-loops.
pub(super) fn with_next_steps(key: &str, reason: String, status: Status) -> String {
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
    pub(super) fn set_status(&mut self, status: Status, error: Option<String>) {
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

    pub(super) fn on_install(&mut self, auth_required: bool, waits: bool) {
        self.upgrade_note.clear();
        if auth_required && !waits {
            self.set_status(Status::AuthRequired, None);
        } else if self.status != Status::Ready {
            self.set_status(Status::Starting, None);
        }
    }

    /// Start a candidate when routable; otherwise fence and stop.
    pub(super) fn reload(&mut self, f: &mut Facts<'_>, out: &mut Vec<Effect>) {
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

    pub(super) fn spawn_candidate(&mut self, v: &View, f: &mut Facts<'_>, out: &mut Vec<Effect>) {
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
    pub(super) fn commit(
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
        self.served = tools.as_ref().map(|t| pin::fingerprint(&pin::entries(t)));
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

    pub(super) fn on_offer(
        &mut self,
        g: u64,
        tools: Candidate,
        f: &Facts<'_>,
        out: &mut Vec<Effect>,
    ) {
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

    /// Pinning (SPEC §12, `release/pin.rs`): what of an offer commits. The release's first offer (or
    /// any offer when updates are trusted) commits whole and is pinned; one that only removes
    /// entries commits whole; one that adds or changes entries is held, and the pinned
    /// definitions of the tools still offered serve meanwhile. The flag is true when that is
    /// what the live generation `g` serves already (nothing to commit).
    pub(super) fn pinned_offer(
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
        let unchanged =
            self.live == Some(g) && self.served == Some(pin::fingerprint(&pin::entries(&serve)));
        (serve, unchanged)
    }

    /// `tutti connector approve`: the held offer commits (its generation must still be live)
    /// and becomes the pin.
    pub(super) fn on_approve(
        &mut self,
        expected: Option<String>,
        f: &Facts<'_>,
        out: &mut Vec<Effect>,
    ) {
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
}

//! The connector's faults: refused offers, start timeouts, worker reports, refused
//! credentials, exits and restarts, abandoned upgrades, and stopping its workers.

use std::time::Duration;

use super::connector::*;
use super::vocabulary::*;
use crate::audit::Event;
use crate::supervisor::restart::Decision;

impl Connector {
    pub(super) fn on_refused(
        &mut self,
        g: u64,
        problems: &str,
        f: &mut Facts<'_>,
        out: &mut Vec<Effect>,
    ) {
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

    pub(super) fn on_start_timeout(&mut self, g: u64, f: &Facts<'_>, out: &mut Vec<Effect>) {
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

    pub(super) fn on_report(
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
    pub(super) fn on_auth_failed(
        &mut self,
        g: u64,
        message: &str,
        f: &Facts<'_>,
        out: &mut Vec<Effect>,
    ) {
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

    pub(super) fn on_exit(
        &mut self,
        g: u64,
        detail: String,
        f: &mut Facts<'_>,
        out: &mut Vec<Effect>,
    ) {
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

    pub(super) fn schedule_restart(
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
    pub(super) fn upgrade_failed(
        &mut self,
        why: &str,
        f: &Facts<'_>,
        out: &mut Vec<Effect>,
    ) -> bool {
        if !f.installed.as_ref().is_some_and(|v| v.upgrade_pending) {
            return false;
        }
        out.push(Effect::Abandon {
            why: why.to_string(),
        });
        true
    }

    pub(super) fn on_abandoned(
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
    pub(super) fn forget(&mut self, g: u64, out: &mut Vec<Effect>) {
        if let Some(r) = self.running.get_mut(&g) {
            r.revoked = true;
        }
        out.push(Effect::Forget { generation: g });
    }

    /// Stops the candidate, if any, after revoking its identity.
    pub(super) fn drop_candidate(&mut self, grace: Duration, out: &mut Vec<Effect>) {
        if let Some(old) = self.candidate.take() {
            self.forget(old, out);
            out.push(Effect::Stop {
                generation: old,
                grace,
            });
        }
    }

    /// Identities first, then the fence, then the workers stop.
    pub(super) fn drop_all(&mut self, reason: &str, out: &mut Vec<Effect>) {
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

//! The circuit breaker of each connector (SPEC §12). It lives here, in the frontend's call
//! path, so that a call to an open circuit fails at once without a round trip to anyone; the
//! kernel learns of every transition (`ReportCircuit`, off the call path) for `tutti status`
//! and the audit log.
//!
//! [`Breaker`] is a pure state machine: the caller passes the time in. Failures that count
//! are the connector's unavailability (worker gone, fenced mid-call, transport errors) and
//! `[MCP_TIMEOUT]`; upstream JSON-RPC errors, `isError` results, invalid arguments and
//! cancellations do not (they say nothing about whether the connector is up). A success
//! resets the count (failures must be consecutive). After `failures` counted failures within
//! `window` the circuit opens for `open`; then one trial call goes through (half-open): it
//! closes the circuit, or opens it again.
//!
//! A breaker belongs to the connector's newest generation it has seen: a newly committed
//! generation starts with a closed circuit, and a call of an older one ending later counts for
//! nothing. Worker deaths and fences are the supervisor's business (restart intensity,
//! `crash_loop`); the breaker is for an upstream that times out or is unavailable.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::mpsc;
use tutti_proto::kernel::CircuitReport;

use crate::backend::Backend;
use crate::rpc::{INTERNAL_ERROR, RpcError};

/// SPEC §12 defaults, used when a route carries none.
const DEFAULT_FAILURES: u32 = 5;
const DEFAULT_WINDOW: Duration = Duration::from_secs(30);
const DEFAULT_OPEN: Duration = Duration::from_secs(30);

/// The manifest's `circuit` settings, as the route carries them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Settings {
    pub(crate) failures: u32,
    pub(crate) window: Duration,
    pub(crate) open: Duration,
}

impl Settings {
    /// From the route's fields; 0 means the default.
    pub(crate) fn from_route(failures: u32, window_ms: u32, open_ms: u32) -> Settings {
        let ms = |v: u32, d: Duration| match v {
            0 => d,
            v => Duration::from_millis(u64::from(v)),
        };
        Settings {
            failures: if failures == 0 {
                DEFAULT_FAILURES
            } else {
                failures
            },
            window: ms(window_ms, DEFAULT_WINDOW),
            open: ms(open_ms, DEFAULT_OPEN),
        }
    }
}

impl Default for Settings {
    fn default() -> Settings {
        Settings::from_route(0, 0, 0)
    }
}

/// Whether a call may go to the upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admit {
    Go,
    /// The one trial call of a half-open circuit.
    Trial,
    /// Open: fail at once.
    Refuse {
        failures: u32,
        retry_in: Duration,
    },
}

/// A change of state, reported to the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transition {
    Opened { failures: u32, retry_in: Duration },
    HalfOpen,
    Closed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Closed,
    Open { until: Instant },
    HalfOpen { trial_out: bool },
}

#[derive(Debug)]
pub(crate) struct Breaker {
    settings: Settings,
    state: State,
    /// Times of the consecutive counted failures within the window (closed only).
    failures: VecDeque<Instant>,
    /// How many failures opened it (for the message).
    opened_after: u32,
    /// The newest generation of the connector it has seen a call for.
    generation: u64,
}

impl Breaker {
    pub(crate) fn new(settings: Settings, generation: u64) -> Breaker {
        Breaker {
            settings,
            state: State::Closed,
            failures: VecDeque::new(),
            opened_after: 0,
            generation,
        }
    }

    /// Whether a call of `generation` starting at `now` may go; a half-open transition when
    /// the open time is over (this call is the trial). The first call of a newer generation
    /// finds the circuit closed (a transition when it was not).
    pub(crate) fn admit(&mut self, now: Instant, generation: u64) -> (Admit, Option<Transition>) {
        if generation > self.generation {
            let was_closed = self.state == State::Closed;
            *self = Breaker::new(self.settings, generation);
            return (Admit::Go, (!was_closed).then_some(Transition::Closed));
        }
        match self.state {
            State::Closed => (Admit::Go, None),
            State::Open { until } if now < until => (
                Admit::Refuse {
                    failures: self.opened_after,
                    retry_in: until - now,
                },
                None,
            ),
            State::Open { .. } => {
                self.state = State::HalfOpen { trial_out: true };
                (Admit::Trial, Some(Transition::HalfOpen))
            }
            State::HalfOpen { trial_out: true } => (
                Admit::Refuse {
                    failures: self.opened_after,
                    retry_in: Duration::ZERO,
                },
                None,
            ),
            State::HalfOpen { trial_out: false } => {
                self.state = State::HalfOpen { trial_out: true };
                (Admit::Trial, None)
            }
        }
    }

    /// A call of `generation` admitted as `admit` ended at `now`; `failed` when its outcome
    /// counts. A call of an older generation than the breaker's counts for nothing.
    pub(crate) fn finish(
        &mut self,
        now: Instant,
        generation: u64,
        admit: Admit,
        failed: bool,
    ) -> Option<Transition> {
        if generation != self.generation {
            return None;
        }
        match (admit, self.state) {
            (Admit::Trial, _) if failed => Some(self.open(now, self.opened_after)),
            (Admit::Trial, _) => {
                self.state = State::Closed;
                self.failures.clear();
                Some(Transition::Closed)
            }
            (Admit::Go, State::Closed) if failed => {
                self.failures.push_back(now);
                while self
                    .failures
                    .front()
                    .is_some_and(|t| now.duration_since(*t) > self.settings.window)
                {
                    self.failures.pop_front();
                }
                let n = self.failures.len() as u32;
                (n >= self.settings.failures).then(|| self.open(now, n))
            }
            (Admit::Go, State::Closed) => {
                self.failures.clear();
                None
            }
            // A call admitted before the circuit opened, ending after: already decided.
            _ => None,
        }
    }

    /// The trial call ended without an outcome (its client went away): another call may be
    /// the trial.
    pub(crate) fn abandon(&mut self, admit: Admit) {
        if admit == Admit::Trial && self.state == (State::HalfOpen { trial_out: true }) {
            self.state = State::HalfOpen { trial_out: false };
        }
    }

    fn open(&mut self, now: Instant, failures: u32) -> Transition {
        self.failures.clear();
        self.opened_after = failures;
        self.state = State::Open {
            until: now + self.settings.open,
        };
        Transition::Opened {
            failures,
            retry_in: self.settings.open,
        }
    }
}

/// What a call's outcome says about its connector (`audit::Outcome::circuit_verdict`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Unavailable or timed out: counts, with the reason the kernel is told.
    Failed(&'static str),
    /// The upstream answered (a result, `isError`, a JSON-RPC error): the connector is up.
    Answered,
    /// Nothing reached the upstream (cancelled, invalid arguments): tells nothing.
    NoAnswer,
}

/// The answer to a call refused by an open circuit.
pub(crate) fn refused(key: &str, generation: u64, failures: u32, retry_in: Duration) -> RpcError {
    let secs = retry_in.as_millis().div_ceil(1000).max(1);
    RpcError::new(
        INTERNAL_ERROR,
        format!(
            "[MCP_UNAVAILABLE] {key}: circuit open after {failures} failures; retry in {secs} s"
        ),
    )
    .with_data(
        json!({"tutti": {"reason": "circuit_open", "connector": key, "generation": generation}}),
    )
}

/// Every connector's breaker, and the queue of transitions to the kernel.
pub(crate) struct Circuits {
    breakers: Mutex<HashMap<String, Breaker>>,
    reports: mpsc::Sender<CircuitReport>,
}

const REPORT_QUEUE: usize = 256;

impl Circuits {
    /// Starts the task that reports transitions to the kernel (needs a tokio runtime).
    pub(crate) fn start(backend: Arc<dyn Backend>) -> Circuits {
        let (reports, mut rx) = mpsc::channel::<CircuitReport>(REPORT_QUEUE);
        tokio::spawn(async move {
            while let Some(report) = rx.recv().await {
                if let Err(e) = backend.report_circuit(report).await {
                    tracing::debug!(error = %e, "circuit report not delivered");
                }
            }
        });
        Circuits {
            breakers: Mutex::new(HashMap::new()),
            reports,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Breaker>> {
        self.breakers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admits a call to `key` now, or refuses it with the circuit message.
    pub(crate) fn admit(
        &self,
        key: &str,
        generation: u64,
        settings: Settings,
    ) -> Result<Permit<'_>, RpcError> {
        let (admit, transition) = {
            let mut map = self.lock();
            let breaker = map
                .entry(key.to_string())
                .or_insert_with(|| Breaker::new(settings, generation));
            breaker.settings = settings;
            breaker.admit(Instant::now(), generation)
        };
        match transition {
            Some(t @ Transition::Closed) => self.report(key, t, "a new generation was committed"),
            Some(t) => self.report(key, t, "the open time is over: one trial call"),
            None => {}
        }
        match admit {
            Admit::Refuse { failures, retry_in } => {
                Err(refused(key, generation, failures, retry_in))
            }
            admit => Ok(Permit {
                circuits: self,
                key: key.to_string(),
                generation,
                admit,
                done: false,
            }),
        }
    }

    fn report(&self, key: &str, t: Transition, reason: &str) {
        let (state, failures, retry_in) = match t {
            Transition::Opened { failures, retry_in } => ("open", failures, retry_in),
            Transition::HalfOpen => ("half_open", 0, Duration::ZERO),
            Transition::Closed => ("closed", 0, Duration::ZERO),
        };
        tracing::warn!(key, state, failures, reason, "circuit");
        let report = CircuitReport {
            key: key.to_string(),
            state: state.into(),
            failures,
            retry_in_ms: u64::try_from(retry_in.as_millis()).unwrap_or(u64::MAX),
            reason: reason.to_string(),
        };
        let _ = self.reports.try_send(report);
    }
}

/// A call the circuit let through: [`Permit::finish`] records its outcome; dropped without
/// one (the client went away), a trial leaves room for the next.
pub(crate) struct Permit<'a> {
    circuits: &'a Circuits,
    key: String,
    generation: u64,
    admit: Admit,
    done: bool,
}

impl Permit<'_> {
    pub(crate) fn finish(mut self, verdict: Verdict) {
        self.done = true;
        let failed = match verdict {
            Verdict::NoAnswer => {
                if let Some(b) = self.circuits.lock().get_mut(&self.key) {
                    b.abandon(self.admit);
                }
                return;
            }
            Verdict::Failed(_) => true,
            Verdict::Answered => false,
        };
        let transition = self
            .circuits
            .lock()
            .get_mut(&self.key)
            .and_then(|b| b.finish(Instant::now(), self.generation, self.admit, failed));
        if let Some(t) = transition {
            let reason = match verdict {
                Verdict::Failed(why) => why,
                _ => "the trial call was answered",
            };
            self.circuits.report(&self.key, t, reason);
        }
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if !self.done
            && let Some(b) = self.circuits.lock().get_mut(&self.key)
        {
            b.abandon(self.admit);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn breaker() -> (Breaker, Instant) {
        let s = Settings {
            failures: 3,
            window: 1000 * MS,
            open: 500 * MS,
        };
        (Breaker::new(s, GEN), Instant::now())
    }

    /// The generation the tests' calls belong to unless they say otherwise.
    const GEN: u64 = 7;

    fn fail(b: &mut Breaker, at: Instant) -> Option<Transition> {
        let (admit, _) = b.admit(at, GEN);
        b.finish(at, GEN, admit, true)
    }

    #[test]
    fn n_failures_within_the_window_open_it() {
        let (mut b, t0) = breaker();
        assert_eq!(fail(&mut b, t0), None);
        assert_eq!(fail(&mut b, t0 + 100 * MS), None);
        assert_eq!(
            fail(&mut b, t0 + 200 * MS),
            Some(Transition::Opened {
                failures: 3,
                retry_in: 500 * MS
            })
        );
        assert_eq!(
            b.admit(t0 + 300 * MS, GEN).0,
            Admit::Refuse {
                failures: 3,
                retry_in: 400 * MS
            }
        );
    }

    #[test]
    fn failures_outside_the_window_or_broken_by_a_success_do_not() {
        let (mut b, t0) = breaker();
        fail(&mut b, t0);
        fail(&mut b, t0 + 100 * MS);
        assert_eq!(
            fail(&mut b, t0 + 1200 * MS),
            None,
            "the first two are too old"
        );
        let (admit, _) = b.admit(t0 + 1300 * MS, GEN);
        assert_eq!(b.finish(t0 + 1300 * MS, GEN, admit, false), None);
        assert_eq!(
            fail(&mut b, t0 + 1400 * MS),
            None,
            "a success reset the count"
        );
        assert_eq!(fail(&mut b, t0 + 1500 * MS), None);
        assert!(fail(&mut b, t0 + 1600 * MS).is_some());
    }

    #[test]
    fn after_the_open_time_one_trial_closes_or_reopens_it() {
        let (mut b, t0) = breaker();
        for i in 0..3 {
            fail(&mut b, t0 + i * MS);
        }
        let t1 = t0 + 600 * MS;
        let (trial, t) = b.admit(t1, GEN);
        assert_eq!((trial, t), (Admit::Trial, Some(Transition::HalfOpen)));
        // Only one trial at a time.
        assert!(matches!(b.admit(t1, GEN).0, Admit::Refuse { .. }));
        assert_eq!(
            b.finish(t1, GEN, trial, true),
            Some(Transition::Opened {
                failures: 3,
                retry_in: 500 * MS
            })
        );
        assert!(matches!(
            b.admit(t1 + 100 * MS, GEN).0,
            Admit::Refuse { .. }
        ));
        let t2 = t1 + 600 * MS;
        let (trial, _) = b.admit(t2, GEN);
        assert_eq!(trial, Admit::Trial);
        assert_eq!(b.finish(t2, GEN, trial, false), Some(Transition::Closed));
        assert_eq!(b.admit(t2, GEN).0, Admit::Go);
    }

    #[test]
    fn an_abandoned_trial_lets_the_next_call_try() {
        let (mut b, t0) = breaker();
        for i in 0..3 {
            fail(&mut b, t0 + i * MS);
        }
        let (trial, _) = b.admit(t0 + 600 * MS, GEN);
        b.abandon(trial);
        assert_eq!(b.admit(t0 + 601 * MS, GEN).0, Admit::Trial);
    }

    #[test]
    fn a_late_answer_of_a_call_from_before_the_opening_changes_nothing() {
        let (mut b, t0) = breaker();
        let (early, _) = b.admit(t0, GEN);
        for i in 1..4 {
            fail(&mut b, t0 + i * MS);
        }
        assert_eq!(b.finish(t0 + 10 * MS, GEN, early, false), None);
        assert!(matches!(b.admit(t0 + 11 * MS, GEN).0, Admit::Refuse { .. }));
    }

    #[test]
    fn a_newly_committed_generation_starts_with_a_closed_circuit() {
        let (mut b, t0) = breaker();
        // Calls of the generation that crashed, admitted before it opened, ending after.
        let (late, _) = b.admit(t0, GEN);
        for i in 1..4 {
            fail(&mut b, t0 + i * MS);
        }
        assert!(matches!(b.admit(t0 + 10 * MS, GEN).0, Admit::Refuse { .. }));
        // The first call of the next generation goes at once and closes the circuit.
        let next = GEN + 1;
        let (admit, t) = b.admit(t0 + 20 * MS, next);
        assert_eq!((admit, t), (Admit::Go, Some(Transition::Closed)));
        // A late failure of the old generation counts for nothing against it.
        assert_eq!(b.finish(t0 + 30 * MS, GEN, late, true), None);
        assert_eq!(b.admit(t0 + 50 * MS, next).0, Admit::Go);
        // Its own failures still open it, and a call of the old generation does not reset it.
        for i in 0..3 {
            let (admit, _) = b.admit(t0 + (60 + i) * MS, next);
            b.finish(t0 + (60 + i) * MS, next, admit, true);
        }
        assert!(matches!(b.admit(t0 + 70 * MS, GEN).0, Admit::Refuse { .. }));
        assert!(matches!(
            b.admit(t0 + 70 * MS, next).0,
            Admit::Refuse { .. }
        ));
    }

    #[test]
    fn the_refusal_names_the_connector_failures_and_wait() {
        let e = refused("slow", 3, 5, 1200 * MS);
        assert_eq!(
            e.message,
            "[MCP_UNAVAILABLE] slow: circuit open after 5 failures; retry in 2 s"
        );
    }
}

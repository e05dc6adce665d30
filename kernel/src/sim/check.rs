//! The invariants, checked around every lifecycle step (`Before`) and after every action
//! (`state`), and at shutdown (`quiescent`).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::Duration;

use super::action::KEYS;
use super::world::World;
use crate::catalog::Candidate;
use crate::lifecycle::{Effect, Input, Status};
use crate::supervisor::restart::{Decision, RestartPolicy};

/// The world as one input found it.
pub struct Before {
    table_live: Option<u64>,
    live: Option<u64>,
    candidate: Option<u64>,
    held: Option<u64>,
    /// The releases a commit may run: the installed one and the one a pending upgrade
    /// replaces.
    releases: Vec<PathBuf>,
    /// The status a restart decision requires, and the retry time.
    expect: Option<(Status, i64)>,
}

impl Before {
    pub fn take(w: &mut World, c: usize, input: &Input) -> Before {
        let table_live = w.table.live(KEYS[c]).map(|r| r.generation);
        let entry = w.registry.get(&c);
        let releases = entry
            .map(|e| {
                let prev = e.previous.as_ref().map(|p| p.release.clone());
                std::iter::once(e.release.clone()).chain(prev).collect()
            })
            .unwrap_or_default();
        let Some(a) = w.actors.get_mut(&c) else {
            return Before {
                table_live,
                live: None,
                candidate: None,
                held: None,
                releases,
                expect: None,
            };
        };
        let resets = match input {
            Input::Reload => true,
            Input::Abandoned { note: Some(_), .. } => a.shadow.live.is_none(),
            _ => false,
        };
        if resets {
            a.shadow.tracker.reset();
        }
        if let Input::StartTimeout(g) = input
            && a.shadow.candidate == Some(*g)
        {
            // Given up: past its start deadline it must never serve.
            w.fenced.insert(*g);
        }
        Before {
            table_live,
            live: a.shadow.live,
            candidate: a.shadow.candidate,
            held: a.life.held().map(|h| h.generation),
            releases,
            expect: None,
        }
    }

    /// Checks one effect before it is carried out, and follows it in the shadow.
    pub fn effect(
        &mut self,
        w: &mut World,
        c: usize,
        input: &Input,
        e: &Effect,
    ) -> Result<(), String> {
        match e {
            Effect::Commit {
                generation,
                tools,
                release,
            } => self.commit(w, c, input, *generation, tools.as_ref(), release)?,
            Effect::Answer(Ok(())) => {
                if let Input::Offer { generation: g, .. } = input
                    && (w.fenced.contains(g) || !w.identities.contains(g))
                {
                    return Err(format!(
                        "fenced generation answered: {g} of {} was accepted",
                        KEYS[c]
                    ));
                }
            }
            Effect::RetryAfter { after, .. } => self.restart(w, c, input, *after)?,
            _ => {}
        }
        let now = w.now;
        let Some(a) = w.actors.get_mut(&c) else {
            return Ok(());
        };
        let s = &mut a.shadow;
        match e {
            Effect::Spawn { generation, .. } => {
                s.candidate = Some(*generation);
                s.started.insert(*generation, now);
            }
            Effect::Commit { generation, .. } if s.candidate == Some(*generation) => {
                s.live = s.candidate.take();
            }
            Effect::Stop { generation, .. } if *input != Input::StartTimeout(*generation) => {
                if s.candidate == Some(*generation) {
                    s.candidate = None;
                }
                if s.live == Some(*generation) {
                    s.live = None;
                }
            }
            Effect::StopAll { .. } => (s.live, s.candidate) = (None, None),
            _ => {}
        }
        Ok(())
    }

    fn commit(
        &self,
        w: &World,
        c: usize,
        input: &Input,
        g: u64,
        tools: Option<&Candidate>,
        release: &PathBuf,
    ) -> Result<(), String> {
        let key = KEYS[c];
        if w.fenced.contains(&g) {
            return Err(format!("fenced generation committed: {g} of {key}"));
        }
        if w.last_live.get(&c).is_some_and(|l| *l > g) {
            return Err(format!(
                "live generation went back: {g} of {key} after a newer one"
            ));
        }
        if !self.releases.contains(release) {
            return Err(format!(
                "commit of a release not current: {} of {key}",
                release.display()
            ));
        }
        if tools.is_none() {
            return Ok(());
        }
        let offered = match input {
            Input::Offer {
                generation,
                tools: Ok(_),
            } => *generation == g,
            Input::Approve { .. } => self.held == Some(g),
            _ => false,
        };
        let current = self.candidate == Some(g) || self.live == Some(g);
        let runs = w.procs.get(&g).is_some_and(|p| p.release == *release);
        if !(offered && current && runs && w.identities.contains(&g)) {
            return Err(format!(
                "commit not offered by the current candidate: {g} of {key} (offered {offered}, \
                 candidate or live {current}, runs that release {runs})"
            ));
        }
        Ok(())
    }

    /// A retry after an exit follows the restart policy exactly.
    fn restart(
        &mut self,
        w: &mut World,
        c: usize,
        input: &Input,
        after: Duration,
    ) -> Result<(), String> {
        let now = w.now;
        let jitter = f64::from(now.subsec_nanos() % 1000) / 1000.0;
        let Some(a) = w.actors.get_mut(&c) else {
            return Ok(());
        };
        let (uptime, was_live) = match input {
            Input::Exited { generation, .. } => {
                let started = a.shadow.started.get(generation).copied().unwrap_or(now);
                (now.saturating_sub(started), self.live == Some(*generation))
            }
            _ => (Duration::ZERO, false),
        };
        let policy = RestartPolicy::default();
        let decision = a
            .shadow
            .tracker
            .on_exit(&policy, now, uptime, was_live, jitter);
        let (status, delay) = match decision {
            Decision::RestartAfter(d) => (Status::Restarting, d),
            Decision::GiveUp => (Status::CrashLoop, policy.crash_loop_retry),
        };
        if delay != after {
            return Err(format!(
                "restart policy not followed: {} retries after {after:?}, the policy says {delay:?}",
                KEYS[c]
            ));
        }
        w.stats.restarts += 1;
        if status == Status::CrashLoop {
            w.stats.crash_loops += 1;
        }
        let unix = 1_000_000 + now.as_millis() as i64 + delay.as_millis() as i64;
        self.expect = Some((status, unix));
        Ok(())
    }

    /// Checks the step as a whole once its effects are carried out.
    pub fn after(
        &self,
        w: &mut World,
        c: usize,
        input: &Input,
        effects: &[Effect],
    ) -> Result<(), String> {
        let key = KEYS[c];
        let Some(a) = w.actors.get_mut(&c) else {
            return Ok(());
        };
        if let Input::Exited { generation, .. } = input {
            let s = &mut a.shadow;
            if s.live == Some(*generation) {
                s.live = None;
            } else if s.candidate == Some(*generation) {
                s.candidate = None;
            }
        }
        if let Some((status, unix)) = self.expect {
            let shown = (a.life.status(), a.life.next_retry_unix_ms());
            if shown != (status, unix) {
                return Err(format!(
                    "restart policy not followed: {key} shows {shown:?}, the policy says {:?}",
                    (status, unix)
                ));
            }
        }
        let failed = match input {
            Input::Exited { generation, .. } | Input::StartTimeout(generation) => Some(*generation),
            Input::Offer {
                generation,
                tools: Err(_),
            } => Some(*generation),
            _ => None,
        };
        let serving = w.table.live(key).map(|r| r.generation);
        if let (Some(g), Some(l)) = (failed, self.table_live)
            && self.candidate == Some(g)
            && l != g
            && serving != Some(l)
        {
            return Err(format!(
                "failed candidate took the live generation down: {g} of {key} failed, {l} stopped \
                 serving ({} effects)",
                effects.len()
            ));
        }
        Ok(())
    }
}

impl World {
    /// Steps the actor of `c` with `input` and the inputs its effects answer with, as the
    /// supervisor's `handle` does; a spawn failure is heard after it.
    pub fn deliver(&mut self, c: usize, input: Input) -> Result<(), String> {
        let mut queue = VecDeque::from([input]);
        let mut later = VecDeque::new();
        while let Some(input) = queue.pop_front() {
            if !self.actors.contains_key(&c) {
                return Ok(());
            }
            let mut before = Before::take(self, c, &input);
            let drawn = std::cell::Cell::new(self.next_gen);
            let mut draw = || drawn.replace(drawn.get() + 1);
            let mut facts = self.facts(c, &mut draw);
            let Some(actor) = self.actors.get_mut(&c) else {
                return Ok(());
            };
            let effects = actor.life.step(input.clone(), &mut facts);
            self.next_gen = drawn.get();
            self.stats.inputs += 1;
            for e in effects.iter() {
                before.effect(self, c, &input, e)?;
                self.apply(c, e.clone(), &mut queue, &mut later);
            }
            before.after(self, c, &input, &effects)?;
        }
        while let Some((g, detail)) = later.pop_front() {
            self.deliver(
                c,
                Input::Exited {
                    generation: g,
                    detail,
                },
            )?;
        }
        Ok(())
    }

    /// After every action: the table, the statuses, the pins and the workers agree.
    pub fn check_state(&mut self) -> Result<(), String> {
        state(self)
    }

    /// At shutdown nothing runs and no identity is left.
    pub fn quiescent(&self) -> Result<(), String> {
        quiescent(self)
    }
}

fn state(w: &mut World) -> Result<(), String> {
    for (c, key) in KEYS.iter().copied().enumerate() {
        let live = w
            .table
            .live(key)
            .map(|r| (r.generation, r.has_mcp, r.tools.clone(), r.catalog.clone()));
        if let Some((g, has_mcp, tools, catalog)) = live.clone() {
            if w.last_live.get(&c).is_some_and(|l| *l > g) || w.fenced.contains(&g) {
                return Err(format!(
                    "live generation went back: {g} of {key} is live again"
                ));
            }
            w.last_live.insert(c, g);
            if has_mcp && !(w.procs.contains_key(&g) && w.identities.contains(&g)) {
                return Err(format!(
                    "fenced generation serves: {g} of {key} has no worker"
                ));
            }
            pinned(w, c, Candidate { tools, catalog })?;
        }
        if let Some(a) = w.actors.get(&c) {
            let (status, retry) = (a.life.status(), a.life.next_retry_unix_ms());
            if (status == Status::Ready) != live.is_some() {
                return Err(format!(
                    "status not a function of the state: {key} is {status:?}, live {:?}",
                    live.as_ref().map(|l| l.0)
                ));
            }
            if retry != 0 && !matches!(status, Status::Restarting | Status::CrashLoop) {
                return Err(format!(
                    "status not a function of the state: {key} is {status:?} with a retry time"
                ));
            }
        }
    }
    leaks(w)
}

/// Pinned definitions: what serves a release is what its last pin (its first commit or an
/// approval) holds.
fn pinned(w: &World, c: usize, live: Candidate) -> Result<(), String> {
    let Some(pin) = w.live_release.get(&c).and_then(|r| w.reviewed.get(r)) else {
        return Ok(());
    };
    for e in crate::release::pin::entries(&live) {
        if !pin.contains(&e) {
            return Err(format!(
                "unreviewed definition live: {} {} of {}",
                e.kind, e.name, KEYS[c]
            ));
        }
    }
    Ok(())
}

/// Every worker is owned (live, a candidate under its start deadline) or stopping; every
/// identity belongs to a running worker.
fn leaks(w: &World) -> Result<(), String> {
    for (g, p) in &w.procs {
        let key = KEYS[p.c];
        let Some(a) = w.actors.get(&p.c) else {
            return Err(format!("leaked worker: {g} of {key} runs without an actor"));
        };
        let live = w.table.live(key).is_some_and(|r| r.generation == *g);
        let timed = w
            .timers
            .iter()
            .any(|t| t.actor == a.id && t.input == Input::StartTimeout(*g));
        if p.stop_at.is_none() && !live && !timed {
            return Err(format!(
                "leaked worker: {g} of {key} neither serves, starts nor stops"
            ));
        }
    }
    if let Some(g) = w.identities.iter().find(|g| !w.procs.contains_key(g)) {
        return Err(format!(
            "leaked identity: generation {g} is gone but its identity is not"
        ));
    }
    Ok(())
}

fn quiescent(w: &World) -> Result<(), String> {
    if let Some(g) = w.procs.keys().next() {
        return Err(format!("leaked worker: {g} still runs after shutdown"));
    }
    if let Some(g) = w.identities.iter().next() {
        return Err(format!("leaked identity: generation {g} after shutdown"));
    }
    Ok(())
}

//! A deterministic simulator of the connector lifecycle (`lifecycle/`) and the generation
//! table (`table.rs`). A seeded schedule of [`Action`]s drives several connectors through
//! every input the runtime sees; a model of the supervisor (`world.rs`) carries out the
//! effects (spawns that may fail, workers that exit at any moment, timers on a simulated
//! clock, commits and fences on a real [`crate::table::GenerationTable`]); the invariants of
//! `check.rs` run after every step. A failing schedule is shrunk (actions dropped while it
//! still fails) and returned as a readable replay. See docs/RELIABILITY.md.

mod action;
mod check;
#[cfg(test)]
mod tests;
mod world;

use std::fmt;

pub use action::{Action, KEYS, Summary};

/// A broken invariant, with the shrunk schedule that still breaks it.
#[derive(Clone, Debug)]
pub struct Failure {
    pub seed: u64,
    /// The step (0-based) of the original schedule where the invariant broke.
    pub step: u64,
    pub violation: String,
    pub replay: Vec<Action>,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "seed {} broke an invariant at step {}:",
            self.seed, self.step
        )?;
        writeln!(f, "  {}", self.violation)?;
        writeln!(f, "replay ({} steps):", self.replay.len())?;
        for (i, a) in self.replay.iter().enumerate() {
            writeln!(f, "  {:>3}. {a}", i + 1)?;
        }
        Ok(())
    }
}

/// Runs `steps` actions drawn from `seed`, checking every invariant after each.
pub fn run(seed: u64, steps: u64) -> Result<Summary, Failure> {
    let schedule = schedule(seed, steps);
    match execute(&schedule) {
        Ok(summary) => Ok(summary),
        Err((step, violation)) => {
            let replay = shrink(schedule[..=step].to_vec(), &violation);
            Err(Failure {
                seed,
                step: step as u64,
                violation,
                replay,
            })
        }
    }
}

/// Runs a given schedule (a replay); `Err` names the step index and the broken invariant.
pub fn execute(schedule: &[Action]) -> Result<Summary, (usize, String)> {
    let mut w = world::World::new();
    for (i, a) in schedule.iter().enumerate() {
        w.act(*a).map_err(|v| (i, v))?;
    }
    w.finish().map_err(|v| (schedule.len(), v))?;
    Ok(w.summary(schedule.len() as u64))
}

/// The kind of a violation (its text up to the first colon): what shrinking keeps.
fn kind(violation: &str) -> &str {
    violation.split(':').next().unwrap_or(violation)
}

/// Drops chunks of actions while the same invariant still breaks.
fn shrink(s: Vec<Action>, violation: &str) -> Vec<Action> {
    let want = kind(violation).to_string();
    shrink_by(s, |s| matches!(execute(s), Err((_, v)) if kind(&v) == want))
}

/// Drops chunks of actions, halving the chunk size, while `fails` still holds. Bounded: at
/// most `BUDGET` replays.
fn shrink_by(mut s: Vec<Action>, fails: impl Fn(&[Action]) -> bool) -> Vec<Action> {
    const BUDGET: usize = 4000;
    let mut tries = 0;
    let mut chunk = s.len().div_ceil(2).max(1);
    loop {
        let mut i = 0;
        while i < s.len() && tries < BUDGET {
            let mut t = s.clone();
            t.drain(i..(i + chunk).min(s.len()));
            tries += 1;
            if !t.is_empty() && fails(&t) {
                s = t;
            } else {
                i += chunk;
            }
        }
        if chunk == 1 || tries >= BUDGET {
            return s;
        }
        chunk = chunk.div_ceil(2);
    }
}

/// SplitMix64: a small seeded generator, enough for schedules (no dependency).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The schedule of `seed`: weighted so that workers offer, exit and time out often and
/// installs, upgrades and shutdowns happen now and then.
pub fn schedule(seed: u64, steps: u64) -> Vec<Action> {
    let mut r = Rng(seed);
    (0..steps).map(|_| draw(&mut r)).collect()
}

fn draw(r: &mut Rng) -> Action {
    let c = r.below(KEYS.len() as u64) as usize;
    let pick = r.below(3) as usize;
    match r.below(100) {
        0..=4 => Action::Install { c },
        5..=8 => Action::Upgrade {
            c,
            new_secret: r.below(4) == 0,
        },
        9..=10 => Action::Uninstall { c },
        11..=14 => Action::Connect { c },
        15..=17 => Action::Disconnect { c },
        18..=20 => Action::Reload { c },
        21..=42 => Action::Offer {
            c,
            pick,
            set: r.below(5) as u8,
        },
        43..=52 => Action::Exit { c, pick },
        53..=60 => Action::Report {
            c,
            pick,
            kind: r.below(5) as u8,
        },
        61..=64 => Action::Approve {
            c,
            stale: r.below(3) == 0,
        },
        65..=66 => Action::Spawner {
            c,
            broken: r.below(2) == 0,
        },
        67 => Action::Shutdown,
        _ => Action::Advance {
            ms: [50, 300, 1_000, 3_500, 12_000, 65_000][r.below(6) as usize],
        },
    }
}

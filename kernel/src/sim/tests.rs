//! The simulator's budget in CI, and that a failure shrinks to a replay that still fails.

use super::*;

/// Seeds × steps run by `cargo test`; `tutti-sim --steps N --seed S` runs more.
const SEEDS: u64 = 8;
const STEPS: u64 = 25_000;

#[test]
fn sim_holds_every_invariant_over_seeded_schedules() {
    for seed in 1..=SEEDS {
        if let Err(f) = run(seed, STEPS) {
            panic!("{f}");
        }
    }
}

#[test]
fn sim_is_deterministic_per_seed() {
    assert_eq!(schedule(7, 500), schedule(7, 500));
    assert_ne!(schedule(7, 500), schedule(8, 500));
    let a = run(7, 2_000).unwrap_or_else(|f| panic!("{f}"));
    let b = run(7, 2_000).unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(a, b);
    assert!(a.commits > 0 && a.fences > 0 && a.restarts > 0, "{a:?}");
}

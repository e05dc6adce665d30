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

#[test]
fn shrinking_keeps_only_the_actions_the_failure_needs() {
    let needed = [Action::Shutdown, Action::Uninstall { c: 2 }];
    let fails = |s: &[Action]| {
        let at = |a| s.iter().position(|x| *x == a);
        matches!((at(needed[0]), at(needed[1])), (Some(i), Some(j)) if i < j)
    };
    let mut long = schedule(3, 300);
    long.retain(|a| !needed.contains(a));
    long.insert(40, needed[0]);
    long.insert(250, needed[1]);
    assert!(fails(&long));
    assert_eq!(shrink_by(long, fails), needed.to_vec());
}

/// A world with `alpha` installed and its first worker spawned, every invariant holding.
fn started() -> world::World {
    let mut w = world::World::new();
    w.act(Action::Install { c: 0 })
        .unwrap_or_else(|v| panic!("{v}"));
    assert!(!w.procs.is_empty(), "the install spawned no worker");
    w
}

#[test]
fn a_worker_nobody_owns_breaks_the_leak_invariant() {
    let mut w = started();
    let stray = world::Proc {
        c: 0,
        release: "/releases/alpha/1".into(),
        stop_at: None,
    };
    w.procs.insert(9_999, stray);
    let v = w.check_state().err().unwrap_or_default();
    assert!(v.starts_with("leaked worker: 9999 of alpha"), "{v:?}");
}

#[test]
fn an_identity_without_a_worker_breaks_the_leak_invariant() {
    let mut w = started();
    w.identities.insert(9_999);
    let v = w.check_state().err().unwrap_or_default();
    assert!(v.starts_with("leaked identity: generation 9999"), "{v:?}");
    w.procs.clear();
    w.identities.clear();
    w.identities.insert(9_998);
    let v = w.quiescent().err().unwrap_or_default();
    assert!(v.starts_with("leaked identity: generation 9998"), "{v:?}");
}

#[test]
fn a_generation_live_again_after_its_fence_breaks_the_monotonic_invariant() {
    let mut w = started();
    let g = *w.procs.keys().next().unwrap_or(&0);
    w.act(Action::Offer {
        c: 0,
        pick: 0,
        set: 0,
    })
    .unwrap_or_else(|v| panic!("{v}"));
    assert_eq!(w.table.live("alpha").map(|r| r.generation), Some(g));
    w.fenced.insert(g);
    let v = w.check_state().err().unwrap_or_default();
    assert!(v.starts_with("live generation went back"), "{v:?}");
}

/// The shrunk replays of the lifecycle bugs the simulator found (docs/RELIABILITY.md), kept as
/// regression cases: the seeded budget above does not reach every one of them.
#[test]
fn replays_of_past_findings_hold_every_invariant() {
    use Action::*;
    let approve_during_an_upgrade = [
        Install { c: 1 },
        Offer {
            c: 1,
            pick: 0,
            set: 2,
        },
        Offer {
            c: 1,
            pick: 1,
            set: 0,
        },
        Install { c: 1 },
        Approve { c: 1, stale: false },
        Offer {
            c: 1,
            pick: 2,
            set: 1,
        },
    ];
    let report_of_a_revoked_generation = [
        Upgrade {
            c: 1,
            new_secret: false,
        },
        Advance { ms: 65_000 },
        Install { c: 1 },
        Offer {
            c: 1,
            pick: 2,
            set: 4,
        },
        Exit { c: 1, pick: 1 },
        Report {
            c: 1,
            pick: 1,
            kind: 1,
        },
        Advance { ms: 1_000 },
        Offer {
            c: 1,
            pick: 2,
            set: 3,
        },
        Report {
            c: 1,
            pick: 0,
            kind: 2,
        },
    ];
    for replay in [
        &approve_during_an_upgrade[..],
        &report_of_a_revoked_generation[..],
    ] {
        if let Err((step, v)) = execute(replay) {
            panic!("step {step}: {v}");
        }
    }
}

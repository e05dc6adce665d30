//! The soak's table (Markdown, so a run's table can go into docs/RELIABILITY.md as printed)
//! and whether every invariant held.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::audit::Audit;
use super::judge::{self, AuditVerdict, FENCE_MARGIN_MS, Routing};
use super::slope::{self, Trend};
use super::watch::Lives;
use super::world::{Answer, CALL_MS, Call, GRACE};

/// What the run saw besides the calls.
pub struct Facts<'a> {
    pub command: String,
    pub seconds: u64,
    pub seed: u64,
    pub calls: &'a [Call],
    pub audit: &'a Audit,
    pub kernel_kills: &'a [i64],
    pub frontend_deaths: &'a [(i64, i64)],
    pub revoked: &'a std::collections::HashMap<u64, i64>,
    pub orphans: &'a [String],
    pub faults: &'a [String],
    pub actions: &'a BTreeMap<&'static str, usize>,
    pub lives: &'a Lives,
    /// Echo calls the fixture upstreams received, and those that arrived twice.
    pub upstream_echoes: usize,
    pub upstream_twice: &'a [String],
    /// The second half, wall ms.
    pub half: (i64, i64),
}

/// One invariant: its row, the count, and the problems behind it (a few are printed).
struct Check {
    row: String,
    problems: Vec<String>,
}

/// The table and whether every invariant held.
pub fn report(f: &Facts<'_>) -> (String, bool) {
    let mut out = String::new();
    let _ = writeln!(out, "`{}` (seed {}, {} s)\n", f.command, f.seed, f.seconds);
    let (kinds, others) = kinds(f.calls);
    let routing = judge::routing(f.calls, &judge::lifetimes(&f.audit.routes, f.kernel_kills));
    let audit = judge::audit(f.calls, f.audit, f.frontend_deaths);
    let checks = checks(f, others, &routing, &audit);
    let _ = writeln!(out, "| what | count |\n|---|---:|");
    let _ = writeln!(out, "| calls | {} |", f.calls.len());
    for (client, n) in per_client(f.calls) {
        let _ = writeln!(out, "| calls by the {client} client (answered) | {n} |");
    }
    for (kind, n) in &kinds {
        let _ = writeln!(out, "| {kind} | {n} |");
    }
    let _ = writeln!(
        out,
        "| answers naming their worker (fixture `whoami`, prompt, resource) | {} (unreadable {}; latest answer from an ended generation: {} ms after its end) |",
        routing.attributed, routing.unattributed, routing.lag_within_margin_ms
    );
    let _ = writeln!(
        out,
        "| audit call records / calls they belong to | {} / {} ({} calls had to have one, {} could: {} did) |",
        audit.records, audit.matched, audit.must, audit.may, audit.may_recorded
    );
    let _ = writeln!(
        out,
        "| echo calls the fixture upstreams received (each message unique) | {} |",
        f.upstream_echoes
    );
    let _ = writeln!(out, "\n| invariant | count | must be |\n|---|---:|---:|");
    let mut held = true;
    for c in &checks {
        let _ = writeln!(out, "| {} | {} | 0 |", c.row, c.problems.len());
        held &= c.problems.is_empty();
    }
    let actions: Vec<String> = f.actions.iter().map(|(a, n)| format!("{a} {n}")).collect();
    let _ = writeln!(out, "\nChaos: {}.", actions.join(", "));
    let (trends, partial) = slope::trends(f.lives, f.half.0, f.half.1);
    held &= trends_table(&mut out, &trends, partial, f.half);
    series(&mut out, &trends, f.lives, f.half);
    for c in checks.iter().filter(|c| !c.problems.is_empty()) {
        let _ = writeln!(out, "\n{}:", c.row);
        for p in c.problems.iter().take(10) {
            let _ = writeln!(out, "- {p}");
        }
    }
    (out, held)
}

/// Answers by kind: the standard ones counted, the others listed.
fn kinds(calls: &[Call]) -> (BTreeMap<String, usize>, Vec<String>) {
    let mut kinds = BTreeMap::new();
    let mut others = Vec::new();
    for c in calls.iter().filter(|c| c.answer != Answer::Hang) {
        match judge::kind_of(&c.answer) {
            Ok(k) => *kinds.entry(k).or_insert(0) += 1,
            Err(e) => others.push(format!("{} ({}): {e}", c.target, c.client)),
        }
    }
    (kinds, others)
}

fn per_client(calls: &[Call]) -> BTreeMap<&'static str, String> {
    let mut n: BTreeMap<&'static str, (usize, usize)> = BTreeMap::new();
    for c in calls {
        let e = n.entry(c.client).or_default();
        e.0 += 1;
        e.1 += usize::from(matches!(
            c.answer,
            Answer::Result {
                is_error: false,
                refused: None
            }
        ));
    }
    n.into_iter()
        .map(|(c, (all, ok))| (c, format!("{all} ({ok})")))
        .collect()
}

fn checks(
    f: &Facts<'_>,
    others: Vec<String>,
    routing: &Routing,
    audit: &AuditVerdict,
) -> Vec<Check> {
    let hangs = f
        .calls
        .iter()
        .filter(|c| c.answer == Answer::Hang)
        .map(|c| format!("{} ({}) sent at {}", c.target, c.client, c.start_ms))
        .collect();
    let wrong = f
        .calls
        .iter()
        .filter_map(|c| {
            c.wrong_echo
                .as_ref()
                .map(|w| format!("{} answered {w:?}", c.target))
        })
        .collect();
    let silent = per_client(f.calls)
        .into_iter()
        .filter(|(_, n)| n.ends_with("(0)"))
        .map(|(c, _)| format!("the {c} client got no answer at all"))
        .collect();
    let check = |row: String, problems: Vec<String>| Check { row, problems };
    vec![
        check("answers that are no standard error".into(), others),
        check(
            format!(
                "hangs (no answer within callMs {CALL_MS} ms + {} s)",
                GRACE.as_secs()
            ),
            hangs,
        ),
        check(
            format!("answers from a fenced generation (sent > {FENCE_MARGIN_MS} ms after its end)"),
            routing.fenced.clone(),
        ),
        check(
            "answers from another connector's worker".into(),
            routing.misrouted.clone(),
        ),
        check("echoes answering another call".into(), wrong),
        check(
            "calls that reached an upstream twice".into(),
            f.upstream_twice.to_vec(),
        ),
        check(
            "answers to a revoked token".into(),
            judge::revoked_answers(f.calls, f.revoked),
        ),
        check("orphan processes".into(), f.orphans.to_vec()),
        check(
            "calls without their audit record".into(),
            audit.missing.clone(),
        ),
        check(
            "audit records without their call".into(),
            audit.extra.clone(),
        ),
        check(
            "chaos steps that failed (a runtime that did not come back, …)".into(),
            f.faults.to_vec(),
        ),
        check("clients that got no answer".into(), silent),
    ]
}

fn mib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

/// The samples of each process that did not stay flat, second by second, to tell a leak
/// from a swing by eye.
fn series(out: &mut String, trends: &[Trend], lives: &Lives, half: (i64, i64)) {
    for t in trends.iter().filter(|t| !t.flat) {
        let Some(life) = lives.get(&t.id) else {
            continue;
        };
        let points: Vec<String> = life
            .samples
            .iter()
            .filter(|s| s.at_ms >= half.0 && s.at_ms <= half.1)
            .map(|s| {
                let away = if s.whole { "" } else { "*" };
                format!(
                    "+{}s {} fds {} MiB{away}",
                    (s.at_ms - half.0) / 1000,
                    s.fds,
                    mib(s.rss_kib)
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "
{} (pid {}), each sample (* while a connector was uninstalled): {}",
            t.role,
            t.id.0,
            points.join(" · ")
        );
    }
}

/// The second half's table; whether every process in it stayed flat.
fn trends_table(out: &mut String, trends: &[Trend], partial: usize, half: (i64, i64)) -> bool {
    let _ = writeln!(
        out,
        "\nSecond half ({} s): every process that lived through it ({partial} others were started or ended by the chaos meanwhile). Growth: the fitted line's rise over the window / the floor's rise (lowest of the last quarter minus lowest of the first, over the samples taken while every connector was installed); a leak raises both.\n",
        (half.1 - half.0) / 1000
    );
    let _ = writeln!(
        out,
        "| process | samples | RSS MiB first → last | RSS growth (line / floor) | fds first → last | fd growth (line / floor) | flat |\n|---|---:|---:|---:|---:|---:|---|"
    );
    for t in trends {
        let _ = writeln!(
            out,
            "| {} (pid {}) | {} | {} → {} | {:+.0} / {:+} KiB | {} → {} | {:+.1} / {:+} | {} |",
            t.role,
            t.id.0,
            t.samples,
            mib(t.rss_first_kib),
            mib(t.rss_last_kib),
            t.rss_growth_kib,
            t.rss_floor_kib,
            t.fds_first,
            t.fds_last,
            t.fds_growth,
            t.fds_floor,
            if t.flat { "yes" } else { "**no**" }
        );
    }
    let roles: Vec<&str> = trends.iter().map(|t| t.role.as_str()).collect();
    let missing: Vec<&str> = ["kernel", "frontend", "shim-manager", "bridge"]
        .into_iter()
        .filter(|r| !roles.contains(r))
        .collect();
    if !missing.is_empty() {
        let _ = writeln!(
            out,
            "\n**Not measured** (did not live through the second half): {}",
            missing.join(", ")
        );
    }
    missing.is_empty() && trends.iter().all(|t| t.flat)
}

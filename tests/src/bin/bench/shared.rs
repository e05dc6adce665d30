//! What the bench's sections share: the rows and targets of a run, percentiles and their
//! formats, and the two protocol eras.

use std::time::Duration;

/// The rows (what, value) and targets (what, measured, met) of a run; each row is printed as
/// it is measured.
#[derive(Default)]
pub(super) struct Report {
    pub(super) rows: Vec<(String, String)>,
    pub(super) targets: Vec<(String, String, bool)>,
}

impl Report {
    pub(super) fn row(&mut self, what: &str, value: String) {
        println!("{what:<58} {value}");
        self.rows.push((what.to_string(), value));
    }

    pub(super) fn target(&mut self, what: &str, measured: String, met: bool) {
        self.targets.push((what.to_string(), measured, met));
    }
}

/// The `p` quantile of `sorted` (nearest rank; zero when empty).
pub(super) fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

pub(super) fn fmt_us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

/// (p50, p90, p99, "p50 … · p90 … · p99 … (n=…)") in µs.
pub(super) fn summary(mut v: Vec<Duration>) -> (Duration, Duration, Duration, String) {
    v.sort();
    let (p50, p90, p99) = (pct(&v, 0.5), pct(&v, 0.9), pct(&v, 0.99));
    (
        p50,
        p90,
        p99,
        format!(
            "p50 {} · p90 {} · p99 {} (n={})",
            fmt_us(p50),
            fmt_us(p90),
            fmt_us(p99),
            v.len()
        ),
    )
}

/// p50 of `v` (sorted or not).
pub(super) fn p50(v: &[Duration]) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    pct(&v, 0.5)
}

pub(super) fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-9)
}

#[derive(Clone, Copy)]
pub(super) enum Era {
    Legacy,
    Modern,
}

impl Era {
    pub(super) fn name(self) -> &'static str {
        match self {
            Era::Legacy => "legacy 2025-06-18",
            Era::Modern => "modern 2026-07-28",
        }
    }
}

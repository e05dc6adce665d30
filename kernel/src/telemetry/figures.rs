//! Per-connector `tools/call` figures over a sliding window (SPEC §14, `tutti status`): calls,
//! errors by outcome, p50/p99 latency, calls per second. Fed by the frontend's `CallRecord`s
//! (which travel in batches off the call path) as they reach the kernel; read by `Status`.
//!
//! Memory is bounded whatever the call rate: one bucket per second that saw a call, at most
//! [`WINDOW_SECONDS`] of them per connector, each holding counts per outcome and a
//! log-linear latency histogram ([`SUB_BUCKETS`] buckets per power of two, so a reported
//! percentile is within about 3 % of the true one, and never outside the smallest and largest
//! latency seen in the window).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use tutti_proto::kernel as pb;

/// The window `status` reports on.
pub const WINDOW_SECONDS: u32 = 300;
/// How many seconds of calls per second `status` returns for a sparkline.
pub const RATE_SECONDS: usize = 60;
/// Outcomes of `CallRecord.outcome` other than `ok`; anything unknown counts as `other`.
const ERROR_OUTCOMES: [&str; 7] = [
    "tool_error",
    "invalid_arguments",
    "rpc_error",
    "timeout",
    "unavailable",
    "cancelled",
    "other",
];
/// Histogram buckets per power of two (log-linear, like HdrHistogram with 4 bits).
const SUB_BITS: u32 = 4;
const SUB_BUCKETS: u64 = 1 << SUB_BITS;

/// The histogram bucket of a latency in microseconds.
fn bucket_of(us: u64) -> usize {
    if us < SUB_BUCKETS {
        return us as usize;
    }
    let octave = 63 - us.leading_zeros(); // >= SUB_BITS
    let shift = octave - SUB_BITS;
    let sub = (us >> shift) & (SUB_BUCKETS - 1);
    ((octave - SUB_BITS + 1) as u64 * SUB_BUCKETS + sub) as usize
}

/// The middle of the values bucket `index` holds.
fn bucket_middle(index: usize) -> u64 {
    let index = index as u64;
    if index < SUB_BUCKETS {
        return index;
    }
    let octave = index / SUB_BUCKETS - 1 + SUB_BITS as u64;
    let sub = index % SUB_BUCKETS;
    let shift = octave - SUB_BITS as u64;
    let low = (SUB_BUCKETS + sub) << shift;
    low + ((1u64 << shift) - 1) / 2
}

/// The calls of one second.
#[derive(Default)]
struct Second {
    at: i64,
    calls: u64,
    /// Indexed like [`ERROR_OUTCOMES`].
    errors: [u64; ERROR_OUTCOMES.len()],
    /// Calls per latency bucket; grows to the largest bucket seen.
    histogram: Vec<u32>,
    min_us: u64,
    max_us: u64,
}

impl Second {
    fn add(&mut self, duration_us: u64, outcome: &str) {
        if self.calls == 0 {
            self.min_us = duration_us;
        }
        self.calls += 1;
        self.min_us = self.min_us.min(duration_us);
        self.max_us = self.max_us.max(duration_us);
        if outcome != "ok" {
            let i = ERROR_OUTCOMES
                .iter()
                .position(|o| *o == outcome)
                .unwrap_or(ERROR_OUTCOMES.len() - 1);
            self.errors[i] += 1;
        }
        let b = bucket_of(duration_us);
        if self.histogram.len() <= b {
            self.histogram.resize(b + 1, 0);
        }
        self.histogram[b] = self.histogram[b].saturating_add(1);
    }
}

/// One connector's seconds, oldest first, none older than the window.
#[derive(Default)]
struct Window {
    seconds: VecDeque<Second>,
}

impl Window {
    fn expire(&mut self, now: i64) {
        let oldest = now - i64::from(WINDOW_SECONDS) + 1;
        while self.seconds.front().is_some_and(|s| s.at < oldest) {
            self.seconds.pop_front();
        }
    }

    fn add(&mut self, now: i64, duration_us: u64, outcome: &str) {
        self.expire(now);
        // A clock stepped back files the call under the newest second rather than reorder.
        match self.seconds.back_mut() {
            Some(last) if last.at >= now => last.add(duration_us, outcome),
            _ => {
                let mut s = Second {
                    at: now,
                    ..Default::default()
                };
                s.add(duration_us, outcome);
                self.seconds.push_back(s);
            }
        }
    }

    fn figures(&self, now: i64) -> pb::CallFigures {
        let oldest = now - i64::from(WINDOW_SECONDS) + 1;
        let live = || self.seconds.iter().filter(move |s| s.at >= oldest);
        let mut out = pb::CallFigures {
            window_seconds: WINDOW_SECONDS,
            ..Default::default()
        };
        let mut errors = [0u64; ERROR_OUTCOMES.len()];
        let mut histogram: Vec<u64> = Vec::new();
        let (mut min, mut max) = (u64::MAX, 0);
        for s in live() {
            out.calls += s.calls;
            for (total, n) in errors.iter_mut().zip(s.errors) {
                *total += n;
            }
            if histogram.len() < s.histogram.len() {
                histogram.resize(s.histogram.len(), 0);
            }
            for (total, n) in histogram.iter_mut().zip(&s.histogram) {
                *total += u64::from(*n);
            }
            min = min.min(s.min_us);
            max = max.max(s.max_us);
        }
        out.errors = errors.iter().sum();
        out.errors_by_outcome = ERROR_OUTCOMES
            .iter()
            .zip(errors)
            .map(|(o, n)| ((*o).to_owned(), n))
            .collect();
        if out.calls > 0 {
            out.p50_us = percentile(&histogram, out.calls, 0.50).clamp(min, max);
            out.p99_us = percentile(&histogram, out.calls, 0.99).clamp(min, max);
        }
        out.calls_per_second = rates(live(), now);
        out
    }
}

/// The value at quantile `q` (nearest rank) of `total` calls counted in `histogram`.
fn percentile(histogram: &[u64], total: u64, q: f64) -> u64 {
    let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
    let mut seen = 0;
    for (i, n) in histogram.iter().enumerate() {
        seen += n;
        if seen >= rank {
            return bucket_middle(i);
        }
    }
    0
}

/// Calls per second over the last [`RATE_SECONDS`] seconds up to `now`, oldest first.
fn rates<'a>(seconds: impl Iterator<Item = &'a Second>, now: i64) -> Vec<u32> {
    let mut out = vec![0u32; RATE_SECONDS];
    let first = now - RATE_SECONDS as i64 + 1;
    for s in seconds.filter(|s| s.at >= first && s.at <= now) {
        out[(s.at - first) as usize] = u32::try_from(s.calls).unwrap_or(u32::MAX);
    }
    out
}

/// Every connector's window. Cheap to update: one short lock per record.
#[derive(Default)]
pub struct CallFigures {
    windows: Mutex<BTreeMap<String, Window>>,
}

/// The windows, whatever a panicking holder left (plain counters: keep counting).
fn lock(
    m: &Mutex<BTreeMap<String, Window>>,
) -> std::sync::MutexGuard<'_, BTreeMap<String, Window>> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn now_s() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

impl CallFigures {
    /// Counts one finished call, at the time it reaches the kernel.
    pub fn record(&self, connector: &str, duration_us: u64, outcome: &str) {
        self.record_at(now_s(), connector, duration_us, outcome);
    }

    fn record_at(&self, now: i64, connector: &str, duration_us: u64, outcome: &str) {
        let mut windows = lock(&self.windows);
        windows
            .entry(connector.to_owned())
            .or_default()
            .add(now, duration_us, outcome);
    }

    /// The figures of `connector` now (all zero when it had no call in the window).
    pub fn figures(&self, connector: &str) -> pb::CallFigures {
        self.figures_at(now_s(), connector)
    }

    fn figures_at(&self, now: i64, connector: &str) -> pb::CallFigures {
        let mut windows = lock(&self.windows);
        match windows.get_mut(connector) {
            Some(w) => {
                w.expire(now);
                w.figures(now)
            }
            None => Window::default().figures(now),
        }
    }

    /// Forgets a connector that is no longer installed.
    pub fn retain(&self, installed: impl Fn(&str) -> bool) {
        lock(&self.windows).retain(|k, _| installed(k));
    }

    /// [`CallFigures::retain`] the connectors that are keys of `installed`.
    pub fn retain_keys<V>(&self, installed: &std::collections::BTreeMap<String, V>) {
        self.retain(|key| installed.contains_key(key));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_value_in_order_within_their_precision() {
        let mut last = 0;
        for us in (0..5_000u64).chain([65_535, 1 << 20, 123_456_789, u64::MAX >> 1]) {
            let b = bucket_of(us);
            assert!(b >= last, "buckets are monotonic at {us}");
            last = b;
            let mid = bucket_middle(b);
            let err = mid.abs_diff(us) as f64 / us.max(1) as f64;
            assert!(err <= 1.0 / SUB_BUCKETS as f64, "{us} -> {mid}");
        }
    }

    #[test]
    fn empty_window_is_all_zero() {
        let f = CallFigures::default();
        let got = f.figures_at(1000, "x");
        assert_eq!(
            (got.calls, got.errors, got.p50_us, got.p99_us),
            (0, 0, 0, 0)
        );
        assert_eq!(got.window_seconds, 300);
        assert_eq!(got.calls_per_second, vec![0; RATE_SECONDS]);
        assert_eq!(got.errors_by_outcome.get("timeout"), Some(&0));
    }

    #[test]
    fn percentiles_and_outcomes_over_a_hundred_calls() {
        let f = CallFigures::default();
        // 1..=100 ms: p50 is 50 ms, p99 is 99 ms.
        for i in 1..=100u64 {
            let outcome = match i {
                1..=10 => "invalid_arguments",
                11..=15 => "timeout",
                16 => "something new",
                _ => "ok",
            };
            f.record_at(1000 + (i as i64 % 3), "a", i * 1000, outcome);
        }
        let got = f.figures_at(1002, "a");
        assert_eq!(got.calls, 100);
        assert_eq!(got.errors, 16);
        assert_eq!(got.errors_by_outcome["invalid_arguments"], 10);
        assert_eq!(got.errors_by_outcome["timeout"], 5);
        assert_eq!(got.errors_by_outcome["other"], 1);
        assert_eq!(got.errors_by_outcome["tool_error"], 0);
        let near = |v: u64, want: u64| v.abs_diff(want) as f64 <= want as f64 * 0.04;
        assert!(near(got.p50_us, 50_000), "p50 {}", got.p50_us);
        assert!(near(got.p99_us, 99_000), "p99 {}", got.p99_us);
        assert_eq!(f.figures_at(1002, "b").calls, 0, "per connector");
    }

    #[test]
    fn percentiles_stay_within_the_values_seen() {
        let f = CallFigures::default();
        for _ in 0..10 {
            f.record_at(5, "a", 1_000_003, "ok");
        }
        let got = f.figures_at(5, "a");
        assert_eq!((got.p50_us, got.p99_us), (1_000_003, 1_000_003));
    }

    #[test]
    fn calls_leave_the_window_after_five_minutes() {
        let f = CallFigures::default();
        f.record_at(100, "a", 10, "timeout");
        f.record_at(200, "a", 20, "ok");
        assert_eq!(f.figures_at(399, "a").calls, 2);
        let got = f.figures_at(400, "a");
        assert_eq!((got.calls, got.errors), (1, 0));
        assert_eq!((got.p50_us, got.p99_us), (20, 20));
        assert_eq!(f.figures_at(500, "a").calls, 0);
    }

    #[test]
    fn rates_are_the_last_minute_oldest_first() {
        let f = CallFigures::default();
        for _ in 0..3 {
            f.record_at(1000, "a", 1, "ok");
        }
        f.record_at(1059, "a", 1, "ok");
        f.record_at(900, "a", 1, "ok"); // clock stepped back: filed under 1059
        let got = f.figures_at(1059, "a");
        assert_eq!(got.calls_per_second.len(), RATE_SECONDS);
        assert_eq!(got.calls_per_second[0], 3);
        assert_eq!(got.calls_per_second[59], 2);
        assert_eq!(got.calls_per_second[1..59].iter().sum::<u32>(), 0);
        assert_eq!(f.figures_at(1060, "a").calls_per_second[0], 0);
    }

    #[test]
    fn uninstalled_connectors_are_forgotten() {
        let f = CallFigures::default();
        f.record_at(1, "a", 1, "ok");
        f.record_at(1, "b", 1, "ok");
        f.retain(|k| k == "b");
        assert_eq!(f.figures_at(1, "a").calls, 0);
        assert_eq!(f.figures_at(1, "b").calls, 1);
    }
}

//! Whether a process's resident set and open descriptors stay flat over the second half of
//! the run. Two measures of growth over the window: the least-squares line through the
//! samples (how much it rises from the window's start to its end), and the floor's rise (the
//! lowest sample of the last quarter minus the lowest of the first). Descriptors and memory
//! swing with the load (pooled connections, buffers); a leak raises the line *and* the floor,
//! a swing at most one of them. A connector the chaos uninstalled for a few seconds takes its
//! worker's connections along, a dip that would raise the floor: the floor is taken over the
//! samples when every connector was installed. A process is flat unless both rise by more than the
//! allowance: [`RSS_FLAT_KIB`] KiB or [`FDS_FLAT`] descriptors, plus [`RELATIVE`] of its
//! median; the frontend's descriptors also [`FRONTEND_POOLED_FDS`]. Only processes that lived through the whole second half are judged (the chaos
//! kills the others).

use super::setup::{CHURNED, SESSIONS};
use super::watch::{Id, Lives, Sample};

/// Resident-set growth over the window always taken as noise (allocator arenas, a grown
/// buffer kept).
pub const RSS_FLAT_KIB: f64 = 2048.0;
/// Descriptor growth over the window always taken as noise (connections open at the end).
pub const FDS_FLAT: f64 = 4.0;
/// The frontend keeps a worker generation's frame connections for as long as the generation
/// lives, as many as calls ever ran on it at once: a young generation's pool grows towards the
/// soak's clients' concurrency (each client one call at a time), a bounded rise that a
/// 30-second window cannot tell from a leak. Its bound: a connection per client for each
/// connector.
pub const FRONTEND_POOLED_FDS: f64 = ((SESSIONS.len() + 1) * (CHURNED.len() + 1)) as f64;
/// The share of a process's median taken as noise beside the fixed allowance.
pub const RELATIVE: f64 = 0.05;
/// How close to the window's ends a process's first and last samples must be to count as
/// having lived through it (samples are a second apart).
const EDGE_MS: i64 = 3000;

/// The trend of one process over the window.
#[derive(Clone, Debug)]
pub struct Trend {
    pub id: Id,
    pub role: String,
    pub samples: usize,
    pub rss_first_kib: u64,
    pub rss_last_kib: u64,
    /// Growth of the fitted line over the window.
    pub rss_growth_kib: f64,
    /// The floor's rise: lowest of the last quarter minus lowest of the first (samples while
    /// every connector was installed).
    pub rss_floor_kib: i64,
    pub fds_first: u64,
    pub fds_last: u64,
    pub fds_growth: f64,
    pub fds_floor: i64,
    pub flat: bool,
}

/// The least-squares slope of `points` (x, y), 0 for fewer than two distinct x.
pub fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if points.len() < 2 {
        return 0.0;
    }
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let (num, den) = points.iter().fold((0.0, 0.0), |(num, den), (x, y)| {
        (num + (x - mx) * (y - my), den + (x - mx) * (x - mx))
    });
    if den == 0.0 { 0.0 } else { num / den }
}

fn median(mut v: Vec<u64>) -> f64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0) as f64
}

/// The trend of `samples` over `[from, to]` (ms), if they cover it.
pub fn trend(id: Id, role: &str, samples: &[Sample], from: i64, to: i64) -> Option<Trend> {
    let inside: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.at_ms >= from && s.at_ms <= to)
        .collect();
    let (first, last) = (inside.first()?, inside.last()?);
    if first.at_ms > from + EDGE_MS || last.at_ms < to - EDGE_MS || inside.len() < 3 {
        return None;
    }
    let minutes = (to - from) as f64 / 60_000.0;
    let growth = |f: &dyn Fn(&Sample) -> u64| {
        let points: Vec<(f64, f64)> = inside
            .iter()
            .map(|s| ((s.at_ms - from) as f64 / 60_000.0, f(s) as f64))
            .collect();
        slope(&points) * minutes
    };
    // The floor's rise, over the samples taken while every connector was installed (all
    // samples if there are none): the lowest of the last quarter-long stretch of them minus
    // the lowest of the first.
    let quarter = (to - from) / 4;
    let whole: Vec<&Sample> = inside.iter().copied().filter(|s| s.whole).collect();
    let judged = if whole.is_empty() { &inside } else { &whole };
    let (start, end) = match (judged.first(), judged.last()) {
        (Some(a), Some(b)) => (a.at_ms, b.at_ms),
        _ => (from, to),
    };
    let floor = |f: &dyn Fn(&Sample) -> u64| {
        let low = |a: i64, b: i64| {
            judged
                .iter()
                .filter(|s| s.at_ms >= a && s.at_ms <= b)
                .map(|s| f(s))
                .min()
                .unwrap_or(0) as i64
        };
        low(end - quarter, end) - low(start, start + quarter)
    };
    let rss_growth_kib = growth(&|s| s.rss_kib);
    let fds_growth = growth(&|s| s.fds);
    let (rss_floor_kib, fds_floor) = (floor(&|s| s.rss_kib), floor(&|s| s.fds));
    let rss_allowed = RSS_FLAT_KIB + RELATIVE * median(inside.iter().map(|s| s.rss_kib).collect());
    let pooled = if role == "frontend" {
        FRONTEND_POOLED_FDS
    } else {
        0.0
    };
    let fds_allowed = FDS_FLAT + pooled + RELATIVE * median(inside.iter().map(|s| s.fds).collect());
    let leaks = |fit: f64, floor: i64, allowed: f64| fit > allowed && floor as f64 > allowed;
    let flat = !leaks(rss_growth_kib, rss_floor_kib, rss_allowed)
        && !leaks(fds_growth, fds_floor, fds_allowed);
    Some(Trend {
        id,
        role: role.to_owned(),
        samples: inside.len(),
        rss_first_kib: first.rss_kib,
        rss_last_kib: last.rss_kib,
        rss_growth_kib,
        rss_floor_kib,
        fds_first: first.fds,
        fds_last: last.fds,
        fds_growth,
        fds_floor,
        flat,
    })
}

/// The trend of every process that lived through `[from, to]`, by role; and how many
/// processes were seen in the window but did not live through it.
pub fn trends(lives: &Lives, from: i64, to: i64) -> (Vec<Trend>, usize) {
    let mut out = Vec::new();
    let mut partial = 0;
    for (id, life) in lives {
        match trend(*id, &life.role, &life.samples, from, to) {
            Some(t) => out.push(t),
            None if life.samples.iter().any(|s| s.at_ms >= from) => partial += 1,
            None => {}
        }
    }
    out.sort_by(|a, b| a.role.cmp(&b.role).then(a.id.cmp(&b.id)));
    (out, partial)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(f: impl Fn(i64) -> (u64, u64)) -> Vec<Sample> {
        (0..=60)
            .map(|s| {
                let (rss_kib, fds) = f(s);
                Sample {
                    at_ms: s * 1000,
                    rss_kib,
                    fds,
                    whole: true,
                }
            })
            .collect()
    }

    #[test]
    fn the_slope_of_a_line_is_its_rate() {
        let pts: Vec<(f64, f64)> = (0..10).map(|x| (x as f64, 3.0 * x as f64 + 1.0)).collect();
        assert!((slope(&pts) - 3.0).abs() < 1e-9);
        assert_eq!(slope(&[(1.0, 1.0)]), 0.0);
    }

    #[test]
    fn noise_is_flat_and_a_leak_is_not() {
        let noisy = samples(|s| (20_000 + (s % 7) as u64 * 300, 12 + (s % 3) as u64));
        let t = trend((1, 1), "kernel", &noisy, 0, 60_000).unwrap_or_else(|| panic!("no trend"));
        assert!(t.flat, "{t:?}");
        // 100 KiB a second: 6 MiB over the minute.
        let leak = samples(|s| (20_000 + s as u64 * 100, 12));
        let t = trend((1, 1), "kernel", &leak, 0, 60_000).unwrap_or_else(|| panic!("no trend"));
        assert!(!t.flat && t.rss_growth_kib > 5000.0, "{t:?}");
        // One descriptor every 5 s.
        let fds = samples(|s| (20_000, 12 + (s / 5) as u64));
        let t = trend((1, 1), "kernel", &fds, 0, 60_000).unwrap_or_else(|| panic!("no trend"));
        assert!(!t.flat, "{t:?}");
        // Pooled connections that swing by ten, busier late in the window: the line rises,
        // the floor does not.
        let swings = samples(|s| (20_000, 30 + if s > 40 { (s % 2) as u64 * 10 } else { 0 }));
        let t = trend((1, 1), "kernel", &swings, 0, 60_000).unwrap_or_else(|| panic!("no trend"));
        assert!(t.fds_growth > FDS_FLAT + 2.0 && t.flat, "{t:?}");
        // A leak under swings: both rise.
        let leak = samples(|s| (20_000, 30 + (s / 4) as u64 + (s % 2) as u64 * 10));
        let t = trend((1, 1), "kernel", &leak, 0, 60_000).unwrap_or_else(|| panic!("no trend"));
        assert!(!t.flat, "{t:?}");
    }

    #[test]
    fn a_connector_away_early_in_the_window_is_no_leak_but_a_leak_beside_it_is() {
        // Connectors uninstalled through the first quarter (two descriptors each), busier
        // late in the window.
        let away = |s: i64| s <= 17;
        let mark = |mut v: Vec<Sample>| {
            for (s, x) in v.iter_mut().enumerate() {
                x.whole = !away(s as i64);
            }
            v
        };
        let dip = mark(samples(|s| {
            let busy = if s > 45 { (s % 3) as u64 * 4 } else { 0 };
            (20_000, if away(s) { 24 } else { 30 } + busy)
        }));
        let t = trend((1, 1), "kernel", &dip, 0, 60_000).unwrap_or_else(|| panic!("no trend"));
        assert!(t.fds_growth > FDS_FLAT + 2.0 && t.flat, "{t:?}");
        // The same with one descriptor more every 4 s.
        let leak = mark(samples(|s| {
            let busy = if s > 45 { (s % 3) as u64 * 4 } else { 0 };
            (
                20_000,
                if away(s) { 24 } else { 30 } + busy + (s / 4) as u64,
            )
        }));
        let t = trend((1, 1), "kernel", &leak, 0, 60_000).unwrap_or_else(|| panic!("no trend"));
        assert!(!t.flat, "{t:?}");
    }

    #[test]
    fn the_frontend_pools_grow_to_the_clients_bound_but_a_leak_goes_past_it() {
        // A young generation's pools fill in steps towards their bound: 12 more connections
        // by the window's middle, kept.
        let ratchet = samples(|s| (20_000, 30 + (s.min(30) / 3) as u64 + (s % 2) as u64));
        let t =
            trend((1, 1), "frontend", &ratchet, 0, 60_000).unwrap_or_else(|| panic!("no trend"));
        assert!(t.flat && t.fds_floor >= 10, "{t:?}");
        let t = trend((1, 1), "kernel", &ratchet, 0, 60_000).unwrap_or_else(|| panic!("no trend"));
        assert!(!t.flat, "{t:?}");
        // One descriptor a second in the frontend: past any pool's bound.
        let leak = samples(|s| (20_000, 30 + s as u64));
        let t = trend((1, 1), "frontend", &leak, 0, 60_000).unwrap_or_else(|| panic!("no trend"));
        assert!(!t.flat, "{t:?}");
    }

    #[test]
    fn a_process_that_did_not_live_through_the_window_is_not_judged() {
        let s = samples(|_| (1000, 5));
        assert!(trend((1, 1), "worker fa", &s[30..], 0, 60_000).is_none());
        assert!(trend((1, 1), "worker fa", &s[..40], 0, 60_000).is_none());
    }
}

//! `tutti-bench --otel-ab`: the per-call echo row with OpenTelemetry export off
//! (no `OTEL_*` variable) and on with an endpoint that never answers, and whether the
//! difference is told apart from noise.
//!
//! Three runtimes run at once, the same fixture connector in each: two with export off (A and
//! B, identical) and one with `OTEL_EXPORTER_OTLP_ENDPOINT` naming a loopback port whose
//! listener never accepts, so every export of the frontend's and the worker's span and metric
//! export loops waits for its timeout and the span queues fill up and drop. The calls are
//! measured in interleaved rounds (every order of the three, each block after untimed calls),
//! so all see the same machine. "B − A" is what two identical runtimes differ by when measured
//! this way: the noise. "on − A" is read against it, round by round (a rank test, see
//! [`verdict`]). "CPU per call" is the frontend's and the worker's CPU time over the rounds
//! divided by the calls. RSS: VmRSS after the rounds, and the peak while 8, then 64,
//! connections call at once (sampled every 20 ms; after the latency rounds, one side after
//! the other).

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use tutti_tests::{Runtime, RuntimeOptions, fixture_connector};

/// One blocking keep-alive connection to a frontend that sends legacy echo calls.
pub(super) trait Echo: Send {
    /// `n` timed calls after the untimed warm-up ones; their latencies.
    fn echo(&mut self, n: usize) -> Result<Vec<Duration>>;
}

/// What this mode borrows from the bench (passed in, so this module does not import it).
pub(super) struct Kit {
    /// Opens an [`Echo`] connection to a frontend URL with a bearer token.
    pub connect: fn(&str, &str) -> Result<Box<dyn Echo>>,
    /// Untimed calls before each block's timed ones.
    pub warmup: usize,
    pub cpu_ns: fn(u32) -> Option<u64>,
    pub rss_kib: fn(u32) -> u64,
    pub kernel_pid: fn(&Path) -> u32,
    pub frontend_pid: fn(&Path) -> u32,
    pub worker_pid: fn(&Path, &str) -> Option<u32>,
}

fn fmt_us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

/// The value at fraction `p` of sorted `v`.
fn pct(v: &[Duration], p: f64) -> Duration {
    let i = ((v.len().max(1) - 1) as f64 * p).round() as usize;
    v.get(i).copied().unwrap_or_default()
}

/// One runtime of the comparison.
struct Side<'k> {
    kit: &'k Kit,
    name: &'static str,
    rt: Runtime,
    http: Box<dyn Echo>,
    pids: [u32; 2],
    samples: Vec<Duration>,
    cpu_ns: u64,
    calls: usize,
    /// The p50 of each round's block.
    round_p50: Vec<Duration>,
    token: String,
    /// VmRSS (KiB) of kernel, frontend and worker after the rounds, and their peak under
    /// the concurrent load.
    rss_after: [u64; 3],
    rss_peak: [u64; 3],
}

impl<'k> Side<'k> {
    fn start(kit: &'k Kit, name: &'static str, env: Vec<(String, String)>) -> Result<Side<'k>> {
        let mut rt = Runtime::start(RuntimeOptions {
            env,
            ..RuntimeOptions::default()
        });
        let mut manifest = fixture_connector("bench", &["--tools", "echo"]);
        manifest["circuit"] = serde_json::json!({"failures": 10_000});
        rt.install_ok(&manifest, &[]);
        rt.wait_status("bench", "ready", Duration::from_secs(30));
        let token = rt.issue_token("bench", "s1");
        let http = (kit.connect)(rt.frontend_url(), &token)?;
        let token = token.clone();
        let pids = [
            (kit.frontend_pid)(rt.state_dir()),
            (kit.worker_pid)(rt.state_dir(), "bench").context("the bench worker's pid")?,
        ];
        Ok(Side {
            kit,
            name,
            rt,
            http,
            pids,
            samples: Vec::new(),
            cpu_ns: 0,
            calls: 0,
            round_p50: Vec::new(),
            token,
            rss_after: [0; 3],
            rss_peak: [0; 3],
        })
    }

    /// One block: `n` timed calls after the untimed ones; counts their CPU time.
    fn block(&mut self, n: usize) -> Result<()> {
        let before = self.pids.map(self.kit.cpu_ns);
        let v = self.http.echo(n)?;
        let after = self.pids.map(self.kit.cpu_ns);
        for (b, a) in before.into_iter().zip(after) {
            if let (Some(b), Some(a)) = (b, a) {
                self.cpu_ns += a.saturating_sub(b);
            }
        }
        self.calls += n + self.kit.warmup;
        let mut block = v.clone();
        block.sort();
        self.round_p50.push(pct(&block, 0.5));
        self.samples.extend(v);
        self.samples.sort();
        Ok(())
    }

    /// 8, then 64 connections calling at once (`calls` each); samples the processes' RSS.
    fn load(&mut self, calls: usize) -> Result<()> {
        let kernel = (self.kit.kernel_pid)(self.rt.state_dir());
        let pids = [kernel, self.pids[0], self.pids[1]];
        self.rss_after = pids.map(self.kit.rss_kib);
        for conc in [8, 64] {
            let mut threads = Vec::new();
            for _ in 0..conc {
                let mut http = (self.kit.connect)(self.rt.frontend_url(), &self.token)?;
                threads.push(std::thread::spawn(move || http.echo(calls).map(|_| ())));
            }
            while !threads.iter().all(|t| t.is_finished()) {
                for (peak, pid) in self.rss_peak.iter_mut().zip(pids) {
                    *peak = (*peak).max((self.kit.rss_kib)(pid));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            for t in threads {
                t.join()
                    .map_err(|_| anyhow::anyhow!("a load thread panicked"))??;
            }
        }
        Ok(())
    }

    /// The row: percentiles, CPU per call, RSS of the three processes now.
    fn report(&self) -> (String, String) {
        let v = &self.samples;
        let mib = |kib: u64| kib as f64 / 1024.0;
        let latency = format!(
            "p50 {} · p90 {} · p99 {} (n={}) · CPU per call (frontend + worker) {}",
            fmt_us(pct(v, 0.5)),
            fmt_us(pct(v, 0.9)),
            fmt_us(pct(v, 0.99)),
            v.len(),
            fmt_us(Duration::from_nanos(self.cpu_ns / self.calls.max(1) as u64)),
        );
        let rss = format!(
            "kernel {:.1} · {:.1}, frontend {:.1} · {:.1}, worker {:.1} · {:.1} MiB",
            mib(self.rss_after[0]),
            mib(self.rss_peak[0]),
            mib(self.rss_after[1]),
            mib(self.rss_peak[1]),
            mib(self.rss_after[2]),
            mib(self.rss_peak[2]),
        );
        (latency, rss)
    }
}

/// Rounds of the interleaving: every order of the three sides, twice, so each side goes
/// first, second and third equally often.
const ROUNDS: usize = 12;
/// The orders of the sides (indices into `[off A, off B, on]`), one per round, cycled.
const ORDERS: [[usize; 3]; 6] = [
    [0, 1, 2],
    [1, 2, 0],
    [2, 0, 1],
    [0, 2, 1],
    [2, 1, 0],
    [1, 0, 2],
];

/// Runs the comparison with `n` timed calls per side and prints the rows and the verdict.
pub(super) fn run(n: usize, kit: &Kit) -> Result<()> {
    // A listener that never accepts: connections queue in the backlog (then SYNs go
    // unanswered) and no request is ever answered.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").context("binding a silent port")?;
    let endpoint = format!("http://{}", silent.local_addr()?);
    let mut sides = [
        Side::start(kit, "off A (no OTEL_* variable)", Vec::new())?,
        Side::start(kit, "off B (no OTEL_* variable)", Vec::new())?,
        Side::start(
            kit,
            "on, endpoint never answers",
            vec![("OTEL_EXPORTER_OTLP_ENDPOINT".into(), endpoint.clone())],
        )?,
    ];
    let share = (n / ROUNDS).max(1);
    for round in 0..ROUNDS {
        for i in ORDERS[round % ORDERS.len()] {
            sides[i].block(share)?;
        }
    }
    // RSS under load last (so it does not move the latency rows), one side after the other.
    let per_connection = (n / 50).max(20);
    for side in &mut sides {
        side.load(per_connection)?;
    }
    println!(
        "OpenTelemetry export: two runtimes with export off (A, B) and one on (unanswered \
         endpoint {endpoint}), legacy echo, {ROUNDS} interleaved rounds of {share} calls:"
    );
    for side in &sides {
        let (latency, rss) = side.report();
        println!("{:<40} {latency}", side.name);
        println!("{:<40} {rss}", "  RSS after the rounds · under load");
    }
    let [a, b, on] = &sides;
    for (what, p) in [("p50", 0.5), ("p99", 0.99)] {
        let base = pct(&a.samples, p);
        println!(
            "{:<40} B − A {} · on − A {}",
            format!("{what}, all calls"),
            signed(pct(&b.samples, p), base),
            signed(pct(&on.samples, p), base)
        );
    }
    println!("{}", verdict(&a.round_p50, &b.round_p50, &on.round_p50));
    // Refused from now on: the exporters' last flush at shutdown fails at once.
    drop(silent);
    for mut side in sides {
        side.rt.stop();
    }
    Ok(())
}

/// `x − base` in µs with its sign.
fn signed(x: Duration, base: Duration) -> String {
    let sign = if x >= base { "+" } else { "−" };
    format!("{sign}{}", fmt_us(x.abs_diff(base)))
}

/// Per-round p50 differences in µs (`x − base`, round by round).
fn deltas(x: &[Duration], base: &[Duration]) -> Vec<f64> {
    x.iter()
        .zip(base)
        .map(|(x, b)| (x.as_secs_f64() - b.as_secs_f64()) * 1e6)
        .collect()
}

/// The noise reading: is "on − A", round by round, told apart from "B − A" (two identical
/// export-off runtimes measured the same way)? A two-sided Mann–Whitney U test on the two
/// sets of per-round p50 differences (normal approximation; |z| < 1.96 is within the
/// noise at the 5 % level).
fn verdict(a: &[Duration], b: &[Duration], on: &[Duration]) -> String {
    let noise = deltas(b, a);
    let effect = deltas(on, a);
    let summary = |v: &[f64]| {
        let mut s = v.to_vec();
        s.sort_by(f64::total_cmp);
        let median = s.get(s.len() / 2).copied().unwrap_or_default();
        let (lo, hi) = (
            s.first().copied().unwrap_or_default(),
            s.last().copied().unwrap_or_default(),
        );
        format!("median {median:+.0} µs, range {lo:+.0} … {hi:+.0} µs")
    };
    let z = mann_whitney_z(&effect, &noise);
    let reading = if z.abs() < 1.96 {
        "within the noise"
    } else {
        "outside the noise"
    };
    format!(
        "{:<40} {}\n{:<40} {}\n{:<40} on − A is {reading} of B − A (Mann–Whitney z = {z:+.2}; |z| < 1.96 is within)",
        "p50 per round, B − A (the noise)",
        summary(&noise),
        "p50 per round, on − A",
        summary(&effect),
        "verdict"
    )
}

/// The z score of the Mann–Whitney U statistic of `x` against `y` (ties count one half).
fn mann_whitney_z(x: &[f64], y: &[f64]) -> f64 {
    let (n1, n2) = (x.len() as f64, y.len() as f64);
    let u: f64 = x
        .iter()
        .map(|xi| {
            y.iter()
                .map(|yj| match xi.total_cmp(yj) {
                    std::cmp::Ordering::Greater => 1.0,
                    std::cmp::Ordering::Equal => 0.5,
                    std::cmp::Ordering::Less => 0.0,
                })
                .sum::<f64>()
        })
        .sum();
    let sd = (n1 * n2 * (n1 + n2 + 1.0) / 12.0).sqrt();
    if sd == 0.0 {
        return 0.0;
    }
    (u - n1 * n2 / 2.0) / sd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mann_whitney_tells_a_shift_from_noise() {
        let noise: Vec<f64> = (0..12).map(|i| f64::from(i % 5) - 2.0).collect();
        let same: Vec<f64> = (0..12).map(|i| f64::from((i + 2) % 5) - 2.0).collect();
        let shifted: Vec<f64> = noise.iter().map(|v| v + 20.0).collect();
        assert!(mann_whitney_z(&same, &noise).abs() < 1.96);
        assert!(mann_whitney_z(&shifted, &noise) > 1.96);
        assert!(mann_whitney_z(&noise, &shifted) < -1.96);
    }
}

//! `tutti-bench --otel-ab` (issue 24): the per-call echo row with OpenTelemetry export off
//! (no `OTEL_*` variable) and on with an endpoint that never answers, side by side.
//!
//! Two runtimes run at once, the same fixture connector in each; one has
//! `OTEL_EXPORTER_OTLP_ENDPOINT` naming a loopback port whose listener never accepts, so
//! every export of the frontend's and the worker's span and metric export loops waits for
//! its timeout and the span queues fill up and drop. The calls are measured
//! in interleaved rounds (off then on, on then off, …, each block after untimed calls), so both
//! see the same machine; "CPU per call" is the frontend's and the worker's CPU time over the
//! rounds divided by the calls. RSS: VmRSS after the rounds, and the peak while 8, then 64,
//! connections call at once (sampled every 20 ms; after the latency rounds, off then on).

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

/// Rounds of the interleaving (an even number: each side goes first equally often).
const ROUNDS: usize = 10;

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

/// Runs the comparison with `n` timed calls per side and prints both rows.
pub(super) fn run(n: usize, kit: &Kit) -> Result<()> {
    // A listener that never accepts: connections queue in the backlog (then SYNs go
    // unanswered) and no request is ever answered.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").context("binding a silent port")?;
    let endpoint = format!("http://{}", silent.local_addr()?);
    let mut off = Side::start(kit, "export off (no OTEL_* variable)", Vec::new())?;
    let mut on = Side::start(
        kit,
        "export on, endpoint never answers",
        vec![("OTEL_EXPORTER_OTLP_ENDPOINT".into(), endpoint.clone())],
    )?;
    let share = (n / ROUNDS).max(1);
    for round in 0..ROUNDS {
        let (first, second) = if round % 2 == 0 {
            (&mut off, &mut on)
        } else {
            (&mut on, &mut off)
        };
        first.block(share)?;
        second.block(share)?;
    }
    // RSS under load last (so it does not move the latency rows), off then on.
    let per_connection = (n / 50).max(20);
    off.load(per_connection)?;
    on.load(per_connection)?;
    println!(
        "OpenTelemetry export off / on (unanswered endpoint {endpoint}), legacy echo, {ROUNDS} interleaved rounds:"
    );
    for side in [&off, &on] {
        let (latency, rss) = side.report();
        println!("{:<40} {latency}", side.name);
        println!("{:<40} {rss}", "  RSS after the rounds · under load");
    }
    for (what, p) in [("p50", 0.5), ("p99", 0.99)] {
        let (a, b) = (pct(&off.samples, p), pct(&on.samples, p));
        let sign = if b >= a { "+" } else { "−" };
        println!(
            "{:<40} {sign}{}",
            format!("{what} on − off"),
            fmt_us(a.abs_diff(b))
        );
    }
    // Refused from now on: the exporters' last flush at shutdown fails at once.
    drop(silent);
    off.rt.stop();
    on.rt.stop();
    Ok(())
}

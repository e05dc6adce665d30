//! `tutti-bench --otel-ab` (issue 24): the per-call echo row with OpenTelemetry export off
//! (no `OTEL_*` variable) and on with an endpoint that never answers, side by side.
//!
//! Two runtimes run at once, the same fixture connector in each; one has
//! `OTEL_EXPORTER_OTLP_ENDPOINT` naming a loopback port whose listener never accepts, so
//! every export of the frontend's and the worker's batch span processor and periodic metric
//! reader waits for its timeout and the span queues fill up and drop. The calls are measured
//! in interleaved rounds (off then on, on then off, …, each block after untimed calls), so both
//! see the same machine; "CPU per call" is the frontend's and the worker's CPU time over the
//! rounds divided by the calls, and RSS is read after the rounds.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use tutti_tests::{Runtime, RuntimeOptions, fixture_connector};

/// One blocking keep-alive connection to a frontend that sends legacy echo calls.
pub(super) trait Echo {
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

    /// The row: percentiles, CPU per call, RSS of the three processes now.
    fn report(&self) -> String {
        let v = &self.samples;
        let rss = |pid: u32| (self.kit.rss_kib)(pid) as f64 / 1024.0;
        let state = self.rt.state_dir();
        format!(
            "p50 {} · p90 {} · p99 {} (n={}) · CPU/call {} · RSS kernel {:.1} · frontend {:.1} · worker {:.1} MiB",
            fmt_us(pct(v, 0.5)),
            fmt_us(pct(v, 0.9)),
            fmt_us(pct(v, 0.99)),
            v.len(),
            fmt_us(Duration::from_nanos(self.cpu_ns / self.calls.max(1) as u64)),
            rss((self.kit.kernel_pid)(state)),
            rss(self.pids[0]),
            rss(self.pids[1]),
        )
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
    println!(
        "OpenTelemetry export off / on (unanswered endpoint {endpoint}), legacy echo, {ROUNDS} interleaved rounds:"
    );
    for side in [&off, &on] {
        println!("{:<40} {}", side.name, side.report());
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

//! `tutti-bench --scale-only` (and, at 5 connectors × 10 tools, part of `--smoke`): the runtime
//! with a large catalogue, side by side with runtimes of 2 of the same connectors in the same run.
//!
//! The catalogue: N fixture connectors `sc000`… with T tools each (`echo` and `--many T-1`
//! generated ones; 200 × 100 = 20,000 tools), 5 prompts and 5 resources each. Three runtimes:
//! **big** (the catalogue), **small** (its first 2 connectors) and **control** (the same 2, left
//! alone). Big and small are installed, stopped and started again by a fresh `tutti up` on their
//! state dirs, timed to every connector's `commit` record in the audit log. Then, while all are
//! live: an upgrade of one connector, `tools/list` in both eras and in a `--tools search`
//! session, the CLI's `connector available` and `status`, each process's memory
//! (`/proc/PID/smaps_rollup`), and one call's latency in interleaved rounds (big, small,
//! control). Last, the small runtime grows by N−2 connectors and loses them again: after
//! [`Plan::linger`] its memory and call latency are compared with before (the control's rounds
//! beside them show the machine's drift).

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use tutti_tests::{Runtime, RuntimeOptions, fixture_connector, proc_tree};

use super::shared::{Era, Report, fmt_us, p50, ratio, summary};
use super::tool_search::{Connect, Post};

/// Prompts and resources per connector.
const PROMPTS: usize = 5;
const RESOURCES: usize = 5;
/// Connectors of the small and control runtimes.
const BASE: usize = 2;
/// Untimed calls before each block of timed ones.
const WARMUP: usize = 200;

/// Sizes of one run.
pub(super) struct Plan {
    connectors: usize,
    tools: usize,
    list_iters: usize,
    calls: usize,
    cli_runs: usize,
    upgrades: usize,
    /// How long after the last uninstall the small runtime is measured again: past the
    /// runtime's second release of free heap after a run of changes ([`LINGER`]).
    linger: Duration,
}

/// The full run's wait after the uninstalls: the runtime's first release of free heap comes
/// 1 s after the last change, its second [`tutti_os::memory::RELEASE_AGAIN_AFTER`] later; 2 s
/// more for the release itself and the slowest process.
const LINGER: Duration =
    tutti_os::memory::RELEASE_AGAIN_AFTER.saturating_add(Duration::from_secs(3));

impl Plan {
    pub(super) fn new(smoke: bool) -> Plan {
        if smoke {
            Plan {
                connectors: 5,
                tools: 10,
                list_iters: 3,
                calls: 60,
                cli_runs: 2,
                upgrades: 1,
                linger: Duration::from_secs(1),
            }
        } else {
            Plan {
                connectors: 200,
                tools: 100,
                list_iters: 30,
                calls: 3000,
                cli_runs: 10,
                upgrades: 3,
                linger: LINGER,
            }
        }
    }
}

fn key(i: usize) -> String {
    format!("sc{i:03}")
}

/// Connector `key` with `tools` tools (`echo` and generated ones), prompts and resources.
fn manifest(key: &str, tools: usize) -> Value {
    let mut args: Vec<String> = ["--tools", "echo", "--many"].map(str::to_owned).to_vec();
    args.push((tools - 1).to_string());
    args.extend(["--many-prompts".to_owned(), PROMPTS.to_string()]);
    for r in 0..RESOURCES {
        args.extend(["--resource".to_owned(), format!("res://{key}/{r}")]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut m = fixture_connector(key, &args);
    // Thousands of calls in a row: the breaker must never be what a row measures.
    m["circuit"] = json!({"failures": 10_000});
    m
}

/// One runtime of the run: its connectors' keys, a frontend URL and an `all` token.
struct Side {
    rt: Runtime,
    open: Connect,
    keys: Vec<String>,
    url: String,
    token: String,
}

impl Side {
    /// A runtime with connectors `range`, installed and ready.
    fn installed(range: std::ops::Range<usize>, tools: usize, open: Connect) -> Result<Side> {
        let mut rt = Runtime::start(RuntimeOptions::default());
        let keys: Vec<String> = range.map(key).collect();
        for k in &keys {
            rt.install_ok(&manifest(k, tools), &[]);
        }
        wait_ready(&rt, &keys, Duration::from_secs(300))?;
        let url = rt.frontend_url().to_owned();
        let token = rt.issue_token("bench", "scale");
        Ok(Side {
            rt,
            open,
            keys,
            url,
            token,
        })
    }

    /// Stops the runtime and starts it again on the same state dir: the time from spawning
    /// `tutti up` to each connector's `commit` record (all, first, median).
    fn fresh_up(&mut self) -> Result<(Duration, Duration, Duration)> {
        self.rt.stop();
        let audit = tutti_rules::state_dir::layout::audit_log(self.rt.state_dir());
        let offset = std::fs::metadata(&audit).map_or(0, |m| m.len());
        let t0 = SystemTime::now();
        self.rt.restart_unwaited();
        let deadline = Instant::now() + Duration::from_secs(120);
        let commits = loop {
            let commits = commits_since(&audit, offset, &self.keys)?;
            if commits.len() == self.keys.len() {
                break commits;
            }
            if Instant::now() > deadline {
                bail!(
                    "{} of {} connectors committed within 120 s\n{}",
                    commits.len(),
                    self.keys.len(),
                    self.rt.diagnostics()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut after: Vec<Duration> = commits
            .values()
            .map(|t| t.duration_since(t0).unwrap_or_default())
            .collect();
        after.sort();
        wait_ready(&self.rt, &self.keys, Duration::from_secs(60))?;
        self.url = self.rt.status_json()["frontendUrl"]
            .as_str()
            .context("no frontendUrl after the restart")?
            .to_owned();
        // Tokens live in the kernel's memory: the new one issues its own.
        self.token = self.rt.issue_token("bench", "scale");
        Ok((after[after.len() - 1], after[0], after[after.len() / 2]))
    }

    fn connect(&self, token: &str) -> Result<Box<dyn Post>> {
        (self.open)(&self.url, token)
    }
}

/// Waits until `tutti status` shows every one of `keys` ready (one status per look).
fn wait_ready(rt: &Runtime, keys: &[String], within: Duration) -> Result<()> {
    let deadline = Instant::now() + within;
    loop {
        let status = rt.status_json();
        let ready: Vec<&str> = status["connectors"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .filter(|c| c["status"] == "ready")
                    .filter_map(|c| c["key"].as_str())
                    .collect()
            })
            .unwrap_or_default();
        let missing = keys.iter().filter(|k| !ready.contains(&k.as_str())).count();
        if missing == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{missing} connectors not ready within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The first `commit` record of each of `keys` in the audit log past byte `offset`.
fn commits_since(
    audit: &std::path::Path,
    offset: u64,
    keys: &[String],
) -> Result<HashMap<String, SystemTime>> {
    let mut text = String::new();
    if let Ok(mut f) = std::fs::File::open(audit) {
        f.seek(SeekFrom::Start(offset))?;
        f.read_to_string(&mut text)?;
    }
    let mut out = HashMap::new();
    for line in text.lines().filter(|l| l.contains("\"event\":\"commit\"")) {
        let Ok(record) = serde_json::from_str::<Value>(line) else {
            continue; // a line still being written
        };
        let Some(key) = record["connector"].as_str() else {
            continue;
        };
        if keys.iter().any(|k| k == key)
            && !out.contains_key(key)
            && let Some(t) = record_time(&record)
        {
            out.insert(key.to_owned(), t);
        }
    }
    Ok(out)
}

fn record_time(record: &Value) -> Option<SystemTime> {
    let time = chrono::DateTime::parse_from_rfc3339(record["time"].as_str()?).ok()?;
    let since_epoch = Duration::from_micros(u64::try_from(time.timestamp_micros()).ok()?);
    Some(SystemTime::UNIX_EPOCH + since_epoch)
}

/// Every row and target of the scale run.
pub(super) fn rows(smoke: bool, open: Connect) -> Result<Report> {
    let r = &mut Report::default();
    let plan = Plan::new(smoke);
    let n = plan.connectors;
    let load = load_average();
    // The big runtime alone first: its memory is what one runtime of N connectors costs
    // (pages of the programs shared with other runtimes would lower its PSS).
    let mut big = Side::installed(0..n, plan.tools, open)?;
    let big_up = big.fresh_up()?;
    upgrade_rows(r, &mut big, &plan)?;
    let worst = list_rows(r, &big, &plan)?;
    list_target(r, n * plan.tools, worst);
    let big_mem = RuntimeMem::of(&big.rt)?;
    let mut control = Side::installed(0..BASE, plan.tools, open)?;
    let mut small = Side::installed(0..BASE, plan.tools, open)?;
    control.fresh_up()?;
    let small_up = small.fresh_up()?;
    report_up(r, n, &plan, big_up, small_up);
    upgrade_rows(r, &mut small, &plan)?;
    list_rows(r, &small, &plan)?;
    cli_rows(r, &big, &small, &plan)?;
    memory_rows(r, &big_mem, n);
    let before = call_rows(r, &big, &small, &control, &plan)?;
    big.rt.stop();
    drop(big);
    left_behind(r, &mut small, &control, &plan, before)?;
    r.row(
        "scale: load average (1, 5, 15 min) at the start · at the end",
        format!("{load} · {}", load_average()),
    );
    Ok(std::mem::take(r))
}

/// `/proc/loadavg`'s first three fields.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// "p50 1.2 ms · p99 3.4 ms (n=5)" and the p50.
fn ms_summary(v: Vec<Duration>) -> (String, Duration) {
    let n = v.len();
    let (p50, _, p99, _) = summary(v);
    (format!("p50 {} · p99 {} (n={n})", ms(p50), ms(p99)), p50)
}

fn report_up(
    r: &mut Report,
    n: usize,
    plan: &Plan,
    (all, first, median): (Duration, Duration, Duration),
    small: (Duration, Duration, Duration),
) {
    r.row(
        &format!(
            "scale: `tutti up` → all {n} connectors ready ({} tools; installed before)",
            n * plan.tools
        ),
        format!(
            "all {} (first {}, median {}) · {BASE} connectors: all {}",
            secs(all),
            secs(first),
            secs(median),
            secs(small.0)
        ),
    );
    r.target(
        &format!("`tutti up` → all {n} connectors ready ≤ 10 s"),
        secs(all),
        all <= Duration::from_secs(10),
    );
}

/// An upgrade of one connector (a release with one tool fewer, then back) while the others
/// are live: the install command's wall time and the new generation's launch → commit.
fn upgrade_rows(r: &mut Report, side: &mut Side, plan: &Plan) -> Result<()> {
    let (mut wall, mut own) = (Vec::new(), Vec::new());
    let target = side.keys[1].clone();
    for round in 0..plan.upgrades * 2 {
        let tools = plan.tools - usize::from(round % 2 == 0);
        let audit = tutti_rules::state_dir::layout::audit_log(side.rt.state_dir());
        let offset = std::fs::metadata(&audit).map_or(0, |m| m.len());
        let t0 = Instant::now();
        side.rt.install_ok(&manifest(&target, tools), &[]);
        wall.push(t0.elapsed());
        own.push(launch_to_commit(&audit, offset, &target)?);
    }
    wait_ready(&side.rt, &side.keys, Duration::from_secs(60))?;
    let n = side.keys.len();
    r.row(
        &format!("scale: upgrade of one connector, {n} live: `connector install` wall time"),
        ms_summary(wall).0,
    );
    r.row(
        &format!("scale: upgrade of one connector, {n} live: launch → commit (audit)"),
        ms_summary(own).0,
    );
    Ok(())
}

/// The new generation's `launch` → `commit` of `key` in the audit log past `offset`.
fn launch_to_commit(audit: &std::path::Path, offset: u64, key: &str) -> Result<Duration> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut text = String::new();
        let mut f = std::fs::File::open(audit)?;
        f.seek(SeekFrom::Start(offset))?;
        f.read_to_string(&mut text)?;
        let records: Vec<Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .filter(|v: &Value| v["connector"] == key)
            .collect();
        let at = |event: &str| {
            records
                .iter()
                .find(|v| v["event"] == event)
                .and_then(record_time)
        };
        if let (Some(launch), Some(commit)) = (at("launch"), at("commit")) {
            return Ok(commit.duration_since(launch).unwrap_or_default());
        }
        if Instant::now() > deadline {
            bail!("no launch and commit of {key} within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One whole `tools/list` (every page): wall time, bytes of the bodies and tools listed.
fn list_once(http: &mut dyn Post, era: Era) -> Result<(Duration, usize, usize)> {
    let (mut wall, mut bytes, mut tools) = (Duration::ZERO, 0, 0);
    let mut cursor = Value::Null;
    loop {
        let mut params = if cursor.is_null() {
            json!({})
        } else {
            json!({"cursor": cursor})
        };
        let headers = match era {
            Era::Legacy => "MCP-Protocol-Version: 2025-06-18\r\n",
            Era::Modern => {
                params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities":{}});
                "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/list\r\n"
            }
        };
        let body = json!({"jsonrpc":"2.0","id":1,"method":"tools/list","params":params});
        let t = Instant::now();
        let (status, reply) = http.post(headers, &body.to_string())?;
        wall += t.elapsed();
        bytes += reply.len();
        if status != 200 {
            bail!(
                "tools/list: HTTP {status}: {}",
                String::from_utf8_lossy(&reply)
            );
        }
        let reply: Value = serde_json::from_slice(&reply).context("tools/list: not JSON")?;
        tools += reply["result"]["tools"].as_array().map_or(0, Vec::len);
        cursor = reply["result"]["nextCursor"].clone();
        if cursor.is_null() {
            return Ok((wall, bytes, tools));
        }
    }
}

/// `iters` timed listings (after 2 untimed): the summary, its p50, bytes and tools.
fn list_timed(
    side: &Side,
    token: &str,
    era: Era,
    iters: usize,
) -> Result<(String, Duration, usize, usize)> {
    let mut http = side.connect(token)?;
    let (mut times, mut last) = (Vec::new(), (0, 0));
    for i in 0..iters + 2 {
        let (wall, bytes, tools) = list_once(http.as_mut(), era)?;
        if i >= 2 {
            times.push(wall);
        }
        last = (bytes, tools);
    }
    let (s, p) = ms_summary(times);
    Ok((s, p, last.0, last.1))
}

/// tools/list of a runtime's whole catalogue (legacy, modern) and of a `--tools search`
/// session; the slower era's p50.
fn list_rows(r: &mut Report, side: &Side, plan: &Plan) -> Result<Duration> {
    let mut worst = Duration::ZERO;
    let (n, total) = (side.keys.len(), side.keys.len() * plan.tools);
    for era in [Era::Legacy, Era::Modern] {
        let (s, p, bytes, tools) = list_timed(side, &side.token, era, plan.list_iters)?;
        if tools != total {
            bail!("tools/list listed {tools} tools, expected {total}");
        }
        worst = worst.max(p);
        r.row(
            &format!(
                "scale: tools/list, {total} tools ({n} connectors), {}",
                era.name()
            ),
            format!("{s}; {}", size(bytes)),
        );
    }
    let search = side
        .rt
        .issue_token_with("bench", "scale-search", &["--tools", "search"]);
    let (s, _, bytes, tools) = list_timed(side, &search, Era::Legacy, plan.list_iters)?;
    if tools != 2 {
        bail!("a --tools search session listed {tools} tools, expected 2");
    }
    r.row(
        &format!("scale: tools/list, `--tools search` session, {n} connectors, legacy"),
        format!("{s}; {}", size(bytes)),
    );
    Ok(worst)
}

fn list_target(r: &mut Report, total: usize, worst: Duration) {
    r.target(
        &format!("tools/list of {total} tools ≤ 20 ms p50 (slower era)"),
        ms(worst),
        worst <= Duration::from_millis(20),
    );
}

fn size(bytes: usize) -> String {
    if bytes >= 1_000_000 {
        format!("{:.2} MB", bytes as f64 / 1e6)
    } else {
        format!("{:.1} kB", bytes as f64 / 1e3)
    }
}

/// `tutti connector available` and `tutti status` wall times, big and small runtime.
fn cli_rows(r: &mut Report, big: &Side, small: &Side, plan: &Plan) -> Result<()> {
    for args in [&["connector", "available"][..], &["status"][..]] {
        let mut cells = Vec::new();
        for side in [big, small] {
            let mut v = Vec::new();
            for _ in 0..plan.cli_runs + 1 {
                let t = Instant::now();
                let out = side.rt.tutti(args);
                v.push(t.elapsed());
                if !out.status.success() {
                    bail!(
                        "tutti {args:?} failed: {}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
            }
            v.remove(0);
            cells.push(format!(
                "{} connectors p50 {}",
                side.keys.len(),
                ms(p50(&v))
            ));
        }
        r.row(
            &format!("scale: `tutti {}` wall time", args.join(" ")),
            cells.join(" · "),
        );
    }
    Ok(())
}

/// RSS, PSS and USS (KiB) of one process or a sum.
#[derive(Clone, Copy, Default)]
struct Mem {
    rss: u64,
    pss: u64,
    uss: u64,
}

impl Mem {
    fn of(pid: u32) -> Mem {
        let (rss, pss, uss) = proc_tree::smaps_kib(pid).unwrap_or_default();
        Mem { rss, pss, uss }
    }

    fn add(self, o: Mem) -> Mem {
        Mem {
            rss: self.rss + o.rss,
            pss: self.pss + o.pss,
            uss: self.uss + o.uss,
        }
    }

    fn show(self) -> String {
        let mib = |k: u64| k as f64 / 1024.0;
        format!(
            "{:.1} / {:.1} / {:.1} MiB",
            mib(self.rss),
            mib(self.pss),
            mib(self.uss)
        )
    }
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// The memory of a runtime's processes: kernel, frontend, shim manager, each worker.
#[derive(Default)]
struct RuntimeMem {
    kernel: Mem,
    frontend: Mem,
    shims: Mem,
    workers: Vec<Mem>,
}

impl RuntimeMem {
    fn of(rt: &Runtime) -> Result<RuntimeMem> {
        let kernel = rt.pid().context("the runtime is not running")?;
        let mut m = RuntimeMem::default();
        for (name, pid) in proc_tree::runtime_processes(kernel) {
            let mem = Mem::of(pid);
            match name.as_str() {
                "tutti-kernel" => m.kernel = mem,
                "tutti-mcp-frontend" => m.frontend = mem,
                "tutti-shim-manager" => m.shims = mem,
                _ => m.workers.push(mem),
            }
        }
        Ok(m)
    }

    fn workers(&self) -> Mem {
        self.workers.iter().fold(Mem::default(), |a, w| a.add(*w))
    }

    fn total(&self) -> Mem {
        self.kernel
            .add(self.frontend)
            .add(self.shims)
            .add(self.workers())
    }

    fn worker_pss_max(&self) -> u64 {
        self.workers.iter().map(|w| w.pss).max().unwrap_or(0)
    }

    fn show(&self) -> String {
        format!(
            "kernel {} · frontend {} · shim manager {} · {} workers {} (PSS per worker mean {:.2}, max {:.2})",
            self.kernel.show(),
            self.frontend.show(),
            self.shims.show(),
            self.workers.len(),
            self.workers().show(),
            mib(self.workers().pss) / self.workers.len().max(1) as f64,
            mib(self.worker_pss_max()),
        )
    }
}

/// The big runtime's memory, measured while it ran alone, and the targets on it.
fn memory_rows(r: &mut Report, m: &RuntimeMem, n: usize) {
    r.row(
        &format!("scale: memory, {n} connectors, runtime alone (RSS / PSS / USS)"),
        m.show(),
    );
    r.row(
        &format!("scale: memory, {n} connectors, whole runtime (RSS / PSS / USS)"),
        m.total().show(),
    );
    let total = m.total().pss;
    r.target(
        &format!("PSS of the runtime with {n} connectors ≤ 300 MiB"),
        format!("{:.1} MiB", mib(total)),
        total <= 300 * 1024,
    );
    r.target(
        "PSS kernel ≤ 20 MiB",
        format!("{:.1} MiB", mib(m.kernel.pss)),
        m.kernel.pss <= 20 * 1024,
    );
    r.target(
        "PSS frontend ≤ 25 MiB",
        format!("{:.1} MiB", mib(m.frontend.pss)),
        m.frontend.pss <= 25 * 1024,
    );
    r.target(
        "PSS each worker ≤ 1.25 MiB",
        format!("max {:.2} MiB", mib(m.worker_pss_max())),
        m.worker_pss_max() <= 1280,
    );
}

/// `calls` timed echo calls per side in interleaved rounds (each block on a fresh keep-alive
/// connection after [`WARMUP`] untimed calls; the order rotates each round).
fn interleaved(sides: &[&Side], calls: usize) -> Result<Vec<Vec<Duration>>> {
    let k = sides.len();
    let rounds = (2 * k).min(calls.max(1));
    let mut samples = vec![Vec::with_capacity(calls); k];
    for round in 0..rounds {
        let share = calls / rounds + usize::from(round < calls % rounds);
        for i in 0..k {
            let at = (round + i) % k;
            let side = sides[at];
            let tool = format!("{}_echo", side.keys[0]);
            let mut http = side.connect(&side.token)?;
            samples[at].extend(echo_calls(http.as_mut(), &tool, share)?);
        }
    }
    Ok(samples)
}

/// [`WARMUP`] untimed echo calls of `tool`, then `n` timed ones (legacy era).
fn echo_calls(http: &mut dyn Post, tool: &str, n: usize) -> Result<Vec<Duration>> {
    let mut v = Vec::with_capacity(n);
    for id in 0..WARMUP + n {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": {"message": "x"}}})
        .to_string();
        let t = Instant::now();
        let (status, reply) = http.post("MCP-Protocol-Version: 2025-06-18\r\n", &body)?;
        if id >= WARMUP {
            v.push(t.elapsed());
        }
        let text = String::from_utf8_lossy(&reply);
        if status != 200 || !text.contains("\"result\"") || text.contains("\"error\":{") {
            bail!("call failed: HTTP {status}: {text}");
        }
    }
    Ok(v)
}

/// The call p50s of the small and the control runtime before the small one grew.
struct Before {
    small_p50: Duration,
    control_p50: Duration,
}

/// One call's latency with N connectors against 2 (and the control), interleaved.
fn call_rows(
    r: &mut Report,
    big: &Side,
    small: &Side,
    control: &Side,
    plan: &Plan,
) -> Result<Before> {
    let mut v = interleaved(&[big, small, control], plan.calls)?.into_iter();
    let (b, s, c) = (
        v.next().unwrap_or_default(),
        v.next().unwrap_or_default(),
        v.next().unwrap_or_default(),
    );
    let n = big.keys.len();
    let (b50, _, b99, bs) = summary(b);
    let (s50, _, s99, ss) = summary(s);
    let (c50, _, _, cs) = summary(c);
    r.row(
        &format!("scale: tools/call echo, {n} connectors, legacy"),
        bs,
    );
    r.row(
        &format!("scale: tools/call echo, {BASE} connectors, legacy"),
        ss,
    );
    r.row(
        &format!("scale: tools/call echo, {BASE} connectors (control runtime), legacy"),
        cs,
    );
    let change = (ratio(b50, s50) - 1.0) * 100.0;
    r.row(
        &format!("scale: {n} connectors against {BASE} (p50 · p99)"),
        format!(
            "{change:+.1} % ({} → {}) · {:+.1} %",
            fmt_us(s50),
            fmt_us(b50),
            (ratio(b99, s99) - 1.0) * 100.0
        ),
    );
    r.target(
        &format!("a call with {n} connectors within 5 % of {BASE} connectors' p50"),
        format!("{change:+.1} %"),
        change <= 5.0,
    );
    Ok(Before {
        small_p50: s50,
        control_p50: c50,
    })
}

/// The small runtime grows by N−2 connectors and loses them again; after [`Plan::linger`]
/// its memory and call latency against before.
fn left_behind(
    r: &mut Report,
    small: &mut Side,
    control: &Side,
    plan: &Plan,
    before: Before,
) -> Result<()> {
    let n = plan.connectors;
    // Measured beside the control runtime, as after: the PSS of shared pages depends on
    // which other processes map them.
    let mem = RuntimeMem::of(&small.rt)?;
    r.row(
        &format!("scale: memory, {BASE} connectors, beside the control runtime (RSS / PSS / USS)"),
        mem.show(),
    );
    let extra: Vec<String> = (BASE..n).map(key).collect();
    for k in &extra {
        small.rt.install_ok(&manifest(k, plan.tools), &[]);
    }
    wait_ready(&small.rt, &extra, Duration::from_secs(300))?;
    // Every page of the whole catalogue once, as an agent would.
    list_once(small.connect(&small.token)?.as_mut(), Era::Legacy)?;
    let grown = RuntimeMem::of(&small.rt)?;
    for k in &extra {
        small.rt.tutti_ok(&["connector", "uninstall", k]);
    }
    std::thread::sleep(plan.linger);
    let mut v = interleaved(&[small, control], plan.calls)?.into_iter();
    let (s50, c50) = (
        p50(&v.next().unwrap_or_default()),
        p50(&v.next().unwrap_or_default()),
    );
    let after = RuntimeMem::of(&small.rt)?;
    report_left_behind(r, plan, (&before, &mem), &grown, &after, (s50, c50));
    Ok(())
}

fn report_left_behind(
    r: &mut Report,
    plan: &Plan,
    (before, mem): (&Before, &RuntimeMem),
    grown: &RuntimeMem,
    after: &RuntimeMem,
    (s50, c50): (Duration, Duration),
) {
    let more = plan.connectors - BASE;
    let (pss, was) = (after.total().pss, mem.total().pss);
    r.row(
        &format!("scale: runtime PSS, {BASE} connectors: before · with {more} more · after uninstalling them"),
        format!(
            "{:.1} · {:.1} · {:.1} MiB (kernel {:.1} → {:.1}, frontend {:.1} → {:.1}, shim manager {:.1} → {:.1})",
            mib(was),
            mib(grown.total().pss),
            mib(pss),
            mib(mem.kernel.pss),
            mib(after.kernel.pss),
            mib(mem.frontend.pss),
            mib(after.frontend.pss),
            mib(mem.shims.pss),
            mib(after.shims.pss),
        ),
    );
    r.row(
        &format!("scale: call p50, {BASE} connectors, before · after (control runtime beside it)"),
        format!(
            "{} → {} (control {} → {})",
            fmt_us(before.small_p50),
            fmt_us(s50),
            fmt_us(before.control_p50),
            fmt_us(c50)
        ),
    );
    let grew = (pss as f64 / was.max(1) as f64 - 1.0) * 100.0;
    r.target(
        &format!("after installing and uninstalling {more}: runtime PSS within 10 % of before"),
        format!("{grew:+.1} %"),
        grew <= 10.0,
    );
    // The machine drifts between the two measurements (other work, placement): the small
    // runtime's p50 is judged as a ratio to the control's measured in the same rounds.
    let slower = (ratio(s50, before.small_p50) - 1.0) * 100.0;
    let drift = ratio(c50, before.control_p50);
    let corrected = (ratio(s50, before.small_p50) / drift - 1.0) * 100.0;
    r.target(
        &format!(
            "after installing and uninstalling {more}: call p50 within 10 % of before (against the control)"
        ),
        format!("{corrected:+.1} % (raw {slower:+.1} %, control {:+.1} %)", (drift - 1.0) * 100.0),
        corrected <= 10.0,
    );
}

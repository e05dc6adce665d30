//! `tutti-bench`: the runtime's cost, side by side with a baseline in the same run.
//!
//! `cargo build --release --workspace --bins && scripts/install-test-tools &&
//!  TUTTI_BIN_DIR=$PWD/target/release target/release/tutti-bench --write docs/BENCHMARKS.md`
//! (`--smoke`: a few iterations, only checks that every section works; CI runs that).
//! Compares the runtime with a direct stdio call, the architectural floor
//! (`tutti-floor-front` + `tutti-floor-worker`, see `tutti_tests::floor`) on its blocking
//! stack and on the runtime's (tokio + axum, serde_json), a trivial HTTP server and the peers
//! (mcp-hub 4.2.1, supergateway 4.0.0, ContextForge 1.0.7.post20260921;
//! `scripts/install-test-tools` installs them; `TUTTI_MCP_HUB_DIR` points at another mcp-hub
//! package directory; 1MCP is reported as not measured, its package cannot be installed).

#[cfg(unix)]
mod bench {
    mod bridge;
    mod contextforge;
    mod idle;
    mod market;
    mod otel_ab;
    mod peer_costs;
    mod scale;
    mod shared;
    mod systems;
    mod tool_search;
    use std::io::{BufRead, BufReader, Write};
    use std::path::PathBuf;
    use std::process::{Child, Command, Stdio};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{Duration, Instant, SystemTime};

    use anyhow::{Context, Result, bail};
    use clap::Parser;
    use serde_json::{Value, json};
    use tutti_tests::floor::Stack;
    use tutti_tests::{Runtime, RuntimeOptions, fixture_bin, fixture_connector};

    use self::shared::{Era, Report, fmt_us, p50, ratio, summary};

    #[derive(Parser)]
    #[command(name = "tutti-bench")]
    struct Args {
        /// A few iterations per section: checks the benchmark works; targets are not judged.
        #[arg(long)]
        smoke: bool,
        /// Also write the table (with command, machine and date) to this Markdown file.
        #[arg(long)]
        write: Option<PathBuf>,
        /// Only the per-call latency rows (direct vs runtime, both eras, the floors and the
        /// peers, with the memory and idle wake-up rows of the runtime and the peers).
        #[arg(long, conflicts_with = "write")]
        latency_only: bool,
        /// Calls per latency row (default 5,000); raise it to keep the runtime busy long
        /// enough to attach `perf` or `strace` to its processes.
        #[arg(long, conflicts_with = "write")]
        calls: Option<usize>,
        /// Only the tool-search rows: tools/list bytes with `--tools all` vs
        /// `search` at 20, 100, 400 and 2,000 tools, and tutti_search_tools latency.
        #[arg(long, conflicts_with_all = ["write", "latency_only"])]
        tool_search: bool,
        /// Only the echo row with OpenTelemetry export off and on (an endpoint that never
        /// answers), interleaved in one run; `--calls` per side.
        #[arg(long, conflicts_with_all = ["write", "latency_only", "tool_search"])]
        otel_ab: bool,
        /// Only the 1 MiB result rows (direct, runtime, floor), `--calls` per row
        /// (default 300), for quick A/B runs of the big-result path.
        #[arg(long, conflicts_with_all = ["write", "latency_only", "tool_search", "otel_ab"])]
        big_only: bool,
        /// Only the idle wake-up rows (2 and 50 connectors; `--smoke`: 2 and 5).
        #[arg(long, conflicts_with_all = ["write", "latency_only", "tool_search", "otel_ab", "big_only"])]
        idle_only: bool,
        /// Only the market rows: start to ready of a pinned market release against the same
        /// server run by `npx` (7 interleaved rounds; `--smoke`: 1), and both with npm's
        /// network unreachable. Needs the network (npm). Not part of the `--smoke` run: its
        /// install and npx's first download would almost double that run.
        #[arg(long, conflicts_with_all = ["write", "latency_only", "tool_search", "otel_ab", "big_only", "idle_only"])]
        market_only: bool,
        /// Only the scale rows: 200 connectors × 100 tools against 2 connectors (start to
        /// ready, an upgrade, tools/list, the CLI, memory, call latency, memory left behind
        /// after installing and uninstalling 198); `--smoke`: 5 × 10.
        #[arg(long, conflicts_with_all = ["write", "latency_only", "tool_search", "otel_ab", "big_only", "idle_only", "market_only"])]
        scale_only: bool,
    }

    struct Scale {
        calls: usize,
        big_calls: usize,
        load_secs: u64,
        connectors: usize,
        list_iters: usize,
        kills: usize,
    }

    #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    pub async fn main() -> Result<()> {
        let args = Args::parse();
        if args.tool_search {
            // Blocking work (the runtime harness, a blocking HTTP client): off the runtime.
            let smoke = args.smoke;
            tokio::task::spawn_blocking(move || tool_search::run(smoke, connect_raw)).await??;
            return Ok(());
        }
        if args.otel_ab {
            let n = args.calls.unwrap_or(if args.smoke { 50 } else { 5000 });
            return tokio::task::block_in_place(|| otel_ab::run(n, &otel_kit()));
        }
        if args.idle_only {
            let mut r = Report::default();
            idle_rows(&mut r, args.smoke)?;
            print_targets(&r, args.smoke);
            return Ok(());
        }
        if args.big_only {
            return big_only(args.calls.unwrap_or(if args.smoke { 5 } else { 300 }));
        }
        if args.market_only {
            return market_rows(&mut Report::default(), args.smoke);
        }
        if args.scale_only {
            return scale_only(args.smoke);
        }
        let scale = scale(&args);
        let mut r = Report::default();

        let up_ready = up_ready_times()?;
        let (mut rt, url, token, client) = start_runtime()?;
        report_up(&mut r, &up_ready);

        // 1. tools/call echo: the direct baseline (raw JSON-RPC over the fixture's stdio), the
        // runtime (a minimal blocking HTTP/1.1 keep-alive client, the HTTP counterpart of the
        // direct client, so the difference is the runtime's cost and not a client library's)
        // in both eras and with a client that asks for progress (`_meta.progressToken`, as
        // rmcp-based agents do on every request: an event-stream answer over the worker's
        // streaming call), the architectural floor, a trivial HTTP server and the peers, all
        // in the same interleaved rounds: on a small VM the scheduler's placement of the
        // processes drifts over seconds and moved back-to-back rows by ±30 µs.
        echo_section(&mut r, &rt, &url, &token, scale.calls, args.smoke).await?;
        reqwest_row(&mut r, &client, scale.calls).await?;
        if args.latency_only {
            big_result_rows(&mut r, &url, &token, scale.big_calls)?;
            rt.stop();
            return Ok(());
        }

        load_rows(&mut r, &client, &rt, scale.load_secs).await;
        change_rows(&mut r, &client, &mut rt, scale.kills).await?;
        list_rows(&mut r, &client, &mut rt, &scale, args.smoke).await?;
        // After the memory rows: see `big_result_rows`.
        big_result_rows(&mut r, &url, &token, scale.big_calls)?;

        rt.stop();
        // On fresh runtimes, once the measured one is gone.
        fresh_runtime_rows(&mut r, args.smoke)?;
        print_targets(&r, args.smoke);
        if guest_halt_polling_off() {
            println!(
                "\nNote: guest halt polling is off here (guest_halt_poll_ns 0): every process hop \
                 wakes a halted vCPU; see docs/PERFORMANCE.md, \"The frontend optimised for speed\"."
            );
        }
        if let Some(path) = args.write {
            write_doc(&path, &r, args.smoke)?;
        }
        Ok(())
    }

    /// The rows measured on runtimes of their own: idle wake-ups, and the scale rows (200
    /// connectors × 100 tools; 5 × 10 in a smoke run).
    fn fresh_runtime_rows(r: &mut Report, smoke: bool) -> Result<()> {
        idle_rows(r, smoke)?;
        scale_rows(r, smoke)
    }

    /// `--scale-only`: the scale rows and their targets.
    fn scale_only(smoke: bool) -> Result<()> {
        let mut r = Report::default();
        scale_rows(&mut r, smoke)?;
        print_targets(&r, smoke);
        Ok(())
    }

    /// The scale rows (blocking: runtimes started and stopped; printed as measured).
    fn scale_rows(r: &mut Report, smoke: bool) -> Result<()> {
        let out: Report = tokio::task::block_in_place(|| scale::rows(smoke, connect_raw))?;
        r.rows.extend(out.rows);
        r.targets.extend(out.targets);
        Ok(())
    }

    /// The idle wake-up rows and their target (blocking: fresh runtimes left idle).
    fn idle_rows(r: &mut Report, smoke: bool) -> Result<()> {
        let idle = tokio::task::block_in_place(|| idle::rows(smoke))?;
        for (what, value) in idle.rows {
            r.row(&what, value);
        }
        let (what, measured, met) = idle.target;
        r.target(&what, measured, met);
        Ok(())
    }

    /// The market rows (blocking: runtimes started and stopped): 1 round (`smoke`) or 7.
    fn market_rows(r: &mut Report, smoke: bool) -> Result<()> {
        let rounds = if smoke { 1 } else { 7 };
        for (what, value) in tokio::task::block_in_place(|| market::rows(rounds))? {
            r.row(&what, value);
        }
        Ok(())
    }

    /// Iterations per section: a few (`--smoke`) or the full run; `--calls` per latency row.
    fn scale(args: &Args) -> Scale {
        let scale = if args.smoke {
            Scale {
                calls: 50,
                big_calls: 5,
                load_secs: 1,
                connectors: 3,
                list_iters: 20,
                kills: 2,
            }
        } else {
            Scale {
                calls: 5000,
                big_calls: 300,
                load_secs: 5,
                connectors: 50,
                list_iters: 300,
                kills: 10,
            }
        };
        Scale {
            calls: args.calls.unwrap_or(scale.calls),
            ..scale
        }
    }

    /// `tutti up` to ready, [`UP_STARTS`] times, sorted.
    fn up_ready_times() -> Result<Vec<Duration>> {
        // `tutti up` to ready (a fresh state directory each time; measured before the runtime
        // below). One untimed start first: the first start after a build reads the binaries
        // from disk (one run read 393 ms against ~50 ms for every start after it).
        time_up_to_ready()?;
        let mut up_ready = Vec::new();
        for _ in 0..UP_STARTS {
            up_ready.push(time_up_to_ready()?);
        }
        up_ready.sort();
        Ok(up_ready)
    }

    /// The runtime measured, with the bench connector ready: it, its frontend's URL, a token
    /// and an async client.
    fn start_runtime() -> Result<(Runtime, String, String, Client)> {
        let mut rt = Runtime::start(RuntimeOptions::default());
        let mut manifest = fixture_connector("bench", &["--tools", BENCH_TOOLS]);
        // The fault rows SIGKILL the worker on purpose, and each kill fails the calls in
        // flight as `unavailable`: with SPEC §12's default breaker (5 within 30 s) the
        // circuit would open and refuse the rows measured after them.
        manifest["circuit"] = json!({"failures": 10_000});
        rt.install_ok(&manifest, &[]);
        rt.wait_status("bench", "ready", Duration::from_secs(20));
        let token = rt.issue_token("bench", "s1");
        let url = rt.frontend_url().to_string();
        let client = Client::new(&url, &token)?;
        Ok((rt, url, token, client))
    }

    /// The `tutti up` to ready row.
    fn report_up(r: &mut Report, up_ready: &[Duration]) {
        r.row(
            "`tutti up` to ready (banner printed)",
            format!(
                "p50 {:.0} ms · max {:.0} ms (n={})",
                up_ready[up_ready.len() / 2].as_secs_f64() * 1e3,
                up_ready.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
                up_ready.len()
            ),
        );
    }

    /// The same calls with an ordinary async client (reqwest on tokio), for comparison:
    /// what an agent's HTTP stack adds on top.
    async fn reqwest_row(r: &mut Report, client: &Client, calls: usize) -> Result<()> {
        for _ in 0..WARMUP_CALLS {
            client
                .call(Era::Legacy, "bench_echo", json!({"message": "x"}))
                .await?;
        }
        let mut v = Vec::with_capacity(calls);
        for _ in 0..calls {
            let t = Instant::now();
            client
                .call(Era::Legacy, "bench_echo", json!({"message": "x"}))
                .await?;
            v.push(t.elapsed());
        }
        let (_, _, _, s) = summary(v);
        r.row("tools/call echo via runtime, legacy, reqwest client", s);
        Ok(())
    }

    /// Throughput with 8 and 64 concurrent clients, and the processes' RSS under that load.
    async fn load_rows(r: &mut Report, client: &Client, rt: &Runtime, load_secs: u64) {
        // 2. Throughput with 8 and 64 concurrent clients; RSS sampled under load.
        let mut rss_peak = RssPeak::default();
        for conc in [8usize, 64] {
            let (ok, err, lat) = load(
                client,
                conc,
                Duration::from_secs(load_secs),
                &mut rss_peak,
                rt.state_dir(),
            )
            .await;
            let (_, _, _, s) = summary(lat);
            let rate = ok as f64 / load_secs as f64;
            r.row(
                &format!("throughput, {conc} concurrent clients (legacy)"),
                format!("{rate:.0} calls/s, {err} errors · {s}"),
            );
            // Not lower than the last table before it (same VM).
            let before = if conc == 8 { 9779.0 } else { 12566.0 };
            r.target(
                &format!("throughput at {conc} clients ≥ {before:.0} calls/s, 0 errors"),
                format!("{rate:.0} calls/s, {err} errors"),
                rate >= before && err == 0,
            );
        }
        r.row(
            "RSS under load: kernel",
            format!("{:.1} MiB", rss_peak.kernel as f64 / 1024.0),
        );
        r.row(
            "RSS under load: frontend",
            format!("{:.1} MiB", rss_peak.frontend as f64 / 1024.0),
        );
        r.row(
            "RSS under load: worker (max)",
            format!("{:.1} MiB", rss_peak.worker as f64 / 1024.0),
        );
        r.target(
            "RSS worker ≤ 8 MiB",
            format!("{:.1} MiB", rss_peak.worker as f64 / 1024.0),
            rss_peak.worker <= 8 * 1024,
        );
        r.target(
            "RSS kernel ≤ 12 MiB",
            format!("{:.1} MiB", rss_peak.kernel as f64 / 1024.0),
            rss_peak.kernel <= 12 * 1024,
        );
        r.target(
            "RSS frontend ≤ 16 MiB",
            format!("{:.1} MiB", rss_peak.frontend as f64 / 1024.0),
            rss_peak.frontend <= 16 * 1024,
        );
    }

    /// How fast a tool-list change reaches a client: a worker's crash and a commit.
    async fn change_rows(
        r: &mut Report,
        client: &Client,
        rt: &mut Runtime,
        kills: usize,
    ) -> Result<()> {
        // 5 (and 4 for a fence). Crash: worker SIGKILL → first fenced error at a caller, →
        // list_changed at a listener, → tools back.
        let mut to_error = Vec::new();
        let mut to_event = Vec::new();
        let mut to_back = Vec::new();
        for _ in 0..kills {
            let (e, ev, back) = crash_once(client, rt).await?;
            to_error.push(e);
            to_event.push(ev);
            to_back.push(back);
        }
        let (_, _, e99, s) = summary(to_error.clone());
        r.row("worker SIGKILL → first fenced error at a caller", s);
        let (_, _, ev99, s2) = summary(to_event);
        r.row(
            "fence (worker SIGKILL) → tools/list_changed at a listener",
            s2,
        );
        let (_, _, _, s3) = summary(to_back);
        r.row("worker SIGKILL → its tools listed again", s3);

        // 4. list_changed: a commit of a new generation → the event at a listener. Each round
        // upgrades a 40-tool connector to a release with another tool set.
        let mut to_commit_event = Vec::new();
        for round in 0..kills {
            let many = if round % 2 == 0 { "39" } else { "38" };
            to_commit_event.push(commit_to_event(client, rt, many).await?);
        }
        rt.tutti_ok(&["connector", "uninstall", "lc"]);
        let (_, _, commit99, s4) = summary(to_commit_event);
        r.row(
            "commit (new generation) → tools/list_changed at a listener",
            s4,
        );
        let mut sorted = to_error;
        sorted.sort();
        let worst = sorted.last().copied().unwrap_or_default();
        r.target(
            "crash → first fenced error ≤ 50 ms",
            fmt_us(worst),
            e99 <= Duration::from_millis(50),
        );
        // Judged on both ways a tool list changes: a commit and a fence.
        let changed99 = ev99.max(commit99);
        r.target(
            "list_changed ≤ 50 ms p99",
            fmt_us(changed99),
            changed99 <= Duration::from_millis(50),
        );
        Ok(())
    }

    /// tools/list of many connectors × 40 tools, and the memory of their idle workers.
    async fn list_rows(
        r: &mut Report,
        client: &Client,
        rt: &mut Runtime,
        scale: &Scale,
        smoke: bool,
    ) -> Result<()> {
        // 3. tools/list of N connectors × 40 tools.
        for i in 0..scale.connectors {
            let key = format!("m{i:02}");
            rt.install_ok(
                &fixture_connector(&key, &["--tools", "echo", "--many", "39"]),
                &[],
            );
        }
        for i in 0..scale.connectors {
            rt.wait_status(&format!("m{i:02}"), "ready", Duration::from_secs(60));
        }
        // What each additional connector costs: the workers share their program's pages, so
        // VmRSS counts those in full in every worker while PSS divides them and USS leaves
        // them out (the RSS target above is judged on VmRSS).
        let workers = worker_pids(rt.state_dir());
        let mem: Vec<(u64, u64, u64)> = workers.iter().filter_map(|&w| smaps_kib(w)).collect();
        if !mem.is_empty() {
            let n = mem.len() as f64;
            let avg =
                |f: fn(&(u64, u64, u64)) -> u64| mem.iter().map(f).sum::<u64>() as f64 / n / 1024.0;
            r.row(
                &format!(
                    "memory per worker, {} workers idle (RSS / PSS / USS)",
                    mem.len()
                ),
                format!(
                    "{:.1} / {:.2} / {:.2} MiB",
                    avg(|m| m.0),
                    avg(|m| m.1),
                    avg(|m| m.2)
                ),
            );
        }
        let expected = scale.connectors * 40 + BENCH_TOOLS.split(',').count();
        let mut v = Vec::new();
        for i in 0..scale.list_iters + 10 {
            let (n, wire) = client.list_all(Era::Legacy).await?;
            if i >= 10 {
                v.push(wire);
            }
            if n != expected {
                bail!("tools/list returned {n} tools, expected {expected}");
            }
        }
        let (l50, _, _, s) = summary(v);
        r.row(
            &format!("tools/list, {} tools (all pages, legacy)", expected),
            s,
        );
        if !smoke {
            r.target(
                "tools/list of 2,000 tools ≤ 2 ms p50",
                fmt_us(l50),
                l50 <= Duration::from_millis(2),
            );
        }
        Ok(())
    }

    /// The targets, judged (or not, in a smoke run).
    fn print_targets(r: &Report, smoke: bool) {
        println!(
            "\nTargets{}:",
            if smoke {
                " (smoke run: not judged)"
            } else {
                ""
            }
        );
        for (what, measured, met) in &r.targets {
            let verdict = if smoke {
                "-"
            } else if *met {
                "met"
            } else {
                "MISSED"
            };
            println!("  {what:<40} {measured:>12}  {verdict}");
        }
    }

    // === direct baseline ===

    /// Tools of the benchmark's connector (`bench_<tool>`).
    const BENCH_TOOLS: &str = "echo,sleep,whoami,big";

    /// Untimed calls before each block of timed ones: long enough for the scheduler to settle
    /// the processes after the previous block's (see `measure_echo_rows`).
    const WARMUP_CALLS: usize = 200;
    /// What a row of the interleaved echo rounds calls.
    enum Via {
        /// The runtime's frontend, in an era, with or without a `progressToken`.
        Runtime(Era, bool),
        /// A system answering MCP over HTTP/1.1 on `url` (stateful peers: with a session;
        /// with a bearer `token` unless empty), calling `tool`.
        Http {
            url: String,
            session: Option<String>,
            tool: &'static str,
            token: String,
        },
        /// mcp-hub's HTTP+SSE transport.
        Hub(systems::SseClient),
        /// Another runtime's frontend (the data-plane rows), legacy era.
        RuntimeAt { url: String, token: String },
        /// The runtime through its stdio bridge (`tutti mcp-stdio`), legacy era.
        Bridge(bridge::Bridge),
    }

    /// Which system a row measures (its CPU counters are read per system).
    #[derive(Clone, Copy, PartialEq, Eq)]
    enum System {
        Runtime,
        /// A runtime started with `TUTTI_DATA_PLANE=grpc`.
        RuntimeGrpc,
        /// A runtime started with `TUTTI_DATA_PLANE=frames`.
        RuntimeFrames,
        Floor,
        FloorVerify,
        /// The floor on the runtime's stack (`--stack tokio`).
        FloorStack,
        Trivial,
        Hub,
        Gateway,
        /// IBM ContextForge's gateway with its stdio bridge (`contextforge`).
        ContextForge,
        /// 1MCP (`@1mcp/agent`): not measured, see [`ONE_MCP_WHY`].
        OneMcp,
        /// The runtime through `tutti mcp-stdio` (CPU: the bridge process alone).
        Bridge,
    }

    /// Why 1MCP has no row (reported as "not measured"; a smoke run does not fail for it).
    const ONE_MCP_WHY: &str = "@1mcp/agent cannot be installed: the npm registry the project's \
        machines reach answers 404 Not Found for it (`npm view @1mcp/agent`), so \
        scripts/install-test-tools does not install it";

    /// ContextForge's untimed calls per block: about a second at its latency, as long as the
    /// other rows' 200 (each of its calls takes tens of ms where theirs take hundreds of µs).
    const CONTEXTFORGE_WARMUP: usize = 20;

    impl System {
        fn label(self) -> &'static str {
            match self {
                System::Runtime => "tools/call echo via runtime",
                System::RuntimeGrpc => "tools/call echo via runtime (gRPC hop), legacy",
                System::RuntimeFrames => "tools/call echo via runtime (frames), legacy",
                System::Floor => {
                    "tools/call echo via the architectural floor (HTTP/1.1 → UDS → stdio)"
                }
                System::FloorVerify => {
                    "tools/call echo via the floor with a token check hop (a third process)"
                }
                System::FloorStack => {
                    "tools/call echo via the floor on the runtime's stack (tokio + axum, serde_json)"
                }
                System::Trivial => "tools/call, trivial HTTP server (canned answer, no upstream)",
                System::Hub => "tools/call echo via mcp-hub 4.2.1 (peer, HTTP+SSE)",
                System::Gateway => "tools/call echo via supergateway 4.0.0 (peer)",
                System::ContextForge => {
                    "tools/call echo via ContextForge 1.0.7.post20260921 (peer, Streamable HTTP)"
                }
                System::OneMcp => "tools/call echo via 1MCP (peer)",
                System::Bridge => "tools/call echo via the stdio bridge (tutti mcp-stdio), legacy",
            }
        }

        /// A peer: its CPU is read per thread from `/proc/PID/task/*/schedstat` over its
        /// whole process tree (see `peer_costs`).
        fn is_peer(self) -> bool {
            matches!(
                self,
                System::Hub | System::Gateway | System::ContextForge | System::OneMcp
            )
        }

        fn short(self) -> &'static str {
            match self {
                System::Runtime => "runtime",
                System::RuntimeGrpc => "runtime (gRPC hop)",
                System::RuntimeFrames => "runtime (frames)",
                System::Floor => "floor",
                System::FloorVerify => "floor + check hop",
                System::FloorStack => "floor on the stack",
                System::Trivial => "trivial",
                System::Hub => "mcp-hub",
                System::Gateway => "supergateway",
                System::ContextForge => "ContextForge",
                System::OneMcp => "1MCP",
                System::Bridge => "stdio bridge",
            }
        }
    }

    /// One row of the interleaved echo rounds.
    struct EchoRow {
        system: System,
        via: Via,
        samples: Vec<Duration>,
        /// Calls made through this row, untimed ones included.
        calls: usize,
        /// Untimed calls before each block.
        warmup: usize,
    }

    impl EchoRow {
        fn new(system: System, via: Via, n: usize) -> EchoRow {
            EchoRow {
                system,
                via,
                samples: Vec::with_capacity(n),
                calls: 0,
                warmup: WARMUP_CALLS,
            }
        }

        /// With `warmup` untimed calls before each block instead of [`WARMUP_CALLS`].
        fn with_warmup(self, warmup: usize) -> EchoRow {
            EchoRow { warmup, ..self }
        }

        /// One block: a fresh connection (Node peers close connections idle for 5 s), then
        /// the row's untimed calls and `share` timed ones.
        fn block(&mut self, url: &str, token: &str, share: usize) -> Result<()> {
            let echo = json!({"message": "x"});
            let warmup = self.warmup;
            let v = match &mut self.via {
                Via::Runtime(era, progress) => {
                    let mut c = RawHttp::connect(url, token, None)?;
                    c.progress = *progress;
                    c.tool_calls_after(*era, "bench_echo", &echo, share, warmup)?
                }
                Via::Http {
                    url,
                    session,
                    tool,
                    token,
                } => RawHttp::connect(url, token, session.as_deref())?.tool_calls_after(
                    Era::Legacy,
                    tool,
                    &echo,
                    share,
                    warmup,
                )?,
                Via::Hub(c) => c.tool_calls("echo__echo", &echo.to_string(), share, warmup)?,
                Via::RuntimeAt { url, token } => RawHttp::connect(url, token, None)?
                    .tool_calls_after(Era::Legacy, "bench_echo", &echo, share, warmup)?,
                Via::Bridge(b) => b.tool_calls("bench_echo", &echo, share, warmup)?,
            };
            self.samples.extend(v);
            self.calls += share + warmup;
            Ok(())
        }
    }

    /// The echo rows' samples, from interleaved rounds, and each system's CPU time per call.
    struct EchoRows {
        direct: Vec<Duration>,
        rows: Vec<EchoRow>,
        /// CPU time per call of each system's processes (`None`: a counter was unreadable).
        cpu: Vec<(System, Vec<Option<Duration>>)>,
        /// Each system's processes, in the order of `cpu`.
        pids: Vec<(System, Vec<u32>)>,
    }

    impl EchoRows {
        /// The samples of the first row of `system` matching `pick`.
        fn take(&mut self, pick: impl Fn(&EchoRow) -> bool) -> Option<Vec<Duration>> {
            self.rows
                .iter_mut()
                .find(|r| pick(r))
                .map(|r| std::mem::take(&mut r.samples))
        }

        /// Per-process CPU per call of `system`, and their sum (`None` if any is unknown).
        fn cpu(&self, system: System) -> (Vec<Option<Duration>>, Option<Duration>) {
            let per = self
                .cpu
                .iter()
                .find(|c| c.0 == system)
                .map(|c| c.1.clone())
                .unwrap_or_default();
            let total = per.iter().copied().sum::<Option<Duration>>();
            (per, total)
        }
    }

    /// `n` timed echo calls per row, in as many rounds as there are rows; each round runs
    /// the direct block first, then every row once ([`WARMUP_CALLS`] untimed calls, then its
    /// share), starting one row later than the round before, so each row comes right after
    /// the direct block, and in every other place, equally often. `pids`: each system's
    /// processes, whose CPU time over the rounds is divided by that system's calls.
    fn measure_echo_rows(
        url: &str,
        token: &str,
        n: usize,
        mut rows: Vec<EchoRow>,
        pids: &[(System, Vec<u32>)],
    ) -> Result<EchoRows> {
        let mut direct = Direct::start()?;
        let echo = json!({"message": "x"});
        let rounds = rows.len().max(1).min(n.max(1));
        let mut direct_samples = Vec::with_capacity(n);
        let before: Vec<Vec<Option<u64>>> = pids
            .iter()
            .map(|(s, p)| p.iter().map(|&p| cpu_counter(*s, p)).collect())
            .collect();
        tokio::task::block_in_place(|| -> Result<()> {
            for round in 0..rounds {
                // This round's share: the remainder goes to the first rounds.
                let share = n / rounds + usize::from(round < n % rounds);
                direct_samples.extend(direct.calls("echo", &echo, share)?);
                let k = rows.len();
                for i in 0..k {
                    rows[(round + i) % k].block(url, token, share)?;
                }
            }
            Ok(())
        })?;
        let cpu = pids
            .iter()
            .zip(before)
            .map(|((system, p), before)| {
                let calls: usize = rows
                    .iter()
                    .filter(|r| r.system == *system)
                    .map(|r| r.calls)
                    .sum();
                let per_call = p
                    .iter()
                    .zip(before)
                    .map(|(&pid, b)| {
                        let spent = cpu_counter(*system, pid)?.checked_sub(b?)?;
                        Some(Duration::from_nanos(spent / calls.max(1) as u64))
                    })
                    .collect();
                (*system, per_call)
            })
            .collect();
        Ok(EchoRows {
            direct: direct_samples,
            rows,
            cpu,
            pids: pids.to_vec(),
        })
    }
    /// The systems compared with the runtime in the echo rounds. The floor and the trivial
    /// server are this crate's binaries and must start; a peer that cannot start is reported
    /// as "not measured" with the reason (and fails a `--smoke` run, CI installs the peers,
    /// except 1MCP, which cannot be installed: [`ONE_MCP_WHY`]).
    struct Peers {
        floor: systems::Floor,
        floor_verify: systems::Floor,
        floor_stack: systems::Floor,
        trivial: (systems::Proc, String),
        hub: Result<(systems::Hub, systems::SseClient)>,
        gateway: Result<(systems::Proc, String, String)>,
        contextforge: Result<contextforge::ContextForge>,
    }

    async fn start_peers() -> Result<Peers> {
        // ContextForge starts slowest (it migrates a fresh database): in the background.
        let ports = (free_port()?, free_port()?);
        let contextforge = tokio::spawn(contextforge::start(fixture_bin(), ports));
        let start =
            |verify, stack| systems::Floor::start(tutti_tests::bin, &fixture_bin(), verify, stack);
        let floor = start(false, Stack::Blocking)?;
        let floor_verify = start(true, Stack::Blocking)?;
        let floor_stack = start(false, Stack::Tokio)?;
        let trivial = systems::start_front(tutti_tests::bin, &["--trivial"])?;
        let hub = tokio::task::block_in_place(|| -> Result<_> {
            let node =
                tutti_tests::node22().context("Node 22 missing (scripts/install-test-tools)")?;
            let package = mcp_hub_dir().with_context(|| {
                format!("{} missing (scripts/install-test-tools)", systems::MCP_HUB)
            })?;
            let hub = systems::Hub::start(&node, &package, &fixture_bin(), free_port()?)?;
            let client = hub.client()?;
            Ok((hub, client))
        });
        let gateway = start_gateway().await;
        let contextforge = contextforge.await?;
        Ok(Peers {
            floor,
            floor_verify,
            floor_stack,
            trivial,
            hub,
            gateway,
            contextforge,
        })
    }

    /// mcp-hub's package directory: `$TUTTI_MCP_HUB_DIR`, else `.tools/npm-bench` (installed
    /// by scripts/install-test-tools, apart from the test tools' npm folder).
    fn mcp_hub_dir() -> Option<PathBuf> {
        let dir = std::env::var_os("TUTTI_MCP_HUB_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| tutti_tests::tools_dir().join("npm-bench/node_modules/mcp-hub"));
        dir.join("dist/cli.js").is_file().then_some(dir)
    }

    /// The rows of the echo rounds and each system's processes (for CPU per call), the
    /// runtime's process tree (for memory and idle wake-ups, beside the peers'), and why a
    /// peer has no row.
    #[derive(Default)]
    struct EchoSet {
        rows: Vec<EchoRow>,
        pids: Vec<(System, Vec<u32>)>,
        runtime_tree: Vec<u32>,
        not_measured: Vec<(System, String)>,
    }

    impl EchoSet {
        /// A peer's row; its processes are the trees of `roots` without the upstream.
        fn peer(&mut self, row: EchoRow, roots: &[u32]) {
            let pids = peer_costs::tree(roots, &fixture_bin());
            self.pids.push((row.system, pids));
            self.rows.push(row);
        }

        /// The process trees of the runtime and of each peer with a row.
        fn trees(&self) -> Vec<peer_costs::Tree> {
            let runtime = peer_costs::Tree {
                name: "runtime",
                pids: self.runtime_tree.clone(),
            };
            let peers = self.pids.iter().filter(|(system, _)| system.is_peer());
            let peers = peers.map(|(system, pids)| peer_costs::Tree {
                name: system.short(),
                pids: pids.clone(),
            });
            std::iter::once(runtime).chain(peers).collect()
        }
    }

    /// A row calling `tool` over HTTP/1.1 without a token.
    fn http(url: &str, session: Option<&str>, tool: &'static str) -> Via {
        Via::Http {
            url: url.to_string(),
            session: session.map(str::to_string),
            tool,
            token: String::new(),
        }
    }

    async fn echo_section(
        r: &mut Report,
        rt: &Runtime,
        url: &str,
        token: &str,
        n: usize,
        smoke: bool,
    ) -> Result<()> {
        let peers = start_peers().await?;
        let mut set = EchoSet {
            rows: baseline_rows(&peers, n),
            pids: vec![
                (
                    System::Runtime,
                    vec![
                        frontend_pid(rt.state_dir()),
                        worker_pid(rt.state_dir(), "bench").unwrap_or(0),
                        kernel_pid(rt.state_dir()),
                    ],
                ),
                (System::Floor, peers.floor.pids()),
                (System::FloorVerify, peers.floor_verify.pids()),
                (System::FloorStack, peers.floor_stack.pids()),
            ],
            runtime_tree: tutti_tests::proc_tree::runtime_processes(kernel_pid(rt.state_dir()))
                .into_iter()
                .map(|(_, pid)| pid)
                .collect(),
            ..EchoSet::default()
        };
        let Peers {
            hub,
            gateway,
            contextforge,
            ..
        } = peers;
        let _hub = hub_row(hub, n, &mut set);
        bridge_row(rt, n, &mut set.rows, &mut set.pids)?;
        peer_rows(&gateway, &contextforge, n, &mut set);
        let must_run = |m: &&(System, String)| m.0 != System::OneMcp;
        if smoke && let Some((system, why)) = set.not_measured.iter().find(must_run) {
            bail!("{} not measured: {why}", system.label());
        }
        let _planes = plane_rows(n, &mut set.rows, &mut set.pids)?;
        let trees = set.trees();
        let mut calls = measure_echo_rows(url, token, n, set.rows, &set.pids)?;
        report_planes(r, &mut calls);
        // Ends the clients' connections (mcp-hub's event stream too) before the idle window.
        report_echo(r, calls, &set.not_measured);
        let costs = tokio::task::block_in_place(|| peer_costs::rows(&trees, smoke));
        for (what, value) in costs {
            r.row(&what, value);
        }
        Ok(())
    }

    /// The rows of the runtime (both eras, and with progress), the floors and the trivial
    /// server.
    fn baseline_rows(peers: &Peers, n: usize) -> Vec<EchoRow> {
        vec![
            EchoRow::new(System::Runtime, Via::Runtime(Era::Legacy, false), n),
            EchoRow::new(System::Runtime, Via::Runtime(Era::Modern, false), n),
            EchoRow::new(System::Runtime, Via::Runtime(Era::Legacy, true), n),
            EchoRow::new(System::Floor, http(&peers.floor.url, None, "bench_echo"), n),
            EchoRow::new(
                System::FloorVerify,
                http(&peers.floor_verify.url, None, "bench_echo"),
                n,
            ),
            EchoRow::new(
                System::FloorStack,
                http(&peers.floor_stack.url, None, "bench_echo"),
                n,
            ),
            EchoRow::new(System::Trivial, http(&peers.trivial.1, None, "echo"), n),
        ]
    }

    /// supergateway's and ContextForge's rows, or why they are not measured, and 1MCP's
    /// reason.
    fn peer_rows(
        gateway: &Result<(systems::Proc, String, String)>,
        contextforge: &Result<contextforge::ContextForge>,
        n: usize,
        set: &mut EchoSet,
    ) {
        match gateway {
            Ok((proc, url, session)) => {
                let via = http(url, Some(session), "echo");
                set.peer(EchoRow::new(System::Gateway, via, n), &[proc.pid()]);
            }
            Err(e) => set.not_measured.push((System::Gateway, format!("{e:#}"))),
        }
        match contextforge {
            Ok(cf) => {
                let via = Via::Http {
                    url: cf.url.clone(),
                    session: Some(cf.session.clone()),
                    tool: contextforge::TOOL,
                    token: cf.token.clone(),
                };
                let row = EchoRow::new(System::ContextForge, via, n);
                set.peer(row.with_warmup(CONTEXTFORGE_WARMUP), &cf.pids());
            }
            Err(e) => set
                .not_measured
                .push((System::ContextForge, format!("{e:#}"))),
        }
        set.not_measured
            .push((System::OneMcp, ONE_MCP_WHY.to_owned()));
    }
    /// The stdio bridge's echo row: `tutti mcp-stdio` in front of the same runtime.
    fn bridge_row(
        rt: &Runtime,
        n: usize,
        rows: &mut Vec<EchoRow>,
        pids: &mut Vec<(System, Vec<u32>)>,
    ) -> Result<()> {
        let args = [
            "mcp-stdio",
            "--workspace",
            "bench",
            "--session",
            "bench-bridge",
        ];
        let bridge = bridge::Bridge::start(rt.tutti_cmd(&args))?;
        pids.push((System::Bridge, vec![bridge.pid()]));
        rows.push(EchoRow::new(System::Bridge, Via::Bridge(bridge), n));
        Ok(())
    }

    /// mcp-hub's echo row and its process, or why it is not measured; the hub lives as long as
    /// the result.
    fn hub_row(
        hub: Result<(systems::Hub, systems::SseClient)>,
        n: usize,
        set: &mut EchoSet,
    ) -> Option<systems::Hub> {
        match hub {
            Ok((hub, client)) => {
                set.peer(
                    EchoRow::new(System::Hub, Via::Hub(client), n),
                    &[hub.proc.pid()],
                );
                Some(hub)
            }
            Err(e) => {
                set.not_measured.push((System::Hub, format!("{e:#}")));
                None
            }
        }
    }

    /// One more runtime per data plane (`TUTTI_DATA_PLANE=grpc`, `=frames`), each
    /// with the bench connector, as rows of the same interleaved rounds; their processes
    /// (frontend, worker, kernel) are counted apart. The runtimes live as long as the result.
    fn plane_rows(
        n: usize,
        rows: &mut Vec<EchoRow>,
        pids: &mut Vec<(System, Vec<u32>)>,
    ) -> Result<Vec<Runtime>> {
        let mut runtimes = Vec::new();
        for (system, plane) in [
            (System::RuntimeGrpc, "grpc"),
            (System::RuntimeFrames, "frames"),
        ] {
            let mut rt = Runtime::start(RuntimeOptions {
                env: vec![("TUTTI_DATA_PLANE".to_owned(), plane.to_owned())],
                ..RuntimeOptions::default()
            });
            let mut manifest = fixture_connector("bench", &["--tools", BENCH_TOOLS]);
            manifest["circuit"] = json!({"failures": 10_000});
            tokio::task::block_in_place(|| {
                rt.install_ok(&manifest, &[]);
                rt.wait_status("bench", "ready", Duration::from_secs(30));
            });
            let token = rt.issue_token("bench", "s1");
            let url = rt.frontend_url().to_string();
            rows.push(EchoRow::new(system, Via::RuntimeAt { url, token }, n));
            let state = rt.state_dir();
            let worker = worker_pid(state, "bench").context("no worker for bench")?;
            pids.push((system, vec![frontend_pid(state), worker, kernel_pid(state)]));
            runtimes.push(rt);
        }
        Ok(runtimes)
    }

    /// The two data-plane rows, their CPU per call, and frames against gRPC.
    fn report_planes(r: &mut Report, calls: &mut EchoRows) {
        let mut measured = Vec::new();
        for system in [System::RuntimeGrpc, System::RuntimeFrames] {
            let v = calls.take(|row| row.system == system).unwrap_or_default();
            let p = p50(&v);
            r.row(system.label(), summary(v).3);
            let (cpu, _) = calls.cpu(system);
            r.row(
                &format!(
                    "  CPU per call, {} (frontend · worker · kernel)",
                    system.short()
                ),
                fmt_cpu(&cpu),
            );
            let path = cpu.iter().take(2).copied().sum::<Option<Duration>>();
            measured.push((p, path));
        }
        if let [(g50, Some(gcpu)), (f50, Some(fcpu))] = measured[..] {
            let change = |a: Duration, b: Duration| (ratio(b, a) - 1.0) * 100.0;
            r.row(
                "  frames against the gRPC hop (p50 · CPU per call, frontend + worker)",
                format!(
                    "{:+.0} % ({} → {}) · {:+.0} % ({} → {})",
                    change(g50, f50),
                    fmt_us(g50),
                    fmt_us(f50),
                    change(gcpu, fcpu),
                    fmt_us(gcpu),
                    fmt_us(fcpu)
                ),
            );
        }
    }

    fn fmt_cpu(per: &[Option<Duration>]) -> String {
        per.iter()
            .map(|c| c.map_or_else(|| "n/a".to_owned(), fmt_us))
            .collect::<Vec<_>>()
            .join(" · ")
    }

    /// The echo rows, ratios, own costs and the latency targets judged on them.
    fn report_echo(r: &mut Report, mut calls: EchoRows, not_measured: &[(System, String)]) {
        let direct = std::mem::take(&mut calls.direct);
        let (d50, _, d99, s) = summary(direct);
        r.row("tools/call echo, direct stdio (baseline)", s);
        let trivial = calls
            .take(|r| r.system == System::Trivial)
            .unwrap_or_default();
        let t50 = p50(&trivial);
        r.row(System::Trivial.label(), summary(trivial).3);
        let (f50, floor_total) = row_with_cpu(
            r,
            &mut calls,
            System::Floor,
            "  CPU per call, floor (front · worker)",
        );
        let (fv50, _) = row_with_cpu(
            r,
            &mut calls,
            System::FloorVerify,
            "  CPU per call, floor with check hop (front · worker · verifier)",
        );
        let (fs50, fs_total) = report_floor_stack(r, &mut calls, f50, floor_total);
        let base = Baselines {
            direct50: d50,
            direct99: d99,
            floor50: f50,
            floor_verify50: fv50,
            floor_stack50: fs50,
        };
        let mut own = vec![
            ("floor", f50.saturating_sub(t50)),
            ("floor + check hop", fv50.saturating_sub(t50)),
            ("floor on the stack", fs50.saturating_sub(t50)),
        ];
        let mut legacy50 = Duration::ZERO;
        for era in [Era::Legacy, Era::Modern] {
            let p50 = report_era(r, &mut calls, era, &base);
            if let Era::Legacy = era {
                legacy50 = p50;
            }
            own.push((
                if let Era::Legacy = era {
                    "runtime legacy"
                } else {
                    "runtime modern"
                },
                p50.saturating_sub(t50),
            ));
        }
        let v = calls
            .take(|r| matches!(r.via, Via::Runtime(_, true)))
            .unwrap_or_default();
        let (p50, _, _, s) = summary(v);
        r.row("tools/call echo via runtime, legacy, progress requested", s);
        r.row(
            "  added latency over direct, progress requested",
            format!("p50 +{}", fmt_us(p50.saturating_sub(d50))),
        );
        report_runtime_cpu(r, &calls, floor_total, fs_total);
        report_bridge(r, &mut calls, legacy50);
        report_peers(r, &mut calls, not_measured, (d50, d99), t50, own);
    }

    /// The stdio bridge's row, what it adds to the runtime's legacy p50 (measured in the same
    /// rounds) and its process's CPU per call; the target is under 100 µs added.
    fn report_bridge(r: &mut Report, calls: &mut EchoRows, legacy50: Duration) {
        let v = calls
            .take(|r| r.system == System::Bridge)
            .unwrap_or_default();
        let (b50, _, _, s) = summary(v);
        r.row(System::Bridge.label(), s);
        let added = b50.saturating_sub(legacy50);
        let cpu = calls.cpu(System::Bridge).1;
        r.row(
            "  added by the stdio bridge over the runtime's HTTP (p50 · CPU per call of the bridge)",
            format!(
                "+{} ({} → {}) · {}",
                fmt_us(added),
                fmt_us(legacy50),
                fmt_us(b50),
                cpu.map_or("unknown".into(), fmt_us)
            ),
        );
        r.target(
            "stdio bridge adds < 100 µs p50 per call",
            format!("+{}", fmt_us(added)),
            added < Duration::from_micros(100),
        );
    }

    /// The p50s (and the direct p99) the runtime's echo rows are compared with.
    #[derive(Clone, Copy)]
    struct Baselines {
        direct50: Duration,
        direct99: Duration,
        floor50: Duration,
        floor_verify50: Duration,
        floor_stack50: Duration,
    }

    /// One era's echo row, its added latency and ratios, and the latency targets judged on
    /// them; returns its p50.
    fn report_era(r: &mut Report, calls: &mut EchoRows, era: Era, base: &Baselines) -> Duration {
        let Baselines {
            direct50: d50,
            direct99: d99,
            floor50: f50,
            floor_verify50: fv50,
            floor_stack50: fs50,
        } = *base;
        let v = calls
            .take(|r| matches!(r.via, Via::Runtime(e, false) if e.name() == era.name()))
            .unwrap_or_default();
        let (p50, _, p99, s) = summary(v);
        r.row(
            &format!("tools/call echo via runtime, {} era", era.name()),
            s,
        );
        let (add50, add99) = (p50.saturating_sub(d50), p99.saturating_sub(d99));
        r.row(
            &format!("  added latency over direct, {}", era.name()),
            format!("p50 +{} · p99 +{}", fmt_us(add50), fmt_us(add99)),
        );
        r.row(
            &format!(
                "  p50 as a ratio to the floor · to the floor with check hop · to direct, {}",
                era.name()
            ),
            format!(
                "{:.2}× · {:.2}× · {:.2}×",
                ratio(p50, f50),
                ratio(p50, fv50),
                ratio(p50, d50)
            ),
        );
        r.row(
            &format!(
                "  p50 as a ratio to the floor on the runtime's stack, {}",
                era.name()
            ),
            format!(
                "{:.2}× ({} / {})",
                ratio(p50, fs50),
                fmt_us(p50),
                fmt_us(fs50)
            ),
        );
        r.target(
            &format!("p50 ≤ 1.3 × the floor's ({})", era.name()),
            format!(
                "{:.2}× ({} / {})",
                ratio(p50, f50),
                fmt_us(p50),
                fmt_us(f50)
            ),
            ratio(p50, f50) <= 1.3,
        );
        r.target(
            &format!("added p99 ≤ 1 ms ({})", era.name()),
            fmt_us(add99),
            add99 <= Duration::from_millis(1),
        );
        p50
    }

    /// The runtime's CPU per call, and as ratios to the floor's (`floor_total`) and to the
    /// floor on the runtime's stack (`fs_total`).
    fn report_runtime_cpu(
        r: &mut Report,
        calls: &EchoRows,
        floor_total: Option<Duration>,
        fs_total: Option<Duration>,
    ) {
        let (rt_cpu, _) = calls.cpu(System::Runtime);
        r.row(
            "  CPU per call (frontend · worker · kernel)",
            fmt_cpu(&rt_cpu),
        );
        // The target is on the two processes of the call's path; the kernel's share (the
        // per-request token check, audit records) is shown beside it.
        let rt_total = rt_cpu.iter().take(2).copied().sum::<Option<Duration>>();
        if let (Some(rt_total), Some(floor_total)) = (rt_total, floor_total) {
            let x = ratio(rt_total, floor_total);
            let measured = format!("{x:.2}× ({} / {})", fmt_us(rt_total), fmt_us(floor_total));
            r.row("  CPU per call as a ratio to the floor's", measured.clone());
            r.target("CPU per call ≤ 1.5 × the floor's", measured, x <= 1.5);
        }
        if let (Some(rt_total), Some(fs_total)) = (rt_total, fs_total) {
            r.row(
                "  CPU per call as a ratio to the floor on the runtime's stack",
                format!(
                    "{:.2}× ({} / {})",
                    ratio(rt_total, fs_total),
                    fmt_us(rt_total),
                    fmt_us(fs_total)
                ),
            );
        }
    }

    /// A system's echo row and its CPU-per-call row (`cpu_label`); its p50 and its CPU per
    /// call summed over its processes.
    fn row_with_cpu(
        r: &mut Report,
        calls: &mut EchoRows,
        system: System,
        cpu_label: &str,
    ) -> (Duration, Option<Duration>) {
        let v = calls.take(|r| r.system == system).unwrap_or_default();
        let p = p50(&v);
        r.row(system.label(), summary(v).3);
        let (cpu, total) = calls.cpu(system);
        r.row(cpu_label, fmt_cpu(&cpu));
        (p, total)
    }

    /// The floor on the runtime's stack: its row, its CPU per call, and both as ratios to the
    /// blocking floor's (how much of the runtime's distance to the floor the stack itself
    /// takes). Returns its p50 and CPU per call (front + worker).
    fn report_floor_stack(
        r: &mut Report,
        calls: &mut EchoRows,
        f50: Duration,
        floor_total: Option<Duration>,
    ) -> (Duration, Option<Duration>) {
        let (fs50, total) = row_with_cpu(
            r,
            calls,
            System::FloorStack,
            "  CPU per call, floor on the runtime's stack (front · worker)",
        );
        let cpu_ratio = match (total, floor_total) {
            (Some(s), Some(f)) => format!("{:.2}× ({} / {})", ratio(s, f), fmt_us(s), fmt_us(f)),
            _ => "n/a".to_owned(),
        };
        r.row(
            "  floor on the runtime's stack / blocking floor (p50 · CPU per call, front + worker)",
            format!(
                "{:.2}× ({} / {}) · {cpu_ratio}",
                ratio(fs50, f50),
                fmt_us(fs50),
                fmt_us(f50)
            ),
        );
        (fs50, total)
    }

    /// The peers' rows: latency, added latency over direct (`direct`: its p50 and p99), CPU
    /// per call of the process tree, own cost, and the target on mcp-hub's.
    fn report_peers(
        r: &mut Report,
        calls: &mut EchoRows,
        not_measured: &[(System, String)],
        direct: (Duration, Duration),
        t50: Duration,
        mut own: Vec<(&'static str, Duration)>,
    ) {
        let (d50, d99) = direct;
        let mut hub_own = None;
        let peers = [
            System::Hub,
            System::Gateway,
            System::ContextForge,
            System::OneMcp,
        ];
        for system in peers {
            let Some(v) = calls.take(|r| r.system == system) else {
                let why = not_measured.iter().find(|m| m.0 == system);
                let why = why.map_or("not started", |m| m.1.as_str());
                r.row(system.label(), format!("not measured: {why}"));
                continue;
            };
            let (p, _, p99, s) = summary(v);
            r.row(system.label(), s);
            r.row(
                &format!("  added latency over direct, {}", system.short()),
                format!(
                    "p50 +{} · p99 +{}",
                    fmt_us(p.saturating_sub(d50)),
                    fmt_us(p99.saturating_sub(d99))
                ),
            );
            r.row(
                &format!(
                    "  CPU per call, {} (process tree without the upstream)",
                    system.short()
                ),
                peer_cpu(calls, system),
            );
            own.push((system.short(), p.saturating_sub(t50)));
            if system == System::Hub {
                hub_own = Some(p.saturating_sub(t50));
            }
        }
        r.row(
            "own cost p50 (system − trivial HTTP server)",
            own.iter()
                .map(|(who, d)| format!("{who} {}", fmt_us(*d)))
                .collect::<Vec<_>>()
                .join(" · "),
        );
        let runtime_own = own
            .iter()
            .filter(|o| o.0.starts_with("runtime"))
            .map(|o| o.1)
            .max()
            .unwrap_or_default();
        match hub_own {
            Some(hub) => r.target(
                "own cost p50 ≤ 1/3 of mcp-hub's (slower era)",
                format!(
                    "{:.2} ({} / {})",
                    ratio(runtime_own, hub),
                    fmt_us(runtime_own),
                    fmt_us(hub)
                ),
                ratio(runtime_own, hub) <= 1.0 / 3.0,
            ),
            None => r.target(
                "own cost p50 ≤ 1/3 of mcp-hub's",
                "not measured".into(),
                false,
            ),
        }
    }

    /// A peer's CPU per call: the sum, and each process's by its name ("12 µs (node 12 µs)").
    fn peer_cpu(calls: &EchoRows, system: System) -> String {
        let (per, total) = calls.cpu(system);
        let pids = calls.pids.iter().find(|p| p.0 == system);
        let pids = pids.map(|p| p.1.as_slice()).unwrap_or_default();
        let each = per
            .iter()
            .zip(pids)
            .map(|(cpu, &pid)| {
                let name = program(pid);
                format!("{name} {}", cpu.map_or_else(|| "n/a".to_owned(), fmt_us))
            })
            .collect::<Vec<_>>()
            .join(" · ");
        format!(
            "{} ({each})",
            total.map_or_else(|| "n/a".to_owned(), fmt_us)
        )
    }

    /// A process's program: its executable's file name, or for `python -m MODULE`, the module.
    fn program(pid: u32) -> String {
        let Some(info) = tutti_tests::proc_tree::info(pid) else {
            return "gone".to_owned();
        };
        let argv: Vec<&str> = info.cmdline.split(' ').collect();
        if let Some(at) = argv.iter().position(|a| *a == "-m")
            && let Some(module) = argv.get(at + 1)
        {
            return (*module).to_owned();
        }
        info.program()
    }

    /// `--big-only`: a runtime with the bench connector and only the 1 MiB rows.
    fn big_only(n: usize) -> Result<()> {
        let mut rt = Runtime::start(RuntimeOptions::default());
        rt.install_ok(&fixture_connector("bench", &["--tools", BENCH_TOOLS]), &[]);
        rt.wait_status("bench", "ready", Duration::from_secs(20));
        let token = rt.issue_token("bench", "s1");
        let url = rt.frontend_url().to_string();
        let mut r = Report::default();
        big_result_rows(&mut r, &url, &token, n)?;
        rt.stop();
        Ok(())
    }

    /// Untimed 1 MiB calls before each block of timed ones (each takes milliseconds).
    const BIG_WARMUP: usize = 20;

    /// A large result (1 MiB of text), direct, through the runtime and through the floor, in
    /// three interleaved rounds (each block after [`BIG_WARMUP`] untimed calls): what the
    /// path costs per byte (HTTP, gRPC and JSON handling in the frontend and the worker). Runs after the
    /// memory rows: glibc keeps a worker's freed megabyte buffers for reuse (its mmap threshold
    /// adapts upward after the first one), which would otherwise count in "RSS under load".
    fn big_result_rows(r: &mut Report, url: &str, token: &str, n: usize) -> Result<()> {
        let big = json!({"bytes": 1 << 20});
        let floor =
            systems::Floor::start(tutti_tests::bin, &fixture_bin(), false, Stack::Blocking)?;
        let mut direct = Direct::start()?;
        let (mut d, mut rt, mut fl) = (Vec::new(), Vec::new(), Vec::new());
        // Three interleaved rounds: direct first, then the runtime and the floor alternating.
        let rounds = 3.min(n.max(1));
        tokio::task::block_in_place(|| -> Result<()> {
            for round in 0..rounds {
                let share = n / rounds + usize::from(round < n % rounds);
                d.extend(direct.calls_after("big", &big, share, BIG_WARMUP)?);
                for k in 0..2 {
                    let (target, tok, into) = if (round + k) % 2 == 0 {
                        (url, token, &mut rt)
                    } else {
                        (floor.url.as_str(), "", &mut fl)
                    };
                    into.extend(RawHttp::connect(target, tok, None)?.tool_calls_after(
                        Era::Legacy,
                        "bench_big",
                        &big,
                        share,
                        BIG_WARMUP,
                    )?);
                }
            }
            Ok(())
        })?;
        let (d50, _, _, s) = summary(d);
        r.row("tools/call big (1 MiB result), direct stdio", s);
        let (p50, _, _, s) = summary(rt);
        r.row("tools/call big (1 MiB result) via runtime, legacy", s);
        let added = p50.saturating_sub(d50);
        r.row(
            "  added latency over direct, 1 MiB result",
            format!("p50 +{}", fmt_us(added)),
        );
        let (f50, _, _, s) = summary(fl);
        r.row(
            "tools/call big (1 MiB result) via the architectural floor",
            s,
        );
        r.row(
            "  added latency over direct, 1 MiB result, floor",
            format!("p50 +{}", fmt_us(f50.saturating_sub(d50))),
        );
        r.target(
            "1 MiB result: added p50 ≤ +1.5 ms over direct",
            format!("+{}", fmt_us(added)),
            added <= Duration::from_micros(1500),
        );
        Ok(())
    }

    /// What `--otel-ab` uses of this module.
    fn otel_kit() -> otel_ab::Kit {
        otel_ab::Kit {
            connect: |url, token| Ok(Box::new(RawHttp::connect(url, token, None)?)),
            warmup: WARMUP_CALLS,
            cpu_ns,
            rss_kib,
            kernel_pid,
            frontend_pid,
            worker_pid,
        }
    }

    impl otel_ab::Echo for RawHttp {
        fn echo(&mut self, n: usize) -> Result<Vec<Duration>> {
            self.tool_calls(Era::Legacy, "bench_echo", &json!({"message": "x"}), n)
        }
    }

    /// Raw JSON-RPC over the fixture server's stdio: the baseline the runtime is compared to.
    struct Direct {
        child: Child,
        stdin: std::process::ChildStdin,
        stdout: BufReader<std::process::ChildStdout>,
        line: String,
        next_id: u64,
    }

    impl Direct {
        fn start() -> Result<Direct> {
            let mut child = Command::new(fixture_bin())
                .args(["--tools", "echo,big"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .context("starting the fixture server")?;
            let stdin = child.stdin.take().context("stdin")?;
            let stdout = BufReader::new(child.stdout.take().context("stdout")?);
            let mut direct = Direct {
                child,
                stdin,
                stdout,
                line: String::new(),
                next_id: 1,
            };
            direct.rpc(
                &json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}),
                true,
            )?;
            direct.rpc(
                &json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
                false,
            )?;
            Ok(direct)
        }

        fn rpc(&mut self, msg: &Value, expect_reply: bool) -> Result<()> {
            writeln!(self.stdin, "{msg}")?;
            self.stdin.flush()?;
            if expect_reply {
                self.line.clear();
                self.stdout.read_line(&mut self.line)?;
                if self.line.is_empty() {
                    bail!("the fixture server closed its stdout");
                }
            }
            Ok(())
        }

        /// `n` timed calls of `tool` (after [`WARMUP_CALLS`] untimed ones).
        fn calls(&mut self, tool: &str, arguments: &Value, n: usize) -> Result<Vec<Duration>> {
            self.calls_after(tool, arguments, n, WARMUP_CALLS)
        }

        /// `n` timed calls of `tool` after `warmup` untimed ones.
        fn calls_after(
            &mut self,
            tool: &str,
            arguments: &Value,
            n: usize,
            warmup: usize,
        ) -> Result<Vec<Duration>> {
            let mut v = Vec::with_capacity(n);
            for i in 0..(n + warmup) {
                let id = self.next_id;
                self.next_id += 1;
                let t = Instant::now();
                self.rpc(
                    &json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":arguments}}),
                    true,
                )?;
                if i >= warmup {
                    v.push(t.elapsed());
                }
            }
            Ok(v)
        }
    }

    impl Drop for Direct {
        fn drop(&mut self) {
            // Killed rather than sent EOF: a run that failed mid-call must not wait for it.
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    // === HTTP client ===

    #[derive(Clone)]
    struct Client {
        http: reqwest::Client,
        url: String,
        auth: String,
        id: Arc<AtomicU64>,
    }

    impl Client {
        fn new(url: &str, token: &str) -> Result<Client> {
            Ok(Client {
                http: reqwest::Client::builder()
                    .no_proxy()
                    .pool_max_idle_per_host(128)
                    .build()?,
                url: url.to_string(),
                auth: format!("Bearer {token}"),
                id: Arc::new(AtomicU64::new(1)),
            })
        }

        async fn post(
            &self,
            era: Era,
            method: &str,
            name: Option<&str>,
            mut params: Value,
        ) -> Result<Value> {
            let id = self.id.fetch_add(1, Ordering::Relaxed);
            let mut req = self
                .http
                .post(&self.url)
                .header("Authorization", &self.auth)
                .header("Content-Type", "application/json")
                .header("Accept", "application/json, text/event-stream");
            if let Era::Modern = era {
                params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}});
                req = req
                    .header("MCP-Protocol-Version", "2026-07-28")
                    .header("Mcp-Method", method);
                if let Some(n) = name {
                    req = req.header("Mcp-Name", n);
                }
            }
            let body = json!({"jsonrpc":"2.0","id":id,"method":method,"params":params});
            let resp = req.body(body.to_string()).send().await?;
            let status = resp.status();
            let v: Value = resp.json().await?;
            if !status.is_success() {
                bail!("HTTP {status}: {v}");
            }
            Ok(v)
        }

        async fn call(&self, era: Era, tool: &str, args: Value) -> Result<Value> {
            let v = self
                .post(
                    era,
                    "tools/call",
                    Some(tool),
                    json!({"name": tool, "arguments": args}),
                )
                .await?;
            if v.get("error").is_some() {
                bail!("{}", v["error"]);
            }
            Ok(v)
        }

        /// Lists every page; returns the tool count and the time spent on the wire (request
        /// sent → last byte of each page received). Parsing the pages happens outside the
        /// timed region: it is the client's cost, not the runtime's.
        async fn list_all(&self, era: Era) -> Result<(usize, Duration)> {
            let mut n = 0;
            let mut wire = Duration::ZERO;
            let mut cursor: Option<String> = None;
            loop {
                let mut params = match &cursor {
                    Some(c) => json!({"cursor": c}),
                    None => json!({}),
                };
                let id = self.id.fetch_add(1, Ordering::Relaxed);
                let mut req = self
                    .http
                    .post(&self.url)
                    .header("Authorization", &self.auth)
                    .header("Content-Type", "application/json")
                    .header("Accept", "application/json, text/event-stream");
                if let Era::Modern = era {
                    params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}});
                    req = req
                        .header("MCP-Protocol-Version", "2026-07-28")
                        .header("Mcp-Method", "tools/list");
                }
                let body = json!({"jsonrpc":"2.0","id":id,"method":"tools/list","params":params})
                    .to_string();
                let t = Instant::now();
                let bytes = req.body(body).send().await?.bytes().await?;
                wire += t.elapsed();
                let v: Value = serde_json::from_slice(&bytes)?;
                n += v["result"]["tools"].as_array().map(Vec::len).unwrap_or(0);
                match v["result"]["nextCursor"].as_str() {
                    Some(c) => cursor = Some(c.to_string()),
                    None => return Ok((n, wire)),
                }
            }
        }
    }

    /// A minimal blocking HTTP/1.1 client on one keep-alive connection (no pool, no runtime).
    struct RawHttp {
        stream: std::net::TcpStream,
        reader: BufReader<std::net::TcpStream>,
        head: String,
        next_id: u64,
        /// Put a `progressToken` in every call's `_meta` (the answer is then an event stream).
        progress: bool,
    }

    impl RawHttp {
        /// `session`: an `mcp-session-id` to send (stateful peers).
        fn connect(url: &str, token: &str, session: Option<&str>) -> Result<RawHttp> {
            let rest = url
                .strip_prefix("http://")
                .context("only http:// URLs are supported")?;
            let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            let stream = std::net::TcpStream::connect(authority)
                .with_context(|| format!("connecting to {authority}"))?;
            stream.set_nodelay(true)?;
            stream.set_read_timeout(Some(Duration::from_secs(30)))?;
            let mut head = format!(
                "POST {} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n",
                if path.is_empty() { "/" } else { path }
            );
            if !token.is_empty() {
                head.push_str(&format!("Authorization: Bearer {token}\r\n"));
            }
            if let Some(sid) = session {
                head.push_str(&format!("mcp-session-id: {sid}\r\n"));
            }
            Ok(RawHttp {
                reader: BufReader::new(stream.try_clone()?),
                stream,
                head,
                next_id: 1,
                progress: false,
            })
        }

        /// One POST; returns the status and the body (Content-Length or chunked).
        fn post(&mut self, extra_headers: &str, body: &str) -> Result<(u16, Vec<u8>)> {
            let request = format!(
                "{}{extra_headers}Content-Length: {}\r\n\r\n{body}",
                self.head,
                body.len()
            );
            self.stream.write_all(request.as_bytes())?;
            let mut line = String::new();
            self.reader.read_line(&mut line)?;
            let status: u16 = line
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse().ok())
                .with_context(|| format!("bad status line {line:?}"))?;
            let mut length: Option<usize> = None;
            let mut chunked = false;
            loop {
                line.clear();
                if self.reader.read_line(&mut line)? == 0 {
                    bail!("connection closed in the response head");
                }
                let l = line.trim_end();
                if l.is_empty() {
                    break;
                }
                if let Some((name, value)) = l.split_once(':') {
                    let value = value.trim();
                    if name.eq_ignore_ascii_case("content-length") {
                        length = value.parse().ok();
                    } else if name.eq_ignore_ascii_case("transfer-encoding")
                        && value.eq_ignore_ascii_case("chunked")
                    {
                        chunked = true;
                    }
                }
            }
            let mut body = Vec::new();
            if let Some(n) = length {
                body.resize(n, 0);
                std::io::Read::read_exact(&mut self.reader, &mut body)?;
            } else if chunked {
                loop {
                    line.clear();
                    self.reader.read_line(&mut line)?;
                    let size = usize::from_str_radix(line.trim_end(), 16)
                        .with_context(|| format!("bad chunk size {line:?}"))?;
                    let start = body.len();
                    body.resize(start + size + 2, 0);
                    std::io::Read::read_exact(&mut self.reader, &mut body[start..])?;
                    body.truncate(start + size);
                    if size == 0 {
                        break;
                    }
                }
            } else {
                bail!("a response without Content-Length or chunked encoding");
            }
            Ok((status, body))
        }

        /// `n` timed calls of `tool` (after [`WARMUP_CALLS`] untimed ones) on this connection.
        fn tool_calls(
            &mut self,
            era: Era,
            tool: &str,
            arguments: &Value,
            n: usize,
        ) -> Result<Vec<Duration>> {
            self.tool_calls_after(era, tool, arguments, n, WARMUP_CALLS)
        }

        /// `n` timed calls of `tool` after `warmup` untimed ones on this connection.
        fn tool_calls_after(
            &mut self,
            era: Era,
            tool: &str,
            arguments: &Value,
            n: usize,
            warmup: usize,
        ) -> Result<Vec<Duration>> {
            let extra = match era {
                Era::Legacy => "MCP-Protocol-Version: 2025-06-18\r\n".to_string(),
                Era::Modern => format!(
                    "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: {tool}\r\n"
                ),
            };
            let mut v = Vec::with_capacity(n);
            for i in 0..(n + warmup) {
                let id = self.next_id;
                self.next_id += 1;
                let mut params = json!({"name": tool, "arguments": arguments});
                if let Era::Modern = era {
                    params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}});
                }
                if self.progress {
                    params["_meta"]["progressToken"] = json!(id);
                }
                let t = Instant::now();
                let body = json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":params})
                    .to_string();
                let (status, reply) = self.post(&extra, &body)?;
                if i >= warmup {
                    v.push(t.elapsed());
                }
                let text = String::from_utf8_lossy(&reply);
                if status != 200 || !text.contains("\"result\"") || text.contains("\"error\":{") {
                    bail!("call failed: HTTP {status}: {text}");
                }
            }
            Ok(v)
        }
    }

    /// A [`RawHttp`] connection to `url` with a bearer `token`, for the sections that take a
    /// [`tool_search::Connect`] (`--tool-search`, the scale rows).
    fn connect_raw(url: &str, token: &str) -> Result<Box<dyn tool_search::Post>> {
        Ok(Box::new(RawHttp::connect(url, token, None)?))
    }

    impl tool_search::Post for RawHttp {
        fn post(&mut self, extra_headers: &str, body: &str) -> Result<(u16, Vec<u8>)> {
            RawHttp::post(self, extra_headers, body)
        }
    }

    // === load ===

    #[derive(Default)]
    struct RssPeak {
        kernel: u64,
        frontend: u64,
        worker: u64,
    }

    fn rss_kib(pid: u32) -> u64 {
        tutti_tests::proc_tree::rss_kib(pid).unwrap_or(0)
    }

    use tutti_tests::proc_tree::smaps_kib;

    fn children_named(ppid: u32, name: &str) -> Vec<u32> {
        let mut out = Vec::new();
        let Ok(rd) = std::fs::read_dir("/proc") else {
            return out;
        };
        for e in rd.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            let Some(close) = stat.rfind(')') else {
                continue;
            };
            let comm = stat[stat.find('(').map(|i| i + 1).unwrap_or(0)..close].to_string();
            let parent = stat[close + 2..]
                .split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u32>().ok());
            if parent == Some(ppid) && name.starts_with(&comm) {
                out.push(pid);
            }
        }
        out
    }

    /// The kernel's pid, from its lock file (0 if unreadable).
    fn kernel_pid(state: &std::path::Path) -> u32 {
        std::fs::read_to_string(tutti_rules::state_dir::layout::kernel_lock(state))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    /// The kernel's worker processes.
    fn worker_pids(state: &std::path::Path) -> Vec<u32> {
        children_named(kernel_pid(state), "tutti-upstream-worker")
    }

    /// The frontend's pid, from the address file it writes (0 if unreadable).
    fn frontend_pid(state: &std::path::Path) -> u32 {
        std::fs::read(tutti_rules::state_dir::layout::frontend_json(state))
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .and_then(|v| v["pid"].as_u64())
            .unwrap_or(0) as u32
    }

    /// A process's CPU counter in ns: a peer's from its threads' `schedstat` (nanoseconds;
    /// see [`System::is_peer`]), every other system's from [`cpu_ns`].
    fn cpu_counter(system: System, pid: u32) -> Option<u64> {
        if system.is_peer() {
            tutti_tests::proc_tree::on_cpu_ns(pid)
        } else {
            cpu_ns(pid)
        }
    }

    /// CPU time of a whole process (every thread, exited ones included), in ns: utime +
    /// stime of `/proc/<pid>/stat`, in clock ticks (10 ms each, so
    /// compare it over thousands of calls). `None` for pid 0 or when unreadable.
    fn cpu_ns(pid: u32) -> Option<u64> {
        if pid == 0 {
            return None;
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the command's closing parenthesis: state is field 3, utime 14, stime 15.
        let rest = &stat[stat.rfind(')')? + 2..];
        let mut fields = rest.split_whitespace().skip(11);
        let utime: u64 = fields.next()?.parse().ok()?;
        let stime: u64 = fields.next()?.parse().ok()?;
        // Linux reports these in USER_HZ, which is 100 on every architecture it supports.
        const USER_HZ: u64 = 100;
        Some((utime + stime) * (1_000_000_000 / USER_HZ))
    }

    fn sample_rss(peak: &mut RssPeak, state: &std::path::Path) {
        let kernel = kernel_pid(state);
        let frontend = frontend_pid(state);
        peak.kernel = peak.kernel.max(rss_kib(kernel));
        peak.frontend = peak.frontend.max(rss_kib(frontend));
        for w in worker_pids(state) {
            peak.worker = peak.worker.max(rss_kib(w));
        }
    }

    async fn load(
        client: &Client,
        conc: usize,
        dur: Duration,
        peak: &mut RssPeak,
        state: &std::path::Path,
    ) -> (u64, u64, Vec<Duration>) {
        let deadline = Instant::now() + dur;
        let mut tasks = Vec::new();
        for _ in 0..conc {
            let c = client.clone();
            tasks.push(tokio::spawn(async move {
                let (mut ok, mut err, mut lat) = (0u64, 0u64, Vec::new());
                while Instant::now() < deadline {
                    let t = Instant::now();
                    match c
                        .call(Era::Legacy, "bench_echo", json!({"message": "x"}))
                        .await
                    {
                        Ok(_) => ok += 1,
                        Err(_) => err += 1,
                    }
                    lat.push(t.elapsed());
                }
                (ok, err, lat)
            }));
        }
        while Instant::now() < deadline {
            sample_rss(peak, state);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let (mut ok, mut err, mut lat) = (0, 0, Vec::new());
        for t in tasks {
            if let Ok((o, e, l)) = t.await {
                ok += o;
                err += e;
                lat.extend(l);
            }
        }
        (ok, err, lat)
    }

    // === crash ===

    fn worker_pid(state: &std::path::Path, key: &str) -> Option<u32> {
        worker_pids(state).into_iter().find(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .map(|env| {
                    env.split(|b| *b == 0)
                        .any(|kv| kv == format!("TUTTI_WORKER_KEY={key}").as_bytes())
                })
                .unwrap_or(false)
        })
    }

    /// Returns (kill → first error at an in-flight caller, kill → list_changed, kill → tools back).
    async fn crash_once(client: &Client, rt: &Runtime) -> Result<(Duration, Duration, Duration)> {
        let pid = worker_pid(rt.state_dir(), "bench").context("no worker for bench")?;
        let mut listen = Listener::open(client).await?;
        // Calls in flight when the worker dies.
        let mut callers = Vec::new();
        for _ in 0..4 {
            let c = client.clone();
            callers.push(tokio::spawn(async move {
                let r = c
                    .call(Era::Legacy, "bench_sleep", json!({"ms": 5000}))
                    .await;
                (Instant::now(), r.is_err())
            }));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let t0 = Instant::now();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        )?;
        let ev = listen
            .next_list_changed(Duration::from_secs(5))
            .await
            .map(|t| t.duration_since(t0));
        let mut first_err = None;
        for c in callers {
            if let Ok((t, true)) = c.await {
                let d = t.duration_since(t0);
                first_err = Some(first_err.map_or(d, |f: Duration| f.min(d)));
            }
        }
        let back_deadline = Instant::now() + Duration::from_secs(10);
        let back = loop {
            let v = client
                .post(Era::Legacy, "tools/list", None, json!({}))
                .await?;
            let has = v["result"]["tools"]
                .as_array()
                .is_some_and(|t| t.iter().any(|x| x["name"] == "bench_echo"));
            if has {
                break t0.elapsed();
            }
            if Instant::now() > back_deadline {
                bail!("bench tools did not come back within 10 s");
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        // Let the restart backoff settle before the next round.
        tokio::time::sleep(Duration::from_millis(300)).await;
        Ok((
            first_err.context("no caller saw an error")?,
            ev.context("no list_changed event")?,
            back,
        ))
    }

    /// Installs (or upgrades) `lc` with `--many MANY` tools and returns the time from the kernel's
    /// commit of the new generation to the `tools/list_changed` event at a listener. The commit's
    /// time is the timestamp of the kernel's `committed` log line, written right after it
    /// publishes the route change: this errs low by the microseconds between the two.
    async fn commit_to_event(client: &Client, rt: &mut Runtime, many: &str) -> Result<Duration> {
        let log = tutti_rules::state_dir::layout::kernel_log(rt.state_dir());
        let before = commit_lines(&log, "lc").len();
        let mut listen = Listener::open(client).await?;
        let event = tokio::spawn(async move {
            listen
                .next_list_changed(Duration::from_secs(30))
                .await
                .map(|_| SystemTime::now())
        });
        // The install runs the CLI and blocks: off the runtime's threads, so the listener task
        // stamps the event when it arrives.
        let manifest = fixture_connector("lc", &["--tools", "echo", "--many", many]);
        tokio::task::block_in_place(|| rt.install_ok(&manifest, &[]));
        let at = event
            .await?
            .context("no list_changed event after a commit")?;
        let deadline = Instant::now() + Duration::from_secs(5);
        let committed = loop {
            if let Some(&newest) = commit_lines(&log, "lc").get(before..).and_then(<[_]>::last) {
                break newest;
            }
            if Instant::now() > deadline {
                bail!(
                    "no `committed key=lc` line in {} (the bench needs the kernel's info log)",
                    log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        at.duration_since(committed)
            .context("the list_changed event arrived before the commit it announces")
    }

    /// Times of the kernel's `committed` log lines for connector `key`, oldest first.
    fn commit_lines(log: &std::path::Path, key: &str) -> Vec<SystemTime> {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let tag = format!(" committed key={key} ");
        text.lines()
            .filter(|l| l.contains(&tag))
            .filter_map(|l| l.split_whitespace().next())
            .filter_map(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map(SystemTime::from)
            .collect()
    }

    struct Listener {
        resp: reqwest::Response,
        buf: String,
    }

    impl Listener {
        async fn open(client: &Client) -> Result<Listener> {
            let body = json!({"jsonrpc":"2.0","id":"bench-listen","method":"subscriptions/listen","params":{
                "_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}},
                "notifications":{"toolsListChanged":true}}});
            let resp = client
                .http
                .post(&client.url)
                .header("Authorization", &client.auth)
                .header("Content-Type", "application/json")
                .header("Accept", "application/json, text/event-stream")
                .header("MCP-Protocol-Version", "2026-07-28")
                .header("Mcp-Method", "subscriptions/listen")
                .body(body.to_string())
                .send()
                .await?;
            let mut l = Listener {
                resp,
                buf: String::new(),
            };
            // The acknowledgement comes first.
            l.next_event(Duration::from_secs(5))
                .await
                .context("no acknowledgement")?;
            Ok(l)
        }

        async fn next_event(&mut self, timeout: Duration) -> Option<(Instant, Value)> {
            let deadline = tokio::time::Instant::now() + timeout;
            loop {
                if let Some(end) = self.buf.find("\n\n") {
                    let event: String = self.buf.drain(..end + 2).collect();
                    let data: String = event
                        .lines()
                        .filter_map(|l| l.strip_prefix("data:"))
                        .map(str::trim)
                        .collect();
                    if let Ok(v) = serde_json::from_str::<Value>(&data) {
                        return Some((Instant::now(), v));
                    }
                    continue;
                }
                let chunk = tokio::time::timeout_at(deadline, self.resp.chunk())
                    .await
                    .ok()?
                    .ok()??;
                self.buf
                    .push_str(&String::from_utf8_lossy(&chunk).replace("\r\n", "\n"));
            }
        }

        async fn next_list_changed(&mut self, timeout: Duration) -> Option<Instant> {
            let deadline = Instant::now() + timeout;
            while Instant::now() < deadline {
                let (t, v) = self
                    .next_event(deadline.saturating_duration_since(Instant::now()))
                    .await?;
                if v["method"] == "notifications/tools/list_changed" {
                    return Some(t);
                }
            }
            None
        }
    }

    // === tutti up to ready ===

    /// Timed starts of `tutti up` (after one untimed start).
    const UP_STARTS: usize = 5;

    fn time_up_to_ready() -> Result<Duration> {
        let dir = tempfile::tempdir()?;
        let t0 = Instant::now();
        let mut child: Child = Command::new(tutti_tests::bin("tutti"))
            .arg("--state-dir")
            .arg(dir.path())
            .arg("up")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let out = child.stdout.take().context("stdout")?;
        let mut line = String::new();
        BufReader::new(out).read_line(&mut line)?;
        let ready = t0.elapsed();
        if !line.contains("tutti is up") {
            bail!("unexpected first line from tutti up: {line:?}");
        }
        let pid = child.id();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        )?;
        let _ = child.wait();
        Ok(ready)
    }

    // === peer: supergateway ===

    /// supergateway (stateful Streamable HTTP) in front of the fixture: the process, its MCP
    /// URL and the session it issued.
    async fn start_gateway() -> Result<(systems::Proc, String, String)> {
        let node_bin =
            tutti_tests::node22().context("Node 22 missing (scripts/install-test-tools)")?;
        let sg = tutti_tests::npm_package("supergateway")
            .context("supergateway missing (scripts/install-test-tools)")?;
        let entry = sg.join("dist/index.js");
        let port = free_port()?;
        let stdio_cmd = format!("{} --tools echo", fixture_bin().display());
        let child = systems::Proc(
            Command::new(&node_bin)
                .arg(&entry)
                .args([
                    "--stdio",
                    &stdio_cmd,
                    "--outputTransport",
                    "streamableHttp",
                    "--stateful",
                    "--logLevel",
                    "none",
                ])
                .args(["--port", &port.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("starting supergateway")?,
        );
        let url = format!("http://127.0.0.1:{port}/mcp");
        let http = reqwest::Client::builder().no_proxy().build()?;
        // Node starts slowly on a loaded machine (20 s was too short under load average 15).
        let deadline = Instant::now() + Duration::from_secs(60);
        let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}});
        let session = loop {
            let r = http
                .post(&url)
                .header("Content-Type", "application/json")
                .header("Accept", "application/json, text/event-stream")
                .body(init.to_string())
                .send()
                .await;
            match r {
                Ok(resp) if resp.status().is_success() => {
                    let sid = resp
                        .headers()
                        .get("mcp-session-id")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string);
                    let _ = resp.text().await;
                    break sid.context("supergateway issued no session id")?;
                }
                _ if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                Ok(resp) => bail!("supergateway initialize: HTTP {}", resp.status()),
                Err(e) => bail!("supergateway did not come up: {e}"),
            }
        };
        http.post(&url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("mcp-session-id", &session)
            .header("MCP-Protocol-Version", "2025-06-18")
            .body(json!({"jsonrpc":"2.0","method":"notifications/initialized"}).to_string())
            .send()
            .await?
            .text()
            .await?;
        Ok((child, url, session))
    }

    fn free_port() -> Result<u16> {
        Ok(std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port())
    }

    // === doc ===

    /// How this machine's idle CPUs wait, which sets the cost of every cross-CPU wake-up and so
    /// of every process hop (docs/PERFORMANCE.md, "Per-call latency: the frontend ↔ worker hop
    /// crosses vCPUs"): a VM whose idle vCPUs halt at once (`haltpoll` with
    /// `guest_halt_poll_ns` 0) pays a hypervisor exit per hop.
    fn idle_polling() -> String {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .ok()
                .map(|s| s.trim().to_string())
        };
        match (
            read("/sys/devices/system/cpu/cpuidle/current_driver"),
            read("/sys/module/haltpoll/parameters/guest_halt_poll_ns"),
        ) {
            (Some(driver), Some(ns)) => format!(", cpuidle {driver} (guest_halt_poll_ns {ns})"),
            (Some(driver), None) => format!(", cpuidle {driver}"),
            _ => String::new(),
        }
    }

    /// Whether this is a KVM guest whose idle vCPUs halt at once (haltpoll driver, polling 0).
    fn guest_halt_polling_off() -> bool {
        std::fs::read_to_string("/sys/module/haltpoll/parameters/guest_halt_poll_ns")
            .is_ok_and(|ns| ns.trim() == "0")
            && std::fs::read_to_string("/sys/devices/system/cpu/cpuidle/current_driver")
                .is_ok_and(|d| d.trim() == "haltpoll")
    }

    /// The document's account of how each row is measured.
    const HOW: &str = "How: the direct baseline writes JSON-RPC lines to the fixture upstream's stdin and \
             reads its replies (blocking, one process). The runtime and peer rows send the same \
             calls with a minimal blocking HTTP/1.1 client on one keep-alive connection, so the \
             added latency is the cost of the path, not of a client library; the reqwest row \
             shows what an ordinary async client adds; the \"progress requested\" row sends the \
             same calls with a `progressToken` in `_meta` (as rmcp-based agents do on every call), \
             so each answer is an event stream over the worker's streaming call. Throughput, \
             tools/list and the fault rows use reqwest on tokio. The echo rows (direct, the runtime's \
             legacy, modern and progress rows, the architectural floor, the trivial HTTP server \
             and the peers) are measured in interleaved rounds, as many as there are rows after \
             the direct block: each round runs the direct block first, then every row once in \
             an order rotating each round, so each comes right after the direct block and in \
             every other place equally often; each block of timed calls follows 200 untimed \
             ones on a fresh connection, so all rows see the same machine. The floor is \
             `tutti-floor-front` (blocking HTTP/1.1, a thread per connection) → a Unix socket \
             with length-prefixed frames → `tutti-floor-worker` → the same fixture upstream over \
             stdio: the runtime's process layout without its work (no token check, no JSON \
             parsing beyond routing). The floor on the runtime's stack is the same chain and \
             frames on the stack the design fixes (`--stack tokio`: current-thread tokio \
             runtimes, hyper's HTTP/1 server with an axum router, the request parsed into a \
             `serde_json::Value`, its tool name's prefix stripped and serialized again, a pool of \
             idle worker connections, the upstream through `tokio::process`): the runtime \
             against it is the cost of its own code, it against the blocking floor the cost of \
             the stack. The trivial HTTP server answers a canned result itself; \
             \"own cost\" is a system's p50 minus its. mcp-hub runs offline (a fresh \
             marketplace cache) and is called over its HTTP+SSE transport (POST, `202`, the \
             answer on the event stream). ContextForge runs offline on its SQLite default in a fresh \
             directory, behind its own stdio bridge (`mcpgateway.translate`, Streamable HTTP), \
             registered as a gateway and called through a virtual server with a bearer token, \
             with loopback upstreams allowed, its rate limit off and stateful sessions (so it \
             keeps one upstream session per client session), 20 untimed calls per block; 1MCP \
             is not measured (its package cannot be installed here). \"CPU per call\" is the \
             on-CPU time over the rounds divided by the calls through the system, untimed ones \
             included: per process from `/proc/PID/stat` (utime + stime) for the runtime and the \
             floors, and for a peer per thread from `/proc/PID/task/*/schedstat` over its whole \
             process tree without the upstream. The RSS row sums VmRSS over the same trees (the \
             runtime's: kernel, frontend, shim manager, workers) after the echo rounds; the \
             peers' idle wake-ups are their trees' voluntary context switches over 60 s, 12 s \
             after the rounds, with no client connected. The other per-call rows: \
             percentiles over n timed calls after 200 untimed ones; the throughput rows count \
             every call of their window. The list_changed rows time a listener's \
             `subscriptions/listen` stream from a worker's SIGKILL (the fence) and from the \
             kernel's commit of a new generation (an upgrade of a 40-tool connector to another \
             tool set; the commit's time is the kernel's `committed` log line, written just after \
             the route change is published); the target is judged on the slower of the two. \
             `tutti up` to ready: five starts on fresh state directories after one untimed \
             start. Idle wake-ups: a fresh runtime with 2, then 50 fixture connectors, no call \
             and no change; each process's voluntary context switches (every thread's, a thread \
             that ended counting as one) over 60 s, counted once the one-off work after the start \
             has ended (each worker's start deadline, `startMs` 3 s there, and the kernel's \
             blocking threads, which end 10 s after their last use).\n\n";

    fn write_doc(path: &std::path::Path, r: &Report, smoke: bool) -> Result<()> {
        let mut s = String::new();
        s.push_str("# Benchmarks\n\nProduced by (one line; run it on a quiet machine):\n\n```sh\ncargo build --release --workspace --bins && scripts/install-test-tools && TUTTI_BIN_DIR=$PWD/target/release target/release/tutti-bench --write docs/BENCHMARKS.md\n```\n\n");
        s.push_str(&machine());
        s.push_str(HOW);
        s.push_str(&tables(r, smoke));
        if guest_halt_polling_off() {
            s.push_str(
                "\nGuest halt polling is off on this machine (`guest_halt_poll_ns` 0, the Linux \
                 default is 200000): every process hop of a call wakes a halted vCPU (an IPI and a \
                 VM exit); on our 2-vCPU benchmark VM that was about half of the runtime's CPU per \
                 call. See \
                 [PERFORMANCE.md](PERFORMANCE.md#the-frontend-optimised-for-speed-the-kernels-audit-writes-batched) for the same build measured both \
                 ways.\n",
            );
        }
        // The tool search section is written by `--tool-search`, not by this run: keep it.
        if let Ok(old) = std::fs::read_to_string(path)
            && let Some(at) = old.find(TOOL_SEARCH_SECTION)
        {
            s.push('\n');
            s.push_str(&old[at..]);
        }
        std::fs::write(path, s).with_context(|| format!("writing {}", path.display()))
    }

    /// The document's machine line: cores, CPU model, idle polling and the date.
    fn machine() -> String {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
            })
            .unwrap_or_else(|| "unknown CPU".into());
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0);
        let date = Command::new("date")
            .arg("-u")
            .arg("+%Y-%m-%d %H:%M UTC")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        format!(
            "Machine: {cores} cores, {cpu}{}. Date: {date}.\n\n",
            idle_polling()
        )
    }

    /// The document's two tables: the measurements, and the targets with their verdicts.
    fn tables(r: &Report, smoke: bool) -> String {
        let mut s = String::new();
        s.push_str("| measurement | result |\n|---|---|\n");
        for (what, value) in &r.rows {
            s.push_str(&format!("| {} | {} |\n", what.trim(), value));
        }
        s.push_str("\n## Targets\n\n| target | measured | verdict |\n|---|---|---|\n");
        for (what, measured, met) in &r.targets {
            s.push_str(&format!(
                "| {what} | {measured} | {} |\n",
                match (smoke, *met) {
                    (true, _) => "not judged (smoke run)",
                    (false, true) => "met",
                    (false, false) => "**missed**",
                }
            ));
        }
        s
    }

    /// The heading of the section `--tool-search` owns in BENCHMARKS.md.
    const TOOL_SEARCH_SECTION: &str = "## Tool search mode";
}

#[cfg(unix)]
fn main() -> anyhow::Result<()> {
    bench::main()
}

#[cfg(not(unix))]
fn main() {
    eprintln!("tutti-bench runs on Linux only (it reads /proc)");
}

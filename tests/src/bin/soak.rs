//! `tutti-soak`: the runtime under load and faults for a while, and what must hold through it.
//!
//! `cargo build --workspace --bins && scripts/install-test-tools && target/debug/tutti-soak
//!  --minutes 1` (CI runs that; `--seed N` repeats a run's choices, `--pace-ms` sets the pause
//! between one client's calls).
//!
//! A real runtime (`tutti up` on a temporary state dir) with five connectors: three on the
//! fixture over stdio, `mcp-server-time` from PyPI, and the fixture as a remote HTTP
//! upstream. Four clients call them for the whole run: 2025-06-18 and 2026-07-28 HTTP
//! clients, a `--tools search` session and the stdio bridge (`tutti mcp-stdio`). Meanwhile
//! the chaos (`soak/chaos.rs`) kills and stops workers, upgrades and uninstalls connectors,
//! reissues and revokes tokens, and in the first half kills the frontend and the kernel. The
//! table says what the calls came to and whether every invariant held (`soak/judge.rs`):
//! no hang, no answer from a fenced generation, no orphan, one audit record per call, flat
//! memory and descriptors over the second half; the exit status is 1 when one did not. The
//! rules are written out in docs/RELIABILITY.md.

#[cfg(unix)]
mod soak {
    mod audit;
    mod bridge;
    mod chaos;
    mod clients;
    mod judge;
    mod report;
    mod setup;
    mod slope;
    mod watch;
    mod world;

    use std::process::ExitCode;
    use std::sync::atomic::Ordering;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use anyhow::{Context, Result};
    use clap::Parser;
    use tutti_tests::{Runtime, RuntimeOptions};

    use self::audit::{Audit, Tail};
    use self::chaos::{Chaos, Plan, Rng};
    use self::setup::{Fleet, SESSIONS};
    use self::watch::Lives;
    use self::world::{Call, Shared, lock, now_ms};

    #[derive(Parser)]
    #[command(name = "tutti-soak")]
    struct Args {
        /// How long the clients call and the chaos runs (fractions allowed: 0.5).
        #[arg(long)]
        minutes: f64,
        /// The chaos generator's seed (printed by every run).
        #[arg(long)]
        seed: Option<u64>,
        /// Pause between two calls of one client, in ms.
        #[arg(long, default_value_t = 20)]
        pace_ms: u64,
        /// Also write every call (client, target, times, answer, who answered) to this file,
        /// one JSON object a line.
        #[arg(long)]
        dump: Option<std::path::PathBuf>,
    }

    /// Every call as a JSON line, for reading a run's details.
    fn dump(calls: &[Call], path: &std::path::Path) -> Result<()> {
        let mut text = String::new();
        for c in calls {
            let line = serde_json::json!({
                "client": c.client, "kind": format!("{:?}", c.kind), "target": c.target,
                "token": c.token, "startMs": c.start_ms, "endMs": c.end_ms,
                "answer": format!("{:?}", c.answer),
                "answerer": c.answerer.as_ref().map(|a| format!("{a:?}")),
            });
            text.push_str(&line.to_string());
            text.push('\n');
        }
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
    }

    /// The threads that watch the runtime while the run lasts.
    struct Watchers {
        lives: Arc<Mutex<Lives>>,
        audit: Arc<Mutex<Audit>>,
        tail: Arc<Mutex<Tail>>,
        threads: Vec<std::thread::JoinHandle<()>>,
    }

    fn watchers(shared: &Arc<Shared>) -> Watchers {
        let lives: Arc<Mutex<Lives>> = Arc::default();
        let audit: Arc<Mutex<Audit>> = Arc::default();
        let tail: Arc<Mutex<Tail>> = Arc::default();
        let threads = vec![
            watch::sampler(shared.clone(), lives.clone()),
            audit::tailer(shared.clone(), audit.clone(), tail.clone()),
        ];
        Watchers {
            lives,
            audit,
            tail,
            threads,
        }
    }

    /// The runtime with every connector ready and every session's token issued.
    fn prepare() -> Result<(Runtime, Fleet, Arc<Shared>)> {
        let mut rt = Runtime::start(RuntimeOptions::default());
        eprintln!("tutti-soak: state dir {}", rt.state_dir().display());
        let mut fleet = Fleet::start(rt.root().join("upstream-records"))?;
        setup::install_all(&mut rt, &mut fleet)?;
        let shared = Arc::new(Shared::new(
            rt.state_dir().to_path_buf(),
            rt.frontend_url().to_owned(),
            rt.pid().context("`tutti up` has no pid")?,
        ));
        for (session, _, _) in SESSIONS {
            setup::issue(&rt, &shared, session)?;
        }
        Ok((rt, fleet, shared))
    }

    /// Starts the clients, runs the chaos until `end`, stops the clients: every call made.
    fn load_and_chaos(
        chaos: &mut Chaos,
        shared: &Arc<Shared>,
        pace: Duration,
        end: Instant,
    ) -> Result<Vec<Call>> {
        let tokio = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let http: Vec<_> = SESSIONS
            .iter()
            .map(|(session, modern, search)| {
                let spec = clients::Spec {
                    session,
                    modern: *modern,
                    search: *search,
                    pace,
                };
                tokio.spawn(clients::run(spec, shared.clone()))
            })
            .collect();
        let bridge_client = bridge::start(shared);
        let s = shared.clone();
        let bridge = std::thread::spawn(move || bridge::run(bridge_client, s, pace));
        chaos.run(end);
        shared.stop.store(true, Ordering::Relaxed);
        let mut calls = Vec::new();
        for h in http {
            calls.extend(tokio.block_on(h).context("an HTTP client panicked")?);
        }
        calls.extend(
            bridge
                .join()
                .map_err(|_| anyhow::anyhow!("the bridge client panicked"))?,
        );
        Ok(calls)
    }

    /// Stops the runtime (SIGTERM) and counts every process seen during the run that is
    /// still there 5 s later.
    fn stop_and_sweep(chaos: &mut Chaos, shared: &Shared, lives: &Mutex<Lives>) {
        let kernel = shared.kernel_pid.load(Ordering::Relaxed);
        let zombies = tutti_tests::proc_tree::zombie_children(kernel);
        match chaos.rt.stop() {
            Some(status) if status.success() => {}
            other => shared.fault(format!("`tutti up` ended with {other:?} after SIGTERM")),
        }
        let seen: Vec<watch::Id> = lock(lives).keys().copied().collect();
        let left = watch::survivors(&seen, Duration::from_secs(5));
        if !left.is_empty() {
            let text = watch::describe(&left, &lock(lives));
            lock(&shared.orphans).push(format!("left after the runtime stopped: {text}"));
        }
        if !zombies.is_empty() {
            shared.fault(format!(
                "the kernel had unreaped children before it stopped: {zombies:?}"
            ));
        }
    }

    /// Keeps the runtime's logs of a failed run where they can be read.
    fn keep_logs(state: &std::path::Path, seed: u64) -> Option<std::path::PathBuf> {
        let from = tutti_rules::state_dir::layout::logs(state);
        let to = std::env::temp_dir().join(format!("tutti-soak-logs-{seed}"));
        std::fs::create_dir_all(&to).ok()?;
        for entry in std::fs::read_dir(&from).ok()?.flatten() {
            let _ = std::fs::copy(entry.path(), to.join(entry.file_name()));
        }
        Some(to)
    }

    pub fn main() -> Result<ExitCode> {
        let args = Args::parse();
        let command = format!("tutti-soak --minutes {}", args.minutes);
        let rng = Rng::new(args.seed);
        let seed = rng.seed();
        eprintln!("tutti-soak: seed {seed}; starting the runtime and its connectors");
        let (rt, fleet, shared) = prepare()?;
        let w = watchers(&shared);
        let run = Duration::from_secs_f64(args.minutes.max(0.1) * 60.0);
        let start = Instant::now();
        let end = start + run;
        let kernels = (args.minutes * 0.4).round().max(1.0) as usize;
        let frontends = args.minutes.round().max(1.0) as usize;
        let plan = Plan::new(start, end, kernels, frontends);
        let mut chaos = Chaos::new(rt, fleet, shared.clone(), w.lives.clone(), rng, plan);
        let start_ms = now_ms();
        eprintln!("tutti-soak: calling and faulting for {run:?}");
        let calls = load_and_chaos(
            &mut chaos,
            &shared,
            Duration::from_millis(args.pace_ms),
            end,
        )?;
        let end_ms = now_ms();
        if let Some(path) = &args.dump {
            dump(&calls, path)?;
        }
        for t in w.threads {
            let _ = t.join();
        }
        stop_and_sweep(&mut chaos, &shared, &w.lives);
        lock(&w.tail).step(&audit::path(&shared.state_dir), &mut lock(&w.audit));
        let records = shared.state_dir.with_file_name("upstream-records");
        let (echoes, twice) = setup::received_twice(&records);
        let (audit, lives) = (lock(&w.audit), lock(&w.lives));
        let (kernel_kills, frontend_deaths) =
            (lock(&shared.kernel_kills), lock(&shared.frontend_deaths));
        let (tokens, orphans) = (lock(&shared.tokens), lock(&shared.orphans));
        let (faults, actions) = (lock(&shared.faults), lock(&shared.actions));
        let facts = report::Facts {
            command,
            seconds: run.as_secs(),
            seed,
            calls: &calls,
            audit: &audit,
            kernel_kills: &kernel_kills,
            frontend_deaths: &frontend_deaths,
            revoked: &tokens.revoked,
            orphans: &orphans,
            faults: &faults,
            actions: &actions,
            lives: &lives,
            upstream_echoes: echoes,
            upstream_twice: &twice,
            half: (start_ms + (end_ms - start_ms) / 2, end_ms),
        };
        let (table, held) = report::report(&facts);
        println!("{table}");
        if held {
            return Ok(ExitCode::SUCCESS);
        }
        if let Some(dir) = keep_logs(&shared.state_dir, seed) {
            eprintln!(
                "tutti-soak: an invariant failed; the runtime's logs are in {}",
                dir.display()
            );
        }
        Ok(ExitCode::FAILURE)
    }
}

#[cfg(unix)]
fn main() -> anyhow::Result<std::process::ExitCode> {
    soak::main()
}

#[cfg(not(unix))]
fn main() {
    eprintln!("tutti-soak sends Unix signals to the runtime's processes: Unix only");
    std::process::exit(2);
}

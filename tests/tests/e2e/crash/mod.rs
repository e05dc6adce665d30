//! Crash consistency at every write: the kernel is SIGKILLed at random moments while a
//! command changes what is installed or connected (install, upgrade, uninstall, connect,
//! disconnect through the CLI), while it is at rest or busy with a worker's first offer (the
//! commit and the pin), and while it starts again. After every kill `tutti up` starts on the
//! same state dir and the invariants of `check.rs` are checked: the registry parses, every
//! connector is wholly at its state before or after the command (after it when the command
//! had succeeded), every release copy is whole, nothing of a copy or an atomic write is left,
//! every secrets file belongs to an installed, connected connector, every audit line is whole.
//! `windows.rs` builds each state a kill between two writes leaves, one by one.
//!
//! `TUTTI_CRASH_ITERATIONS` sets the number of kills (default [`DEFAULT_ITERATIONS`], sized
//! for CI); `TUTTI_CRASH_SEED` replays a sequence (the seed is printed).

mod check;
mod model;
mod oauth;
mod windows;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tutti_tests::{Runtime, RuntimeOptions};

use check::Came;
use model::{Op, Sources, State};
use tutti_tests::rng::Rng;

/// Kills per run unless `TUTTI_CRASH_ITERATIONS` says otherwise.
const DEFAULT_ITERATIONS: usize = 200;
/// How long a kernel may take to listen after `tutti up`.
const KERNEL_START: Duration = Duration::from_secs(20);

/// How long each kind of command takes, as last seen: a kill is drawn uniformly from a bit
/// more than that, so it lands anywhere in the command (or just after it).
struct Spans(BTreeMap<&'static str, Duration>);

impl Spans {
    /// The first guess for each kind, in milliseconds.
    fn new(first: &[(&'static str, u64)]) -> Spans {
        Spans(
            first
                .iter()
                .map(|(kind, ms)| (*kind, Duration::from_millis(*ms)))
                .collect(),
        )
    }

    fn draw(&self, kind: &str, rng: &mut Rng) -> Duration {
        let span = self
            .0
            .get(kind)
            .copied()
            .unwrap_or(Duration::from_millis(200));
        let micros = span.as_micros() as u64 * 6 / 5;
        Duration::from_micros(rng.below(micros.max(1)))
    }

    fn seen(&mut self, kind: &'static str, took: Duration) {
        let span = self.0.entry(kind).or_insert(took);
        *span = (*span * 7 + took * 3) / 10;
    }
}

/// What became of the command the kill interrupted.
struct Outcome {
    /// The command exited 0 before the kill: its change must have survived.
    acked: bool,
    /// How long it took, when it finished before the kill.
    took: Option<Duration>,
    /// It failed before the kill (on its own: the test's mistake).
    failed: bool,
}

/// Waits `delay`, noting when `ended` first says the command ended (and whether it
/// succeeded), then SIGKILLs the kernel.
fn kill_after(
    rt: &mut Runtime,
    delay: Duration,
    mut ended: impl FnMut() -> Option<bool>,
) -> Outcome {
    let start = Instant::now();
    let mut finished = None;
    while let Some(left) = delay.checked_sub(start.elapsed()) {
        if finished.is_none()
            && let Some(ok) = ended()
        {
            finished = Some((start.elapsed(), ok));
        }
        std::thread::sleep(left.min(Duration::from_millis(1)));
    }
    rt.kill();
    Outcome {
        acked: finished.is_some_and(|(_, ok)| ok),
        took: finished.map(|(t, _)| t),
        failed: finished.is_some_and(|(_, ok)| !ok),
    }
}

/// Runs `tutti ARGS` with `env` and SIGKILLs the kernel `delay` after it began; a command
/// that failed on its own before the kill fails the test with its output.
fn command_killed(
    rt: &mut Runtime,
    args: &[&str],
    env: &[(String, String)],
    delay: Duration,
) -> Outcome {
    let mut child = rt
        .tutti_cmd(args)
        .envs(env.iter().cloned())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run tutti {}: {e}", args.join(" ")));
    let out = kill_after(rt, delay, || {
        Some(child.try_wait().ok().flatten()?.success())
    });
    let output = child.wait_with_output();
    if out.failed
        && let Ok(o) = output
    {
        panic!(
            "tutti {} failed before the kill:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    out
}

/// Runs `op` and SIGKILLs the kernel `delay` after it began (for [`Op::Starting`], after
/// `tutti up` was started again).
fn interrupt(rt: &mut Runtime, op: &Op, sources: &Sources, delay: Duration) -> Outcome {
    if let Op::Starting = op {
        rt.kill();
        rt.restart_unwaited();
    }
    match op.command(sources) {
        Some((args, env)) => {
            let argv: Vec<&str> = args.iter().map(String::as_str).collect();
            command_killed(rt, &argv, &env, delay)
        }
        None => kill_after(rt, delay, || None),
    }
}

/// Per kind of command: how often the state came out unchanged, old, between, new, and how
/// often the command had succeeded before the kill.
#[derive(Default)]
struct Tally(BTreeMap<&'static str, [u32; 5]>);

impl Tally {
    fn note(&mut self, kind: &'static str, came: Came, acked: bool) {
        let row = self.0.entry(kind).or_default();
        row[came as usize] += 1;
        row[4] += u32::from(acked);
    }

    fn print(&self, what: &str, iterations: usize, wall: Duration, kernel_log: &str) {
        eprintln!("{what}: {iterations} kills in {:.1} s", wall.as_secs_f64());
        eprintln!(
            "{:<11} {:>5} {:>9} {:>5} {:>7} {:>5} {:>9}",
            "command", "kills", "unchanged", "old", "between", "new", "succeeded"
        );
        for (kind, [same, old, between, new, acked]) in &self.0 {
            let kills = same + old + between + new;
            eprintln!("{kind:<11} {kills:>5} {same:>9} {old:>5} {between:>7} {new:>5} {acked:>9}");
        }
        for (found, count) in finished_at_start(kernel_log) {
            eprintln!("finished at start: {found}: {count}");
        }
    }
}

/// The kernel log lines of a start finishing what a kill cut short: the texts such a line
/// holds, and what it counts as (the first row whose texts the line holds all).
const FINISHED_AT_START: [(&[&str], &str); 6] = [
    (
        &["removed a leftover of an earlier run", "/.tmp-"],
        "half-made release copies removed",
    ),
    (
        &["removed a leftover of an earlier run", ".tutti-"],
        "temp files of atomic writes removed",
    ),
    (
        &["removed a leftover of an earlier run", "/releases/"],
        "copies of uninstalled connectors removed",
    ),
    (
        &["deleted the secrets of a connector no longer"],
        "secrets of uninstalled or disconnected connectors deleted",
    ),
    (
        &["auth state set from the stored secrets"],
        "auth states set from secrets stored before the kill",
    ),
    (
        &["the audit log ended in a record a crash cut short"],
        "torn audit records cut",
    ),
];

/// What the kernel log says the starts finished of the commands the kills cut short.
fn finished_at_start(kernel_log: &str) -> BTreeMap<&'static str, usize> {
    let mut found = BTreeMap::new();
    for line in kernel_log.lines() {
        let row = FINISHED_AT_START
            .iter()
            .find(|(texts, _)| texts.iter().all(|t| line.contains(t)));
        if let Some((_, what)) = row {
            *found.entry(*what).or_default() += 1;
        }
    }
    found
}

/// The number of kills: the variable `var`, else `default`.
fn iterations(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Starts `tutti up` again and waits until the kernel accepts connections on its socket: it
/// binds it once the start-up (reclaiming leftovers included) is done. The frontend is not
/// waited for; nothing here needs it.
fn restart_kernel(rt: &mut Runtime) -> Duration {
    let began = Instant::now();
    rt.restart_unwaited();
    wait_listening(rt);
    began.elapsed()
}

/// Waits until the kernel `tutti up` started accepts connections on its socket.
fn wait_listening(rt: &mut Runtime) {
    let socket = rt.state_dir().join("run/kernel.sock");
    let deadline = Instant::now() + KERNEL_START;
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        if let Some(status) = rt.exited() {
            panic!("`tutti up` exited with {status}\n{}", rt.diagnostics());
        }
        assert!(
            Instant::now() < deadline,
            "the kernel did not listen within {KERNEL_START:?}\n{}",
            rt.diagnostics()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Checks every invariant after a start; the state now.
fn check_start(
    rt: &Runtime,
    old: &State,
    new: &State,
    acked: bool,
) -> Result<(Came, State), String> {
    let found = check::state_dir(rt.state_dir())?;
    let now = check::cli_connectors(rt.state_dir(), &found)?;
    let came = check::old_or_new(&now, old, None, new, acked)?;
    check::kernel_view(&rt.status_json(), &found)?;
    Ok((came, now))
}

#[test]
fn kernel_killed_at_random_points_leaves_every_connector_old_or_new() {
    let iterations = iterations("TUTTI_CRASH_ITERATIONS", DEFAULT_ITERATIONS);
    let mut rng = Rng::seeded("TUTTI_CRASH_SEED", "crash loop");
    let mut rt = Runtime::start(RuntimeOptions::default());
    let sources = Sources::write(&mut rt);
    let mut spans = Spans::new(&[
        ("install", 400),
        ("upgrade", 400),
        ("uninstall", 150),
        ("connect", 150),
        ("disconnect", 150),
        ("idle", 400),
        ("starting", 300),
    ]);
    let (mut state, mut tally) = (State::new(), Tally::default());
    let began = Instant::now();
    for i in 0..iterations {
        let op = Op::pick(&mut rng, &state, i);
        let delay = spans.draw(op.kind(), &mut rng);
        let out = interrupt(&mut rt, &op, &sources, delay);
        if let Some(took) = out.took {
            spans.seen(op.kind(), took);
        }
        let new = op.apply(&state);
        spans.seen("starting", restart_kernel(&mut rt));
        let (came, now) = check_start(&rt, &state, &new, out.acked)
            .unwrap_or_else(|e| kill_failed(&rt, i, &op, delay, out.acked, &e));
        tally.note(op.kind(), came, out.acked);
        state = now;
    }
    tally.print(
        "crash loop",
        iterations,
        began.elapsed(),
        &rt.log("kernel.log"),
    );
}

/// Ends a crash loop at the kill whose start broke an invariant, with what it interrupted and
/// the end of the kernel's log.
pub(super) fn kill_failed(
    rt: &Runtime,
    i: usize,
    op: &impl std::fmt::Debug,
    delay: Duration,
    acked: bool,
    e: &str,
) -> ! {
    panic!(
        "kill {i} ({op:?}, {delay:?} after it began, succeeded before: {acked}): {e}\nkernel log:\n{}",
        rt.log_tail("kernel.log", 30)
    )
}

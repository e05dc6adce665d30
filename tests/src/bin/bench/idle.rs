//! What an idle runtime costs a laptop: the wake-ups per second of each of its processes with
//! no call and no change, with 2 and with 50 connectors (`--smoke`: 2 and 5, a short window).
//! A wake-up is a voluntary context switch (`tutti_tests::proc_tree::Wakeups`). The window
//! opens once one-off work after the start has ended: each worker's start deadline timer
//! (`startMs` is 3 s here, plus the kernel's 2 s slack) and the kernel's blocking threads,
//! which end 10 s after their last use.

use std::time::Duration;

use anyhow::{Result, bail};
use serde_json::json;
use tutti_tests::{Runtime, RuntimeOptions, fixture_connector, proc_tree};

/// The target: at most one wake-up per 10 s, per process.
const MOST_PER_SECOND: f64 = 0.1;

struct Plan {
    sizes: [usize; 2],
    settle: Duration,
    window: Duration,
}

/// The measured rows (what, value) and the target (what, measured, met).
pub(super) struct IdleRows {
    pub(super) rows: Vec<(String, String)>,
    pub(super) target: (String, String, bool),
}

/// The rows and the target for both sizes, each on a fresh runtime.
pub(super) fn rows(smoke: bool) -> Result<IdleRows> {
    let plan = if smoke {
        Plan {
            sizes: [2, 5],
            settle: Duration::from_secs(6),
            window: Duration::from_secs(3),
        }
    } else {
        Plan {
            sizes: [2, 50],
            settle: Duration::from_secs(12),
            window: Duration::from_secs(60),
        }
    };
    let mut worst = 0.0_f64;
    let mut rows = Vec::new();
    for n in plan.sizes {
        let per_second = measure(n, &plan)?;
        worst = per_second.iter().map(|(_, w)| *w).fold(worst, f64::max);
        rows.push((
            format!("idle wake-ups per second, per process, {n} connectors"),
            describe(&per_second, plan.window),
        ));
    }
    let target = (
        "idle: every process wakes ≤ 0.1 times per second".to_string(),
        format!("{worst:.3}/s (the busiest process)"),
        worst <= MOST_PER_SECOND,
    );
    Ok(IdleRows { rows, target })
}

/// Each process's wake-ups per second over the window, by program name.
fn measure(n: usize, plan: &Plan) -> Result<Vec<(String, f64)>> {
    let mut rt = Runtime::start(RuntimeOptions::default());
    for i in 0..n {
        let mut manifest = fixture_connector(&format!("idle{i:02}"), &["--tools", "echo"]);
        manifest["timeouts"] = json!({"startMs": 3000});
        rt.install_ok(&manifest, &[]);
    }
    for i in 0..n {
        rt.wait_status(&format!("idle{i:02}"), "ready", Duration::from_secs(60));
    }
    std::thread::sleep(plan.settle);
    let Some(kernel) = rt.pid() else {
        bail!("the runtime is not running")
    };
    let procs = proc_tree::runtime_processes(kernel);
    let woke = proc_tree::wakeups_over(&procs, plan.window);
    rt.stop();
    if woke.len() != n + 3 {
        bail!(
            "expected {} processes (kernel, frontend, shim manager, {n} workers), measured {woke:?}",
            n + 3
        );
    }
    let secs = plan.window.as_secs_f64();
    Ok(woke
        .into_iter()
        .map(|(name, _, w)| (name, w as f64 / secs))
        .collect())
}

/// "kernel 0.000 · frontend 0.000 · shim manager 0.000 · workers mean 0.000, max 0.000 (n=2)".
fn describe(per_second: &[(String, f64)], window: Duration) -> String {
    let of = |program: &str| -> Vec<f64> {
        per_second
            .iter()
            .filter(|(name, _)| name == program)
            .map(|(_, w)| *w)
            .collect()
    };
    let one = |program: &str| of(program).first().copied().unwrap_or(f64::NAN);
    let workers = of("tutti-upstream-worker");
    let mean = workers.iter().sum::<f64>() / workers.len().max(1) as f64;
    let max = workers.iter().copied().fold(0.0, f64::max);
    format!(
        "kernel {:.3} · frontend {:.3} · shim manager {:.3} · workers mean {mean:.3}, max {max:.3} \
         (n={}) /s over {} s",
        one("tutti-kernel"),
        one("tutti-mcp-frontend"),
        one("tutti-shim-manager"),
        workers.len(),
        window.as_secs()
    )
}

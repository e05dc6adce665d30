//! What the runtime and each peer cost beside latency, side by side: the resident memory of
//! its process tree after the echo rounds, and the wake-ups of that tree over a window with no
//! call. A peer's tree is the processes the bench started for it and their descendants; the
//! fixture upstream is left out of every tree (each system runs the same one). The runtime's
//! is its kernel and the kernel's children (frontend, shim manager, workers). A wake-up is a
//! voluntary context switch (`tutti_tests::proc_tree::Wakeups`), as in `idle.rs`.

use std::path::Path;
use std::time::Duration;

use tutti_tests::proc_tree;

/// One system: its name in the rows and its processes.
pub(super) struct Tree {
    pub(super) name: &'static str,
    pub(super) pids: Vec<u32>,
}

/// `roots` and their live descendants, without the processes running `upstream`.
pub(super) fn tree(roots: &[u32], upstream: &Path) -> Vec<u32> {
    let mut pids = roots.to_vec();
    for &root in roots {
        pids.extend(proc_tree::descendants(root));
    }
    pids.sort_unstable();
    pids.dedup();
    let upstream = upstream
        .canonicalize()
        .unwrap_or_else(|_| upstream.to_path_buf());
    pids.retain(|&pid| {
        std::fs::read_link(format!("/proc/{pid}/exe"))
            .ok()
            .as_deref()
            != Some(upstream.as_path())
    });
    pids
}

/// The pause before the idle window (the end of the rounds' one-off work: Node's 5 s
/// keep-alive timers, the runtime's blocking threads, which end 10 s after their last use)
/// and the window: 3 s and 3 s for `--smoke`, else 12 s and 60 s.
fn timing(smoke: bool) -> (Duration, Duration) {
    if smoke {
        (Duration::from_secs(3), Duration::from_secs(3))
    } else {
        (Duration::from_secs(12), Duration::from_secs(60))
    }
}

/// The RSS row and the idle wake-ups row (blocking: it sleeps through the window).
pub(super) fn rows(trees: &[Tree], smoke: bool) -> Vec<(String, String)> {
    let (settle, window) = timing(smoke);
    let rss = trees
        .iter()
        .map(|t| {
            let kib: u64 = t
                .pids
                .iter()
                .map(|&p| proc_tree::rss_kib(p).unwrap_or(0))
                .sum();
            format!(
                "{} {:.1} MiB ({})",
                t.name,
                kib as f64 / 1024.0,
                processes(t.pids.len())
            )
        })
        .collect::<Vec<_>>()
        .join(" · ");
    std::thread::sleep(settle);
    let procs: Vec<(String, u32)> = trees
        .iter()
        .flat_map(|t| t.pids.iter().map(|&p| (t.name.to_owned(), p)))
        .collect();
    let woke = proc_tree::wakeups_over(&procs, window);
    let secs = window.as_secs_f64();
    let idle = trees
        .iter()
        .map(|t| {
            let mine: Vec<u64> = woke
                .iter()
                .filter(|(name, _, _)| name == t.name)
                .map(|(_, _, w)| *w)
                .collect();
            let busiest = mine.iter().copied().max().unwrap_or(0);
            format!(
                "{} {:.2} (busiest process {:.2})",
                t.name,
                mine.iter().sum::<u64>() as f64 / secs,
                busiest as f64 / secs
            )
        })
        .collect::<Vec<_>>()
        .join(" · ");
    vec![
        (
            "RSS after the echo rounds (process tree without the upstream, VmRSS summed)".into(),
            rss,
        ),
        (
            "idle wake-ups per second, process tree without the upstream".into(),
            format!(
                "{idle} over {} s, {} s after the rounds",
                window.as_secs(),
                settle.as_secs()
            ),
        ),
    ]
}

fn processes(n: usize) -> String {
    if n == 1 {
        "1 process".into()
    } else {
        format!("{n} processes")
    }
}

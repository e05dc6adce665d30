//! The runtime's processes as `/proc` shows them: each process by pid and start time (so a
//! reused pid is another process), its role, and once a second its resident set and open
//! descriptors; and the checks that a process is gone.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tutti_tests::proc_tree::{self, ProcInfo};

use super::world::{Shared, lock, nap, now_ms, worker_of};

/// One process: its pid and its start time (clock ticks after boot, `/proc/<pid>/stat`).
pub type Id = (u32, u64);

/// What `/proc/<pid>/stat` says about a process (read by [`proc_tree`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    pub pid: u32,
    pub ppid: u32,
    pub start: u64,
    live: bool,
}

impl Stat {
    fn of(p: &ProcInfo) -> Stat {
        Stat {
            pid: p.pid,
            ppid: p.ppid,
            start: p.start,
            live: !p.is_zombie(),
        }
    }

    pub fn id(&self) -> Id {
        (self.pid, self.start)
    }

    pub fn live(&self) -> bool {
        self.live
    }
}

pub fn stat(pid: u32) -> Option<Stat> {
    proc_tree::info(pid).map(|p| Stat::of(&p))
}

/// Whether the process `id` is still there and not a zombie.
pub fn alive(id: Id) -> bool {
    stat(id.0).is_some_and(|s| s.start == id.1 && s.live())
}

/// `roots` and all their descendants that live, parents before children.
pub fn tree(roots: &[u32]) -> Vec<Stat> {
    let procs: Vec<Stat> = proc_tree::snapshot().iter().map(Stat::of).collect();
    let mut children: HashMap<u32, Vec<Stat>> = HashMap::new();
    for p in &procs {
        children.entry(p.ppid).or_default().push(*p);
    }
    let mut out = Vec::new();
    let mut queue: VecDeque<Stat> = procs
        .iter()
        .filter(|p| roots.contains(&p.pid) && p.pid != 0)
        .copied()
        .collect();
    while let Some(p) = queue.pop_front() {
        if p.live() {
            out.push(p);
        }
        queue.extend(children.get(&p.pid).into_iter().flatten().copied());
    }
    out
}

/// Those of `ids` still alive after waiting up to `within` for them to go.
pub fn survivors(ids: &[Id], within: Duration) -> Vec<Id> {
    let deadline = Instant::now() + within;
    loop {
        let left: Vec<Id> = ids.iter().copied().filter(|id| alive(*id)).collect();
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One line per process: pid, role (if known) and command line.
pub fn describe(ids: &[Id], lives: &Lives) -> String {
    ids.iter()
        .map(|id| {
            let role = lives.get(id).map(|l| l.role.as_str()).unwrap_or("?");
            let cmd = proc_tree::info(id.0).map(|p| p.cmdline).unwrap_or_default();
            format!("pid {} ({role}): {cmd}", id.0)
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// One measurement of a process.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    pub at_ms: i64,
    pub rss_kib: u64,
    pub fds: u64,
    /// Whether every connector was installed and settled (see [`Shared::whole_at`]).
    pub whole: bool,
}

/// A process seen during the run and what it measured.
#[derive(Clone, Debug)]
pub struct Life {
    pub role: String,
    pub samples: Vec<Sample>,
}

pub type Lives = HashMap<Id, Life>;

/// A process's role: the runtime's binaries by name (a worker with its key), an upstream by
/// its worker's key, the bridge.
fn role_of(p: &Stat, shared: &Shared, lives: &Lives, parents: &HashMap<u32, Id>) -> String {
    if p.pid == shared.bridge_pid.load(Ordering::Relaxed) {
        return "bridge".into();
    }
    let name = proc_tree::info(p.pid)
        .map(|i| i.program())
        .unwrap_or_default();
    match name.as_str() {
        "tutti-kernel" | "tutti" => "kernel".into(),
        "tutti-mcp-frontend" => "frontend".into(),
        "tutti-shim-manager" => "shim-manager".into(),
        "tutti-upstream-worker" => match worker_of(p.pid) {
            Some((key, generation)) => {
                lock(&shared.workers).insert(p.pid, (key.clone(), generation));
                format!("worker {key}")
            }
            None => "worker".into(),
        },
        _ => {
            let parent = parents.get(&p.ppid).and_then(|id| lives.get(id));
            match parent.and_then(|l| l.role.strip_prefix("worker ")) {
                Some(key) => format!("upstream {key}"),
                None => name,
            }
        }
    }
}

fn fd_count(pid: u32) -> Option<u64> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64)
}

/// Samples the kernel's tree and the bridge once.
pub fn sample(shared: &Shared, lives: &Mutex<Lives>) {
    let roots = [
        shared.kernel_pid.load(Ordering::Relaxed),
        shared.bridge_pid.load(Ordering::Relaxed),
    ];
    let procs = tree(&roots);
    let parents: HashMap<u32, Id> = procs.iter().map(|p| (p.pid, p.id())).collect();
    let mut lives = lock(lives);
    for p in &procs {
        if !lives.contains_key(&p.id()) {
            let role = role_of(p, shared, &lives, &parents);
            lives.insert(
                p.id(),
                Life {
                    role,
                    samples: Vec::new(),
                },
            );
        }
        let (Some(rss_kib), Some(fds)) = (proc_tree::rss_kib(p.pid), fd_count(p.pid)) else {
            continue;
        };
        if let Some(life) = lives.get_mut(&p.id()) {
            let at_ms = now_ms();
            life.samples.push(Sample {
                at_ms,
                rss_kib,
                fds,
                whole: shared.whole_at(at_ms),
            });
        }
    }
}

/// Samples every second until the soak stops.
pub fn sampler(shared: Arc<Shared>, lives: Arc<Mutex<Lives>>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !shared.stopping() {
            sample(&shared, &lives);
            nap(&shared, Duration::from_secs(1));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_wrong_start_time_is_not() {
        let me = stat(std::process::id()).unwrap_or_else(|| panic!("no /proc/self/stat"));
        assert!(alive(me.id()));
        assert!(!alive((me.pid, me.start + 1)));
        let mine = tree(&[me.pid]);
        assert!(mine.iter().any(|p| p.pid == me.pid));
    }
}

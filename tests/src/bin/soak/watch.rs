//! The runtime's processes as `/proc` shows them: each process by pid and start time (so a
//! reused pid is another process), its role, and once a second its resident set and open
//! descriptors; and the checks that a process is gone.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::world::{Shared, lock, nap, now_ms, worker_of};

/// One process: its pid and its start time (clock ticks after boot, `/proc/<pid>/stat`).
pub type Id = (u32, u64);

/// What `/proc/<pid>/stat` says about a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    pub pid: u32,
    pub ppid: u32,
    pub state: char,
    pub start: u64,
}

impl Stat {
    pub fn id(&self) -> Id {
        (self.pid, self.start)
    }

    pub fn live(&self) -> bool {
        !matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// Parses a `/proc/<pid>/stat` line (the command name may hold spaces and parentheses).
pub fn parse_stat(line: &str) -> Option<Stat> {
    let pid = line.split_whitespace().next()?.parse().ok()?;
    let rest = &line[line.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(Stat {
        pid,
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
    })
}

pub fn stat(pid: u32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Whether the process `id` is still there and not a zombie.
pub fn alive(id: Id) -> bool {
    stat(id.0).is_some_and(|s| s.start == id.1 && s.live())
}

/// Every process now.
fn all() -> Vec<Stat> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(stat)
        .collect()
}

/// `roots` and all their descendants that live, parents before children.
pub fn tree(roots: &[u32]) -> Vec<Stat> {
    let procs = all();
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
            let cmd = std::fs::read(format!("/proc/{}/cmdline", id.0))
                .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
                .unwrap_or_default();
            format!("pid {} ({role}): {}", id.0, cmd.trim())
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
}

/// A process seen during the run and what it measured.
#[derive(Clone, Debug)]
pub struct Life {
    pub role: String,
    pub samples: Vec<Sample>,
}

pub type Lives = HashMap<Id, Life>;

/// The program's file name from `/proc/<pid>/cmdline`.
fn program(pid: u32) -> String {
    let bytes = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let first = bytes.split(|b| *b == 0).next().unwrap_or_default();
    let path = String::from_utf8_lossy(first).into_owned();
    std::path::Path::new(&path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or(path)
}

/// A process's role: the runtime's binaries by name (a worker with its key), an upstream by
/// its worker's key, the bridge.
fn role_of(p: &Stat, shared: &Shared, lives: &Lives, parents: &HashMap<u32, Id>) -> String {
    if p.pid == shared.bridge_pid.load(Ordering::Relaxed) {
        return "bridge".into();
    }
    let name = program(p.pid);
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
        let (Some(rss_kib), Some(fds)) = (tutti_tests::proc_tree::rss_kib(p.pid), fd_count(p.pid))
        else {
            continue;
        };
        if let Some(life) = lives.get_mut(&p.id()) {
            life.samples.push(Sample {
                at_ms: now_ms(),
                rss_kib,
                fds,
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
    fn stat_lines_with_odd_command_names_parse() {
        let line =
            "4242 (a (b) c) S 17 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 3 0 987654 1000 10";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                pid: 4242,
                ppid: 17,
                state: 'S',
                start: 987_654
            })
        );
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_is_alive_and_a_wrong_start_time_is_not() {
        let me = stat(std::process::id()).unwrap_or_else(|| panic!("no /proc/self/stat"));
        assert!(alive(me.id()));
        assert!(!alive((me.pid, me.start + 1)));
        let mine = tree(&[me.pid]);
        assert!(mine.iter().any(|p| p.pid == me.pid));
    }
}

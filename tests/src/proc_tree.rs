//! Live processes from `/proc` (Linux), for orphan and zombie checks. On other systems every
//! query answers "nothing found".
//!
//! "Live" means present and not a zombie (`Z`) or dead (`X`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// One process as seen in `/proc`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcInfo {
    pub pid: u32,
    pub ppid: u32,
    /// The state letter from `/proc/<pid>/stat` (`R`, `S`, `Z`, …).
    pub state: char,
    /// When it started, in clock ticks after boot (`/proc/<pid>/stat`'s 22nd field; 0 if
    /// unreadable): with the pid, it names one process even once the pid is reused.
    pub start: u64,
    /// argv joined with spaces.
    pub cmdline: String,
}

impl ProcInfo {
    pub fn is_zombie(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }

    /// The file name of its program (argv\[0\]): `tutti-kernel`, `node`, ….
    pub fn program(&self) -> String {
        let exe = self.cmdline.split(' ').next().unwrap_or_default();
        let name = std::path::Path::new(exe).file_name().unwrap_or_default();
        name.to_string_lossy().into_owned()
    }
}

/// Every process currently visible.
pub fn snapshot() -> Vec<ProcInfo> {
    imp::snapshot()
}

/// One process, if it exists (zombie or not).
pub fn info(pid: u32) -> Option<ProcInfo> {
    imp::read(pid)
}

/// The environment of `pid` as `(name, value)` pairs, if readable (Linux: same user).
pub fn environ(pid: u32) -> Option<Vec<(String, String)>> {
    imp::environ(pid)
}

/// The resident set of `pid` in KiB (`VmRSS` of `/proc/<pid>/status`), if readable.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The on-CPU time of `pid` in ns: the first field of `/proc/PID/task/TID/schedstat`, summed
/// over its threads (nanosecond precision, where `/proc/PID/stat` counts 10 ms ticks). A thread
/// that has ended is no longer counted; `None` when the process is gone.
pub fn on_cpu_ns(pid: u32) -> Option<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut sum = 0;
    for task in tasks.flatten() {
        let stat = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
        sum += stat
            .split_whitespace()
            .next()
            .and_then(|ns| ns.parse::<u64>().ok())
            .unwrap_or(0);
    }
    Some(sum)
}

/// The wake-ups of one process so far: each thread's `voluntary_ctxt_switches` (from
/// `/proc/PID/task/*/status`), each one a wake-up from a wait. Compare two with
/// [`Wakeups::since`].
#[derive(Clone, Debug, Default)]
pub struct Wakeups(HashMap<u32, u64>);

impl Wakeups {
    /// Those of `pid` now; `None` when the process is gone.
    pub fn of(pid: u32) -> Option<Wakeups> {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
        let mut threads = HashMap::new();
        for task in tasks.flatten() {
            let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else {
                continue;
            };
            let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
            let switches = status
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse::<u64>().ok());
            if let Some(n) = switches {
                threads.insert(tid, n);
            }
        }
        Some(Wakeups(threads))
    }

    /// The wake-ups between `earlier` and these: a thread's growth, all of a thread started
    /// since, and one for each thread that ended since (it woke to end; its count is gone
    /// with it, so a plain sum over the threads would shrink).
    pub fn since(&self, earlier: &Wakeups) -> u64 {
        let grown: u64 = self
            .0
            .iter()
            .map(|(tid, n)| n.saturating_sub(earlier.0.get(tid).copied().unwrap_or(0)))
            .sum();
        let ended = earlier.0.keys().filter(|t| !self.0.contains_key(t)).count();
        grown + ended as u64
    }
}

/// (Rss, Pss, Private) of a process in KiB, from `/proc/<pid>/smaps_rollup`: PSS divides
/// each shared page among the processes that map it, the private part (USS) leaves them out.
pub fn smaps_kib(pid: u32) -> Option<(u64, u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let field = |name: &str| -> u64 {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Some((
        field("Rss:"),
        field("Pss:"),
        field("Private_Clean:") + field("Private_Dirty:"),
    ))
}

/// The runtime's own processes: the kernel `kernel` and its children (frontend, shim manager,
/// workers), each with its program's file name (`tutti-kernel`, `tutti-mcp-frontend`, …).
/// Upstreams, the workers' children, are not among them.
pub fn runtime_processes(kernel: u32) -> Vec<(String, u32)> {
    let procs = snapshot();
    procs
        .iter()
        .filter(|p| !p.is_zombie() && (p.pid == kernel || p.ppid == kernel))
        .map(|p| (p.program(), p.pid))
        .collect()
}

/// The wake-ups of each of `procs` (name, pid) over `window`, measured side by side; a
/// process gone by the end is left out.
pub fn wakeups_over(procs: &[(String, u32)], window: Duration) -> Vec<(String, u32, u64)> {
    let before: Vec<Option<Wakeups>> = procs.iter().map(|(_, pid)| Wakeups::of(*pid)).collect();
    std::thread::sleep(window);
    procs
        .iter()
        .zip(before)
        .filter_map(|((name, pid), before)| {
            let woke = Wakeups::of(*pid)?.since(&before?);
            Some((name.clone(), *pid, woke))
        })
        .collect()
}

/// Whether `pid` exists and is not a zombie.
pub fn is_alive(pid: u32) -> bool {
    info(pid).is_some_and(|p| !p.is_zombie())
}

/// Live pids whose own command line, or an ancestor's, contains any of `needles` (e.g. the
/// state dir, or the fixture binary's path). The calling process and its ancestors are never
/// included.
pub fn live_matching(needles: &[&str]) -> Vec<u32> {
    let procs = snapshot();
    let by_pid: HashMap<u32, &ProcInfo> = procs.iter().map(|p| (p.pid, p)).collect();
    let me = std::process::id();
    let mut own_ancestry = vec![me];
    let mut cur = me;
    while let Some(p) = by_pid.get(&cur) {
        if p.ppid == 0 || own_ancestry.contains(&p.ppid) {
            break;
        }
        own_ancestry.push(p.ppid);
        cur = p.ppid;
    }
    let matches = |p: &ProcInfo| {
        needles
            .iter()
            .any(|n| !n.is_empty() && p.cmdline.contains(n))
    };
    let mut out: Vec<u32> = procs
        .iter()
        .filter(|p| !p.is_zombie() && !own_ancestry.contains(&p.pid))
        .filter(|p| {
            let mut cur = Some(*p);
            let mut hops = 0;
            while let Some(q) = cur {
                if matches(q) {
                    return true;
                }
                hops += 1;
                if hops > 64 || q.ppid == 0 {
                    break;
                }
                cur = by_pid.get(&q.ppid).copied();
            }
            false
        })
        .map(|p| p.pid)
        .collect();
    out.sort_unstable();
    out
}

/// Live descendants of `pid` (children, grandchildren, …), not including `pid`.
pub fn descendants(pid: u32) -> Vec<u32> {
    let procs = snapshot();
    let mut out = Vec::new();
    let mut frontier = vec![pid];
    while let Some(parent) = frontier.pop() {
        for p in procs.iter().filter(|p| p.ppid == parent) {
            if !out.contains(&p.pid) && p.pid != pid {
                out.push(p.pid);
                frontier.push(p.pid);
            }
        }
    }
    out.retain(|p| is_alive(*p));
    out.sort_unstable();
    out
}

/// Zombie children of `pid` (exited but never reaped by it).
pub fn zombie_children(pid: u32) -> Vec<u32> {
    snapshot()
        .into_iter()
        .filter(|p| p.ppid == pid && p.is_zombie())
        .map(|p| p.pid)
        .collect()
}

/// Waits until none of `pids` is alive; returns the survivors (empty on success).
pub fn wait_gone(pids: &[u32], timeout: Duration) -> Vec<u32> {
    let deadline = Instant::now() + timeout;
    loop {
        let alive: Vec<u32> = pids.iter().copied().filter(|p| is_alive(*p)).collect();
        if alive.is_empty() || Instant::now() >= deadline {
            return alive;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Human-readable lines `pid ppid state cmdline` for failure messages.
pub fn describe(pids: &[u32]) -> String {
    pids.iter()
        .map(|p| match info(*p) {
            Some(i) => format!("{} {} {} {}", i.pid, i.ppid, i.state, i.cmdline),
            None => format!("{p} <gone>"),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Parses `/proc/<pid>/stat` content: `(ppid, state)`. The command name may contain spaces and
/// parentheses, so fields are read after the last `)`.
pub fn parse_stat(stat: &str) -> Option<(u32, char)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((ppid, state))
}

/// The start time in `/proc/<pid>/stat` content: clock ticks after boot (field 22, read after
/// the last `)` like [`parse_stat`]).
pub fn parse_start(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(target_os = "linux")]
mod imp {
    use super::{ProcInfo, parse_start, parse_stat};

    pub(super) fn snapshot() -> Vec<ProcInfo> {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter_map(read)
            .collect()
    }

    pub(super) fn environ(pid: u32) -> Option<Vec<(String, String)>> {
        let bytes = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
        Some(
            String::from_utf8_lossy(&bytes)
                .split('\0')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        )
    }

    pub(super) fn read(pid: u32) -> Option<ProcInfo> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (ppid, state) = parse_stat(&stat)?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| {
                String::from_utf8_lossy(&b)
                    .split('\0')
                    .filter(|s| !s.is_empty())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default();
        Some(ProcInfo {
            pid,
            ppid,
            state,
            start: parse_start(&stat).unwrap_or(0),
            cmdline,
        })
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use super::ProcInfo;

    pub(super) fn snapshot() -> Vec<ProcInfo> {
        Vec::new()
    }

    pub(super) fn read(_pid: u32) -> Option<ProcInfo> {
        None
    }

    pub(super) fn environ(_pid: u32) -> Option<Vec<(String, String)>> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_command_names() {
        assert_eq!(parse_stat("12 (a b) c)) S 7 12 12 0"), Some((7, 'S')));
        assert_eq!(parse_stat("13 (x) Z 1 0"), Some((1, 'Z')));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn reads_the_start_time_after_odd_command_names() {
        let line =
            "4242 (a (b) c) S 17 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 3 0 987654 1000 10";
        assert_eq!(parse_stat(line), Some((17, 'S')));
        assert_eq!(parse_start(line), Some(987_654));
        assert_eq!(parse_start("garbage"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn sees_this_process_and_a_child() {
        assert!(is_alive(std::process::id()));
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn sleep: {e}"));
        let pid = child.id();
        assert!(descendants(std::process::id()).contains(&pid));
        assert!(live_matching(&["sleep 30"]).contains(&pid));
        let _ = child.kill();
        // Killed but not yet reaped: a zombie, so not alive.
        assert!(wait_gone(&[pid], Duration::from_secs(5)).is_empty());
        assert!(zombie_children(std::process::id()).contains(&pid));
        let _ = child.wait();
        assert!(info(pid).is_none() || !zombie_children(std::process::id()).contains(&pid));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn counts_this_process_on_cpu_time() {
        let me = std::process::id();
        let before = on_cpu_ns(me).unwrap_or_else(|| panic!("no schedstat for this process"));
        let start = Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(50) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let after = on_cpu_ns(me).unwrap_or(0);
        // 50 ms of spinning shows as at least 10 ms on the CPU, even on a loaded machine.
        assert!(after >= before + 10_000_000, "{before} → {after} ns ({x})");
        assert_eq!(on_cpu_ns(u32::MAX), None);
    }
}

//! The faults, one at a time on the soak's main thread while the clients call: SIGKILL of a
//! worker, SIGSTOP of a worker for longer than `callMs`, upgrades, uninstalls (installed
//! again a few seconds later), token reissues and revocations (reissued a few seconds
//! later), and in the first half of the run SIGKILLs of the frontend and of the kernel
//! (`tutti up` again at once). The second half keeps the kernel and frontend alive, so their
//! memory and descriptors can be measured under the remaining faults.
//!
//! After each kill the processes that must go with the victim are checked: a worker's
//! upstream, a kernel's whole tree. Whatever survives is an orphan.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use tutti_tests::Runtime;
pub use tutti_tests::rng::Rng;

use super::setup::{self, CHURNED, Fleet, REMOVABLE, SESSIONS};
use super::watch::{self, Id, Lives};
use super::world::{CALL_MS, Outage, Shared, lock, nap, now_ms};

/// Something the chaos does later: install an uninstalled connector again, issue a revoked
/// session's token again.
enum Later {
    Reinstall(&'static str),
    Reissue(&'static str),
}

/// When the first half's kernel and frontend kills happen.
pub struct Plan {
    pub kernel_kills: Vec<Instant>,
    pub frontend_kills: Vec<Instant>,
}

impl Plan {
    /// `kernels` and `frontends` kills spread over the first half of `[start, end]`.
    pub fn new(start: Instant, end: Instant, kernels: usize, frontends: usize) -> Plan {
        let half = (end - start) / 2;
        let spread = |n: usize, offset: f64| -> Vec<Instant> {
            (0..n)
                .map(|i| start + half.mul_f64((i as f64 + offset) / n as f64))
                .collect()
        };
        Plan {
            kernel_kills: spread(kernels, 0.6),
            frontend_kills: spread(frontends, 0.25),
        }
    }
}

pub struct Chaos {
    /// Dropped before `rt` (fields drop in order): the remote fixture records under the
    /// runtime's temporary root, so the runtime's sweep for leftovers would name it as one.
    pub fleet: Fleet,
    pub rt: Runtime,
    shared: Arc<Shared>,
    lives: Arc<Mutex<Lives>>,
    rng: Rng,
    plan: Plan,
    later: Vec<(Instant, Later)>,
    uninstalled: HashSet<&'static str>,
}

fn signal(pid: u32, sig: Signal) {
    if let Ok(p) = i32::try_from(pid) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), sig);
    }
}

impl Chaos {
    pub fn new(
        rt: Runtime,
        fleet: Fleet,
        shared: Arc<Shared>,
        lives: Arc<Mutex<Lives>>,
        rng: Rng,
        plan: Plan,
    ) -> Chaos {
        Chaos {
            rt,
            fleet,
            shared,
            lives,
            rng,
            plan,
            later: Vec::new(),
            uninstalled: HashSet::new(),
        }
    }

    /// Faults until `end`, then whatever is still owed (installs, tokens).
    pub fn run(&mut self, end: Instant) {
        while Instant::now() < end && !self.shared.stopping() {
            let pause = Duration::from_millis(700 + self.rng.below(600));
            nap(
                &self.shared,
                pause.min(end.saturating_duration_since(Instant::now())),
            );
            self.do_what_is_due(false);
            if take_due(&mut self.plan.kernel_kills) {
                self.kill_kernel();
            } else if take_due(&mut self.plan.frontend_kills) {
                self.kill_frontend();
            } else if Instant::now() < end {
                self.random_fault();
            }
        }
        self.do_what_is_due(true);
    }

    fn do_what_is_due(&mut self, all: bool) {
        let now = Instant::now();
        let (due, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.later)
            .into_iter()
            .partition(|(at, _)| all || *at <= now);
        self.later = rest;
        for (_, what) in due {
            match what {
                Later::Reinstall(key) => {
                    if let Err(e) = self.fleet.install(&mut self.rt, key) {
                        self.shared.fault(format!("installing {key} again: {e:#}"));
                    }
                    self.uninstalled.remove(key);
                    if self.uninstalled.is_empty() {
                        self.shared.reinstalled();
                    }
                }
                Later::Reissue(session) => self.issue(session),
            }
        }
    }

    fn issue(&mut self, session: &'static str) {
        if let Err(e) = setup::issue(&self.rt, &self.shared, session) {
            self.shared.fault(format!("{e:#}"));
        }
    }

    fn random_fault(&mut self) {
        // Weights: worker SIGKILL 4, SIGSTOP 1, upgrade 2, uninstall 1, reissue 2, revoke 1.
        match self.rng.below(11) {
            0..=3 => self.kill_worker(),
            4 => self.stop_worker(),
            5 | 6 => self.upgrade(),
            7 => self.uninstall(),
            8 | 9 => {
                let (session, _, _) = SESSIONS[self.rng.index(SESSIONS.len())];
                self.issue(session);
                self.shared.count("token reissued");
            }
            _ => self.revoke(),
        }
    }

    /// A live worker of a churned connector, with its process id.
    fn victim(&mut self) -> Option<(u32, String, Id)> {
        let workers: Vec<_> = self
            .rt
            .workers()
            .into_iter()
            .filter(|w| CHURNED.contains(&w.key.as_str()))
            .collect();
        if workers.is_empty() {
            return None;
        }
        let w = &workers[self.rng.index(workers.len())];
        let id = watch::stat(w.pid)?.id();
        Some((w.pid, w.key.clone(), id))
    }

    fn kill_worker(&mut self) {
        let Some((pid, key, id)) = self.victim() else {
            return;
        };
        let upstreams: Vec<Id> = watch::tree(&[pid])
            .iter()
            .map(|p| p.id())
            .filter(|i| *i != id)
            .collect();
        signal(pid, Signal::SIGKILL);
        self.shared.count("worker SIGKILL");
        if !watch::survivors(&[id], Duration::from_secs(2)).is_empty() {
            self.shared
                .fault(format!("SIGKILL did not end worker {pid} of {key}"));
        }
        let left = watch::survivors(&upstreams, Duration::from_secs(3));
        self.orphans(
            &left,
            &format!("the upstream of {key}'s killed worker {pid}"),
        );
    }

    fn orphans(&self, left: &[Id], what: &str) {
        if !left.is_empty() {
            let lives = lock(&self.lives);
            lock(&self.shared.orphans).push(format!(
                "{what} outlived it by 3 s or more: {}",
                watch::describe(left, &lives)
            ));
        }
    }

    fn stop_worker(&mut self) {
        let Some((pid, _, id)) = self.victim() else {
            return;
        };
        signal(pid, Signal::SIGSTOP);
        self.shared.count("worker SIGSTOP > callMs");
        // Always continued, even when the soak is stopping.
        let until = Instant::now() + Duration::from_millis(CALL_MS + 1000);
        while Instant::now() < until {
            std::thread::sleep(Duration::from_millis(100));
        }
        if watch::alive(id) {
            signal(pid, Signal::SIGCONT);
        }
    }

    fn upgrade(&mut self) {
        let keys: Vec<&'static str> = CHURNED
            .into_iter()
            .filter(|k| !self.uninstalled.contains(k))
            .collect();
        let key = keys[self.rng.index(keys.len())];
        match self.fleet.install(&mut self.rt, key) {
            Ok(()) => self.shared.count("upgrade"),
            Err(e) => self.shared.fault(format!("upgrading {key}: {e:#}")),
        }
    }

    fn uninstall(&mut self) {
        let keys: Vec<&'static str> = REMOVABLE
            .into_iter()
            .filter(|k| !self.uninstalled.contains(k))
            .collect();
        if keys.is_empty() {
            return;
        }
        let key = keys[self.rng.index(keys.len())];
        // Before the command: its connections close while it runs.
        self.shared.uninstalled();
        let out = self.rt.tutti(&["connector", "uninstall", key]);
        if !out.status.success() {
            if self.uninstalled.is_empty() {
                self.shared.reinstalled();
            }
            self.shared.fault(format!(
                "uninstall of {key} failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
            return;
        }
        self.shared.count("uninstall");
        self.uninstalled.insert(key);
        self.later.push((
            Instant::now() + Duration::from_secs(3),
            Later::Reinstall(key),
        ));
    }

    fn revoke(&mut self) {
        let (session, _, _) = SESSIONS[self.rng.index(SESSIONS.len())];
        if lock(&self.shared.tokens).held(session).token.is_none() {
            return;
        }
        match setup::revoke(&self.rt, &self.shared, session) {
            Ok(()) => {
                self.shared.count("token revoke");
                self.later.push((
                    Instant::now() + Duration::from_secs(2),
                    Later::Reissue(session),
                ));
            }
            Err(e) => self.shared.fault(format!("{e:#}")),
        }
    }

    fn kill_frontend(&mut self) {
        let Some(pid) = self.rt.frontend_pid() else {
            self.shared
                .fault("no frontend to kill (run/frontend.json)".into());
            return;
        };
        let Some(id) = watch::stat(pid).map(|s| s.id()) else {
            return;
        };
        let before = now_ms();
        signal(pid, Signal::SIGKILL);
        self.shared.count("frontend SIGKILL");
        if !watch::survivors(&[id], Duration::from_secs(2)).is_empty() {
            self.shared
                .fault(format!("SIGKILL did not end frontend {pid}"));
        }
        lock(&self.shared.frontend_deaths).push((before, now_ms()));
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.rt.frontend_pid().is_none_or(|p| p == pid) {
            if Instant::now() > deadline {
                self.shared
                    .fault("no new frontend within 10 s of killing the last one".into());
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn kill_kernel(&mut self) {
        let from_ms = now_ms();
        lock(&self.shared.outages).push(Outage {
            from_ms,
            to_ms: None,
        });
        let kernel = self.shared.kernel_pid.load(Ordering::Relaxed);
        let tree: Vec<Id> = watch::tree(&[kernel]).iter().map(|p| p.id()).collect();
        let at = now_ms();
        lock(&self.shared.kernel_kills).push(at);
        self.rt.kill();
        // Tokens end with their kernel: refused from the moment it is gone.
        let gone = now_ms();
        {
            let mut book = lock(&self.shared.tokens);
            for s in book.sessions() {
                book.end(s, gone);
            }
        }
        self.shared.count("kernel SIGKILL + tutti up");
        let left = watch::survivors(&tree, Duration::from_secs(3));
        self.orphans(&left, &format!("a process of killed kernel {kernel}"));
        lock(&self.shared.frontend_deaths).push((at, now_ms()));
        self.bring_back();
        let to = now_ms();
        if let Some(o) = lock(&self.shared.outages).last_mut() {
            o.to_ms = Some(to);
        }
    }

    /// `tutti up` again, the new URL and kernel pid shared, every session's token issued again.
    fn bring_back(&mut self) {
        let rt = &mut self.rt;
        let up = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rt.restart()));
        if up.is_err() {
            self.shared
                .fault("`tutti up` did not come back after the kernel's SIGKILL".into());
            self.shared.stop.store(true, Ordering::Relaxed);
            return;
        }
        if let Ok(mut url) = self.shared.url.write() {
            *url = self.rt.frontend_url().to_owned();
        }
        self.shared
            .kernel_pid
            .store(self.rt.pid().unwrap_or(0), Ordering::Relaxed);
        for (session, _, _) in SESSIONS {
            if !self
                .later
                .iter()
                .any(|(_, l)| matches!(l, Later::Reissue(s) if *s == session))
            {
                self.issue(session);
            }
        }
    }
}

/// Whether the first planned time has come (and takes it off the plan).
fn take_due(plan: &mut Vec<Instant>) -> bool {
    if plan.first().is_some_and(|t| *t <= Instant::now()) {
        plan.remove(0);
        true
    } else {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kills_are_planned_in_the_first_half_only() {
        let start = Instant::now();
        let end = start + Duration::from_secs(60);
        let p = Plan::new(start, end, 1, 2);
        let half = start + Duration::from_secs(30);
        assert_eq!(p.kernel_kills.len(), 1);
        assert_eq!(p.frontend_kills.len(), 2);
        assert!(
            p.kernel_kills
                .iter()
                .chain(&p.frontend_kills)
                .all(|t| *t < half && *t > start)
        );
    }
}

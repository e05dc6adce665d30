//! Platform-specific process handling: stopping the upstream child politely, hardening its
//! spawn, and noticing that our parent (the kernel) is gone.

use std::process::ExitStatus;
use std::time::Duration;

use tokio::process::{Child, Command};

/// How long the upstream gets after its stdin was closed before it is asked to terminate.
const STDIN_CLOSE_GRACE: Duration = Duration::from_millis(500);
/// How long the upstream gets after SIGTERM before it is killed.
const TERM_GRACE: Duration = Duration::from_secs(2);

/// Stops `child` whose stdin has just been closed: wait briefly, then terminate (SIGTERM on
/// Unix), then kill after [`TERM_GRACE`]. Always reaps.
pub(crate) async fn stop_child(child: &mut Child) -> std::io::Result<ExitStatus> {
    if let Ok(status) = tokio::time::timeout(STDIN_CLOSE_GRACE, child.wait()).await {
        return status;
    }
    imp::terminate(child);
    if let Ok(status) = tokio::time::timeout(TERM_GRACE, child.wait()).await {
        return status;
    }
    let _ = child.start_kill();
    child.wait().await
}

/// "exited with status 3", "killed by signal 9", …
pub(crate) fn describe_exit(status: &std::io::Result<ExitStatus>) -> String {
    match status {
        Ok(status) => match status.code() {
            Some(code) => format!("exited with status {code}"),
            None => imp::describe_signal(status),
        },
        Err(e) => format!("exited (status unavailable: {e})"),
    }
}

/// Makes the upstream die with this worker (Linux: `PR_SET_PDEATHSIG(SIGKILL)`). The upstream
/// keeps our process group, so the kernel's `killpg` reaches it as well. Windows: the
/// upstream starts suspended and runs only once [`contain`] has put it in its job.
pub(crate) fn harden(cmd: &mut Command) {
    imp::harden(cmd);
}

/// What binds the upstream's whole process tree to this worker beyond the child itself.
/// Windows: the worker's own kill-on-close Job Object (nested in the kernel's), so that the
/// tree ends when the upstream is stopped or this worker ends, however it ends. Unix: the
/// upstream shares the worker's process group, which the kernel signals and sweeps, and dies
/// with the worker by `PR_SET_PDEATHSIG` on Linux. A descendant that left that group
/// (`setsid()`, a daemon) is found through `/proc` instead (Linux): the worker is a child
/// subreaper ([`become_subreaper`]), so such processes stay its descendants even when their
/// parent exits; while the upstream runs, those that exit are reaped, and when it has stopped
/// every one left is killed ([`Containment::end_tree`]).
pub(crate) struct Containment(imp::Containment);

/// Makes this worker the reaper of the orphans in its upstream's tree (Linux:
/// `PR_SET_CHILD_SUBREAPER`), so a process that leaves the tree's process group and loses its
/// parent is re-parented here, not to init, and can be found and stopped. Elsewhere a no-op.
pub(crate) fn become_subreaper() {
    imp::become_subreaper();
}

/// Sends SIGKILL to every process below this one (Linux, through `/proc`; elsewhere nothing),
/// in rounds until none is left alive (a process may fork while the first round is sent).
/// Returns how many were signalled. (Windows has no caller: the upstream's job ends its tree.)
#[cfg(unix)]
pub(crate) fn kill_descendants() -> usize {
    imp::kill_descendants()
}

/// Binds the just-spawned upstream's tree to this worker (see [`Containment`]). Never fails:
/// where it cannot be done the kernel's job still ends the tree with the kernel, and a warning
/// says so.
pub(crate) fn contain(child: &Child) -> Containment {
    Containment(imp::contain(child))
}

impl Containment {
    /// Ends whatever the upstream left running once the child itself has exited or been
    /// stopped (Windows: terminates the job; Linux: kills every remaining descendant and reaps
    /// those re-parented here; see [`Containment`]).
    pub(crate) fn end_tree(&self) {
        self.0.end_tree();
    }
}

/// Resolves when our parent process (the kernel) has gone away. Never resolves where that
/// cannot be observed.
pub(crate) async fn parent_gone() {
    imp::parent_gone().await;
}

#[cfg(unix)]
mod imp {
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;
    use std::time::Duration;

    use nix::sys::signal::{Signal, kill};
    use nix::unistd::{Pid, getppid};
    use tokio::process::{Child, Command};

    pub(super) fn terminate(child: &Child) {
        let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) else {
            return;
        };
        // Only the child itself: it shares our process group, so killpg would hit us too.
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    }

    pub(super) fn describe_signal(status: &ExitStatus) -> String {
        match status.signal() {
            Some(sig) => match Signal::try_from(sig) {
                Ok(s) => format!("killed by signal {sig} ({})", s.as_str()),
                Err(_) => format!("killed by signal {sig}"),
            },
            None => format!("exited ({status})"),
        }
    }

    pub(super) fn harden(cmd: &mut Command) {
        #[cfg(target_os = "linux")]
        crate::pdeathsig::set_on(cmd);
        #[cfg(not(target_os = "linux"))]
        let _ = cmd;
    }

    /// Unix: the task that reaps the upstream's orphans while it runs (Linux).
    pub(super) struct Containment(Option<tokio::task::JoinHandle<()>>);

    impl Containment {
        pub(super) fn end_tree(&self) {
            if let Some(reaper) = &self.0 {
                reaper.abort();
            }
            let killed = kill_descendants();
            if killed > 0 {
                tracing::info!(killed, "stopped what the upstream left running");
            }
            reap_orphans(None);
        }
    }

    impl Drop for Containment {
        fn drop(&mut self) {
            if let Some(reaper) = &self.0 {
                reaper.abort();
            }
        }
    }

    pub(super) fn contain(child: &Child) -> Containment {
        #[cfg(target_os = "linux")]
        {
            let upstream = child.id();
            let reaper = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child()).map(
                |mut sigchld| {
                    tokio::spawn(async move {
                        while sigchld.recv().await.is_some() {
                            reap_orphans(upstream);
                        }
                    })
                },
            );
            match reaper {
                Ok(task) => Containment(Some(task)),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot watch for the upstream's orphans");
                    Containment(None)
                }
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = child;
            Containment(None)
        }
    }

    pub(super) fn become_subreaper() {
        #[cfg(target_os = "linux")]
        if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
            tracing::warn!(error = %e, "cannot become a child subreaper; an upstream's daemonized processes may outlive it");
        }
    }

    /// How many rounds [`kill_descendants`] sends at most.
    const KILL_ROUNDS: usize = 5;

    pub(super) fn kill_descendants() -> usize {
        let me = std::process::id();
        let mut signalled = 0;
        for round in 0..KILL_ROUNDS {
            let alive: Vec<u32> = procfs::descendants(me)
                .into_iter()
                .filter(|p| !p.zombie)
                .map(|p| p.pid)
                .collect();
            if alive.is_empty() {
                break;
            }
            if round > 0 {
                std::thread::sleep(Duration::from_millis(10));
            }
            for pid in alive {
                if let Ok(pid) = i32::try_from(pid)
                    && kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok()
                {
                    signalled += 1;
                }
            }
        }
        signalled
    }

    /// Reaps the exited children of this process other than `upstream` (which tokio reaps):
    /// orphans of the upstream's tree re-parented here. Never blocks.
    fn reap_orphans(upstream: Option<u32>) {
        use nix::sys::wait::{WaitPidFlag, waitpid};
        let me = std::process::id();
        for child in procfs::all() {
            if child.ppid != me || !child.zombie || Some(child.pid) == upstream {
                continue;
            }
            if let Ok(pid) = i32::try_from(child.pid) {
                let _ = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG));
            }
        }
    }

    /// Processes from `/proc` (Linux); elsewhere none.
    mod procfs {
        pub(super) struct Proc {
            pub(super) pid: u32,
            pub(super) ppid: u32,
            pub(super) zombie: bool,
        }

        /// Every process visible in `/proc`.
        pub(super) fn all() -> Vec<Proc> {
            let Ok(dir) = std::fs::read_dir("/proc") else {
                return Vec::new();
            };
            dir.filter_map(Result::ok)
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .filter_map(read)
                .collect()
        }

        fn read(pid: u32) -> Option<Proc> {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // `pid (comm) state ppid …`; comm may contain anything, `)` included.
            let mut rest = stat[stat.rfind(')')? + 1..].split_whitespace();
            let state = rest.next()?;
            let ppid = rest.next()?.parse().ok()?;
            Some(Proc {
                pid,
                ppid,
                zombie: matches!(state, "Z" | "X" | "x"),
            })
        }

        /// Every process below `root`.
        pub(super) fn descendants(root: u32) -> Vec<Proc> {
            let mut procs = all();
            let mut found = Vec::new();
            let mut parents = vec![root];
            while let Some(parent) = parents.pop() {
                let (children, others): (Vec<Proc>, Vec<Proc>) =
                    procs.into_iter().partition(|p| p.ppid == parent);
                procs = others;
                parents.extend(children.iter().map(|p| p.pid));
                found.extend(children);
            }
            found
        }
    }

    /// Linux: the parent's death is a signal, not something to poll for. The kernel starts
    /// every worker with SIGTERM as its parent-death signal; asked for here again, so a worker
    /// started by any other parent is covered too. SIGTERM takes the worker and its upstream
    /// down (`kill_group_on_sigterm`), so this never resolves and an idle worker never wakes
    /// for it. Where the signal cannot be set, the parent is polled as elsewhere.
    #[cfg(target_os = "linux")]
    pub(super) async fn parent_gone() {
        let parent = getppid();
        if nix::sys::prctl::set_pdeathsig(Signal::SIGTERM).is_err() {
            return poll_parent(parent).await;
        }
        // The parent died before the signal was set: we were re-parented already.
        if getppid() != parent {
            return;
        }
        std::future::pending::<()>().await;
    }

    #[cfg(not(target_os = "linux"))]
    pub(super) async fn parent_gone() {
        poll_parent(getppid()).await;
    }

    /// Resolves once our parent is no longer `parent` (checked twice a second).
    async fn poll_parent(parent: Pid) {
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if getppid() != parent {
                return;
            }
        }
    }
}

#[cfg(windows)]
mod imp {
    use std::process::ExitStatus;

    use tokio::process::{Child, Command};

    /// Windows: the upstream's job holds its whole tree (see `Containment`); nothing to do.
    pub(super) fn become_subreaper() {}

    pub(super) fn terminate(child: &mut Child) {
        let _ = child.start_kill();
    }

    pub(super) fn describe_signal(status: &ExitStatus) -> String {
        format!("exited ({status})")
    }

    /// The upstream starts suspended: [`contain`] puts it in its job, then lets it run.
    pub(super) fn harden(cmd: &mut Command) {
        cmd.creation_flags(tutti_os::job::SUSPENDED);
    }

    pub(super) struct Containment(Option<tutti_os::job::KillOnCloseJob>);

    impl Containment {
        pub(super) fn end_tree(&self) {
            if let Some(job) = &self.0
                && let Err(e) = job.terminate(1)
            {
                tracing::warn!(error = %e, "cannot end the upstream's leftover processes");
            }
        }
    }

    /// Puts the suspended upstream in a job of its own (nested in this worker's, which the
    /// kernel holds), then resumes it, so nothing it starts runs outside the job. Without a
    /// job it still runs (the worker's job, held by the kernel, ends its tree with the
    /// worker); if it cannot be resumed its job ends it, and the handshake reports it gone.
    pub(super) fn contain(child: &Child) -> Containment {
        let job = tutti_os::job::KillOnCloseJob::new().and_then(|job| {
            job.assign(child)?;
            Ok(job)
        });
        let job = match job {
            Ok(job) => Some(job),
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    "cannot give the upstream its own job; its processes end with the worker's"
                );
                None
            }
        };
        if let Err(e) = tutti_os::job::resume(child) {
            tracing::error!(error = %e, "cannot resume the upstream after putting it in its job");
            if let Some(job) = &job {
                let _ = job.terminate(1);
            }
        }
        Containment(job)
    }

    /// The kernel's Job Object ends us with it; nothing to poll here.
    pub(super) async fn parent_gone() {
        std::future::pending::<()>().await;
    }

    /// Run in the Wine lane (`scripts/test-wine`): the test binary re-runs itself as the
    /// upstream through [`helper_process`].
    #[cfg(test)]
    mod tests {
        use std::time::{Duration, Instant};

        const MARK: &str = "TUTTI_WORKER_TEST_MARK";

        /// Not a test of its own: the body of the upstream the test below starts; it writes
        /// its mark file as its first act.
        #[test]
        fn helper_process() {
            if let Some(mark) = std::env::var_os(MARK) {
                std::fs::write(mark, b"ran").unwrap_or_else(|e| panic!("{e}"));
            }
        }

        #[tokio::test]
        async fn the_upstream_runs_nothing_before_it_is_in_its_job() {
            let mark =
                std::env::temp_dir().join(format!("tutti-worker-mark-{}", std::process::id()));
            let _ = std::fs::remove_file(&mark);
            let exe = std::env::current_exe().unwrap_or_else(|e| panic!("{e}"));
            let mut cmd = tokio::process::Command::new(exe);
            cmd.args(["--exact", "platform::imp::tests::helper_process"])
                .env(MARK, &mark)
                .kill_on_drop(true);
            super::harden(&mut cmd);
            let child = cmd.spawn().unwrap_or_else(|e| panic!("{e}"));
            tokio::time::sleep(Duration::from_secs(2)).await;
            assert!(
                !mark.exists(),
                "the upstream ran before it was put in its job"
            );
            let contained = super::contain(&child);
            let inside = contained.0.as_ref().map(|job| job.contains(&child));
            assert!(
                matches!(inside, Some(Ok(true))),
                "the upstream is not in its job: {inside:?}"
            );
            let deadline = Instant::now() + Duration::from_secs(60);
            while !mark.exists() {
                assert!(Instant::now() < deadline, "the resumed upstream never ran");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

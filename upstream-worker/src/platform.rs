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
/// keeps our process group, so the kernel's `killpg` reaches it as well.
pub(crate) fn harden(cmd: &mut Command) {
    imp::harden(cmd);
}

/// What binds the upstream's whole process tree to this worker beyond the child itself.
/// Windows: the worker's own kill-on-close Job Object (nested in the kernel's), so that the
/// tree ends when the upstream is stopped or this worker ends, however it ends. Unix: nothing
/// here; the upstream shares the worker's process group, which the kernel signals and sweeps,
/// and dies with the worker by `PR_SET_PDEATHSIG` on Linux.
pub(crate) struct Containment(imp::Containment);

/// Binds the just-spawned upstream's tree to this worker (see [`Containment`]). Never fails:
/// where it cannot be done the kernel's job still ends the tree with the kernel, and a warning
/// says so.
pub(crate) fn contain(child: &Child) -> Containment {
    Containment(imp::contain(child))
}

impl Containment {
    /// Ends whatever the upstream left running once the child itself has exited or been
    /// stopped (Windows: terminates the job; Unix: nothing, see [`Containment`]).
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

    pub(super) struct Containment;

    impl Containment {
        pub(super) fn end_tree(&self) {}
    }

    pub(super) fn contain(_child: &Child) -> Containment {
        Containment
    }

    pub(super) async fn parent_gone() {
        let parent = getppid();
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

    pub(super) fn terminate(child: &mut Child) {
        let _ = child.start_kill();
    }

    pub(super) fn describe_signal(status: &ExitStatus) -> String {
        format!("exited ({status})")
    }

    pub(super) fn harden(_cmd: &mut Command) {}

    pub(super) struct Containment(Option<tutti_proto::job::KillOnCloseJob>);

    impl Containment {
        pub(super) fn end_tree(&self) {
            if let Some(job) = &self.0
                && let Err(e) = job.terminate(1)
            {
                tracing::warn!(error = %e, "cannot end the upstream's leftover processes");
            }
        }
    }

    pub(super) fn contain(child: &Child) -> Containment {
        let job = tutti_proto::job::KillOnCloseJob::new().and_then(|job| {
            job.assign(child)?;
            Ok(job)
        });
        match job {
            Ok(job) => Containment(Some(job)),
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    "cannot give the upstream its own job; its processes end with the kernel's"
                );
                Containment(None)
            }
        }
    }

    /// The kernel's Job Object ends us with it; nothing to poll here.
    pub(super) async fn parent_gone() {
        std::future::pending::<()>().await;
    }
}

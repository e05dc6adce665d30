//! `tutti down`: stops the runtime that `tutti up` started for a state dir and waits until it
//! is gone. The kernel holds `run/kernel.lock` (with its pid in it) for as long as it lives
//! and exits only after every process it started has ended, so once the lock is free and the
//! kernel's own process has exited, every process of the runtime is gone. (The lock is freed a
//! moment before the process ends, so `down` waits for both.)

use std::io::Read as _;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::error::CliError;
use crate::output;

/// How long `down` waits: the kernel's own bound for a graceful stop (calls in flight drain
/// for up to 10 s), plus a margin.
const WAIT: Duration = tutti_rules::timing::KERNEL_STOP_BOUND;

pub(crate) fn run(state_dir: &Path) -> Result<ExitCode, CliError> {
    let lock = tutti_rules::state_dir::layout::kernel_lock(state_dir);
    let Some(pid) = running_kernel(&lock) else {
        output::note(&format!(
            "tutti is not running for state dir {}; nothing to stop",
            state_dir.display()
        ));
        return Ok(ExitCode::SUCCESS);
    };
    if let Some(stop) = imp::service_manager_owns(pid) {
        return Err(CliError::OwnedByServiceManager { pid, stop });
    }
    imp::terminate(pid).map_err(|reason| CliError::StopFailed { pid, reason })?;
    let start = Instant::now();
    while running_kernel(&lock).is_some() || imp::alive(pid) {
        if start.elapsed() > WAIT {
            return Err(CliError::StopTimedOut {
                pid,
                seconds: WAIT.as_secs(),
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    output::note(&format!(
        "tutti stopped (kernel pid {pid}, state dir {}) in {} ms",
        state_dir.display(),
        start.elapsed().as_millis()
    ));
    Ok(ExitCode::SUCCESS)
}

/// The kernel's pid while a kernel holds `lock`; `None` when the lock is free (or missing).
fn running_kernel(lock: &Path) -> Option<u32> {
    let mut file = std::fs::File::open(lock).ok()?;
    match file.try_lock_shared() {
        // Free: no kernel. Our shared lock goes with `file`.
        Ok(()) => None,
        Err(_) => {
            let mut pid = String::new();
            file.read_to_string(&mut pid).ok()?;
            pid.trim().parse().ok()
        }
    }
}

#[cfg(unix)]
mod imp {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;

    /// SIGTERM: the kernel's graceful stop, as Ctrl-C in its terminal.
    pub(super) fn terminate(pid: u32) -> Result<(), String> {
        let pid = i32::try_from(pid).map_err(|e| e.to_string())?;
        kill(Pid::from_raw(pid), Signal::SIGTERM).map_err(|e| {
            format!(
                "{}; run `tutti down` as the user who started `tutti up`",
                e.desc()
            )
        })
    }

    /// Whether process `pid` still runs (Linux: an exited process its parent has not reaped
    /// yet, a zombie, has ended).
    pub(super) fn alive(pid: u32) -> bool {
        #[cfg(target_os = "linux")]
        {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            // The state follows the parenthesised command name.
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().next());
            !matches!(state, Some("Z" | "X" | "x"))
        }
        #[cfg(not(target_os = "linux"))]
        {
            i32::try_from(pid).is_ok_and(|pid| kill(Pid::from_raw(pid), None).is_ok())
        }
    }

    /// The command that stops the kernel when a service manager runs it (it would start it
    /// again after a SIGTERM): on Linux the systemd unit named in the kernel's cgroup.
    pub(super) fn service_manager_owns(pid: u32) -> Option<String> {
        let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        let unit = format!("/{}.service", crate::service::SERVICE_NAME);
        if !cgroup.lines().any(|l| l.ends_with(&unit)) {
            return None;
        }
        let user = cgroup.contains("/user@");
        Some(format!(
            "systemctl{} stop {}",
            if user { " --user" } else { "" },
            crate::service::SERVICE_NAME
        ))
    }
}

#[cfg(windows)]
mod imp {
    /// No signal reaches a console process from outside its console.
    pub(super) fn terminate(_pid: u32) -> Result<(), String> {
        Err("on Windows press Ctrl-C in the console of `tutti up`, or run `sc.exe stop tutti-kernel` for the service".into())
    }

    pub(super) fn service_manager_owns(_pid: u32) -> Option<String> {
        None
    }

    /// Never asked: `terminate` fails first.
    pub(super) fn alive(_pid: u32) -> bool {
        false
    }
}

//! The one place that needs `unsafe`: `pre_exec` to set the upstream's parent-death signal.

use tokio::process::Command;

/// Arranges for the spawned process to get SIGKILL when the thread that spawned it (a tokio
/// runtime worker of this process) dies, and refuses to exec if we are already gone.
pub(crate) fn set_on(cmd: &mut Command) {
    let parent = nix::unistd::getpid();
    // SAFETY: the closure runs in the child between fork and exec. It only makes two
    // async-signal-safe system calls (prctl, getppid), allocates nothing (errors are raw OS
    // codes) and touches no locks; an error makes the spawn fail cleanly.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)?;
            if nix::unistd::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(nix::libc::ESRCH));
            }
            Ok(())
        });
    }
}

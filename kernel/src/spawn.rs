//! The one place the kernel starts processes. Every child gets its own process group (so
//! one `killpg` reaches its whole tree, `npx`-style grandchildren included) and, on Linux,
//! `PR_SET_PDEATHSIG` so nothing outlives the kernel. Spawn only from tokio tasks, never from
//! `spawn_blocking` threads: the death signal follows the spawning thread. On Windows every
//! child is put in the kernel's kill-on-close Job Object instead.
//! (`unsafe` is allowed for this module only, in lib.rs.)

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

/// The descriptor an inherited listener has in the child (systemd's `SD_LISTEN_FDS_START`).
#[cfg(unix)]
const LISTEN_FDS_START: i32 = 3;

/// What to run, with exactly this environment (nothing inherited).
pub struct ChildSpec<'a> {
    pub program: &'a Path,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub stderr: Option<std::fs::File>,
    /// Signal the child gets when the kernel dies (Linux). Workers get SIGTERM so they can
    /// take their whole process group down; others SIGKILL.
    pub death_signal_term: bool,
    /// A listening socket the child inherits (the frontend's, see `services.rs`): on Unix as
    /// descriptor 3 with `LISTEN_FDS=1` in its environment (systemd's socket-activation
    /// convention, without `LISTEN_PID`). Never given on Windows.
    pub listener: Option<&'a std::net::TcpListener>,
}

pub fn spawn(spec: ChildSpec<'_>) -> std::io::Result<Child> {
    let mut cmd = Command::new(spec.program);
    cmd.args(&spec.args)
        .env_clear()
        .envs(spec.env)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true);
    match spec.stderr {
        Some(f) => cmd.stderr(Stdio::from(f)),
        None => cmd.stderr(Stdio::inherit()),
    };
    imp::configure(&mut cmd, spec.death_signal_term);
    if let Some(listener) = spec.listener {
        imp::pass_listener(&mut cmd, listener)?;
    }
    let child = cmd.spawn()?;
    imp::adopt(child)
}

/// Resolves a bare program name on `path_var` (no shell); absolute paths must exist.
pub fn resolve_program(command: &str, path_var: &str) -> Result<PathBuf, String> {
    let p = Path::new(command);
    if command.is_empty() {
        return Err("must not be empty".into());
    }
    if p.is_absolute() {
        return if p.is_file() {
            Ok(p.to_path_buf())
        } else if p.is_dir() {
            Err(format!("{command:?} is a directory, not a program"))
        } else {
            Err(format!("{command:?} does not exist"))
        };
    }
    if p.components().count() > 1 {
        return Err(format!(
            "{command:?} must be a bare program name found on PATH or an absolute path (use ${{release}}/{command} for a file in the release)"
        ));
    }
    imp::search_path(command, path_var).ok_or_else(|| format!("{command:?} not found on PATH"))
}

/// SIGTERM to the group, SIGKILL after `grace`, then a final sweep of the group; always reaps.
/// (Windows: terminates the child at once, there is no SIGTERM; a worker's upstream tree ends
/// with the worker's own kill-on-close job, anything else with the kernel's.)
pub async fn stop_group(child: &mut Child, grace: Duration) {
    let Some(pid) = child.id() else {
        return;
    };
    imp::terminate(child, pid, false);
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        imp::terminate(child, pid, true);
        let _ = child.wait().await;
    }
    // Stragglers (grandchildren) of the group.
    imp::sweep(pid);
}

/// Kills what is left of a process group whose leader has exited.
pub fn sweep_group(pgid: u32) {
    imp::sweep(pgid);
}

/// The file names tried in each PATH directory for a bare `name` under `pathext` (the
/// `PATHEXT` value): the name itself only if it already has an extension, then the name with
/// each listed extension (lower-cased, duplicates dropped), in `PATHEXT` order.
#[cfg(any(windows, test))]
fn pathext_candidates(name: &str, pathext: &str) -> Vec<String> {
    let mut out = Vec::new();
    if Path::new(name).extension().is_some() {
        out.push(name.to_string());
    }
    for ext in pathext.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        let ext = ext.to_ascii_lowercase();
        let candidate = if ext.starts_with('.') {
            format!("{name}{ext}")
        } else {
            format!("{name}.{ext}")
        };
        if !out.contains(&candidate) {
            out.push(candidate);
        }
    }
    out
}

#[cfg(unix)]
mod imp {
    use std::path::PathBuf;

    use nix::sys::signal::{Signal, killpg};
    use nix::unistd::Pid;

    pub(super) fn configure(cmd: &mut tokio::process::Command, term: bool) {
        cmd.process_group(0);
        #[cfg(target_os = "linux")]
        {
            let parent = std::process::id();
            let sig = if term {
                Signal::SIGTERM
            } else {
                Signal::SIGKILL
            };
            // SAFETY: the closure runs between fork and exec and only makes async-signal-safe
            // calls (prctl, getppid, _exit); it allocates nothing and takes no locks.
            unsafe {
                cmd.pre_exec(move || {
                    nix::sys::prctl::set_pdeathsig(sig)?;
                    // The kernel died before prctl took effect: do not run orphaned.
                    if nix::unistd::getppid().as_raw() as u32 != parent {
                        nix::libc::_exit(1);
                    }
                    Ok(())
                });
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = term;
    }

    pub(super) fn adopt(child: tokio::process::Child) -> std::io::Result<tokio::process::Child> {
        Ok(child)
    }

    /// The child gets a duplicate of `listener` as descriptor 3 (and nothing else of ours:
    /// every other descriptor of the kernel is close-on-exec) and `LISTEN_FDS=1`.
    pub(super) fn pass_listener(
        cmd: &mut tokio::process::Command,
        listener: &std::net::TcpListener,
    ) -> std::io::Result<()> {
        use command_fds::{CommandFdExt, FdMapping};
        let mapping = FdMapping {
            parent_fd: listener.try_clone()?.into(),
            child_fd: super::LISTEN_FDS_START,
        };
        cmd.fd_mappings(vec![mapping])
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        cmd.env("LISTEN_FDS", "1");
        Ok(())
    }

    pub(super) fn terminate(_child: &mut tokio::process::Child, pgid: u32, kill: bool) {
        signal_group(pgid, kill);
    }

    pub(super) fn sweep(pgid: u32) {
        signal_group(pgid, true);
    }

    fn signal_group(pgid: u32, kill: bool) {
        let sig = if kill {
            Signal::SIGKILL
        } else {
            Signal::SIGTERM
        };
        let _ = killpg(Pid::from_raw(pgid as i32), sig);
    }

    pub(super) fn search_path(name: &str, path_var: &str) -> Option<PathBuf> {
        use std::os::unix::fs::PermissionsExt;
        std::env::split_paths(path_var)
            .map(|d| d.join(name))
            .find(|p| {
                p.metadata()
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
    }
}

#[cfg(windows)]
mod imp {
    use std::io;
    use std::path::PathBuf;
    use std::sync::OnceLock;

    use tutti_proto::job::KillOnCloseJob;

    /// Default `PATHEXT` when the variable is unset.
    const DEFAULT_PATHEXT: &str = ".COM;.EXE;.BAT;.CMD";
    /// CREATE_NEW_PROCESS_GROUP: a console Ctrl-C does not reach the children directly; the
    /// kernel stops them itself.
    const CREATE_NEW_PROCESS_GROUP: u32 = 0x0000_0200;

    pub(super) fn configure(cmd: &mut tokio::process::Command, _term: bool) {
        cmd.creation_flags(CREATE_NEW_PROCESS_GROUP);
    }

    /// Not supported on Windows: the kernel never binds the frontend's socket there (see
    /// ARCHITECTURE.md, "The frontend's port"), so this is never reached.
    pub(super) fn pass_listener(
        _cmd: &mut tokio::process::Command,
        _listener: &std::net::TcpListener,
    ) -> std::io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "passing a listening socket to a child is not supported on Windows",
        ))
    }

    /// The kernel's kill-on-close Job Object, created on first use. Its only handle lives in
    /// this static (it is not inheritable), so when the kernel process ends, however it ends,
    /// Windows closes the handle and terminates every process in the job: the workers and
    /// everything they started (children of a process in a job join the job).
    fn kernel_job() -> io::Result<&'static KillOnCloseJob> {
        static JOB: OnceLock<Result<KillOnCloseJob, String>> = OnceLock::new();
        match JOB.get_or_init(|| KillOnCloseJob::new().map_err(|e| e.to_string())) {
            Ok(job) => Ok(job),
            Err(e) => Err(io::Error::other(format!(
                "cannot create the kernel's job: {e}"
            ))),
        }
    }

    /// Puts a freshly spawned child into the kernel's kill-on-close job. A child that cannot
    /// be put there is killed and the spawn fails: nothing may run that could outlive the
    /// kernel. (Between CreateProcess and this call the child runs outside the job for a
    /// moment; processes it starts in that window are not covered.)
    pub(super) fn adopt(mut child: tokio::process::Child) -> io::Result<tokio::process::Child> {
        match kernel_job().and_then(|job| job.assign(&child)) {
            Ok(()) => Ok(child),
            Err(e) => {
                let _ = child.start_kill();
                Err(io::Error::new(
                    e.kind(),
                    format!("cannot put the child in the kernel's kill-on-close job: {e}"),
                ))
            }
        }
    }

    /// Terminates the child (TerminateProcess on the handle `child` holds, never by pid).
    /// Windows has no SIGTERM for a console-less child, so both stages terminate; workers
    /// were already asked to drain over gRPC.
    pub(super) fn terminate(child: &mut tokio::process::Child, _pid: u32, _kill: bool) {
        let _ = child.start_kill();
    }

    /// The leader has exited and been reaped, so its pid may already belong to an unrelated
    /// process: never terminate by pid here. Whatever it left behind stays in the kernel's
    /// kill-on-close job and ends with the kernel at the latest (a worker's upstream tree
    /// already ended with the worker's own job).
    pub(super) fn sweep(_pid: u32) {}

    /// PATHEXT resolution without a shell: `node` finds `node.exe`, `npx` finds `npx.cmd`.
    pub(super) fn search_path(name: &str, path_var: &str) -> Option<PathBuf> {
        let pathext = std::env::var("PATHEXT").unwrap_or_else(|_| DEFAULT_PATHEXT.into());
        let candidates = super::pathext_candidates(name, &pathext);
        std::env::split_paths(path_var)
            .find_map(|dir| candidates.iter().map(|c| dir.join(c)).find(|p| p.is_file()))
    }
}

#[cfg(test)]
mod tests {
    use super::pathext_candidates;

    #[test]
    fn bare_names_get_every_pathext_extension_in_order() {
        assert_eq!(
            pathext_candidates("npx", ".COM;.EXE;.BAT;.CMD"),
            ["npx.com", "npx.exe", "npx.bat", "npx.cmd"]
        );
    }

    #[test]
    fn names_with_an_extension_are_tried_as_is_first() {
        assert_eq!(
            pathext_candidates("node.exe", ".EXE;.CMD"),
            ["node.exe", "node.exe.exe", "node.exe.cmd"]
        );
    }

    #[test]
    fn empty_entries_blanks_missing_dots_and_duplicates_are_tolerated() {
        assert_eq!(
            pathext_candidates("uvx", ";.EXE;; exe ;.Exe;CMD;"),
            ["uvx.exe", "uvx.cmd"]
        );
        assert!(pathext_candidates("uvx", "").is_empty());
    }
}

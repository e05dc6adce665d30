//! The one place the kernel starts processes. Every child gets its own process group (so
//! one `killpg` reaches its whole tree, `npx`-style grandchildren included) and, on Linux,
//! `PR_SET_PDEATHSIG` so nothing outlives the kernel. Spawn only from tokio tasks, never from
//! `spawn_blocking` threads: the death signal follows the spawning thread.
//! (`unsafe` is allowed for this module only, in lib.rs.)

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

/// What to run, with exactly this environment (nothing inherited).
pub struct ChildSpec<'a> {
    pub program: &'a Path,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub stderr: Option<std::fs::File>,
    /// Signal the child gets when the kernel dies (Linux). Workers get SIGTERM so they can
    /// take their whole process group down; others SIGKILL.
    pub death_signal_term: bool,
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
    cmd.spawn()
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
pub async fn stop_group(child: &mut Child, grace: Duration) {
    let Some(pid) = child.id() else {
        return;
    };
    imp::signal_group(pid, false);
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        imp::signal_group(pid, true);
        let _ = child.wait().await;
    }
    // Stragglers (grandchildren) of the group.
    imp::signal_group(pid, true);
}

/// Kills what is left of a process group whose leader has exited.
pub fn sweep_group(pgid: u32) {
    imp::signal_group(pgid, true);
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

    pub(super) fn signal_group(pgid: u32, kill: bool) {
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
    use std::path::PathBuf;

    pub(super) fn configure(cmd: &mut tokio::process::Command, _term: bool) {
        // CREATE_NEW_PROCESS_GROUP: Ctrl-C to the console does not reach workers directly;
        // the kernel stops them. Kill-on-close Job Objects are added by the supervisor.
        cmd.creation_flags(0x0000_0200);
    }

    pub(super) fn signal_group(pid: u32, _kill: bool) {
        // Without a Job Object handle, terminate via taskkill-free API is not available here;
        // the supervisor's Job Object closes the tree.
        let _ = pid;
    }

    /// PATHEXT resolution without a shell: `node` finds `node.exe`, `npx` finds `npx.cmd`.
    pub(super) fn search_path(name: &str, path_var: &str) -> Option<PathBuf> {
        let exts: Vec<String> = std::env::var("PATHEXT")
            .unwrap_or_else(|_| ".COM;.EXE;.BAT;.CMD".into())
            .split(';')
            .filter(|e| !e.is_empty())
            .map(str::to_ascii_lowercase)
            .collect();
        for dir in std::env::split_paths(path_var) {
            let plain = dir.join(name);
            if plain.extension().is_some() && plain.is_file() {
                return Some(plain);
            }
            for e in &exts {
                let p = dir.join(format!("{name}{e}"));
                if p.is_file() {
                    return Some(p);
                }
            }
        }
        None
    }
}

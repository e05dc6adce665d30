//! The one place the kernel starts processes. Every child gets its own process group (so
//! one `killpg` reaches its whole tree, `npx`-style grandchildren included) and, on Linux,
//! `PR_SET_PDEATHSIG` so nothing outlives the kernel. Spawn only from tokio tasks, never from
//! `spawn_blocking` threads: the death signal follows the spawning thread. On Windows every
//! child starts suspended, is put in a kill-on-close Job Object of its own (held only by the
//! kernel), and only then runs.
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
/// (Windows: terminates the child's job at once, there is no SIGTERM: the child and its whole
/// tree, a worker's upstream included, end together.)
pub async fn stop_group(child: &mut Child, grace: Duration) {
    let Some(pid) = child.id() else {
        return;
    };
    imp::terminate(child, pid, false);
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        imp::terminate(child, pid, true);
        let _ = child.wait().await;
    }
    // Stragglers (grandchildren) of the group (Windows: of the child's job).
    imp::sweep(pid);
    reap_group(pid).await;
}

/// Kills what is left of a process group whose leader has exited.
pub fn sweep_group(pgid: u32) {
    imp::sweep(pgid);
}

/// How long [`reap_group`] waits for the killed members of a group to end.
const REAP_BOUND: Duration = Duration::from_secs(2);

/// Makes this process the reaper of its orphaned descendants (Linux: a worker's upstream that
/// outlives its worker becomes the kernel's child, not init's), so that [`reap_group`] can
/// wait until it is gone: when the kernel exits, nothing it started is left, not even a zombie
/// waiting for init. Elsewhere a no-op.
pub fn adopt_orphans() {
    #[cfg(target_os = "linux")]
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        tracing::warn!(error = %e, "cannot become the reaper of orphaned upstreams");
    }
}

/// Waits (at most 2 s) until no adopted member of process group `pgid` is left, reaping each
/// (see [`adopt_orphans`]). The group's leader must already be reaped; every child the kernel
/// starts leads a group of its own, so this never reaps a child a `Child` handle waits for.
pub async fn reap_group(pgid: u32) {
    imp::reap_group(pgid, REAP_BOUND).await;
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

    pub(super) async fn reap_group(pgid: u32, bound: std::time::Duration) {
        use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
        let Ok(pgid) = i32::try_from(pgid) else {
            return;
        };
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            match waitpid(Pid::from_raw(-pgid), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                }
                Ok(WaitStatus::StillAlive) => return,
                Ok(_) => {}
                // ECHILD: no member of the group is (or became) our child any more.
                Err(_) => return,
            }
        }
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
    use std::collections::HashMap;
    use std::io;
    use std::path::PathBuf;
    use std::sync::Mutex;

    use tutti_os::job::{self, KillOnCloseJob};

    /// Default `PATHEXT` when the variable is unset.
    const DEFAULT_PATHEXT: &str = ".COM;.EXE;.BAT;.CMD";
    /// CREATE_NEW_PROCESS_GROUP: a console Ctrl-C does not reach the children directly; the
    /// kernel stops them itself.
    const CREATE_NEW_PROCESS_GROUP: u32 = 0x0000_0200;

    /// One kill-on-close Job Object per child the kernel started, by the child's pid: the
    /// child and everything it starts (a worker's upstream tree included: the worker's own job
    /// for its upstream nests in this one). Only this map holds the handles (they are not
    /// inheritable), so when the kernel ends, however it ends, Windows closes them and ends
    /// every tree; stopping a child terminates its job, so its tree ends with it, not only
    /// with the kernel. An entry goes when its tree is swept; a pid is only reused after the
    /// child's handle (held by its `tokio::process::Child`) is closed, so an entry never
    /// names a stranger.
    static JOBS: Mutex<Option<HashMap<u32, KillOnCloseJob>>> = Mutex::new(None);

    fn jobs() -> std::sync::MutexGuard<'static, Option<HashMap<u32, KillOnCloseJob>>> {
        JOBS.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Children start suspended: they run no instruction before they are in their job.
    pub(super) fn configure(cmd: &mut tokio::process::Command, _term: bool) {
        cmd.creation_flags(CREATE_NEW_PROCESS_GROUP | job::SUSPENDED);
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

    /// Puts the freshly spawned (still suspended) child into a job of its own, then lets it
    /// run. A child that cannot be put there is killed and the spawn fails: nothing may run
    /// that could outlive the kernel.
    pub(super) fn adopt(mut child: tokio::process::Child) -> io::Result<tokio::process::Child> {
        let contained = KillOnCloseJob::new().and_then(|job| {
            job.assign(&child)?;
            Ok(job)
        });
        let started = contained.and_then(|job| {
            job::resume(&child)?;
            Ok(job)
        });
        match (started, child.id()) {
            (Ok(job), Some(pid)) => {
                jobs().get_or_insert_with(HashMap::new).insert(pid, job);
                Ok(child)
            }
            (Err(e), _) => {
                let _ = child.start_kill();
                Err(io::Error::new(
                    e.kind(),
                    format!("cannot start the child in a kill-on-close job of its own: {e}"),
                ))
            }
            (Ok(_), None) => Err(io::Error::other("the child exited while it was started")),
        }
    }

    /// Terminates the child's whole tree (its job; the child itself by its handle if it has
    /// none). Windows has no SIGTERM for a console-less child, so both stages terminate;
    /// workers were already asked to drain over gRPC.
    pub(super) fn terminate(child: &mut tokio::process::Child, pid: u32, _kill: bool) {
        if let Some(job) = jobs().as_ref().and_then(|m| m.get(&pid))
            && job.terminate(1).is_ok()
        {
            return;
        }
        let _ = child.start_kill();
    }

    /// Ends what is left of the tree of the child `pid` started by terminating its job (never
    /// by pid: the leader has exited and its pid may already be someone else's), and forgets
    /// the job.
    pub(super) fn sweep(pid: u32) {
        let job = jobs().as_mut().and_then(|m| m.remove(&pid));
        if let Some(job) = job
            && let Err(e) = job.terminate(1)
        {
            tracing::warn!(pid, error = %e, "cannot end what the child left running");
        }
    }

    /// The job ends the whole tree and Windows reaps it: nothing to wait for.
    pub(super) async fn reap_group(_pid: u32, _bound: std::time::Duration) {}

    /// PATHEXT resolution without a shell: `node` finds `node.exe`, `npx` finds `npx.cmd`.
    pub(super) fn search_path(name: &str, path_var: &str) -> Option<PathBuf> {
        let pathext = std::env::var("PATHEXT").unwrap_or_else(|_| DEFAULT_PATHEXT.into());
        let candidates = super::pathext_candidates(name, &pathext);
        std::env::split_paths(path_var)
            .find_map(|dir| candidates.iter().map(|c| dir.join(c)).find(|p| p.is_file()))
    }

    /// Run in the Wine lane (`scripts/test-wine`): the test binary re-runs itself as the
    /// child (and grandchild) through [`helper_process`].
    #[cfg(test)]
    mod tests {
        use std::path::{Path, PathBuf};
        use std::time::{Duration, Instant};

        use super::{adopt, configure, jobs};
        use crate::supervisor::spawn::{ChildSpec, spawn, stop_group};

        const HELPER: &str = "TUTTI_SPAWN_TEST_HELPER";
        const FILE: &str = "TUTTI_SPAWN_TEST_FILE";
        const WAIT: Duration = Duration::from_secs(60);

        /// Not a test of its own: the body of the child processes the tests below start.
        /// `mark` writes its file at once; `tree` starts a `beat` grandchild and waits;
        /// `beat` rewrites its file with a growing counter every 50 ms.
        #[test]
        fn helper_process() {
            let (Ok(mode), Some(file)) = (std::env::var(HELPER), std::env::var_os(FILE)) else {
                return;
            };
            let file = PathBuf::from(file);
            match mode.as_str() {
                "mark" => std::fs::write(&file, b"ran").unwrap_or_else(|e| panic!("{e}")),
                "tree" => {
                    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("{e}"));
                    // Left running on purpose: the test checks that stopping the child ends
                    // this grandchild too (its job object, not a wait, ends it).
                    #[allow(clippy::zombie_processes)]
                    let _beat = std::process::Command::new(exe)
                        .args(helper_args())
                        .env(HELPER, "beat")
                        .spawn()
                        .unwrap_or_else(|e| panic!("{e}"));
                    std::thread::sleep(WAIT);
                }
                _ => {
                    for n in 0..2400u32 {
                        std::fs::write(&file, n.to_string()).unwrap_or_else(|e| panic!("{e}"));
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
            }
        }

        /// The test harness's arguments that run `helper_process` alone, named from this
        /// module's own path (so moving the module cannot leave the helper unfound).
        fn helper_args() -> Vec<String> {
            let here = module_path!().split_once("::").map_or("", |(_, rest)| rest);
            let name = format!("{here}::helper_process");
            vec!["--exact".into(), name, "--nocapture".into()]
        }

        /// The helper's environment: what Wine/Windows needs to start a process, plus the mode.
        fn helper_env(mode: &str, file: &Path) -> Vec<(String, String)> {
            let mut env: Vec<(String, String)> = ["SystemRoot", "PATH", "TEMP", "WINEDEBUG"]
                .iter()
                .filter_map(|k| Some(((*k).to_owned(), std::env::var(k).ok()?)))
                .collect();
            env.push((HELPER.into(), mode.into()));
            env.push((FILE.into(), file.to_string_lossy().into_owned()));
            env
        }

        fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
            let deadline = Instant::now() + WAIT;
            while !ok() {
                assert!(Instant::now() < deadline, "{what}: not within {WAIT:?}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }

        #[tokio::test]
        async fn a_child_runs_nothing_before_it_is_in_its_job() {
            let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
            let mark = dir.path().join("mark");
            let exe = std::env::current_exe().unwrap_or_else(|e| panic!("{e}"));
            let mut cmd = tokio::process::Command::new(exe);
            cmd.args(helper_args())
                .env_clear()
                .envs(helper_env("mark", &mark))
                .kill_on_drop(true);
            configure(&mut cmd, false);
            let child = cmd.spawn().unwrap_or_else(|e| panic!("{e}"));
            tokio::time::sleep(Duration::from_secs(2)).await;
            assert!(!mark.exists(), "the child ran before it was put in its job");
            let child = adopt(child).unwrap_or_else(|e| panic!("{e}"));
            let pid = child.id().unwrap_or_else(|| panic!("the child is gone"));
            let inside = jobs()
                .as_ref()
                .and_then(|m| m.get(&pid))
                .map(|j| j.contains(&child));
            assert!(
                matches!(inside, Some(Ok(true))),
                "the child is not in its job: {inside:?}"
            );
            wait_for("the resumed child's mark", || mark.exists());
        }

        #[tokio::test]
        async fn stopping_a_child_ends_its_whole_tree() {
            let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
            let beat = dir.path().join("beat");
            let exe = std::env::current_exe().unwrap_or_else(|e| panic!("{e}"));
            let mut child = spawn(ChildSpec {
                program: &exe,
                args: helper_args(),
                env: helper_env("tree", &beat),
                stderr: None,
                death_signal_term: true,
                listener: None,
            })
            .unwrap_or_else(|e| panic!("{e}"));
            let read = || std::fs::read_to_string(&beat).unwrap_or_default();
            wait_for("the grandchild's first beat", || !read().is_empty());
            stop_group(&mut child, Duration::from_secs(1)).await;
            // Give a still-running grandchild time to beat again (it beats every 50 ms).
            tokio::time::sleep(Duration::from_secs(1)).await;
            let after_stop = read();
            tokio::time::sleep(Duration::from_secs(2)).await;
            assert_eq!(
                read(),
                after_stop,
                "the grandchild outlived its stopped parent"
            );
        }
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

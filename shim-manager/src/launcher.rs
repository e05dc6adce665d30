//! `tutti-shim`: what every `tutti-connector-<key>` runs. It recovers the key and state
//! directory, asks the kernel for the live generation (`ResolveShim`), and runs the release's
//! entrypoint with the user's arguments verbatim: by exec on Unix, as a waited-for child on
//! Windows.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tonic::Code;
use tutti_proto::kernel::routes_client::RoutesClient;
use tutti_proto::kernel::{KeyRequest, ResolveShimReply};
use tutti_proto::transport;

use crate::Error;
use crate::shimfile::{self, Invocation};

/// `EX_USAGE`: `tutti-shim` was not started through a shim.
const EXIT_USAGE: i32 = 64;
/// `EX_UNAVAILABLE`: no live generation (SPEC §8).
const EXIT_UNAVAILABLE: i32 = 69;
/// `EX_SOFTWARE`: the launcher itself could not start.
const EXIT_SOFTWARE: i32 = 70;
/// The entrypoint exists but cannot be executed (as shells report it).
const EXIT_CANNOT_EXECUTE: i32 = 126;
/// The entrypoint does not exist.
const EXIT_NOT_FOUND: i32 = 127;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(15);

/// Runs the launcher with the process's own argv (`std::env::args_os()`), returning the exit
/// code. On Unix a successful start never returns: the process becomes the entrypoint.
pub fn shim_main(args: Vec<OsString>) -> i32 {
    let invocation = match recover_invocation(&args) {
        Ok(invocation) => invocation,
        Err(e) => {
            eprintln!("tutti-shim: {e}");
            return EXIT_USAGE;
        }
    };
    let prog = format!("{}{}", shimfile::SHIM_PREFIX, invocation.key);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{prog}: cannot start: {e}");
            return EXIT_SOFTWARE;
        }
    };
    let lookup = runtime.block_on(lookup(&invocation.state_dir, &invocation.key));
    let launch = match decide(lookup) {
        Ok(launch) => launch,
        Err(status) => {
            eprintln!("{prog}: {}", unavailable_message(&invocation.key, &status));
            return EXIT_UNAVAILABLE;
        }
    };
    sys::run_entrypoint(
        runtime,
        &prog,
        &invocation.key,
        launch,
        invocation.user_args,
    )
}

/// Key, state dir and user arguments: from a sidecar next to a launcher copy, else from the
/// shebang argument.
fn recover_invocation(args: &[OsString]) -> Result<Invocation, Error> {
    // A launcher copy (long paths, Windows) finds its sidecar next to itself; the shebang
    // form runs the libexec launcher, which has none.
    let exe = std::env::current_exe().ok();
    if let Some((key, sidecar)) = exe.as_deref().and_then(shimfile::sidecar_for_exe) {
        match std::fs::read(&sidecar) {
            Ok(content) => {
                let invocation =
                    shimfile::invocation_from_sidecar(&content, args).ok_or_else(|| {
                        Error::SidecarMalformed {
                            path: sidecar.clone(),
                        }
                    })?;
                if invocation.key != key {
                    return Err(Error::SidecarMismatch {
                        path: sidecar,
                        expected: key,
                        found: invocation.key,
                    });
                }
                return Ok(invocation);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(Error::SidecarRead {
                    path: sidecar,
                    source,
                });
            }
        }
    }
    shimfile::invocation_from_shebang(args).ok_or_else(|| Error::NotAShim {
        exe: exe.map_or_else(|| "this executable".to_owned(), |e| e.display().to_string()),
    })
}

/// The outcome of asking the kernel. No `Debug`: the reply carries secret values.
enum Lookup {
    Unreachable,
    TimedOut,
    Failed(Code),
    Reply(ResolveShimReply),
}

/// What to run.
#[derive(PartialEq, Eq)]
struct Launch {
    entrypoint: PathBuf,
    /// The declared secrets (values!) and `TUTTI_CONNECTOR_KEY`.
    env: HashMap<String, String>,
}

/// Names only: `env` holds secret values, which must never reach a message (SPEC §9).
impl std::fmt::Debug for Launch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<&str> = self.env.keys().map(String::as_str).collect();
        names.sort_unstable();
        f.debug_struct("Launch")
            .field("entrypoint", &self.entrypoint)
            .field("env", &names)
            .finish()
    }
}

async fn lookup(state_dir: &Path, key: &str) -> Lookup {
    let endpoint = transport::kernel_endpoint(state_dir);
    let channel = match tokio::time::timeout(CONNECT_TIMEOUT, transport::connect(&endpoint)).await {
        Ok(Ok(channel)) => channel,
        Ok(Err(_)) | Err(_) => return Lookup::Unreachable,
    };
    let request = KeyRequest {
        key: key.to_owned(),
        ..KeyRequest::default()
    };
    match tokio::time::timeout(
        RESOLVE_TIMEOUT,
        RoutesClient::new(channel).resolve_shim(request),
    )
    .await
    {
        Ok(Ok(reply)) => Lookup::Reply(reply.into_inner()),
        Ok(Err(status)) => Lookup::Failed(status.code()),
        Err(_) => Lookup::TimedOut,
    }
}

/// Either what to run, or the `<status>` for the "not available" line.
fn decide(lookup: Lookup) -> Result<Launch, String> {
    match lookup {
        Lookup::Unreachable | Lookup::Failed(Code::Unavailable) => {
            Err("kernel not running".to_owned())
        }
        Lookup::TimedOut | Lookup::Failed(Code::DeadlineExceeded) => {
            Err("kernel not responding".to_owned())
        }
        Lookup::Failed(Code::NotFound) => Err("not installed".to_owned()),
        Lookup::Failed(code) => Err(format!("kernel error: {}", code.description())),
        Lookup::Reply(reply) if !reply.live => Err(if reply.status.trim().is_empty() {
            "unavailable".to_owned()
        } else {
            reply.status
        }),
        Lookup::Reply(reply) if reply.entrypoint.is_empty() => Err("no cli entrypoint".to_owned()),
        Lookup::Reply(reply) => Ok(Launch {
            entrypoint: PathBuf::from(reply.entrypoint),
            env: reply.env,
        }),
    }
}

/// `connector <key> is not available (<status>)`, on one line.
fn unavailable_message(key: &str, status: &str) -> String {
    let status: String = status
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    format!("connector {key} is not available ({})", status.trim())
}

/// The entrypoint with the user's arguments verbatim: the caller's environment plus
/// `TUTTI_CONNECTOR_KEY` and the declared secrets (SPEC §8). Shared by both platforms.
fn entrypoint_command(key: &str, launch: &Launch, args: Vec<OsString>) -> std::process::Command {
    let mut command = std::process::Command::new(&launch.entrypoint);
    command
        .args(args)
        .env("TUTTI_CONNECTOR_KEY", key)
        .envs(&launch.env);
    command
}

/// Says why the entrypoint could not be started and returns the shell-like exit code.
fn cannot_run(prog: &str, launch: &Launch, err: &std::io::Error) -> i32 {
    eprintln!(
        "{prog}: cannot run the entrypoint {}: {err}; cli.entrypoint must be an executable file of the release (fix it, then tutti connector install DIR)",
        launch.entrypoint.display()
    );
    exec_failure_code(err)
}

fn exec_failure_code(err: &std::io::Error) -> i32 {
    if err.kind() == std::io::ErrorKind::NotFound {
        EXIT_NOT_FOUND
    } else {
        EXIT_CANNOT_EXECUTE
    }
}

#[cfg(unix)]
mod sys {
    use std::ffi::OsString;
    use std::os::unix::process::CommandExt;

    use super::{Launch, cannot_run, entrypoint_command};

    /// Replaces this process with the entrypoint: signals and the exit status are its own.
    pub(super) fn run_entrypoint(
        runtime: tokio::runtime::Runtime,
        prog: &str,
        key: &str,
        launch: Launch,
        args: Vec<OsString>,
    ) -> i32 {
        // Nothing of the RPC may survive into the entrypoint (threads, sockets).
        drop(runtime);
        let err = entrypoint_command(key, &launch, args).exec();
        cannot_run(prog, &launch, &err)
    }
}

#[cfg(windows)]
mod sys {
    use std::ffi::OsString;

    use super::{Launch, cannot_run, entrypoint_command};

    /// Runs the entrypoint as a child and returns its exit code. Ctrl-C reaches the child
    /// from the console; the shim only ignores it and keeps waiting.
    pub(super) fn run_entrypoint(
        runtime: tokio::runtime::Runtime,
        prog: &str,
        key: &str,
        launch: Launch,
        args: Vec<OsString>,
    ) -> i32 {
        runtime.block_on(async move {
            // While this listener exists, Ctrl-C does not terminate the shim.
            let mut ctrl_c = tokio::signal::windows::ctrl_c().ok();
            let command = entrypoint_command(key, &launch, args);
            let mut child = match tokio::process::Command::from(command).spawn() {
                Ok(child) => child,
                Err(err) => return cannot_run(prog, &launch, &err),
            };
            loop {
                tokio::select! {
                    status = child.wait() => {
                        return match status {
                            Ok(status) => status.code().unwrap_or(1),
                            Err(err) => {
                                eprintln!("{prog}: lost the entrypoint: {err}");
                                1
                            }
                        };
                    }
                    () = next_ctrl_c(&mut ctrl_c) => {}
                }
            }
        })
    }

    async fn next_ctrl_c(ctrl_c: &mut Option<tokio::signal::windows::CtrlC>) {
        match ctrl_c {
            Some(listener) => {
                if listener.recv().await.is_none() {
                    *ctrl_c = None;
                }
            }
            None => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(live: bool, status: &str, entrypoint: &str) -> Lookup {
        Lookup::Reply(ResolveShimReply {
            live,
            status: status.to_owned(),
            generation: 7,
            entrypoint: entrypoint.to_owned(),
            env: HashMap::from([("TUTTI_CONNECTOR_KEY".to_owned(), "k".to_owned())]),
        })
    }

    #[test]
    fn unreachable_kernel_is_not_running() {
        assert_eq!(
            decide(Lookup::Unreachable),
            Err("kernel not running".into())
        );
        assert_eq!(
            decide(Lookup::Failed(Code::Unavailable)),
            Err("kernel not running".into())
        );
        assert_eq!(
            decide(Lookup::TimedOut),
            Err("kernel not responding".into())
        );
        assert_eq!(
            decide(Lookup::Failed(Code::NotFound)),
            Err("not installed".into())
        );
        assert!(
            matches!(decide(Lookup::Failed(Code::Internal)), Err(s) if s.starts_with("kernel error: "))
        );
    }

    #[test]
    fn not_live_uses_the_kernel_status() {
        assert_eq!(
            decide(reply(false, "auth_required", "")),
            Err("auth_required".into())
        );
        assert_eq!(decide(reply(false, " ", "")), Err("unavailable".into()));
        assert_eq!(
            decide(reply(true, "ready", "")),
            Err("no cli entrypoint".into())
        );
    }

    #[test]
    fn live_runs_the_entrypoint_with_the_env() {
        let launch = decide(reply(true, "ready", "/r/bin/cli")).expect("live");
        assert_eq!(launch.entrypoint, PathBuf::from("/r/bin/cli"));
        assert_eq!(
            launch.env.get("TUTTI_CONNECTOR_KEY").map(String::as_str),
            Some("k")
        );
    }

    #[test]
    fn debug_of_a_launch_shows_no_secret_value() {
        let launch = Launch {
            entrypoint: PathBuf::from("/r/bin/cli"),
            env: HashMap::from([("API_TOKEN".to_owned(), "s3cr3t-value".to_owned())]),
        };
        let shown = format!("{launch:?}");
        assert!(shown.contains("API_TOKEN"), "{shown}");
        assert!(!shown.contains("s3cr3t-value"), "{shown}");
    }

    #[test]
    fn message_is_exactly_the_spec_line() {
        assert_eq!(
            unavailable_message("github", "stopped"),
            "connector github is not available (stopped)"
        );
        assert_eq!(
            unavailable_message("github", "bad\nstatus"),
            "connector github is not available (bad status)"
        );
    }

    #[test]
    fn exec_failures_map_like_a_shell() {
        let nf = std::io::Error::from(std::io::ErrorKind::NotFound);
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        assert_eq!(exec_failure_code(&nf), 127);
        assert_eq!(exec_failure_code(&denied), 126);
    }
}

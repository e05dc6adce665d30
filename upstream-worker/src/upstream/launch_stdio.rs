//! Starting a stdio upstream: the child process with exactly the launch spec's environment,
//! its stdout and stderr pumps, the handshake within the start timeout, and a failure that
//! names what to fix.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::service::{ClientLifecycleMode, serve_client_with_lifecycle};
use rmcp::transport::async_rw::AsyncRwTransport;
use tokio::process::Command;
use tokio::sync::Notify;
use tutti_proto::kernel::LaunchSpec;

use crate::error::WorkerError;
use crate::platform;
use crate::redact::Redactor;
use crate::transport::results::CallResults;
use crate::transport::stdio::{self, MAX_STDOUT_LINE, NonJsonCounter};
use crate::upstream::failure::init_failure;
use crate::upstream::handler::Handler;
use crate::upstream::session::{
    ChildHandle, ServiceWatch, Session, Started, first_listing, start_timeout,
};

/// In-memory pipe between our stdout reader and rmcp.
const PIPE_BUFFER: usize = 256 * 1024;

pub(super) async fn start_stdio(
    spec: &LaunchSpec,
    redactor: Arc<Redactor>,
    within: Duration,
) -> Result<Started, WorkerError> {
    let (child, stdin, stdout, stderr) = spawn_stdio(spec, &redactor)?;
    let contained = platform::contain(&child);
    let mut child = ChildHandle::spawn(child, contained);
    let pumps = StdioPumps::spawn(stdout, stderr, &redactor);
    let last_stderr = pumps.last_stderr.clone();

    let list_changed = Arc::new(Notify::new());
    let transport =
        AsyncRwTransport::new_client(pumps.rmcp_side, stdin).with_max_line_length(MAX_STDOUT_LINE);
    let handshake = async {
        let running = serve_client_with_lifecycle(
            Handler::new(list_changed.clone()),
            transport,
            ClientLifecycleMode::Initialize,
        )
        .await
        .map_err(|e| init_failure(&e))?;
        let listed = first_listing(running, redactor.clone(), Some(pumps.results)).await?;
        Ok::<_, String>(listed)
    };

    // The deadline is polled by reference: when it fires the handshake (and with it the
    // upstream's stdin) is still alive, so the last stderr line is the upstream's own and not
    // its reaction to being cut off.
    let mut handshake = Box::pin(handshake);
    let deadline = tokio::time::sleep(within);
    tokio::pin!(deadline);
    let outcome = tokio::select! {
        res = &mut handshake => res.map_err(StartFailure::Failed),
        () = &mut deadline => Err(StartFailure::TimedOut {
            last_stderr: last_line(&last_stderr),
        }),
        // The child died during the handshake: say so rather than "connection closed".
        how = child.exited() => Err(StartFailure::Failed(how)),
    };
    // Closes the upstream's stdin unless the session took it over.
    drop(handshake);
    match outcome {
        Ok((running, upstream, (protocol_version, server_name), tools)) => Ok(Started {
            session: Session {
                upstream,
                protocol_version,
                server_name,
                list_changed,
                non_json: Some(pumps.counter),
                session_events: None,
                service: ServiceWatch::spawn(running),
                child: Some(child),
            },
            tools,
        }),
        Err(failure) => {
            Err(stdio_start_failed(child, failure, &last_stderr, within, &redactor).await)
        }
    }
}

/// The stdio upstream's process and its three pipes.
type StdioChild = (
    tokio::process::Child,
    tokio::process::ChildStdin,
    tokio::process::ChildStdout,
    tokio::process::ChildStderr,
);

/// Spawns the stdio upstream with exactly the launch spec's environment, hardened.
fn spawn_stdio(spec: &LaunchSpec, redactor: &Redactor) -> Result<StdioChild, WorkerError> {
    let mut cmd = Command::new(&spec.command);
    cmd.args(&spec.args)
        .current_dir(&spec.cwd)
        .env_clear()
        .envs(&spec.env)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    platform::harden(&mut cmd);
    // We are on a tokio task here (never spawn_blocking): PDEATHSIG follows this thread.
    let mut child = cmd.spawn().map_err(|e| WorkerError::UpstreamStart {
        message: redactor.redact(&spawn_failure(spec, &e)),
    })?;
    tracing::info!(pid = child.id(), command = %redactor.redact(&spec.command), "upstream started");

    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(WorkerError::UpstreamStart {
            message: "the upstream's stdio pipes are missing".to_owned(),
        });
    };
    Ok((child, stdin, stdout, stderr))
}

/// The tasks reading a stdio upstream's stdout (into rmcp's side of a pipe) and stderr, and
/// what they share with the session.
struct StdioPumps {
    /// Where rmcp reads the upstream's JSON lines.
    rmcp_side: tokio::io::DuplexStream,
    counter: Arc<NonJsonCounter>,
    last_stderr: Arc<Mutex<Option<String>>>,
    results: Arc<CallResults>,
}

impl StdioPumps {
    fn spawn(
        stdout: tokio::process::ChildStdout,
        stderr: tokio::process::ChildStderr,
        redactor: &Arc<Redactor>,
    ) -> Self {
        let counter = Arc::new(NonJsonCounter::default());
        let last_stderr = Arc::new(Mutex::new(None::<String>));
        let results = Arc::new(CallResults::default());
        let (rmcp_side, pump_side) = tokio::io::duplex(PIPE_BUFFER);
        tokio::spawn({
            let (redactor, counter, results) = (redactor.clone(), counter.clone(), results.clone());
            async move {
                if let Err(e) =
                    stdio::pump_stdout(stdout, pump_side, redactor, counter, results).await
                {
                    tracing::warn!(error = %e, "reading the upstream's stdout failed");
                }
            }
        });
        tokio::spawn({
            let (redactor, last_stderr) = (redactor.clone(), last_stderr.clone());
            async move {
                if let Err(e) =
                    stdio::pump_stderr(stderr, std::io::stderr(), redactor, last_stderr).await
                {
                    tracing::warn!(error = %e, "reading the upstream's stderr failed");
                }
            }
        });
        Self {
            rmcp_side,
            counter,
            last_stderr,
            results,
        }
    }
}

/// The most telling stderr line seen so far ([`crate::transport::stdio::telling`]).
fn last_line(last_stderr: &Mutex<Option<String>>) -> Option<String> {
    last_stderr.lock().ok().and_then(|l| l.clone())
}

/// Stops a stdio upstream that did not start, and says why it did not (redacted).
async fn stdio_start_failed(
    mut child: ChildHandle,
    failure: StartFailure,
    last_stderr: &Mutex<Option<String>>,
    within: Duration,
    redactor: &Redactor,
) -> WorkerError {
    let message = match failure {
        StartFailure::TimedOut { last_stderr } => {
            // Our deadline, not the upstream's doing: whatever it does once its stdin closes
            // (exit 0, say) must not be reported as the cause.
            let mut message = start_timeout(within);
            if let Some(last) = last_stderr {
                message = format!("{message}; stderr: {last}");
            }
            child.stop().await;
            message
        }
        StartFailure::Failed(mut message) => {
            // An early exit shows up as a closed connection first; prefer the exit status.
            if let Ok(how) = tokio::time::timeout(Duration::from_millis(300), child.exited()).await
                && !message.starts_with("exited")
                && !message.starts_with("killed")
            {
                message = format!("{how} ({message})");
            }
            let exited = child.exit_now().is_some();
            if let Some(last) = last_line(last_stderr) {
                message = format!("{message}; stderr: {last}");
            }
            if !exited {
                let _ = child.stop().await;
            }
            message
        }
    };
    WorkerError::UpstreamStart {
        message: redactor.redact(&message),
    }
}

/// Why the stdio command could not be spawned, naming the manifest field to fix. "No such
/// file or directory" alone would not say whether the command or the working directory is
/// missing.
fn spawn_failure(spec: &LaunchSpec, error: &std::io::Error) -> String {
    let command = &spec.command;
    if error.kind() != std::io::ErrorKind::NotFound {
        return format!("cannot start {command}: {error}");
    }
    if !std::path::Path::new(&spec.cwd).is_dir() {
        return format!(
            "cannot start {command}: the working directory {} does not exist (check mcp.cwd)",
            spec.cwd
        );
    }
    let path = spec.env.get("PATH").map_or("", String::as_str);
    let program = std::path::Path::new(command);
    let exists = if program.is_absolute() {
        program.is_file()
    } else if program.components().count() > 1 {
        std::path::Path::new(&spec.cwd).join(program).is_file()
    } else {
        std::env::split_paths(path).any(|dir| dir.join(program).is_file())
    };
    if exists {
        // execve also says ENOENT when the file is there but its `#!` interpreter (or its
        // dynamic loader) is not.
        return format!(
            "cannot start {command}: it exists, but its interpreter (the #! line) or loader was \
             not found; install that, or point mcp.command at the interpreter"
        );
    }
    if program.is_absolute() {
        return format!("cannot start {command}: no such file (check mcp.command)");
    }
    format!(
        "cannot start {command}: not found on the upstream's PATH ({path}); install it there or \
         give mcp.command as an absolute path"
    )
}

/// Why a stdio upstream did not start.
enum StartFailure {
    /// `timeouts.startMs` passed first; the last stderr line seen before it, if any.
    TimedOut { last_stderr: Option<String> },
    /// The handshake or listing failed, or the child exited (description).
    Failed(String),
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    #[cfg_attr(
        windows,
        ignore = "its fixture path /nope/server is not absolute on Windows, so the message is the PATH one"
    )]
    fn spawn_failures_name_what_to_fix() {
        let dir = std::env::temp_dir();
        let spec = |command: &str, cwd: &str| LaunchSpec {
            command: command.to_owned(),
            cwd: cwd.to_owned(),
            env: HashMap::from([("PATH".to_owned(), "/usr/bin:/bin".to_owned())]),
            ..LaunchSpec::default()
        };
        let not_found = std::io::Error::from(std::io::ErrorKind::NotFound);
        let cwd = dir.to_string_lossy();
        assert_eq!(
            spawn_failure(&spec("nodex", &cwd), &not_found),
            "cannot start nodex: not found on the upstream's PATH (/usr/bin:/bin); install it \
             there or give mcp.command as an absolute path"
        );
        assert_eq!(
            spawn_failure(&spec("/nope/server", &cwd), &not_found),
            "cannot start /nope/server: no such file (check mcp.command)"
        );
        let missing = dir.join("tutti-no-such-dir-for-this-test");
        let missing = missing.to_string_lossy();
        assert_eq!(
            spawn_failure(&spec("node", &missing), &not_found),
            format!(
                "cannot start node: the working directory {missing} does not exist (check mcp.cwd)"
            )
        );
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        assert!(spawn_failure(&spec("node", &cwd), &denied).starts_with("cannot start node: "));
    }

    /// A script whose `#!` interpreter is missing also fails with ENOENT; the message must
    /// not send the user looking for the script.
    #[cfg(unix)]
    #[test]
    fn a_missing_interpreter_is_not_reported_as_a_missing_command() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("tutti-interp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let script = dir.join("server");
        std::fs::write(&script, "#!/nonexistent/interpreter\n").expect("script");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let error = std::process::Command::new(&script)
            .spawn()
            .expect_err("the interpreter does not exist");
        assert_eq!(error.kind(), std::io::ErrorKind::NotFound);
        let command = script.to_string_lossy().into_owned();
        let spec = LaunchSpec {
            command: command.clone(),
            cwd: dir.to_string_lossy().into_owned(),
            ..LaunchSpec::default()
        };
        let message = spawn_failure(&spec, &error);
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            message.starts_with(&format!(
                "cannot start {command}: it exists, but its interpreter"
            )),
            "{message}"
        );
    }
}

//! A real runtime (`tutti up`) on a temporary state directory.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{bin, file_tail, fixture_bin, fixture_connector, tools_dir};

/// Program names the test runtimes allow beyond the kernel's defaults. A bare name stands
/// only for the program PATH finds for it, so each runtime also allows the files its tests
/// run from outside a release by path ([`Runtime::allowed_commands`]).
pub const TEST_ALLOWED_COMMANDS: &str = "tutti-fixture-server,mcp-server-time";

/// How often status is polled while waiting for a condition.
const POLL: Duration = Duration::from_millis(100);
/// How long `Drop` waits after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(25);

/// Options of [`Runtime::start`].
#[derive(Clone, Debug)]
pub struct RuntimeOptions {
    /// Pass `--demo` to `tutti up`.
    pub demo: bool,
    /// Extra environment for `tutti up` (and so for the kernel and its children).
    pub env: Vec<(String, String)>,
    /// Variables removed from the environment `tutti up` inherits from the test (before
    /// `env` is applied).
    pub env_remove: Vec<String>,
    /// Extra arguments for `tutti up`.
    pub args: Vec<String>,
    /// How long to wait for `frontendUrl` in `tutti status --json`.
    pub ready_timeout: Duration,
    /// Working directory of `tutti up` (default: the test's own).
    pub cwd: Option<PathBuf>,
    /// Give `tutti up` a stdout pipe whose reader is already gone (a closed terminal,
    /// `tutti up | head -1`), instead of `up.stdout`.
    pub closed_stdout: bool,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        Self {
            demo: false,
            env: Vec::new(),
            env_remove: Vec::new(),
            args: Vec::new(),
            ready_timeout: Duration::from_secs(20),
            cwd: None,
            closed_stdout: false,
        }
    }
}

/// A running `tutti up` with its own state directory. Dropping it sends SIGTERM, waits up to
/// 10 s, then SIGKILLs. If the test is panicking, the temporary directory is kept and its path
/// and the kernel log tail are printed.
pub struct Runtime {
    child: Option<Child>,
    dir: Option<tempfile::TempDir>,
    root: PathBuf,
    state: PathBuf,
    releases: u32,
    frontend_url: String,
    opts: RuntimeOptions,
}

/// A live `tutti-upstream-worker` of one runtime, as seen in `/proc`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerProc {
    pub pid: u32,
    /// `TUTTI_WORKER_KEY` from its environment.
    pub key: String,
    /// `TUTTI_WORKER_GENERATION` from its environment (0 if unreadable).
    pub generation: u64,
}

impl Runtime {
    /// Starts `tutti up --state-dir <tmp>/state` and waits until `tutti status --json` shows a
    /// `frontendUrl`. Panics (with the kernel log tail) if it does not within the timeout.
    pub fn start(opts: RuntimeOptions) -> Runtime {
        let dir = tempfile::Builder::new()
            .prefix("tutti-e2e-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}"));
        let root = dir.path().to_path_buf();
        let state = root.join("state");
        let mut rt = Runtime {
            child: None,
            dir: Some(dir),
            root,
            state,
            releases: 0,
            frontend_url: String::new(),
            opts,
        };
        rt.spawn_up();
        rt.frontend_url = rt.wait_ready(rt.opts.ready_timeout);
        rt
    }

    /// Spawns `tutti up` on this runtime's state dir (stdout/stderr appended to
    /// `up.stdout` / `up.stderr` in the temporary root).
    fn spawn_up(&mut self) {
        let open = |name: &str| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.root.join(name))
                .unwrap_or_else(|e| panic!("cannot open {name} in {}: {e}", self.root.display()))
        };
        let mut cmd = Command::new(bin("tutti"));
        cmd.arg("up").arg("--state-dir").arg(&self.state);
        if self.opts.demo {
            cmd.arg("--demo");
        }
        cmd.args(&self.opts.args)
            .env_remove("TUTTI_STATE_DIR")
            // The owner's launch allowlist for the test upstreams that live outside their
            // releases (the fixture binary, copies of it, mcp-server-time). A test that sets
            // TUTTI_ALLOW_COMMANDS itself (even to "") overrides it.
            .env("TUTTI_ALLOW_COMMANDS", self.allowed_commands());
        for name in &self.opts.env_remove {
            cmd.env_remove(name);
        }
        cmd.envs(self.opts.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stderr(open("up.stderr"));
        if self.opts.closed_stdout {
            cmd.stdout(Stdio::piped());
        } else {
            cmd.stdout(open("up.stdout"));
        }
        if let Some(dir) = &self.opts.cwd {
            cmd.current_dir(dir);
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn `tutti up`: {e}"));
        // The pipe's only reader goes away before anything is written to it.
        drop(child.stdout.take());
        self.child = Some(child);
    }

    /// Starts `tutti up` again on the same state dir after [`Runtime::stop`] or
    /// [`Runtime::kill`], and waits for a `frontendUrl` as [`Runtime::start`] does. The URL
    /// may change (a new kernel picks a new port).
    pub fn restart(&mut self) {
        self.restart_unwaited();
        self.frontend_url = self.wait_ready(self.opts.ready_timeout);
    }

    /// Starts `tutti up` again on the same state dir like [`Runtime::restart`], but returns
    /// at once (to kill it again while it starts, or to wait for the kernel alone). The
    /// frontend URL is not updated.
    pub fn restart_unwaited(&mut self) {
        assert!(
            self.child.is_none(),
            "Runtime::restart: the runtime is still running; stop or kill it first"
        );
        self.spawn_up();
    }

    /// The options the next [`Runtime::restart`] uses (another environment, say).
    pub fn options_mut(&mut self) -> &mut RuntimeOptions {
        &mut self.opts
    }

    /// SIGKILLs `tutti up` (the kernel) and reaps it; nothing is stopped cleanly. Returns
    /// its exit status (`None` if it was not running).
    pub fn kill(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        let _ = child.kill();
        child.wait().ok()
    }

    /// Live `tutti-upstream-worker` processes of this runtime (their command line names this
    /// state dir), with key and generation read from their environment.
    pub fn workers(&self) -> Vec<WorkerProc> {
        Self::workers_in(&self.state)
    }

    /// [`Runtime::workers`] for the state dir `state`, for threads that cannot borrow the
    /// runtime.
    pub fn workers_in(state: &Path) -> Vec<WorkerProc> {
        let state = state.to_string_lossy().into_owned();
        crate::proc_tree::snapshot()
            .into_iter()
            .filter(|p| !p.is_zombie())
            .filter(|p| {
                p.cmdline.contains("tutti-upstream-worker") && p.cmdline.contains(state.as_str())
            })
            .map(|p| {
                let env = crate::proc_tree::environ(p.pid).unwrap_or_default();
                let get = |name: &str| {
                    env.iter()
                        .find(|(k, _)| k == name)
                        .map(|(_, v)| v.clone())
                        .unwrap_or_default()
                };
                WorkerProc {
                    pid: p.pid,
                    key: get("TUTTI_WORKER_KEY"),
                    generation: get("TUTTI_WORKER_GENERATION").parse().unwrap_or(0),
                }
            })
            .collect()
    }

    /// Every live process that belongs to this runtime: its command line, or an ancestor's,
    /// names the temporary root (state dir, release copies, [`Runtime::private_fixture`]).
    pub fn process_set(&self) -> Vec<u32> {
        crate::proc_tree::live_matching(&[&self.root.to_string_lossy()])
    }

    /// A copy of the fixture server under this runtime's temporary root, so that every
    /// process started from it (grandchildren and orphans included) names the root in its
    /// command line and [`Runtime::process_set`] finds it.
    pub fn private_fixture(&self) -> PathBuf {
        let dir = self.root.join("fixture-bin");
        let dest = dir.join(format!(
            "tutti-fixture-server{}",
            std::env::consts::EXE_SUFFIX
        ));
        if !dest.is_file() {
            std::fs::create_dir_all(&dir)
                .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
            let src = fixture_bin();
            if std::fs::hard_link(&src, &dest).is_err() {
                std::fs::copy(&src, &dest).unwrap_or_else(|e| {
                    panic!("cannot copy {} to {}: {e}", src.display(), dest.display())
                });
            }
        }
        dest
    }

    /// The owner allowlist (`TUTTI_ALLOW_COMMANDS`) this runtime gets unless a test sets its
    /// own: [`TEST_ALLOWED_COMMANDS`] plus, by path, [`Runtime::private_fixture`] and the
    /// test venv's `mcp-server-time`.
    pub fn allowed_commands(&self) -> String {
        let fixture = self.root.join("fixture-bin").join(format!(
            "tutti-fixture-server{}",
            std::env::consts::EXE_SUFFIX
        ));
        let time = tools_dir().join("venv").join("bin").join("mcp-server-time");
        format!(
            "{TEST_ALLOWED_COMMANDS},{},{}",
            fixture.display(),
            time.display()
        )
    }

    /// [`crate::fixture_connector`] whose command is [`Runtime::private_fixture`].
    pub fn private_fixture_connector(&self, key: &str, args: &[&str]) -> Value {
        let mut manifest = fixture_connector(key, args);
        manifest["mcp"]["command"] =
            Value::String(self.private_fixture().to_string_lossy().into_owned());
        manifest
    }

    fn wait_ready(&mut self, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!(
                    "`tutti up` exited early with {status}\n{}",
                    self.diagnostics()
                );
            }
            let out = self.tutti(&["status", "--json"]);
            let last;
            if out.status.success() {
                match serde_json::from_slice::<Value>(&out.stdout) {
                    Ok(v) => {
                        if let Some(url) = v["frontendUrl"].as_str().filter(|u| !u.is_empty()) {
                            return url.to_owned();
                        }
                        last = v.to_string();
                    }
                    Err(e) => last = format!("unparsable status JSON: {e}"),
                }
            } else {
                last = String::from_utf8_lossy(&out.stderr).trim().to_owned();
            }
            assert!(
                Instant::now() < deadline,
                "the runtime did not show a frontendUrl within {timeout:?}; last status: {last}\n{}",
                self.diagnostics()
            );
            std::thread::sleep(POLL);
        }
    }

    /// The state directory (`--state-dir`).
    pub fn state_dir(&self) -> &Path {
        &self.state
    }

    /// The temporary directory holding the state dir, release sources and `up.std{out,err}`.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The pid of `tutti up` (the kernel itself on Unix, where `tutti up` execs it).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The frontend's pid, from the `run/frontend.json` it writes.
    pub fn frontend_pid(&self) -> Option<u32> {
        let bytes =
            std::fs::read(tutti_rules::state_dir::layout::frontend_json(&self.state)).ok()?;
        let info: Value = serde_json::from_slice(&bytes).ok()?;
        u32::try_from(info["pid"].as_u64()?).ok()
    }

    /// The frontend's MCP URL, `http://127.0.0.1:<port>/mcp/connector`.
    pub fn frontend_url(&self) -> &str {
        &self.frontend_url
    }

    /// A `tutti` command with `--state-dir` set, for tests that need stdin or extra env.
    pub fn tutti_cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(bin("tutti"));
        cmd.arg("--state-dir")
            .arg(&self.state)
            .args(args)
            .env_remove("TUTTI_STATE_DIR")
            .stdin(Stdio::null());
        cmd
    }

    /// Runs `tutti --state-dir <state> ARGS…` and returns its output (success not checked).
    pub fn tutti(&self, args: &[&str]) -> Output {
        self.tutti_cmd(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run `tutti {}`: {e}", args.join(" ")))
    }

    /// `tutti connector connect KEY --from-env VAR` with `VAR=value` in its environment;
    /// panics unless it succeeds or if the value shows up in its output.
    pub fn connect_from_env(&self, key: &str, var: &str, value: &str) {
        let out = self
            .tutti_cmd(&["connector", "connect", key, "--from-env", var])
            .env(var, value)
            .output()
            .unwrap_or_else(|e| panic!("cannot run `tutti connector connect {key}`: {e}"));
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(
            out.status.success(),
            "`tutti connector connect {key}` failed with {}\nstdout: {stdout}\nstderr: {stderr}",
            out.status
        );
        assert!(
            !stdout.contains(value) && !stderr.contains(value),
            "`tutti connector connect {key}` printed the secret value"
        );
    }

    /// Runs `tutti ARGS…`, panics unless it succeeds, returns its stdout.
    pub fn tutti_ok(&self, args: &[&str]) -> String {
        let out = self.tutti(args);
        assert!(
            out.status.success(),
            "`tutti {}` failed with {}\nstdout: {}\nstderr: {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Writes a release directory (`connector.json` plus `files`, paths relative to the
    /// release, parents created, `#!` scripts made executable) under the temporary root and
    /// returns its path.
    pub fn write_release(&mut self, manifest: &Value, files: &[(&str, &[u8])]) -> PathBuf {
        self.releases += 1;
        let key = manifest["key"].as_str().unwrap_or("release");
        let dir = self
            .root
            .join("sources")
            .join(format!("{key}-{}", self.releases));
        write_release_at(&dir, manifest, files);
        dir
    }

    /// Writes a release dir and runs `tutti connector install DIR --yes`. Returns the output
    /// (check `status` to assert success or refusal).
    pub fn install_dir(&mut self, manifest: &Value, files: &[(&str, &[u8])]) -> Output {
        let dir = self.write_release(manifest, files);
        let dir = dir.to_string_lossy().into_owned();
        self.tutti(&["connector", "install", &dir, "--yes"])
    }

    /// [`Self::install_dir`] that panics unless the install succeeds.
    pub fn install_ok(&mut self, manifest: &Value, files: &[(&str, &[u8])]) {
        let out = self.install_dir(manifest, files);
        assert!(
            out.status.success(),
            "install of {} failed with {}\nstdout: {}\nstderr: {}",
            manifest["key"],
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// [`Self::install_ok`] with `--trust-updates` (SPEC §12): the upstream's later tool
    /// changes commit without review. For tests about what follows such a change.
    pub fn install_trusted(&mut self, manifest: &Value, files: &[(&str, &[u8])]) {
        let dir = self.write_release(manifest, files);
        let dir = dir.to_string_lossy().into_owned();
        self.tutti_ok(&["connector", "install", &dir, "--yes", "--trust-updates"]);
    }

    /// Issues a session token with `tutti session issue --format runtime` and returns it.
    pub fn issue_token(&self, workspace: &str, session: &str) -> String {
        self.issue_token_with(workspace, session, &[])
    }

    /// [`Runtime::issue_token`] with `extra` arguments (e.g. `--confirm high`).
    pub fn issue_token_with(&self, workspace: &str, session: &str, extra: &[&str]) -> String {
        let mut args = vec![
            "session",
            "issue",
            "--workspace",
            workspace,
            "--session",
            session,
            "--format",
            "runtime",
        ];
        args.extend_from_slice(extra);
        let out = self.tutti_ok(&args);
        let v: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| {
            panic!("`tutti session issue` printed no JSON binding ({e}): {out}")
        });
        let auth = v["mcpServers"][0]["headers"]["Authorization"]
            .as_str()
            .unwrap_or_else(|| panic!("no Authorization header in the binding: {v}"));
        auth.strip_prefix("Bearer ")
            .unwrap_or_else(|| panic!("Authorization is not a bearer token: {auth}"))
            .to_owned()
    }

    /// `tutti status --json`, parsed. Panics if the command fails.
    pub fn status_json(&self) -> Value {
        let out = self.tutti_ok(&["status", "--json"]);
        serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("`tutti status --json` is not JSON ({e}): {out}"))
    }

    /// The status entry of one connector (`connectors[]` with that `key`), if listed.
    pub fn connector_status(&self, key: &str) -> Option<Value> {
        find_connector(&self.status_json(), key)
    }

    /// Waits until connector `key` has `status`; returns its status entry. Panics on timeout
    /// with the last entry, the connector log and the kernel log.
    pub fn wait_status(&self, key: &str, status: &str, timeout: Duration) -> Value {
        self.wait_connector(key, timeout, &format!("status {status}"), |c| {
            c["status"] == status
        })
    }

    /// Waits until connector `key`'s status entry satisfies `pred`; returns the entry.
    pub fn wait_connector(
        &self,
        key: &str,
        timeout: Duration,
        what: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let entry = self.connector_status(key);
            if let Some(e) = &entry
                && pred(e)
            {
                return e.clone();
            }
            if Instant::now() >= deadline {
                panic!(
                    "connector {key} did not reach {what} within {timeout:?}; last entry: {}\n\
                     --- connector-{key}.log ---\n{}\n{}",
                    entry
                        .map(|e| e.to_string())
                        .unwrap_or_else(|| "<absent>".into()),
                    self.log_tail(&format!("connector-{key}.log"), 40),
                    self.diagnostics()
                );
            }
            std::thread::sleep(POLL);
        }
    }

    /// The last `lines` lines of `<state>/logs/<name>`.
    /// Every record of `logs/audit.jsonl` so far (a line that is not JSON fails the test).
    pub fn audit_lines(&self) -> Vec<Value> {
        let path = tutti_rules::state_dir::layout::audit_log(&self.state);
        let text = std::fs::read_to_string(path).unwrap_or_default();
        text.lines()
            .map(|l| {
                serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("audit line is not JSON ({e}): {l}"))
            })
            .collect()
    }

    pub fn log_tail(&self, name: &str, lines: usize) -> String {
        file_tail(
            &tutti_rules::state_dir::layout::logs(&self.state).join(name),
            lines,
        )
    }

    /// The whole of `<state>/logs/<name>` (empty if missing).
    pub fn log(&self, name: &str) -> String {
        std::fs::read(tutti_rules::state_dir::layout::logs(&self.state).join(name))
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// The kernel log tail and `tutti up`'s stderr, for failure messages.
    pub fn diagnostics(&self) -> String {
        format!(
            "--- kernel.log (tail) ---\n{}\n--- tutti up stderr (tail) ---\n{}",
            self.log_tail("kernel.log", 60),
            file_tail(&self.root.join("up.stderr"), 30)
        )
    }

    /// `tutti up`'s stdout so far.
    pub fn up_stdout(&self) -> String {
        self.read_root("up.stdout")
    }

    /// Everything `tutti up` (and the kernel it runs) wrote to stderr so far.
    pub fn up_stderr(&self) -> String {
        self.read_root("up.stderr")
    }

    fn read_root(&self, name: &str) -> String {
        std::fs::read(self.root.join(name))
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// The exit status of `tutti up` if it has exited (`None` while it runs).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Stops the runtime like Ctrl-C would: SIGTERM, wait up to 10 s, then SIGKILL. Returns
    /// the exit status (`None` if it was already stopped or could not be waited for).
    pub fn stop(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        terminate(&mut child);
        let deadline = Instant::now() + STOP_GRACE;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return Some(status),
                Ok(None) if Instant::now() < deadline => std::thread::sleep(POLL / 2),
                Ok(None) => {
                    eprintln!(
                        "tutti-tests: `tutti up` ignored SIGTERM for {STOP_GRACE:?}; killing it"
                    );
                    let _ = child.kill();
                    return child.wait().ok();
                }
                Err(_) => return None,
            }
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let _ = self.stop();
        // Whatever a failing test left behind (e.g. an orphaned grandchild): SIGKILL it by
        // pid; only processes naming this runtime's temporary root are touched.
        let leftovers = self.process_set();
        if !leftovers.is_empty() {
            eprintln!(
                "tutti-tests: killing processes left behind by this runtime:\n{}",
                crate::proc_tree::describe(&leftovers)
            );
            for pid in leftovers {
                kill_pid(pid);
            }
        }
        if std::thread::panicking()
            && let Some(dir) = self.dir.take()
        {
            let kept = dir.keep();
            eprintln!(
                "tutti-tests: test failed; state kept in {}\n{}",
                kept.display(),
                self.diagnostics()
            );
        }
    }
}

/// Writes `connector.json` and `files` into `dir` (created). Files whose content starts with
/// `#!` are made executable.
pub(crate) fn write_release_at(dir: &Path, manifest: &Value, files: &[(&str, &[u8])]) {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    let text = serde_json::to_vec_pretty(manifest)
        .unwrap_or_else(|e| panic!("cannot serialize the manifest: {e}"));
    std::fs::write(dir.join("connector.json"), text)
        .unwrap_or_else(|e| panic!("cannot write connector.json: {e}"));
    for (rel, content) in files {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .unwrap_or_else(|e| panic!("cannot create {}: {e}", parent.display()));
        }
        std::fs::write(&path, content)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        make_executable_if_script(&path, content);
    }
}

fn find_connector(status: &Value, key: &str) -> Option<Value> {
    status["connectors"]
        .as_array()?
        .iter()
        .find(|c| c["key"] == key)
        .cloned()
}

#[cfg(unix)]
fn terminate(child: &mut Child) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    }
}

/// SIGKILL to one process (Unix; a no-op elsewhere).
#[cfg(unix)]
pub(crate) fn kill_pid(pid: u32) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    if let Ok(pid) = i32::try_from(pid) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

#[cfg(windows)]
pub(crate) fn kill_pid(_pid: u32) {}

#[cfg(windows)]
fn terminate(child: &mut Child) {
    // No SIGTERM for a console-less child on Windows: stop it at once.
    let _ = child.kill();
}

/// Makes a script (content starting with `#!`) executable.
#[cfg(unix)]
fn make_executable_if_script(path: &Path, content: &[u8]) {
    use std::os::unix::fs::PermissionsExt;
    if content.starts_with(b"#!") {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|e| panic!("cannot chmod {}: {e}", path.display()));
    }
}

#[cfg(windows)]
fn make_executable_if_script(_path: &Path, _content: &[u8]) {}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_a_connector_by_key() {
        let s = json!({"frontendUrl": "u", "connectors": [{"key": "a", "status": "ready"}, {"key": "b"}]});
        assert_eq!(
            find_connector(&s, "a").map(|c| c["status"].clone()),
            Some(json!("ready"))
        );
        assert!(find_connector(&s, "c").is_none());
        assert!(find_connector(&json!({}), "a").is_none());
    }

    #[test]
    fn writes_a_release_dir() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let rel = dir.path().join("r");
        write_release_at(
            &rel,
            &json!({"key": "k"}),
            &[
                ("bin/tool", b"#!/bin/sh\n"),
                ("skills/s/SKILL.md", b"---\n"),
            ],
        );
        assert!(rel.join("connector.json").is_file());
        assert!(rel.join("bin/tool").is_file());
        assert!(rel.join("skills/s/SKILL.md").is_file());
    }
}

//! The Windows build end to end under Wine, driven from Linux. `tutti up`
//! with a fixture connector (the Windows build of `tutti-fixture-server`), list and call
//! through the frontend from the Linux side (it listens on 127.0.0.1), kill the worker and
//! see the tools come back, uninstall, stop with Ctrl-C, and no process of the set left in
//! Wine's process list.
//!
//! Runs only in the Wine lane (`scripts/test-wine`, which cross-builds the Windows binaries
//! and sets `TUTTI_WINE_BIN_DIR`): ignored otherwise. Run by hand with
//! `TUTTI_WINE_BIN_DIR=$PWD/target/x86_64-pc-windows-gnu/debug cargo test -p tutti-tests
//! --test wine_smoke -- --ignored`. Missing Wine or binaries fail with what to install.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tutti_tests::Mcp;

/// Where the Windows binaries are (`target/x86_64-pc-windows-gnu/debug`).
const BIN_ENV: &str = "TUTTI_WINE_BIN_DIR";
/// Wine is slow to start processes: generous deadlines, each a wait on a condition.
const READY: Duration = Duration::from_secs(120);
const STOPPED: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(250);
/// The executables of the process set (and the fixture upstream).
const SET: [&str; 5] = [
    "tutti-kernel.exe",
    "tutti-mcp-frontend.exe",
    "tutti-shim-manager.exe",
    "tutti-upstream-worker.exe",
    "tutti-fixture-server.exe",
];

/// `/tmp/x/y` as Wine sees it (`Z:\tmp\x\y`).
fn win_path(p: &Path) -> String {
    format!("Z:{}", p.to_string_lossy().replace('/', "\\"))
}

fn bin_dir() -> PathBuf {
    let Some(dir) = std::env::var_os(BIN_ENV) else {
        panic!(
            "{BIN_ENV} is not set: run scripts/test-wine (it cross-builds the Windows binaries)"
        );
    };
    let dir = PathBuf::from(dir);
    for exe in ["tutti.exe", "tutti-kernel.exe", "tutti-fixture-server.exe"] {
        assert!(
            dir.join(exe).is_file(),
            "{} is missing: run scripts/test-wine (it cross-builds the Windows binaries)",
            dir.join(exe).display()
        );
    }
    dir
}

/// `wine <exe> ARGS…` with Wine's own chatter off.
fn wine(exe: &Path) -> Command {
    let mut cmd = Command::new("wine");
    cmd.arg(exe)
        .env("WINEDEBUG", "-all")
        .env_remove("TUTTI_STATE_DIR")
        .stdin(Stdio::null());
    cmd
}

struct WineRuntime {
    bin: PathBuf,
    root: tempfile::TempDir,
    up: Option<Child>,
}

impl WineRuntime {
    fn state(&self) -> String {
        win_path(&self.root.path().join("state"))
    }

    fn fixture(&self) -> PathBuf {
        self.root
            .path()
            .join("fixture-bin")
            .join("tutti-fixture-server.exe")
    }

    fn start() -> WineRuntime {
        let bin = bin_dir();
        let root = tempfile::Builder::new()
            .prefix("tutti-wine-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}"));
        let mut rt = WineRuntime {
            bin,
            root,
            up: None,
        };
        std::fs::create_dir_all(rt.root.path().join("fixture-bin"))
            .unwrap_or_else(|e| panic!("cannot create fixture-bin: {e}"));
        std::fs::copy(rt.bin.join("tutti-fixture-server.exe"), rt.fixture())
            .unwrap_or_else(|e| panic!("cannot copy the fixture server: {e}"));
        let log = |name: &str| {
            std::fs::File::create(rt.root.path().join(name))
                .unwrap_or_else(|e| panic!("cannot create {name}: {e}"))
        };
        let child = wine(&rt.bin.join("tutti.exe"))
            .args(["up", "--state-dir", &rt.state()])
            .env("TUTTI_ALLOW_COMMANDS", win_path(&rt.fixture()))
            .stdout(log("up.stdout"))
            .stderr(log("up.stderr"))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run `wine tutti.exe up` (install wine: apt-get install wine wine64): {e}"));
        rt.up = Some(child);
        rt
    }

    /// Runs `wine tutti.exe --state-dir S ARGS…`. Its output goes through files, not pipes:
    /// Wine's helper processes (services started on demand) inherit the handles and would
    /// hold a pipe open long after `tutti.exe` exited.
    fn tutti(&self, args: &[&str]) -> Output {
        let out = self.root.path().join("cmd.stdout");
        let err = self.root.path().join("cmd.stderr");
        let status = wine(&self.bin.join("tutti.exe"))
            .arg("--state-dir")
            .arg(self.state())
            .args(args)
            .stdout(create(&out))
            .stderr(create(&err))
            .status()
            .unwrap_or_else(|e| panic!("cannot run `wine tutti.exe {}`: {e}", args.join(" ")));
        Output {
            status,
            stdout: std::fs::read(&out).unwrap_or_default(),
            stderr: std::fs::read(&err).unwrap_or_default(),
        }
    }

    fn tutti_ok(&self, args: &[&str]) -> String {
        let out = self.tutti(args);
        assert!(
            out.status.success(),
            "`tutti {}` failed with {}\nstdout: {}\nstderr: {}\n{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.diagnostics()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn status(&self) -> Option<Value> {
        let out = self.tutti(&["status", "--json"]);
        out.status.success().then_some(())?;
        serde_json::from_slice(&out.stdout).ok()
    }

    /// Waits until `tutti status --json` satisfies `check`; returns that status. Fails at
    /// once if `tutti up` ended.
    fn wait_status(&mut self, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + READY;
        let mut last = Value::Null;
        while Instant::now() < deadline {
            if let Some(v) = self.status() {
                if check(&v) {
                    return v;
                }
                last = v;
            }
            if let Some(up) = self.up.as_mut()
                && let Ok(Some(status)) = up.try_wait()
            {
                panic!(
                    "{what}: `tutti up` ended with {status} before that\n{}",
                    self.diagnostics()
                );
            }
            std::thread::sleep(POLL);
        }
        panic!(
            "{what}: not within {READY:?}; last status: {last}\n{}",
            self.diagnostics()
        );
    }

    /// What a failed run needs to be understood: the outputs of `tutti up` and of the last
    /// `tutti` command, the logs, what the state directory holds, and which processes run.
    fn diagnostics(&self) -> String {
        let read = |p: PathBuf| std::fs::read_to_string(&p).unwrap_or_else(|e| format!("({e})"));
        let state = self.root.path().join("state");
        let files: Vec<String> = walk(&state, 3)
            .iter()
            .filter_map(|p| p.strip_prefix(&state).ok())
            .map(|p| p.display().to_string())
            .collect();
        let wine = wine_processes();
        let linux = linux_procs(&self.root.path().to_string_lossy());
        format!(
            "--- up.stdout\n{}\n--- up.stderr\n{}\n--- last command's stdout\n{}\n--- last command's stderr\n{}\n--- kernel.log (tail)\n{}\n--- connector-fx.log (tail)\n{}\n--- state dir\n{files:?}\n--- Wine's processes\n{wine}\n--- Linux processes of this runtime\n{linux:?}",
            read(self.root.path().join("up.stdout")),
            read(self.root.path().join("up.stderr")),
            read(self.root.path().join("cmd.stdout")),
            read(self.root.path().join("cmd.stderr")),
            tail(&read(state.join("logs").join("kernel.log")), 40),
            tail(&read(state.join("logs").join("connector-fx.log")), 20),
        )
    }

    fn install_fixture(&self) {
        let release = self.root.path().join("sources").join("fx");
        std::fs::create_dir_all(&release).unwrap_or_else(|e| panic!("cannot create {e}"));
        let manifest = json!({
            "key": "fx",
            "name": "Fixture fx",
            "description": "Fixture MCP server fx (Windows build)",
            "version": "1.0.0",
            "mcp": {"transport": "stdio", "command": win_path(&self.fixture()), "args": []},
        });
        std::fs::write(release.join("connector.json"), manifest.to_string())
            .unwrap_or_else(|e| panic!("cannot write connector.json: {e}"));
        self.tutti_ok(&["connector", "install", &win_path(&release), "--yes"]);
    }

    fn token(&self) -> String {
        let out = self.tutti_ok(&[
            "session",
            "issue",
            "--workspace",
            "w",
            "--session",
            "s",
            "--format",
            "runtime",
        ]);
        let v: Value = serde_json::from_str(out.trim())
            .unwrap_or_else(|e| panic!("`tutti session issue` printed no JSON ({e}): {out}"));
        let auth = v["mcpServers"][0]["headers"]["Authorization"]
            .as_str()
            .unwrap_or("");
        auth.strip_prefix("Bearer ")
            .unwrap_or_else(|| panic!("no bearer token in the binding: {v}"))
            .to_owned()
    }
}

impl Drop for WineRuntime {
    fn drop(&mut self) {
        // A failed run leaves nothing behind: kill what is left of this runtime by pid.
        for p in linux_procs(&self.root.path().to_string_lossy()) {
            let _ = Command::new("kill")
                .args(["-KILL", &p.0.to_string()])
                .status();
        }
        if let Some(mut up) = self.up.take() {
            let _ = up.kill();
            let _ = up.wait();
        }
    }
}

/// A file for a child's output (see [`WineRuntime::tutti`] for why not a pipe).
fn create(path: &Path) -> std::fs::File {
    std::fs::File::create(path).unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()))
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Linux processes (Wine runs each Windows process as one) whose command line names
/// `needle`: (pid, command line).
fn linux_procs(needle: &str) -> Vec<(u32, String)> {
    let needle_win = needle.replace('/', "\\");
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != std::process::id())
        .filter_map(|pid| {
            let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let line = String::from_utf8_lossy(&raw).replace('\0', " ");
            (line.contains(needle) || line.contains(&needle_win)).then_some((pid, line))
        })
        .collect()
}

/// Wine's own process list (`winedbg`'s `info proc`), as it printed it.
fn wine_processes() -> String {
    let path = std::env::temp_dir().join(format!("tutti-winedbg-{}.txt", std::process::id()));
    let status = Command::new("winedbg")
        .args(["--command", "info proc"])
        .env("WINEDEBUG", "-all")
        .stdin(Stdio::null())
        .stdout(create(&path))
        .stderr(Stdio::null())
        .status()
        .unwrap_or_else(|e| {
            panic!("cannot run winedbg (install wine: apt-get install wine wine64): {e}")
        });
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let _ = std::fs::remove_file(&path);
    format!("(winedbg: {status})\n{text}")
}

/// The Windows processes of the set in Wine's own process list.
fn wine_set_processes() -> Vec<String> {
    let text = wine_processes();
    assert!(
        text.to_ascii_lowercase().contains("winedbg"),
        "winedbg printed no process list (it lists itself): {text}"
    );
    text.lines()
        .filter(|l| SET.iter().any(|exe| l.contains(exe)))
        .map(str::to_owned)
        .collect()
}

/// The paths under `dir`, `depth` levels deep.
fn walk(dir: &Path, depth: usize) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for path in entries.filter_map(Result::ok).map(|e| e.path()) {
        if depth > 1 && path.is_dir() {
            out.extend(walk(&path, depth - 1));
        }
        out.push(path);
    }
    out.sort();
    out
}

/// The fixture's `echo` as the frontend names it.
fn echo_tool(tools: &[Value]) -> Option<String> {
    tools
        .iter()
        .filter_map(|t| t["name"].as_str())
        .find(|n| n.ends_with("echo"))
        .map(str::to_owned)
}

/// Waits until the fixture's echo is listed and a call to it echoes (while a killed worker is
/// being replaced the tool may be listed and answer "unavailable": that is the condition not
/// met yet, not a retried failure). Returns the tool's name.
async fn wait_echo(mcp: &Mcp, what: &str, rt: &WineRuntime) -> String {
    let deadline = Instant::now() + READY;
    let mut last = Value::Null;
    loop {
        if let Some(name) = echo_tool(&mcp.list_tools().await) {
            let (_, _, reply) = mcp
                .call_tool(&name, json!({"message": "hello from linux"}))
                .await;
            let result = &reply["result"];
            if !result.is_null() {
                assert!(
                    result.to_string().contains("hello from linux"),
                    "{what}: echo did not echo: {result}"
                );
                return name;
            }
            last = reply;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: the fixture's echo did not answer within {READY:?}; last reply: {last}\n{}",
            rt.diagnostics()
        );
        tokio::time::sleep(POLL).await;
    }
}

fn worker_pids(rt: &WineRuntime) -> Vec<u32> {
    linux_procs(&rt.root.path().to_string_lossy())
        .into_iter()
        .filter(|(_, line)| line.contains("tutti-upstream-worker"))
        .map(|(pid, _)| pid)
        .collect()
}

fn sigkill(pid: u32) {
    let ok = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
    assert!(ok.is_ok_and(|s| s.success()), "cannot kill {pid}");
}

/// Stops the runtime as Ctrl-C in its console would (Wine turns SIGINT into CTRL_C_EVENT).
fn stop(rt: &mut WineRuntime) {
    let kernel: Vec<u32> = linux_procs(&rt.root.path().to_string_lossy())
        .into_iter()
        .filter(|(_, line)| line.contains("tutti-kernel"))
        .map(|(pid, _)| pid)
        .collect();
    assert!(
        !kernel.is_empty(),
        "no tutti-kernel process found\n{}",
        rt.diagnostics()
    );
    for pid in kernel {
        let _ = Command::new("kill")
            .args(["-INT", &pid.to_string()])
            .status();
    }
    let Some(mut up) = rt.up.take() else { return };
    let deadline = Instant::now() + STOPPED;
    loop {
        if let Ok(Some(status)) = up.try_wait() {
            assert!(
                status.success(),
                "`tutti up` ended with {status}\n{}",
                rt.diagnostics()
            );
            return;
        }
        if Instant::now() > deadline {
            let _ = up.kill();
            panic!(
                "`tutti up` did not end within {STOPPED:?} of Ctrl-C\n{}",
                rt.diagnostics()
            );
        }
        std::thread::sleep(POLL);
    }
}

/// Waits until none of the set is in Wine's process list (nor among Linux's processes naming
/// this runtime's directory).
fn assert_nothing_left(rt: &WineRuntime) {
    let deadline = Instant::now() + STOPPED;
    loop {
        let wine = wine_set_processes();
        let linux = linux_procs(&rt.root.path().to_string_lossy());
        if wine.is_empty() && linux.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "processes of the set are left after the stop:\nwine: {wine:?}\nlinux: {linux:?}"
        );
        std::thread::sleep(POLL);
    }
}

#[test]
#[ignore = "runs in the Wine lane (scripts/test-wine): needs wine and the Windows build"]
fn windows_build_under_wine_up_call_restart_uninstall_stop() {
    let mut rt = WineRuntime::start();
    let status = rt.wait_status("the frontend URL", |v| {
        v["frontendUrl"]
            .as_str()
            .is_some_and(|u| u.starts_with("http://127.0.0.1:"))
    });
    let url = status["frontendUrl"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    rt.install_fixture();
    let token = rt.token();
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("cannot build a tokio runtime: {e}"));
    let mcp = Mcp::legacy(&url, &token);
    tokio.block_on(async {
        mcp.initialize().await;
        let echo = wait_echo(&mcp, "after install", &rt).await;

        let workers = worker_pids(&rt);
        assert_eq!(
            workers.len(),
            1,
            "one worker for fx: {workers:?}\n{}",
            rt.diagnostics()
        );
        sigkill(workers[0]);
        let restarted = Instant::now() + READY;
        // A new worker (another pid) runs for fx.
        while worker_pids(&rt).iter().all(|p| workers.contains(p)) {
            assert!(
                Instant::now() < restarted,
                "the worker was not replaced\n{}",
                rt.diagnostics()
            );
            tokio::time::sleep(POLL).await;
        }
        assert_eq!(
            wait_echo(&mcp, "after the worker was killed", &rt).await,
            echo
        );

        rt.tutti_ok(&["connector", "uninstall", "fx"]);
        let gone = Instant::now() + READY;
        while echo_tool(&mcp.list_tools().await).is_some() {
            assert!(Instant::now() < gone, "echo still listed after uninstall");
            tokio::time::sleep(POLL).await;
        }
    });
    stop(&mut rt);
    assert_nothing_left(&rt);
}

//! Hardening of sockets and processes, each attacked over the real runtime: port takeover
//! across a frontend restart, slow bodies without a token, an oversized result line, a
//! `setsid()` grandchild of an upstream.
#![cfg(target_os = "linux")]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tutti_tests::{Mcp, Runtime, RuntimeOptions, proc_tree};

const READY: Duration = Duration::from_secs(30);

/// `(port, pid)` from `run/frontend.json`.
fn frontend_info(state: &Path) -> Option<(u16, u32)> {
    let bytes = std::fs::read(state.join("run").join("frontend.json")).ok()?;
    let info: Value = serde_json::from_slice(&bytes).ok()?;
    Some((
        u16::try_from(info["port"].as_u64()?).ok()?,
        u32::try_from(info["pid"].as_u64()?).ok()?,
    ))
}

fn sigkill(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// One attempt to take `127.0.0.1:port` the way a hostile local process would: a fresh
/// socket with `SO_REUSEADDR` (and, when `reuse_port`, `SO_REUSEPORT`), bound and listening.
fn try_take(port: u16, reuse_port: bool) -> Option<socket2::Socket> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).ok()?;
    socket.set_reuse_address(true).ok()?;
    if reuse_port {
        socket.set_reuse_port(true).ok()?;
    }
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    socket.bind(&addr.into()).ok()?;
    socket.listen(16).ok()?;
    Some(socket)
}

/// A thread that tries to take `port` in a tight loop until stopped; what it took it keeps.
struct PortThief {
    stop: Arc<AtomicBool>,
    attempts: Arc<AtomicU64>,
    taken: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<Vec<socket2::Socket>>>,
}

impl PortThief {
    fn start(port: u16) -> PortThief {
        let stop = Arc::new(AtomicBool::new(false));
        let attempts = Arc::new(AtomicU64::new(0));
        let taken = Arc::new(AtomicU64::new(0));
        let thread = {
            let (stop, attempts, taken) = (stop.clone(), attempts.clone(), taken.clone());
            std::thread::spawn(move || {
                let mut held = Vec::new();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    attempts.store(n, Ordering::Relaxed);
                    if let Some(socket) = try_take(port, n.is_multiple_of(2)) {
                        taken.fetch_add(1, Ordering::Relaxed);
                        held.push(socket);
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
                held
            })
        };
        PortThief {
            stop,
            attempts,
            taken,
            thread: Some(thread),
        }
    }

    fn taken(&self) -> u64 {
        self.taken.load(Ordering::Relaxed)
    }

    /// Stops the thread (releasing whatever it took); `(attempts, taken)`.
    fn finish(mut self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            drop(thread.join());
        }
        (self.attempts.load(Ordering::Relaxed), self.taken())
    }
}

impl Drop for PortThief {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// A fresh legacy client's initialize + echo call; its text.
async fn echo(url: &str, token: &str, key: &str, message: &str) -> String {
    let mcp = Mcp::legacy(url, token);
    mcp.initialize().await;
    let result = mcp
        .call_tool_ok(&format!("{key}_echo"), json!({"message": message}))
        .await;
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

// ---------------------------------------------------------------------------------------
// Port takeover

/// The frontend is killed twice while another process tries to bind its port with
/// `SO_REUSEADDR` / `SO_REUSEPORT` in a tight loop: the port is never free (the kernel holds
/// the socket and hands it to every frontend), a request sent while no frontend runs is
/// answered by the next one, and calls with a token work afterwards.
#[tokio::test(flavor = "multi_thread")]
async fn a_frontend_restart_never_frees_the_port_for_another_process() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    rt.install_ok(
        &rt.private_fixture_connector("fe", &["--tools", "echo"]),
        &[],
    );
    rt.wait_status("fe", "ready", READY);
    let token = rt.issue_token("ports", "s");
    let url = rt.frontend_url().to_owned();
    assert_eq!(echo(&url, &token, "fe", "before").await, "before");
    let state = rt.state_dir().to_path_buf();
    let Some((port, _)) = frontend_info(&state) else {
        panic!("no run/frontend.json\n{}", rt.diagnostics());
    };
    let thief = PortThief::start(port);
    for round in 0..2 {
        let Some((_, old)) = frontend_info(&state) else {
            panic!("no run/frontend.json\n{}", rt.diagnostics());
        };
        sigkill(old);
        // Once the old frontend can no longer accept it (a connection it accepted as it died
        // would be reset), a request is sent at once, while no frontend may be running yet:
        // it waits in the kernel's socket.
        let gone = proc_tree::wait_gone(&[old], READY);
        assert!(gone.is_empty(), "frontend {old} survived SIGKILL");
        let (url2, token2) = (url.clone(), token.clone());
        let during = tokio::spawn(async move { echo(&url2, &token2, "fe", "during").await });
        let deadline = Instant::now() + READY;
        let new = loop {
            assert_eq!(
                thief.taken(),
                0,
                "round {round}: another process bound 127.0.0.1:{port} after the frontend (pid {old}) was killed"
            );
            match frontend_info(&state) {
                Some((p, pid)) if pid != old && proc_tree::is_alive(pid) => {
                    assert_eq!(p, port, "the new frontend is on another port");
                    break pid;
                }
                _ => {}
            }
            assert!(
                Instant::now() < deadline,
                "round {round}: no new frontend within {READY:?}\n{}",
                rt.diagnostics()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let answered = tokio::time::timeout(READY, during).await;
        assert!(
            matches!(&answered, Ok(Ok(text)) if text == "during"),
            "round {round}: the request sent while frontend {old} was gone was not answered by frontend {new}: {answered:?}"
        );
        assert_eq!(echo(&url, &token, "fe", "after").await, "after");
    }
    // The thief keeps trying a little longer against the new frontend.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (attempts, taken) = thief.finish();
    assert_eq!(taken, 0, "the port was taken");
    assert!(
        attempts > 100,
        "the thief made only {attempts} attempts; the test proves nothing"
    );
}

// ---------------------------------------------------------------------------------------
// Slow bodies

/// Sequential echo calls on one client; their median latency.
async fn median_latency(mcp: &Mcp, key: &str, n: usize) -> Duration {
    let mut took = Vec::with_capacity(n);
    for i in 0..n {
        let started = Instant::now();
        let result = mcp
            .call_tool_ok(&format!("{key}_echo"), json!({"message": format!("m{i}")}))
            .await;
        took.push(started.elapsed());
        assert_eq!(result["content"][0]["text"], format!("m{i}"));
    }
    took.sort();
    took[n / 2]
}

/// What a slow-body connection saw: the first bytes of its answer (if any) and how long after
/// its headers the connection was closed (`None`: still open at the deadline).
struct SlowOutcome {
    answer: String,
    closed_after: Option<Duration>,
}

/// Sends `headers` (and a first byte of the body), then never the rest; reads until the
/// server closes the connection or `deadline` passes.
fn slow_body(port: u16, headers: String, deadline: Duration) -> SlowOutcome {
    let started = Instant::now();
    let mut outcome = SlowOutcome {
        answer: String::new(),
        closed_after: None,
    };
    let Ok(mut conn) = TcpStream::connect(("127.0.0.1", port)) else {
        outcome.answer = "connect failed".to_owned();
        return outcome;
    };
    if conn.write_all(headers.as_bytes()).is_err() || conn.write_all(b"{").is_err() {
        outcome.closed_after = Some(started.elapsed());
        return outcome;
    }
    let mut buf = [0u8; 4096];
    let mut seen = Vec::new();
    while started.elapsed() < deadline {
        let left = deadline.saturating_sub(started.elapsed());
        let _ = conn.set_read_timeout(Some(
            left.clamp(Duration::from_millis(1), Duration::from_millis(500)),
        ));
        match conn.read(&mut buf) {
            Ok(0) => {
                outcome.closed_after = Some(started.elapsed());
                break;
            }
            Ok(n) => seen.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            // A reset closes it too.
            Err(_) => {
                outcome.closed_after = Some(started.elapsed());
                break;
            }
        }
    }
    outcome.answer = String::from_utf8_lossy(&seen)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned();
    outcome
}

fn slow_request(port: u16, token: &str) -> String {
    format!(
        "POST /mcp/connector HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nMCP-Protocol-Version: 2025-06-18\r\n\
         Content-Length: 60000\r\n\r\n"
    )
}

/// 200 connections with a wrong token send their headers (`Content-Length: 60000`) and never
/// their body: each is answered 401 and closed at once, and a client with a token keeps its
/// latency meanwhile. A token holder's own slow body is answered 408 within the 10 s body
/// timeout.
/// `(soft, hard)` "Max open files" of `pid`.
fn open_files_limit(pid: u32) -> Option<(String, String)> {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let mut fields = line["Max open files".len()..].split_whitespace();
    Some((fields.next()?.to_owned(), fields.next()?.to_owned()))
}

/// Lowers this test process's soft descriptor limit (the runtime it starts inherits it), so
/// that raising it at start is visible; the hard limit stays.
fn lower_soft_descriptor_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let low = soft.min(hard).min(1024);
        let _ = setrlimit(Resource::RLIMIT_NOFILE, low, hard);
    }
}

/// The kernel (`tutti up` execs it) and the frontend raised their soft limit to the hard one.
fn assert_descriptor_limits_raised(rt: &Runtime) {
    let frontend = frontend_info(rt.state_dir()).map(|(_, pid)| pid);
    for (what, pid) in [("kernel", rt.pid()), ("frontend", frontend)] {
        let limit = pid.and_then(open_files_limit);
        assert!(
            limit.as_ref().is_some_and(|(soft, hard)| soft == hard),
            "the {what}'s descriptor limit (soft, hard) is {limit:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn slow_bodies_without_a_token_are_closed_and_agents_keep_their_latency() {
    lower_soft_descriptor_limit();
    let mut rt = Runtime::start(RuntimeOptions::default());
    rt.install_ok(
        &rt.private_fixture_connector("sb", &["--tools", "echo"]),
        &[],
    );
    rt.wait_status("sb", "ready", READY);
    let token = rt.issue_token("slow", "s");
    let Some((port, _)) = frontend_info(rt.state_dir()) else {
        panic!("no run/frontend.json\n{}", rt.diagnostics());
    };
    assert_descriptor_limits_raised(&rt);
    let mcp = Mcp::legacy(rt.frontend_url(), &token);
    mcp.initialize().await;
    let before = median_latency(&mcp, "sb", 30).await;

    // Body timeout 10 s (mcp-frontend BODY_READ_TIMEOUT) plus a generous margin.
    let deadline = Duration::from_secs(25);
    let attackers: Vec<_> = (0..200)
        .map(|i| {
            let headers = slow_request(port, &format!("not-a-valid-token-{i}"));
            std::thread::spawn(move || slow_body(port, headers, deadline))
        })
        .collect();
    let own = {
        let headers = slow_request(port, &token);
        std::thread::spawn(move || slow_body(port, headers, deadline))
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let during = median_latency(&mcp, "sb", 30).await;

    let mut open = 0;
    let mut not_401 = Vec::new();
    let mut slowest = Duration::ZERO;
    for attacker in attackers {
        let Ok(outcome) = attacker.join() else {
            panic!("an attacker thread panicked");
        };
        match outcome.closed_after {
            Some(after) => slowest = slowest.max(after),
            None => open += 1,
        }
        if !outcome.answer.contains(" 401 ") {
            not_401.push(outcome.answer);
        }
    }
    assert_eq!(
        open, 0,
        "{open} of 200 connections without a valid token were still open {deadline:?} after sending their headers"
    );
    assert!(
        not_401.is_empty(),
        "connections without a valid token got no 401: {not_401:?}"
    );
    let Ok(own) = own.join() else {
        panic!("the token holder's slow-body thread panicked");
    };
    assert!(
        own.answer.contains(" 408 "),
        "a token holder's body that never comes is answered 408, got {:?}",
        own.answer
    );
    let closed = own.closed_after.unwrap_or(deadline);
    assert!(
        closed >= Duration::from_secs(9) && closed < Duration::from_secs(20),
        "the 408 came after {closed:?}, not after the 10 s body timeout"
    );
    assert!(
        during <= before * 10 + Duration::from_millis(100),
        "median latency went from {before:?} to {during:?} under 200 slow-body connections (401s closed within {slowest:?})"
    );
    assert_eq!(
        echo(rt.frontend_url(), &token, "sb", "still").await,
        "still"
    );
}

// ---------------------------------------------------------------------------------------
// An oversized result line

/// The worker's line limit (`upstream-worker` `stdio::MAX_STDOUT_LINE`).
const MAX_RESULT_BYTES: u64 = 64 * 1024 * 1024;

/// A 70 MB result line fails its call at once (not after `callMs`) with
/// `[MCP_UNAVAILABLE] <key>: result larger than N bytes`, and the same worker goes on serving.
#[tokio::test(flavor = "multi_thread")]
async fn an_oversized_result_fails_at_once_and_the_worker_keeps_serving() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let mut manifest = rt.private_fixture_connector("huge", &["--tools", "big,echo"]);
    manifest["timeouts"] = json!({"callMs": 90_000});
    rt.install_ok(&manifest, &[]);
    let before = rt.wait_status("huge", "ready", READY);
    let token = rt.issue_token("big", "s");
    let mcp = Mcp::legacy(rt.frontend_url(), &token);
    mcp.initialize().await;

    let started = Instant::now();
    let (status, _, body) = mcp
        .call_tool("huge_big", json!({"bytes": 70_000_000}))
        .await;
    let took = started.elapsed();
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["error"]["message"],
        format!("[MCP_UNAVAILABLE] huge: result larger than {MAX_RESULT_BYTES} bytes"),
        "{body}"
    );
    assert!(
        took < Duration::from_secs(30),
        "the oversized result took {took:?} to fail (callMs is 90 s)"
    );

    // The same generation answers the next calls.
    assert_eq!(
        echo(rt.frontend_url(), &token, "huge", "next").await,
        "next"
    );
    let small = mcp.call_tool_ok("huge_big", json!({"bytes": 1000})).await;
    assert_eq!(
        small["content"][0]["text"].as_str().map(str::len),
        Some(1000)
    );
    let after = rt.wait_status("huge", "ready", READY);
    assert_eq!(
        after["generation"], before["generation"],
        "the worker was restarted: {after}"
    );
}

// ---------------------------------------------------------------------------------------
// Setsid grandchildren

/// `(pgrp, session)` of `pid` from `/proc/<pid>/stat`.
fn group_and_session(pid: u32) -> Option<(u32, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // state ppid pgrp session …
    Some((fields.get(2)?.parse().ok()?, fields.get(3)?.parse().ok()?))
}

/// Installs a connector whose upstream starts a `setsid()` grandchild; the grandchild's pid,
/// checked to have left the worker's process group and session.
async fn setsid_grandchild(rt: &mut Runtime, mcp: &Mcp, key: &str) -> u32 {
    rt.install_ok(
        &rt.private_fixture_connector(key, &["--setsid-grandchild", "--tools", "whoami,echo"]),
        &[],
    );
    rt.wait_status(key, "ready", READY);
    let result = mcp.call_tool_ok(&format!("{key}_whoami"), json!({})).await;
    let text = result["content"][0]["text"].as_str().unwrap_or_default();
    let who: Value = serde_json::from_str(text).unwrap_or(Value::Null);
    let grandchild = who["grandchild"].as_u64().unwrap_or(0) as u32;
    let upstream = who["pid"].as_u64().unwrap_or(0) as u32;
    assert!(grandchild > 0 && upstream > 0, "whoami: {result}");
    // It calls setsid() as its first act; give it that moment.
    let deadline = Instant::now() + Duration::from_secs(10);
    while group_and_session(grandchild).map(|(_, sid)| sid) != Some(grandchild) {
        assert!(
            Instant::now() < deadline,
            "grandchild {grandchild} did not leave its session"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (group, _) = group_and_session(upstream).unwrap_or_default();
    assert_ne!(
        group, grandchild,
        "the grandchild must be out of the upstream's group"
    );
    grandchild
}

/// Fails with `what` if any of `pids` is still alive 10 s later; kills the survivors first so
/// a failing run leaves nothing behind.
fn assert_gone(what: &str, pids: &[u32]) {
    let left = proc_tree::wait_gone(pids, Duration::from_secs(10));
    let described = proc_tree::describe(&left);
    for pid in &left {
        sigkill(*pid);
    }
    assert!(
        left.is_empty(),
        "{what}: the setsid grandchild is still alive 10 s later:\n{described}"
    );
}

/// A grandchild that left the upstream's session and process group (`setsid()`, as a daemon
/// does) is gone after `tutti connector uninstall` and after a clean stop of the runtime.
#[tokio::test(flavor = "multi_thread")]
async fn a_setsid_grandchild_is_gone_after_uninstall_and_after_a_clean_stop() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let token = rt.issue_token("setsid", "s");
    let mcp = Mcp::legacy(rt.frontend_url(), &token);
    mcp.initialize().await;
    let first = setsid_grandchild(&mut rt, &mcp, "sid").await;
    let second = setsid_grandchild(&mut rt, &mcp, "sid2").await;

    rt.tutti_ok(&["connector", "uninstall", "sid"]);
    assert_gone("after `tutti connector uninstall`", &[first]);
    assert!(
        proc_tree::is_alive(second),
        "the other connector's grandchild was killed too"
    );

    assert!(rt.stop().is_some_and(|s| s.success()));
    assert_gone("after a clean stop (SIGTERM to `tutti up`)", &[second]);
}

/// The same after SIGKILL of the kernel (its workers get SIGTERM as their parent-death
/// signal).
#[tokio::test(flavor = "multi_thread")]
async fn a_setsid_grandchild_is_gone_after_the_kernel_is_killed() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let token = rt.issue_token("setsid", "k");
    let mcp = Mcp::legacy(rt.frontend_url(), &token);
    mcp.initialize().await;
    let grandchild = setsid_grandchild(&mut rt, &mcp, "sidk").await;
    rt.kill();
    assert_gone("after SIGKILL of the kernel", &[grandchild]);
}

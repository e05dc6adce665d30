//! `tutti down` stops the runtime `tutti up` started and returns only once every process of
//! it is gone; `tutti up` itself has exited by then.

use std::time::{Duration, Instant};

use tutti_tests::{Runtime, RuntimeOptions};

/// `down` returns within the kernel's graceful stop; with nothing in flight it is quick.
const DOWN_BOUND: Duration = Duration::from_secs(10);

#[test]
fn down_stops_the_runtime_and_waits_until_every_process_is_gone() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let manifest = rt.private_fixture_connector("alpha", &["--tools", "echo"]);
    rt.install_ok(&manifest, &[]);
    rt.wait_status("alpha", "ready", Duration::from_secs(20));
    assert!(
        rt.process_set().len() >= 4,
        "kernel, frontend, shim manager, worker and upstream expected: {:?}",
        rt.process_set()
    );

    let start = Instant::now();
    let out = rt.tutti(&["down"]);
    let took = start.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "`tutti down` failed: {stderr}");
    assert!(took < DOWN_BOUND, "`tutti down` took {took:?}");
    assert!(stderr.contains("tutti stopped"), "{stderr}");
    let left = rt.process_set();
    assert!(
        left.is_empty(),
        "processes of the runtime still running when `tutti down` returned:\n{}",
        tutti_tests::proc_tree::describe(&left)
    );
    // `tutti up` is the kernel (exec): it has exited, not merely been signalled.
    let deadline = Instant::now() + Duration::from_millis(500);
    while rt.exited().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let status = rt.exited();
    assert!(
        status.is_some_and(|s| s.success()),
        "`tutti up` has not exited 0 after `tutti down`: {status:?}"
    );

    let again = rt.tutti(&["down"]);
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success(), "{stderr}");
    assert!(stderr.contains("tutti is not running"), "{stderr}");
}

/// Ctrl-C: `tutti up` exits within a bound, and by then no process it started is left, not
/// even a zombie waiting for init to reap it (a Python upstream outlives its worker by a few
/// milliseconds; it used to linger that way for seconds after `tutti up` had exited).
#[cfg(target_os = "linux")]
#[test]
fn up_exits_only_once_every_process_it_started_is_gone() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    use tutti_tests::proc_tree;

    let mut rt = Runtime::start(RuntimeOptions::default());
    let time = tutti_tests::require_python_venv()
        .join("bin")
        .join("mcp-server-time");
    let clocks = ["clock-a", "clock-b", "clock-c"];
    for key in clocks {
        let manifest = serde_json::json!({
            "key": key, "name": "Clock", "description": "the reference time server",
            "version": "1", "mcp": {"transport": "stdio", "command": time.to_string_lossy()},
        });
        rt.install_ok(&manifest, &[]);
    }
    let fixture = rt.private_fixture_connector("alpha", &["--tools", "echo"]);
    rt.install_ok(&fixture, &[]);
    // A misspelled npx package: npm starts, fails, and the connector restarts over and over.
    let misspelled = serde_json::json!({
        "key": "misspelled", "name": "Misspelled", "description": "no such package",
        "version": "1", "mcp": {"transport": "stdio", "command": "npx",
            "args": ["-y", "@modelcontextprotocol/server-memoryy"]},
    });
    rt.install_ok(&misspelled, &[]);
    for key in clocks {
        rt.wait_status(key, "ready", Duration::from_secs(30));
    }
    rt.wait_status("alpha", "ready", Duration::from_secs(20));
    let up = rt
        .pid()
        .unwrap_or_else(|| panic!("tutti up is not running"));
    let started = proc_tree::descendants(up);
    assert!(started.len() >= 10, "{}", proc_tree::describe(&started));

    let signalled = Instant::now();
    let pid = i32::try_from(up).unwrap_or_else(|e| panic!("{e}"));
    kill(Pid::from_raw(pid), Signal::SIGINT).unwrap_or_else(|e| panic!("SIGINT: {e}"));
    while rt.exited().is_none() && signalled.elapsed() < DOWN_BOUND {
        std::thread::sleep(Duration::from_millis(5));
    }
    let took = signalled.elapsed();
    assert!(
        rt.exited().is_some(),
        "`tutti up` still runs {took:?} after SIGINT"
    );
    let left: Vec<u32> = started
        .iter()
        .copied()
        .filter(|p| proc_tree::info(*p).is_some())
        .collect();
    assert!(
        left.is_empty(),
        "`tutti up` exited after {took:?} but these processes it started were still there:\n{}",
        proc_tree::describe(&left)
    );
}

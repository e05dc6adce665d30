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

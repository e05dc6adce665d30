//! An idle runtime costs nothing: with no call and no change, no process of it (kernel,
//! frontend, shim manager, each worker) wakes more than once per 10 s on average, with
//! telemetry export off and on. Wake-ups are voluntary context switches
//! (`proc_tree::Wakeups`), counted over 15 s: a process that meets the target wakes at most
//! twice in any 15 s (a 10 s timer can fire twice in one window), while a timer of 5 s, or any
//! poll, wakes it three times or more.

use std::time::Duration;

use serde_json::json;
use tutti_tests::otlp::OtlpReceiver;
use tutti_tests::{Mcp, Runtime, RuntimeOptions, fixture_connector, proc_tree};

const READY: Duration = Duration::from_secs(30);
/// The window over which wake-ups are counted.
const WINDOW: Duration = Duration::from_secs(15);
/// At most once per 10 s on average, measured over [`WINDOW`] (see the module comment).
const MOST_WAKEUPS: u64 = 2;
/// What the runtime may still do after the last change, before the window opens: the start
/// deadline's timer of each worker (`startMs` below plus the kernel's 2 s slack), the end of
/// the kernel's blocking threads (10 s after their last use) and the second release of free
/// heap (1 s + [`tutti_os::memory::RELEASE_AGAIN_AFTER`] after the last change). One-off, not
/// periodic.
const SETTLE: Duration =
    tutti_os::memory::RELEASE_AGAIN_AFTER.saturating_add(Duration::from_secs(2));

/// Starts a runtime with `env`, two connectors ready and one call answered, waits
/// [`SETTLE`], and checks every process of it over [`WINDOW`].
async fn assert_idle_runtime_sleeps(env: Vec<(String, String)>) {
    let mut rt = Runtime::start(RuntimeOptions {
        env,
        ..RuntimeOptions::default()
    });
    for key in ["quiet", "still"] {
        let mut manifest = fixture_connector(key, &["--tools", "echo"]);
        manifest["timeouts"] = json!({"startMs": 3000});
        rt.install_ok(&manifest, &[]);
    }
    rt.wait_status("quiet", "ready", READY);
    rt.wait_status("still", "ready", READY);
    let token = rt.issue_token("w", "s");
    let mcp = Mcp::legacy(rt.frontend_url(), &token);
    mcp.initialize().await;
    mcp.call_tool_ok("quiet_echo", json!({"message": "once"}))
        .await;
    drop(mcp);
    tokio::time::sleep(SETTLE).await;
    let kernel = rt
        .pid()
        .unwrap_or_else(|| panic!("the runtime is not running"));
    let procs = proc_tree::runtime_processes(kernel);
    let names: Vec<&str> = procs.iter().map(|(n, _)| n.as_str()).collect();
    for role in ["tutti-kernel", "tutti-mcp-frontend", "tutti-shim-manager"] {
        assert!(names.contains(&role), "no {role} among {names:?}");
    }
    let workers = names.iter().filter(|n| **n == "tutti-upstream-worker");
    assert_eq!(workers.count(), 2, "not two workers among {names:?}");
    let woke = tokio::task::block_in_place(|| proc_tree::wakeups_over(&procs, WINDOW));
    assert_eq!(woke.len(), procs.len(), "a process ended: {woke:?}");
    let busy: Vec<_> = woke.iter().filter(|(_, _, n)| *n > MOST_WAKEUPS).collect();
    assert!(
        busy.is_empty(),
        "idle for {WINDOW:?}, these woke more than {MOST_WAKEUPS} times (a timer or a poll that \
         should not run): {busy:?}; all: {woke:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idle_runtime_does_not_wake_up() {
    assert_idle_runtime_sleeps(Vec::new()).await;
}

/// The same with spans and metrics exported at the default intervals: spans 5 s after the
/// first one waiting, none while none wait; metrics every 60 s, the first after this window
/// (and unchanged ones skipped, `tutti_telemetry`'s unit tests).
#[tokio::test(flavor = "multi_thread")]
async fn an_idle_runtime_exporting_telemetry_does_not_wake_up() {
    let receiver = OtlpReceiver::start(0);
    let env = vec![(
        "OTEL_EXPORTER_OTLP_ENDPOINT".to_string(),
        receiver.endpoint(),
    )];
    assert_idle_runtime_sleeps(env).await;
}

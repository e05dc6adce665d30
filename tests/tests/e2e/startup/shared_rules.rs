//! The shared rules, end to end over the real binaries: the one sibling-binary rule
//! (`tutti_rules::sibling`) and the one worker environment
//! (`tutti_rules::child_env`) hold for every process that uses them.
#![cfg(unix)]

use std::time::Duration;

use tutti_tests::{Runtime, RuntimeOptions};

/// Starting workers and upstreams on a loaded 2-core machine.
const READY: Duration = Duration::from_secs(30);

/// The worker logs this when its `RUST_LOG` (the kernel's `TUTTI_WORKER_LOG`) cannot be read.
const UNREADABLE_LOG_SETTING: &str = "TUTTI_WORKER_LOG (the worker's RUST_LOG) is not";

fn runtime_with(env: &[(&str, &str)]) -> Runtime {
    Runtime::start(RuntimeOptions {
        env: env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        ..RuntimeOptions::default()
    })
}

/// `TUTTI_LIBEXEC_DIR=""` means unset for every binary (the CLI always read it so): the kernel
/// finds its siblings next to itself, starts the frontend and serves a connector. Before, the
/// kernel took the empty value as a directory and refused to start.
#[test]
fn an_empty_libexec_dir_means_next_to_the_binaries() {
    let mut rt = runtime_with(&[("TUTTI_LIBEXEC_DIR", "")]);
    let manifest = rt.private_fixture_connector("emptylib", &[]);
    rt.install_ok(&manifest, &[]);
    let status = rt.wait_status("emptylib", "ready", READY);
    assert!(
        status["toolCount"].as_u64().unwrap_or(0) > 0,
        "no tools: {status}"
    );
}

/// A probe starts the worker with the same environment as a supervised worker: with
/// `TUTTI_WORKER_LOG` set, both logs show the worker read it. Before, the probe worker got
/// `PATH` only (no `HOME`, `TMPDIR`, log setting; on Windows no `SystemRoot`).
#[test]
fn a_probe_worker_gets_the_same_environment_as_a_supervised_worker() {
    let mut rt = runtime_with(&[("TUTTI_WORKER_LOG", "worker=loud")]);
    let manifest = rt.private_fixture_connector("envprobe", &[]);
    rt.install_ok(&manifest, &[]);
    rt.wait_status("envprobe", "ready", READY);
    let supervised = rt.log("connector-envprobe.log");
    assert!(
        supervised.contains(UNREADABLE_LOG_SETTING),
        "the supervised worker did not see TUTTI_WORKER_LOG:\n{supervised}"
    );

    let probed = rt.private_fixture_connector("probedenv", &[]);
    let dir = rt.write_release(&probed, &[]);
    let out = rt.tutti(&["connector", "probe", &dir.to_string_lossy(), "--yes"]);
    assert!(
        out.status.success(),
        "probe failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let log = rt.log("probe-probedenv.log");
    assert!(
        log.contains(UNREADABLE_LOG_SETTING),
        "the probe worker did not get the worker environment (TUTTI_WORKER_LOG):\n{log}"
    );
}

//! The shutdown timing chain. When the runtime stops, each stage must finish inside the bound
//! of the stage that waits for it, so every bound is derived from the one it must exceed:
//! changing one moves the others and keeps their order (the test below asserts it).
//!
//! ```text
//! worker drain 10 s  <  frontend drain 12 s  <  frontend SIGKILL 14 s  <  kernel waits 16 s
//! kernel's own bound 24 s (ack + connectors + gRPC server)  <  service manager stop 30 s
//! ```

use std::time::Duration;

/// Time one stage gets to act on what the stage before it did (answer, exit, be reaped).
pub const STEP: Duration = Duration::from_secs(2);

/// How long calls in flight may take to finish when the runtime shuts down (SPEC §4 "drain
/// calls"); what still runs then is answered `[MCP_UNAVAILABLE]` and cancelled upstream.
pub const WORKER_DRAIN: Duration = Duration::from_secs(10);

/// How long the frontend lets in-flight requests finish once it is stopping: longer than the
/// workers drain, so a call cut off there still gets its `[MCP_UNAVAILABLE]` answer through it.
pub const FRONTEND_DRAIN: Duration = WORKER_DRAIN.saturating_add(STEP);

/// When the kernel SIGKILLs the frontend (and the shim manager) after asking it to stop.
pub const SERVICE_KILL: Duration = FRONTEND_DRAIN.saturating_add(STEP);

/// How long the kernel waits for its frontend and shim-manager supervisors to end.
pub const SERVICES_WAIT: Duration = SERVICE_KILL.saturating_add(STEP);

/// A stopped worker's process group gets SIGTERM, then SIGKILL this much later.
pub const WORKER_KILL_AFTER_TERM: Duration = STEP;

/// How long a connector's supervisor waits for its workers to be reaped after their drain:
/// the exit wait, SIGTERM → SIGKILL ([`WORKER_KILL_AFTER_TERM`]) and the reaping, a step each.
pub const WORKER_REAP_AFTER_DRAIN: Duration = STEP.saturating_mul(3);

/// How long a session cache may take to confirm a revocation before the frontend is stopped
/// (also the first step of a shutdown: tokens are revoked before anything drains).
pub const REVOCATION_ACK: Duration = STEP;

/// How long the kernel waits for every connector to stop: the drain, then SIGTERM and SIGKILL
/// one step apart, with room for the supervisors' own bookkeeping.
pub const CONNECTORS_WAIT: Duration = WORKER_DRAIN.saturating_add(Duration::from_secs(10));

/// How long the kernel's gRPC server gets to finish its last replies.
pub const KERNEL_SERVER_STOP: Duration = STEP;

/// The longest a graceful kernel shutdown takes: revocation, then the connectors while the
/// services stop in parallel, then the server.
pub const KERNEL_STOP_BOUND: Duration = REVOCATION_ACK
    .saturating_add(longer(CONNECTORS_WAIT, SERVICE_KILL))
    .saturating_add(KERNEL_SERVER_STOP);

/// What a service manager is told to allow for a stop (systemd `TimeoutStopSec`, the Windows
/// SCM wait hint) before it kills the kernel's whole process group.
pub const SERVICE_MANAGER_STOP: Duration = KERNEL_STOP_BOUND.saturating_add(Duration::from_secs(6));

const fn longer(a: Duration, b: Duration) -> Duration {
    if a.as_nanos() >= b.as_nanos() { a } else { b }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stage_ends_inside_the_bound_of_the_stage_that_waits_for_it() {
        let chain = [
            WORKER_DRAIN,
            FRONTEND_DRAIN,
            SERVICE_KILL,
            SERVICES_WAIT,
            SERVICE_MANAGER_STOP,
        ];
        assert!(chain.windows(2).all(|w| w[0] < w[1]), "{chain:?}");
        // A worker is drained, then SIGTERMed and SIGKILLed a step apart: the kernel waits longer.
        assert!(WORKER_DRAIN + STEP + WORKER_KILL_AFTER_TERM < CONNECTORS_WAIT);
        // A supervisor's wait for its reaped workers ends inside the kernel's wait for it.
        assert!(WORKER_KILL_AFTER_TERM < WORKER_REAP_AFTER_DRAIN);
        assert!(WORKER_DRAIN + WORKER_REAP_AFTER_DRAIN < CONNECTORS_WAIT);
        // The services stop while the connectors do; the kernel outwaits both.
        assert!(KERNEL_STOP_BOUND >= REVOCATION_ACK + CONNECTORS_WAIT + KERNEL_SERVER_STOP);
        assert!(KERNEL_STOP_BOUND >= REVOCATION_ACK + SERVICE_KILL + KERNEL_SERVER_STOP);
        assert!(KERNEL_STOP_BOUND < SERVICE_MANAGER_STOP);
    }

    #[test]
    fn todays_values() {
        let secs = |d: Duration| d.as_secs();
        assert_eq!(
            [
                secs(WORKER_DRAIN),
                secs(FRONTEND_DRAIN),
                secs(SERVICE_KILL),
                secs(SERVICES_WAIT),
                secs(KERNEL_STOP_BOUND),
                secs(SERVICE_MANAGER_STOP),
            ],
            [10, 12, 14, 16, 24, 30]
        );
    }
}

//! Spans the other processes dropped because their OpenTelemetry export queue was full:
//! the frontend's running total arrives on its call records, each worker's in a
//! `TELEMETRY_DROPPED` report. Shown by `tutti status` and exported as
//! `tutti.telemetry.dropped`. Counts since the kernel started; a process that starts again
//! counts from zero, so its earlier total is kept (a worker by its generation, the frontend
//! when its total goes down).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// A leaf module (`state.rs` holds one of these): its own lock helper, same rule as
/// `state::lock` (a panic while holding the lock leaves plain numbers behind).
fn lock(m: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One process's running total, across its restarts.
#[derive(Clone, Copy, Debug, Default)]
struct Running {
    /// What earlier runs of the process dropped.
    earlier: u64,
    /// The last total the current run reported.
    last: u64,
}

impl Running {
    fn note(&mut self, total: u64, restarted: bool) {
        if restarted || total < self.last {
            self.earlier += self.last;
            self.last = total;
        } else {
            self.last = total;
        }
    }

    fn total(self) -> u64 {
        self.earlier + self.last
    }
}

#[derive(Debug, Default)]
struct Inner {
    frontend: Running,
    /// Connector key -> (generation of the last report, its workers' totals).
    workers: HashMap<String, (u64, Running)>,
}

/// See the module documentation.
#[derive(Debug, Default)]
pub struct TelemetryDrops {
    inner: Mutex<Inner>,
}

impl TelemetryDrops {
    /// The frontend's running total (`CallRecord.telemetry_dropped_total`).
    pub fn note_frontend(&self, total: u64) {
        lock(&self.inner).frontend.note(total, false);
    }

    /// Worker `generation` of `key` reports its running total.
    pub fn note_worker(&self, key: &str, generation: u64, total: u64) {
        let mut inner = lock(&self.inner);
        let (last_generation, running) = inner.workers.entry(key.to_owned()).or_default();
        let restarted = *last_generation != generation;
        *last_generation = generation;
        running.note(total, restarted);
    }

    /// What the frontend dropped.
    pub fn frontend(&self) -> u64 {
        lock(&self.inner).frontend.total()
    }

    /// What the workers of `key` dropped.
    pub fn worker(&self, key: &str) -> u64 {
        lock(&self.inner)
            .workers
            .get(key)
            .map_or(0, |(_, r)| r.total())
    }

    /// `(key, dropped)` of every connector whose workers reported.
    #[cfg_attr(not(feature = "otel"), allow(dead_code))]
    pub fn workers(&self) -> Vec<(String, u64)> {
        lock(&self.inner)
            .workers
            .iter()
            .map(|(k, (_, r))| (k.clone(), r.total()))
            .collect()
    }

    /// A status reply with only the drop counts set (the total and the frontend's), for
    /// `..` in `Status`.
    pub fn reply(&self) -> tutti_proto::kernel::StatusReply {
        tutti_proto::kernel::StatusReply {
            telemetry_dropped: self.total(),
            frontend_telemetry_dropped: self.frontend(),
            ..Default::default()
        }
    }

    /// A connector status with only `key`'s drop count set, for `..` in `Status`.
    pub fn connector(&self, key: &str) -> tutti_proto::kernel::ConnectorStatus {
        tutti_proto::kernel::ConnectorStatus {
            telemetry_dropped: self.worker(key),
            ..Default::default()
        }
    }

    /// Everything dropped, by every process.
    pub fn total(&self) -> u64 {
        let inner = lock(&self.inner);
        inner.frontend.total() + inner.workers.values().map(|(_, r)| r.total()).sum::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_survive_restarts_of_the_frontend_and_of_a_worker() {
        let d = TelemetryDrops::default();
        assert_eq!(d.total(), 0);
        d.note_frontend(5);
        d.note_frontend(9);
        // The frontend started again and counts from zero.
        d.note_frontend(2);
        assert_eq!(d.frontend(), 11);
        d.note_worker("a", 1001, 3);
        d.note_worker("a", 1001, 7);
        // A new generation: its count adds to the earlier one, even when it is higher.
        d.note_worker("a", 1002, 8);
        d.note_worker("b", 2001, 1);
        assert_eq!(d.worker("a"), 15);
        assert_eq!(d.worker("b"), 1);
        assert_eq!(d.worker("c"), 0);
        assert_eq!(d.total(), 11 + 15 + 1);
    }
}

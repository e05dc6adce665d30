//! Whether a worker's RPC comes from a generation the kernel spawned and has not stopped,
//! and the release that generation was spawned for.

use tonic::Status;

use crate::guards::precondition;
use crate::state::{Inner, LiveRelease, ProbeSlot, sha256};

/// A worker's RPC must come from the generation the kernel spawned and has not stopped.
pub fn check_worker(inner: &Inner, key: &str, generation: u64, token: &str) -> Result<(), Status> {
    let ok = inner
        .conns
        .get(key)
        .and_then(|c| c.workers.get(&generation))
        .is_some_and(|p| p.token_hash == sha256(token));
    if ok {
        Ok(())
    } else {
        Err(precondition(format!(
            "generation {generation} of {key} is fenced"
        )))
    }
}

/// The probe slot `generation` names, if the worker is that probe's (key and token match).
pub fn probe_of<'a>(
    inner: &'a mut Inner,
    key: &str,
    generation: u64,
    token: &str,
) -> Option<&'a mut ProbeSlot> {
    inner
        .probes
        .get_mut(&generation)
        .filter(|slot| slot.key == key && slot.token_hash == sha256(token))
}

/// The release generation `generation` of `key` was spawned for.
pub fn worker_release(inner: &Inner, key: &str, generation: u64) -> Option<LiveRelease> {
    inner
        .conns
        .get(key)
        .and_then(|c| c.workers.get(&generation))
        .map(|p| p.release.clone())
}

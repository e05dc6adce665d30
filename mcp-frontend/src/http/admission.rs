//! Admission of client connections. Loopback is open to every local user, so the frontend
//! bounds what connections without a session token can hold:
//!
//! - at most [`MAX_CONNECTIONS`] are open at once; a connection beyond that is closed at once;
//! - a connection counts as *unproven* until one of its requests carries a valid session
//!   token; at most [`MAX_UNPROVEN`] are, and a new one closes the oldest unproven one, so a
//!   flood of connections that never authenticate cannot crowd out an agent's new connection;
//! - an unproven connection is closed [`UNPROVEN_GRACE`] after it was accepted.
//!
//! A proven connection (an agent's keep-alive connection) holds its slot only while it is open.
//! When a flood of connections has ended, the memory it used is given back to the system
//! ([`tutti_os::memory::release_free_memory`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;

/// Open client connections at most (proven or not).
pub(crate) const MAX_CONNECTIONS: usize = 1024;
/// Open connections that have not shown a valid session token, at most.
pub(crate) const MAX_UNPROVEN: usize = 256;
/// How long a connection may stay open without showing a valid session token. Longer than an
/// agent needs to send its first request and have its token verified by the kernel.
pub(crate) const UNPROVEN_GRACE: Duration = Duration::from_secs(10);
/// A flood is this many connections open at once; when the open count has fallen back to a
/// quarter of its peak, free memory is released.
const FLOOD_CONNECTIONS: usize = 256;

/// The open connections, shared by the accept loop and every connection.
#[derive(Clone, Default)]
pub(crate) struct Admission {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    open: usize,
    next: u64,
    /// The unproven connections by admission order, each with the switch that closes it.
    unproven: BTreeMap<u64, watch::Sender<bool>>,
    /// The most connections open at once since memory was last released.
    peak: usize,
}

/// One admitted connection: its slot is freed when this is dropped (the connection ended).
pub(crate) struct Slot {
    admission: Admission,
    id: u64,
    /// Turns `true` when the connection must close (evicted by a newer unproven one).
    pub(crate) closing: watch::Receiver<bool>,
}

/// What a request's handler uses to mark its connection proven (a request extension).
#[derive(Clone)]
pub(crate) struct Proof {
    admission: Admission,
    id: u64,
}

impl Admission {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admits a new connection: `None` when [`MAX_CONNECTIONS`] are open (close it at once).
    /// When [`MAX_UNPROVEN`] unproven connections are open, the oldest is told to close.
    pub(crate) fn admit(&self) -> Option<(Slot, Proof)> {
        let mut inner = self.lock();
        if inner.open >= MAX_CONNECTIONS {
            return None;
        }
        if inner.unproven.len() >= MAX_UNPROVEN
            && let Some((_, oldest)) = inner.unproven.pop_first()
        {
            oldest.send_replace(true);
        }
        inner.open += 1;
        inner.peak = inner.peak.max(inner.open);
        inner.next += 1;
        let id = inner.next;
        let (close, closing) = watch::channel(false);
        inner.unproven.insert(id, close);
        let admission = self.clone();
        Some((
            Slot {
                admission: admission.clone(),
                id,
                closing,
            },
            Proof { admission, id },
        ))
    }

    /// Whether connection `id` has shown a valid session token.
    fn is_proven(&self, id: u64) -> bool {
        !self.lock().unproven.contains_key(&id)
    }

    /// Connections open now, and of those, unproven.
    #[cfg(test)]
    fn counts(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.open, inner.unproven.len())
    }
}

impl Proof {
    /// The connection showed a valid session token: it no longer counts as unproven.
    pub(crate) fn proven(&self) {
        self.admission.lock().unproven.remove(&self.id);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let flood_ended = {
            let mut inner = self.admission.lock();
            inner.unproven.remove(&self.id);
            inner.open = inner.open.saturating_sub(1);
            let ended = inner.peak >= FLOOD_CONNECTIONS && inner.open <= inner.peak / 4;
            if ended {
                inner.peak = inner.open;
            }
            ended
        };
        if flood_ended {
            tracing::debug!("a flood of connections ended; releasing free memory");
            // Trimming walks the heap: off the frontend's one thread.
            drop(tokio::task::spawn_blocking(
                tutti_os::memory::release_free_memory,
            ));
        }
    }
}

/// Serves `connection` while its slot allows: until it ends, until a newer unproven connection
/// evicts it, or until [`UNPROVEN_GRACE`] has passed without a valid session token.
pub(crate) async fn serve_within<F>(mut slot: Slot, connection: F)
where
    F: std::future::Future<Output = Result<(), hyper::Error>>,
{
    tokio::pin!(connection);
    let grace = tokio::time::sleep(UNPROVEN_GRACE);
    tokio::pin!(grace);
    let mut timed = true;
    loop {
        tokio::select! {
            ended = &mut connection => {
                if let Err(e) = ended {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            // `Err`: the connection was proven (its switch is gone); it stays.
            Ok(_) = slot.closing.wait_for(|close| *close) => return,
            () = &mut grace, if timed => {
                if !slot.admission.is_proven(slot.id) {
                    return;
                }
                timed = false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_oldest_unproven_connection_makes_room_and_proven_ones_stay() {
        let admission = Admission::default();
        let (first, first_proof) = admission.admit().expect("admitted");
        first_proof.proven();
        let unproven: Vec<_> = (0..MAX_UNPROVEN)
            .map(|_| admission.admit().expect("admitted"))
            .collect();
        assert_eq!(admission.counts(), (MAX_UNPROVEN + 1, MAX_UNPROVEN));
        let newest = admission.admit().expect("admitted");
        assert!(
            *unproven[0].0.closing.borrow(),
            "the oldest unproven one closes"
        );
        assert!(!*unproven[1].0.closing.borrow());
        assert!(
            !*first.closing.borrow(),
            "a proven connection is never evicted"
        );
        assert!(admission.is_proven(first.id) && !admission.is_proven(newest.0.id));
        drop(unproven);
        drop(newest);
        assert_eq!(admission.counts(), (1, 0));
    }

    #[tokio::test]
    async fn connections_beyond_the_cap_are_refused() {
        let admission = Admission::default();
        let held: Vec<_> = (0..MAX_CONNECTIONS)
            .map(|_| {
                let (slot, proof) = admission.admit().expect("admitted");
                proof.proven();
                slot
            })
            .collect();
        assert!(admission.admit().is_none());
        drop(held);
        assert!(admission.admit().is_some());
    }
}

//! Acknowledged revocation for route watchers that cache verified sessions.
//!
//! The frontend keeps the tokens it has verified (as hashes) so that a request does not need a
//! kernel round trip. That is only safe because a revocation is not finished until every such
//! cache has dropped the token: the kernel publishes `SessionsRevoked` at revision R, the
//! frontend applies it and calls `AckRoutes(R)`, and only then does `RevokeSession` return.
//! A cache that does not confirm within [`ACK_TIMEOUT`] is fenced: the kernel stops the process
//! holding it (its supervisor starts a fresh one, with an empty cache) before returning.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};

/// How long a revocation waits for the caches to confirm before the holder is stopped.
pub const ACK_TIMEOUT: Duration = tutti_rules::timing::REVOCATION_ACK;

/// Live caching watchers: watcher id → (highest revision it has confirmed, registration).
pub struct SessionCaches {
    acked: watch::Sender<HashMap<u64, Acked>>,
    registrations: AtomicU64,
    fence_tx: mpsc::UnboundedSender<oneshot::Sender<()>>,
    fence_rx: std::sync::Mutex<Option<mpsc::UnboundedReceiver<oneshot::Sender<()>>>>,
}

#[derive(Clone, Copy)]
struct Acked {
    revision: u64,
    /// Which registration holds the id, so a late drop never removes a newer one.
    registration: u64,
}

/// Deregisters a watcher when its route stream ends (the holder went away: nothing to wait for).
pub struct Registration {
    caches: Arc<SessionCaches>,
    id: u64,
    registration: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.caches.acked.send_if_modified(|m| {
            let ours = m
                .get(&self.id)
                .is_some_and(|a| a.registration == self.registration);
            if ours {
                m.remove(&self.id);
            }
            ours
        });
    }
}

impl Default for SessionCaches {
    fn default() -> Self {
        let (fence_tx, fence_rx) = mpsc::unbounded_channel();
        Self {
            acked: watch::Sender::new(HashMap::new()),
            registrations: AtomicU64::new(0),
            fence_tx,
            fence_rx: std::sync::Mutex::new(Some(fence_rx)),
        }
    }
}

impl SessionCaches {
    /// A watcher starts caching with everything up to `revision` applied (its cache is empty).
    /// Call while holding the lock under which revisions are handed out. `None` when `id` is
    /// already registered (ids name watchers in `AckRoutes`, so they must be unique).
    pub fn register(self: &Arc<Self>, id: u64, revision: u64) -> Option<Registration> {
        let registration = self.registrations.fetch_add(1, Ordering::Relaxed);
        let mut taken = false;
        self.acked.send_if_modified(|m| {
            taken = m.contains_key(&id);
            if !taken {
                m.insert(
                    id,
                    Acked {
                        revision,
                        registration,
                    },
                );
            }
            !taken
        });
        (!taken).then(|| Registration {
            caches: self.clone(),
            id,
            registration,
        })
    }

    /// Records a confirmation; unknown watchers (already gone) are ignored.
    pub fn ack(&self, id: u64, revision: u64) {
        self.acked.send_if_modified(|m| match m.get_mut(&id) {
            Some(acked) if acked.revision < revision => {
                acked.revision = revision;
                true
            }
            _ => false,
        });
    }

    /// Waits until every live caching watcher has confirmed `revision` (or gone away). When one
    /// has not after [`ACK_TIMEOUT`], asks the frontend supervisor to stop the frontend and waits
    /// until it has. Returns whether the frontend had to be stopped.
    pub async fn settle(&self, revision: u64) -> bool {
        let mut rx = self.acked.subscribe();
        let confirmed = tokio::time::timeout(
            ACK_TIMEOUT,
            rx.wait_for(|m| m.values().all(|a| a.revision >= revision)),
        )
        .await
        .is_ok_and(|r| r.is_ok());
        if confirmed {
            return false;
        }
        // The laggards are about to be stopped: no later revocation waits for them again.
        self.acked
            .send_modify(|m| m.retain(|_, a| a.revision >= revision));
        tracing::warn!(
            revision,
            "a session cache did not confirm a revocation in time; stopping the frontend"
        );
        let (done_tx, done_rx) = oneshot::channel();
        if self.fence_tx.send(done_tx).is_ok() {
            // The supervisor answers once the process is gone (or was not running); if the
            // supervisor itself is gone, the frontend is being stopped anyway.
            let _ = done_rx.await;
        }
        true
    }

    /// The frontend supervisor's end of fence requests (taken once).
    pub fn take_fence_requests(&self) -> Option<mpsc::UnboundedReceiver<oneshot::Sender<()>>> {
        self.fence_rx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn settle_returns_once_every_cache_confirmed() {
        let caches = Arc::new(SessionCaches::default());
        let a = caches.register(1, 10);
        let _b = caches.register(2, 10);
        caches.ack(1, 12);
        let settled = {
            let waiting = caches.settle(12);
            tokio::pin!(waiting);
            assert!(
                tokio::time::timeout(Duration::from_millis(10), &mut waiting)
                    .await
                    .is_err(),
                "watcher 2 has not confirmed yet"
            );
            caches.ack(2, 13);
            waiting.await
        };
        assert!(!settled, "no fence needed");
        drop(a);
        assert!(!caches.settle(13).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_cache_that_goes_away_is_not_waited_for() {
        let caches = Arc::new(SessionCaches::default());
        let reg = caches.register(7, 1);
        drop(reg);
        assert!(!caches.settle(5).await);
    }

    /// Plays the supervisor for one fence request: stops "the frontend" and confirms.
    fn answer_one_fence(
        mut fence: mpsc::UnboundedReceiver<oneshot::Sender<()>>,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let done = fence.recv().await.expect("a fence request");
            let _ = done.send(());
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_cache_gets_its_frontend_stopped() {
        let caches = Arc::new(SessionCaches::default());
        let fence = caches.take_fence_requests().expect("first take");
        assert!(caches.take_fence_requests().is_none());
        let _reg = caches.register(3, 1);
        let supervisor = answer_one_fence(fence);
        assert!(caches.settle(2).await, "the frontend was stopped");
        supervisor.await.expect("supervisor task");
        // The stopped cache is not waited for again, even before its stream has ended.
        assert!(
            !caches.settle(3).await,
            "a later revocation waits for no one"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn watcher_ids_are_unique_and_a_late_drop_spares_a_newer_registration() {
        let caches = Arc::new(SessionCaches::default());
        let first = caches.register(9, 1).expect("first registration");
        assert!(caches.register(9, 1).is_none(), "id 9 is taken");
        // The first holder is fenced (removed by settle) and its id registered again.
        let fence = caches.take_fence_requests().expect("fence requests");
        let supervisor = answer_one_fence(fence);
        assert!(caches.settle(2).await);
        supervisor.await.expect("supervisor task");
        let _second = caches.register(9, 2).expect("id free again");
        // The old stream ends late: the newer registration must still be waited for.
        drop(first);
        let waiting = caches.settle(3);
        tokio::pin!(waiting);
        assert!(
            tokio::time::timeout(Duration::from_millis(10), &mut waiting)
                .await
                .is_err(),
            "the newer registration has not confirmed revision 3"
        );
        caches.ack(9, 3);
        assert!(!waiting.await);
    }
}

//! The registry of open `subscriptions/listen` streams (`http/listen.rs` serves them): each
//! stream's session and the switch that ends it, for revocations, resyncs and shutdown.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use tokio::sync::watch;
use tutti_proto::kernel::SessionsRevoked;

use crate::backend::Identity;

/// Every open listen stream, by the session that opened it.
#[derive(Default)]
pub(crate) struct Listeners {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    next: u64,
    closed: bool,
    entries: HashMap<u64, (Identity, watch::Sender<bool>)>,
}

impl Listeners {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a stream; its receiver turns `true` when the stream must end.
    pub(crate) fn register(&self, identity: Identity) -> (u64, watch::Receiver<bool>) {
        let mut inner = self.lock();
        let (tx, rx) = watch::channel(inner.closed);
        inner.next += 1;
        let id = inner.next;
        if !inner.closed {
            inner.entries.insert(id, (identity, tx));
        }
        (id, rx)
    }

    pub(crate) fn unregister(&self, id: u64) {
        self.lock().entries.remove(&id);
    }

    /// Ends the streams of the revoked session(s).
    pub(crate) fn revoke(&self, revoked: &SessionsRevoked) {
        let mut inner = self.lock();
        inner.entries.retain(|_, (identity, end)| {
            let matches = revoked.all
                || (identity.workspace == revoked.workspace && identity.session == revoked.session);
            if matches {
                end.send_replace(true);
            }
            !matches
        });
    }

    /// Ends every open stream (new ones still open): after a resync, revocations may have
    /// been missed, and the streams do not hold their tokens to check again. A client whose
    /// session is still valid simply listens again.
    pub(crate) fn end_open(&self) {
        let mut inner = self.lock();
        for (_, (_, end)) in inner.entries.drain() {
            end.send_replace(true);
        }
    }

    /// Ends every stream, now and for streams opened later.
    pub(crate) fn close_all(&self) {
        self.lock().closed = true;
        self.end_open();
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(w: &str, s: &str) -> Identity {
        Identity {
            workspace: w.into(),
            session: s.into(),
            tools: tutti_proto::kernel::ToolsMode::All,
            confirm_high: false,
            confirm_via: Default::default(),
        }
    }

    #[test]
    fn revocation_ends_only_matching_streams() {
        let l = Listeners::default();
        let (_, a) = l.register(who("w", "a"));
        let (_, b) = l.register(who("w", "b"));
        l.revoke(&SessionsRevoked {
            all: false,
            workspace: "w".into(),
            session: "a".into(),
        });
        assert!(*a.borrow());
        assert!(!*b.borrow());
        assert_eq!(l.len(), 1);
        l.revoke(&SessionsRevoked {
            all: true,
            workspace: String::new(),
            session: String::new(),
        });
        assert!(*b.borrow());
        assert_eq!(l.len(), 0);
    }

    /// After a resync every open stream ends, but listening again works.
    #[test]
    fn a_resync_ends_open_streams_and_keeps_accepting_new_ones() {
        let l = Listeners::default();
        let (_, a) = l.register(who("w", "a"));
        let (_, b) = l.register(who("v", "b"));
        l.end_open();
        assert!(*a.borrow() && *b.borrow());
        assert_eq!(l.len(), 0);
        let (_, again) = l.register(who("w", "a"));
        assert!(!*again.borrow());
        assert_eq!(l.len(), 1);
    }

    #[test]
    fn closed_registry_ends_new_streams_at_once() {
        let l = Listeners::default();
        let (id, open) = l.register(who("w", "a"));
        l.close_all();
        assert!(*open.borrow());
        let (_, late) = l.register(who("w", "b"));
        assert!(*late.borrow());
        l.unregister(id);
        assert_eq!(l.len(), 0);
    }
}

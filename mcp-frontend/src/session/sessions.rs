//! The frontend's cache of verified session tokens, so a request needs no kernel round trip.
//!
//! Safe only together with the kernel's acknowledged revocation (`AckRoutes`): the cache is on
//! only while a route stream that registered it (`caches_sessions`) is live, every
//! `SessionsRevoked` event removes the matching entries *before* the frontend confirms the
//! event, and the kernel's `session revoke` returns only after that confirmation (or after
//! stopping this process). Tokens are kept as SHA-256 hashes, never in clear.
//!
//! A verification that was in flight while a revocation was applied is not cached (it may
//! have been answered before the revocation): every revocation or reset bumps `epoch`, and an
//! answer is cached only under the epoch its request was sent in.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use sha2::{Digest, Sha256};
use tutti_proto::kernel::SessionsRevoked;

use crate::backend::Identity;

/// More live sessions than this are verified with the kernel each time (never an error).
const MAX_ENTRIES: usize = 16_384;

#[derive(Default)]
pub(crate) struct SessionCache {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    enabled: bool,
    epoch: u64,
    entries: HashMap<TokenKey, Identity>,
}

/// Taken before asking the kernel; lets the answer be cached only if nothing was revoked since.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ticket(u64);

/// A session token's SHA-256: how the frontend keeps and keys a token, never the token itself.
pub(crate) type TokenKey = [u8; 32];

/// The one hash of a token: computed once per request (`http/mod.rs`) and carried in its context;
/// the session cache and `session/clients.rs` key everything by it.
pub(crate) fn token_key(token: &str) -> TokenKey {
    Sha256::digest(token.as_bytes()).into()
}

impl SessionCache {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Plain data: a panic elsewhere cannot leave it half-updated in a harmful way, and
        // the worst case (a stale entry) is excluded by clearing on poison.
        self.state.lock().unwrap_or_else(|p| {
            let mut state = p.into_inner();
            state.entries.clear();
            state.enabled = false;
            state
        })
    }

    /// The identity of a token verified earlier and not revoked since.
    pub(crate) fn lookup(&self, token: &TokenKey) -> Option<Identity> {
        let state = self.lock();
        if !state.enabled || state.entries.is_empty() {
            return None;
        }
        state.entries.get(token).cloned()
    }

    pub(crate) fn ticket(&self) -> Ticket {
        Ticket(self.lock().epoch)
    }

    /// Keeps the kernel's positive answer to a verification sent under `ticket`.
    pub(crate) fn insert(&self, ticket: Ticket, token: &TokenKey, identity: &Identity) {
        let mut state = self.lock();
        if state.enabled && state.epoch == ticket.0 && state.entries.len() < MAX_ENTRIES {
            state.entries.insert(*token, identity.clone());
        }
    }

    /// Applies a revocation event: drops every matching entry.
    pub(crate) fn revoke(&self, revoked: &SessionsRevoked) {
        let mut state = self.lock();
        state.epoch += 1;
        if revoked.all {
            state.entries.clear();
        } else {
            state.entries.retain(|_, id| {
                !(id.workspace == revoked.workspace && id.session == revoked.session)
            });
        }
    }

    /// Empties the cache; it is used again only if `enabled` (a live, registered route stream).
    pub(crate) fn reset(&self, enabled: bool) {
        let mut state = self.lock();
        state.epoch += 1;
        state.entries.clear();
        state.enabled = enabled;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(w: &str, s: &str) -> Identity {
        Identity {
            workspace: w.into(),
            session: s.into(),
            tools: tutti_proto::kernel::ToolsMode::All,
            confirm_high: false,
            confirm_via: Default::default(),
        }
    }

    fn revoked(w: &str, s: &str, all: bool) -> SessionsRevoked {
        SessionsRevoked {
            all,
            workspace: w.into(),
            session: s.into(),
        }
    }

    #[test]
    fn off_until_enabled_and_off_again_when_the_stream_is_lost() {
        let c = SessionCache::default();
        c.insert(c.ticket(), &token_key("tts_a"), &id("w", "s"));
        assert_eq!(
            c.lookup(&token_key("tts_a")),
            None,
            "disabled: nothing is kept"
        );
        c.reset(true);
        c.insert(c.ticket(), &token_key("tts_a"), &id("w", "s"));
        assert_eq!(c.lookup(&token_key("tts_a")), Some(id("w", "s")));
        assert_eq!(c.lookup(&token_key("tts_b")), None);
        c.reset(false);
        assert_eq!(c.lookup(&token_key("tts_a")), None);
    }

    #[test]
    fn revocation_drops_only_the_matching_session() {
        let c = SessionCache::default();
        c.reset(true);
        c.insert(c.ticket(), &token_key("tts_a"), &id("w", "s1"));
        c.insert(c.ticket(), &token_key("tts_b"), &id("w", "s2"));
        c.revoke(&revoked("w", "s1", false));
        assert_eq!(c.lookup(&token_key("tts_a")), None);
        assert_eq!(c.lookup(&token_key("tts_b")), Some(id("w", "s2")));
        c.revoke(&revoked("", "", true));
        assert_eq!(c.lookup(&token_key("tts_b")), None);
    }

    #[test]
    fn an_answer_that_raced_a_revocation_is_not_kept() {
        let c = SessionCache::default();
        c.reset(true);
        // Sent before the revocation was applied, answered after: possibly stale.
        let ticket = c.ticket();
        c.revoke(&revoked("w", "s", false));
        c.insert(ticket, &token_key("tts_a"), &id("w", "s"));
        assert_eq!(c.lookup(&token_key("tts_a")), None);
        // A fresh verification is kept.
        c.insert(c.ticket(), &token_key("tts_a"), &id("w", "s"));
        assert_eq!(c.lookup(&token_key("tts_a")), Some(id("w", "s")));
    }
}

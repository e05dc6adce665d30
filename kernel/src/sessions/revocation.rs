//! The revocation sequence (SPEC §4), in one place for a re-issue, `tutti session revoke` and
//! the runtime shutdown: under the state lock the token (or every token) is dropped and a
//! `SessionsRevoked` event published; then it waits until every session cache has confirmed
//! that event, or was stopped ([`crate::sessions::caches::SessionCaches::settle`]). A revocation
//! therefore holds for every request that starts after this returns.

use tutti_proto::kernel as pb;

use crate::sessions::tokens::{SessionId, TokenOptions};
use crate::state::{Kernel, lock};

/// What to revoke.
pub enum Revocation<'a> {
    /// Every session (runtime shutdown, `tutti session revoke --all`).
    All,
    /// One session (`tutti session revoke --workspace W --session S`).
    One(&'a SessionId),
    /// Bind `token` to a session, revoking the token it had (if any) first.
    Reissue {
        id: SessionId,
        token: &'a str,
        options: TokenOptions,
    },
}

/// Runs the sequence; returns how many tokens were revoked. A re-issue of a session that had
/// no token publishes nothing and waits for nothing.
pub async fn revoke(k: &Kernel, what: Revocation<'_>) -> u32 {
    let (revoked, revision) = {
        let mut inner = lock(&k.inner);
        let mut tokens = lock(&k.tokens);
        let (revoked, event, always) = match what {
            Revocation::All => {
                let n = u32::try_from(tokens.revoke_all()).unwrap_or(u32::MAX);
                (n, event(true, None), true)
            }
            Revocation::One(id) => (u32::from(tokens.revoke(id)), event(false, Some(id)), true),
            Revocation::Reissue { id, token, options } => {
                let had = u32::from(tokens.revoke(&id));
                let event = event(false, Some(&id));
                tokens.issue_with(id, token, options);
                (had, event, false)
            }
        };
        drop(tokens);
        let revision = (always || revoked > 0)
            .then(|| k.publish_other(&mut inner, pb::route_event::Event::SessionsRevoked(event)));
        (revoked, revision)
    };
    if let Some(revision) = revision {
        k.session_caches.settle(revision).await;
    }
    revoked
}

fn event(all: bool, id: Option<&SessionId>) -> pb::SessionsRevoked {
    pb::SessionsRevoked {
        all,
        workspace: id.map(|i| i.workspace.clone()).unwrap_or_default(),
        session: id.map(|i| i.session.clone()).unwrap_or_default(),
    }
}

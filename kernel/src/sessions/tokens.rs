//! Session tokens (SPEC §6): 32 random bytes, base64url, prefix `tts_`. Only the SHA-256 of
//! each token is kept, in memory; lookups are by hash, so the token itself is never compared.

use std::collections::HashMap;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};
use tutti_proto::kernel::ToolsMode;

type Hash = [u8; 32];

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SessionId {
    pub workspace: String,
    pub session: String,
}

/// What a live token stands for: its session and the options it was issued with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenRecord {
    pub id: SessionId,
    /// `--tools` (SPEC §15).
    pub tools: ToolsMode,
    /// `--confirm high` (SPEC §12).
    pub confirm_high: bool,
    /// `--confirm-via` (SPEC §12): who is asked.
    pub confirm_via: ConfirmVia,
}

/// Who confirms a high-risk call (`--confirm-via`, SPEC §12).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConfirmVia {
    pub person: bool,
    pub agent: bool,
}

impl ConfirmVia {
    /// As requested; nobody named means the person (the default).
    pub fn or_person(person: bool, agent: bool) -> Self {
        Self {
            person: person || !agent,
            agent,
        }
    }
}

/// The options a token is issued with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenOptions {
    pub tools: ToolsMode,
    pub confirm_high: bool,
    pub confirm_via: ConfirmVia,
}

#[derive(Debug, Default)]
pub struct TokenTable {
    by_hash: HashMap<Hash, TokenRecord>,
    by_session: HashMap<SessionId, Hash>,
    /// When each live session's token was issued (Unix epoch milliseconds), for the console.
    issued: HashMap<SessionId, i64>,
}

fn hash(token: &str) -> Hash {
    Sha256::digest(token.as_bytes()).into()
}

/// A new token from 32 OS-random bytes.
pub fn new_token() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(format!("tts_{}", URL_SAFE_NO_PAD.encode(bytes)))
}

impl TokenTable {
    /// Binds `token` to `id` with the default options (tests).
    #[cfg(test)]
    pub fn issue(&mut self, id: SessionId, token: &str) {
        let options = TokenOptions {
            tools: ToolsMode::All,
            confirm_high: false,
            confirm_via: ConfirmVia::default(),
        };
        self.issue_with(id, token, options);
    }

    /// Binds `token` to `id`; a previous token of the same session is revoked at once.
    pub fn issue_with(&mut self, id: SessionId, token: &str, options: TokenOptions) {
        let h = hash(token);
        if let Some(old) = self.by_session.insert(id.clone(), h) {
            self.by_hash.remove(&old);
        }
        self.issued.insert(id.clone(), now_unix_ms());
        self.by_hash.insert(
            h,
            TokenRecord {
                id,
                tools: options.tools,
                confirm_high: options.confirm_high,
                confirm_via: options.confirm_via,
            },
        );
    }

    /// The live sessions and when each was issued, sorted by workspace and session. No
    /// token or hash leaves the table.
    pub fn list(&self) -> Vec<(SessionId, i64)> {
        let mut out: Vec<(SessionId, i64)> = self
            .by_session
            .keys()
            .map(|id| (id.clone(), self.issued.get(id).copied().unwrap_or(0)))
            .collect();
        out.sort_by(|a, b| (&a.0.workspace, &a.0.session).cmp(&(&b.0.workspace, &b.0.session)));
        out
    }

    #[cfg(test)]
    pub fn verify(&self, token: &str) -> Option<&SessionId> {
        self.record(token).map(|r| &r.id)
    }

    /// The whole record of a live token.
    pub fn record(&self, token: &str) -> Option<&TokenRecord> {
        self.by_hash.get(&hash(token))
    }

    /// How many sessions are live (the `tutti.sessions.live` metric).
    #[cfg_attr(not(feature = "otel"), allow(dead_code))]
    pub fn live(&self) -> usize {
        self.by_session.len()
    }

    pub fn revoke(&mut self, id: &SessionId) -> bool {
        self.issued.remove(id);
        match self.by_session.remove(id) {
            Some(h) => {
                self.by_hash.remove(&h);
                true
            }
            None => false,
        }
    }

    pub fn revoke_all(&mut self) -> usize {
        let n = self.by_hash.len();
        self.by_hash.clear();
        self.by_session.clear();
        self.issued.clear();
        n
    }
}

fn now_unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(w: &str, s: &str) -> SessionId {
        SessionId {
            workspace: w.into(),
            session: s.into(),
        }
    }

    #[test]
    fn tokens_are_random_prefixed_base64url() {
        let a = new_token().expect("rng");
        let b = new_token().expect("rng");
        assert_ne!(a, b);
        assert!(a.starts_with("tts_"));
        assert_eq!(a.len(), 4 + 43);
        assert!(
            a[4..]
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
        );
    }

    #[test]
    fn reissue_revokes_the_previous_token() {
        let mut t = TokenTable::default();
        t.issue(id("w", "s"), "tts_one");
        assert_eq!(t.verify("tts_one"), Some(&id("w", "s")));
        t.issue(id("w", "s"), "tts_two");
        assert!(t.verify("tts_one").is_none());
        assert!(t.verify("tts_two").is_some());
        t.issue(id("w", "other"), "tts_three");
        assert!(t.revoke(&id("w", "s")));
        assert!(t.verify("tts_two").is_none());
        assert!(t.verify("tts_three").is_some());
        let listed: Vec<SessionId> = t.list().into_iter().map(|(id, _)| id).collect();
        assert_eq!(listed, vec![id("w", "other")]);
        assert_eq!(t.revoke_all(), 1);
        assert!(t.list().is_empty());
        assert!(t.verify("tts_three").is_none());
    }

    #[test]
    fn nobody_named_to_confirm_means_the_person() {
        let both = ConfirmVia {
            person: true,
            agent: true,
        };
        assert_eq!(
            ConfirmVia::or_person(false, false),
            ConfirmVia {
                person: true,
                agent: false
            }
        );
        assert_eq!(ConfirmVia::or_person(true, true), both);
    }

    #[test]
    fn the_record_keeps_the_tools_mode_until_reissued() {
        let mut t = TokenTable::default();
        let options = TokenOptions {
            tools: ToolsMode::Search,
            confirm_high: true,
            confirm_via: ConfirmVia::or_person(false, true),
        };
        t.issue_with(id("w", "s"), "tts_one", options);
        assert_eq!(
            t.record("tts_one").map(|r| r.tools),
            Some(ToolsMode::Search)
        );
        assert_eq!(t.record("tts_one").map(|r| r.confirm_high), Some(true));
        let via = t.record("tts_one").map(|r| r.confirm_via);
        assert_eq!(
            via,
            Some(ConfirmVia {
                person: false,
                agent: true
            })
        );
        t.issue(id("w", "s"), "tts_two");
        assert_eq!(t.record("tts_two").map(|r| r.confirm_high), Some(false));
        assert!(t.record("tts_one").is_none());
        assert_eq!(t.record("tts_two").map(|r| r.tools), Some(ToolsMode::All));
    }
}

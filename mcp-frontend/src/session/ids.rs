//! `Mcp-Session-Id`s derived from the token (SPEC §11): a session id is the HMAC-SHA256 of the
//! token's hash under a key that lives as long as the kernel (`SESSION_ID_KEY`, made by the
//! kernel once per run and handed to every frontend it starts), base64url. Nothing is stored:
//! a carried id is checked by computing the token's id again and comparing in constant time
//! (`Mac::verify_slice`), so an id is valid exactly while its token is, and only with it.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::session::sessions::TokenKey;

/// The header a 2025-06-18 `initialize` answer names the session in.
pub(crate) const SESSION_ID_HEADER: &str = "mcp-session-id";

/// The key session ids are derived under.
#[derive(Clone)]
pub(crate) struct SessionIds {
    key: [u8; 32],
}

impl std::fmt::Debug for SessionIds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionIds { key: <redacted> }")
    }
}

impl SessionIds {
    /// Ids under `key`, or under a fresh random key (a frontend started without the kernel's).
    pub(crate) fn new(key: Option<[u8; 32]>) -> Self {
        let key = key.unwrap_or_else(|| {
            let mut bytes = [0u8; 32];
            // Without OS randomness the ids still differ per token, only not per run.
            if let Err(e) = getrandom::fill(&mut bytes) {
                tracing::warn!(error = %e, "no OS randomness for the session id key");
            }
            bytes
        });
        Self { key }
    }

    fn mac(&self, token: &TokenKey) -> Hmac<Sha256> {
        // HMAC takes a key of any length: this cannot fail.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC accepts every key length"));
        mac.update(token);
        mac
    }

    /// The session id of the token whose hash is `token`.
    pub(crate) fn id(&self, token: &TokenKey) -> String {
        URL_SAFE_NO_PAD.encode(self.mac(token).finalize().into_bytes())
    }

    /// Whether `carried` is the session id of `token` (constant-time comparison).
    pub(crate) fn matches(&self, carried: &str, token: &TokenKey) -> bool {
        URL_SAFE_NO_PAD
            .decode(carried.trim())
            .is_ok_and(|bytes| self.mac(token).verify_slice(&bytes).is_ok())
    }
}

/// Reads a key as [`SessionIds::new`] takes it from its base64url text.
pub fn parse_key(text: &str) -> Option<[u8; 32]> {
    URL_SAFE_NO_PAD.decode(text.trim()).ok()?.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::sessions::token_key;

    #[test]
    fn an_id_belongs_to_one_token_under_one_key() {
        let ids = SessionIds::new(Some([7; 32]));
        let a = token_key("tts_a");
        let id = ids.id(&a);
        assert!(ids.matches(&id, &a));
        assert!(!ids.matches(&id, &token_key("tts_b")), "another token");
        assert!(
            !SessionIds::new(Some([8; 32])).matches(&id, &a),
            "another key"
        );
        assert!(!ids.matches("not base64 !", &a));
        assert!(!ids.matches(&id[..10], &a), "a cut id");
        assert_eq!(
            SessionIds::new(Some([7; 32])).id(&a),
            id,
            "same key, same id"
        );
        assert!(
            id.bytes().all(|b| (0x21..=0x7e).contains(&b)),
            "visible ASCII"
        );
        assert_eq!(parse_key(&URL_SAFE_NO_PAD.encode([7u8; 32])), Some([7; 32]));
        assert_eq!(parse_key("c2hvcnQ"), None);
    }
}

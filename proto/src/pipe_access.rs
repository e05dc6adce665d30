//! Who may open the kernel's named pipe on Windows. The pipe is owner-only (its owner is the
//! creating token's default owner: the user, or SYSTEM for a service running as
//! LocalSystem). A kernel that runs as the `tutti-kernel` service (LocalSystem) is also told
//! the installing user's SID (`tutti-kernel --grant-user SID`, written into the service's
//! command line by `tutti service install`), so that user's CLI, shims and console can reach
//! it; nobody else can. Pure logic, on every platform, so it is tested everywhere.

/// A `--grant-user` value that is not a plain SID.
#[derive(Debug, thiserror::Error)]
#[error(
    "{sid:?} is not a user SID ({reason}); give the SID `whoami /user` prints, e.g. S-1-5-21-…-1001"
)]
pub struct InvalidSid {
    pub sid: String,
    pub reason: String,
}

/// The owner-only part: a protected DACL (nothing inherited) granting GENERIC_ALL to OWNER
/// RIGHTS only. Nobody else gets any access: not Everyone/Anonymous (the default DACL's read
/// access), not other users.
const OWNER_ONLY: &str = "D:P(A;;GA;;;OW)";

/// A Windows account SID in its string form (`S-1-5-21-…`), checked so that it can only ever
/// add one ACE to the descriptor (digits and dashes only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserSid(String);

impl UserSid {
    /// Checks `s` is `S-1-<authority>-<sub>…` with 1 to 15 decimal sub-authorities (each at
    /// most 32 bits, the authority at most 48 bits).
    pub fn parse(s: &str) -> Result<UserSid, InvalidSid> {
        let invalid = |reason: &str| InvalidSid {
            sid: s.to_owned(),
            reason: reason.to_owned(),
        };
        let Some(rest) = s.strip_prefix("S-1-") else {
            return Err(invalid("it does not start with S-1-"));
        };
        let mut parts = rest.split('-');
        let authority = parts.next().unwrap_or_default();
        if authority.parse::<u64>().ok().is_none_or(|a| a >= 1 << 48) {
            return Err(invalid("its identifier authority is not a 48-bit number"));
        }
        let subs: Vec<&str> = parts.collect();
        if subs.is_empty() || subs.len() > 15 {
            return Err(invalid("it needs 1 to 15 sub-authorities"));
        }
        if subs.iter().any(|p| {
            p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) || p.parse::<u32>().is_err()
        }) {
            return Err(invalid("a sub-authority is not a 32-bit number"));
        }
        Ok(UserSid(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for UserSid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The pipe's security descriptor (SDDL): owner-only, plus full access for `grant`.
pub fn pipe_sddl(grant: Option<&UserSid>) -> String {
    match grant {
        None => OWNER_ONLY.to_owned(),
        Some(sid) => format!("{OWNER_ONLY}(A;;GA;;;{sid})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_grant_only_the_owner_gets_access() {
        assert_eq!(pipe_sddl(None), "D:P(A;;GA;;;OW)");
    }

    #[test]
    fn a_granted_user_gets_exactly_one_more_ace() {
        let sid = UserSid::parse("S-1-5-21-1004336348-1177238915-682003330-1001");
        let sid = sid.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            pipe_sddl(Some(&sid)),
            "D:P(A;;GA;;;OW)(A;;GA;;;S-1-5-21-1004336348-1177238915-682003330-1001)"
        );
    }

    #[test]
    fn anything_but_a_plain_sid_is_refused() {
        for bad in [
            "",
            "S-1-5",
            "s-1-5-21-1",
            "S-1-5-21-1)(A;;GA;;;WD",
            "S-1-5-21--1",
            "S-1-5-21-4294967296",
            "S-1-281474976710656-1",
            "S-1-5-1-2-3-4-5-6-7-8-9-10-11-12-13-14-15-16",
            "WD",
            "S-1-5-21-1 ",
        ] {
            let err = UserSid::parse(bad).err();
            assert!(err.is_some(), "{bad:?} was accepted");
            let msg = err.map(|e| e.to_string()).unwrap_or_default();
            assert!(msg.contains("whoami /user"), "{msg}");
        }
        assert!(UserSid::parse("S-1-5-18").is_ok());
    }
}

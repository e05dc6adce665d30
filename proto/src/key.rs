//! The connector key rule (SPEC §3), shared by every process that takes a key from outside:
//! the kernel (manifests), the workers (their environment) and the shim manager (keys become
//! file names). Keys also name the workers' socket files ([`crate::transport::worker_endpoint`]).

/// Longest connector key.
pub const MAX_LEN: usize = 24;

/// `^[a-z][a-z0-9-]{0,23}$`.
pub fn is_valid(key: &str) -> bool {
    let mut bytes = key.bytes();
    matches!(bytes.next(), Some(b'a'..=b'z'))
        && key.len() <= MAX_LEN
        && bytes.all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spec_rule() {
        for ok in ["a", "github", "my-db2", "github-2", "a-", &"a".repeat(24)] {
            assert!(is_valid(ok), "{ok}");
        }
        for bad in [
            "",
            "My",
            "a_b",
            "1a",
            "2x",
            "-a",
            "a.b",
            "a/b",
            "..",
            "é",
            "a b",
            &"a".repeat(25),
        ] {
            assert!(!is_valid(bad), "{bad}");
        }
    }
}

//! SPEC §5.1: the deterministic local tool name `<key>_<canonical(upstream name)>`.

use sha2::{Digest, Sha256};

/// Longest local name, so a client's `mcp__connector__` prefix still fits 64 characters.
pub const MAX_LOCAL_NAME: usize = 48;
const HASHED_PREFIX: usize = 39;

/// Every character outside `[A-Za-z0-9_-]` becomes `_`.
pub fn canonical(upstream: &str) -> String {
    upstream
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The local name of `upstream` in connector `key`.
pub fn local_name(key: &str, upstream: &str) -> String {
    let full = format!("{key}_{}", canonical(upstream));
    if full.len() <= MAX_LOCAL_NAME {
        return full;
    }
    // `full` is ASCII by construction, so byte slicing is safe.
    let digest = Sha256::digest(upstream.as_bytes());
    let hex: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    format!("{}_{}", &full[..HASHED_PREFIX], hex)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_are_prefixed_and_canonicalised() {
        assert_eq!(local_name("github", "create_issue"), "github_create_issue");
        assert_eq!(local_name("fs", "read.file/x y"), "fs_read_file_x_y");
        assert_eq!(local_name("t", "héllo"), "t_h_llo");
    }

    #[test]
    fn long_names_get_a_hash_suffix_and_stay_deterministic() {
        let upstream = "a_really_long_tool_name_that_goes_on_and_on_forever";
        let a = local_name("github", upstream);
        assert_eq!(a.len(), MAX_LOCAL_NAME);
        assert_eq!(a, local_name("github", upstream));
        assert_eq!(&a[..39], &format!("github_{upstream}")[..39]);
        // sha256("a_really_long...") first 4 bytes, independent of the key.
        let digest = Sha256::digest(upstream.as_bytes());
        assert_eq!(
            &a[40..],
            format!(
                "{:02x}{:02x}{:02x}{:02x}",
                digest[0], digest[1], digest[2], digest[3]
            )
        );
        assert_eq!(&a[39..40], "_");
        // Exactly 48 stays as is.
        let exact = "x".repeat(48 - 2);
        assert_eq!(local_name("k", &exact), format!("k_{exact}"));
    }
}

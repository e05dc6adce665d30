//! How a path inside a release is written where processes exchange it (a route's skill
//! `files`): its components joined by `/`, whatever the platform's separator.

use std::path::Path;

/// `rel` (a relative path) with its components joined by `/`.
pub fn slashed(rel: &Path) -> String {
    let parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    parts.join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_are_joined_by_a_slash() {
        let rel: std::path::PathBuf = ["refs", "a b.md"].iter().collect();
        assert_eq!(slashed(&rel), "refs/a b.md");
        assert_eq!(slashed(Path::new("")), "");
    }
}

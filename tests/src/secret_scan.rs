//! The secret scan of the end-to-end tests (SPEC §9): where any of a set of secret values
//! shows up outside `secrets/`. The same walk as `e2e_upstreams`'s static-secret scan, as a
//! library so that the OAuth tests (issue 20) scan tokens, client secrets and authorization
//! codes the same way.

use std::path::{Path, PathBuf};

use crate::proc_tree;

/// Every regular file under `dir` (recursively), except under `skip`.
pub fn files_under(dir: &Path, skip: &[PathBuf], out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if skip.iter().any(|s| path.starts_with(s)) {
            continue;
        }
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            files_under(&path, skip, out);
        } else if meta.is_file() {
            out.push(path);
        }
    }
}

/// Whether `needle` occurs in `haystack` (an empty needle never does).
pub fn contains(haystack: &[u8], needle: &str) -> bool {
    !needle.is_empty()
        && haystack
            .windows(needle.len())
            .any(|w| w == needle.as_bytes())
}

/// What a scan looks at besides the state directory.
#[derive(Default)]
pub struct Scan<'a> {
    /// Files outside the state dir (e.g. `up.stdout`, `up.stderr`).
    pub files: Vec<PathBuf>,
    /// Captured outputs: (what, bytes), e.g. each command's stdout and stderr.
    pub outputs: Vec<(String, Vec<u8>)>,
    /// Processes whose argv may hold a value by design (the test's own servers).
    pub skip_pids: &'a [u32],
}

/// Every place a needle leaks to: each file under `state` except `state/secrets/`, the
/// scan's files and outputs, and `/proc/*/cmdline` of every live process (Linux) except the
/// skipped ones. Names the place and which needle (by index), never the value.
pub fn leaks(needles: &[String], state: &Path, scan: &Scan<'_>) -> Vec<String> {
    let found = |bytes: &[u8]| needles.iter().position(|n| contains(bytes, n));
    let mut out = Vec::new();
    let mut files = Vec::new();
    files_under(state, &[state.join("secrets")], &mut files);
    files.extend(scan.files.iter().cloned());
    for f in &files {
        if let Some(i) = found(&std::fs::read(f).unwrap_or_default()) {
            out.push(format!("file {} (value #{i})", f.display()));
        }
    }
    for (what, bytes) in &scan.outputs {
        if let Some(i) = found(bytes) {
            out.push(format!("output of {what} (value #{i})"));
        }
    }
    for p in proc_tree::snapshot() {
        if scan.skip_pids.contains(&p.pid) {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", p.pid)).unwrap_or_default();
        if let Some(i) = found(&cmdline) {
            out.push(format!(
                "/proc/{}/cmdline: {} (value #{i})",
                p.pid, p.cmdline
            ));
        }
    }
    out
}

//! The secret scan of the end-to-end tests (SPEC §9): where any of a set of secret values
//! shows up outside `secrets/`: files, captured outputs, the argv and the environment of
//! processes. `e2e/upstreams.rs` scans static secrets with it, the OAuth tests
//! tokens, client secrets and authorization codes.

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
pub fn leaks<N: AsRef<str>>(needles: &[N], state: &Path, scan: &Scan<'_>) -> Vec<String> {
    let mut files = Vec::new();
    files_under(
        state,
        &[tutti_rules::state_dir::layout::secrets(state)],
        &mut files,
    );
    files.extend(scan.files.iter().cloned());
    let mut out = file_leaks(needles, &files);
    out.extend(output_leaks(needles, &scan.outputs));
    out.extend(cmdline_leaks(needles, scan.skip_pids));
    out
}

/// Which needle (its index) occurs in `bytes`, if any.
fn found<N: AsRef<str>>(needles: &[N], bytes: &[u8]) -> Option<usize> {
    needles.iter().position(|n| contains(bytes, n.as_ref()))
}

/// Each of `files` that holds a needle.
pub fn file_leaks<N: AsRef<str>>(needles: &[N], files: &[PathBuf]) -> Vec<String> {
    files
        .iter()
        .filter_map(|f| {
            let i = found(needles, &std::fs::read(f).unwrap_or_default())?;
            Some(format!("file {} (value #{i})", f.display()))
        })
        .collect()
}

/// Each captured output (what, bytes) that holds a needle.
pub fn output_leaks<N: AsRef<str>>(needles: &[N], outputs: &[(String, Vec<u8>)]) -> Vec<String> {
    outputs
        .iter()
        .filter_map(|(what, bytes)| {
            let i = found(needles, bytes)?;
            Some(format!("output of {what} (value #{i})"))
        })
        .collect()
}

/// `/proc/*/cmdline` of every live process (Linux) that holds a needle, except `skip_pids`.
pub fn cmdline_leaks<N: AsRef<str>>(needles: &[N], skip_pids: &[u32]) -> Vec<String> {
    let live = proc_tree::snapshot().into_iter();
    proc_file_leaks(
        needles,
        live.filter(|p| !skip_pids.contains(&p.pid)),
        "cmdline",
    )
}

/// `/proc/<pid>/environ` of each live process of `pids` (Linux) that holds a needle, except
/// the ones `allowed` accepts (e.g. an upstream that declared the value: it is in its
/// environment by design).
pub fn environ_leaks<N: AsRef<str>>(
    needles: &[N],
    pids: &[u32],
    allowed: impl Fn(&proc_tree::ProcInfo) -> bool,
) -> Vec<String> {
    let live = pids.iter().filter_map(|&pid| proc_tree::info(pid));
    proc_file_leaks(needles, live.filter(|p| !allowed(p)), "environ")
}

/// `/proc/<pid>/<file>` of each of `procs` that holds a needle, named with its argv.
fn proc_file_leaks<N: AsRef<str>>(
    needles: &[N],
    procs: impl Iterator<Item = proc_tree::ProcInfo>,
    file: &str,
) -> Vec<String> {
    procs
        .filter_map(|p| {
            let bytes = std::fs::read(format!("/proc/{}/{file}", p.pid)).unwrap_or_default();
            let i = found(needles, &bytes)?;
            Some(format!(
                "/proc/{}/{file}: {} (value #{i})",
                p.pid, p.cmdline
            ))
        })
        .collect()
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::os::unix::process::CommandExt;

    use super::*;

    /// A process holding `needle` in its argv and its environment, killed on drop.
    struct Holder(std::process::Child);

    impl Drop for Holder {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    #[test]
    fn a_value_in_a_process_argv_or_environment_is_found_unless_allowed() {
        let needle = format!("scan-needle-{}", std::process::id());
        let child = std::process::Command::new("sleep")
            .arg0(&needle)
            .arg("30")
            .env("SCAN_NEEDLE", &needle)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start sleep: {e}"));
        let holder = Holder(child);
        let pid = holder.0.id();
        // Until the exec has installed the new image, the child still shows the test's own
        // argv and environment (`/proc/PID/exe` changes a moment before `cmdline` does).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let execed = || {
            ["cmdline", "environ"].iter().all(|f| {
                std::fs::read(format!("/proc/{pid}/{f}"))
                    .is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle.as_bytes()))
            }) && std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|e| e.ends_with("sleep"))
        };
        while !execed() {
            assert!(std::time::Instant::now() < deadline, "sleep did not start");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let needles = [needle.clone()];
        let argv = cmdline_leaks(&needles, &[]);
        assert!(
            argv.iter()
                .any(|l| l.starts_with(&format!("/proc/{pid}/cmdline"))),
            "{argv:?}"
        );
        assert!(
            !cmdline_leaks(&needles, &[pid])
                .iter()
                .any(|l| l.starts_with(&format!("/proc/{pid}/"))),
            "a skipped pid is not scanned"
        );
        let env = environ_leaks(&needles, &[pid], |_| false);
        assert_eq!(env.len(), 1, "{env:?}");
        assert!(env[0].ends_with("(value #0)") && !env[0].contains("SCAN_NEEDLE="));
        assert!(environ_leaks(&needles, &[pid], |p| p.pid == pid).is_empty());
    }

    #[test]
    fn a_value_in_a_file_or_an_output_is_named_without_the_value() {
        let dir = std::env::temp_dir().join(format!("scan-test-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let file = dir.join("log");
        std::fs::write(&file, b"before s3cr3t after").unwrap_or_else(|e| panic!("{e}"));
        let needles = ["nothing", "s3cr3t"];
        let found = file_leaks(&needles, std::slice::from_ref(&file));
        assert_eq!(found, [format!("file {} (value #1)", file.display())]);
        let outputs = [("status".to_owned(), b"s3cr3t".to_vec())];
        assert_eq!(
            output_leaks(&needles, &outputs),
            ["output of status (value #1)"]
        );
        assert!(
            file_leaks(&["", "absent"], &[file]).is_empty(),
            "an empty needle never matches"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

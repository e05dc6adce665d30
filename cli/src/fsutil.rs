//! Atomic file replacement for files the CLI writes outside the state dir (the Codex
//! `config.toml`, service definitions).

use std::fs;
use std::io;
use std::path::Path;

use tutti_rules::atomic_file;

/// Replaces `path` with `contents` ([`atomic_file::write`]: temp file created with `mode` on
/// Unix whatever the umask, fsync, rename, fsync of the directory), creating the parent
/// directory if needed. On failure the temp file is removed and `path` is left as it was.
pub(crate) fn write_atomic(path: &Path, contents: &[u8], mode: u32) -> io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir)?;
    }
    atomic_file::write(path, contents, Some(mode))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::TempDir;

    #[test]
    fn replaces_the_file_and_leaves_no_temp() {
        let dir = TempDir::new("atomic");
        let path = dir.path().join("sub").join("f.txt");
        write_atomic(&path, b"one", 0o600).unwrap_or_else(|e| panic!("{e}"));
        write_atomic(&path, b"two", 0o644).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(fs::read(&path).ok(), Some(b"two".to_vec()));
        let names: Vec<_> = fs::read_dir(dir.path().join("sub"))
            .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert_eq!(names.len(), 1, "{names:?}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = fs::metadata(&path)
                .map(|m| m.permissions().mode() & 0o777)
                .ok();
            assert_eq!(mode, Some(0o644));
        }
    }

    #[test]
    fn failure_leaves_the_old_file() {
        let dir = TempDir::new("atomicfail");
        // A directory where the file should be: rename fails.
        let path = dir.path().join("taken");
        fs::create_dir_all(path.join("inner")).unwrap_or_else(|e| panic!("{e}"));
        assert!(write_atomic(&path, b"x", 0o600).is_err());
        assert!(path.join("inner").is_dir());
        let names: Vec<_> = fs::read_dir(dir.path())
            .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert_eq!(names.len(), 1, "{names:?}");
    }
}

//! Atomic file replacement for files the CLI writes outside the state dir (the Codex
//! `config.toml`, service definitions).

use std::fs;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

/// Replaces `path` with `contents`: a new temp file next to it (created with `mode` on Unix,
/// whatever the umask), fsync, rename, then a best-effort fsync of the directory. Creates
/// the parent directory if needed. On failure the temp file is removed and `path` is left
/// as it was.
pub(crate) fn write_atomic(path: &Path, contents: &[u8], mode: u32) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".to_owned());
    let tmp = dir.join(format!(".{name}.tutti-{}.tmp", std::process::id()));
    let _ = fs::remove_file(&tmp);
    let result = (|| {
        let mut file = imp::create_new(&tmp, mode)?;
        file.write_all(contents)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    imp::sync_dir(&dir);
    Ok(())
}

#[cfg(unix)]
mod imp {
    use std::fs::{File, OpenOptions, Permissions};
    use std::io;
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    use std::path::Path;

    pub(super) fn create_new(path: &Path, mode: u32) -> io::Result<File> {
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(path)?;
        file.set_permissions(Permissions::from_mode(mode))?;
        Ok(file)
    }

    pub(super) fn sync_dir(dir: &Path) {
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
}

#[cfg(not(unix))]
mod imp {
    use std::fs::{File, OpenOptions};
    use std::io;
    use std::path::Path;

    /// Windows: the file inherits the ACL of its (per-user) directory; `mode` has no meaning.
    pub(super) fn create_new(path: &Path, _mode: u32) -> io::Result<File> {
        OpenOptions::new().write(true).create_new(true).open(path)
    }

    pub(super) fn sync_dir(_dir: &Path) {}
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

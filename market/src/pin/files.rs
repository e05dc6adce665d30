//! The release folder being built, and the file checks and hashes the steps share.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::MarketError;

/// A temporary folder beside the release folder, removed unless committed.
pub(super) struct Staging {
    dir: tempfile::TempDir,
}

impl Staging {
    pub(super) fn next_to(release_dir: &Path) -> Result<Self, MarketError> {
        let occupied = std::fs::read_dir(release_dir).is_ok_and(|mut d| d.next().is_some());
        if occupied || release_dir.is_file() {
            return Err(MarketError::ReleaseExists {
                path: release_dir.to_path_buf(),
            });
        }
        let parent = match release_dir.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&parent).map_err(|source| io(&parent, source))?;
        let dir = tempfile::Builder::new()
            .prefix(".tutti-pin-")
            .tempdir_in(&parent)
            .map_err(|source| io(&parent, source))?;
        Ok(Staging { dir })
    }

    pub(super) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Renames the finished folder to `release_dir` (an empty folder there is replaced).
    pub(super) fn commit(self, release_dir: &Path) -> Result<(), MarketError> {
        if release_dir.is_dir() {
            std::fs::remove_dir(release_dir).map_err(|source| io(release_dir, source))?;
        }
        std::fs::rename(self.dir.path(), release_dir).map_err(|source| io(release_dir, source))?;
        // Renamed away: the guard's own removal finds nothing.
        let _ = self.dir.keep();
        Ok(())
    }
}

/// Runs file work (reading, hashing, unpacking, walking a tree) on the blocking pool: the
/// kernel serves everything from one thread, which must not stop while a release is pinned.
pub(super) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, MarketError> + Send + 'static,
) -> Result<T, MarketError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| MarketError::Pin(format!("a pinning step stopped ({e}); retry the install")))?
}

/// Refuses links and special files anywhere in the release (the kernel hashes and copies
/// regular files and folders only).
pub(super) fn only_regular_files(root: &Path) -> Result<(), MarketError> {
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).map_err(|source| io(&dir, source))? {
            let entry = entry.map_err(|source| io(&dir, source))?;
            let ty = entry
                .file_type()
                .map_err(|source| io(&entry.path(), source))?;
            if ty.is_dir() {
                stack.push(entry.path());
            } else if !ty.is_file() {
                return Err(MarketError::NotRegular { path: entry.path() });
            }
        }
    }
    Ok(())
}

/// `MarketError::Io` for `path`.
pub(super) fn io(path: &Path, source: std::io::Error) -> MarketError {
    MarketError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Lower-case hex SHA-256 of `bytes`.
pub(super) fn sha256_hex(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

/// Lower-case hex SHA-256 and length of a file.
pub(super) fn file_sha256(path: &Path) -> Result<(String, u64), MarketError> {
    let mut file = std::fs::File::open(path).map_err(|source| io(path, source))?;
    let mut hasher = Sha256::new();
    let size = std::io::copy(&mut file, &mut hasher).map_err(|source| io(path, source))?;
    Ok((format!("{:x}", hasher.finalize()), size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_staging_folder_left_uncommitted_is_removed_and_the_target_never_appears() {
        let parent = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let target = parent.path().join("release");
        let staging = Staging::next_to(&target).unwrap_or_else(|e| panic!("staging: {e}"));
        std::fs::write(staging.path().join("f"), "x").unwrap_or_else(|e| panic!("write: {e}"));
        drop(staging);
        let left: Vec<_> = std::fs::read_dir(parent.path())
            .unwrap_or_else(|e| panic!("read_dir: {e}"))
            .collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    }

    #[test]
    fn a_non_empty_release_folder_is_refused() {
        let parent = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        std::fs::write(parent.path().join("f"), "x").unwrap_or_else(|e| panic!("write: {e}"));
        let err = Staging::next_to(parent.path()).err().map(|e| e.to_string());
        assert!(
            err.as_deref()
                .is_some_and(|e| e.contains("the release folder exists and is not empty")),
            "{err:?}"
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_link_inside_a_release_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        std::os::unix::fs::symlink("/etc/hostname", dir.path().join("link"))
            .unwrap_or_else(|e| panic!("symlink: {e}"));
        let err = only_regular_files(dir.path()).err().map(|e| e.to_string());
        assert!(
            err.as_deref()
                .is_some_and(|e| e.contains("link: a release holds regular files")),
            "{err:?}"
        );
    }
}

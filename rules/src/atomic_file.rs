//! Replacing a file atomically: a reader sees the old content or the new one, never a mix,
//! and after a crash the new content is on disk once this returned.
//!
//! The sequence: write a temp file in the target's directory, fsync it, rename it over the
//! target, fsync the directory (so the rename itself is durable; best effort, and a no-op on
//! Windows, where a directory cannot be opened for syncing). On any failure the temp file is
//! removed and the target is left as it was.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

/// Replaces `path` with `bytes`. The temp file is `.<name>.tutti-<pid>.tmp` next to `path`
/// (a leftover of a crashed run is replaced). With `mode` (Unix permission bits) the file
/// gets exactly that mode, whatever the umask; `None` leaves the platform default (Windows:
/// always; the file inherits its directory's ACL).
pub fn write(path: &Path, bytes: &[u8], mode: Option<u32>) -> io::Result<()> {
    let tmp = temp_path(path);
    let _ = fs::remove_file(&tmp);
    replace_with(path, &tmp, |tmp| {
        let mut file = create_new(tmp, mode)?;
        file.write_all(bytes)?;
        file.sync_all()
    })
}

/// `.<name>.tutti-<pid>.tmp` beside `path`.
fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".to_owned());
    dir_of(path).join(format!(".{name}{TEMP_INFIX}{}.tmp", std::process::id()))
}

/// What every temp file name of [`write`] holds, between the target's name and the pid.
const TEMP_INFIX: &str = ".tutti-";

/// Whether `name` is the name of a temp file [`write`] makes (`.<name>.tutti-<pid>.tmp`):
/// what a process killed between creating it and the rename leaves behind. A kernel
/// killed while writing a secret leaves one in `secrets/` holding the value, so the start of
/// the next one removes them ([`write`] itself replaces only its own pid's).
pub fn is_temp_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix('.').and_then(|n| n.strip_suffix(".tmp")) else {
        return false;
    };
    rest.rsplit_once(TEMP_INFIX).is_some_and(|(target, pid)| {
        !target.is_empty() && !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit())
    })
}

/// Replaces `path` by what `fill` creates at `tmp` (in the same directory; it must not
/// exist): a file, which `fill` leaves complete and synced, or a whole directory tree (where
/// `path` must not exist either). Then rename, then the directory fsync. On failure `tmp` is
/// removed and `path` is untouched.
pub fn replace_with<E: From<io::Error>>(
    path: &Path,
    tmp: &Path,
    fill: impl FnOnce(&Path) -> Result<(), E>,
) -> Result<(), E> {
    if let Err(e) = fill(tmp).and_then(|()| fs::rename(tmp, path).map_err(E::from)) {
        let _ = match fs::symlink_metadata(tmp) {
            Ok(m) if m.is_dir() => fs::remove_dir_all(tmp),
            _ => fs::remove_file(tmp),
        };
        return Err(e);
    }
    sync_dir(&dir_of(path));
    Ok(())
}

/// The directory `path` is in (`.` for a bare file name).
fn dir_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Creates `path`, which must not exist, with exactly `mode` on Unix when given.
pub fn create_new(path: &Path, mode: Option<u32>) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    if let Some(mode) = mode {
        use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
        options.mode(mode);
        let file = options.open(path)?;
        // The umask may have cleared bits of `mode`.
        file.set_permissions(fs::Permissions::from_mode(mode))?;
        return Ok(file);
    }
    #[cfg(not(unix))]
    let _ = mode;
    options.open(path)
}

/// Makes a rename in `dir` durable. Best effort: a failure here cannot undo the rename.
pub fn sync_dir(dir: &Path) {
    #[cfg(unix)]
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    // Windows: a directory cannot be opened as a file to flush it; NTFS journals the rename.
    #[cfg(not(unix))]
    let _ = dir;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    #[test]
    fn replaces_the_file_and_leaves_no_temp() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("f.json");
        write(&path, b"one", Some(0o600))?;
        write(&path, b"two", Some(0o644))?;
        assert_eq!(fs::read(&path)?, b"two");
        assert_eq!(names(dir.path()), ["f.json"]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            assert_eq!(fs::metadata(&path)?.permissions().mode() & 0o777, 0o644);
        }
        Ok(())
    }

    #[test]
    fn temp_names_are_told_from_other_files() {
        assert!(is_temp_name(".registry.json.tutti-4242.tmp"));
        assert!(is_temp_name(".gh.json.tutti-1.tmp"));
        for other in [
            "registry.json",
            "gh.json",
            ".tutti-4242.tmp",
            ".gh.json.tutti-.tmp",
            ".gh.json.tutti-42x.tmp",
            "gh.json.tutti-42.tmp",
            ".tmp-42-abc",
        ] {
            assert!(!is_temp_name(other), "{other}");
        }
    }

    #[test]
    fn the_temp_file_of_a_write_has_a_temp_name() {
        let tmp = temp_path(Path::new("/state/secrets/gh.json"));
        assert_eq!(tmp.parent(), Some(Path::new("/state/secrets")));
        let name = tmp.file_name().map(|n| n.to_string_lossy().into_owned());
        assert!(name.as_deref().is_some_and(is_temp_name), "{tmp:?}");
    }

    #[test]
    fn a_leftover_temp_file_of_a_crash_is_replaced() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("registry.json");
        let leftover = dir
            .path()
            .join(format!(".registry.json.tutti-{}.tmp", std::process::id()));
        fs::write(&leftover, "half written")?;
        write(&path, b"{}", Some(0o600))?;
        assert_eq!(fs::read(&path)?, b"{}");
        assert_eq!(names(dir.path()), ["registry.json"]);
        Ok(())
    }

    #[cfg(unix)]
    #[test]
    fn the_mode_holds_whatever_the_old_file_had() -> io::Result<()> {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("secrets.json");
        fs::write(&path, "old")?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644))?;
        write(&path, b"new", Some(0o600))?;
        assert_eq!(fs::metadata(&path)?.permissions().mode() & 0o777, 0o600);
        Ok(())
    }

    #[test]
    fn failure_leaves_the_old_target_and_no_temp() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        // A non-empty directory where the file should be: the rename fails.
        let path = dir.path().join("taken");
        fs::create_dir_all(path.join("inner"))?;
        assert!(write(&path, b"x", None).is_err());
        assert!(path.join("inner").is_dir());
        assert_eq!(names(dir.path()), ["taken"]);
        Ok(())
    }

    #[test]
    fn replace_with_moves_a_whole_directory_into_place() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let dest = dir.path().join("1.0.0");
        replace_with(&dest, &dir.path().join(".tmp-1"), |tmp| {
            fs::create_dir_all(tmp.join("sub"))?;
            fs::write(tmp.join("sub/a.txt"), "a")
        })?;
        assert_eq!(fs::read(dest.join("sub/a.txt"))?, b"a");
        let failed: io::Result<()> = replace_with(
            &dir.path().join("2.0.0"),
            &dir.path().join(".tmp-2"),
            |tmp| {
                fs::create_dir_all(tmp.join("sub"))?;
                Err(io::Error::other("copy failed"))
            },
        );
        assert!(failed.is_err());
        assert_eq!(names(dir.path()), ["1.0.0"]);
        Ok(())
    }

    #[test]
    fn replace_with_removes_the_temp_when_fill_fails() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("shim");
        fs::write(&path, "old")?;
        let tmp = dir.path().join(".shim.tmp");
        let result = replace_with(&path, &tmp, |tmp| {
            fs::write(tmp, "partial")?;
            Err(io::Error::other("disk full"))
        });
        assert!(result.is_err());
        assert_eq!(fs::read(&path)?, b"old");
        assert_eq!(names(dir.path()), ["shim"]);
        Ok(())
    }
}

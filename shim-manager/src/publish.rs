//! Writes and removes shims in `<state>/bin`. Every write is atomic: a temp file in `bin/`
//! (named `.tutti-connector-<key>.<pid>-<n>.tmp`, so it is never on PATH under a shim name),
//! made executable, then renamed over the shim (`tutti_rules::atomic_file`).

use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use tutti_rules::atomic_file;

use crate::Error;
use crate::shimfile::{self, Rendered, SHIM_PREFIX, Style};

pub(crate) struct Publisher {
    bin_dir: PathBuf,
    launcher: PathBuf,
    launcher_bytes: Vec<u8>,
    state_dir_bytes: Vec<u8>,
    style: Style,
    counter: u64,
}

impl Publisher {
    /// Creates `bin_dir` (0755). `launcher` and `state_dir` must be absolute.
    pub(crate) fn new(
        bin_dir: PathBuf,
        launcher: PathBuf,
        state_dir: &Path,
    ) -> Result<Self, Error> {
        let launcher_bytes =
            shimfile::path_to_bytes(&launcher).ok_or_else(|| Error::UnrepresentablePath {
                path: launcher.clone(),
            })?;
        let state_dir_bytes =
            shimfile::path_to_bytes(state_dir).ok_or_else(|| Error::UnrepresentablePath {
                path: state_dir.to_path_buf(),
            })?;
        sys::create_public_dir(&bin_dir).map_err(|source| Error::BinDir {
            path: bin_dir.clone(),
            source,
        })?;
        Ok(Self {
            bin_dir,
            launcher,
            launcher_bytes,
            state_dir_bytes,
            style: Style::native(),
            counter: 0,
        })
    }

    pub(crate) fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }

    /// Makes `tutti-connector-<key>` exist and be current. With `force` it is rewritten even
    /// when it already looks current (a snapshot refreshes copies of an upgraded launcher).
    pub(crate) fn publish(&mut self, key: &str, force: bool) -> Result<(), Error> {
        let target = self.bin_dir.join(shimfile::shim_file_name(key));
        let sidecar = self.bin_dir.join(shimfile::sidecar_file_name(key));
        match shimfile::render(&self.launcher_bytes, key, &self.state_dir_bytes, self.style) {
            Rendered::Script(content) => {
                if force || !file_is(&target, &content) {
                    self.replace(key, &target, |tmp| {
                        write_new(tmp, &content)?;
                        sys::make_executable(tmp)
                    })?;
                }
                // A copy published earlier (e.g. for a longer path) leaves a sidecar behind.
                remove_if_exists(&sidecar)
            }
            Rendered::Copy { sidecar: content } => {
                // The sidecar goes first, so the copy never runs without it.
                if force || !file_is(&sidecar, &content) {
                    self.replace(key, &sidecar, |tmp| write_new(tmp, &content))?;
                }
                if force || !self.copy_is_current(&target) {
                    let launcher = self.launcher.clone();
                    self.replace(key, &target, |tmp| link_or_copy(&launcher, tmp))?;
                }
                Ok(())
            }
        }
    }

    /// Removes `tutti-connector-<key>` and its sidecar, if any.
    pub(crate) fn remove(&mut self, key: &str) -> Result<(), Error> {
        let target = self.bin_dir.join(shimfile::shim_file_name(key));
        if let Err(source) = fs::remove_file(&target) {
            match source.kind() {
                io::ErrorKind::NotFound => {}
                // A running copy cannot be deleted on Windows, but it can be renamed away;
                // the next snapshot's sweep deletes it.
                _ => {
                    let aside = self.temp_path(key);
                    fs::rename(&target, &aside).map_err(|_| Error::Remove {
                        path: target.clone(),
                        source,
                    })?;
                    let _ = fs::remove_file(&aside);
                }
            }
        }
        remove_if_exists(&self.bin_dir.join(shimfile::sidecar_file_name(key)))
    }

    /// Deletes every `tutti-connector-*` file (and sidecar, and leftover temp file) that does
    /// not belong to a key in `keep`. Returns the names deleted.
    pub(crate) fn sweep(&mut self, keep: &BTreeSet<String>) -> Result<Vec<String>, Error> {
        let entries = fs::read_dir(&self.bin_dir).map_err(|source| Error::ListBin {
            path: self.bin_dir.clone(),
            source,
        })?;
        let mut deleted = Vec::new();
        for entry in entries.flatten() {
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            if !is_stale(&name, keep) || entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let path = entry.path();
            match fs::remove_file(&path) {
                Ok(()) => deleted.push(name),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(source) => return Err(Error::Remove { path, source }),
            }
        }
        deleted.sort();
        Ok(deleted)
    }

    fn copy_is_current(&self, target: &Path) -> bool {
        match (fs::metadata(target), fs::metadata(&self.launcher)) {
            (Ok(published), Ok(original)) => {
                published.is_file()
                    && published.len() == original.len()
                    && sys::is_executable(&published)
            }
            _ => false,
        }
    }

    /// Atomically replaces `target` ([`atomic_file::replace_with`]): `fill` writes a fresh temp
    /// file in `bin/`, which is then renamed over `target`, and `bin/` is synced; on any failure
    /// the temp file is deleted and `target` is untouched.
    fn replace(
        &mut self,
        key: &str,
        target: &Path,
        fill: impl FnOnce(&Path) -> io::Result<()>,
    ) -> Result<(), Error> {
        let tmp = self.temp_path(key);
        atomic_file::replace_with(target, &tmp, fill).map_err(|source| Error::Publish {
            path: target.to_path_buf(),
            source,
        })
    }

    fn temp_path(&mut self, key: &str) -> PathBuf {
        self.counter += 1;
        self.bin_dir.join(format!(
            ".{SHIM_PREFIX}{key}.{}-{}.tmp",
            std::process::id(),
            self.counter
        ))
    }
}

/// Fills `tmp` with the launcher: a hard link where one can be made (same filesystem, a
/// launcher we may link and that is already 0755), else a synced copy. A link is instant; a copy
/// writes the whole launcher (megabytes in a debug build) and syncs it, which on a busy machine
/// can eat SPEC §8's 1 s publish bound. Windows always copies: a running linked image would pin
/// the launcher's own name against upgrades.
fn link_or_copy(launcher: &Path, tmp: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        // `hard_link` does not follow a symlink on Linux; link the file it names.
        let linked = fs::canonicalize(launcher).is_ok_and(|real| {
            fs::metadata(&real).is_ok_and(|meta| sys::is_executable(&meta))
                && fs::hard_link(&real, tmp).is_ok()
        });
        if linked {
            return Ok(());
        }
    }
    fs::copy(launcher, tmp)?;
    fs::File::open(tmp)?.sync_all()?;
    sys::make_executable(tmp)
}

/// Whether a file name in `bin/` is ours and not wanted.
fn is_stale(name: &str, keep: &BTreeSet<String>) -> bool {
    if let Some(rest) = name.strip_prefix(SHIM_PREFIX) {
        let key = rest
            .strip_suffix(std::env::consts::EXE_SUFFIX)
            .unwrap_or(rest);
        return !keep.contains(key) || name != shimfile::shim_file_name(key);
    }
    if let Some(rest) = name
        .strip_prefix('.')
        .and_then(|n| n.strip_prefix(SHIM_PREFIX))
    {
        if rest.ends_with(".tmp") {
            return true;
        }
        return match rest.strip_suffix(".shim") {
            Some(key) => !keep.contains(key),
            None => false,
        };
    }
    false
}

fn file_is(path: &Path, content: &[u8]) -> bool {
    match fs::metadata(path) {
        Ok(meta) if meta.is_file() && meta.len() == content.len() as u64 => {
            fs::read(path).is_ok_and(|c| c == content)
                && (!cfg!(unix) || sys::is_executable(&meta) || path_is_sidecar(path))
        }
        _ => false,
    }
}

fn path_is_sidecar(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "shim")
}

fn write_new(path: &Path, content: &[u8]) -> io::Result<()> {
    let mut file = atomic_file::create_new(path, None)?;
    file.write_all(content)?;
    file.sync_all()
}

fn remove_if_exists(path: &Path) -> Result<(), Error> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(Error::Remove {
            path: path.to_path_buf(),
            source,
        }),
    }
}

#[cfg(unix)]
mod sys {
    use std::fs;
    use std::io;
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    use std::path::Path;

    pub(super) fn create_public_dir(dir: &Path) -> io::Result<()> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)?;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o755))
    }

    pub(super) fn make_executable(path: &Path) -> io::Result<()> {
        fs::set_permissions(path, fs::Permissions::from_mode(0o755))
    }

    pub(super) fn is_executable(meta: &fs::Metadata) -> bool {
        meta.permissions().mode() & 0o777 == 0o755
    }
}

#[cfg(not(unix))]
mod sys {
    use std::fs;
    use std::io;
    use std::path::Path;

    pub(super) fn create_public_dir(dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)
    }

    pub(super) fn make_executable(_path: &Path) -> io::Result<()> {
        Ok(())
    }

    pub(super) fn is_executable(_meta: &fs::Metadata) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keep(keys: &[&str]) -> BTreeSet<String> {
        keys.iter().map(|k| k.to_string()).collect()
    }

    #[test]
    fn stale_names() {
        let k = keep(&["github"]);
        let shim = shimfile::shim_file_name("github");
        assert!(!is_stale(&shim, &k));
        assert!(!is_stale(".tutti-connector-github.shim", &k));
        assert!(is_stale(&shimfile::shim_file_name("gone"), &k));
        assert!(is_stale(".tutti-connector-gone.shim", &k));
        assert!(is_stale(".tutti-connector-github.12-3.tmp", &k));
        assert!(is_stale("tutti-connector-github.bak", &k));
        assert!(!is_stale("tutti", &k));
        assert!(!is_stale("my-tool", &k));
        assert!(!is_stale(".hidden", &k));
    }

    #[cfg(unix)]
    #[test]
    fn publish_remove_and_sweep_on_disk() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state");
        let launcher = dir.path().join("tutti-shim");
        fs::write(&launcher, b"\x7fELF not really").expect("write launcher");
        let bin = state.join("bin");
        let mut p = Publisher::new(bin.clone(), launcher, &state).expect("publisher");
        assert_eq!(
            fs::metadata(&bin).expect("bin").permissions().mode() & 0o777,
            0o755
        );

        fs::write(bin.join("tutti-connector-old"), b"x").expect("stale");
        fs::write(bin.join(".tutti-connector-old.shim"), b"x").expect("stale sidecar");
        fs::write(bin.join("unrelated"), b"x").expect("unrelated");

        p.publish("github", false).expect("publish");
        let shim = bin.join("tutti-connector-github");
        let meta = fs::metadata(&shim).expect("shim");
        assert_eq!(meta.permissions().mode() & 0o777, 0o755);
        assert!(fs::read(&shim).expect("read").starts_with(b"#!/"));
        p.publish("github", false).expect("publish again");

        let deleted = p.sweep(&keep(&["github"])).expect("sweep");
        assert_eq!(
            deleted,
            vec![".tutti-connector-old.shim", "tutti-connector-old"]
        );
        assert!(bin.join("unrelated").exists());
        assert!(shim.exists());

        p.remove("github").expect("remove");
        assert!(!shim.exists());
        p.remove("github").expect("remove is idempotent");
        let left: Vec<_> = fs::read_dir(&bin)
            .expect("list")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from("unrelated")]);
    }

    #[cfg(unix)]
    #[test]
    fn long_state_dir_publishes_a_copy_with_sidecar() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("s".repeat(250));
        let launcher = dir.path().join("tutti-shim");
        fs::write(&launcher, b"launcher bytes").expect("write launcher");
        let bin = state.join("bin");
        let mut p = Publisher::new(bin.clone(), launcher, &state).expect("publisher");
        p.publish("k", false).expect("publish");
        assert_eq!(
            fs::read(bin.join("tutti-connector-k")).expect("copy"),
            b"launcher bytes"
        );
        let sidecar = fs::read(bin.join(".tutti-connector-k.shim")).expect("sidecar");
        let (key, state_bytes) = shimfile::parse_sidecar(&sidecar).expect("parse");
        assert_eq!(key, "k");
        assert_eq!(shimfile::bytes_to_path(&state_bytes), Some(state.clone()));
        assert!(p.sweep(&keep(&["k"])).expect("sweep").is_empty());
        p.remove("k").expect("remove");
        assert_eq!(fs::read_dir(&bin).expect("list").count(), 0);
    }

    /// An executable launcher is linked, not copied (instant; SPEC §8's 1 s publish bound held
    /// only loosely with a synced copy of a debug launcher); one that is not 0755 is copied and
    /// the copy made executable. Either way the shim stays when the launcher is replaced.
    #[cfg(unix)]
    #[test]
    fn a_copy_is_a_hard_link_when_the_launcher_allows_one() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("s".repeat(250));
        let launcher = dir.path().join("tutti-shim");
        fs::write(&launcher, b"launcher bytes").expect("write launcher");
        let bin = state.join("bin");
        let mut p = Publisher::new(bin.clone(), launcher.clone(), &state).expect("publisher");
        let shim = bin.join("tutti-connector-k");
        let inode = |path: &Path| fs::metadata(path).expect("metadata").ino();

        p.publish("k", false).expect("publish a copy");
        assert_ne!(inode(&shim), inode(&launcher), "0644 launcher: copied");
        assert!(sys::is_executable(&fs::metadata(&shim).expect("shim")));

        sys::make_executable(&launcher).expect("chmod launcher");
        p.publish("k", true).expect("publish a link");
        assert_eq!(inode(&shim), inode(&launcher), "0755 launcher: linked");

        // An upgrade replaces the launcher by rename; the published shim keeps working.
        let upgraded = dir.path().join("tutti-shim.new");
        fs::write(&upgraded, b"new launcher").expect("write upgrade");
        fs::rename(&upgraded, &launcher).expect("upgrade launcher");
        assert_eq!(fs::read(&shim).expect("shim"), b"launcher bytes");
    }
}

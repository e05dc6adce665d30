//! Finding the runtime's other binaries (`tutti-kernel`, `tutti-mcp-frontend`,
//! `tutti-upstream-worker`, `tutti-shim-manager`, `tutti-shim`). They are installed side by
//! side; the one rule every binary uses:
//!
//! 1. `TUTTI_LIBEXEC_DIR`, when set and not empty, is the only place looked at: an explicit
//!    setting is never second-guessed (a binary missing there is an error that names it).
//! 2. Otherwise the directory of the running executable as the OS reports it, then the
//!    directory of the file it resolves to through symlinks (`/usr/local/bin/tutti` linking
//!    to `/opt/tutti/bin/tutti` finds `/opt/tutti/bin/tutti-kernel`). On Linux the OS
//!    already reports the resolved file; elsewhere it may report the link.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The variable that names the directory of the runtime's binaries.
pub const LIBEXEC_ENV: &str = "TUTTI_LIBEXEC_DIR";

/// `name` with the platform's executable suffix (`.exe` on Windows).
pub fn file_name(name: &str) -> String {
    format!("{name}{}", std::env::consts::EXE_SUFFIX)
}

/// Where the runtime's binaries are looked for, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Libexec {
    dirs: Vec<PathBuf>,
}

impl Libexec {
    /// From `TUTTI_LIBEXEC_DIR` and the running executable.
    pub fn from_env() -> Self {
        Self::new(std::env::var_os(LIBEXEC_ENV), std::env::current_exe().ok())
    }

    /// From a `TUTTI_LIBEXEC_DIR` value and the path of the running executable (tests pass
    /// their own).
    pub fn new(libexec: Option<OsString>, exe: Option<PathBuf>) -> Self {
        if let Some(dir) = libexec.filter(|d| !d.is_empty()) {
            return Self {
                dirs: vec![PathBuf::from(dir)],
            };
        }
        let mut dirs = Vec::new();
        if let Some(exe) = exe {
            if let Some(dir) = exe.parent() {
                dirs.push(dir.to_path_buf());
            }
            if let Some(real) = std::fs::canonicalize(&exe)
                .ok()
                .and_then(|real| real.parent().map(Path::to_path_buf))
                && !dirs.contains(&real)
            {
                dirs.push(real);
            }
        }
        Self { dirs }
    }

    /// The directories looked in, in order (empty only when the executable's path is unknown).
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// The binary `name` (suffix added). `Err` carries the path where it was expected first,
    /// for an error message that names it.
    pub fn locate(&self, name: &str) -> Result<PathBuf, PathBuf> {
        let file = file_name(name);
        let candidates: Vec<PathBuf> = self.dirs.iter().map(|d| d.join(&file)).collect();
        match candidates.iter().find(|p| p.is_file()) {
            Some(path) => Ok(path.clone()),
            None => Err(candidates
                .into_iter()
                .next()
                .unwrap_or_else(|| PathBuf::from(file))),
        }
    }

    /// The first directory that holds every one of `names`, else the first directory: for a
    /// process that starts several siblings from one place (the kernel). `None` when the
    /// executable's path is unknown.
    pub fn dir_holding(&self, names: &[&str]) -> Option<PathBuf> {
        self.dirs
            .iter()
            .find(|d| names.iter().all(|n| d.join(file_name(n)).is_file()))
            .or_else(|| self.dirs.first())
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::io;

    fn touch(dir: &Path, name: &str) -> io::Result<PathBuf> {
        fs::create_dir_all(dir)?;
        let path = dir.join(file_name(name));
        fs::write(&path, "")?;
        Ok(path)
    }

    #[test]
    fn libexec_dir_is_the_only_place_when_set() -> io::Result<()> {
        let root = tempfile::tempdir()?;
        let next_to_exe = touch(&root.path().join("bin"), "tutti-kernel")?;
        let libexec = root.path().join("libexec");
        fs::create_dir_all(&libexec)?;
        let found = Libexec::new(
            Some(libexec.clone().into_os_string()),
            Some(root.path().join("bin").join("tutti")),
        );
        // Missing in the named directory: an error naming it, not the copy next to the exe.
        assert_eq!(
            found.locate("tutti-kernel"),
            Err(libexec.join(file_name("tutti-kernel")))
        );
        let there = touch(&libexec, "tutti-kernel")?;
        assert_eq!(found.locate("tutti-kernel"), Ok(there));
        assert_ne!(found.locate("tutti-kernel"), Ok(next_to_exe));
        Ok(())
    }

    #[test]
    fn an_empty_libexec_dir_means_unset() -> io::Result<()> {
        let root = tempfile::tempdir()?;
        let kernel = touch(root.path(), "tutti-kernel")?;
        let found = Libexec::new(Some(OsString::new()), Some(root.path().join("tutti")));
        assert_eq!(found.locate("tutti-kernel"), Ok(kernel));
        Ok(())
    }

    #[test]
    fn missing_names_the_first_place_looked() {
        let found = Libexec::new(None, Some(PathBuf::from("/nonexistent/dir/tutti")));
        assert_eq!(
            found.locate("tutti-kernel"),
            Err(PathBuf::from("/nonexistent/dir").join(file_name("tutti-kernel")))
        );
        let unknown = Libexec::new(None, None);
        assert_eq!(
            unknown.locate("tutti-kernel"),
            Err(PathBuf::from(file_name("tutti-kernel")))
        );
        assert_eq!(unknown.dir_holding(&["tutti-kernel"]), None);
    }

    #[cfg(unix)]
    #[test]
    fn a_symlinked_executable_finds_the_siblings_of_its_target() -> io::Result<()> {
        let root = tempfile::tempdir()?;
        // Resolved up front: the temp directory itself may sit behind a symlink.
        let root = fs::canonicalize(root.path())?;
        let real_dir = root.join("opt");
        let real = touch(&real_dir, "tutti")?;
        let kernel = touch(&real_dir, "tutti-kernel")?;
        let link_dir = root.join("bin");
        fs::create_dir_all(&link_dir)?;
        let link = link_dir.join("tutti");
        std::os::unix::fs::symlink(&real, &link)?;
        let found = Libexec::new(None, Some(link));
        assert_eq!(found.locate("tutti-kernel"), Ok(kernel));
        // The link's own directory comes first.
        let shadow = touch(&link_dir, "tutti-kernel")?;
        assert_eq!(found.locate("tutti-kernel"), Ok(shadow));
        Ok(())
    }

    #[test]
    fn dir_holding_falls_back_to_the_first_directory() -> io::Result<()> {
        let root = tempfile::tempdir()?;
        let a = root.path().join("a");
        touch(&a, "tutti-mcp-frontend")?;
        let found = Libexec::new(Some(a.clone().into_os_string()), None);
        assert_eq!(
            found.dir_holding(&["tutti-mcp-frontend", "tutti-shim"]),
            Some(a)
        );
        Ok(())
    }
}

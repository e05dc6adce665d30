//! What the kernel does to its state directory at start, and how it opens log files:
//! owner-only logs (`logs/` 0700, every file in it 0600, `registry.json` 0600: an upstream's
//! stderr or the audit trail may hold what another local user must not read), and the sweep
//! of what a crash left behind (temporary release copies, worker sockets of dead workers).

use std::fs::{File, OpenOptions};
use std::path::Path;

use crate::paths::Paths;

/// Opens `path` for appending, creating it owner-only (0600 on Unix). An existing file that
/// group or others can read is tightened first. A symlink or a FIFO is refused (Unix): the
/// file is opened without following a link and without blocking, and must be a regular file.
pub fn open_log(path: &Path) -> std::io::Result<File> {
    let mut opts = OpenOptions::new();
    opts.create(true).append(true);
    #[cfg(unix)]
    {
        use nix::fcntl::OFlag;
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600)
            .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK).bits());
    }
    let file = opts.open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if meta.permissions().mode() & 0o077 != 0 {
            file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        }
    }
    Ok(file)
}

/// `logs/` 0700 (created if missing), every regular file in it and `registry.json` 0600.
/// Symlinks are left alone (never followed). Problems are logged, not fatal: a file the kernel
/// cannot tighten is one it does not own, which the owner has to look at anyway.
pub fn tighten(paths: &Paths) -> std::io::Result<()> {
    crate::paths::create_private_dir(&paths.logs())?;
    #[cfg(unix)]
    {
        let mut files = vec![paths.registry()];
        if let Ok(entries) = std::fs::read_dir(paths.logs()) {
            files.extend(entries.flatten().map(|e| e.path()));
        }
        for file in files {
            if let Err(e) = owner_only(&file) {
                tracing::warn!(path = %file.display(), error = %e, "cannot make the file owner-only");
            }
        }
    }
    Ok(())
}

/// Sets a regular file (not a link) to 0600 when group or others have any access.
#[cfg(unix)]
fn owner_only(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if meta.is_file() && meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(())
}

/// Removes what a crashed kernel or worker left: temporary release copies
/// (`releases/<key>/.tmp-*`), damaged copies moved aside (`releases/<key>/*.damaged-*`) and
/// worker sockets (`run/w-*.sock`: no worker runs before this kernel starts one, and new
/// generations never reuse a name). Called with the state directory's lock held. Returns how
/// many entries were removed.
pub fn sweep(paths: &Paths) -> usize {
    let mut removed = 0;
    for key_dir in entries(&paths.releases()) {
        for entry in entries(&key_dir) {
            let name = file_name(&entry);
            if (name.starts_with(".tmp-") || name.contains(".damaged-")) && remove(&entry) {
                removed += 1;
            }
        }
    }
    for entry in entries(&paths.run()) {
        let name = file_name(&entry);
        if name.starts_with("w-") && name.ends_with(".sock") && remove(&entry) {
            removed += 1;
        }
    }
    removed
}

fn entries(dir: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Removes one leftover (a plain file or a link is removed as such, never followed).
fn remove(path: &Path) -> bool {
    let is_dir = std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir());
    let result = if is_dir {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    };
    match result {
        Ok(()) => {
            tracing::info!(path = %path.display(), "removed a leftover of an earlier run");
            true
        }
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove a leftover of an earlier run");
            false
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p)
            .map(|m| m.permissions().mode() & 0o777)
            .unwrap_or(0)
    }

    fn paths(dir: &Path) -> Paths {
        Paths {
            state: dir.to_path_buf(),
            libexec: dir.to_path_buf(),
        }
    }

    #[test]
    fn logs_are_created_and_tightened_owner_only() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let p = paths(dir.path());
        std::fs::create_dir_all(p.logs())?;
        std::fs::set_permissions(p.logs(), std::fs::Permissions::from_mode(0o755))?;
        let old = p.logs().join("connector-a.log");
        std::fs::write(&old, "x")?;
        std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o644))?;
        std::fs::write(p.registry(), "{}")?;
        std::fs::set_permissions(p.registry(), std::fs::Permissions::from_mode(0o644))?;
        tighten(&p)?;
        assert_eq!(mode(&p.logs()), 0o700);
        assert_eq!(mode(&old), 0o600);
        assert_eq!(mode(&p.registry()), 0o600);
        let new = p.logs().join("new.log");
        drop(open_log(&new)?);
        assert_eq!(mode(&new), 0o600);
        Ok(())
    }

    #[test]
    fn links_and_fifos_are_not_opened_as_logs() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let target = dir.path().join("target");
        std::fs::write(&target, "")?;
        let link = dir.path().join("link.log");
        std::os::unix::fs::symlink(&target, &link)?;
        assert!(open_log(&link).is_err());
        let fifo = dir.path().join("fifo.log");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).map_err(std::io::Error::from)?;
        assert!(
            open_log(&fifo).is_err(),
            "a FIFO without a reader must not block or open"
        );
        assert!(open_log(&dir.path().join("sub")).is_ok());
        std::fs::create_dir(dir.path().join("d"))?;
        assert!(open_log(&dir.path().join("d")).is_err());
        Ok(())
    }

    #[test]
    fn sweep_removes_temporary_copies_and_worker_sockets_only() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let p = paths(dir.path());
        let key = p.releases().join("k");
        std::fs::create_dir_all(key.join(".tmp-42-abc/sub"))?;
        std::fs::create_dir_all(key.join("abc.damaged-7"))?;
        std::fs::create_dir_all(key.join("abc"))?;
        std::fs::create_dir_all(p.run())?;
        std::fs::write(p.run().join("w-1f.sock"), "")?;
        std::fs::write(p.run().join("kernel.lock"), "")?;
        assert_eq!(sweep(&p), 3);
        assert!(key.join("abc").is_dir());
        assert!(!key.join(".tmp-42-abc").exists() && !key.join("abc.damaged-7").exists());
        assert!(!p.run().join("w-1f.sock").exists());
        assert!(p.run().join("kernel.lock").exists());
        Ok(())
    }
}

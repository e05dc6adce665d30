//! What the kernel does to its state directory at start, and how it opens log files:
//! owner-only logs (`logs/` 0700, every file in it 0600, `registry.json` 0600: an upstream's
//! stderr or the audit trail may hold what another local user must not read), and the sweep
//! of what a crash left behind (temporary release copies, temp files of atomic writes, worker
//! sockets of dead workers), then [`reclaim`]: what an uninstall or a disconnect the crash cut
//! short had still to delete.
//!
//! `registry.json` is the commit point of every change: a command changes the registry, then
//! deletes what the change leaves without an owner (secrets, release copies). A kernel killed
//! between the two leaves those, and the next start deletes them, so after any crash every
//! connector is wholly as it was or wholly as the command left it.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::path::Path;

use crate::paths::Paths;
use crate::registry::Registry;

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
/// (`releases/<key>/.tmp-*`), damaged copies moved aside (`releases/<key>/*.damaged-*`), the
/// temp files of atomic writes (`.<name>.tutti-<pid>.tmp` beside `registry.json`, in
/// `secrets/`, where one holds a secret, and in `run/`) and worker sockets (`run/w-*.sock` and
/// the frame data plane's `run/d-*.sock`: no worker runs before this kernel starts one, and new
/// generations never reuse a name). Called with the state directory's lock held. Returns how
/// many entries were removed.
pub fn sweep(paths: &Paths) -> usize {
    let mut removed = 0;
    let secrets = tutti_rules::state_dir::layout::secrets(&paths.state);
    for dir in [paths.state.clone(), secrets, paths.run()] {
        for entry in entries(&dir) {
            if tutti_rules::atomic_file::is_temp_name(&file_name(&entry)) && remove(&entry) {
                removed += 1;
            }
        }
    }
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
        let worker = name.starts_with("w-") || name.starts_with("d-");
        if worker && name.ends_with(".sock") && remove(&entry) {
            removed += 1;
        }
    }
    removed
}

/// What [`reclaim`] took away: the stored secrets of each connector whose file it deleted
/// (an OAuth login among them is revoked at its server afterwards, as uninstall does).
pub type Reclaimed = BTreeMap<String, BTreeMap<String, String>>;

/// Finishes what an uninstall or a disconnect cut short by a crash had still to delete, as
/// the registry (read at start, before anything else uses the files) says: the release
/// copies of a connector that is not installed (`releases/<key>/`, perhaps half deleted), and
/// every secrets file (`secrets/<key>.json`) of a connector that is not installed or is
/// disconnected. Called with the state directory's lock held, before the secret store opens.
pub fn reclaim(paths: &Paths, registry: &Registry) -> Reclaimed {
    for key_dir in entries(&paths.releases()) {
        if !registry.connectors.contains_key(&file_name(&key_dir)) {
            remove(&key_dir);
        }
    }
    let mut taken = Reclaimed::new();
    let secrets = tutti_rules::state_dir::layout::secrets(&paths.state);
    for file in entries(&secrets) {
        let name = file_name(&file);
        let Some(key) = name.strip_suffix(".json") else {
            continue;
        };
        if registry.connectors.get(key).is_some_and(|c| c.connected) {
            continue;
        }
        let stored = std::fs::read(&file)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        if remove(&file) {
            taken.insert(key.to_owned(), stored);
        }
    }
    taken
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
        std::fs::write(p.run().join("d-1f.sock"), "")?;
        std::fs::write(p.run().join("kernel.lock"), "")?;
        // The temp files of atomic writes a kill left (one of them holding a secret).
        let secrets = dir.path().join("secrets");
        std::fs::create_dir_all(&secrets)?;
        let temps = [
            dir.path().join(".registry.json.tutti-4242.tmp"),
            secrets.join(".gh.json.tutti-4242.tmp"),
            p.run().join(".frontend.port.tutti-4242.tmp"),
        ];
        for t in &temps {
            std::fs::write(t, "half")?;
        }
        std::fs::write(secrets.join("gh.json"), "{}")?;
        std::fs::write(dir.path().join("registry.json"), "{}")?;
        assert_eq!(sweep(&p), 7);
        for t in &temps {
            assert!(!t.exists(), "{} left", t.display());
        }
        assert!(secrets.join("gh.json").is_file() && p.registry().is_file());
        assert!(key.join("abc").is_dir());
        assert!(!key.join(".tmp-42-abc").exists() && !key.join("abc.damaged-7").exists());
        assert!(!p.run().join("w-1f.sock").exists() && !p.run().join("d-1f.sock").exists());
        assert!(p.run().join("kernel.lock").exists());
        Ok(())
    }

    #[test]
    fn reclaim_deletes_what_an_uninstall_or_a_disconnect_left_and_nothing_else()
    -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let p = paths(dir.path());
        let entry = |connected: bool| {
            serde_json::json!({"version": "1", "sha256": "abc", "releaseDir": "/r",
                "installedAtUnix": 0, "auth": "ready", "connected": connected})
        };
        let registry: Registry = serde_json::from_value(serde_json::json!({
            "connectors": {"kept": entry(true), "off": entry(false)}
        }))
        .map_err(std::io::Error::other)?;
        let secrets = dir.path().join("secrets");
        std::fs::create_dir_all(&secrets)?;
        for key in ["kept", "off", "gone"] {
            std::fs::create_dir_all(p.releases().join(key).join("abc/sub"))?;
            std::fs::write(
                secrets.join(format!("{key}.json")),
                format!(r#"{{"TOKEN":"{key}-value"}}"#),
            )?;
        }
        std::fs::write(secrets.join("notes.txt"), "not a secrets file")?;

        let taken = reclaim(&p, &registry);
        // An uninstalled connector's releases (half deleted, say) go; installed ones stay.
        assert!(!p.releases().join("gone").exists());
        assert!(p.releases().join("kept/abc/sub").is_dir());
        assert!(p.releases().join("off/abc/sub").is_dir());
        // Secrets stay only with a connected, installed connector; what went is returned.
        assert!(secrets.join("kept.json").is_file());
        assert!(!secrets.join("off.json").exists() && !secrets.join("gone.json").exists());
        assert!(secrets.join("notes.txt").is_file());
        assert_eq!(taken.keys().collect::<Vec<_>>(), ["gone", "off"]);
        assert_eq!(taken["gone"]["TOKEN"], "gone-value");
        Ok(())
    }
}

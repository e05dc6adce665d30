//! Content-addressed release copies: `releases/<key>/<sha256>/`.

pub(crate) mod allowlist;
pub(crate) mod manifest;
pub(crate) mod pin;

use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use tutti_rules::atomic_file;

/// Regular files of the release, sorted, relative. Symlinks and special files are refused
/// so the copy is exactly what was hashed.
fn files(root: &Path) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = root.join(&rel);
        let rd =
            std::fs::read_dir(&dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
        for entry in rd {
            let entry = entry.map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
            let ty = entry.file_type().map_err(|e| e.to_string())?;
            let child = rel.join(entry.file_name());
            if child == Path::new(LIST_NAME) {
                // The kernel's own list in a copy, never content (a copy can be a source).
                continue;
            }
            if ty.is_dir() {
                stack.push(child);
            } else if ty.is_file() {
                out.push(child);
            } else {
                return Err(format!(
                    "{}: only regular files and directories can be part of a release (symlinks are refused)",
                    child.display()
                ));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Most bytes a `connector.json` may have.
pub const MANIFEST_MAX_BYTES: u64 = 1024 * 1024;
/// Most bytes a skill's `SKILL.md` may have.
pub const SKILL_MAX_BYTES: u64 = 256 * 1024;

/// Opens a file of a release for reading without following a symbolic link in its last
/// component and without blocking (a FIFO opens at once and is then refused by its type).
#[cfg(unix)]
pub(crate) fn open_no_follow(path: &Path) -> std::io::Result<std::fs::File> {
    use nix::fcntl::OFlag;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK).bits())
        .open(path)
}

/// Windows: `FILE_FLAG_OPEN_REPARSE_POINT` opens a link (symbolic link, junction) itself, not
/// its target, so the type check on the handle refuses it (there are no FIFOs or devices at
/// ordinary file paths to block on).
#[cfg(windows)]
pub(crate) fn open_no_follow(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::windows::fs::OpenOptionsExt;
    // winbase.h; a stable value of the Win32 API.
    const FILE_FLAG_OPEN_REPARSE_POINT: u32 = 0x0020_0000;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(FILE_FLAG_OPEN_REPARSE_POINT)
        .open(path)
}

/// Elsewhere: [`read_text`]'s `symlink_metadata` check refuses a link before the open.
#[cfg(not(any(unix, windows)))]
pub(crate) fn open_no_follow(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::File::open(path)
}

/// What a path of a release is, for a refusal: `Err` unless it is a regular file (links are
/// not followed).
fn regular_file(path: &Path, meta: &std::fs::Metadata) -> Result<(), String> {
    let ty = meta.file_type();
    if ty.is_symlink() {
        Err(format!(
            "{} is a symbolic link; a release holds regular files only",
            path.display()
        ))
    } else if ty.is_file() {
        Ok(())
    } else {
        Err(format!(
            "{} is not a regular file (a directory, FIFO, socket or device); a release holds regular files only",
            path.display()
        ))
    }
}

/// `1 MiB`, `256 KiB`, `100 bytes`.
pub fn human_bytes(n: u64) -> String {
    if n >= 1024 * 1024 && n.is_multiple_of(1024 * 1024) {
        format!("{} MiB", n / (1024 * 1024))
    } else if n >= 1024 && n.is_multiple_of(1024) {
        format!("{} KiB", n / 1024)
    } else {
        format!("{n} bytes")
    }
}

/// Reads `root/rel` as UTF-8 text of at most `max` bytes, before anything is confirmed, so
/// without trusting it: no symbolic link is followed (neither the file nor a directory on
/// the way under `root`), anything but a regular file is refused before it is read (a FIFO
/// would block, `/dev/zero` never ends), and a file over `max` is refused. `Err` is one line.
pub fn read_text(root: &Path, rel: &Path, max: u64) -> Result<String, String> {
    let mut path = root.to_path_buf();
    let parts: Vec<_> = rel.components().collect();
    for (i, part) in parts.iter().enumerate() {
        path.push(part);
        let meta = std::fs::symlink_metadata(&path)
            .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
        if i + 1 == parts.len() {
            regular_file(&path, &meta)?;
        } else if !meta.file_type().is_dir() {
            return Err(format!(
                "{} is not a directory (symbolic links are not followed in a release)",
                path.display()
            ));
        }
    }
    let file =
        open_no_follow(&path).map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    regular_file(&path, &meta)?;
    let too_big = || {
        format!(
            "{} is larger than the {} limit for this file",
            path.display(),
            human_bytes(max)
        )
    };
    if meta.len() > max {
        return Err(too_big());
    }
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    if bytes.len() as u64 > max {
        return Err(too_big());
    }
    String::from_utf8(bytes).map_err(|_| format!("{} is not UTF-8 text", path.display()))
}

/// Whether a file may be run (the executable bit on Unix; Windows has none, so false there).
#[cfg(unix)]
pub(crate) fn executable(m: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    m.permissions().mode() & 0o111 != 0
}
#[cfg(not(unix))]
pub(crate) fn executable(_: &std::fs::Metadata) -> bool {
    false
}

/// SHA-256 over every file's relative path, executable bit and content.
pub fn hash_tree(root: &Path) -> Result<String, String> {
    hash_files(root, &files(root)?)
}

/// SHA-256 over the given files of `root` (sorted relative paths), as [`hash_tree`].
fn hash_files(root: &Path, list: &[PathBuf]) -> Result<String, String> {
    let mut h = Sha256::new();
    for rel in list {
        let path = root.join(rel);
        // Checked by type again as it is opened: it may have changed since it was listed.
        let mut f = open_no_follow(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let meta = f
            .metadata()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        regular_file(&path, &meta)?;
        h.update(rel.to_string_lossy().as_bytes());
        h.update([0, u8::from(executable(&meta))]);
        h.update(meta.len().to_le_bytes());
        let mut buf = [0u8; 64 * 1024];
        loop {
            let n = f
                .read(&mut buf)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
        }
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// `releases/<key>/<sha>/.tutti-release-files`: the relative paths of a release copy's own
/// files (JSON), written into the copy before it is moved into place. Files an upstream
/// creates in its release dir at run time (`__pycache__`) are not in it, so they do not
/// make an intact copy look damaged; a listed file that is gone or changed does (the list
/// is covered by the name: dropping an entry changes the hash). A file of this name at the
/// top of a source is not part of the release (neither hashed nor copied).
pub const LIST_NAME: &str = ".tutti-release-files";

fn list_path(copy: &Path) -> PathBuf {
    copy.join(LIST_NAME)
}

/// The files a copy is verified over: its list when there is one, else (a copy made before
/// lists were written) every file in it.
pub fn listed_files(copy: &Path) -> Result<Vec<PathBuf>, String> {
    match std::fs::read(list_path(copy)) {
        Ok(bytes) => serde_json::from_slice::<Vec<PathBuf>>(&bytes)
            .map_err(|e| format!("{}: {e}", list_path(copy).display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => files(copy),
        Err(e) => Err(format!("{}: {e}", list_path(copy).display())),
    }
}

/// The entries of `listed` (relative paths of a release) under the directory `dir`, relative
/// to it and `/`-separated.
pub fn files_under(listed: &[PathBuf], dir: &Path) -> Vec<String> {
    // `./skills/x` and `skills/./x` name `skills/x`.
    let dir: PathBuf = dir
        .components()
        .filter(|c| matches!(c, std::path::Component::Normal(_)))
        .collect();
    listed
        .iter()
        .filter_map(|f| f.strip_prefix(&dir).ok())
        .map(tutti_rules::release_path::slashed)
        .filter(|rel| !rel.is_empty())
        .collect()
}

/// Whether the release copy `copy` holds exactly the content its name `sha` says. `Err`
/// is one line naming the copy.
pub fn verify_copy(copy: &Path, sha: &str) -> Result<(), String> {
    let actual = listed_files(copy).and_then(|list| hash_files(copy, &list));
    match actual {
        Ok(actual) if actual == sha => Ok(()),
        Ok(actual) => Err(format!(
            "the release copy {} does not match its name: its files hash to {}, so they were changed after install",
            copy.display(),
            short(&actual)
        )),
        Err(e) => Err(format!(
            "the release copy {} is damaged: {e}",
            copy.display()
        )),
    }
}

/// The first 12 hex digits of a SHA-256, as messages show it.
pub fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

/// Copies `src` to `dest` (via a temp dir and rename), exactly the content `sha` names: the
/// copy is hashed before it is moved into place and refused (nothing kept) when it differs,
/// so a folder changed after the user confirmed `sha` installs nothing. An existing `dest`
/// that still holds `sha` is kept; a damaged one (a file edited or removed by hand) is
/// replaced, so installing again repairs it.
pub fn copy_release(src: &Path, dest: &Path, sha: &str) -> Result<(), String> {
    if dest.is_dir() {
        if verify_copy(dest, sha).is_ok() {
            write_list_if_missing(dest);
            return Ok(());
        }
        // Moved aside rather than deleted first: a worker may have its cwd in it.
        let aside = dest.with_extension(format!("damaged-{}", std::process::id()));
        std::fs::rename(dest, &aside).map_err(|e| format!("{}: {e}", dest.display()))?;
        let copied = copy_release(src, dest, sha);
        let _ = std::fs::remove_dir_all(&aside);
        return copied;
    }
    let parent = dest.parent().ok_or("release path has no parent")?;
    let new_parent = !parent.exists();
    std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    let tmp = parent.join(format!(
        ".tmp-{}-{}",
        std::process::id(),
        dest.file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default()
    ));
    let _ = std::fs::remove_dir_all(&tmp);
    let files = files(src)?;
    // Moved into place whole, the directory synced: a crash leaves the release or nothing.
    let copied = atomic_file::replace_with(dest, &tmp, |tmp| {
        copy_files(src, &files, tmp)?;
        match hash_files(tmp, &files) {
            Ok(copied) if copied == sha => write_list(tmp, &files).map_err(CopyError::Io),
            Ok(copied) => Err(CopyError::Changed(copied)),
            Err(e) => Err(CopyError::Changed(e)),
        }
    });
    match copied {
        Ok(()) => Ok(()),
        Err(e) => {
            if new_parent {
                let _ = std::fs::remove_dir(parent);
            }
            Err(match e {
                CopyError::Io(e) => format!("{}: {e}", dest.display()),
                CopyError::Changed(now) => changed_after_confirmation(src, sha, &now),
            })
        }
    }
}

/// Why a copy was refused: an I/O error, or content that is not the confirmed release.
enum CopyError {
    Io(std::io::Error),
    Changed(String),
}

impl From<std::io::Error> for CopyError {
    fn from(e: std::io::Error) -> Self {
        CopyError::Io(e)
    }
}

/// The refusal when the folder does not hold what the user confirmed (`now` is the hash it
/// holds now, or why it cannot be read).
pub fn changed_after_confirmation(src: &Path, confirmed: &str, now: &str) -> String {
    let now = if now.len() == 64 && now.bytes().all(|b| b.is_ascii_hexdigit()) {
        format!("it now hashes to {}", short(now))
    } else {
        format!("it cannot be read as confirmed: {now}")
    };
    format!(
        "{}: the folder changed after confirmation (confirmed release sha256 {}, {now}); nothing was installed. Run `tutti connector install` again to review and confirm what it holds now",
        src.display(),
        short(confirmed)
    )
}

fn write_list(copy: &Path, files: &[PathBuf]) -> std::io::Result<()> {
    let json = serde_json::to_vec(files).map_err(std::io::Error::other)?;
    atomic_file::write(&list_path(copy), &json, None)
}

/// A copy made before lists were written (verified over all its files) gets its list; if
/// it cannot be written the copy stays verified over all its files.
fn write_list_if_missing(copy: &Path) {
    if list_path(copy).exists() {
        return;
    }
    if let Err(e) = files(copy).and_then(|list| {
        write_list(copy, &list).map_err(|e| format!("{}: {e}", list_path(copy).display()))
    }) {
        tracing::warn!("cannot list the release copy's files: {e}");
    }
}

/// Copies `files` (relative paths) from `src` into a new directory `tmp`.
fn copy_files(src: &Path, files: &[PathBuf], tmp: &Path) -> std::io::Result<()> {
    let err =
        |what: &Path, e: std::io::Error| std::io::Error::other(format!("{}: {e}", what.display()));
    for rel in files {
        let to = tmp.join(rel);
        if let Some(p) = to.parent() {
            std::fs::create_dir_all(p).map_err(|e| err(p, e))?;
        }
        std::fs::copy(src.join(rel), &to)
            .map_err(|e| std::io::Error::other(format!("copying {}: {e}", rel.display())))?;
        // `copy` takes the source's mode as it is; an immutable release is writable by its
        // owner at most.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&to)
                .map_err(|e| err(&to, e))?
                .permissions()
                .mode();
            if mode & 0o022 != 0 {
                std::fs::set_permissions(&to, std::fs::Permissions::from_mode(mode & !0o022))
                    .map_err(|e| err(&to, e))?;
            }
        }
    }
    std::fs::create_dir_all(tmp).map_err(|e| err(tmp, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_content_addressed_and_copy_is_faithful() {
        let base = std::env::temp_dir().join(format!("tutti-release-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let src = base.join("src");
        std::fs::create_dir_all(src.join("sub")).expect("mkdir");
        std::fs::write(src.join("connector.json"), "{}").expect("w");
        std::fs::write(src.join("sub/a.txt"), "hello").expect("w");
        let h1 = hash_tree(&src).expect("hash");
        assert_eq!(h1.len(), 64);
        let dest = base.join("releases/k").join(&h1);
        copy_release(&src, &dest, &h1).expect("copy");
        verify_copy(&dest, &h1).expect("the copy holds what was hashed");
        assert_eq!(hash_tree(&dest).expect("hash"), h1);
        std::fs::write(src.join("sub/a.txt"), "hellO").expect("w");
        assert_ne!(hash_tree(&src).expect("hash"), h1);
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn installing_again_repairs_a_damaged_copy() {
        let base =
            std::env::temp_dir().join(format!("tutti-release-repair-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let src = base.join("src");
        std::fs::create_dir_all(src.join("skills/s")).expect("mkdir");
        std::fs::write(src.join("connector.json"), "{}").expect("w");
        std::fs::write(src.join("skills/s/SKILL.md"), "---\nname: s\n---\n").expect("w");
        let sha = hash_tree(&src).expect("hash");
        let dest = base.join("releases/k").join(&sha);
        copy_release(&src, &dest, &sha).expect("copy");
        verify_copy(&dest, &sha).expect("a fresh copy verifies");
        // A file created at run time is not damage; a removed or edited one is.
        std::fs::write(dest.join("cache.pyc"), "x").expect("w");
        verify_copy(&dest, &sha).expect("a file made at run time is not damage");
        copy_release(&src, &dest, &sha).expect("copy again");
        assert!(
            dest.join("cache.pyc").exists(),
            "an intact copy is kept as it is"
        );
        std::fs::remove_file(dest.join("skills/s/SKILL.md")).expect("rm");
        let e = verify_copy(&dest, &sha).expect_err("a removed file is damage");
        assert!(e.contains(&dest.display().to_string()), "{e}");
        copy_release(&src, &dest, &sha).expect("repair");
        assert!(dest.join("skills/s/SKILL.md").is_file());
        std::fs::write(dest.join("connector.json"), "{\"edited\":1}").expect("w");
        let e = verify_copy(&dest, &sha).expect_err("an edited file is damage");
        assert!(e.contains("does not match its name"), "{e}");
        copy_release(&src, &dest, &sha).expect("repair");
        assert_eq!(
            std::fs::read_to_string(dest.join("connector.json")).expect("r"),
            "{}"
        );
        verify_copy(&dest, &sha).expect("repaired");
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn a_copy_of_other_content_than_confirmed_is_refused_and_nothing_is_kept() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let src = tmp.path().join("src");
        std::fs::create_dir_all(&src).expect("mkdir");
        std::fs::write(src.join("connector.json"), "{}").expect("w");
        let confirmed = hash_tree(&src).expect("hash");
        std::fs::write(src.join("connector.json"), "{\"changed\":1}").expect("w");
        let dest = tmp.path().join("releases/k").join(&confirmed);
        let e = copy_release(&src, &dest, &confirmed).expect_err("must be refused");
        assert!(e.contains("changed after confirmation"), "{e}");
        assert!(e.contains(short(&confirmed)), "{e}");
        assert!(
            !tmp.path().join("releases/k").exists(),
            "nothing is written: {e}"
        );
        // A copy is a valid source: its list is not content.
        std::fs::write(src.join("connector.json"), "{}").expect("w");
        std::fs::write(src.join(LIST_NAME), "[]").expect("w");
        assert_eq!(hash_tree(&src).expect("hash"), confirmed);
    }

    #[cfg(unix)]
    #[test]
    fn release_text_is_read_without_links_by_type_and_capped() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        std::fs::create_dir_all(root.join("skills/real")).expect("mkdir");
        std::fs::write(root.join("skills/real/SKILL.md"), "hello").expect("w");
        std::fs::write(root.join("big"), vec![b'x'; 2048]).expect("w");
        std::os::unix::fs::symlink("/dev/zero", root.join("zero")).expect("ln");
        std::os::unix::fs::symlink(root.join("skills/real"), root.join("skills/linked"))
            .expect("ln");
        nix::unistd::mkfifo(
            &root.join("fifo"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .expect("mkfifo");
        let read = |rel: &str, max| read_text(root, Path::new(rel), max);
        assert_eq!(read("skills/real/SKILL.md", 1024).as_deref(), Ok("hello"));
        for (rel, needle) in [
            ("zero", "symbolic link"),
            ("skills/linked/SKILL.md", "not a directory"),
            ("fifo", "not a regular file"),
            ("skills", "not a regular file"),
            ("big", "larger than the 1 KiB limit"),
            ("missing", "cannot read"),
        ] {
            let e = read(rel, 1024).expect_err(rel);
            assert!(e.contains(needle), "{rel}: {e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
        assert_eq!(human_bytes(MANIFEST_MAX_BYTES), "1 MiB");
        assert_eq!(human_bytes(SKILL_MAX_BYTES), "256 KiB");
        assert_eq!(human_bytes(1000), "1000 bytes");
    }

    #[cfg(unix)]
    #[test]
    fn copies_are_never_group_or_world_writable() {
        use std::os::unix::fs::PermissionsExt;
        let base = std::env::temp_dir().join(format!("tutti-release-mode-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let src = base.join("src");
        std::fs::create_dir_all(&src).expect("mkdir");
        for (name, mode) in [("run.sh", 0o777), ("data.txt", 0o666), ("own.txt", 0o600)] {
            std::fs::write(src.join(name), "x").expect("w");
            std::fs::set_permissions(src.join(name), std::fs::Permissions::from_mode(mode))
                .expect("chmod");
        }
        let dest = base.join("copy");
        let sha = hash_tree(&src).expect("hash");
        copy_release(&src, &dest, &sha).expect("copy");
        let mode = |name: &str| {
            std::fs::metadata(dest.join(name))
                .expect("stat")
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode("run.sh"), 0o755);
        assert_eq!(mode("data.txt"), 0o644);
        assert_eq!(mode("own.txt"), 0o600);
        let _ = std::fs::remove_dir_all(&base);
    }
}

//! Hands a URL that holds a secret (the console's one-time login, an OAuth login's `state`)
//! to the person's browser without putting it on any command line, where every local user
//! could read it (`/proc/<pid>/cmdline`).
//!
//! The URL goes into a small HTML page (a meta refresh and a link, the URL HTML-escaped) in a
//! new owner-only file (0600 on Unix) under `<state>/run/open/` (0700), and the platform's
//! opener (`xdg-open`, `open`, `rundll32 url.dll,FileProtocolHandler`; started directly, no
//! shell, never waited for) gets the file's path. The page is removed when the caller says it
//! served its purpose (drops the [`Opened`]), after [`KEEP_FOR`] at the latest, and when the
//! command ends; a page left by a killed command is removed by the next one after that time.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

/// How long a page is kept when nothing says it was used: time for a browser to start.
const KEEP_FOR: Duration = Duration::from_secs(60);

/// A page handed to the browser. Dropping it removes the page.
pub(crate) struct Opened {
    _served: tokio::sync::oneshot::Sender<()>,
}

/// Writes the page for `url` and starts the platform's opener on it. `Err` holds why not
/// (one line, never the URL); the page is then already removed.
pub(crate) fn open(state_dir: &Path, url: &str) -> Result<Opened, String> {
    if !is_web_url(url) {
        return Err("the login URL is not an http(s) URL".to_owned());
    }
    let dir = page_dir(state_dir);
    create_private_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    remove_stale(&dir);
    let page = Page::write(&dir, url)?;
    start_opener(&page.0)?;
    Ok(remove_later(page, KEEP_FOR))
}

/// Removes `page` when the [`Opened`] returned is dropped or after `bound`, whichever comes
/// first (and with the runtime, at the command's end).
fn remove_later(page: Page, bound: Duration) -> Opened {
    let (served, used) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _page = page;
        tokio::select! {
            _ = used => {}
            _ = tokio::time::sleep(bound) => {}
        }
    });
    Opened { _served: served }
}

/// `<state>/run/open`.
fn page_dir(state_dir: &Path) -> PathBuf {
    tutti_rules::state_dir::layout::run(state_dir).join("open")
}

/// Only `http://` and `https://` URLs are handed on (a page that redirects elsewhere, e.g. to
/// `javascript:`, would run in the page's `file://` origin).
fn is_web_url(url: &str) -> bool {
    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    (lower.starts_with("http://") || lower.starts_with("https://"))
        && !url.chars().any(|c| c.is_control() || c.is_whitespace())
}

/// The platform's opener and its arguments before the page's path.
fn opener() -> (&'static str, &'static [&'static str]) {
    if cfg!(target_os = "macos") {
        ("open", &[])
    } else if cfg!(windows) {
        // The URL protocol handler, without `cmd /c start` (a shell).
        ("rundll32", &["url.dll,FileProtocolHandler"])
    } else {
        ("xdg-open", &[])
    }
}

fn start_opener(page: &Path) -> Result<(), String> {
    let (program, args) = opener();
    let mut child = Command::new(program)
        .args(args)
        .arg(page)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {program}: {e}"))?;
    // Reaped off the main thread; the browser it starts lives on.
    std::thread::spawn(move || child.wait());
    Ok(())
}

/// The page's file; dropping it removes the file.
struct Page(PathBuf);

impl Page {
    fn write(dir: &Path, url: &str) -> Result<Page, String> {
        let mut random = [0u8; 16];
        getrandom::fill(&mut random).map_err(|e| format!("no randomness: {e}"))?;
        let name: String = random.iter().map(|b| format!("{b:02x}")).collect();
        let page = Page(dir.join(format!("{name}.html")));
        let failed = |e: std::io::Error| format!("cannot write {}: {e}", page.0.display());
        let mut file =
            tutti_rules::atomic_file::create_new(&page.0, Some(0o600)).map_err(failed)?;
        std::io::Write::write_all(&mut file, redirect_page(url).as_bytes()).map_err(failed)?;
        Ok(page)
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The page: a meta refresh to `url` and the same URL as a link, for a browser that does not
/// follow the refresh (maud escapes both).
fn redirect_page(url: &str) -> String {
    maud::html! {
        (maud::DOCTYPE)
        html {
            head {
                meta charset="utf-8";
                meta name="referrer" content="no-referrer";
                meta http-equiv="refresh" content=(format!("0;url={url}"));
                title { "tutti" }
            }
            body { p { a href=(url) { "Continue" } " (opened by tutti)" } }
        }
    }
    .into_string()
}

/// Creates `dir` owner-only (0700 on Unix, whatever exists there already; a link is refused).
/// On Windows it inherits the state directory's ACL (the user's profile).
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        if !std::fs::symlink_metadata(dir)?.is_dir() {
            return Err(std::io::Error::other("not a directory"));
        }
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
    }
    #[cfg(not(unix))]
    std::fs::create_dir_all(dir)
}

/// Removes pages older than [`KEEP_FOR`]: left by a command that was killed.
fn remove_stale(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let now = SystemTime::now();
    for entry in entries.filter_map(Result::ok) {
        let age = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| now.duration_since(t).ok());
        let is_page = entry.path().extension().is_some_and(|e| e == "html");
        if is_page && age.is_some_and(|age| age > KEEP_FOR) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::TempDir;

    #[test]
    fn the_page_escapes_the_url_and_only_web_urls_pass() {
        let page = redirect_page("http://127.0.0.1:1/login?token=a&b=\"c\"<x>'y'");
        let escaped = "http://127.0.0.1:1/login?token=a&amp;b=&quot;c&quot;&lt;x&gt;'y'";
        assert!(
            page.contains(&format!("content=\"0;url={escaped}\"")),
            "{page}"
        );
        assert!(page.contains(&format!("<a href=\"{escaped}\">")), "{page}");
        assert!(!page.contains("<x>"), "{page}");
        assert!(is_web_url("https://as.example/authorize?state=s"));
        assert!(is_web_url("HTTP://127.0.0.1:9/login?token=t"));
        assert!(!is_web_url("javascript:alert(1)"));
        assert!(!is_web_url("file:///etc/passwd"));
        assert!(!is_web_url("http://a.example/\nb"));
        assert!(!is_web_url("http"));
    }

    #[test]
    fn the_page_is_private_and_removed_when_dropped() {
        let state = TempDir::new("handoff");
        let dir = page_dir(state.path());
        create_private_dir(&dir).unwrap_or_else(|e| panic!("{e}"));
        let page = Page::write(&dir, "http://127.0.0.1:1/login?token=t").unwrap_or_else(|e| {
            panic!("{e}");
        });
        let text = std::fs::read_to_string(&page.0).unwrap_or_default();
        assert!(
            text.contains("url=http://127.0.0.1:1/login?token=t"),
            "{text}"
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = |p: &Path| {
                std::fs::metadata(p)
                    .map(|m| m.permissions().mode() & 0o777)
                    .ok()
            };
            assert_eq!(mode(&page.0), Some(0o600));
            assert_eq!(mode(&dir), Some(0o700));
        }
        let path = page.0.clone();
        drop(page);
        assert!(!path.exists(), "the page is removed");
    }

    #[tokio::test]
    async fn a_page_goes_when_used_or_after_its_bound() {
        let state = TempDir::new("handofftimed");
        let dir = page_dir(state.path());
        create_private_dir(&dir).unwrap_or_else(|e| panic!("{e}"));
        let url = "http://127.0.0.1:1/login?token=t";
        let write = || Page::write(&dir, url).unwrap_or_else(|e| panic!("{e}"));
        let (used, unused) = (write(), write());
        let (used_path, unused_path) = (used.0.clone(), unused.0.clone());
        let used = remove_later(used, Duration::from_secs(60));
        let _unused = remove_later(unused, Duration::from_millis(100));
        drop(used);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!used_path.exists(), "a used page was kept");
        assert!(unused_path.exists(), "a page went before its bound");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!unused_path.exists(), "a page outlived its bound");
    }

    #[test]
    fn pages_older_than_the_bound_are_removed_by_the_next_command() {
        let state = TempDir::new("handoffstale");
        let dir = page_dir(state.path());
        create_private_dir(&dir).unwrap_or_else(|e| panic!("{e}"));
        let url = "http://127.0.0.1:1/login?token=t";
        let fresh = Page::write(&dir, url).unwrap_or_else(|e| panic!("{e}"));
        let left = Page::write(&dir, url).unwrap_or_else(|e| panic!("{e}"));
        let long_ago = SystemTime::now() - KEEP_FOR * 2;
        std::fs::File::options()
            .write(true)
            .open(&left.0)
            .and_then(|f| f.set_modified(long_ago))
            .unwrap_or_else(|e| panic!("{e}"));
        remove_stale(&dir);
        assert!(fresh.0.exists(), "a page still in use was removed");
        assert!(!left.0.exists(), "a stale page was kept");
    }

    #[cfg(unix)]
    #[test]
    fn an_open_directory_is_closed_and_a_link_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let state = TempDir::new("handoffmode");
        let dir = page_dir(state.path());
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
            .unwrap_or_else(|e| panic!("{e}"));
        create_private_dir(&dir).unwrap_or_else(|e| panic!("{e}"));
        let mode = std::fs::metadata(&dir).map(|m| m.permissions().mode() & 0o777);
        assert_eq!(mode.ok(), Some(0o700));
        let other = TempDir::new("handoffother");
        let linked = state.path().join("linked");
        std::os::unix::fs::symlink(other.path(), &linked).unwrap_or_else(|e| panic!("{e}"));
        assert!(create_private_dir(&linked).is_err());
    }
}

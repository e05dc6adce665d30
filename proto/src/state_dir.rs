//! Where a runtime lives when no `--state-dir` is given (SPEC §2): `TUTTI_STATE_DIR`, else
//! Linux `$XDG_STATE_HOME/tutti` (`~/.local/state/tutti`), macOS
//! `~/Library/Application Support/tutti`, Windows `%LOCALAPPDATA%\tutti`. Every binary resolves
//! it here, so they all agree on the sockets they meet at.

use std::ffi::OsString;
use std::path::PathBuf;

/// `TUTTI_STATE_DIR`, else the platform default, from the process environment.
pub fn from_env() -> Option<PathBuf> {
    resolve(|name| std::env::var_os(name))
}

/// The same with the environment injected (pure).
pub fn resolve(env: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let var = |name: &str| env(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = var("TUTTI_STATE_DIR") {
        return Some(dir);
    }
    if cfg!(windows) {
        var("LOCALAPPDATA").map(|d| d.join("tutti"))
    } else if cfg!(target_os = "macos") {
        var("HOME").map(|h| h.join("Library").join("Application Support").join("tutti"))
    } else {
        // The XDG spec says relative values are invalid and must be ignored.
        var("XDG_STATE_HOME")
            .filter(|d| d.is_absolute())
            .map(|d| d.join("tutti"))
            .or_else(|| var("HOME").map(|h| h.join(".local").join("state").join("tutti")))
    }
}

#[cfg(all(test, unix, not(target_os = "macos")))]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn precedence() {
        assert_eq!(
            resolve(env(&[("TUTTI_STATE_DIR", "/s"), ("HOME", "/h")])),
            Some("/s".into())
        );
        assert_eq!(
            resolve(env(&[("XDG_STATE_HOME", "/x"), ("HOME", "/h")])),
            Some("/x/tutti".into())
        );
        assert_eq!(
            resolve(env(&[("XDG_STATE_HOME", "rel"), ("HOME", "/h")])),
            Some("/h/.local/state/tutti".into())
        );
        assert_eq!(
            resolve(env(&[("TUTTI_STATE_DIR", ""), ("HOME", "/h")])),
            Some("/h/.local/state/tutti".into())
        );
        assert_eq!(resolve(env(&[])), None);
    }
}

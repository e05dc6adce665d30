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

/// The state directory's layout (SPEC §2), named once for every process.
pub mod layout {
    use std::path::{Path, PathBuf};

    /// `run/`: sockets, the kernel lock, `frontend.json` (owner-only).
    pub fn run(state: &Path) -> PathBuf {
        state.join("run")
    }
    /// `logs/`: the kernel's, the connectors' and the audit log (owner-only).
    pub fn logs(state: &Path) -> PathBuf {
        state.join("logs")
    }
    /// `secrets/`: the only place secrets are stored (owner-only).
    pub fn secrets(state: &Path) -> PathBuf {
        state.join("secrets")
    }
    /// `bin/`: the connectors' shims.
    pub fn bin(state: &Path) -> PathBuf {
        state.join("bin")
    }
    /// `releases/`: the installed releases, one directory each.
    pub fn releases(state: &Path) -> PathBuf {
        state.join("releases")
    }
    /// `skills/`: the stable skills root the shim manager keeps.
    pub fn skills(state: &Path) -> PathBuf {
        state.join("skills")
    }
    /// `registry.json`: what is installed.
    pub fn registry(state: &Path) -> PathBuf {
        state.join("registry.json")
    }
    /// `run/kernel.lock`: held by the running kernel.
    pub fn kernel_lock(state: &Path) -> PathBuf {
        run(state).join("kernel.lock")
    }
    /// `run/frontend.json`: where the frontend listens.
    pub fn frontend_json(state: &Path) -> PathBuf {
        run(state).join("frontend.json")
    }
    /// `logs/kernel.log`.
    pub fn kernel_log(state: &Path) -> PathBuf {
        logs(state).join("kernel.log")
    }
    /// `logs/audit.jsonl`.
    pub fn audit_log(state: &Path) -> PathBuf {
        logs(state).join("audit.jsonl")
    }
    /// `logs/connector-<key>.log`.
    pub fn connector_log(state: &Path, key: &str) -> PathBuf {
        logs(state).join(format!("connector-{key}.log"))
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

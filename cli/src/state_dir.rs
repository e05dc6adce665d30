//! Which state directory a command works on: `--state-dir`, else `TUTTI_STATE_DIR`, else the
//! platform default (SPEC §2). The result is made absolute against the caller's cwd, so the
//! kernel and every other process see the same path.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::error::CliError;

/// Resolves the state directory from the flag and the real process environment.
pub(crate) fn resolve(flag: Option<&Path>) -> Result<PathBuf, CliError> {
    let dir = pick(flag, |name| std::env::var_os(name))?;
    std::path::absolute(&dir).map_err(|e| CliError::NoStateDir {
        reason: format!("cannot make {} absolute: {e}", dir.display()),
    })
}

/// The choice itself, with the environment injected (pure, unit-tested).
fn pick(flag: Option<&Path>, env: impl Fn(&str) -> Option<OsString>) -> Result<PathBuf, CliError> {
    if let Some(dir) = flag {
        if dir.as_os_str().is_empty() {
            return Err(CliError::EmptyArgument {
                what: "--state-dir",
            });
        }
        return Ok(dir.to_path_buf());
    }
    // The same rule every other binary uses (tutti_rules::state_dir), so they all meet.
    tutti_rules::state_dir::resolve(env).ok_or_else(|| CliError::NoStateDir {
        reason: NO_DEFAULT.to_owned(),
    })
}

/// Why there is no platform default.
#[cfg(all(unix, not(target_os = "macos")))]
const NO_DEFAULT: &str = "neither XDG_STATE_HOME nor HOME is set";
#[cfg(target_os = "macos")]
const NO_DEFAULT: &str = "HOME is not set";
#[cfg(windows)]
const NO_DEFAULT: &str = "LOCALAPPDATA is not set";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::env_of;

    #[test]
    fn flag_wins_over_env() {
        let env = env_of(&[("TUTTI_STATE_DIR", "/from/env")]);
        let got = pick(Some(Path::new("/from/flag")), env).ok();
        assert_eq!(got, Some(PathBuf::from("/from/flag")));
    }

    #[test]
    fn empty_flag_is_an_error() {
        let got = pick(Some(Path::new("")), env_of(&[]));
        assert!(matches!(got, Err(CliError::EmptyArgument { .. })));
    }

    #[test]
    fn env_wins_over_default_and_empty_env_is_ignored() {
        let env = env_of(&[("TUTTI_STATE_DIR", "/from/env"), ("HOME", "/home/u")]);
        assert_eq!(pick(None, env).ok(), Some(PathBuf::from("/from/env")));
        let env = env_of(&[("TUTTI_STATE_DIR", ""), ("HOME", "/home/u")]);
        assert_ne!(pick(None, env).ok(), Some(PathBuf::from("")));
    }

    #[cfg(all(unix, not(target_os = "macos")))]
    #[test]
    fn linux_default_uses_xdg_state_home_then_home() {
        let env = env_of(&[("XDG_STATE_HOME", "/x/state"), ("HOME", "/home/u")]);
        assert_eq!(pick(None, env).ok(), Some(PathBuf::from("/x/state/tutti")));
        let env = env_of(&[("XDG_STATE_HOME", "relative"), ("HOME", "/home/u")]);
        assert_eq!(
            pick(None, env).ok(),
            Some(PathBuf::from("/home/u/.local/state/tutti"))
        );
        let env = env_of(&[("HOME", "/home/u")]);
        assert_eq!(
            pick(None, env).ok(),
            Some(PathBuf::from("/home/u/.local/state/tutti"))
        );
        assert!(matches!(
            pick(None, env_of(&[])),
            Err(CliError::NoStateDir { .. })
        ));
    }
}

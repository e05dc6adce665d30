//! The state directory layout (SPEC §2).

use std::path::{Path, PathBuf};

#[derive(Clone, Debug)]
pub struct Paths {
    pub state: PathBuf,
    pub libexec: PathBuf,
}

impl Paths {
    pub fn registry(&self) -> PathBuf {
        self.state.join("registry.json")
    }
    pub fn releases(&self) -> PathBuf {
        self.state.join("releases")
    }
    pub fn bin(&self) -> PathBuf {
        self.state.join("bin")
    }
    pub fn run(&self) -> PathBuf {
        self.state.join("run")
    }
    pub fn logs(&self) -> PathBuf {
        self.state.join("logs")
    }
    pub fn frontend_json(&self) -> PathBuf {
        self.run().join("frontend.json")
    }
    pub fn connector_log(&self, key: &str) -> PathBuf {
        self.logs().join(format!("connector-{key}.log"))
    }
    pub fn sibling(&self, name: &str) -> PathBuf {
        self.libexec
            .join(format!("{name}{}", std::env::consts::EXE_SUFFIX))
    }
}

/// The platform default: `$XDG_STATE_HOME/tutti` (`~/.local/state/tutti`), macOS
/// `~/Library/Application Support/tutti`, Windows `%LOCALAPPDATA%\tutti`.
pub fn default_state_dir() -> Option<PathBuf> {
    if cfg!(windows) {
        return std::env::var_os("LOCALAPPDATA").map(|d| PathBuf::from(d).join("tutti"));
    }
    let home = std::env::var_os("HOME").map(PathBuf::from);
    if cfg!(target_os = "macos") {
        return home.map(|h| h.join("Library/Application Support/tutti"));
    }
    match std::env::var_os("XDG_STATE_HOME") {
        Some(x) if !x.is_empty() => Some(PathBuf::from(x).join("tutti")),
        _ => home.map(|h| h.join(".local/state/tutti")),
    }
}

/// Directory of the running executable, or `TUTTI_LIBEXEC_DIR`.
pub fn libexec_dir() -> std::io::Result<PathBuf> {
    if let Some(d) = std::env::var_os("TUTTI_LIBEXEC_DIR") {
        return Ok(PathBuf::from(d));
    }
    let exe = std::env::current_exe()?;
    Ok(exe.parent().map(Path::to_path_buf).unwrap_or_default())
}

pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

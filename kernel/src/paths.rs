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

/// `TUTTI_STATE_DIR`, else the platform default (shared by every binary).
pub fn default_state_dir() -> Option<PathBuf> {
    tutti_proto::state_dir::from_env()
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

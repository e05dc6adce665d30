//! The state directory layout (SPEC §2).

use std::path::{Path, PathBuf};

use tutti_rules::sibling;

#[derive(Clone, Debug)]
pub struct Paths {
    pub state: PathBuf,
    pub libexec: PathBuf,
}

impl Paths {
    pub fn registry(&self) -> PathBuf {
        tutti_rules::state_dir::layout::registry(&self.state)
    }
    pub fn releases(&self) -> PathBuf {
        tutti_rules::state_dir::layout::releases(&self.state)
    }
    pub fn bin(&self) -> PathBuf {
        tutti_rules::state_dir::layout::bin(&self.state)
    }
    /// The stable skills root the shim manager maintains (`<state>/skills/<skill name>/`).
    pub fn skills(&self) -> PathBuf {
        tutti_rules::state_dir::layout::skills(&self.state)
    }
    pub fn run(&self) -> PathBuf {
        tutti_rules::state_dir::layout::run(&self.state)
    }
    pub fn logs(&self) -> PathBuf {
        tutti_rules::state_dir::layout::logs(&self.state)
    }
    pub fn frontend_json(&self) -> PathBuf {
        tutti_rules::state_dir::layout::frontend_json(&self.state)
    }
    /// The port the frontend last listened on (kept across `tutti up` restarts).
    pub fn frontend_port(&self) -> PathBuf {
        self.run().join("frontend.port")
    }
    pub fn connector_log(&self, key: &str) -> PathBuf {
        tutti_rules::state_dir::layout::connector_log(&self.state, key)
    }
    pub fn sibling(&self, name: &str) -> PathBuf {
        self.libexec.join(sibling::file_name(name))
    }
}

/// `TUTTI_STATE_DIR`, else the platform default (shared by every binary).
pub fn default_state_dir() -> Option<PathBuf> {
    tutti_rules::state_dir::from_env()
}

/// The binaries the kernel starts; they must sit in one directory.
pub const SIBLINGS: [&str; 4] = [
    "tutti-mcp-frontend",
    "tutti-shim-manager",
    "tutti-upstream-worker",
    "tutti-shim",
];

/// The directory of the runtime's binaries, by the rule every binary shares
/// ([`sibling::Libexec`]: `TUTTI_LIBEXEC_DIR` if set, else next to this executable, then next
/// to the file it links to): the first that holds every one of [`SIBLINGS`].
pub fn libexec_dir() -> std::io::Result<PathBuf> {
    sibling::Libexec::from_env()
        .dir_holding(&SIBLINGS)
        .ok_or_else(|| std::io::Error::other("the path of the running executable is unknown"))
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

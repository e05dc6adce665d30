//! `tutti-shim-manager` and the `tutti-shim` launcher (SPEC §8).
//!
//! The manager follows the kernel's route table (`WatchRoutes`) and keeps
//! `<state>/bin/tutti-connector-<key>` in sync with it: a shim exists exactly while its
//! connector has a cli interface and a live generation, and it is removed only on behalf of
//! the generation that published it or a later one. Each shim runs `tutti-shim`, which asks
//! the kernel (`ResolveShim`) for the live release and runs its entrypoint.
#![forbid(unsafe_code)]

mod error;
mod launcher;
mod manager;
mod publish;
mod shimfile;
mod skills_root;
mod table;

use std::path::PathBuf;

use tutti_rules::sibling::Libexec;

pub use error::Error;
pub use launcher::shim_main;

/// Configuration of the shim manager.
#[derive(Clone, Debug)]
pub struct Config {
    /// The runtime's state directory (`--state-dir`); shims go to `<state_dir>/bin`.
    pub state_dir: PathBuf,
    /// Where the `tutti-shim` launcher lives (`TUTTI_LIBEXEC_DIR`); `None` means next to the
    /// current executable, then next to the file it links to (`tutti_rules::sibling`).
    pub libexec_dir: Option<PathBuf>,
}

/// Runs the shim manager until the kernel announces shutdown or SIGTERM/SIGINT (Ctrl-C on
/// Windows) arrives (`Ok`), or the kernel stays unreachable for 5 s, at start or after its
/// stream ended (`Err`). Each way out first removes every shim in `bin/`: without a runtime
/// no connector has a live generation (SPEC §8).
pub async fn run(config: Config) -> Result<(), Error> {
    let state_dir = std::path::absolute(&config.state_dir).map_err(|source| Error::StateDir {
        path: config.state_dir.clone(),
        source,
    })?;
    // The rule every binary shares: the configured directory only, else next to this
    // executable, then next to the file it links to.
    let launcher = Libexec::new(
        config.libexec_dir.map(PathBuf::into_os_string),
        std::env::current_exe().ok(),
    )
    .locate("tutti-shim")
    .map_err(|path| Error::LauncherMissing { path })?;
    let launcher = std::path::absolute(&launcher).map_err(|source| Error::LauncherPath {
        path: launcher.clone(),
        source,
    })?;
    let bin_dir = tutti_rules::state_dir::layout::bin(&state_dir);
    tracing::info!(bin = %bin_dir.display(), launcher = %launcher.display(), "shim manager starting");
    let publisher = publish::Publisher::new(bin_dir, launcher, &state_dir)?;
    let endpoint = tutti_proto::transport::kernel_endpoint(&state_dir);
    let skills = skills_root::SkillsRoot::new(tutti_rules::state_dir::layout::skills(&state_dir));
    manager::Manager::new(endpoint, publisher, skills)
        .run()
        .await
}

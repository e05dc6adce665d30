use std::io;
use std::path::PathBuf;

/// Errors of the shim manager and of the `tutti-shim` launcher.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot resolve the state directory {path}: {source}")]
    StateDir { path: PathBuf, source: io::Error },
    #[error("cannot resolve the launcher path {path}: {source}")]
    LauncherPath { path: PathBuf, source: io::Error },
    #[error("the tutti-shim launcher is missing at {path} (set TUTTI_LIBEXEC_DIR?)")]
    LauncherMissing { path: PathBuf },
    #[error("cannot create the bin directory {path}: {source}")]
    BinDir { path: PathBuf, source: io::Error },
    #[error("cannot list the bin directory {path}: {source}")]
    ListBin { path: PathBuf, source: io::Error },
    #[error("cannot publish {path}: {source}")]
    Publish { path: PathBuf, source: io::Error },
    #[error("cannot remove {path}: {source}")]
    Remove { path: PathBuf, source: io::Error },
    #[error("the path {path} cannot be written into a shim on this platform")]
    UnrepresentablePath { path: PathBuf },
    #[error("the kernel at {endpoint} stayed unreachable for {waited_ms} ms: {last_error}")]
    KernelUnreachable {
        endpoint: String,
        waited_ms: u64,
        last_error: String,
    },
    #[error(
        "not started through a tutti-connector shim (no shim argument, and no sidecar next to {exe}); run tutti-connector-<key> from the runtime's bin directory instead"
    )]
    NotAShim { exe: String },
    #[error(
        "cannot read the shim sidecar {path}: {source}; restart the runtime (tutti up) so the shim manager rewrites it"
    )]
    SidecarRead { path: PathBuf, source: io::Error },
    #[error(
        "malformed shim sidecar {path}; restart the runtime (tutti up) so the shim manager rewrites it"
    )]
    SidecarMalformed { path: PathBuf },
    #[error(
        "the shim sidecar {path} names connector {found}, not {expected}; restart the runtime (tutti up) so the shim manager rewrites it"
    )]
    SidecarMismatch {
        path: PathBuf,
        expected: String,
        found: String,
    },
}

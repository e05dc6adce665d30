use std::path::PathBuf;

/// Everything that can go wrong inside the kernel, with the context a user needs.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("registry {path}: {detail}")]
    Registry { path: PathBuf, detail: String },
    #[error(
        "another tutti-kernel is already running for state dir {state_dir} (pid {pid}); stop it first or use another --state-dir"
    )]
    AlreadyRunning { state_dir: PathBuf, pid: String },
    #[error(transparent)]
    Transport(#[from] tutti_proto::transport::TransportError),
    #[error("gRPC server: {0}")]
    Serve(#[from] tutti_proto::tonic::transport::Error),
    #[error("{0}")]
    Refused(String),
    #[error(
        "cannot find {} (the runtime's binaries are installed side by side); install it next to tutti-kernel or set TUTTI_LIBEXEC_DIR to the directory that holds it",
        path.display()
    )]
    MissingBinary { path: PathBuf },
}

//! The crate's one error type.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Everything that can go wrong in the frontend, with the context needed to act on it.
///
/// The `Worker*` and `Kernel*` variants are also what a [`crate::Backend`] returns, so the
/// call path can tell "the worker refused this generation" from "the worker is gone".
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The HTTP listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: io::Error },
    /// The listening socket handed over by the kernel is unusable.
    #[error(
        "cannot use the listening socket the kernel passed (descriptor 3, LISTEN_FDS): {source}"
    )]
    Inherit { source: io::Error },
    /// `run/frontend.json` could not be written.
    #[error("cannot write {path}: {source}")]
    StateFile { path: PathBuf, source: io::Error },
    /// The runtime directory could not be prepared.
    #[error(transparent)]
    Transport(#[from] tutti_proto::transport::TransportError),
    /// The kernel could not be reached or answered with a transport error.
    #[error("kernel unavailable: {detail}")]
    KernelUnavailable { detail: String },
    /// The kernel's route stream ended and could not be re-established in time.
    #[error("lost the kernel's route stream and could not reconnect within {seconds} s: {detail}")]
    RoutesLost { seconds: u64, detail: String },
    /// The worker endpoint could not be reached, or the connection broke mid-call.
    #[error("worker at {endpoint} unavailable: {detail}")]
    WorkerUnavailable { endpoint: String, detail: String },
    /// The worker refused the call because its generation is fenced.
    #[error("worker at {endpoint} refused generation {generation}: {detail}")]
    WorkerFenced {
        endpoint: String,
        generation: u64,
        detail: String,
    },
    /// The worker reported that the call ran out of time.
    #[error("worker at {endpoint} timed out: {detail}")]
    WorkerTimeout { endpoint: String, detail: String },
    /// The HTTP server failed.
    #[error("HTTP server failed: {source}")]
    Serve { source: io::Error },
    /// A background task of the frontend panicked or was aborted.
    #[error("internal task {task} failed: {detail}")]
    Task { task: &'static str, detail: String },
}

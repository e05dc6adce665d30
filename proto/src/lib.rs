//! The only crate that knows the wire format: the generated gRPC code of
//! `tutti.kernel.v1` and `tutti.worker.v1`, the local-socket transport they run on (a Unix
//! domain socket file in the owner-only `run/` directory, or a named pipe on Windows, with who
//! may open it), the frame data plane, and the limits of the wire (message and tool-set
//! sizes, connector keys that name socket files).
#![deny(unsafe_code)] // allowed only in transport::uds (one commented registration call) and
// winuser (Windows FFI, each call commented)

pub mod codec;
pub mod frames;
#[cfg(test)]
mod frames_props;
pub mod key;
mod labels;
pub mod limits;
pub mod pipe_access;
mod redacted;
pub mod transport;
#[cfg(windows)]
pub mod winuser;

/// Control plane: CLI, frontend, shims and workers talk to the kernel.
pub mod kernel {
    #![allow(clippy::all, rust_2018_idioms)]
    tonic::include_proto!("tutti.kernel.v1");
}

/// Data plane: the frontend calls a worker directly, naming the generation.
pub mod worker {
    #![allow(clippy::all, rust_2018_idioms)]
    tonic::include_proto!("tutti.worker.v1");
}

pub use tonic;

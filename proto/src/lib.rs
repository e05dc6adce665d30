//! The only crate that knows the wire format: the generated gRPC code of
//! `tutti.kernel.v1` and `tutti.worker.v1`, and the local-socket transport they run on
//! (a Unix domain socket file in the owner-only `run/` directory, or a named pipe on Windows),
//! plus the few rules every process shares (state directory, connector keys, secret masking
//! and log escaping, message and tool-set size limits, the open-files limit, Windows jobs, and
//! [`rules`]: atomic files, sibling binaries, child environments, `x-mcp-header`, the shutdown
//! timing chain).
#![deny(unsafe_code)] // allowed only in transport::uds (one commented registration call),
// memory (one commented glibc call) and job and winuser (Windows FFI, each call commented)

pub mod codec;
pub mod frames;
#[cfg(windows)]
pub mod job;
pub mod key;
mod labels;
pub mod limits;
pub mod memory;
pub mod pipe_access;
pub mod redact;
mod redacted;
pub mod rlimit;
pub mod rules;
pub mod state_dir;
#[cfg(feature = "otel")]
pub mod telemetry;
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

//! Operating-system helpers every binary may need, none of them about the wire:
//!
//! - [`rlimit`]: raising the open-files soft limit to the hard limit (Unix);
//! - [`memory`]: giving free heap back to the system after a burst (glibc);
//! - [`job`]: Windows Job Objects that end a process tree with its owner.
#![deny(unsafe_code)] // allowed only in memory (one glibc call) and job (Windows FFI), each
// call with its SAFETY comment

#[cfg(windows)]
pub mod job;
pub mod memory;
pub mod rlimit;

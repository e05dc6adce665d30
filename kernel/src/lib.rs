//! `tutti-kernel`: the authoritative state of the runtime (registry, generation table,
//! session tokens) and the supervisor of every other process. See ARCHITECTURE.md.
#![deny(unsafe_code)]

mod allowlist;
mod audit;
mod catalog;
mod circuit;
mod console_rpc;
mod demo;
mod error;
mod figures;
mod housekeeping;
mod lifecycle;
mod manifest;
mod naming;
mod notify;
mod oauth;
mod oauth_record;
#[cfg(feature = "otel")]
mod otel;
#[cfg(not(feature = "otel"))]
#[path = "otel_off.rs"]
mod otel;
#[cfg(feature = "otel")]
mod otel_counts;
#[cfg(not(feature = "otel"))]
#[path = "otel_counts_off.rs"]
mod otel_counts;
mod paths;
mod pin;
mod probe;
mod registry;
mod release;
mod restart;
mod review;
mod revocation;
mod risk;
mod run;
mod secrets;
mod service;
mod services;
mod session_caches;
pub mod sim;
mod skills;
mod skillscan;
#[allow(unsafe_code)]
mod spawn;
mod state;
mod supervisor;
mod table;
mod telemetry_drops;
mod tokens;
mod toolset;
#[cfg(windows)]
mod winservice;

pub use error::KernelError;
pub use housekeeping::open_log;
pub use paths::create_private_dir;
pub use paths::default_state_dir;
pub use run::{Config, run, run_until};
pub use spawn::adopt_orphans;
#[cfg(windows)]
pub use winservice::{SERVICE_NAME, run_service};

//! `tutti-kernel`: the authoritative state of the runtime (registry, generation table,
//! session tokens) and the supervisor of every other process. See ARCHITECTURE.md.
#![deny(unsafe_code)]

mod audit;
mod catalog;
mod circuit;
mod connect;
mod console_rpc;
mod demo;
mod error;
mod housekeeping;
mod lifecycle;
mod naming;
mod notify;
mod paths;
mod registry;
mod release;
mod review;
mod risk;
mod run;
mod secrets;
mod service;
mod sessions;
mod skills;
mod state;
mod supervisor;
mod table;
mod telemetry;
mod toolset;
#[cfg(windows)]
mod winservice;

pub use error::KernelError;
pub use housekeeping::open_log;
pub use paths::create_private_dir;
pub use paths::default_state_dir;
pub use run::{Config, run, run_until};
pub use supervisor::spawn::adopt_orphans;
#[cfg(windows)]
pub use winservice::{SERVICE_NAME, run_service};

//! `tutti-kernel`: the authoritative state of the runtime (registry, generation table,
//! session tokens) and the supervisor of every other process. See ARCHITECTURE.md.
#![deny(unsafe_code)]

mod audit;
mod calls;
mod catalog;
mod circuit;
mod confirmations;
mod connect;
mod demo;
mod error;
mod frontend_port;
mod grpc;
mod guards;
mod housekeeping;
mod install;
mod lifecycle;
mod market;
mod naming;
mod notify;
mod paths;
mod registry;
mod release;
mod review;
mod risk;
mod run;
mod secrets;
mod sessions;
mod shims;
pub mod sim;
mod skills;
mod state;
mod status;
mod supervisor;
mod table;
mod telemetry;
mod toolset;
mod watch;
#[cfg(windows)]
mod winservice;
mod workers;

pub use error::KernelError;
pub use housekeeping::open_log;
pub use paths::create_private_dir;
pub use paths::default_state_dir;
pub use run::{Config, run, run_until};
pub use supervisor::spawn::adopt_orphans;
#[cfg(windows)]
pub use winservice::{SERVICE_NAME, run_service};

//! Installing a connector: a prepared release folder → validation → the confirmation summary
//! → commit. [`install`] is the one entry point for every caller that has a folder (the CLI
//! and the console through the `Admin` adapter, the demo connectors at start); [`plan`] is its
//! first half alone and writes nothing. [`uninstall`] takes a connector away again.

mod commit;
mod plan;
mod uninstall;

pub(crate) use commit::install;
pub(crate) use plan::{Install, plan};
pub(crate) use uninstall::uninstall;

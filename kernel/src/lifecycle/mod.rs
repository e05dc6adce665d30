//! The lifecycle of one installed connector as a pure state machine.
//!
//! A [`Connector`] holds everything the kernel decides about a connector at run time: its
//! live generation, its candidate, the workers still running, the status `tutti status`
//! shows (status, last error, upgrade note, restarts, next retry), whether its credentials
//! were refused, and its restart history. [`Connector::step`] takes one [`Input`] and the
//! [`Facts`] of the moment (clock, the installed release as the registry has it, fresh
//! generation numbers) and returns the [`Effect`]s to carry out, in order. It does no I/O:
//! the supervisor (`supervisor/`) interprets the effects, and the unit tests beside it are
//! tables of inputs → effects.
//!
//! Every status change goes through [`Connector::set_status`]; every commit is one
//! [`Effect::Commit`]; the upgrade rules (settle at the first commit, abandon when the
//! candidate is refused or never starts, wait for missing credentials) and the auth rules
//! (fence every generation when the stored credentials are refused) are written here once.

mod connector;
mod faults;
#[cfg(test)]
mod pin_tests;
#[cfg(test)]
mod tests;
mod vocabulary;

pub use connector::Connector;
pub use vocabulary::{
    Effect, Facts, Input, Msg, ReportKind, Status, View, auth_hint, connect_command,
    fence_is_failure,
};

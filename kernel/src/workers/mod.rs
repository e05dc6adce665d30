//! What upstream workers ask of the kernel, each proving its generation with the token from
//! its environment (`admit`): its launch spec ([`register`]), a candidate tool set to commit
//! ([`offer`]), what it observed ([`report`]) and a fresh OAuth access token
//! ([`refresh_token`]). A probe's worker is answered by the probe instead.

mod admit;
mod offer;
mod register;
mod report;

pub(crate) use offer::offer;
pub(crate) use register::register;
pub(crate) use report::{refresh_token, report};

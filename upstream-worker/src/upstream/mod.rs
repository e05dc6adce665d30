//! The upstream MCP server, behind our own small [`Upstream`] trait. The implementation is the
//! official Rust SDK (`rmcp`, pinned exactly): a stdio child process whose stdout we read
//! ourselves (see [`crate::transport::stdio`]), or a remote Streamable HTTP endpoint.
//!
//! The parts: [`contract`] (the trait and what crosses it), [`session`] (a started upstream,
//! its era and first tool list), [`launch_stdio`] and [`launch_http`] (starting each
//! transport), [`requests`] and [`rounds`] (the requests sent, the relaying calls in rounds),
//! [`handler`] and [`relay`] (the upstream's requests relayed to the client), [`mrtr`]
//! (2026-07-28 `input_required` rounds), [`failure`], [`cancel`], [`listen`] (resource
//! subscriptions to a 2026-07-28 upstream), [`catalog`] (prompts and resources) and
//! [`definitions`] (tool definitions as sent).

use std::sync::Arc;
use std::time::Duration;

use tutti_proto::kernel::{LaunchSpec, Transport};

use crate::error::WorkerError;
use crate::redact::Redactor;
use crate::transport::bearer::Bearer;

mod cancel;
pub(crate) mod catalog;
mod contract;
pub(crate) mod definitions;
mod failure;
mod handler;
mod launch_http;
mod launch_stdio;
mod listen;
mod mrtr;
pub(crate) mod relay;
mod requests;
mod rounds;
mod session;

pub(crate) use catalog::Catalog;
pub(crate) use contract::{CallFailure, Offers, ProgressSink, Upstream};
pub(crate) use session::{RmcpUpstream, Session, Started};

/// Starts the upstream described by `spec`, completes the MCP handshake and lists every page
/// of tools, all within `within`.
pub(crate) async fn start(
    spec: &LaunchSpec,
    redactor: Arc<Redactor>,
    within: Duration,
    bearer: Option<Arc<Bearer>>,
) -> Result<Started, WorkerError> {
    match spec.transport() {
        Transport::Stdio => launch_stdio::start_stdio(spec, redactor, within).await,
        Transport::Http => launch_http::start_http(spec, redactor, within, bearer).await,
        Transport::Unspecified => Err(WorkerError::LaunchSpec {
            problem: format!("unknown transport {}", spec.transport),
        }),
    }
}

//! The wire to the upstream, under rmcp: a stdio child's pipes read by our own pump
//! ([`stdio`]), a remote upstream's Streamable HTTP client ([`http`]; what its failures mean for
//! recovery in [`http_fault`], reading its answers in [`http_body`]) with its OAuth access
//! token ([`bearer`]), and the results both take off the wire as text before rmcp parses
//! anything ([`results`]).

pub(crate) mod bearer;
pub(crate) mod http;
mod http_body;
mod http_fault;
pub(crate) mod results;
pub(crate) mod stdio;

pub(crate) use http::SessionEvent;
pub(crate) use stdio::NonJsonCounter;

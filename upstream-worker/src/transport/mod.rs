//! The wire to the upstream, under rmcp: a stdio child's pipes read by our own pump
//! ([`stdio`]), a remote upstream's Streamable HTTP client ([`http`]) with its OAuth access
//! token ([`bearer`]), and the results both take off the wire as text before rmcp parses
//! anything ([`results`]).

pub(crate) mod bearer;
pub(crate) mod http;
pub(crate) mod results;
pub(crate) mod stdio;

pub(crate) use http::SessionEvent;
pub(crate) use stdio::NonJsonCounter;

//! The two MCP eras this server speaks: the legacy surface (2025-06-18, [`legacy`]) and the
//! modern one (2026-07-28, [`modern`]). They differ in framing, headers and how an answer is
//! written; what they share is in [`shared`] (the request context, `tools/list`) and
//! [`tables`] (what each revision's results carry).

pub(crate) mod legacy;
pub(crate) mod modern;
pub(crate) mod shared;
pub(crate) mod tables;

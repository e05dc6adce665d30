//! The connector market: from where MCP servers are published to a release folder whose every
//! running file is pinned by hash.
//!
//! - [`plan`]: the vocabulary shared by the steps (what package, how it is pinned, what it ran as).
//! - `registry`: the MCP Registry API v0.1 (search, one version, paging, statuses).
//! - `server_json`: a `server.json` document to a `connector.json` and the package to pin.
//! - `pin`: npm, PyPI, MCP bundles and container images fetched into a release, each checked
//!   against its source's hash; `lock`: the release's `tutti-lock.json`; `origin`: its
//!   `tutti-source.json`, what builds the release again.
#![forbid(unsafe_code)]

pub mod error;
pub mod lock;
pub mod origin;
pub mod pin;
pub mod plan;
pub mod registry;
pub mod server_json;
pub mod source;

pub use error::MarketError;

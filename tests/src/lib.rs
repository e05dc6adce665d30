//! Test support for the Tutti runtime.
//!
//! - [`fixture`]: the `tutti-fixture-server` MCP server (its binary is a thin wrapper).
//! - The end-to-end harness used by `tests/tests/*.rs`: [`bin`] finds the workspace's built
//!   binaries, [`Runtime`] runs a real `tutti up` on a temporary state dir, [`Mcp`] is a raw
//!   JSON-RPC client of the frontend (both MCP eras), [`StdioClient`] talks to a stdio MCP
//!   server directly, [`FixtureHttp`] runs the fixture in `--http` mode, [`Server`] runs
//!   another server beside the runtime until the test drops it, [`proc_tree`] inspects live
//!   processes (orphan and zombie checks), and [`PySdk`] runs a Python `mcp` SDK client
//!   script that prints JSON lines; [`everything_stdio_manifest`] and
//!   [`Server::everything_http`] make server-everything an upstream.
//!
//! Helpers panic with a clear message instead of returning errors: a panic is how a test
//! reports failure. Tests need `cargo build --workspace --bins` first (`scripts/test` does it).
#![forbid(unsafe_code)]

pub mod argv_watch;
pub mod auth_proxy;
pub mod confirm;
mod everything;
pub mod fixture;
pub mod floor;
mod mcp;
pub mod oauth;
pub mod otlp;
pub mod proc_tree;
mod py;
pub mod rng;
mod runtime;
pub mod secret_scan;
mod server;
mod stdio;
pub mod stdio_http;
mod support;

pub use auth_proxy::AuthProxy;
pub use everything::{
    everything_entry, everything_http_manifest, everything_stdio_manifest, runtime_allowing_node,
};
pub use mcp::{Era, Mcp, SseStream};
pub use py::{PY_RUN, PySdk, py_script};
pub use runtime::{Runtime, RuntimeOptions, WorkerProc};
pub use server::Server;
pub use stdio::{FixtureHttp, StdioClient};
pub use stdio_http::StdioHttp;
pub use support::{
    LEGACY_VERSION, MODERN_VERSION, bin, bin_dir, file_tail, fixture_bin, fixture_connector,
    free_port, node22, npm_package, python_venv, repo_root, require_node22, require_python,
    require_python_venv, result_texts, tools_dir,
};

//! The end-to-end tests: one binary over the real binaries (`target/debug` or `$TUTTI_BIN_DIR`),
//! one module per behaviour. A new module is a file or folder here and a `mod` line below
//! (`tests/README.md`).

mod agents;
mod agents_real;
mod bridge;
mod calls;
mod catalog;
mod codex_binding_refresh;
mod console;
// SIGKILL, Unix sockets and file modes: Unix only.
#[cfg(unix)]
mod crash;
mod docs;
mod floor;
mod harness;
mod market;
mod oauth;
mod observability;
mod processes;
mod relay;
mod startup;
mod trust;
mod upstreams;

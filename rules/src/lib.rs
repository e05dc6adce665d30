//! Rules every process of the runtime shares, each in exactly one place. Nothing here knows
//! the wire format (no protobuf, no gRPC): these are plain functions and constants over
//! paths, environments, durations, strings and JSON Schema documents.
//!
//! - [`state_dir`]: where a runtime lives (`TUTTI_STATE_DIR`, else the platform default);
//! - [`redact`]: secret masking and log escaping;
//! - [`atomic_file`]: replacing a file atomically (temp file, fsync, rename, fsync the directory);
//! - [`sibling`]: finding the runtime's other binaries (`TUTTI_LIBEXEC_DIR`, else next to the
//!   running executable, then next to the file it links to);
//! - [`child_env`]: the environment each kind of child process gets (one allowlist per kind);
//! - [`loopback`]: the loopback `Host`/`Origin` rule (SPEC §5), for the frontend and the console;
//! - [`mcp_header`]: the `x-mcp-header` / `Mcp-Param-*` vocabulary (SEP-2243);
//! - [`schema_pattern`]: how schema `pattern`s are compiled (linear time, bounded size);
//! - [`timing`]: the shutdown timing chain, each bound derived from the one it must exceed;
//! - [`log_format`]: `TUTTI_LOG_FORMAT` (text or one JSON object per line);
//! - [`release_path`]: a path inside a release as processes exchange it (`/`-separated).
//! - [`log_filter`]: the dependencies' log events that carry codes or tokens, off everywhere;
//! - [`shown_arguments`]: a call's arguments as a person sees them before confirming it;
//! - [`secret_name`]: a header, input or setting name as a secret (variable-shaped) name;
//! - [`token_refresh`]: how long before expiry an OAuth access token is renewed.

#![forbid(unsafe_code)]

pub mod atomic_file;
pub mod child_env;
pub mod log_filter;
pub mod log_format;
pub mod loopback;
pub mod mcp_header;
pub mod redact;
pub mod release_path;
pub mod schema_pattern;
pub mod secret_name;
pub mod shown_arguments;
pub mod sibling;
pub mod state_dir;
pub mod timing;
pub mod token_refresh;

#[cfg(test)]
mod props;

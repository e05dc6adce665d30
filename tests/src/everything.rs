//! `@modelcontextprotocol/server-everything` (the MCP reference server with every primitive,
//! under `.tools/npm`, run by Node 22 from `.tools/node22`) as an upstream: a stdio manifest, a
//! runtime whose owner allowlist admits Node. The server in its `streamableHttp` mode is
//! [`crate::Server::everything_http`].

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::runtime::TEST_ALLOWED_COMMANDS;
use crate::support::{npm_package, require_node22};
use crate::{Runtime, RuntimeOptions};

/// `dist/index.js` of the installed package; a missing package fails with what to run.
pub fn everything_entry() -> PathBuf {
    let pkg = npm_package("@modelcontextprotocol/server-everything").unwrap_or_else(|| {
        panic!(
            "this test needs @modelcontextprotocol/server-everything under .tools/npm: run \
             scripts/install-test-tools"
        )
    });
    pkg.join("dist").join("index.js")
}

/// A stdio connector `key` running server-everything under Node 22.
pub fn everything_stdio_manifest(key: &str) -> Value {
    let node = require_node22();
    json!({
        "key": key,
        "name": "Everything",
        "description": "The MCP reference server with every primitive, over stdio",
        "version": "2026.8.31",
        "mcp": {"transport": "stdio", "command": node.to_string_lossy(),
                "args": [everything_entry().to_string_lossy(), "stdio"]},
    })
}

/// An HTTP connector `key` for server-everything at `url`.
pub fn everything_http_manifest(key: &str, url: &str) -> Value {
    json!({
        "key": key,
        "name": "Everything",
        "description": "The MCP reference server with every primitive, over Streamable HTTP",
        "version": "2026.8.31",
        "mcp": {"transport": "http", "url": url},
    })
}

/// A runtime whose owner allowlist (`TUTTI_ALLOW_COMMANDS`) admits the test tools and Node 22.
pub fn runtime_allowing_node() -> Runtime {
    let node = require_node22();
    Runtime::start(RuntimeOptions {
        env: vec![(
            "TUTTI_ALLOW_COMMANDS".into(),
            format!("{TEST_ALLOWED_COMMANDS},{}", node.display()),
        )],
        ..RuntimeOptions::default()
    })
}

//! `@modelcontextprotocol/server-everything` (the MCP reference server with every primitive,
//! under `.tools/npm`, run by Node 22 from `.tools/node22`) as an upstream: a stdio manifest, a
//! runtime whose owner allowlist admits Node, and the server in its `streamableHttp` mode.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::runtime::TEST_ALLOWED_COMMANDS;
use crate::support::{free_port, npm_package, require_node22};
use crate::{Runtime, RuntimeOptions};

/// How long server-everything may take to listen.
const LISTEN: Duration = Duration::from_secs(30);

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

/// server-everything in its `streamableHttp` mode on a free port; killed on drop.
pub struct EverythingHttp {
    child: Child,
    /// `http://127.0.0.1:<port>/mcp`.
    pub url: String,
}

impl EverythingHttp {
    /// Starts it with `dir` as its working directory and `dir/everything.stderr` as its
    /// stderr; returns once it accepts connections.
    pub fn start(dir: &Path) -> EverythingHttp {
        let port = free_port();
        let stderr = std::fs::File::create(dir.join("everything.stderr"))
            .unwrap_or_else(|e| panic!("stderr file: {e}"));
        let child = Command::new(require_node22())
            .arg(everything_entry())
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start server-everything: {e}"));
        let server = EverythingHttp {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        };
        let deadline = Instant::now() + LISTEN;
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "server-everything did not listen on {port} within {LISTEN:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        server
    }
}

impl Drop for EverythingHttp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

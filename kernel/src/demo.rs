//! `tutti up --demo`: bundled example connectors that work right after the build. Their
//! upstream is the workspace's Rust fixture server, so their releases are generated here
//! with its absolute path, then installed through the normal install path.

use std::path::{Path, PathBuf};

use serde_json::json;

/// Writes the demo release directories under `<state>/demo/` and returns them.
pub fn write_releases(state: &Path, libexec: &Path) -> std::io::Result<Vec<PathBuf>> {
    let server = libexec.join(tutti_rules::sibling::file_name("tutti-fixture-server"));
    if !server.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!(
                "{} is missing; build the workspace with `cargo build --workspace`",
                server.display()
            ),
        ));
    }
    let server = server.to_string_lossy().into_owned();
    let base = state.join("demo");
    let hello = base.join("hello");
    std::fs::create_dir_all(hello.join("skills/hello-basics"))?;
    std::fs::write(
        hello.join("connector.json"),
        serde_json::to_vec_pretty(&json!({
            "key": "hello",
            "name": "Hello",
            "description": "Example connector: echo and add, served by a local stdio MCP server",
            "version": "1.0.0",
            "mcp": {"transport": "stdio", "command": server, "args": ["--tools", "echo,add,whoami"]},
            "skills": ["skills/hello-basics"]
        }))?,
    )?;
    std::fs::write(
        hello.join("skills/hello-basics/SKILL.md"),
        "---\nname: hello-basics\ntitle: Hello basics\ndescription: How to use the hello connector's echo and add tools\n---\n\nCall `hello_echo` with a `message`, or `hello_add` with integers `a` and `b`.\n",
    )?;
    let notes = base.join("clock");
    std::fs::create_dir_all(&notes)?;
    std::fs::write(
        notes.join("connector.json"),
        serde_json::to_vec_pretty(&json!({
            "key": "clock",
            "name": "Clock",
            "description": "Example connector: waits and reports its process, for trying cancellation",
            "version": "1.0.0",
            "mcp": {"transport": "stdio", "command": server, "args": ["--tools", "sleep,whoami,read_only"]},
            "timeouts": {"callMs": 30000}
        }))?,
    )?;
    Ok(vec![hello, notes])
}

//! `tutti doctor`'s market and client lines (SPEC §17, §18), each in a situation built for it:
//! a pinned release whose lock names another interpreter version than the one on PATH, a
//! connector imported with `--no-pin`, a registry that does not answer beside one that does,
//! a client configuration that still starts a server also installed as a connector, and a
//! rewritten bridge entry whose `tutti` is gone. One line each, with its fix.

use std::path::Path;

use serde_json::json;
use tutti_tests::{Runtime, RuntimeOptions, fixture_connector};

use super::Registry;

/// Writes `value` as JSON at `path` (parents created).
fn write_json(path: &Path, value: &serde_json::Value) {
    std::fs::create_dir_all(path.parent().unwrap_or(path)).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(path, value.to_string()).unwrap_or_else(|e| panic!("{e}"));
}

/// `tutti ARGS` as a person in `project` with `home` runs it.
fn as_person(rt: &Runtime, home: &Path, args: &[&str]) -> (bool, String) {
    let project = rt.root().join("project");
    std::fs::create_dir_all(&project).unwrap_or_else(|e| panic!("{e}"));
    let out = rt
        .tutti_cmd(args)
        .env("HOME", home)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("CODEX_HOME")
        .current_dir(project)
        .output()
        .unwrap_or_else(|e| panic!("tutti {args:?}: {e}"));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

/// The claude-code entries (one imported as written, one `npx` entry unpinned) and a cursor
/// bridge entry whose `tutti` is gone.
fn place_clients(rt: &Runtime, home: &Path) {
    let fixture = rt.private_fixture().display().to_string();
    let npx = rt.root().join("launchers").join("npx");
    std::fs::create_dir_all(npx.parent().unwrap_or(home)).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink(&fixture, &npx).unwrap_or_else(|e| panic!("{e}"));
    write_json(
        &home.join(".claude.json"),
        &json!({"mcpServers": {
            "echo": {"command": fixture, "args": []},
            "everything": {"command": npx.display().to_string(),
                "args": ["-y", "@modelcontextprotocol/server-everything@2026.1.1"]}}}),
    );
    write_json(
        &home.join(".cursor/mcp.json"),
        &json!({"mcpServers": {"connector": {"command": "/gone/bin/tutti",
            "args": ["mcp-stdio", "--workspace", "cursor"]}}}),
    );
}

/// The line of `doctor` that contains `needle` (exactly one).
fn line<'a>(out: &'a str, needle: &str) -> &'a str {
    let found: Vec<&str> = out.lines().filter(|l| l.contains(needle)).collect();
    assert_eq!(found.len(), 1, "one line with {needle:?}:\n{out}");
    found[0]
}

#[test]
fn doctor_names_changed_interpreters_unpinned_connectors_dead_registries_and_stale_clients() {
    let registry = Registry::start("http://127.0.0.1:9/mcp");
    let mut rt = Runtime::start(RuntimeOptions {
        env: vec![(
            "TUTTI_REGISTRIES".into(),
            format!("fix={},dead=http://127.0.0.1:9", registry.url),
        )],
        ..Default::default()
    });
    let lock = json!({"format": 1, "source": {"kind": "npm", "name": "old-node", "version": "1.0.0"},
        "version": "1.0.0", "artefacts": [], "interpreter": "v0.0.1",
        "scripts": {"allowed": false, "packages": []}});
    let lock = lock.to_string();
    rt.install_ok(
        &fixture_connector("old-node", &[]),
        &[("tutti-lock.json", lock.as_bytes())],
    );
    let home = rt.root().join("home");
    place_clients(&rt, &home);
    let (ok, said) = as_person(
        &rt,
        &home,
        &[
            "connector",
            "import",
            "--from",
            "claude-code",
            "--yes",
            "--no-pin",
        ],
    );
    assert!(ok, "{said}");

    let (ok, out) = as_person(&rt, &home, &["doctor"]);
    assert!(ok, "doctor failed: {out}");
    let interpreter = line(&out, "interpreter old-node:");
    assert!(
        interpreter.starts_with("WARN")
            && interpreter.contains("installed under v0.0.1, node is now ")
            && interpreter.contains("; fix: install it again"),
        "{interpreter}"
    );
    let unpinned = line(&out, "unpinned everything:");
    assert!(
        unpinned.contains("imported with --no-pin from claude-code")
            && unpinned.contains("fix: pin it: `tutti connector uninstall everything`, then `tutti connector import --from claude-code --only everything`"),
        "{unpinned}"
    );
    let dead = line(&out, "registry dead:");
    assert!(
        dead.starts_with("WARN")
            && dead.contains("unreachable")
            && dead.contains("`tutti registry remove dead`"),
        "{dead}"
    );
    assert!(line(&out, "registries:").starts_with("OK"), "{out}");
    let stale = line(&out, "still starts echo itself");
    assert!(
        stale.contains("also installed as connector echo (imported, not rewritten)")
            && stale.contains("fix: `tutti connector import --from claude-code --rewrite`"),
        "{stale}"
    );
    let gone = line(&out, "runs /gone/bin/tutti, which no longer exists");
    assert!(
        gone.starts_with("WARN client cursor:")
            && gone.contains("fix: set the entry's command to /"),
        "{gone}"
    );
}

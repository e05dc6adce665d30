//! `tutti connector import` (SPEC §18) over the real runtime: the config files of every
//! client (`tests/fixtures/import/`, each citing where its shape comes from) placed at their
//! Linux paths under a fresh HOME become connectors of the fixture server; credentials move
//! into `secrets/` and appear nowhere else; a key collision gets a suffix; an `npx` line that
//! is not one package is refused until `--no-pin`, then runs as written and `status` marks it
//! unpinned; a claude-code `npx -y server-everything@VERSION` entry is pinned through the
//! market (a lockfile in its release) and answers through the frontend; a second
//! import skips what is there; `--rewrite` points each file at the stdio bridge (TOML
//! comments kept) and `--undo` restores the original bytes.
#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use serde_json::{Value, json};
use tutti_tests::secret_scan::{Scan, leaks};
use tutti_tests::{Runtime, RuntimeOptions, repo_root, require_node22};

const READY: Duration = Duration::from_secs(30);
const SECRET: &str = "sk-live-import-Q7vX93kLpZ";

/// Fixture file → where its client keeps it (under HOME, or the project for `.mcp.json`).
const PLACES: &[(&str, &str, &str)] = &[
    (
        "claude-desktop",
        "claude_desktop_config.json",
        ".config/Claude/claude_desktop_config.json",
    ),
    ("claude-code", "claude.json", ".claude.json"),
    ("cursor", "cursor_mcp.json", ".cursor/mcp.json"),
    ("vscode", "vscode_mcp.json", ".config/Code/User/mcp.json"),
    ("codex", "codex_config.toml", ".codex/config.toml"),
    (
        "windsurf",
        "windsurf_mcp_config.json",
        ".codeium/windsurf/mcp_config.json",
    ),
    ("gemini", "gemini_settings.json", ".gemini/settings.json"),
];

/// Writes every fixture to its place with the fixture server's path and the secret filled
/// in; `npx` is a link to the fixture server (a package launcher by name). The originals.
fn place_fixtures(rt: &Runtime, home: &Path) -> Vec<(String, PathBuf, Vec<u8>)> {
    let fixture = rt.private_fixture();
    let npx = rt.root().join("launchers").join("npx");
    std::fs::create_dir_all(npx.parent().unwrap_or(home)).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink(&fixture, &npx).unwrap_or_else(|e| panic!("{e}"));
    let mut placed = Vec::new();
    for (client, name, place) in PLACES {
        let src = repo_root().join("tests/fixtures/import").join(name);
        let text = std::fs::read_to_string(&src).unwrap_or_else(|e| panic!("{name}: {e}"));
        let text = text
            .replace("@FIXTURE@", &fixture.display().to_string())
            .replace("@NPX@", &npx.display().to_string())
            .replace("@SECRET@", SECRET);
        let dest = home.join(place);
        std::fs::create_dir_all(dest.parent().unwrap_or(home)).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(&dest, &text).unwrap_or_else(|e| panic!("{e}"));
        placed.push(((*client).to_owned(), dest, text.into_bytes()));
    }
    placed
}

fn import(rt: &Runtime, home: &Path, args: &[&str]) -> Output {
    let project = rt.root().join("project");
    std::fs::create_dir_all(&project).unwrap_or_else(|e| panic!("{e}"));
    let mut cmd = rt.tutti_cmd(&[&["connector", "import"], args].concat());
    cmd.env("HOME", home)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("CODEX_HOME")
        .current_dir(project);
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("tutti connector import: {e}"));
    assert!(
        out.status.success(),
        "import {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The first import: every client's entries, the npx one refused (not one package).
fn first_import(rt: &Runtime, home: &Path) -> Output {
    let out = import(rt, home, &["--yes"]);
    let said = text(&out);
    assert!(
        said.contains(
            "everything: option --tools is not read here; pass --no-pin to run the command as written"
        ),
        "{said}"
    );
    assert!(
        said.contains("key echo is taken; it becomes echo-2"),
        "{said}"
    );
    for key in [
        "echo",
        "echo-2",
        "code-add",
        "project-echo",
        "cursor-echo",
        "codex-echo",
        "gemini-echo",
    ] {
        rt.wait_status(key, "ready", READY);
    }
    // A `${input:…}` reference becomes a secret to give later.
    rt.wait_status("vscode-echo", "auth_required", READY);
    assert!(
        said.contains("tutti connector connect vscode-echo --from-env API_KEY"),
        "{said}"
    );
    assert!(rt.connector_status("everything").is_none(), "{said}");
    out
}

/// The second import: the rest skipped as already imported, the npx entry unpinned, every
/// file rewritten to the bridge.
fn second_import(rt: &Runtime, home: &Path) -> Output {
    let out = import(rt, home, &["--yes", "--no-pin", "--rewrite"]);
    let said = text(&out);
    assert!(
        said.contains("cursor-echo: already imported (same launch); skipped"),
        "{said}"
    );
    let everything = rt.wait_status("everything", "ready", READY);
    assert_eq!(everything["unpinned"], true, "{everything}");
    let status = rt.tutti_ok(&["status"]);
    assert!(status.contains("(unpinned)"), "{status}");
    out
}

fn assert_rewritten(placed: &[(String, PathBuf, Vec<u8>)]) {
    for (client, path, original) in placed {
        let now = std::fs::read_to_string(path).unwrap_or_default();
        assert!(now.contains("mcp-stdio"), "{client}: {now}");
        assert!(
            !now.contains(SECRET),
            "{client}: a secret stayed in the rewritten file"
        );
        let backup = std::fs::read(format!("{}.tutti-backup", path.display())).unwrap_or_default();
        assert_eq!(
            &backup, original,
            "{client}: the backup holds the original bytes"
        );
    }
    let codex = &placed
        .iter()
        .find(|p| p.0 == "codex")
        .unwrap_or_else(|| panic!("codex"))
        .1;
    let toml = std::fs::read_to_string(codex).unwrap_or_default();
    for comment in [
        "# Codex CLI, $CODEX_HOME/config.toml",
        "# the model this person uses",
        "# a setting after the servers",
    ] {
        assert!(toml.contains(comment), "comment lost: {comment}\n{toml}");
    }
    assert!(!toml.contains("codex-echo"), "{toml}");
}

#[test]
fn every_clients_servers_become_connectors_without_leaking_a_secret_and_rewrite_undoes() {
    let rt = Runtime::start(RuntimeOptions::default());
    let home = rt.root().join("home");
    let placed = place_fixtures(&rt, &home);
    let first = first_import(&rt, &home);
    let second = second_import(&rt, &home);
    assert_rewritten(&placed);

    let scan = Scan {
        outputs: [("first", &first), ("second", &second)]
            .iter()
            .flat_map(|(what, o)| {
                [
                    (format!("{what} stdout"), o.stdout.clone()),
                    (format!("{what} stderr"), o.stderr.clone()),
                ]
            })
            .collect(),
        ..Scan::default()
    };
    let found = leaks(&[SECRET], rt.state_dir(), &scan);
    assert!(found.is_empty(), "the secret leaked to: {found:?}");
    let stored: Vec<PathBuf> = {
        let mut files = Vec::new();
        tutti_tests::secret_scan::files_under(&rt.state_dir().join("secrets"), &[], &mut files);
        files
    };
    assert!(
        !tutti_tests::secret_scan::file_leaks(&[SECRET], &stored).is_empty(),
        "the moved credential is in secrets/"
    );

    for (client, path, original) in &placed {
        let out = import(&rt, &home, &["--undo", client]);
        assert!(text(&out).contains("restored"), "{client}");
        assert_eq!(
            &std::fs::read(path).unwrap_or_default(),
            original,
            "{client}: undo"
        );
    }
    let registry: Value = serde_json::from_slice(
        &std::fs::read(rt.state_dir().join("registry.json")).unwrap_or_default(),
    )
    .unwrap_or_default();
    assert!(!registry.to_string().contains(SECRET));
}

/// The version of server-everything the registry fixture names (and `.tools/npm` holds).
fn everything_version() -> String {
    let path = repo_root().join("tests/fixtures/registry/everything.json");
    let doc: Value = serde_json::from_slice(&std::fs::read(&path).unwrap_or_default())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    doc["server"]["version"]
        .as_str()
        .unwrap_or_else(|| panic!("no version in {}", path.display()))
        .to_owned()
}

/// A runtime whose PATH finds Node 22 first (the pinned release runs `node`; npm pins).
fn runtime_with_node_first() -> Runtime {
    let node_bin = require_node22()
        .parent()
        .unwrap_or_else(|| panic!("node has no folder"))
        .to_path_buf();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::iter::once(node_bin).chain(std::env::split_paths(&path));
    let path = std::env::join_paths(dirs).unwrap_or_else(|e| panic!("{e}"));
    Runtime::start(RuntimeOptions {
        env: vec![("PATH".into(), path.to_string_lossy().into_owned())],
        ..RuntimeOptions::default()
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn an_npx_entry_is_pinned_through_the_market_and_answers_echo() {
    let rt = runtime_with_node_first();
    let home = rt.root().join("home");
    let project = rt.root().join("project");
    std::fs::create_dir_all(&project).unwrap_or_else(|e| panic!("{e}"));
    let package = format!(
        "@modelcontextprotocol/server-everything@{}",
        everything_version()
    );
    let entry = json!({"mcpServers": {"everything": {"command": "npx",
        "args": ["-y", package, "stdio"], "env": {"LOG_LEVEL": "warn"}}}});
    std::fs::write(project.join(".mcp.json"), entry.to_string()).unwrap_or_else(|e| panic!("{e}"));

    let out = import(&rt, &home, &["--from", "claude-code", "--yes"]);
    let said = text(&out);
    for line in [
        format!("  launch as written: npx -y {package} stdio"),
        format!("pinning: {package} ("),
        "imported everything as everything".to_owned(),
    ] {
        assert!(said.contains(&line), "{line:?} missing:\n{said}");
    }
    let everything = rt.wait_status("everything", "ready", READY);
    assert!(everything.get("unpinned").is_none(), "{everything}");
    assert!(!rt.tutti_ok(&["status"]).contains("(unpinned)"));
    let releases = rt.state_dir().join("releases").join("everything");
    let locked = std::fs::read_dir(&releases)
        .map(|d| {
            d.flatten()
                .any(|r| r.path().join("tutti-lock.json").is_file())
        })
        .unwrap_or(false);
    assert!(locked, "no tutti-lock.json under {}", releases.display());
    let echoed = super::echo_through_frontend(&rt, "everything").await;
    assert!(echoed.contains("from the market"), "{echoed}");

    // The same entry again is already there.
    let again = text(&import(&rt, &home, &["--from", "claude-code", "--yes"]));
    assert!(again.contains("already imported (same launch)"), "{again}");
}

/// A bare command off the launch allowlist is refused as `install` refuses it, with the
/// fix named; `--allow-command` (the person's own word) admits it.
#[test]
fn a_command_off_the_allowlist_is_imported_only_with_allow_command() {
    let rt = Runtime::start(RuntimeOptions::default());
    let home = rt.root().join("home");
    std::fs::create_dir_all(&home).unwrap_or_else(|e| panic!("{e}"));
    let file = rt.root().join("shell.json");
    let entry = json!({"mcpServers": {"shell": {"command": "sh", "args": ["-c", "exit 3"]}}});
    std::fs::write(&file, entry.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let from = file.display().to_string();

    let refused = text(&import(&rt, &home, &["--from", &from, "--yes"]));
    for line in [
        "is not allowed by the launch allowlist",
        "shell: to run sh as written, import with --allow-command sh",
    ] {
        assert!(refused.contains(line), "{line:?} missing:\n{refused}");
    }
    assert!(rt.connector_status("shell").is_none(), "{refused}");

    let allowed = text(&import(
        &rt,
        &home,
        &["--from", &from, "--yes", "--allow-command", "sh"],
    ));
    for line in ["allows (--allow-command) sh", "imported shell as shell"] {
        assert!(allowed.contains(line), "{line:?} missing:\n{allowed}");
    }
}

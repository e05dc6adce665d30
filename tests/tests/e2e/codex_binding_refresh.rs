//! `tutti session issue --format codex [--codex-home DIR]` turns on Codex's list-changed
//! feature (`[features] mcp_tool_list_changed = true`) exactly when the `codex` on PATH lists
//! it in `codex features list`; otherwise it writes nothing of it and says so on stderr in one
//! line. Every other key of the user's config.toml stays as it was. The `codex` here is a
//! fake on PATH that records its arguments.

#![cfg(unix)]

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use toml_edit::DocumentMut;
use tutti_tests::{Runtime, RuntimeOptions};

const BEFORE: &str =
    "# mine\nmodel = \"gpt-5\"\n\n[features]\n# keep me\nweb_search_request = true\n";

/// A directory holding a fake `codex` whose `features list` prints `listing`; it records its
/// arguments in `args.txt` next to it.
fn fake_codex(root: &Path, name: &str, listing: &str) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let script = format!(
        "#!/bin/sh\nprintf '%s\\n' \"$*\" >> '{}/args.txt'\n\
         if [ \"$1 $2\" = 'features list' ]; then printf '{listing}'; exit 0; fi\nexit 2\n",
        dir.display()
    );
    let codex = dir.join("codex");
    std::fs::write(&codex, script).unwrap_or_else(|e| panic!("{e}"));
    std::fs::set_permissions(&codex, std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("{e}"));
    dir
}

/// Issues a Codex binding for `session` into a fresh Codex home holding [`BEFORE`], with
/// `path` as PATH: (stdout, stderr, the written config.toml).
fn issue_codex(rt: &Runtime, session: &str, path: &Path) -> (String, String, String) {
    let home = rt.root().join(format!("home-{session}"));
    std::fs::create_dir_all(&home).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(home.join("config.toml"), BEFORE).unwrap_or_else(|e| panic!("{e}"));
    let home_arg = home.display().to_string();
    let args = ["session", "issue", "--workspace", "w", "--session", session];
    let out = rt
        .tutti_cmd(&args)
        .args(["--format", "codex", "--codex-home", &home_arg])
        .env("PATH", path)
        .output()
        .unwrap_or_else(|e| panic!("cannot run tutti: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "session issue failed: {stderr}");
    let written =
        std::fs::read_to_string(home.join("config.toml")).unwrap_or_else(|e| panic!("{e}"));
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr,
        written,
    )
}

fn toml(what: &str, text: &str) -> DocumentMut {
    text.parse()
        .unwrap_or_else(|e| panic!("{what} is not TOML ({e}):\n{text}"))
}

/// Everything of [`BEFORE`] is still there, byte for byte, and the connector is bound.
fn assert_kept(written: &str) {
    let doc = toml("config.toml", written);
    assert_eq!(doc["model"].as_str(), Some("gpt-5"), "{written}");
    assert_eq!(
        doc["features"]["web_search_request"].as_bool(),
        Some(true),
        "{written}"
    );
    assert!(
        written.starts_with(
            "# mine\nmodel = \"gpt-5\"\n\n[features]\n# keep me\nweb_search_request = true\n"
        ),
        "{written}"
    );
    assert!(doc["mcp_servers"]["connector"]["url"].is_str(), "{written}");
}

#[test]
fn a_codex_binding_turns_on_list_changed_only_where_the_installed_codex_has_it() {
    let rt = Runtime::start(RuntimeOptions::default());
    let with = fake_codex(
        rt.root(),
        "with",
        "apply_patch_freeform  stable  true\\nmcp_tool_list_changed  experimental  false\\n",
    );
    let (out, err, written) = issue_codex(&rt, "with", &with);
    assert_kept(&written);
    let doc = toml("config.toml", &written);
    assert_eq!(
        doc["features"]["mcp_tool_list_changed"].as_bool(),
        Some(true),
        "{written}"
    );
    let printed = toml("stdout", &out);
    assert_eq!(
        printed["features"]["mcp_tool_list_changed"].as_bool(),
        Some(true),
        "{out}"
    );
    assert!(err.contains("[features]"), "{err}");
    let asked = std::fs::read_to_string(with.join("args.txt")).unwrap_or_default();
    assert_eq!(
        asked, "features list\n",
        "codex was asked exactly once, directly"
    );

    let without = fake_codex(
        rt.root(),
        "without",
        "apply_patch_freeform  stable  true\\n",
    );
    let (out, err, written) = issue_codex(&rt, "without", &without);
    assert_kept(&written);
    assert!(
        !written.contains("mcp_tool_list_changed") && !out.contains("[features]"),
        "{written}\n{out}"
    );
    let notes: Vec<_> = err
        .lines()
        .filter(|l| l.contains("mcp_tool_list_changed"))
        .collect();
    assert_eq!(notes.len(), 1, "one line says why: {err}");
    assert!(
        notes[0].contains("has no mcp_tool_list_changed feature"),
        "{err}"
    );

    let empty = rt.root().join("no-codex");
    std::fs::create_dir_all(&empty).unwrap_or_else(|e| panic!("{e}"));
    let (out, err, written) = issue_codex(&rt, "none", &empty);
    assert_kept(&written);
    assert!(
        !written.contains("mcp_tool_list_changed") && !out.contains("[features]"),
        "{written}\n{out}"
    );
    assert!(err.contains("codex is not on PATH"), "{err}");
}

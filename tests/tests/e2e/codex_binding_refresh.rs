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
    issue_codex_into(rt, session, &home, path, &[])
}

/// `tutti session issue --workspace w --session SESSION --format codex --codex-home HOME` and
/// `extra` (e.g. `--via stdio`) with `path` as PATH, as a user runs it: (stdout, stderr, the
/// written config.toml). Panics unless it succeeds.
pub(crate) fn issue_codex_into(
    rt: &Runtime,
    session: &str,
    home: &Path,
    path: &Path,
    extra: &[&str],
) -> (String, String, String) {
    let home_arg = home.display().to_string();
    let args = ["session", "issue", "--workspace", "w", "--session", session];
    let out = rt
        .tutti_cmd(&args)
        .args(["--format", "codex", "--codex-home", &home_arg])
        .args(extra)
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

/// A binding issued for session `name` with PATH holding only a fake `codex` that lists
/// `listing` (`None`: no `codex` at all), checked to keep the user's keys: (stdout, stderr,
/// config.toml, the fake's directory).
fn issue_with(rt: &Runtime, name: &str, listing: Option<&str>) -> [String; 4] {
    let dir = match listing {
        Some(listing) => fake_codex(rt.root(), name, listing),
        None => rt.root().join(name),
    };
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let (out, err, written) = issue_codex(rt, name, &dir);
    assert_kept(&written);
    [out, err, written, dir.display().to_string()]
}

fn assert_no_flag(out: &str, written: &str) {
    assert!(
        !written.contains("mcp_tool_list_changed") && !out.contains("[features]"),
        "{written}\n{out}"
    );
}

#[test]
fn a_codex_binding_turns_on_list_changed_only_where_the_installed_codex_has_it() {
    let rt = Runtime::start(RuntimeOptions::default());
    let listing =
        "apply_patch_freeform  stable  true\\nmcp_tool_list_changed  experimental  false\\n";
    let [out, err, written, dir] = issue_with(&rt, "with", Some(listing));
    let flag = |text: &str, what: &str| {
        let doc = toml(what, text);
        let features = doc.get("features").and_then(|f| f.as_table_like());
        features.and_then(|f| f.get("mcp_tool_list_changed")?.as_bool())
    };
    assert_eq!(flag(&written, "config.toml"), Some(true), "{written}");
    assert_eq!(flag(&out, "stdout"), Some(true), "{out}");
    assert!(err.contains("[features]"), "{err}");
    let asked = std::fs::read_to_string(Path::new(&dir).join("args.txt")).unwrap_or_default();
    assert_eq!(
        asked, "features list\n",
        "codex was asked exactly once, directly"
    );

    let [out, err, written, _] = issue_with(
        &rt,
        "without",
        Some("apply_patch_freeform  stable  true\\n"),
    );
    assert_no_flag(&out, &written);
    let notes: Vec<_> = err
        .lines()
        .filter(|l| l.contains("mcp_tool_list_changed"))
        .collect();
    assert_eq!(notes.len(), 1, "one line says why: {err}");
    assert!(
        notes[0].contains("has no mcp_tool_list_changed feature"),
        "{err}"
    );

    let [out, err, written, _] = issue_with(&rt, "none", None);
    assert_no_flag(&out, &written);
    assert!(err.contains("codex is not on PATH"), "{err}");
}

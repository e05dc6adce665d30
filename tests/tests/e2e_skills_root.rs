//! One stable skills root per binding (`skillRoots` = `[<state>/skills]`),
//! kept by the shim manager. A session issued before a connector with skills was installed
//! finds that connector's skills under its root within 1 s of `ready`, and they are gone
//! within 1 s of the uninstall.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tutti_tests::{Runtime, RuntimeOptions, fixture_connector};

const READY: Duration = Duration::from_secs(30);
const WITHIN: Duration = Duration::from_secs(1);
const SKILL_MD: &str =
    "---\nname: release-notes\ndescription: Write release notes\n---\nUse the changelog.\n";

/// Polls `cond` every 5 ms; how long it took; panics after `within`.
fn wait_until(what: &str, within: Duration, mut cond: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    loop {
        if cond() {
            return start.elapsed();
        }
        assert!(start.elapsed() < within, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn skill_root(rt: &Runtime) -> PathBuf {
    let out = rt.tutti_ok(&["session", "issue", "--workspace", "w", "--session", "early"]);
    let binding: Value = serde_json::from_str(out.trim()).unwrap_or(Value::Null);
    let roots = binding["skillRoots"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(roots.len(), 1, "one stable skills root: {binding}");
    let root = PathBuf::from(roots[0].as_str().unwrap_or_default());
    assert_eq!(root, rt.state_dir().join("skills"), "{binding}");
    root
}

fn published(root: &Path) -> Option<String> {
    std::fs::read_to_string(root.join("release-notes").join("SKILL.md")).ok()
}

#[test]
fn a_session_issued_before_the_install_sees_skills_come_and_go_under_its_root() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let root = skill_root(&rt);
    assert_eq!(published(&root), None);

    let mut manifest = fixture_connector("notes", &["--tools", "echo"]);
    manifest["skills"] = json!(["skills/release-notes"]);
    rt.install_ok(
        &manifest,
        &[
            ("skills/release-notes/SKILL.md", SKILL_MD.as_bytes()),
            ("skills/release-notes/templates/notes.md", b"# Notes\n"),
        ],
    );
    rt.wait_status("notes", "ready", READY);
    let took = wait_until("the skill under the root", WITHIN, || {
        published(&root).as_deref() == Some(SKILL_MD)
    });
    assert_eq!(
        std::fs::read_to_string(root.join("release-notes/templates/notes.md")).ok(),
        Some("# Notes\n".to_owned()),
        "the whole skill directory is published"
    );
    eprintln!("skill published {took:?} after ready was observed");

    rt.tutti_ok(&["connector", "uninstall", "notes"]);
    wait_until("the skill gone from the root", WITHIN, || {
        !root.join("release-notes").exists()
    });
    // Only published skills live in the root: no temp or leftover entries.
    let left: Vec<_> = std::fs::read_dir(&root)
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left in the skills root: {left:?}");
}

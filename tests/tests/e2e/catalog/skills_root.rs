//! One stable skills root per binding (`skillRoots` = `[<state>/skills]`),
//! kept by the shim manager. A session issued before a connector with skills was installed
//! finds that connector's skills under its root within 1 s of `ready`, and they are gone
//! within 1 s of the uninstall.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tutti_tests::fixture::LATE_SKILL_TEXT;
use tutti_tests::{Mcp, Runtime, RuntimeOptions, fixture_connector};

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

/// An upstream that writes a file into its own skill folder after the install (the fixture's
/// `--write-at-start`, from the release copy it runs in) does not get it served: the install
/// never scanned it, so neither the skills root nor skills over MCP show it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_an_upstream_adds_to_its_skill_folder_is_not_served() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let root = tokio::task::block_in_place(|| skill_root(&rt));
    let mut manifest = fixture_connector(
        "notes",
        &[
            "--tools",
            "echo",
            "--write-at-start",
            "skills/release-notes/late.md",
        ],
    );
    manifest["mcp"]["cwd"] = json!("${release}");
    manifest["skills"] = json!(["skills/release-notes"]);
    tokio::task::block_in_place(|| {
        rt.install_ok(
            &manifest,
            &[("skills/release-notes/SKILL.md", SKILL_MD.as_bytes())],
        );
        rt.wait_status("notes", "ready", READY);
    });
    let copy = std::fs::read_dir(rt.state_dir().join("releases/notes"))
        .ok()
        .and_then(|mut d| d.find_map(|e| e.ok()))
        .map(|e| e.path().join("skills/release-notes/late.md"));
    assert_eq!(
        copy.and_then(|p| std::fs::read_to_string(p).ok())
            .as_deref(),
        Some(LATE_SKILL_TEXT),
        "the upstream wrote into its release copy's skill folder"
    );
    tokio::task::block_in_place(|| {
        wait_until("the skill under the root", WITHIN, || {
            published(&root).as_deref() == Some(SKILL_MD)
        })
    });
    assert!(
        !root.join("release-notes/late.md").exists(),
        "the added file is not published to the skills root"
    );
    let client = Mcp::legacy(rt.frontend_url(), &rt.issue_token("w", "mcp"));
    client.initialize().await;
    let (status, _, listed) = client.request("skills/list", json!({})).await;
    assert_eq!(status, 200, "{listed}");
    let uris: Vec<&str> = listed["result"]["skills"][0]["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["uri"].as_str())
        .collect();
    assert_eq!(uris, ["skill://notes/release-notes/SKILL.md"], "{listed}");
    let late = "skill://notes/release-notes/late.md";
    let (_, _, read) = client.request("resources/read", json!({"uri": late})).await;
    assert!(
        read["error"].is_object(),
        "the added file cannot be read: {read}"
    );
}

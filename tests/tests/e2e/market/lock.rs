//! `tutti connector lock`, `sync`, `outdated` and `upgrade` (SPEC §17) over the real binaries,
//! with the cheap sources: a registry remote (the HTTP fixture), a release folder, an MCP
//! bundle the test builds around the fixture server, and a `server.json` remote with a secret
//! header. A lock written on one state dir brings a fresh one to the same releases and tools;
//! an artefact hash edited in the lock refuses that connector and installs nothing of it;
//! `--prune` uninstalls what the lock does not name; no secret value reaches the lock.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use tutti_tests::{Mcp, Runtime, RuntimeOptions, fixture_bin, fixture_connector};

use super::{READY, Registry, market, text, write_document};

const SECRET: &str = "lock-secret-value-8123";

/// An `.mcpb` bundle whose server is the fixture server, written under the runtime's root.
fn build_bundle(rt: &Runtime) -> PathBuf {
    let manifest = json!({"manifest_version": "0.2", "name": "bundled", "version": "2.0.0",
        "description": "The fixture server as a bundle",
        "server": {"type": "binary", "mcp_config": {"command": fixture_bin().display().to_string(), "args": []}}});
    let path = rt.root().join("bundled.mcpb");
    let file = std::fs::File::create(&path).unwrap_or_else(|e| panic!("{e}"));
    let mut zip = zip::ZipWriter::new(file);
    let options =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    zip.start_file("manifest.json", options)
        .unwrap_or_else(|e| panic!("{e}"));
    zip.write_all(manifest.to_string().as_bytes())
        .unwrap_or_else(|e| panic!("{e}"));
    zip.finish().unwrap_or_else(|e| panic!("{e}"));
    path
}

/// Installs the four connectors on `rt`; returns the release folder of the folder install.
fn install_set(rt: &mut Runtime, remote_url: &str) -> PathBuf {
    rt.tutti_ok(&[
        "connector",
        "install",
        "registry:io.example/fixture-remote@1.0.0",
        "--yes",
    ]);
    let folder = rt.write_release(&fixture_connector("folder-one", &[]), &[]);
    rt.tutti_ok(&[
        "connector",
        "install",
        &folder.display().to_string(),
        "--yes",
    ]);
    let bundle = build_bundle(rt).display().to_string();
    rt.tutti_ok(&["connector", "install", &bundle, "--key", "bundled", "--yes"]);
    let doc = json!({"name": "io.example/keyed", "description": "A keyed remote", "version": "3.0.0",
        "remotes": [{"type": "streamable-http", "url": remote_url,
            "headers": [{"name": "X-Api-Key", "isSecret": true, "isRequired": true}]}]});
    let path = write_document(rt, &doc);
    rt.tutti_ok(&["connector", "install", &path, "--yes"]);
    rt.connect_from_env("keyed", "X_API_KEY", SECRET);
    for key in ["fixture-remote", "folder-one", "bundled", "keyed"] {
        rt.wait_status(key, "ready", READY);
    }
    folder
}

/// `tutti connector lock` into the runtime's root; the file's path and its document.
fn lock(rt: &Runtime) -> (PathBuf, Value) {
    let path = rt.root().join("tutti.lock.json");
    let out = rt.tutti_ok(&["connector", "lock", "--output", &path.display().to_string()]);
    assert!(out.contains("locked 4 connector(s)"), "{out}");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        !String::from_utf8_lossy(&bytes).contains(SECRET),
        "the lock file holds a secret value"
    );
    let doc: Value = serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{e}"));
    (path, doc)
}

fn entry<'a>(doc: &'a Value, key: &str) -> &'a Value {
    let found = doc["connectors"].as_array().into_iter().flatten();
    let mut found = found.filter(|c| c["key"] == key);
    found
        .next()
        .unwrap_or_else(|| panic!("no {key} in the lock: {doc}"))
}

fn assert_lock_entries(doc: &Value) {
    let remote = entry(doc, "fixture-remote");
    assert_eq!(remote["source"], "registry:io.example/fixture-remote@1.0.0");
    assert_eq!(remote["version"], "1.0.0");
    assert_eq!(entry(doc, "folder-one")["source"], "folder");
    let bundled = entry(doc, "bundled");
    let hash = bundled["artefacts"][0]["hash"].as_str().unwrap_or_default();
    assert!(hash.starts_with("sha256-"), "{bundled}");
    let keyed = entry(doc, "keyed");
    assert_eq!(keyed["source"], "server.json");
    assert_eq!(keyed["secretNames"], json!(["X_API_KEY"]), "{keyed}");
}

/// The sorted tool names a session of `rt` sees.
async fn tool_names(rt: &Runtime) -> Vec<String> {
    let mcp = Mcp::legacy(rt.frontend_url(), &rt.issue_token("ws", "lock"));
    mcp.initialize().await;
    let mut names: Vec<String> = mcp
        .list_tools()
        .await
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect();
    names.sort();
    names
}

/// The release SHA-256 `registry.json` records for `key`.
pub(super) fn release_hash(rt: &Runtime, key: &str) -> String {
    let bytes = std::fs::read(rt.state_dir().join("registry.json"));
    let registry: Value = serde_json::from_slice(&bytes.unwrap_or_default()).unwrap_or_default();
    let hash = registry["connectors"][key]["sha256"].as_str();
    hash.unwrap_or_else(|| panic!("{key} is not installed: {registry}"))
        .to_owned()
}

/// A second runtime on the same registry, with nothing installed.
pub(super) fn fresh_runtime(registry: &Registry) -> Runtime {
    Runtime::start(RuntimeOptions {
        env: vec![("TUTTI_REGISTRIES".into(), format!("fix={}", registry.url))],
        ..Default::default()
    })
}

fn staging_is_empty(rt: &Runtime) -> bool {
    std::fs::read_dir(rt.state_dir().join("staging"))
        .map(|d| d.count() == 0)
        .unwrap_or(true)
}

/// The lock with the bundle's artefact hash changed, beside `path`.
fn edited_lock(path: &Path, doc: &Value) -> (PathBuf, String) {
    let mut edited = doc.clone();
    let forged = format!("sha256-{}", "0".repeat(64));
    for c in edited["connectors"].as_array_mut().into_iter().flatten() {
        if c["key"] == "bundled" {
            c["artefacts"][0]["hash"] = json!(forged);
        }
    }
    let out = path.with_file_name("edited.lock.json");
    std::fs::write(&out, edited.to_string()).unwrap_or_else(|e| panic!("{e}"));
    (out, forged)
}

/// Sync of a lock whose bundle hash was edited: the bundle refused in one line naming both
/// hashes, nothing of it installed; the rest installed.
fn sync_edited(rt: &Runtime, path: &Path, doc: &Value, folder: &Path) {
    let (edited, forged) = edited_lock(path, doc);
    let real = entry(doc, "bundled")["artefacts"][0]["hash"].clone();
    let from = folder.display().to_string();
    let out = rt.tutti(&[
        "connector",
        "sync",
        &edited.display().to_string(),
        "--yes",
        "--from",
        &from,
    ]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "a forged hash synced: {stderr}");
    let refusal = stderr
        .lines()
        .find(|l| l.contains("bundled refused"))
        .unwrap_or_else(|| panic!("no refusal line: {stderr}"));
    assert!(
        refusal.contains(&format!(
            "expected {forged}, got {}",
            real.as_str().unwrap_or("?")
        )),
        "{refusal}"
    );
    assert!(
        rt.connector_status("bundled").is_none(),
        "the refused bundle is installed"
    );
    assert!(!rt.state_dir().join("releases/bundled").exists());
    assert!(staging_is_empty(rt), "a staged release is left");
    assert!(rt.connector_status("fixture-remote").is_some(), "{stderr}");
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("keyed still needs secrets X_API_KEY: tutti connector connect keyed"),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_locked_set_syncs_onto_a_fresh_runtime_and_a_forged_hash_is_refused() {
    let (mut rt, registry, remote) = market();
    let folder = install_set(&mut rt, &remote.url);
    let (path, doc) = lock(&rt);
    assert_lock_entries(&doc);

    let mut other = fresh_runtime(&registry);
    sync_edited(&other, &path, &doc, &folder);
    let from = folder.display().to_string();
    let lock_arg = path.display().to_string();
    let out = other.tutti(&["connector", "sync", &lock_arg, "--yes", "--from", &from]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // The one confirmation shows what the market adds for the rebuilt bundle.
    assert!(
        stderr.contains("Install connector bundled 2.0.0"),
        "{stderr}"
    );
    assert!(stderr.contains("  artefacts: 1 ("), "{stderr}");
    assert!(
        stderr.contains("fixture-remote is already this release; left alone"),
        "{stderr}"
    );
    other.connect_from_env("keyed", "X_API_KEY", SECRET);
    for key in ["fixture-remote", "folder-one", "bundled", "keyed"] {
        other.wait_status(key, "ready", READY);
        assert_eq!(release_hash(&rt, key), release_hash(&other, key), "{key}");
    }
    assert_eq!(tool_names(&rt).await, tool_names(&other).await);

    let again = other.tutti(&["connector", "sync", &lock_arg, "--yes", "--from", &from]);
    assert!(
        text(&again.stdout).contains("nothing to change"),
        "{}",
        text(&again.stderr)
    );

    let extra = other.write_release(&fixture_connector("extra", &[]), &[]);
    other.tutti_ok(&[
        "connector",
        "install",
        &extra.display().to_string(),
        "--yes",
    ]);
    let pruned = other.tutti_ok(&["connector", "sync", &lock_arg, "--yes", "--prune"]);
    assert!(pruned.contains("uninstalled extra"), "{pruned}");
    assert!(other.connector_status("extra").is_none());
    assert!(other.connector_status("folder-one").is_some());
}

#[test]
fn a_folder_entry_without_its_folder_is_refused_naming_from() {
    let (mut rt, registry, _remote) = market();
    let folder = rt.write_release(&fixture_connector("folder-one", &[]), &[]);
    rt.tutti_ok(&[
        "connector",
        "install",
        &folder.display().to_string(),
        "--yes",
    ]);
    let path = rt.root().join("folder.lock.json");
    rt.tutti_ok(&["connector", "lock", "-o", &path.display().to_string()]);
    let other = fresh_runtime(&registry);
    let out = other.tutti(&["connector", "sync", &path.display().to_string(), "--yes"]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("folder-one refused, nothing of it is installed: it was installed from a release folder; give the folder holding it with --from DIR"), "{stderr}");
    let changed = rt.write_release(&fixture_connector("folder-one", &["--tools", "echo"]), &[]);
    let out = other.tutti(&[
        "connector",
        "sync",
        &path.display().to_string(),
        "--yes",
        "--from",
        &changed.display().to_string(),
    ]);
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("release hash differs: expected "),
        "{stderr}"
    );
    assert!(other.connector_status("folder-one").is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn outdated_names_the_newer_registry_version_and_upgrade_moves_to_it() {
    let (rt, _registry, _remote) = market();
    rt.tutti_ok(&[
        "connector",
        "install",
        "registry:io.example/fixture-remote@1.0.0",
        "--yes",
    ]);
    rt.wait_status("fixture-remote", "ready", READY);
    let json = rt.tutti_ok(&["connector", "outdated", "--json"]);
    let found: Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
    assert_eq!(
        found,
        json!([{"key": "fixture-remote", "source": "registry:io.example/fixture-remote@1.0.0",
            "installed": "1.0.0", "latest": "1.1.0"}])
    );
    let out = rt.tutti(&["connector", "upgrade", "fixture-remote", "--yes"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("  resolved version: 1.1.0"), "{stderr}");
    assert!(
        stdout.contains("installed fixture-remote 1.1.0 (replacing 1.0.0); 1.0.0 serves until the new release is ready"),
        "{stdout}"
    );
    rt.wait_connector("fixture-remote", READY, "1.1.0 ready", |c| {
        c["version"] == "1.1.0" && c["status"] == "ready"
    });
    assert!(
        super::echo_through_frontend(&rt, "fixture-remote")
            .await
            .contains("from the market")
    );
    let same = rt.tutti_ok(&["connector", "upgrade", "fixture-remote", "--to", "1.1.0"]);
    assert_eq!(same, "fixture-remote is at 1.1.0 already\n");
    let table = rt.tutti_ok(&["connector", "outdated"]);
    assert!(table.contains("at its source's latest version"), "{table}");
    let folder = rt.tutti(&["connector", "upgrade", "nope"]);
    assert!(text(&folder.stderr).contains("no connector \"nope\" is installed"));
}

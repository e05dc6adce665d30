//! Market installs of real packages (SPEC §17), fetched from npm and PyPI (network needed):
//! `registry:` installs of an npm server (server-everything) and a PyPI server
//! (mcp-server-time) from the registry fixture confirm their launch line, resolved version and
//! artefacts, come up ready and answer through the frontend; they start again with the package
//! indexes unreachable, where a release that runs `npx` cannot; and a changed byte in a pinned
//! release copy fails its connector naming the copy (SPEC §12).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tutti_tests::{Mcp, Runtime, RuntimeOptions, repo_root};

use super::{Registry, text};

/// A first start of a pinned server on a loaded machine (node or Python loading its tree).
const READY: Duration = Duration::from_secs(90);

/// An address where no package index answers.
const DEAD_INDEX: &str = "http://127.0.0.1:9/";

/// A server of the registry fixture that installs from a package.
struct Package {
    /// Its name in the registry.
    name: &'static str,
    /// Its document in `tests/fixtures/registry/`.
    document: &'static str,
    /// The connector key the install derives from the name.
    key: &'static str,
    /// The launch line's words: the interpreter's file name, then its arguments, where
    /// `{copy}/` stands for the release copy (a word starting with it matches by prefix).
    runs: &'static [&'static str],
    /// A tool, its arguments and a text its answer contains.
    call: (&'static str, fn() -> Value, &'static str),
}

const EVERYTHING: Package = Package {
    name: "io.github.modelcontextprotocol/server-everything",
    document: "everything.json",
    key: "server-everything",
    runs: &[
        "node",
        "{copy}/node_modules/@modelcontextprotocol/server-everything/",
        "stdio",
    ],
    call: (
        "echo",
        || json!({"message": "from a pinned package"}),
        "from a pinned package",
    ),
};

const TIME: Package = Package {
    name: "io.github.modelcontextprotocol/mcp-server-time",
    document: "time.json",
    key: "mcp-server-time",
    runs: &["python3", "-I", "-B", "{copy}/tutti-launch.py"],
    call: (
        "get_current_time",
        || json!({"timezone": "UTC"}),
        "\"timezone\": \"UTC\"",
    ),
};

/// A runtime whose only registry is the fixture (its remote entries point nowhere), with
/// `env` in the kernel's environment.
fn packages_runtime(env: Vec<(String, String)>) -> (Runtime, Registry) {
    let registry = Registry::start(&format!("{DEAD_INDEX}mcp"));
    let mut env = env;
    env.push(("TUTTI_REGISTRIES".into(), format!("fix={}", registry.url)));
    let rt = Runtime::start(RuntimeOptions {
        env,
        ..Default::default()
    });
    (rt, registry)
}

/// The version the fixture's document of `package` names.
fn fixture_version(package: &Package) -> String {
    let path = repo_root()
        .join("tests/fixtures/registry")
        .join(package.document);
    let doc: Value = serde_json::from_slice(&std::fs::read(&path).unwrap_or_default())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    doc["server"]["version"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The value of the confirmation line `  {label}: …`.
fn confirmed<'a>(confirmation: &'a str, label: &str) -> &'a str {
    let prefix = format!("  {label}:");
    confirmation
        .lines()
        .find_map(|l| l.strip_prefix(&prefix).map(str::trim_start))
        .unwrap_or_else(|| panic!("no {label:?} line in the confirmation:\n{confirmation}"))
}

/// `tutti connector install registry:NAME --yes`; checks the confirmation against the release
/// copy it names and its `tutti-lock.json`. Returns the copy.
fn install_by_name(rt: &Runtime, package: &Package) -> PathBuf {
    let started = Instant::now();
    let out = rt.tutti(&[
        "connector",
        "install",
        &format!("registry:{}", package.name),
        "--yes",
    ]);
    let took = started.elapsed();
    let confirmation = text(&out.stderr);
    assert!(out.status.success(), "{confirmation}");
    let copy = PathBuf::from(confirmed(&confirmation, "in"));
    assert!(copy.starts_with(rt.state_dir().join("releases").join(package.key)));
    let version = fixture_version(package);
    assert_eq!(confirmed(&confirmation, "resolved version"), version);
    assert_launch_line(confirmed(&confirmation, "runs"), package, &copy);

    let lock_path = copy.join("tutti-lock.json");
    let lock: Value = serde_json::from_slice(&std::fs::read(&lock_path).unwrap_or_default())
        .unwrap_or_else(|e| panic!("{}: {e}", lock_path.display()));
    assert_eq!(lock["version"], version.as_str(), "{lock}");
    let artefacts = lock["artefacts"].as_array().cloned().unwrap_or_default();
    let bytes: u64 = artefacts.iter().filter_map(|a| a["size"].as_u64()).sum();
    assert!(artefacts.len() > 1, "the whole tree is pinned: {lock}");
    assert_eq!(
        confirmed(&confirmation, "artefacts"),
        format!("{} ({bytes} bytes)", artefacts.len()),
        "the confirmation counts what the lock holds"
    );
    eprintln!(
        "market install of {} {version} (resolve, fetch, unpack, install): {:.1} s; {} artefacts, {bytes} bytes fetched; release copy {} bytes",
        package.name,
        took.as_secs_f64(),
        artefacts.len(),
        tree_size(&copy)
    );
    copy
}

fn assert_launch_line(runs: &str, package: &Package, copy: &Path) {
    let words: Vec<&str> = runs.split(' ').collect();
    assert_eq!(words.len(), package.runs.len(), "runs: {runs}");
    let program = Path::new(words[0]).file_name().unwrap_or_default();
    assert_eq!(program, package.runs[0], "runs: {runs}");
    let copy = copy.display().to_string();
    for (word, expected) in words.iter().zip(package.runs).skip(1) {
        match expected.strip_prefix("{copy}") {
            Some(rest) => assert!(word.starts_with(&format!("{copy}{rest}")), "runs: {runs}"),
            None => assert_eq!(word, expected, "runs: {runs}"),
        }
    }
}

/// Bytes of every file under `dir`.
fn tree_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| match e.file_type() {
                    Ok(t) if t.is_dir() => tree_size(&e.path()),
                    _ => e.metadata().map(|m| m.len()).unwrap_or(0),
                })
                .sum()
        })
        .unwrap_or(0)
}

/// `package`'s tool called through the frontend answers with its expected text.
async fn assert_answers(rt: &Runtime, package: &Package) {
    let (tool, args, expected) = package.call;
    let token = rt.issue_token("ws", "packages");
    let mcp = Mcp::legacy(rt.frontend_url(), &token);
    mcp.initialize().await;
    let result = mcp
        .call_tool_ok(&format!("{}_{tool}", package.key), args())
        .await;
    let texts = tutti_tests::result_texts(&result);
    assert!(
        texts.contains(expected),
        "{}_{tool}: {expected:?} missing from {texts}",
        package.key
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn npm_and_pypi_servers_install_by_name_pinned_and_answer() {
    let (rt, _registry) = packages_runtime(Vec::new());
    for package in [&EVERYTHING, &TIME] {
        install_by_name(&rt, package);
        rt.wait_status(package.key, "ready", READY);
        assert_answers(&rt, package).await;
    }
}

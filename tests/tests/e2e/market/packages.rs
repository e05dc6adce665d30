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
async fn npm_and_pypi_servers_install_by_name_pinned_and_answer_and_sync_elsewhere() {
    let (rt, registry) = packages_runtime(Vec::new());
    for package in [&EVERYTHING, &TIME] {
        install_by_name(&rt, package);
        rt.wait_status(package.key, "ready", READY);
        assert_answers(&rt, package).await;
    }
    let other = super::lock::fresh_runtime(&registry);
    let lock = rt.root().join("tutti.lock.json").display().to_string();
    rt.tutti_ok(&["connector", "lock", "--output", &lock]);
    let synced = other.tutti(&["connector", "sync", &lock, "--yes"]);
    let stderr = text(&synced.stderr);
    assert!(synced.status.success(), "{stderr}");
    assert!(
        !stderr.contains("the release built here is"),
        "re-pinned otherwise: {stderr}"
    );
    for package in [&EVERYTHING, &TIME] {
        let hash = |rt: &Runtime| super::lock::release_hash(rt, package.key);
        assert_eq!(
            hash(&rt),
            hash(&other),
            "{} re-pinned otherwise",
            package.key
        );
        other.wait_status(package.key, "ready", READY);
        assert_answers(&other, package).await;
    }
}

/// A release folder that runs the npm server with `npx`, fetched at every start (unpinned).
fn npx_release(rt: &mut Runtime) -> PathBuf {
    let version = fixture_version(&EVERYTHING);
    let manifest = json!({"key": "everything-npx", "name": "Everything with npx",
        "description": "server-everything fetched by npx when it starts", "version": version,
        "mcp": {"transport": "stdio", "command": "npx",
            "args": ["-y", format!("@modelcontextprotocol/server-everything@{version}"), "stdio"]},
        "timeouts": {"startMs": 120_000}});
    rt.write_release(&manifest, &[])
}

/// The next start of `rt` sees no package index: the kernel's environment names a dead one
/// for npm, pip and uv, with no proxy. An upstream gets only PATH, HOME, LANG and TMPDIR from
/// the kernel, so the indexes are also made unreachable where npm and pip read them under
/// HOME (`~/.npmrc`, `~/.config/pip/pip.conf`), with an empty npm cache (npx must download)
/// and no fetch retries (npm fails at once instead of after a minute of retries).
fn without_package_indexes(rt: &mut Runtime, home: &Path) {
    let cache = home.join("empty-npm-cache");
    let pip = home.join(".config/pip");
    for dir in [&cache, &pip] {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    }
    let npmrc = format!(
        "registry={DEAD_INDEX}\ncache={}\nfetch-retries=0\n",
        cache.display()
    );
    let pip_conf = format!("[global]\nindex-url = {DEAD_INDEX}simple\n");
    for (path, content) in [
        (home.join(".npmrc"), npmrc),
        (pip.join("pip.conf"), pip_conf),
    ] {
        std::fs::write(&path, content).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    let options = rt.options_mut();
    for (name, value) in [
        ("npm_config_registry", DEAD_INDEX.to_owned()),
        ("npm_config_cache", cache.display().to_string()),
        ("PIP_INDEX_URL", format!("{DEAD_INDEX}simple")),
        ("UV_INDEX_URL", format!("{DEAD_INDEX}simple")),
        ("NO_PROXY", "*".to_owned()),
        ("no_proxy", "*".to_owned()),
    ] {
        options.env.push((name.to_owned(), value));
    }
    options.env_remove = ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"]
        .into_iter()
        .flat_map(|n| [n.to_owned(), n.to_ascii_lowercase()])
        .collect();
}

#[tokio::test(flavor = "multi_thread")]
async fn pinned_servers_start_without_package_indexes_where_npx_cannot() {
    let home = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let home_env = ("HOME".to_owned(), home.path().display().to_string());
    let (mut rt, _registry) = packages_runtime(vec![home_env]);
    for package in [&EVERYTHING, &TIME] {
        install_by_name(&rt, package);
    }
    let npx = npx_release(&mut rt);
    rt.tutti_ok(&["connector", "install", &npx.display().to_string(), "--yes"]);
    // Online, all three start: the unpinned one fails later for the missing index only.
    for key in [EVERYTHING.key, TIME.key, "everything-npx"] {
        rt.wait_status(key, "ready", Duration::from_secs(180));
    }
    rt.stop();

    without_package_indexes(&mut rt, home.path());
    rt.restart();
    for package in [&EVERYTHING, &TIME] {
        rt.wait_status(package.key, "ready", READY);
        assert_answers(&rt, package).await;
    }
    let status = rt.wait_connector("everything-npx", READY, "a failed start", |c| {
        c["lastError"]
            .as_str()
            .is_some_and(|e| e.contains("exited with status"))
    });
    assert_ne!(status["status"], "ready", "{status}");
    let log = rt.log("connector-everything-npx.log");
    assert!(
        log.contains("ECONNREFUSED") && log.contains(DEAD_INDEX),
        "npx tried the dead index:\n{}",
        rt.log_tail("connector-everything-npx.log", 30)
    );
}

#[test]
fn a_changed_byte_in_a_pinned_release_fails_its_connector_naming_the_copy() {
    let (mut rt, _registry) = packages_runtime(Vec::new());
    let copy = install_by_name(&rt, &EVERYTHING);
    rt.wait_status(EVERYTHING.key, "ready", READY);
    rt.stop();

    // The last byte of the server's entry file, a newline, becomes a space: still valid
    // JavaScript, so only the check of the copy's hash can stop it.
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(copy.join("connector.json")).unwrap_or_default())
            .unwrap_or_else(|e| panic!("{e}"));
    let entry = manifest["mcp"]["args"][0].as_str().unwrap_or_default();
    let entry = copy.join(entry.trim_start_matches("${release}/"));
    let mut bytes = std::fs::read(&entry).unwrap_or_else(|e| panic!("{}: {e}", entry.display()));
    assert_eq!(bytes.last(), Some(&b'\n'), "{}", entry.display());
    if let Some(last) = bytes.last_mut() {
        *last = b' ';
    }
    std::fs::write(&entry, bytes).unwrap_or_else(|e| panic!("{}: {e}", entry.display()));

    rt.restart();
    let status = rt.wait_status(EVERYTHING.key, "failed", READY);
    let why = status["lastError"].as_str().unwrap_or_default();
    assert!(
        why.contains(&copy.display().to_string()) && why.contains("does not match"),
        "the reason names the copy: {status}"
    );
    assert!(
        rt.workers().iter().all(|w| w.key != EVERYTHING.key),
        "a worker runs the changed copy"
    );
}

#[test]
fn a_package_install_shows_its_progress_before_it_is_confirmed() {
    let (rt, _registry) = packages_runtime(Vec::new());
    let source = format!(
        "npm:@modelcontextprotocol/server-everything@{}",
        fixture_version(&EVERYTHING)
    );
    let stdout = rt.tutti_ok(&["connector", "install", &source, "--yes", "--json"]);
    let events: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let phases: Vec<&str> = events
        .iter()
        .take_while(|e| e["event"] == "progress")
        .filter_map(|e| e["phase"].as_str())
        .collect();
    assert_eq!(phases.first(), Some(&"resolving"), "{stdout}");
    assert!(phases.contains(&"downloading"), "{stdout}");
    assert_eq!(phases.last(), Some(&"installing"), "{stdout}");
    let rest = &events[phases.len()..];
    assert_eq!(
        rest.len(),
        2,
        "progress, then the staged release, then the result: {stdout}"
    );
    assert_eq!(rest[0]["event"], "staged");
    assert_eq!(rest[1]["key"], EVERYTHING.key);
    let downloaded = events
        .iter()
        .filter(|e| e["phase"] == "downloading")
        .filter_map(|e| e["bytes"].as_u64())
        .max()
        .unwrap_or(0);
    assert!(downloaded > 0, "the bytes fetched are shown: {stdout}");
}

//! Pinning real packages from the real npm registry and PyPI (pinned versions), bundles built
//! here, and container images: each release starts from its own files with the package
//! registries unreachable and answers an MCP `initialize` over stdio; refusals leave nothing.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tutti_market::lock;
use tutti_market::pin::{PinEvent, pin};
use tutti_market::plan::{PackageRef, PinOptions, Pinned};

/// A closed port: anything that tries to reach a registry through it fails at once.
const CLOSED: &str = "http://127.0.0.1:9";

/// Pins `package` into `<parent>/release`; returns the result and the events seen.
fn pin_into(
    parent: &Path,
    package: &PackageRef,
    options: &PinOptions,
) -> (Result<Pinned, String>, Vec<PinEvent>) {
    let runtime = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("runtime: {e}"));
    let mut events = Vec::new();
    let started = Instant::now();
    let result = runtime.block_on(pin(package, &parent.join("release"), options, &mut |e| {
        events.push(e)
    }));
    eprintln!(
        "pinned {package:?} in {:.1} s: {} bytes in the release",
        started.elapsed().as_secs_f64(),
        tree_size(&parent.join("release"))
    );
    (result.map_err(|e| e.to_string()), events)
}

/// Bytes of every file under `dir` (0 when it does not exist).
fn tree_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => tree_size(&e.path()),
            _ => e.metadata().map(|m| m.len()).unwrap_or(0),
        })
        .sum()
}

/// Names of what is left in `dir`.
fn left_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

fn expand(text: &str, release: &Path) -> String {
    text.replace("${release}", &release.to_string_lossy())
}

/// Starts the pinned launch line in `release` with the kernel's minimal environment, npm and
/// pip pointed at a closed port, and returns the server's answer to `initialize`.
fn initialize(pinned: &Pinned, release: &Path) -> Value {
    let mut cmd = Command::new(&pinned.command);
    cmd.args(pinned.args.iter().map(|a| expand(a, release)))
        .current_dir(release)
        .env_clear()
        .envs(pinned.env.iter().map(|(k, v)| (k, expand(v, release))))
        .env("npm_config_registry", CLOSED)
        .env("PIP_INDEX_URL", CLOSED)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for name in [
        "PATH",
        "HOME",
        "LANG",
        "TMPDIR",
        "SystemRoot",
        "USERPROFILE",
        "TEMP",
    ] {
        if let Some(value) = std::env::var_os(name) {
            cmd.env(name, value);
        }
    }
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", pinned.command));
    let request = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "tutti-market-test", "version": "0"}}});
    let mut stdin = child.stdin.take().unwrap_or_else(|| panic!("no stdin"));
    writeln!(stdin, "{request}").unwrap_or_else(|e| panic!("write initialize: {e}"));
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Ok(message) = serde_json::from_str::<Value>(&line)
                && message["id"] == 1
            {
                let _ = tx.send(message);
                return;
            }
        }
    });
    let started = Instant::now();
    let answer = rx.recv_timeout(Duration::from_secs(60));
    eprintln!(
        "{} answered initialize after {:.1} s",
        pinned.command,
        started.elapsed().as_secs_f64()
    );
    let _ = child.kill();
    let _ = child.wait();
    drop(stdin);
    answer.unwrap_or_else(|e| panic!("no answer to initialize from {pinned:?}: {e}"))
}

/// Asserts the release's lock names every artefact with a URL, a hash and a size.
fn assert_locked(release: &Path, pinned: &Pinned, hash_prefix: &str) {
    let lock = lock::read(release).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(lock.artefacts, pinned.artefacts);
    assert_eq!(lock.interpreter, pinned.interpreter);
    assert!(lock.interpreter.is_some(), "{lock:?}");
    for a in &lock.artefacts {
        assert!(a.url.starts_with("https://"), "{a:?}");
        assert!(a.hash.starts_with(hash_prefix), "{a:?}");
        assert!(a.size > 0, "{a:?}");
    }
    eprintln!(
        "{} artefacts, {} bytes fetched",
        lock.artefacts.len(),
        lock.total_size()
    );
}

#[test]
fn an_npm_package_pinned_starts_from_its_release_with_npm_unreachable() {
    let parent = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let package = PackageRef::Npm {
        name: "@modelcontextprotocol/server-memory".into(),
        version: "2026.8.31".into(),
    };
    let (pinned, events) = pin_into(parent.path(), &package, &PinOptions::default());
    let pinned = pinned.unwrap_or_else(|e| panic!("{e}"));
    let release = parent.path().join("release");
    assert_eq!(pinned.command, "node");
    assert_eq!(pinned.version, "2026.8.31");
    assert_eq!(
        pinned.args,
        vec!["${release}/node_modules/@modelcontextprotocol/server-memory/dist/index.js"]
    );
    assert!(pinned.artefacts.len() > 10, "{:?}", pinned.artefacts);
    assert_locked(&release, &pinned, "sha512-");
    assert!(matches!(events.first(), Some(PinEvent::Resolving { .. })));
    assert!(matches!(events.last(), Some(PinEvent::Installing { .. })));
    let answer = initialize(&pinned, &release);
    assert!(
        answer["result"]["serverInfo"]["name"].is_string(),
        "{answer}"
    );
}

#[test]
fn a_pypi_package_pinned_starts_from_its_release_with_the_index_unreachable() {
    let parent = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let package = PackageRef::Pypi {
        name: "mcp-server-time".into(),
        version: "2026.10.19".into(),
    };
    let (pinned, _) = pin_into(parent.path(), &package, &PinOptions::default());
    let pinned = pinned.unwrap_or_else(|e| panic!("{e}"));
    let release = parent.path().join("release");
    assert!(pinned.env.is_empty(), "{:?}", pinned.env);
    assert!(pinned.artefacts.iter().all(|a| a.url.ends_with(".whl")));
    assert!(
        pinned.artefacts.iter().any(|a| a.name == "mcp-server-time"),
        "{:?}",
        pinned.artefacts
    );
    assert_locked(&release, &pinned, "sha256-");
    let answer = initialize(&pinned, &release);
    assert_eq!(
        answer["result"]["serverInfo"]["name"], "mcp-time",
        "{answer}"
    );
}

#[test]
fn a_pypi_package_without_a_version_pins_the_latest_and_names_its_version() {
    let parent = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    // pyflakes: one small wheel without dependencies, with a console script of its name.
    let package = PackageRef::Pypi {
        name: "pyflakes".into(),
        version: String::new(),
    };
    let (pinned, _) = pin_into(parent.path(), &package, &PinOptions::default());
    let pinned = pinned.unwrap_or_else(|e| panic!("{e}"));
    let artefact = pinned.artefacts.iter().find(|a| a.name == "pyflakes");
    let artefact = artefact.unwrap_or_else(|| panic!("{:?}", pinned.artefacts));
    assert!(!pinned.version.is_empty(), "{pinned:?}");
    assert_eq!(pinned.version, artefact.version);
    let lock = lock::read(&parent.path().join("release")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(lock.version, pinned.version);
}

#[test]
fn a_pypi_package_without_a_wheel_is_refused_naming_sdist_leaving_nothing() {
    let parent = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    // docopt 0.6.2 is published as a source distribution only.
    let package = PackageRef::Pypi {
        name: "docopt".into(),
        version: "0.6.2".into(),
    };
    let (result, _) = pin_into(parent.path(), &package, &PinOptions::default());
    let err = result.err().unwrap_or_default();
    eprintln!("{err}");
    assert!(
        err.starts_with("no wheel of docopt==0.6.2 for this platform and Python 3.")
            && err.ends_with("allow building from source with --allow-sdist")
            && !err.contains('\n'),
        "{err}"
    );
    assert!(
        left_in(parent.path()).is_empty(),
        "{:?}",
        left_in(parent.path())
    );
}

/// esbuild's postinstall script: a real package of the npm registry that has one.
fn package_with_install_script() -> PackageRef {
    PackageRef::Npm {
        name: "esbuild".into(),
        version: "0.25.0".into(),
    }
}

#[test]
fn an_npm_package_with_install_scripts_is_refused_by_name_leaving_nothing() {
    let parent = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let (result, _) = pin_into(
        parent.path(),
        &package_with_install_script(),
        &PinOptions::default(),
    );
    let err = result.err().unwrap_or_default();
    assert!(
        err.starts_with("npm package esbuild has install scripts, refused:")
            && err.contains("--allow-scripts"),
        "{err}"
    );
    assert!(
        left_in(parent.path()).is_empty(),
        "{:?}",
        left_in(parent.path())
    );
}

#[test]
fn an_npm_package_with_install_scripts_allowed_is_pinned_and_its_scripts_recorded() {
    let parent = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let options = PinOptions {
        allow_scripts: true,
        ..PinOptions::default()
    };
    let (result, _) = pin_into(parent.path(), &package_with_install_script(), &options);
    let pinned = result.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(pinned.scripts, vec!["esbuild"]);
    let release = parent.path().join("release");
    let lock = lock::read(&release).unwrap_or_else(|e| panic!("{e}"));
    assert!(lock.scripts.allowed);
    // esbuild's postinstall replaces its JavaScript bin shim with the platform's executable.
    let bin = std::fs::read(release.join("node_modules/esbuild/bin/esbuild"))
        .unwrap_or_else(|e| panic!("esbuild bin: {e}"));
    if cfg!(unix) {
        assert!(
            !bin.starts_with(b"#!"),
            "the postinstall script did not run"
        );
    }
    assert_eq!(lock.scripts.packages, vec!["esbuild"]);
}

/// A tiny stdio MCP server in Node that answers `initialize` with `bundle-$GREETING`.
const BUNDLE_SERVER: &str = r#"const rl = require('readline').createInterface({ input: process.stdin });
rl.on('line', (line) => {
  const msg = JSON.parse(line);
  if (msg.method !== 'initialize') return;
  const serverInfo = { name: 'bundle-' + process.env.GREETING, version: '1.0.0' };
  const result = { protocolVersion: msg.params.protocolVersion, capabilities: {}, serverInfo };
  process.stdout.write(JSON.stringify({ jsonrpc: '2.0', id: msg.id, result }) + '\n');
});
"#;

/// A bundle zip of `entries` (name, content); returns its path and SHA-256.
fn build_bundle(dir: &Path, entries: &[(&str, &str)]) -> (PathBuf, String) {
    let path = dir.join("server.mcpb");
    let file = std::fs::File::create(&path).unwrap_or_else(|e| panic!("create: {e}"));
    let mut zip = zip::ZipWriter::new(file);
    for (name, content) in entries {
        zip.start_file(*name, zip::write::SimpleFileOptions::default())
            .unwrap_or_else(|e| panic!("zip {name}: {e}"));
        zip.write_all(content.as_bytes())
            .unwrap_or_else(|e| panic!("zip {name}: {e}"));
    }
    zip.finish().unwrap_or_else(|e| panic!("zip: {e}"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("read: {e}"));
    (path, format!("{:x}", Sha256::digest(&bytes)))
}

fn bundle_manifest() -> String {
    json!({
        "manifest_version": "0.3", "name": "greeter", "version": "1.2.0",
        "server": {"type": "node", "entry_point": "server/index.js", "mcp_config": {
            "command": "node", "args": ["${__dirname}/server/index.js"],
            "env": {"GREETING": "${user_config.greeting}", "API_KEY": "${user_config.key}"}}},
        "user_config": {
            "greeting": {"type": "string", "default": "hello"},
            "key": {"type": "string", "sensitive": true}}
    })
    .to_string()
}

#[test]
fn a_bundle_checked_against_its_hash_is_unpacked_and_answers_initialize() {
    let parent = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let manifest = bundle_manifest();
    let source = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let (path, sha256) = build_bundle(
        source.path(),
        &[
            ("manifest.json", &manifest),
            ("server/index.js", BUNDLE_SERVER),
        ],
    );
    let package = PackageRef::Mcpb {
        location: path.to_string_lossy().into_owned(),
        sha256: Some(sha256.clone()),
    };
    let (result, _) = pin_into(parent.path(), &package, &PinOptions::default());
    let pinned = result.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(pinned.secrets, vec!["API_KEY"]);
    assert_eq!(pinned.version, "1.2.0");
    assert_eq!(pinned.artefacts[0].hash, format!("sha256-{sha256}"));
    let answer = initialize(&pinned, &parent.path().join("release"));
    assert_eq!(
        answer["result"]["serverInfo"]["name"], "bundle-hello",
        "{answer}"
    );
}

#[test]
fn a_bundle_with_the_wrong_hash_is_refused_naming_both_and_leaving_nothing() {
    let parent = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let source = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let manifest = bundle_manifest();
    let (path, sha256) = build_bundle(
        source.path(),
        &[
            ("manifest.json", &manifest),
            ("server/index.js", BUNDLE_SERVER),
        ],
    );
    let wrong = "0".repeat(64);
    let package = PackageRef::Mcpb {
        location: path.to_string_lossy().into_owned(),
        sha256: Some(wrong.clone()),
    };
    let (result, _) = pin_into(parent.path(), &package, &PinOptions::default());
    let err = result.err().unwrap_or_default();
    assert!(
        err.contains(&format!(
            "hash mismatch: expected sha256-{wrong}, got sha256-{sha256}"
        )),
        "{err}"
    );
    assert!(
        left_in(parent.path()).is_empty(),
        "{:?}",
        left_in(parent.path())
    );
}

#[test]
fn a_bundle_entry_leaving_the_folder_is_refused_leaving_nothing() {
    let parent = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let source = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let manifest = bundle_manifest();
    let (path, _) = build_bundle(
        source.path(),
        &[
            ("manifest.json", &manifest),
            ("../escaped.js", BUNDLE_SERVER),
        ],
    );
    let package = PackageRef::Mcpb {
        location: path.to_string_lossy().into_owned(),
        sha256: None,
    };
    let (result, _) = pin_into(parent.path(), &package, &PinOptions::default());
    let err = result.err().unwrap_or_default();
    assert!(
        err.contains("\"../escaped.js\" leaves the bundle folder"),
        "{err}"
    );
    assert!(
        left_in(parent.path()).is_empty(),
        "{:?}",
        left_in(parent.path())
    );
}

#[test]
fn a_bundle_url_without_a_hash_is_refused() {
    let parent = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let package = PackageRef::Mcpb {
        location: "https://example.com/x.mcpb".into(),
        sha256: None,
    };
    let (result, _) = pin_into(parent.path(), &package, &PinOptions::default());
    let err = result.err().unwrap_or_default();
    assert!(err.contains("a bundle URL needs its SHA-256"), "{err}");
    assert!(left_in(parent.path()).is_empty());
}

/// Whether docker or podman on PATH answers `info` (can run containers).
fn engine_answers() -> bool {
    ["docker", "podman"].iter().any(|engine| {
        Command::new(engine)
            .arg("info")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

#[test]
fn an_image_is_pinned_by_digest_or_refused_in_one_line_without_an_engine() {
    let parent = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let package = PackageRef::Oci {
        image: "hello-world:latest".into(),
    };
    let (result, _) = pin_into(parent.path(), &package, &PinOptions::default());
    if engine_answers() {
        let pinned = result.unwrap_or_else(|e| panic!("{e}"));
        let image = pinned.args.last().cloned().unwrap_or_default();
        assert!(image.contains("hello-world@sha256:"), "{:?}", pinned.args);
        assert!(pinned.args.contains(&"--pull=never".to_string()));
    } else {
        let err = result.err().unwrap_or_default();
        eprintln!("{err}");
        assert!(
            err.starts_with(
                "container engine not found: no docker or podman on PATH can run containers"
            ) && !err.contains('\n'),
            "{err}"
        );
        assert!(left_in(parent.path()).is_empty());
    }
}

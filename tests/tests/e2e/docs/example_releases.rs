//! docs/connector.schema.json agrees with the install's own checks, and the example releases
//! in docs/examples/ are valid and work: every valid manifest (the examples, the fixture's,
//! the demo's) passes the schema and installs; every invalid one fails both. The npx example
//! is fetched from npm and the venv example runs from the test venv, each installed, probed
//! and serving; the uvx example too where `uvx` is on PATH.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use tutti_tests::{Runtime, RuntimeOptions, repo_root, require_python_venv};

fn read_json(path: &Path) -> Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn schema() -> jsonschema::Validator {
    let schema = read_json(&repo_root().join("docs/connector.schema.json"));
    jsonschema::validator_for(&schema).unwrap_or_else(|e| panic!("the schema itself: {e}"))
}

/// Each example's folder name and manifest.
fn examples() -> Vec<(String, Value)> {
    let dir = repo_root().join("docs/examples");
    let mut out: Vec<(String, Value)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path().join("connector.json"))
        .filter(|p| p.is_file())
        .map(|p| {
            let name = p
                .parent()
                .and_then(Path::file_name)
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            (name, read_json(&p))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn schema_errors(validator: &jsonschema::Validator, manifest: &Value) -> Vec<String> {
    validator
        .iter_errors(manifest)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

/// Whether `program` is found on this process's PATH (the runtime's kernel inherits it).
fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

/// The venv example with its program in the test venv instead of /opt/mcp/venv.
fn venv_example(manifest: &Value) -> Value {
    let mut m = manifest.clone();
    let program = require_python_venv().join("bin").join("mcp-server-time");
    m["mcp"]["command"] = Value::String(program.to_string_lossy().into_owned());
    m
}

#[test]
fn every_example_release_matches_the_schema() {
    let validator = schema();
    let examples = examples();
    let names: Vec<&str> = examples.iter().map(|(n, _)| n.as_str()).collect();
    for kind in ["npx", "uvx", "venv", "docker", "remote", "oauth"] {
        assert!(
            names.iter().any(|n| n.contains(kind)),
            "no {kind} example in {names:?}"
        );
    }
    for (name, manifest) in &examples {
        let errors = schema_errors(&validator, manifest);
        assert!(errors.is_empty(), "docs/examples/{name}: {errors:?}");
    }
}

/// Manifests install refuses, each for one reason, paired with that reason.
fn invalid_manifests() -> Vec<(&'static str, Value)> {
    let base = |mcp: Value| json!({"key": "bad", "name": "Bad", "description": "d", "version": "1", "mcp": mcp});
    let stdio = json!({"transport": "stdio", "command": "node"});
    let with = |field: &str, value: Value| {
        let mut m = base(stdio.clone());
        m[field] = value;
        m
    };
    vec![
        (
            "a command line in command",
            base(
                json!({"transport": "stdio", "command": "npx -y @modelcontextprotocol/server-memory"}),
            ),
        ),
        ("a key with capitals", with("key", json!("Bad_Key"))),
        ("the reserved key", with("key", json!("tutti"))),
        ("no name", {
            let mut m = base(stdio.clone());
            m.as_object_mut().map(|o| o.remove("name"));
            m
        }),
        ("a version that is a number", with("version", json!(3))),
        (
            "an unknown transport",
            base(json!({"transport": "ftp", "url": "ftp://x"})),
        ),
        (
            "no interface",
            json!({"key": "bad", "name": "B", "description": "d", "version": "1"}),
        ),
        (
            "bearer without a secret",
            base(
                json!({"transport": "http", "url": "https://x.test/mcp", "auth": {"kind": "bearer"}}),
            ),
        ),
        (
            "a header name with a space",
            base(
                json!({"transport": "http", "url": "https://x.test/mcp", "auth": {"kind": "header", "header": "X Api", "secret": "K"}}),
            ),
        ),
        (
            "a url that is not http",
            base(json!({"transport": "http", "url": "ftp://x.test/mcp"})),
        ),
        (
            "an oauth client secret without a client id",
            base(
                json!({"transport": "http", "url": "https://x.test/mcp", "auth": {"kind": "oauth", "clientSecret": "S"}}),
            ),
        ),
        (
            "a zero start timeout",
            with("timeouts", json!({"startMs": 0})),
        ),
        (
            "an unknown risk level",
            with("toolRisk", json!({"t": "extreme"})),
        ),
        (
            "an unknown circuit setting",
            with("circuit", json!({"failurez": 3})),
        ),
        (
            "a skill outside the release",
            with("skills", json!(["../elsewhere"])),
        ),
    ]
}

#[test]
fn the_schema_and_install_agree_on_valid_and_invalid_manifests() {
    let validator = schema();
    let mut rt = Runtime::start(RuntimeOptions {
        demo: true,
        ..RuntimeOptions::default()
    });
    let mut valid: Vec<(String, Value)> = Vec::new();
    let mut fixture = rt.private_fixture_connector("fixture", &["--tools", "echo"]);
    valid.push(("the fixture".into(), fixture.clone()));
    fixture["key"] = json!("fixture-schema");
    fixture["$schema"] = json!("../../docs/connector.schema.json");
    valid.push(("a manifest with $schema".into(), fixture));
    // The demo's releases: installed again from their own folders (same release: a restart).
    let demo = rt.state_dir().join("demo");
    for entry in std::fs::read_dir(&demo).unwrap_or_else(|e| panic!("{}: {e}", demo.display())) {
        let dir = entry.unwrap_or_else(|e| panic!("{e}")).path();
        let errors = schema_errors(&validator, &read_json(&dir.join("connector.json")));
        assert!(errors.is_empty(), "{}: {errors:?}", dir.display());
        rt.tutti_ok(&["connector", "install", &dir.to_string_lossy(), "--yes"]);
    }
    for (name, manifest) in examples() {
        let manifest = if name.contains("venv") {
            venv_example(&manifest)
        } else {
            manifest
        };
        let program = manifest["mcp"]["command"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let runnable =
            manifest["mcp"]["transport"] == "http" || program.starts_with('/') || on_path(&program);
        if runnable {
            valid.push((format!("docs/examples/{name}"), manifest));
        }
    }
    for (name, manifest) in &valid {
        let errors = schema_errors(&validator, manifest);
        assert!(
            errors.is_empty(),
            "{name}: the schema refuses a valid manifest: {errors:?}"
        );
        let out = rt.install_dir(manifest, &[]);
        assert!(
            out.status.success(),
            "{name}: install refuses a manifest the schema accepts: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for (why, manifest) in invalid_manifests() {
        assert!(
            !schema_errors(&validator, &manifest).is_empty(),
            "the schema accepts {why}: {manifest}"
        );
        let out = rt.install_dir(&manifest, &[]);
        assert!(!out.status.success(), "install accepts {why}: {manifest}");
    }
}

/// Installs `manifest`, waits until it serves `tool`, and probes the installed connector.
fn install_probe_and_serve(rt: &mut Runtime, manifest: &Value, tool: &str, ready: Duration) {
    rt.install_ok(manifest, &[]);
    let key = manifest["key"].as_str().unwrap_or_default().to_owned();
    rt.wait_status(&key, "ready", ready);
    let probe = rt.tutti_ok(&["connector", "probe", &key]);
    assert!(probe.contains(tool), "`probe {key}` lacks {tool}:\n{probe}");
    let available = rt.tutti_ok(&["connector", "available", "--json"]);
    assert!(available.contains(&format!("\"{key}_\"")), "{available}");
}

#[test]
fn the_npx_memory_example_is_fetched_from_npm_and_serves_its_tools() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let (_, manifest) = examples()
        .into_iter()
        .find(|(n, _)| n == "memory-npx")
        .unwrap_or_else(|| panic!("docs/examples/memory-npx is missing"));
    install_probe_and_serve(
        &mut rt,
        &manifest,
        "memory_create_entities",
        Duration::from_secs(180),
    );
}

#[test]
fn the_python_examples_run_from_a_venv_and_with_uvx_where_it_is_installed() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let all = examples();
    let find = |name: &str| -> Value {
        all.iter()
            .find(|(n, _)| n == name)
            .map(|(_, m)| m.clone())
            .unwrap_or_else(|| panic!("docs/examples/{name} is missing"))
    };
    let venv = venv_example(&find("time-venv"));
    install_probe_and_serve(
        &mut rt,
        &venv,
        "time-venv_get_current_time",
        Duration::from_secs(60),
    );
    if on_path("uvx") {
        install_probe_and_serve(
            &mut rt,
            &find("time-uvx"),
            "time_get_current_time",
            Duration::from_secs(180),
        );
    } else {
        eprintln!("uvx is not on PATH: docs/examples/time-uvx is checked against the schema only");
    }
}

/// Where the schema file sits relative to an example (its `$schema` line).
#[test]
fn every_example_names_the_schema_by_a_path_that_exists() {
    for (name, manifest) in examples() {
        let rel = manifest["$schema"].as_str().unwrap_or_default();
        let path: PathBuf = repo_root().join("docs/examples").join(&name).join(rel);
        assert!(
            path.is_file(),
            "docs/examples/{name}: $schema {rel:?} does not exist"
        );
    }
}

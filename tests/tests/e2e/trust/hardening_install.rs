//! Hardening at install time: the launch allowlist judged by real paths, injection
//! variables in `mcp.env` and secret names, manifest and skill files opened without following
//! links and with size caps, field size limits, escapes of
//! format and control characters in the install confirmation, `status` and `available`.
//! Each test runs the attack of the security review against the real runtime.
#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tutti_tests::{Runtime, RuntimeOptions, fixture_bin, fixture_connector};

const READY: Duration = Duration::from_secs(20);

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `tutti connector install DIR --yes EXTRA…`.
fn install(rt: &Runtime, dir: &Path, extra: &[&str]) -> Output {
    let dir = dir.to_string_lossy().into_owned();
    let mut args = vec!["connector", "install", dir.as_str(), "--yes"];
    args.extend_from_slice(extra);
    rt.tutti(&args)
}

/// Asserts `out` is a refusal naming `needles`, and that nothing of `key` was installed.
fn assert_refused(rt: &Runtime, out: &Output, key: &str, needles: &[&str]) {
    let err = stderr(out);
    assert!(
        !out.status.success(),
        "the install must be refused\nstderr: {err}"
    );
    for needle in needles {
        assert!(err.contains(needle), "missing {needle:?} in:\n{err}");
    }
    assert!(
        !rt.state_dir().join("releases").join(key).exists(),
        "a refused install wrote a release copy"
    );
    assert!(
        rt.connector_status(key).is_none(),
        "a refused install registered {key}"
    );
}

fn script_running_the_fixture() -> String {
    format!("#!/bin/sh\nexec {} --tools echo\n", fixture_bin().display())
}

fn registry(rt: &Runtime) -> Value {
    let text = std::fs::read(rt.state_dir().join("registry.json")).expect("registry.json");
    serde_json::from_slice(&text).expect("registry JSON")
}

fn audit_records(rt: &Runtime, kind: &str) -> Vec<Value> {
    rt.audit_lines()
        .into_iter()
        .filter(|r| r["event"] == kind)
        .collect()
}

// === The launch allowlist ===

#[test]
fn dot_dot_out_of_the_release_is_judged_where_it_really_leads() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    // Enough `..` to reach `/` from any release copy, then /bin/sh: "inside the release" by
    // its prefix only.
    let command = format!("${{release}}/{}bin/sh", "../".repeat(40));
    let manifest = json!({
        "key": "dotdot", "name": "Dot dot", "description": "escapes its release",
        "version": "1.0.0",
        "mcp": {"transport": "stdio", "command": command, "args": ["run.sh"]},
    });
    let out = rt.install_dir(
        &manifest,
        &[("run.sh", script_running_the_fixture().as_bytes())],
    );
    assert_refused(
        &rt,
        &out,
        "dotdot",
        &["connector.json: mcp.command: ", "launch allowlist"],
    );
}

#[test]
fn a_path_into_the_source_folder_never_runs() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let script = script_running_the_fixture();
    let placeholder = json!({"key": "srcpath"});
    let dir = rt.write_release(&placeholder, &[("bin/server", script.as_bytes())]);
    // The source file by its absolute path: edited after install, the edit would run.
    let manifest = json!({
        "key": "srcpath", "name": "Source path", "description": "runs its source folder",
        "version": "1.0.0",
        "mcp": {"transport": "stdio", "command": dir.join("bin/server").to_string_lossy(), "args": []},
    });
    std::fs::write(dir.join("connector.json"), manifest.to_string()).expect("write manifest");
    let out = install(&rt, &dir, &[]);
    assert_refused(
        &rt,
        &out,
        "srcpath",
        &["launch allowlist", "${release}/bin/server"],
    );
    // Not even an explicit allowance of that file makes the source folder run.
    let by_path = dir.join("bin/server").to_string_lossy().into_owned();
    let out = install(&rt, &dir, &["--allow-command", &by_path]);
    assert_refused(&rt, &out, "srcpath", &["launch allowlist"]);

    // Written as `${release}/bin/server` it installs and runs from the hashed copy.
    let manifest = json!({
        "key": "srcpath", "name": "Source path", "description": "runs its copy",
        "version": "1.0.0",
        "mcp": {"transport": "stdio", "command": "${release}/bin/server", "args": []},
    });
    std::fs::write(dir.join("connector.json"), manifest.to_string()).expect("write manifest");
    let out = install(&rt, &dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let copy = rt.state_dir().join("releases/srcpath");
    assert!(
        stderr(&out).contains(&copy.to_string_lossy().into_owned()),
        "the confirmation must show the copy's path: {}",
        stderr(&out)
    );
    rt.wait_status("srcpath", "ready", READY);
}

#[test]
fn a_file_merely_named_like_an_allowlisted_program_is_not_allowlisted() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let evil = rt.root().join("evil");
    std::fs::create_dir_all(&evil).expect("mkdir");
    let node = evil.join("node");
    std::fs::write(&node, script_running_the_fixture()).expect("write");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let manifest = json!({
        "key": "fakenode", "name": "Fake node", "description": "a program named node",
        "version": "1.0.0",
        "mcp": {"transport": "stdio", "command": node.to_string_lossy(), "args": []},
    });
    let out = rt.install_dir(&manifest, &[]);
    assert_refused(
        &rt,
        &out,
        "fakenode",
        &["launch allowlist", "\"node\" stands only for"],
    );
}

/// A release whose command is the bare name `sh`, running a script that runs the fixture.
fn sh_release(rt: &mut Runtime, key: &str, name: &str) -> std::path::PathBuf {
    let manifest = json!({
        "key": key, "name": name, "description": "sh from PATH",
        "version": "1.0.0",
        "mcp": {"transport": "stdio", "command": "sh", "args": ["run.sh"]},
    });
    rt.write_release(
        &manifest,
        &[("run.sh", script_running_the_fixture().as_bytes())],
    )
}

#[test]
fn allowlisted_programs_still_install_and_run() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    // A bare name, allowed for this install, found on PATH and run by that path.
    let dir = sh_release(&mut rt, "baresh", "Bare sh");
    let refused = install(&rt, &dir, &[]);
    assert_refused(&rt, &refused, "baresh", &["--allow-command sh"]);
    let out = install(&rt, &dir, &["--allow-command", "sh"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // The shipped fixture (runtime dir) and an owner-allowed file by path.
    rt.install_ok(&fixture_connector("shipped", &["--tools", "echo"]), &[]);
    let private = rt.private_fixture_connector("private", &["--tools", "echo"]);
    rt.install_ok(&private, &[]);
    for key in ["baresh", "shipped", "private"] {
        rt.wait_status(key, "ready", READY);
    }
}

#[test]
fn the_allowlist_is_checked_again_at_every_launch() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let dir = sh_release(&mut rt, "again", "Again");
    let out = install(&rt, &dir, &["--allow-command", "sh"]);
    assert!(out.status.success(), "{}", stderr(&out));
    rt.wait_status("again", "ready", READY);
    // The allowance is withdrawn (here: by hand, while the kernel is down). The installed
    // release must not start on the strength of the old check.
    assert!(rt.stop().is_some(), "the runtime was running");
    let path = rt.state_dir().join("registry.json");
    let mut reg = registry(&rt);
    reg["connectors"]["again"]["allowCommands"] = json!([]);
    std::fs::write(&path, reg.to_string()).expect("write registry");
    rt.restart();
    let refused = rt.wait_connector("again", READY, "a start refused by the allowlist", |c| {
        c["lastError"]
            .as_str()
            .is_some_and(|e| e.contains("launch allowlist"))
    });
    assert_ne!(refused["status"], "ready", "{refused}");
}

// === Injection variables ===

#[test]
fn an_injection_variable_in_env_needs_allow_env_and_is_shown() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let mut manifest = fixture_connector("pyenv", &["--tools", "env"]);
    manifest["mcp"]["env"] = json!({"PYTHONPATH": "/tmp/elsewhere", "LOG_LEVEL": "warn"});
    let dir = rt.write_release(&manifest, &[]);
    let out = install(&rt, &dir, &[]);
    assert_refused(
        &rt,
        &out,
        "pyenv",
        &["mcp.env.PYTHONPATH", "--allow-env PYTHONPATH"],
    );

    // `probe DIR` starts the release too: the same rule.
    let dir_arg = dir.to_string_lossy().into_owned();
    let probe = rt.tutti(&["connector", "probe", &dir_arg]);
    assert!(!probe.status.success(), "probe must refuse it");
    assert!(
        stderr(&probe).contains("--allow-env PYTHONPATH"),
        "{}",
        stderr(&probe)
    );
    rt.tutti_ok(&[
        "connector",
        "probe",
        &dir_arg,
        "--allow-env",
        "PYTHONPATH",
        "--yes",
    ]);

    let out = install(&rt, &dir, &["--allow-env", "PYTHONPATH"]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    for shown in [
        "env:  LOG_LEVEL=warn",
        "env:  PYTHONPATH=/tmp/elsewhere",
        "allowed injection variables: PYTHONPATH",
    ] {
        assert!(
            err.contains(shown),
            "the confirmation lacks {shown:?}:\n{err}"
        );
    }
    assert_eq!(
        registry(&rt)["connectors"]["pyenv"]["allowEnv"],
        json!(["PYTHONPATH"])
    );
    rt.wait_status("pyenv", "ready", READY);
    // The audit writer is asynchronous: its install record is there by the time the worker
    // was launched and committed, but give it a moment.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let installs = audit_records(&rt, "install");
        if installs
            .iter()
            .any(|r| r["connector"] == "pyenv" && r["allowEnv"] == json!(["PYTHONPATH"]))
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the audit install record must carry allowEnv: {installs:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_secret_named_like_a_loader_variable_is_refused() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let mut manifest = fixture_connector("preload", &["--tools", "echo"]);
    manifest["mcp"]["secrets"] = json!(["API_TOKEN", "LD_PRELOAD"]);
    let out = rt.install_dir(&manifest, &[]);
    assert_refused(
        &rt,
        &out,
        "preload",
        &["mcp.secrets[1]", "LD_PRELOAD", "--allow-env LD_PRELOAD"],
    );
    let mut manifest = fixture_connector("clipath", &["--tools", "echo"]);
    manifest["cli"] = json!({"entrypoint": "run.sh", "secrets": ["PATH"]});
    let out = rt.install_dir(
        &manifest,
        &[("run.sh", script_running_the_fixture().as_bytes())],
    );
    assert_refused(
        &rt,
        &out,
        "clipath",
        &["cli.secrets[0]", "--allow-env PATH"],
    );
}

// === Release files are not followed, typed before reading, and capped ===

/// How long a refusal that must come "at once" may take on a loaded machine.
const AT_ONCE: Duration = Duration::from_secs(10);

/// Runs `tutti ARGS…` and fails the test if it has not returned within [`AT_ONCE`] (it is
/// killed then, so a hung kernel thread shows as a failure, not as a hung test).
fn tutti_at_once(rt: &Runtime, args: &[&str]) -> Output {
    let mut child = rt
        .tutti_cmd(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn tutti");
    let started = Instant::now();
    loop {
        match child.try_wait().expect("wait tutti") {
            Some(_) => return child.wait_with_output().expect("tutti output"),
            None if started.elapsed() > AT_ONCE => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "`tutti {}` did not return within {AT_ONCE:?}",
                    args.join(" ")
                );
            }
            None => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

fn install_at_once(rt: &Runtime, dir: &Path) -> Output {
    let dir = dir.to_string_lossy().into_owned();
    tutti_at_once(rt, &["connector", "install", &dir, "--yes"])
}

/// A release dir whose `connector.json` is then replaced by `make(path)`.
fn release_with_manifest(rt: &mut Runtime, key: &str, make: impl FnOnce(&Path)) -> PathBuf {
    let dir = rt.write_release(&fixture_connector(key, &["--tools", "echo"]), &[]);
    let manifest = dir.join("connector.json");
    std::fs::remove_file(&manifest).expect("rm connector.json");
    make(&manifest);
    dir
}

#[test]
fn a_symlinked_manifest_is_refused_at_once() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    // → /dev/zero: reading it never ends (the kernel grew to 860 MB).
    let dir = release_with_manifest(&mut rt, "zero", |m| {
        std::os::unix::fs::symlink("/dev/zero", m).expect("symlink");
    });
    let out = install_at_once(&rt, &dir);
    assert_refused(&rt, &out, "zero", &["connector.json: ", "symbolic link"]);
    let dir_arg = dir.to_string_lossy().into_owned();
    let probe = tutti_at_once(&rt, &["connector", "probe", &dir_arg]);
    assert!(!probe.status.success(), "probe must refuse it");
    assert!(
        stderr(&probe).contains("symbolic link"),
        "{}",
        stderr(&probe)
    );

    // → a regular file outside the release: what is read would not be what is hashed.
    let elsewhere = rt.root().join("elsewhere.json");
    std::fs::write(
        &elsewhere,
        fixture_connector("linked", &["--tools", "echo"]).to_string(),
    )
    .expect("write");
    let dir = release_with_manifest(&mut rt, "linked", |m| {
        std::os::unix::fs::symlink(&elsewhere, m).expect("symlink");
    });
    let out = install_at_once(&rt, &dir);
    assert_refused(&rt, &out, "linked", &["connector.json: ", "symbolic link"]);
}

#[test]
fn a_fifo_manifest_is_refused_at_once() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let dir = release_with_manifest(&mut rt, "fifo", |m| {
        nix::unistd::mkfifo(m, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    });
    let out = install_at_once(&rt, &dir);
    assert_refused(
        &rt,
        &out,
        "fifo",
        &["connector.json: ", "not a regular file"],
    );
    // The kernel is not stuck: the next install works.
    rt.install_ok(&fixture_connector("after", &["--tools", "echo"]), &[]);
}

/// A release whose description makes `connector.json` `bytes` long is refused at once by the
/// 1 MiB manifest cap.
fn refused_over_the_manifest_cap(rt: &mut Runtime, key: &str, bytes: usize) {
    let mut manifest = fixture_connector(key, &["--tools", "echo"]);
    manifest["description"] = json!("d".repeat(bytes));
    let dir = rt.write_release(&manifest, &[]);
    let out = install_at_once(rt, &dir);
    assert_refused(
        rt,
        &out,
        key,
        &["connector.json: ", "larger than the 1 MiB limit"],
    );
}

#[test]
fn a_manifest_over_one_mebibyte_is_refused_at_once() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    refused_over_the_manifest_cap(&mut rt, "huge", 2 * 1024 * 1024);
}

/// Puts something at a path (a link, a FIFO, a big file).
type MakeFile = fn(&Path);

#[test]
fn skill_files_are_not_followed_and_are_capped() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let skill = b"---\nname: s\ndescription: a skill\n---\nbody\n";
    let cases: [(&str, &str, MakeFile); 3] = [
        ("skilllink", "symbolic link", |p: &Path| {
            std::os::unix::fs::symlink("/dev/zero", p).expect("symlink")
        }),
        ("skillfifo", "not a regular file", |p: &Path| {
            nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo")
        }),
        ("skillbig", "larger than the 256 KiB limit", |p: &Path| {
            let mut text = String::from("---\nname: s\ndescription: big\n---\n");
            text.push_str(&"y".repeat(300 * 1024));
            std::fs::write(p, text).expect("write");
        }),
    ];
    for (key, needle, make) in cases {
        let mut manifest = fixture_connector(key, &["--tools", "echo"]);
        manifest["skills"] = json!(["skills/s"]);
        let dir = rt.write_release(&manifest, &[("skills/s/SKILL.md", skill)]);
        let file = dir.join("skills/s/SKILL.md");
        std::fs::remove_file(&file).expect("rm");
        make(&file);
        let out = install_at_once(&rt, &dir);
        assert_refused(&rt, &out, key, &["skills[0]", needle]);
    }
}

// === Field size limits ===

#[test]
fn oversized_manifest_fields_are_refused_at_install_naming_the_field() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    // 10 MB: the whole manifest is over its cap, and the refusal says so.
    refused_over_the_manifest_cap(&mut rt, "tenmb", 10 * 1000 * 1000);
    // 100 KiB: under the file cap, over the field's.
    let mut manifest = fixture_connector("longdesc", &["--tools", "echo"]);
    manifest["description"] = json!("d".repeat(100 * 1024));
    let out = rt.install_dir(&manifest, &[]);
    assert_refused(
        &rt,
        &out,
        "longdesc",
        &["connector.json: description: is 102400 bytes, longer than the 4096-byte limit"],
    );
    let mut manifest = fixture_connector("longname", &["--tools", "echo"]);
    manifest["name"] = json!("n".repeat(1000));
    let out = rt.install_dir(&manifest, &[]);
    assert_refused(
        &rt,
        &out,
        "longname",
        &["connector.json: name: is 1000 bytes"],
    );
    // `available` still works for everything installed.
    rt.install_ok(&fixture_connector("fine", &["--tools", "echo"]), &[]);
    let listed: Value =
        serde_json::from_str(&rt.tutti_ok(&["connector", "available", "--json"])).expect("json");
    assert_eq!(listed["connectors"][0]["key"], "fine");
}

// === Format and control characters are written out where manifest text is shown ===

const RAW: [char; 3] = ['\u{202e}', '\u{200b}', '\u{1b}'];

fn assert_escaped(what: &str, text: &str, needles: &[&str]) {
    for raw in RAW {
        assert!(
            !text.contains(raw),
            "{what} shows a raw U+{:04X}:\n{text:?}",
            u32::from(raw)
        );
    }
    for needle in needles {
        assert!(text.contains(needle), "{what} lacks {needle:?}:\n{text}");
    }
}

#[test]
fn format_and_control_characters_are_escaped_in_every_display() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let name = "Spoof\u{202e}exe.txt\u{200b}\u{1b}[2K";
    let description = "Reads\u{202e}files\u{200b}\u{1b}]52;c;aGk=\u{7}";
    let version = "1.0\u{202e}\u{200b}\u{1b}[31m";
    let mut manifest = fixture_connector("spoof", &["--tools", "echo"]);
    manifest["name"] = json!(name);
    manifest["description"] = json!(description);
    manifest["version"] = json!(version);
    let out = rt.install_dir(&manifest, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_escaped(
        "the install confirmation",
        &stderr(&out),
        &[
            "Spoof\\u{202e}exe.txt\\u{200b}\\x1b[2K",
            "Reads\\u{202e}files\\u{200b}\\x1b]52;c;aGk=\\x07",
            "1.0\\u{202e}\\u{200b}\\x1b[31m",
        ],
    );
    assert_escaped(
        "the install result",
        &String::from_utf8_lossy(&out.stdout),
        &[],
    );
    rt.wait_status("spoof", "ready", READY);

    let status = rt.tutti_ok(&["status"]);
    assert_escaped(
        "`tutti status`",
        &status,
        &["1.0\\u{202e}\\u{200b}\\x1b[31m"],
    );

    let available = rt.tutti_ok(&["connector", "available"]);
    assert_escaped(
        "`tutti connector available`",
        &available,
        &[
            "Spoof\\u{202e}exe.txt\\u{200b}\\x1b[2K",
            "Reads\\u{202e}files\\u{200b}",
        ],
    );

    // JSON stays JSON: the text as it is, escaped the way JSON escapes.
    let json_out: Value =
        serde_json::from_str(&rt.tutti_ok(&["connector", "available", "--json"])).expect("json");
    assert_eq!(json_out["connectors"][0]["name"], name);
    assert_eq!(json_out["connectors"][0]["description"], description);
}

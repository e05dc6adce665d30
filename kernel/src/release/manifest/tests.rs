use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::fields::*;
use super::launch::*;
use super::parse::*;
use super::*;
use serde_json::json;

fn dir() -> PathBuf {
    std::env::temp_dir()
}

#[test]
fn the_key_tutti_is_reserved() {
    let v = json!({"key":"tutti","name":"T","description":"d","version":"1",
        "cli":{"entrypoint":"bin/x"}});
    let e = parse(&v, &dir()).expect_err("must be refused");
    assert!(
        e.iter()
            .any(|l| l.starts_with("connector.json: key: \"tutti\" is reserved")),
        "{e:?}"
    );
    let ok = json!({"key":"tutti-x","name":"T","description":"d","version":"1",
        "cli":{"entrypoint":"bin/x"}});
    let e = parse(&ok, &dir()).err().unwrap_or_default();
    assert!(!e.iter().any(|l| l.contains("reserved")), "{e:?}");
}

#[test]
fn problems_name_each_field() {
    let v = json!({"key":"Bad_Key","version":3,"mcp":{"transport":"stdio","command":"node server.js"},"timeouts":{"startMs":-1}});
    let e = parse(&v, &dir()).expect_err("must be refused");
    let all = e.join("\n");
    for needle in [
        "key: must match",
        "name: is required",
        "description: is required",
        "version: must be a string",
        "mcp.command: must be a program name or path, not a command line: \"node server.js\"; put the program in \"command\" and each argument in \"args\": \"command\": \"node\", \"args\": [\"server.js\"]",
        "timeouts.startMs",
    ] {
        assert!(all.contains(needle), "missing {needle:?} in\n{all}");
    }
    assert!(e.iter().all(|l| l.starts_with("connector.json: ")));
}

#[test]
fn a_command_line_in_command_gets_the_split_fields() {
    let v = json!({"key":"memory","name":"M","description":"d","version":"1",
        "mcp":{"transport":"stdio","command":"npx -y @modelcontextprotocol/server-memory"}});
    let all = parse(&v, &dir()).expect_err("must be refused").join("\n");
    assert!(
        all.contains(r#""command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"]"#),
        "{all}"
    );
    assert!(!all.contains("${release}"), "{all}");
    let with_args = json!({"key":"k","name":"K","description":"d","version":"1",
        "mcp":{"transport":"stdio","command":"uvx mcp-server-time","args":["--local-timezone","UTC"]}});
    let all = parse(&with_args, &dir())
        .expect_err("must be refused")
        .join("\n");
    assert!(
        all.contains(r#""command": "uvx", "args": ["mcp-server-time", "--local-timezone", "UTC"]"#),
        "{all}"
    );
    assert_eq!(command_line_fix("/opt/My Tools/server", &[]), None);
    assert_eq!(command_line_fix("npx", &[]), None);
}

#[test]
fn a_null_or_empty_interface_declares_nothing() {
    let base = json!({"key":"k","name":"K","description":"d","version":"1"});
    for extra in [
        json!({}),
        json!({"mcp": null}),
        json!({"cli": null, "skills": []}),
    ] {
        let mut v = base.clone();
        if let (Some(m), Some(e)) = (v.as_object_mut(), extra.as_object()) {
            m.extend(e.clone());
        }
        let e = parse(&v, &dir()).expect_err("no interface must be refused");
        assert_eq!(
            e,
            vec!["connector.json: mcp: at least one of mcp, cli, skills must be present"],
            "{v}"
        );
    }
    // An interface that is given but invalid is reported once, under its own field.
    let mut v = base.clone();
    v["mcp"] = json!({"transport": "ftp"});
    let e = parse(&v, &dir()).expect_err("must be refused");
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains("mcp.transport"), "{e:?}");
}

#[test]
fn an_auth_header_must_be_a_header_name() {
    let mut v = json!({"key":"k","name":"K","description":"d","version":"1",
        "mcp":{"transport":"http","url":"https://x/mcp",
               "auth":{"kind":"header","header":"X Api Key","secret":"API_KEY"}}});
    let e = parse(&v, &dir()).expect_err("must be refused");
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].starts_with("connector.json: mcp.auth.header: "),
        "{e:?}"
    );
    v["mcp"]["auth"]["header"] = json!("X-Api-Key");
    assert!(parse(&v, &dir()).is_ok());
}

#[test]
fn an_oauth_connector_needs_https_or_loopback_and_names_its_client_secret() {
    let mut v = json!({"key":"k","name":"K","description":"d","version":"1",
        "mcp":{"transport":"http","url":"http://mcp.example.com/mcp",
               "auth":{"kind":"oauth","scopes":["read"]}}});
    let e = parse(&v, &dir()).expect_err("plain http is refused");
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].starts_with("connector.json: mcp.url: "), "{e:?}");
    assert!(e[0].contains("must use https"), "{e:?}");
    for ok in ["https://mcp.example.com/mcp", "http://127.0.0.1:9/mcp"] {
        v["mcp"]["url"] = json!(ok);
        let m = parse(&v, &dir());
        assert!(
            m.as_ref().is_ok_and(|m| m.secret_names().is_empty()),
            "{ok}: {:?}",
            m.err()
        );
    }
    v["mcp"]["auth"]["clientSecret"] = json!("CLIENT_SECRET");
    let e = parse(&v, &dir()).expect_err("a client secret needs a client id");
    assert!(
        e[0].contains("mcp.auth.clientSecret: needs mcp.auth.clientId"),
        "{e:?}"
    );
    v["mcp"]["auth"]["clientId"] = json!("tutti");
    v["mcp"]["auth"]["clientMetadataUrl"] = json!("http://x.example/client.json");
    let e = parse(&v, &dir()).expect_err("the metadata document must be https");
    assert!(e[0].contains("mcp.auth.clientMetadataUrl"), "{e:?}");
    v["mcp"]["auth"]["clientMetadataUrl"] = json!("https://x.example/client.json");
    let m = parse(&v, &dir());
    assert_eq!(
        m.map(|m| m.secret_names()).ok(),
        Some(vec!["CLIENT_SECRET".to_string()])
    );
}

#[test]
#[cfg_attr(
    windows,
    ignore = "its fixtures are Unix paths (/bin/sh, /nonexistent), which are not absolute on Windows"
)]
fn cwd_must_be_absolute_after_expansion() {
    let base = BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]);
    let e = stdio_launch(
        "/bin/sh",
        &[],
        "rel/dir",
        &BTreeMap::new(),
        Path::new("/r"),
        Path::new("/s"),
        &base,
    )
    .expect_err("must be refused");
    assert_eq!(
        e,
        vec![
            "connector.json: mcp.cwd: must be an absolute path after expansion, got \"rel/dir\""
                .to_string()
        ]
    );
}

#[test]
#[cfg_attr(
    windows,
    ignore = "its fixture runs `sh` from a Unix PATH, which Windows does not have"
)]
fn placeholders_and_relative_args() {
    let tmp = tempdir();
    let rel = tmp.path().to_path_buf();
    std::fs::write(rel.join("server.js"), "").expect("write");
    let base = BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]);
    let env = BTreeMap::from([("DATA".to_string(), "${state}/data".to_string())]);
    let l = stdio_launch(
        "sh",
        &["server.js".into(), "--x".into(), "missing.txt".into()],
        "${release}",
        &env,
        &rel,
        Path::new("/st"),
        &base,
    )
    .expect("ok");
    assert!(l.program.is_absolute());
    assert_eq!(l.args[0], rel.join("server.js").to_string_lossy());
    assert_eq!(l.args[1], "--x");
    assert_eq!(l.args[2], "missing.txt");
    assert_eq!(l.cwd, rel);
    assert_eq!(l.env.get("DATA").map(String::as_str), Some("/st/data"));
    let e = stdio_launch(
        "no-such-program-xyz",
        &[],
        "/",
        &BTreeMap::new(),
        &rel,
        Path::new("/st"),
        &base,
    )
    .expect_err("must be refused");
    assert!(e[0].contains("not found on PATH"), "{e:?}");
}

#[test]
#[cfg_attr(
    windows,
    ignore = "its fixtures are Unix paths (/bin/sh, /nonexistent), which are not absolute on Windows"
)]
fn a_command_inside_a_release_not_copied_yet_is_checked_in_the_source() {
    let tmp = tempdir();
    let src = tmp.path().join("src-release");
    std::fs::create_dir_all(src.join("bin")).expect("mkdir");
    std::fs::write(src.join("bin/server"), "#!/bin/sh\n").expect("write");
    std::fs::write(src.join("data.txt"), "").expect("write");
    let dest = Path::new("/nonexistent/releases/k/abc");
    let base = BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]);
    let l = stdio_launch_from(
        "${release}/bin/server",
        &["data.txt".into()],
        "${release}",
        &BTreeMap::new(),
        dest,
        &src,
        Path::new("/st"),
        &base,
    )
    .expect("valid against the source");
    // What will run is the copy's path, not the source's.
    assert_eq!(l.program, dest.join("bin/server"));
    assert_eq!(
        l.args,
        vec![dest.join("data.txt").to_string_lossy().into_owned()]
    );
    assert_eq!(l.cwd, dest);
    let e = stdio_launch_from(
        "${release}/bin/missing",
        &[],
        "${release}",
        &BTreeMap::new(),
        dest,
        &src,
        Path::new("/st"),
        &base,
    )
    .expect_err("must be refused");
    assert!(
        e[0].contains("mcp.command") && e[0].contains("does not exist"),
        "{e:?}"
    );
    // A working directory that is not there (in the release or outside it) is refused
    // now, not found out by a crash loop later.
    for cwd in ["${release}/sub", "/nonexistent/dir"] {
        let e = stdio_launch_from(
            "${release}/bin/server",
            &[],
            cwd,
            &BTreeMap::new(),
            dest,
            &src,
            Path::new("/st"),
            &base,
        )
        .expect_err("must be refused");
        assert!(
            e[0].contains("mcp.cwd") && e[0].contains("not an existing directory"),
            "{cwd}: {e:?}"
        );
    }
    // Once copied, the release itself is checked.
    assert!(
        stdio_launch(
            "${release}/bin/server",
            &[],
            "${release}",
            &BTreeMap::new(),
            dest,
            Path::new("/st"),
            &base
        )
        .is_err()
    );
}

#[test]
fn launch_problems_complete_field_problems_without_repeating_a_field() {
    let tmp = tempdir();
    let dir = tmp.path().join("launchy");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let base = BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]);
    let write =
        |v: Value| std::fs::write(dir.join("connector.json"), v.to_string()).expect("write");
    write(
        json!({"key":"launchy","version":"1","mcp":{"transport":"stdio","command":"no-such-program-tutti","cwd":"rel/dir"}}),
    );
    let field_problems = load(&dir).expect_err("name and description are missing");
    let launch = launch_problems(&dir, Path::new("/st"), &base, &field_problems);
    assert_eq!(launch.len(), 2, "{launch:?}");
    assert!(
        launch
            .iter()
            .any(|l| l.starts_with("connector.json: mcp.command: ")),
        "{launch:?}"
    );
    assert!(
        launch
            .iter()
            .any(|l| l.starts_with("connector.json: mcp.cwd: ")),
        "{launch:?}"
    );
    // A shell command line is already refused by the field check: not twice.
    write(
        json!({"key":"launchy","version":"1","mcp":{"transport":"stdio","command":"node server.js"}}),
    );
    let field_problems = load(&dir).expect_err("refused");
    assert!(launch_problems(&dir, Path::new("/st"), &base, &field_problems).is_empty());
}

#[cfg(unix)]
#[test]
fn a_cli_entrypoint_must_be_executable() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempdir();
    let d = tmp.path().join("cli-exec");
    std::fs::create_dir_all(&d).expect("mkdir");
    std::fs::write(d.join("run.sh"), "#!/bin/sh\n").expect("write");
    std::fs::set_permissions(d.join("run.sh"), std::fs::Permissions::from_mode(0o644))
        .expect("chmod");
    let v = json!({"key":"k","name":"K","description":"d","version":"1",
        "cli":{"entrypoint":"run.sh"}});
    let e = parse(&v, &d).expect_err("must be refused");
    assert!(
        e[0].contains("cli.entrypoint") && e[0].contains("not executable"),
        "{e:?}"
    );
    std::fs::set_permissions(d.join("run.sh"), std::fs::Permissions::from_mode(0o755))
        .expect("chmod");
    assert!(parse(&v, &d).is_ok());
}

#[cfg(unix)]
#[test]
fn commands_resolve_to_their_real_path_and_release_files_to_the_copy() {
    let tmp = tempdir();
    let src = tmp.path().join("resolve-src");
    std::fs::create_dir_all(src.join("bin")).expect("mkdir");
    std::fs::create_dir_all(src.join("sub")).expect("mkdir");
    std::fs::write(src.join("bin/server"), "#!/bin/sh\n").expect("write");
    let dest = Path::new("/nonexistent/releases/k/abc");
    let resolve =
        |cmd: &str| resolve_command(&expand(cmd, dest, dest), dest, &src, "/usr/bin:/bin");
    assert_eq!(
        resolve("${release}/sub/../bin/server").as_deref(),
        Ok(dest.join("bin/server").as_path()),
        "`..` inside the release: the copy's file, written plainly"
    );
    let out =
        resolve(&format!("${{release}}/{}bin/sh", "../".repeat(40))).expect("resolves outside");
    assert!(!out.starts_with(dest), "{out:?}");
    assert!(
        !out.components()
            .any(|c| c == std::path::Component::ParentDir),
        "{out:?}"
    );
    assert!(resolve("${release}/bin/missing").is_err());
    assert!(
        resolve("${release}/sub").is_err(),
        "a directory is not a program"
    );
}

#[test]
fn injection_variables_are_refused_unless_allowed() {
    let v = json!({"key":"k","name":"K","description":"d","version":"1",
        "mcp":{"transport":"stdio","command":"/bin/sh",
               "env":{"LOG_LEVEL":"warn","NODE_OPTIONS":"--require x","ld_preload":"/x"},
               "secrets":["TOKEN","PYTHONPATH"]}});
    let m = parse(&v, &dir()).expect("valid fields");
    let p = injection_problems(&m, &[]);
    assert_eq!(p.len(), 3, "{p:?}");
    for needle in [
        "mcp.env.NODE_OPTIONS: ",
        "mcp.env.ld_preload: ",
        "mcp.secrets[1]: PYTHONPATH",
    ] {
        assert!(p.iter().any(|l| l.contains(needle)), "{needle}: {p:?}");
    }
    assert!(p.iter().all(|l| l.contains("--allow-env ")), "{p:?}");
    let allowed = [
        "NODE_OPTIONS".into(),
        "LD_PRELOAD".into(),
        "PYTHONPATH".into(),
    ];
    assert!(injection_problems(&m, &allowed).is_empty());
}

/// One row per variable: refused (the line names it and the way out) or left alone.
#[test]
fn variables_that_load_code_from_outside_the_release_are_refused() {
    let rows: &[(&str, bool)] = &[
        ("HOME", true),
        ("home", true),
        ("XDG_CONFIG_HOME", true),
        ("XDG_DATA_DIRS", true),
        ("npm_config_node_options", true),
        ("NPM_CONFIG_SCRIPT_SHELL", true),
        ("PIP_INDEX_URL", true),
        ("UV_INDEX_URL", true),
        ("UV_PYTHON", true),
        ("PYTHONUSERBASE", true),
        ("PYTHONSTARTUP", true),
        ("PYTHONBREAKPOINT", true),
        ("PERL5OPT", true),
        ("PERL5DB", true),
        ("RUBYOPT", true),
        ("RUBYLIB", true),
        ("JAVA_TOOL_OPTIONS", true),
        ("_JAVA_OPTIONS", true),
        ("GIT_SSH_COMMAND", true),
        ("GIT_CONFIG_GLOBAL", true),
        ("GIT_CONFIG_COUNT", true),
        ("GIT_EXEC_PATH", true),
        ("BASH_FUNC_X", true),
        ("LOG_LEVEL", false),
        ("GITHUB_TOKEN", false),
        ("GIT_AUTHOR_NAME", false),
        ("HOMEPAGE", false),
        ("PYTHONUNBUFFERED", false),
        ("NODE_ENV", false),
    ];
    for (name, refused) in rows {
        let v = json!({"key":"k","name":"K","description":"d","version":"1",
            "mcp":{"transport":"stdio","command":"/bin/sh","env":{*name: "/tmp/x"}}});
        let m = parse(&v, &dir()).expect("valid fields");
        let lines = injection_problems(&m, &[]);
        if *refused {
            assert_eq!(lines.len(), 1, "{name}: {lines:?}");
            assert!(
                lines[0].starts_with(&format!("connector.json: mcp.env.{name}: {name} is "))
                    && lines[0].ends_with(&format!("install with --allow-env {name}")),
                "{name}: {lines:?}"
            );
            assert!(injection_problems(&m, &[name.to_string()]).is_empty());
        } else {
            assert!(lines.is_empty(), "{name}: {lines:?}");
        }
    }
}

#[test]
fn text_fields_have_limits() {
    let mut v = json!({"key":"k","name":"K","description":"d","version":"1",
        "mcp":{"transport":"stdio","command":"/bin/sh","args":["a"]}});
    assert!(parse(&v, &dir()).is_ok());
    v["description"] = json!("d".repeat(limits::DESCRIPTION + 1));
    v["name"] = json!("n".repeat(limits::NAME + 1));
    v["mcp"]["args"] = json!(["a".repeat(limits::ARG + 1)]);
    let e = parse(&v, &dir()).expect_err("too long");
    assert_eq!(e.len(), 3, "{e:?}");
    assert!(
        e[0].starts_with("connector.json: name: is 257 bytes, longer than the 256-byte limit"),
        "{e:?}"
    );
    assert!(
        e[1].starts_with("connector.json: description: is 4097 bytes"),
        "{e:?}"
    );
    assert!(e[2].starts_with("connector.json: mcp.args[0]: "), "{e:?}");
}

/// A fresh directory, removed when the returned value drops.
fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("tutti-manifest-test-")
        .tempdir()
        .unwrap_or_else(|e| panic!("tempdir: {e}"))
}

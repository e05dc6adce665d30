use super::*;
use crate::test_util::env_of;
use serde_json::{Value, json};
use std::io::Cursor;
use tutti_proto::kernel::{EnvVar, InterfaceStatus, ProbeTool, SkillSummary};

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn connect_says_which_values_it_saved() {
    let names = vec!["A_KEY".to_owned(), "B_KEY".to_owned()];
    assert_eq!(
        connected("gh", &names, false),
        "connected gh (saved A_KEY, B_KEY)\n"
    );
    assert_eq!(connected("gh", &[], false), "connected gh\n");
    let v: serde_json::Value =
        serde_json::from_str(&connected("gh", &names, true)).unwrap_or_default();
    assert_eq!(
        v,
        serde_json::json!({"key": "gh", "connected": true, "saved": ["A_KEY", "B_KEY"]})
    );
    let lost = CliError::ConnectInterrupted {
        key: "gh".into(),
        names: names.join(", "),
        reason: "broken pipe".into(),
    }
    .to_string();
    assert!(
        lost.contains("A_KEY, B_KEY may have been saved") && lost.contains("tutti status"),
        "{lost}"
    );
}

#[test]
fn secrets_from_env_and_stdin_in_order() {
    let mut input = Cursor::new(b"first\r\nsecond\n".to_vec());
    let got = collect_secrets(
        &names(&["A"]),
        &names(&["B", "C"]),
        env_of(&[("A", "alpha")]),
        &mut input,
        false,
    )
    .ok();
    let want: HashMap<String, String> = [("A", "alpha"), ("B", "first"), ("C", "second")]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    assert_eq!(got, Some(want));
}

#[test]
fn last_stdin_line_without_newline_counts() {
    let mut input = Cursor::new(b"only".to_vec());
    let got = collect_secrets(&[], &names(&["B"]), env_of(&[]), &mut input, false).ok();
    assert_eq!(
        got.and_then(|m| m.get("B").cloned()).as_deref(),
        Some("only")
    );
}

/// A failing standard input is named as such, with what to do, not as a file path.
#[test]
fn unreadable_stdin_says_how_to_give_values() {
    struct Broken;
    impl std::io::Read for Broken {
        fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("input/output error"))
        }
    }
    let mut input = std::io::BufReader::new(Broken);
    let err = collect_secrets(&[], &names(&["B"]), env_of(&[]), &mut input, false).err();
    assert!(matches!(err, Some(CliError::StdinRead { .. })), "{err:?}");
    let text = err.map(|e| e.to_string()).unwrap_or_default();
    assert!(text.starts_with("cannot read standard input: "), "{text}");
    assert!(text.contains("one line per --stdin name"), "{text}");
    assert!(!text.contains("path"), "{text}");
}

#[test]
fn secret_errors_name_the_variable_never_the_value() {
    let mut input = Cursor::new(Vec::new());
    let err = collect_secrets(&names(&["MISSING"]), &[], env_of(&[]), &mut input, false)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("MISSING"), "{err}");
    let err = collect_secrets(&names(&["E"]), &[], env_of(&[("E", "")]), &mut input, false)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("environment variable E is not set or empty"),
        "{err}"
    );
    let err = collect_secrets(&[], &names(&["B"]), env_of(&[]), &mut input, false).err();
    assert!(matches!(err, Some(CliError::StdinEnded { .. })), "{err:?}");
    let mut blank = Cursor::new(b"\r\n".to_vec());
    let err = collect_secrets(&[], &names(&["B"]), env_of(&[]), &mut blank, false).err();
    assert!(matches!(err, Some(CliError::StdinEmpty { .. })), "{err:?}");
    let mut input = Cursor::new(b"hunter2\n".to_vec());
    let err = collect_secrets(
        &names(&["A"]),
        &names(&["A"]),
        env_of(&[("A", "s3cret")]),
        &mut input,
        false,
    )
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(err.contains("secret A is given more than once"), "{err}");
    assert!(!err.contains("s3cret") && !err.contains("hunter2"), "{err}");
}

fn plan() -> InstallPlan {
    InstallPlan {
        key: "github".into(),
        name: "GitHub".into(),
        version: "1.4.0".into(),
        transport: "stdio".into(),
        argv: names(&["/usr/bin/node", "server.js", "--stdio", "a b"]),
        cwd: "/s/releases/github/abc".into(),
        url: String::new(),
        secret_names: names(&["GITHUB_TOKEN", "ORG"]),
        cli_entrypoint: "/s/releases/github/abc/bin/github-cli".into(),
        problems: vec![],
        upgrades_version: "1.3.0".into(),
        allowed_commands: names(&["node"]),
        same_release: false,
        env: vec![
            EnvVar {
                name: "LOG_LEVEL".into(),
                value: "warn".into(),
            },
            EnvVar {
                name: "NODE_OPTIONS".into(),
                value: "--require ./x.js".into(),
            },
        ],
        allowed_env: names(&["NODE_OPTIONS"]),
        description: "GitHub issues".into(),
        sha256: "0123abcd".into(),
        skill_findings: vec![],
        oauth_login: false,
    }
}

#[test]
fn confirmation_shows_what_will_run() {
    assert_eq!(
        confirmation(&plan(), Verb::Install),
        "Install connector github 1.4.0 (GitHub)\n\
         \x20 about: GitHub issues\n\
         \x20 sha256: 0123abcd\n\
         \x20 runs: /usr/bin/node server.js --stdio 'a b'\n\
         \x20 in:   /s/releases/github/abc\n\
         \x20 env:  LOG_LEVEL=warn\n\
         \x20 env:  NODE_OPTIONS='--require ./x.js'\n\
         \x20 secrets: GITHUB_TOKEN, ORG (set them with: tutti connector connect github --from-env GITHUB_TOKEN --from-env ORG)\n\
         \x20 cli:  tutti-connector-github -> /s/releases/github/abc/bin/github-cli\n\
         \x20 allowed commands: node\n\
         \x20 allowed injection variables: NODE_OPTIONS\n\
         \x20 upgrades: 1.3.0\n"
    );
}

#[test]
fn confirmation_of_the_same_release_says_it_only_restarts() {
    let mut p = plan();
    p.same_release = true;
    let text = confirmation(&p, Verb::Install);
    assert!(
        text.ends_with("  reinstalls: the same release (its worker restarts)\n"),
        "{text}"
    );
    assert!(!text.contains("upgrades:"), "{text}");
}

#[test]
fn confirmation_for_http_without_secrets() {
    let mut p = plan();
    p.transport = "http".into();
    p.argv.clear();
    p.cwd.clear();
    p.url = "https://example.com/mcp".into();
    p.secret_names.clear();
    p.cli_entrypoint.clear();
    p.allowed_commands.clear();
    p.upgrades_version.clear();
    p.env.clear();
    p.allowed_env.clear();
    p.description.clear();
    assert_eq!(
        confirmation(&p, Verb::Install),
        "Install connector github 1.4.0 (GitHub)\n\
         \x20 sha256: 0123abcd\n\
         \x20 url:  https://example.com/mcp\n\
         \x20 secrets: none\n"
    );
}

#[test]
fn only_y_or_yes_confirms() {
    for yes in ["y\n", "Y", " yes \r\n", "YES"] {
        assert!(is_yes(yes), "{yes:?}");
    }
    for no in ["", "\n", "n", "no", "yep", "sure"] {
        assert!(!is_yes(no), "{no:?}");
    }
}

#[test]
fn probe_target_is_an_absolute_dir_or_a_key() {
    let dir = crate::test_util::TempDir::new("probe");
    assert_eq!(
        probe_target(&dir.path().display().to_string()).ok(),
        Some((dir.path().display().to_string(), None))
    );
    assert_eq!(probe_target("github").ok(), Some(("github".into(), None)));
    assert!(probe_target("").is_err());
    // A bare word is a key first, even when a folder of that name is here; the folder is
    // the fallback. `./word` is the folder.
    let here = std::env::current_dir().unwrap_or_default();
    let word = format!("probe-word-{}", std::process::id());
    let _ = std::fs::create_dir(here.join(&word));
    let abs = here.join(&word).display().to_string();
    assert_eq!(
        probe_target(&word).ok(),
        Some((word.clone(), Some(abs.clone())))
    );
    assert_eq!(
        probe_target(&format!("./{word}")).ok().map(|t| t.1),
        Some(None)
    );
    let _ = std::fs::remove_dir(here.join(&word));
    assert!(looks_like_key("a-1") && !looks_like_key("A") && !looks_like_key("a_b"));
}

#[test]
fn install_dir_must_exist() {
    let dir = crate::test_util::TempDir::new("install");
    let missing = dir.path().join("nope");
    assert!(matches!(
        absolute_dir(&missing),
        Err(CliError::NotADirectory { .. })
    ));
    assert_eq!(
        absolute_dir(dir.path()).ok(),
        Some(dir.path().to_path_buf())
    );
}

#[test]
fn probe_json_and_text() {
    let reply = ProbeReply {
        key: "fx".into(),
        protocol_version: "2025-06-18".into(),
        server_name: "fixture".into(),
        tools: vec![ProbeTool {
            upstream_name: "echo".into(),
            local_name: "fx_echo".into(),
            description: "Echo it back.\nMore text.".into(),
        }],
        problems: names(&["tool bad: inputSchema: root type must be \"object\""]),
    };
    let got: Value = serde_json::from_str(&json_line(&ProbeJson::from(&reply)).unwrap_or_default())
        .unwrap_or(Value::Null);
    assert_eq!(
        got,
        json!({"key": "fx", "serverName": "fixture", "protocolVersion": "2025-06-18",
               "tools": [{"localName": "fx_echo", "upstreamName": "echo", "description": "Echo it back.\nMore text."}],
               "problems": ["tool bad: inputSchema: root type must be \"object\""]})
    );
    let text = render_probe(&reply);
    assert!(
        text.starts_with("connector fx: server fixture, protocol 2025-06-18\n"),
        "{text}"
    );
    assert!(
        text.contains("fx_echo  echo      Echo it back.\n"),
        "{text}"
    );
    assert!(!text.contains("More text"), "{text}");
}

fn available_reply() -> AvailableReply {
    AvailableReply {
        connectors: vec![
            AvailableConnector {
                key: "notes".into(),
                name: "Notes".into(),
                description: "Local notes".into(),
                skills: vec![],
                interfaces: vec![InterfaceStatus {
                    kind: "cli".into(),
                    status: "unavailable".into(),
                    server_name: String::new(),
                    tool_prefix: String::new(),
                    command: "tutti-connector-notes".into(),
                }],
            },
            AvailableConnector {
                key: "github".into(),
                name: "GitHub".into(),
                description: "GitHub repository and issue operations".into(),
                skills: vec![
                    SkillSummary {
                        name: "github-workflow".into(),
                        title: "GitHub Workflow".into(),
                        description: "Work with repositories, issues and pull requests".into(),
                    },
                    SkillSummary {
                        name: "triage".into(),
                        title: String::new(),
                        description: "Triage issues".into(),
                    },
                ],
                interfaces: vec![
                    InterfaceStatus {
                        kind: "cli".into(),
                        status: "ready".into(),
                        server_name: String::new(),
                        tool_prefix: String::new(),
                        command: "tutti-connector-github".into(),
                    },
                    InterfaceStatus {
                        kind: "mcp".into(),
                        status: "ready".into(),
                        server_name: "connector".into(),
                        tool_prefix: "github_".into(),
                        command: String::new(),
                    },
                ],
            },
        ],
    }
}

#[test]
fn available_json_is_exactly_spec_7() {
    let text = json_line(&AvailableJson::from(&available_reply())).unwrap_or_default();
    let got: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    assert_eq!(
        got,
        json!({"connectors": [
            {"key": "github", "name": "GitHub",
             "description": "GitHub repository and issue operations",
             "skills": [
                {"name": "github-workflow", "title": "GitHub Workflow",
                 "description": "Work with repositories, issues and pull requests"},
                {"name": "triage", "description": "Triage issues"}
             ],
             "interfaces": [
                {"kind": "mcp", "serverName": "connector", "toolPrefix": "github_", "status": "ready"},
                {"kind": "cli", "command": "tutti-connector-github", "status": "ready"}
             ]},
            {"key": "notes", "name": "Notes", "description": "Local notes", "skills": [],
             "interfaces": [{"kind": "cli", "command": "tutti-connector-notes", "status": "unavailable"}]}
        ]})
    );
    // Field order as in the SPEC example.
    assert!(
        text.contains(
            r#"{"kind":"mcp","serverName":"connector","toolPrefix":"github_","status":"ready"}"#
        ),
        "{text}"
    );
    assert!(
        text.starts_with(r#"{"connectors":[{"key":"github","name":"GitHub","description""#),
        "{text}"
    );
}

#[test]
fn available_fills_missing_interface_fields() {
    let mut reply = available_reply();
    for c in &mut reply.connectors {
        for i in &mut c.interfaces {
            i.server_name.clear();
            i.tool_prefix.clear();
            i.command.clear();
        }
    }
    let text = json_line(&AvailableJson::from(&reply)).unwrap_or_default();
    assert!(
        text.contains(r#""serverName":"connector","toolPrefix":"github_""#),
        "{text}"
    );
    assert!(
        text.contains(r#""command":"tutti-connector-notes""#),
        "{text}"
    );
}

#[test]
fn available_table_is_readable() {
    let text = render_available(&AvailableJson::from(&available_reply()));
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("KEY"), "{text}");
    assert!(lines[1].starts_with("github"), "{text}");
    assert!(lines[1].contains("ready (github_*)"), "{text}");
    assert!(lines[1].contains("github-workflow, triage"), "{text}");
    assert!(lines[2].starts_with("notes"), "{text}");
    assert_eq!(
        render_available(&AvailableJson { connectors: vec![] }),
        "no connectors installed\n"
    );
}

//! `tutti session issue|revoke`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde::Serialize;
use toml_edit::DocumentMut;
use tutti_proto::kernel::{IssueSessionRequest, RevokeSessionRequest};

use crate::args::{Format, IssueArgs, RevokeArgs, Via};
use crate::binding::{self, AcpGate, Binding};
use crate::binding_stdio::{self, Launch};
use crate::codex_features;
use crate::error::CliError;
use crate::fsutil;
use crate::kernel::Kernel;
use crate::output::{emit, json_line, note, visible};

// === issue ===

/// A workspace is a name the session is filed under (audit log, `session revoke`, the
/// console); agents usually pass their project directory. A name that looks like a path
/// (holds `/`, or starts with `.` or `~`) but names nothing on disk is accepted, with a
/// warning: it is most likely a typo.
fn missing_workspace_path(workspace: &str) -> Option<String> {
    let looks_like_path =
        workspace.contains('/') || workspace.starts_with('.') || workspace.starts_with('~');
    if !looks_like_path || Path::new(workspace).exists() {
        return None;
    }
    let tilde = if workspace.starts_with('~') {
        " (the shell did not expand `~`: write $HOME)"
    } else {
        ""
    };
    Some(format!(
        "tutti: note: workspace {} looks like a path but does not exist{tilde}; it is used as a name as given",
        visible(workspace)
    ))
}

pub(crate) async fn issue(state_dir: &Path, args: IssueArgs) -> Result<ExitCode, CliError> {
    if args.workspace.is_empty() {
        return Err(CliError::EmptyArgument {
            what: "--workspace",
        });
    }
    if args.session.is_empty() {
        return Err(CliError::EmptyArgument { what: "--session" });
    }
    if let Some(warning) = missing_workspace_path(&args.workspace) {
        note(&warning);
    }
    if args.json && matches!(args.format, Format::Codex | Format::Tutti) {
        return Err(CliError::FlagNotForFormat {
            flag: "--json",
            formats: "runtime, acp, claude (codex and tutti print TOML)",
        });
    }
    if args.acp_initialize.is_some() && args.format != Format::Acp {
        return Err(CliError::FlagNotForFormat {
            flag: "--acp-initialize",
            formats: "acp",
        });
    }
    if args.codex_home.is_some() && !matches!(args.format, Format::Codex | Format::Tutti) {
        return Err(CliError::FlagNotForFormat {
            flag: "--codex-home",
            formats: "codex or tutti",
        });
    }

    // The ACP gate comes before any token exists.
    if let Some(file) = &args.acp_initialize
        && let AcpGate::Refuse(reason) = acp_gate_file(file)
    {
        note(&format!(
            "tutti: not binding the MCP server: {reason} (in {}); no token was issued",
            file.display()
        ));
        emit(&binding::acp_empty())?;
        return Ok(ExitCode::SUCCESS);
    }

    // Read and check the Codex config before issuing, so a broken file costs no token.
    let mut codex = match &args.codex_home {
        Some(dir) => Some(CodexConfig::load(dir)?),
        None => None,
    };

    let refresh = codex_refresh(args.format).await;

    if args.via == Via::Stdio {
        return issue_stdio(state_dir, &args, codex, refresh);
    }

    let mut kernel = Kernel::connect(state_dir).await?;
    let reply = kernel
        .client
        .issue_session(IssueSessionRequest {
            workspace: args.workspace,
            session: args.session,
            tools: args.tools.wire().into(),
            confirm_high: args.confirm.high(),
            confirm_via_person: args.confirm.via().0,
            confirm_via_agent: args.confirm.via().1,
        })
        .await
        .map_err(|status| kernel.error(status))?
        .into_inner();
    let binding = Binding::from(reply);

    if let Some(config) = &mut codex {
        config.merge_and_write(&binding, refresh)?;
    }
    emit(&printed(binding::render(&binding, args.format)?, refresh))?;
    Ok(ExitCode::SUCCESS)
}

/// With `--format codex`: whether the binding also turns on Codex's list-changed feature
/// (`codex_features.rs`); says on stderr, in one line, when it does not.
async fn codex_refresh(format: Format) -> bool {
    if format != Format::Codex {
        return false;
    }
    match codex_features::detect().await {
        Ok(()) => true,
        Err(why) => {
            note(&format!(
                "tutti: note: not setting [features] {}: {why}; Codex then sees connectors installed during a session only after it restarts",
                codex_features::LIST_CHANGED
            ));
            false
        }
    }
}

/// The binding as printed: with the features table when `refresh`.
fn printed(rendered: String, refresh: bool) -> String {
    if refresh {
        codex_features::with_features(rendered)
    } else {
        rendered
    }
}

/// `--via stdio`: the entry runs the stdio bridge; no token is issued or printed.
fn issue_stdio(
    state_dir: &Path,
    args: &IssueArgs,
    codex: Option<CodexConfig>,
    refresh: bool,
) -> Result<ExitCode, CliError> {
    let state_dir =
        std::path::absolute(state_dir).map_err(|e| CliError::io("resolve", state_dir, e))?;
    let launch = Launch::new(
        &state_dir,
        &args.workspace,
        &args.session,
        args.tools,
        &args.confirm,
    )?;
    if let Some(mut config) = codex {
        binding_stdio::merge_codex(&mut config.doc, &launch).map_err(|()| {
            CliError::CodexMcpServers {
                path: config.path.clone(),
            }
        })?;
        config.write_noting(refresh)?;
    }
    let rendered = binding_stdio::render(&launch, args.format, &state_dir)?;
    emit(&printed(rendered, refresh))?;
    Ok(ExitCode::SUCCESS)
}

/// Judges the agent's ACP `initialize` response in `file`. SPEC §6: the server is bound only
/// when the agent declares `mcpCapabilities.http = true`; a file that cannot be read or is not
/// JSON declares nothing, so it is a refusal (empty binding, exit 0), never an error.
fn acp_gate_file(file: &Path) -> AcpGate {
    let text = match fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) => return AcpGate::Refuse(format!("the file cannot be read ({e})")),
    };
    match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(value) => binding::acp_gate(&value),
        Err(e) => AcpGate::Refuse(format!("the file is not valid JSON ({e})")),
    }
}

/// `DIR/config.toml` of Codex, parsed up front and rewritten atomically.
struct CodexConfig {
    /// The file written: `DIR/config.toml`, or the file it links to.
    path: PathBuf,
    doc: DocumentMut,
}

impl CodexConfig {
    fn load(dir: &Path) -> Result<Self, CliError> {
        let mut path = dir.join("config.toml");
        // Write through a symlink (dotfile managers) rather than replacing it.
        if fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
            path = fs::canonicalize(&path).map_err(|e| CliError::io("resolve", &path, e))?;
        }
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(CliError::io("read", &path, e)),
        };
        let doc = binding::parse_codex_config(&path, &text)?;
        Ok(Self { path, doc })
    }

    fn merge_and_write(&mut self, binding: &Binding, refresh: bool) -> Result<(), CliError> {
        binding::merge_codex(&mut self.doc, binding).map_err(|()| CliError::CodexMcpServers {
            path: self.path.clone(),
        })?;
        self.write_noting(refresh)
    }

    /// Writes the file (with the features flag when `refresh`) and says what changed.
    fn write_noting(&mut self, refresh: bool) -> Result<(), CliError> {
        let mut tables = format!("[mcp_servers.{}]", binding::SERVER_NAME);
        if refresh {
            if codex_features::merge(&mut self.doc).is_ok() {
                tables.push_str(", [features]");
            } else {
                note(&format!(
                    "tutti: note: not setting [features] {} in {}: its `features` is not a table",
                    codex_features::LIST_CHANGED,
                    self.path.display()
                ));
            }
        }
        self.write()?;
        note(&format!(
            "tutti: updated {} ({tables})",
            self.path.display()
        ));
        Ok(())
    }

    fn write(&self) -> Result<(), CliError> {
        fsutil::write_atomic(&self.path, self.doc.to_string().as_bytes(), 0o600)
            .map_err(|e| CliError::io("write", &self.path, e))
    }
}

// === revoke ===

pub(crate) async fn revoke(state_dir: &Path, args: RevokeArgs) -> Result<ExitCode, CliError> {
    let request = RevokeSessionRequest {
        workspace: args.workspace.unwrap_or_default(),
        session: args.session.unwrap_or_default(),
        all: args.all,
    };
    if !request.all && request.workspace.is_empty() {
        return Err(CliError::EmptyArgument {
            what: "--workspace",
        });
    }
    if !request.all && request.session.is_empty() {
        return Err(CliError::EmptyArgument { what: "--session" });
    }
    let scope = if request.all {
        "every session".to_owned()
    } else {
        format!(
            "workspace {}, session {}",
            visible(&request.workspace),
            visible(&request.session)
        )
    };
    let mut kernel = Kernel::connect(state_dir).await?;
    let reply = kernel
        .client
        .revoke_session(request)
        .await
        .map_err(|status| kernel.error(status))?
        .into_inner();
    emit(&if args.json {
        json_line(&RevokeJson {
            revoked: reply.revoked,
        })?
    } else if reply.revoked == 0 {
        // Not an error: the outcome (no live token there) is what was asked for.
        format!("revoked 0 tokens: {scope} had no live token\n")
    } else {
        let tokens = if reply.revoked == 1 {
            "token"
        } else {
            "tokens"
        };
        format!("revoked {} {tokens} ({scope})\n", reply.revoked)
    })?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Serialize)]
struct RevokeJson {
    revoked: u32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::TempDir;

    fn binding() -> Binding {
        Binding {
            url: "http://127.0.0.1:5/mcp/connector".into(),
            token: "tts_x".into(),
            skill_roots: vec![],
            bin_dir: "/s/bin".into(),
            tools: tutti_proto::kernel::ToolsMode::All,
        }
    }

    #[test]
    fn workspace_that_looks_like_a_missing_path_is_noted() {
        let note = missing_workspace_path("./no-such-project-dir");
        assert!(
            note.as_deref()
                .is_some_and(|n| n.contains("looks like a path but does not exist")),
            "{note:?}"
        );
        assert!(missing_workspace_path("~/proj").is_some_and(|n| n.contains("$HOME")));
        assert_eq!(missing_workspace_path("myproj"), None);
        assert_eq!(missing_workspace_path(env!("CARGO_MANIFEST_DIR")), None);
    }

    #[test]
    fn codex_home_file_is_created_then_merged_keeping_other_settings() {
        let home = TempDir::new("codex");
        let dir = home.path().join("new-home");
        let mut config = CodexConfig::load(&dir).unwrap_or_else(|e| panic!("{e}"));
        config
            .merge_and_write(&binding(), false)
            .unwrap_or_else(|e| panic!("{e}"));
        let path = dir.join("config.toml");
        let written = fs::read_to_string(&path).unwrap_or_default();
        assert_eq!(
            written,
            binding::render(&binding(), Format::Codex).unwrap_or_default()
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = fs::metadata(&path)
                .map(|m| m.permissions().mode() & 0o777)
                .ok();
            assert_eq!(mode, Some(0o600));
        }

        let before = "model = \"o3\"\n\n[mcp_servers.x]\ncommand = \"x\"\n";
        fs::write(&path, before).unwrap_or_else(|e| panic!("{e}"));
        let mut config = CodexConfig::load(&dir).unwrap_or_else(|e| panic!("{e}"));
        config
            .merge_and_write(&binding(), false)
            .unwrap_or_else(|e| panic!("{e}"));
        let written = fs::read_to_string(&path).unwrap_or_default();
        assert!(written.starts_with(before), "{written}");
        assert!(written.contains("[mcp_servers.connector]\n"), "{written}");
        // No temp file is left behind.
        let leftovers: Vec<_> = fs::read_dir(&dir)
            .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert_eq!(leftovers.len(), 1, "{leftovers:?}");
    }

    #[test]
    fn broken_codex_config_is_refused_before_issuing() {
        let home = TempDir::new("codexbad");
        fs::write(home.path().join("config.toml"), "[oops\n").unwrap_or_else(|e| panic!("{e}"));
        let err = CodexConfig::load(home.path()).err();
        assert!(matches!(err, Some(CliError::CodexConfig { .. })), "{err:?}");
    }

    #[cfg(unix)]
    #[test]
    fn codex_config_symlink_is_written_through() {
        let home = TempDir::new("codexlink");
        let real = home.path().join("real.toml");
        fs::write(&real, "model = \"o3\"\n").unwrap_or_else(|e| panic!("{e}"));
        let link = home.path().join("config.toml");
        std::os::unix::fs::symlink(&real, &link).unwrap_or_else(|e| panic!("{e}"));
        let mut config = CodexConfig::load(home.path()).unwrap_or_else(|e| panic!("{e}"));
        config
            .merge_and_write(&binding(), false)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(fs::symlink_metadata(&link).is_ok_and(|m| m.file_type().is_symlink()));
        let written = fs::read_to_string(&real).unwrap_or_default();
        assert!(written.starts_with("model = \"o3\"\n"), "{written}");
        assert!(written.contains("Bearer tts_x"), "{written}");
    }

    #[test]
    fn acp_gate_reads_the_file() {
        let dir = TempDir::new("acp");
        let yes = dir.path().join("yes.json");
        fs::write(
            &yes,
            r#"{"protocolVersion":1,"agentCapabilities":{"mcpCapabilities":{"http":true}}}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(acp_gate_file(&yes), AcpGate::Bind);
        let no = dir.path().join("no.json");
        fs::write(
            &no,
            r#"{"agentCapabilities":{"mcpCapabilities":{"sse":true}}}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(acp_gate_file(&no), AcpGate::Refuse(_)));
        // Unreadable or not JSON: the agent declares nothing, so nothing is bound (SPEC §6).
        let bad = dir.path().join("bad.json");
        fs::write(&bad, "not json").unwrap_or_else(|e| panic!("{e}"));
        assert!(
            matches!(acp_gate_file(&bad), AcpGate::Refuse(ref r) if r.contains("not valid JSON"))
        );
        assert!(matches!(
            acp_gate_file(&dir.path().join("missing.json")),
            AcpGate::Refuse(ref r) if r.contains("cannot be read")
        ));
        assert!(matches!(acp_gate_file(dir.path()), AcpGate::Refuse(_)));
    }

    /// `tutti session issue w s` in `format`, with the given `--acp-initialize` and `--codex-home`.
    fn issue_args(
        format: Format,
        acp_initialize: Option<std::path::PathBuf>,
        codex_home: Option<std::path::PathBuf>,
    ) -> IssueArgs {
        IssueArgs {
            workspace: "w".into(),
            session: "s".into(),
            format,
            tools: crate::args::ToolsArg::All,
            confirm: Default::default(),
            acp_initialize,
            codex_home,
            via: crate::args::Via::Http,
            json: false,
        }
    }

    /// The ACP refusal and the flag checks never reach the kernel: with no kernel running,
    /// they still succeed (or fail with their own message, not "no kernel").
    #[tokio::test]
    async fn acp_refusal_issues_nothing_and_needs_no_kernel() {
        let dir = TempDir::new("acpnokernel");
        let no = dir.path().join("no.json");
        fs::write(
            &no,
            r#"{"agentCapabilities":{"mcpCapabilities":{"http":false}}}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let got = issue(dir.path(), issue_args(Format::Acp, Some(no.clone()), None)).await;
        assert!(
            matches!(got, Ok(code) if code == ExitCode::SUCCESS),
            "{got:?}"
        );
        // An unreadable file is a refusal too, not an error.
        let got = issue(
            dir.path(),
            issue_args(Format::Acp, Some(dir.path().join("missing.json")), None),
        )
        .await;
        assert!(
            matches!(got, Ok(code) if code == ExitCode::SUCCESS),
            "{got:?}"
        );

        let got = issue(dir.path(), issue_args(Format::Runtime, Some(no), None)).await;
        assert!(
            matches!(got, Err(CliError::FlagNotForFormat { .. })),
            "{got:?}"
        );

        let got = issue(
            dir.path(),
            issue_args(Format::Claude, None, Some(dir.path().to_path_buf())),
        )
        .await;
        assert!(
            matches!(got, Err(CliError::FlagNotForFormat { .. })),
            "{got:?}"
        );

        // With http = true the gate passes and the command goes on to the kernel.
        let yes = dir.path().join("yes.json");
        fs::write(
            &yes,
            r#"{"agentCapabilities":{"mcpCapabilities":{"http":true}}}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let got = issue(dir.path(), issue_args(Format::Acp, Some(yes), None)).await;
        assert!(matches!(got, Err(CliError::NoKernel { .. })), "{got:?}");
    }
}

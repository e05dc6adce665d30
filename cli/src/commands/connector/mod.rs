//! `tutti connector install|uninstall|connect|disconnect|probe|available`.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{BufRead, IsTerminal as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde::Serialize;
use tutti_proto::kernel::{
    AvailableConnector, AvailableReply, ConnectRequest, Empty, InstallPlan, InstallReply,
    InstallRequest, KeyRequest, ProbeReply, ProbeRequest,
};

use crate::args::{ConnectArgs, InstallArgs, KeyArg, ProbeArgs};
use crate::binding::SERVER_NAME;
use crate::error::CliError;
use crate::kernel::Kernel;
use crate::output::{emit, first_line, json_line, note, one_line, shell_join, table, visible};

// === install ===

pub(crate) async fn install(state_dir: &Path, args: InstallArgs) -> Result<ExitCode, CliError> {
    let dir = absolute_dir(Path::new(&args.source))?;
    let mut kernel = Kernel::connect(state_dir).await?;
    install_release(&mut kernel, &dir, &args, None).await
}

/// Installs a release folder: the plan, the confirmation (and what a market source adds to
/// it, `extra`), the trust step, the install.
pub(super) async fn install_release(
    kernel: &mut Kernel,
    dir: &Path,
    args: &InstallArgs,
    extra: Option<&str>,
) -> Result<ExitCode, CliError> {
    let mut request = InstallRequest {
        source_dir: dir.display().to_string(),
        allow_commands: args.allow_commands.clone(),
        allow_env: args.allow_env.clone(),
        allow_skill_findings: args.allow_skill_findings,
        trust_updates: args.trust_updates,
        ..Default::default()
    };
    let plan = kernel
        .client
        .plan_install(request.clone())
        .await
        .map_err(|status| kernel.error(status))?
        .into_inner();
    if !plan.problems.is_empty() {
        for problem in &plan.problems {
            note(&visible(&one_line(problem, 4096)));
        }
        return Ok(ExitCode::FAILURE);
    }
    note(confirmation(&plan, Verb::Install).trim_end());
    if let Some(extra) = extra {
        note(extra.trim_end());
    }
    if !args.yes {
        confirm(Verb::Install)?;
    }
    if args.probe && !probe_before_install(kernel, &plan, &request).await? {
        return Ok(ExitCode::FAILURE);
    }
    // SPEC §12: the install is bound to the content just confirmed.
    request.expected_sha256 = plan.sha256.clone();
    let reply = kernel
        .client
        .install(request)
        .await
        .map_err(|status| kernel.error(status))?
        .into_inner();
    emit(&if args.json {
        json_line(&InstallJson::from(&reply))?
    } else if plan.same_release {
        format!(
            "reinstalled {} {} (the same release; its worker restarts)\n",
            reply.key,
            visible(&reply.version)
        )
    } else if reply.upgraded && reply.status == "ready" && !plan.upgrades_version.is_empty() {
        // The status is the live generation's: the upgrade has not committed yet.
        format!(
            "installed {key} {new} (replacing {old}); {old} serves until the new release is \
             ready, and stays if its tools are refused or it does not start: see `tutti status`\n",
            key = reply.key,
            new = visible(&reply.version),
            old = visible(&plan.upgrades_version),
        )
    } else {
        format!(
            "installed {} {} ({})\n",
            reply.key,
            visible(&reply.version),
            reply.status
        )
    })?;
    Ok(ExitCode::SUCCESS)
}

/// `install --probe`: a stdio release's upstream runs once as `tutti connector probe DIR`
/// runs it (handshake, tools/list, schema check) before anything is installed. `false`
/// (after the probe's problems, one line each) when it fails: nothing is installed.
async fn probe_before_install(
    kernel: &mut Kernel,
    plan: &InstallPlan,
    request: &InstallRequest,
) -> Result<bool, CliError> {
    if plan.transport != "stdio" {
        note("tutti: --probe starts stdio releases only; this one is installed without a probe");
        return Ok(true);
    }
    let probed = kernel
        .client
        .probe(ProbeRequest {
            target: request.source_dir.clone(),
            allow_commands: request.allow_commands.clone(),
            allow_env: request.allow_env.clone(),
        })
        .await;
    // An upstream that does not start comes back as the kernel's error, its reason in one line.
    let problems = match probed {
        Ok(reply) => {
            let reply = reply.into_inner();
            note(render_probe(&reply).trim_end());
            reply.problems
        }
        Err(status) if status.code() == tonic::Code::Unavailable => {
            return Err(kernel.error(status));
        }
        Err(status) => vec![status.message().to_owned()],
    };
    if problems.is_empty() {
        return Ok(true);
    }
    for problem in &problems {
        note(&visible(&one_line(problem, 4096)));
    }
    note(&format!(
        "tutti: {} not installed: the probe found {} problem(s); fix them and install again (`tutti connector probe DIR` repeats the check)",
        plan.key,
        problems.len()
    ));
    Ok(false)
}

fn absolute_dir(dir: &Path) -> Result<PathBuf, CliError> {
    let abs = std::path::absolute(dir).map_err(|e| CliError::io("resolve", dir, e))?;
    if !abs.is_dir() {
        return Err(CliError::NotADirectory { path: abs });
    }
    Ok(abs)
}

/// What will run, shown before the trust step (to stderr).
/// Every field is shown with its control characters written out (`visible`, `shell_join`):
/// a manifest must not be able to rewrite what the person confirming sees.
pub(crate) fn confirmation(plan: &InstallPlan, verb: Verb) -> String {
    let mut out = format!(
        "{} connector {} {} ({})\n",
        verb.heading(),
        plan.key,
        visible(&plan.version),
        visible(&plan.name)
    );
    if !plan.description.is_empty() {
        out.push_str(&format!("  about: {}\n", visible(&plan.description)));
    }
    if !plan.sha256.is_empty() {
        out.push_str(&format!("  sha256: {}\n", visible(&plan.sha256)));
    }
    push_launch(&mut out, plan);
    push_secrets_and_grants(&mut out, plan);
    push_verb(&mut out, plan, verb);
    out
}

/// What the connector runs: its command line and environment, or its URL and login.
fn push_launch(out: &mut String, plan: &InstallPlan) {
    match plan.transport.as_str() {
        "stdio" => {
            out.push_str(&format!("  runs: {}\n", shell_join(&plan.argv)));
            out.push_str(&format!("  in:   {}\n", visible(&plan.cwd)));
            for var in &plan.env {
                out.push_str(&format!(
                    "  env:  {}={}\n",
                    visible(&var.name),
                    shell_join(std::slice::from_ref(&var.value))
                ));
            }
        }
        "http" => {
            out.push_str(&format!("  url:  {}\n", visible(&plan.url)));
            if plan.oauth_login {
                out.push_str(&format!(
                    "  login: OAuth; a browser login follows: run `tutti connector connect {}`\n",
                    visible(&plan.key)
                ));
            }
        }
        _ => {}
    }
}

/// The secrets it needs and what it is allowed beyond the plain run.
fn push_secrets_and_grants(out: &mut String, plan: &InstallPlan) {
    if plan.secret_names.is_empty() {
        out.push_str("  secrets: none\n");
    } else {
        let flags: Vec<String> = plan
            .secret_names
            .iter()
            .map(|n| format!("--from-env {n}"))
            .collect();
        out.push_str(&format!(
            "  secrets: {} (set them with: tutti connector connect {} {})\n",
            plan.secret_names.join(", "),
            plan.key,
            flags.join(" ")
        ));
    }
    if !plan.cli_entrypoint.is_empty() {
        out.push_str(&format!(
            "  cli:  tutti-connector-{} -> {}\n",
            plan.key,
            visible(&plan.cli_entrypoint)
        ));
    }
    if !plan.allowed_commands.is_empty() {
        out.push_str(&format!(
            "  allowed commands: {}\n",
            visible(&plan.allowed_commands.join(", "))
        ));
    }
    if !plan.allowed_env.is_empty() {
        out.push_str(&format!(
            "  allowed injection variables: {}\n",
            visible(&plan.allowed_env.join(", "))
        ));
    }
    for finding in &plan.skill_findings {
        out.push_str(&format!(
            "  skill finding (allowed): {}\n",
            visible(&one_line(finding, 512))
        ));
    }
}

/// What confirming does: probe, reinstall or upgrade.
fn push_verb(out: &mut String, plan: &InstallPlan, verb: Verb) {
    if verb == Verb::Probe {
        out.push_str("  probe: runs it once to list its tools, installs nothing\n");
    } else if plan.same_release {
        out.push_str("  reinstalls: the same release (its worker restarts)\n");
    } else if !plan.upgrades_version.is_empty() {
        out.push_str(&format!(
            "  upgrades: {}\n",
            visible(&plan.upgrades_version)
        ));
    }
}

/// What a confirmation is for: installing a release, or probing a release directory (which
/// runs its upstream just the same, SPEC §12).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verb {
    Install,
    Probe,
}

impl Verb {
    fn heading(self) -> &'static str {
        match self {
            Verb::Install => "Install",
            Verb::Probe => "Probe",
        }
    }
}

/// The trust step without `--yes`: ask on a terminal, refuse otherwise.
pub(crate) fn confirm(verb: Verb) -> Result<(), CliError> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(match verb {
            Verb::Install => CliError::ConfirmationNeeded,
            Verb::Probe => CliError::ProbeConfirmationNeeded,
        });
    }
    {
        use std::io::Write as _;
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "Proceed? [y/N] ");
        let _ = err.flush();
    }
    let mut answer = String::new();
    stdin
        .lock()
        .read_line(&mut answer)
        .map_err(|source| CliError::Terminal {
            action: "read the answer",
            source,
        })?;
    if is_yes(&answer) {
        Ok(())
    } else {
        Err(match verb {
            Verb::Install => CliError::Cancelled,
            Verb::Probe => CliError::ProbeCancelled,
        })
    }
}

fn is_yes(answer: &str) -> bool {
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

#[derive(Serialize)]
struct InstallJson<'a> {
    key: &'a str,
    version: &'a str,
    sha256: &'a str,
    upgraded: bool,
    status: &'a str,
}

impl<'a> From<&'a InstallReply> for InstallJson<'a> {
    fn from(r: &'a InstallReply) -> Self {
        Self {
            key: &r.key,
            version: &r.version,
            sha256: &r.sha256,
            upgraded: r.upgraded,
            status: &r.status,
        }
    }
}

// === uninstall / connect / disconnect ===

pub(crate) async fn uninstall(state_dir: &Path, args: KeyArg) -> Result<ExitCode, CliError> {
    let mut kernel = Kernel::connect(state_dir).await?;
    kernel
        .client
        .uninstall(KeyRequest {
            key: args.key.clone(),
            ..KeyRequest::default()
        })
        .await
        .map_err(|status| kernel.error(status))?;
    done(&args.key, "uninstalled", args.json)
}

/// The one line a state change prints: `<what> <key>`, or `{"key":…,"<what>":true}`.
fn done(key: &str, what: &str, json: bool) -> Result<ExitCode, CliError> {
    emit(&if json {
        // Written out so `key` comes first, like every other object we print.
        format!(
            "{{\"key\":{},{}:true}}\n",
            serde_json::Value::from(key),
            serde_json::Value::from(what)
        )
    } else {
        format!("{what} {key}\n")
    })?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn connect(state_dir: &Path, args: ConnectArgs) -> Result<ExitCode, CliError> {
    // Gather every value before talking to the kernel: a missing one changes nothing.
    let stdin = std::io::stdin();
    let interactive = !args.stdin.is_empty() && stdin.is_terminal();
    let secrets = {
        let mut input = stdin.lock();
        let env = |name: &str| std::env::var_os(name);
        let _echo = interactive.then(echo::off);
        collect_secrets(&args.from_env, &args.stdin, env, &mut input, interactive)?
    };
    let mut names: Vec<String> = secrets.keys().cloned().collect();
    names.sort();
    let mut kernel = Kernel::connect(state_dir).await?;
    let request = ConnectRequest {
        key: args.key.clone(),
        secrets,
        ..ConnectRequest::default()
    };
    kernel
        .client
        .connect_connector(request)
        .await
        .map_err(|status| match kernel.error(status) {
            // The kernel stores the values first: they may be saved although no answer came.
            CliError::KernelLost { reason, .. } if !names.is_empty() => {
                CliError::ConnectInterrupted {
                    key: args.key.clone(),
                    names: names.join(", "),
                    reason,
                }
            }
            other => other,
        })?;
    if super::login::is_oauth(&mut kernel, &args.key).await? {
        return super::login::run(
            &mut kernel,
            state_dir,
            &args.key,
            args.no_browser,
            args.json,
        )
        .await;
    }
    emit(&connected(&args.key, &names, args.json))?;
    Ok(ExitCode::SUCCESS)
}

/// What `connect` prints: the key and the names of the secrets it saved (never a value).
fn connected(key: &str, saved: &[String], json: bool) -> String {
    if json {
        format!(
            "{{\"key\":{},\"connected\":true,\"saved\":{}}}\n",
            serde_json::Value::from(key),
            serde_json::Value::from(saved.to_vec())
        )
    } else if saved.is_empty() {
        format!("connected {key}\n")
    } else {
        format!("connected {key} (saved {})\n", saved.join(", "))
    }
}

/// Secret values by name: `--from-env NAME` from the environment variable NAME, then one
/// line of `input` per `--stdin NAME`, in order. Errors name the variable, never a value.
fn collect_secrets(
    from_env: &[String],
    from_stdin: &[String],
    env: impl Fn(&str) -> Option<OsString>,
    input: &mut dyn BufRead,
    prompt: bool,
) -> Result<HashMap<String, String>, CliError> {
    let mut secrets = HashMap::new();
    let mut add = |name: &str, value: String| {
        if secrets.insert(name.to_owned(), value).is_some() {
            return Err(CliError::DuplicateSecret {
                name: name.to_owned(),
            });
        }
        Ok(())
    };
    for name in from_env {
        if name.is_empty() {
            return Err(CliError::EmptyArgument { what: "--from-env" });
        }
        let value = env(name)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| CliError::EnvMissing { name: name.clone() })?;
        let value = value
            .into_string()
            .map_err(|_| CliError::EnvNotUnicode { name: name.clone() })?;
        add(name, value)?;
    }
    for name in from_stdin {
        if name.is_empty() {
            return Err(CliError::EmptyArgument { what: "--stdin" });
        }
        if prompt {
            use std::io::Write as _;
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "{name}: ");
            let _ = err.flush();
        }
        let mut line = Vec::new();
        let read = input
            .read_until(b'\n', &mut line)
            .map_err(|source| CliError::StdinRead { source })?;
        if prompt {
            note("");
        }
        if read == 0 {
            return Err(CliError::StdinEnded { name: name.clone() });
        }
        while line.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
            line.pop();
        }
        if line.is_empty() {
            return Err(CliError::StdinEmpty { name: name.clone() });
        }
        let value = String::from_utf8(line)
            .map_err(|_| CliError::StdinNotUnicode { name: name.clone() })?;
        add(name, value)?;
    }
    Ok(secrets)
}

/// Turning terminal echo off while a secret is typed.
#[cfg(unix)]
mod echo {
    use nix::sys::termios::{self, LocalFlags, SetArg, Termios};

    pub(super) struct Guard(Option<Termios>);

    pub(super) fn off() -> Guard {
        let stdin = std::io::stdin();
        let Ok(original) = termios::tcgetattr(&stdin) else {
            return Guard(None);
        };
        let mut quiet = original.clone();
        quiet.local_flags.remove(LocalFlags::ECHO);
        match termios::tcsetattr(&stdin, SetArg::TCSANOW, &quiet) {
            Ok(()) => Guard(Some(original)),
            Err(_) => Guard(None),
        }
    }

    impl Drop for Guard {
        fn drop(&mut self) {
            if let Some(original) = self.0.take() {
                let _ = termios::tcsetattr(std::io::stdin(), SetArg::TCSANOW, &original);
            }
        }
    }
}

/// Windows consoles: values are read as typed (echo control is not implemented there).
#[cfg(not(unix))]
mod echo {
    pub(super) struct Guard;

    pub(super) fn off() -> Guard {
        Guard
    }
}

pub(crate) async fn disconnect(state_dir: &Path, args: KeyArg) -> Result<ExitCode, CliError> {
    let mut kernel = Kernel::connect(state_dir).await?;
    kernel
        .client
        .disconnect_connector(KeyRequest {
            key: args.key.clone(),
            ..KeyRequest::default()
        })
        .await
        .map_err(|status| kernel.error(status))?;
    done(&args.key, "disconnected", args.json)
}

// === probe ===

pub(crate) async fn probe(state_dir: &Path, args: ProbeArgs) -> Result<ExitCode, CliError> {
    let (target, fallback) = probe_target(&args.target)?;
    let mut kernel = Kernel::connect(state_dir).await?;
    let request = |target: String| ProbeRequest {
        target,
        allow_commands: args.allow_commands.clone(),
        allow_env: args.allow_env.clone(),
    };
    // A folder target is absolute (`probe_target`); a bare word is a key first.
    let folder = Path::new(&target);
    let reply = if folder.is_absolute() && folder.is_dir() {
        if !confirm_probe(&mut kernel, &target, &args).await? {
            return Ok(ExitCode::FAILURE);
        }
        kernel.client.probe(request(target)).await
    } else {
        match (kernel.client.probe(request(target)).await, fallback) {
            // `probe notes` with a folder `notes` here and no connector `notes`: the folder.
            (Err(status), Some(dir)) if status.code() == tonic::Code::NotFound => {
                if !confirm_probe(&mut kernel, &dir, &args).await? {
                    return Ok(ExitCode::FAILURE);
                }
                kernel.client.probe(request(dir)).await
            }
            (reply, _) => reply,
        }
    }
    .map_err(|status| kernel.error(status))?
    .into_inner();
    if args.json {
        emit(&json_line(&ProbeJson::from(&reply))?)?;
    } else {
        emit(&render_probe(&reply))?;
        for problem in &reply.problems {
            note(&visible(&one_line(problem, 4096)));
        }
    }
    Ok(if reply.problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// SPEC §12: probing a release directory runs its upstream, so it shows the launch line and
/// asks as install does (`--yes` confirms). `false` (after one line per problem) when the
/// plan already refuses the folder: nothing runs.
async fn confirm_probe(kernel: &mut Kernel, dir: &str, args: &ProbeArgs) -> Result<bool, CliError> {
    let plan = kernel
        .client
        .plan_install(InstallRequest {
            source_dir: dir.to_owned(),
            allow_commands: args.allow_commands.clone(),
            allow_env: args.allow_env.clone(),
            // Skills are not mounted by a probe: their findings are shown, not refused.
            allow_skill_findings: true,
            ..Default::default()
        })
        .await
        .map_err(|status| kernel.error(status))?
        .into_inner();
    if !plan.problems.is_empty() {
        for problem in &plan.problems {
            note(&visible(&one_line(problem, 4096)));
        }
        return Ok(false);
    }
    note(confirmation(&plan, Verb::Probe).trim_end());
    if !args.yes {
        confirm(Verb::Probe)?;
    }
    Ok(true)
}

/// What to probe: an installed connector's key, or a release directory (made absolute). A
/// bare word that could be a key is one (`probe github`), with the directory of that name,
/// if there is one, as the fallback when no such connector is installed; to probe the folder
/// of an installed key's name, name it as a path (`./github`).
fn probe_target(target: &str) -> Result<(String, Option<String>), CliError> {
    if target.is_empty() {
        return Err(CliError::EmptyArgument { what: "DIR|KEY" });
    }
    let path = Path::new(target);
    let absolute_dir = || -> Result<Option<String>, CliError> {
        if !path.is_dir() {
            return Ok(None);
        }
        let abs = std::path::absolute(path).map_err(|e| CliError::io("resolve", path, e))?;
        Ok(Some(abs.display().to_string()))
    };
    if looks_like_key(target) {
        return Ok((target.to_owned(), absolute_dir()?));
    }
    Ok(match absolute_dir()? {
        Some(dir) => (dir, None),
        None => (target.to_owned(), None),
    })
}

/// `^[a-z][a-z0-9-]{0,23}$` (SPEC §3).
fn looks_like_key(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && s.len() <= 24
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

fn render_probe(reply: &ProbeReply) -> String {
    let mut out = format!("connector {}", reply.key);
    if !reply.server_name.is_empty() {
        out.push_str(&format!(": server {}", visible(&reply.server_name)));
    }
    if !reply.protocol_version.is_empty() {
        out.push_str(&format!(", protocol {}", visible(&reply.protocol_version)));
    }
    out.push('\n');
    if reply.tools.is_empty() {
        out.push_str("no tools\n");
    } else {
        let rows: Vec<Vec<String>> = reply
            .tools
            .iter()
            .map(|t| {
                vec![
                    t.local_name.clone(),
                    t.upstream_name.clone(),
                    one_line(first_line(&t.description), 120),
                ]
            })
            .collect();
        out.push_str(&table(&["TOOL", "UPSTREAM", "DESCRIPTION"], &rows));
    }
    if !reply.problems.is_empty() {
        out.push_str(&format!(
            "{} problem(s), see stderr\n",
            reply.problems.len()
        ));
    }
    out
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ProbeJson<'a> {
    key: &'a str,
    server_name: &'a str,
    protocol_version: &'a str,
    tools: Vec<ProbeToolJson<'a>>,
    problems: &'a [String],
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ProbeToolJson<'a> {
    local_name: &'a str,
    upstream_name: &'a str,
    description: &'a str,
}

impl<'a> From<&'a ProbeReply> for ProbeJson<'a> {
    fn from(r: &'a ProbeReply) -> Self {
        Self {
            key: &r.key,
            server_name: &r.server_name,
            protocol_version: &r.protocol_version,
            tools: r
                .tools
                .iter()
                .map(|t| ProbeToolJson {
                    local_name: &t.local_name,
                    upstream_name: &t.upstream_name,
                    description: &t.description,
                })
                .collect(),
            problems: &r.problems,
        }
    }
}

// === available ===

pub(crate) async fn available(state_dir: &Path, json: bool) -> Result<ExitCode, CliError> {
    let mut kernel = Kernel::connect(state_dir).await?;
    let reply = kernel
        .client
        .available(Empty {})
        .await
        .map_err(|status| kernel.error(status))?
        .into_inner();
    let view = AvailableJson::from(&reply);
    emit(&if json {
        json_line(&view)?
    } else {
        render_available(&view)
    })?;
    Ok(ExitCode::SUCCESS)
}

/// SPEC §7, exactly. Nothing else from the kernel's reply reaches it.
#[derive(Debug, Serialize)]
struct AvailableJson {
    connectors: Vec<ConnectorView>,
}

#[derive(Debug, Serialize)]
struct ConnectorView {
    key: String,
    name: String,
    description: String,
    skills: Vec<SkillView>,
    interfaces: Vec<InterfaceView>,
}

#[derive(Debug, Serialize)]
struct SkillView {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    title: Option<String>,
    description: String,
}

#[derive(Debug, Serialize)]
#[serde(tag = "kind")]
enum InterfaceView {
    #[serde(rename = "mcp", rename_all = "camelCase")]
    Mcp {
        server_name: String,
        tool_prefix: String,
        status: String,
    },
    #[serde(rename = "cli")]
    Cli { command: String, status: String },
}

fn or_default(value: &str, default: impl FnOnce() -> String) -> String {
    if value.is_empty() {
        default()
    } else {
        value.to_owned()
    }
}

impl From<&AvailableConnector> for ConnectorView {
    fn from(c: &AvailableConnector) -> Self {
        let mut interfaces: Vec<InterfaceView> = c
            .interfaces
            .iter()
            .filter_map(|i| match i.kind.as_str() {
                "mcp" => Some(InterfaceView::Mcp {
                    server_name: or_default(&i.server_name, || SERVER_NAME.to_owned()),
                    tool_prefix: or_default(&i.tool_prefix, || format!("{}_", c.key)),
                    status: i.status.clone(),
                }),
                "cli" => Some(InterfaceView::Cli {
                    command: or_default(&i.command, || format!("tutti-connector-{}", c.key)),
                    status: i.status.clone(),
                }),
                _ => None,
            })
            .collect();
        interfaces.sort_by_key(|i| match i {
            InterfaceView::Mcp { .. } => 0,
            InterfaceView::Cli { .. } => 1,
        });
        Self {
            key: c.key.clone(),
            name: c.name.clone(),
            description: c.description.clone(),
            skills: c
                .skills
                .iter()
                .map(|s| SkillView {
                    name: s.name.clone(),
                    title: (!s.title.is_empty()).then(|| s.title.clone()),
                    description: s.description.clone(),
                })
                .collect(),
            interfaces,
        }
    }
}

impl From<&AvailableReply> for AvailableJson {
    fn from(r: &AvailableReply) -> Self {
        let mut connectors: Vec<ConnectorView> = r.connectors.iter().map(Into::into).collect();
        connectors.sort_by(|a, b| a.key.cmp(&b.key));
        Self { connectors }
    }
}

fn render_available(view: &AvailableJson) -> String {
    if view.connectors.is_empty() {
        return "no connectors installed\n".to_owned();
    }
    let rows: Vec<Vec<String>> = view
        .connectors
        .iter()
        .map(|c| {
            let mut mcp = "-".to_owned();
            let mut cli = "-".to_owned();
            for i in &c.interfaces {
                match i {
                    InterfaceView::Mcp {
                        tool_prefix,
                        status,
                        ..
                    } => mcp = format!("{status} ({tool_prefix}*)"),
                    InterfaceView::Cli { command, status } => cli = format!("{status} ({command})"),
                }
            }
            let skills: Vec<&str> = c.skills.iter().map(|s| s.name.as_str()).collect();
            vec![
                c.key.clone(),
                c.name.clone(),
                mcp,
                cli,
                if skills.is_empty() {
                    "-".to_owned()
                } else {
                    skills.join(", ")
                },
                one_line(&c.description, 80),
            ]
        })
        .collect();
    table(
        &["KEY", "NAME", "MCP", "CLI", "SKILLS", "DESCRIPTION"],
        &rows,
    )
}

#[cfg(test)]
mod tests;

//! `tutti doctor [--json]` (SPEC §14): checks what commonly keeps an agent from the
//! connectors and prints one line per check, `OK`, `WARN` or `FAIL`, with the exact fix.
//! It writes nothing: it reads the state dir, the agent configs in their usual places
//! (`.mcp.json` in the current directory, `~/.claude.json`, `$CODEX_HOME/config.toml`; every
//! client's configuration for `doctor_market`'s checks), asks
//! the kernel for its status and the service manager for its state. Exits non-zero when a
//! check fails. Never prints a token: agent configs are read for their URL only.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use serde_json::Value;
use tutti_proto::kernel::{Empty, StatusReply};

use crate::error::CliError;
use crate::kernel::Kernel;
use crate::output::{emit, json_line};

use super::doctor_check::{Check, Level, check};

/// Reads one environment variable (empty counts as unset).
type VarFn = dyn Fn(&str) -> Option<OsString>;

/// What the checks read from the process: environment and working directory.
pub(crate) struct Env {
    vars: Box<VarFn>,
    cwd: Option<PathBuf>,
}

impl Env {
    fn real() -> Env {
        Env {
            vars: Box::new(|name| std::env::var_os(name).filter(|v| !v.is_empty())),
            cwd: std::env::current_dir().ok(),
        }
    }

    fn var(&self, name: &str) -> Option<OsString> {
        (self.vars)(name)
    }
}

pub(crate) async fn run(state_dir: &Path, json: bool) -> Result<ExitCode, CliError> {
    let env = Env::real();
    let (kernel, live) = kernel_check(state_dir).await;
    let mut checks = vec![kernel, permissions(state_dir), socket_length(state_dir)];
    checks.push(bin_on_path(state_dir, &env));
    checks.push(service());
    checks.extend(agent_configs(
        &env,
        live.as_ref().map(|s| s.frontend_url.as_str()),
    ));
    checks.extend(launch_commands(state_dir, &env));
    let market = super::doctor_market::checks(state_dir, env.cwd.as_deref(), live.is_some());
    checks.extend(market.await);
    checks.push(clock(state_dir));
    let failed = checks.iter().filter(|c| c.level == Level::Fail).count();
    if json {
        emit(&json_line(
            &serde_json::json!({"ok": failed == 0, "checks": checks}),
        )?)?;
    } else {
        let text: String = checks.iter().map(|c| c.line() + "\n").collect();
        emit(&text)?;
    }
    if failed > 0 {
        return Err(CliError::DoctorFailed { failed });
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether the kernel answers `Status` (within a few seconds), and its answer.
async fn kernel_check(state_dir: &Path) -> (Check, Option<StatusReply>) {
    let asked = async {
        let mut k = Kernel::connect(state_dir).await?;
        k.client
            .status(Empty {})
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| k.error(s))
    };
    let answer = tokio::time::timeout(Duration::from_secs(5), asked).await;
    match answer {
        Ok(Ok(s)) => {
            let url = if s.frontend_url.is_empty() {
                "no frontend yet".to_owned()
            } else {
                format!("MCP URL {}", s.frontend_url)
            };
            (
                check(
                    "kernel",
                    Level::Ok,
                    format!("running (pid {}), {url}", s.kernel_pid),
                ),
                Some(s),
            )
        }
        Ok(Err(e)) => {
            let text = e.to_string();
            let (problem, fix) = text
                .split_once("; ")
                .unwrap_or((&text, "start it with `tutti up`"));
            (check("kernel", Level::Fail, problem).fix(fix), None)
        }
        Err(_) => (
            check("kernel", Level::Fail, "does not answer within 5 s")
                .fix("look at `tutti logs` and restart it (`tutti up`)"),
            None,
        ),
    }
}

/// The state dir and its private parts (`run/`, `secrets/`, `logs/`) must be the user's own
/// and closed to everyone else.
fn permissions(state_dir: &Path) -> Check {
    const NAME: &str = "state dir permissions";
    if !state_dir.exists() {
        return check(
            NAME,
            Level::Warn,
            format!("{} does not exist yet", state_dir.display()),
        )
        .fix("`tutti up` creates it");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let me = nix::unistd::getuid().as_raw();
        let dirs = [
            (state_dir.to_path_buf(), 0o022),
            (tutti_rules::state_dir::layout::run(state_dir), 0o077),
            (tutti_rules::state_dir::layout::secrets(state_dir), 0o077),
            (tutti_rules::state_dir::layout::logs(state_dir), 0o077),
        ];
        for (dir, forbidden) in dirs {
            let Ok(meta) = std::fs::symlink_metadata(&dir) else {
                continue;
            };
            if meta.uid() != me {
                return check(
                    NAME,
                    Level::Fail,
                    format!(
                        "{} belongs to uid {}, not to you (uid {me})",
                        dir.display(),
                        meta.uid()
                    ),
                )
                .fix(format!(
                    "run tutti as the owner, or `chown -R {me} {}`",
                    state_dir.display()
                ));
            }
            if meta.mode() & forbidden != 0 {
                return check(
                    NAME,
                    Level::Fail,
                    format!(
                        "{} is open to other users (mode {:o})",
                        dir.display(),
                        meta.mode() & 0o777
                    ),
                )
                .fix(format!("chmod go-rwx {}", dir.display()));
            }
        }
    }
    check(
        NAME,
        Level::Ok,
        format!("{} is private to you", state_dir.display()),
    )
}

/// Longest Unix socket path (`sun_path` less its terminating NUL).
const SOCKET_PATH_MAX: usize = if cfg!(target_os = "linux") { 107 } else { 103 };

/// The kernel's socket, and a worker's socket of a plausible generation, must fit `sun_path`.
fn socket_length(state_dir: &Path) -> Check {
    const NAME: &str = "socket path length";
    if cfg!(windows) {
        return check(NAME, Level::Ok, "named pipes have no path limit");
    }
    let kernel = tutti_proto::transport::kernel_endpoint(state_dir);
    let worker = tutti_proto::transport::worker_endpoint(state_dir, 0xfff_ffff);
    let longest = kernel.as_str().len().max(worker.as_str().len());
    if longest > SOCKET_PATH_MAX {
        return check(
            NAME,
            Level::Fail,
            format!(
                "sockets under {} need {longest} bytes, over the system's limit of {SOCKET_PATH_MAX}",
                tutti_rules::state_dir::layout::run(state_dir).display()
            ),
        )
        .fix(format!(
            "use a state dir path at least {} bytes shorter (--state-dir DIR or TUTTI_STATE_DIR), e.g. the default ~/.local/state/tutti",
            longest - SOCKET_PATH_MAX
        ));
    }
    check(
        NAME,
        Level::Ok,
        format!("{longest} of {SOCKET_PATH_MAX} bytes"),
    )
}

/// Agents find the `tutti-connector-<key>` shims through PATH.
fn bin_on_path(state_dir: &Path, env: &Env) -> Check {
    const NAME: &str = "bin dir on PATH";
    let bin = tutti_rules::state_dir::layout::bin(state_dir);
    let same = |p: &Path| {
        p == bin || matches!((p.canonicalize(), bin.canonicalize()), (Ok(a), Ok(b)) if a == b)
    };
    let path = env.var("PATH").unwrap_or_default();
    if std::env::split_paths(&path).any(|p| same(&p)) {
        return check(NAME, Level::Ok, format!("{} is on PATH", bin.display()));
    }
    let fix = if cfg!(windows) {
        format!(
            "add {} to your user PATH (System Properties, Environment Variables)",
            bin.display()
        )
    } else {
        format!(
            "add `export PATH=\"{}:$PATH\"` to your shell profile (and the agent's environment)",
            bin.display()
        )
    };
    check(
        NAME,
        Level::Warn,
        format!(
            "{} is not on PATH: agents cannot run connector CLIs",
            bin.display()
        ),
    )
    .fix(fix)
}

/// Whether a service manager keeps the kernel running.
fn service() -> Check {
    const NAME: &str = "service";
    let install = "`tutti service install --user --enable` (or keep `tutti up` running)";
    let user = super::service::manager_state(true);
    let system = super::service::manager_state(false);
    let installed = [user, system]
        .into_iter()
        .flatten()
        .find(|(_, installed, _)| *installed);
    let Some((definition, _, manager)) = installed else {
        return check(
            NAME,
            Level::Warn,
            "no service unit is installed: the kernel runs only while `tutti up` does",
        )
        .fix(install);
    };
    let what = definition.map_or("the service".to_owned(), |p| p.display().to_string());
    match manager.as_deref() {
        Some("active" | "loaded" | "RUNNING") => check(NAME, Level::Ok, format!("{what} is installed and running")),
        Some(state) => check(NAME, Level::Warn, format!("{what} is installed but {state}"))
            .fix("start it with `systemctl --user start tutti-kernel` (without --user for a system-wide unit; `sc.exe start tutti-kernel` on Windows), then see `tutti logs`"),
        None => check(NAME, Level::Warn, format!("{what} is installed; its service manager did not answer"))
            .fix("check it with `tutti service status`"),
    }
}

/// A URL in an agent config that points at a tutti frontend (`/mcp/connector` on loopback).
fn is_tutti_url(url: &str) -> bool {
    let rest = url.strip_prefix("http://").unwrap_or("");
    let loopback = ["127.0.0.1:", "localhost:", "[::1]:"]
        .iter()
        .any(|h| rest.starts_with(h));
    loopback && rest.contains("/mcp/connector")
}

/// Every tutti server URL in a Claude config (`mcpServers`, and per project in
/// `~/.claude.json`): (where, url).
fn claude_urls(doc: &Value) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut scan = |prefix: String, servers: &Value| {
        for (name, server) in servers.as_object().into_iter().flatten() {
            if let Some(url) = server["url"].as_str().filter(|u| is_tutti_url(u)) {
                found.push((format!("{prefix}mcpServers.{name}"), url.to_owned()));
            }
        }
    };
    scan(String::new(), &doc["mcpServers"]);
    for (project, p) in doc["projects"].as_object().into_iter().flatten() {
        scan(format!("projects[{project}]."), &p["mcpServers"]);
    }
    found
}

/// Every tutti server URL in a Codex `config.toml` (`[mcp_servers.*]`).
fn codex_urls(text: &str) -> Vec<(String, String)> {
    let Ok(doc) = text.parse::<toml_edit::DocumentMut>() else {
        return Vec::new();
    };
    let Some(servers) = doc.get("mcp_servers").and_then(|s| s.as_table_like()) else {
        return Vec::new();
    };
    servers
        .iter()
        .filter_map(|(name, item)| {
            let url = item.as_table_like()?.get("url")?.as_str()?;
            is_tutti_url(url).then(|| (format!("mcp_servers.{name}"), url.to_owned()))
        })
        .collect()
}

/// The agent configs in their usual places that point at a tutti frontend, checked against
/// the live URL.
fn agent_configs(env: &Env, live: Option<&str>) -> Vec<Check> {
    const NAME: &str = "agent config";
    let home = env
        .var("HOME")
        .or_else(|| env.var("USERPROFILE"))
        .map(PathBuf::from);
    let codex_home = env
        .var("CODEX_HOME")
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".codex")));
    let mut files: Vec<(PathBuf, bool)> = Vec::new();
    if let Some(cwd) = &env.cwd {
        files.push((cwd.join(".mcp.json"), false));
    }
    if let Some(home) = &home {
        files.push((home.join(".claude.json"), false));
    }
    if let Some(codex) = codex_home {
        files.push((codex.join("config.toml"), true));
    }
    let mut checks = Vec::new();
    for (path, toml) in files {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let urls = if toml {
            codex_urls(&text)
        } else {
            serde_json::from_str(&text)
                .map(|v| claude_urls(&v))
                .unwrap_or_default()
        };
        let format = if toml { "codex" } else { "claude" };
        for (place, url) in urls {
            let at = format!("{} ({place})", path.display());
            checks.push(match live.filter(|l| !l.is_empty()) {
                Some(l) if l == url => check(NAME, Level::Ok, format!("{at} points at the live URL {url}")),
                Some(l) => check(NAME, Level::Fail, format!("{at} points at {url}, but the runtime is at {l}"))
                    .fix(format!("update it with the output of `tutti session issue --workspace W --session S --format {format}`")),
                None => check(NAME, Level::Warn, format!("{at} points at {url}; no kernel runs to compare"))
                    .fix("start the kernel (`tutti up`) and run `tutti doctor` again"),
            });
        }
    }
    if checks.is_empty() {
        checks.push(
            check(NAME, Level::Warn, "no agent config (.mcp.json here, ~/.claude.json, $CODEX_HOME/config.toml) points at the runtime")
                .fix("bind an agent with `tutti session issue --workspace W --session S --format claude` (or codex)"),
        );
    }
    checks
}

/// The program each installed stdio connector launches (`confirmedLaunch[0]` in
/// `registry.json`) must still be there.
fn launch_commands(state_dir: &Path, env: &Env) -> Vec<Check> {
    const NAME: &str = "launch commands";
    let registry: Value =
        std::fs::read_to_string(tutti_rules::state_dir::layout::registry(state_dir))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or(Value::Null);
    let mut checks = Vec::new();
    let mut present = 0;
    for (key, c) in registry["connectors"].as_object().into_iter().flatten() {
        let Some(program) = c["confirmedLaunch"][0].as_str() else {
            continue;
        };
        if program.starts_with("http://") || program.starts_with("https://") {
            continue;
        }
        let path = Path::new(program);
        let found = if path.is_absolute() {
            is_program(path)
        } else {
            let dirs = env.var("PATH").unwrap_or_default();
            std::env::split_paths(&dirs).any(|d| is_program(&d.join(program)))
        };
        if found {
            present += 1;
        } else {
            checks.push(
                check(format!("connector {key}"), Level::Fail, format!("its command {program} is gone"))
                    .fix(format!("reinstall the program at {program}, or remove the connector with `tutti connector uninstall {key}`")),
            );
        }
    }
    if checks.is_empty() {
        checks.push(check(
            NAME,
            Level::Ok,
            format!("{present} connector command(s) present"),
        ));
    }
    checks
}

fn is_program(path: &Path) -> bool {
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        meta.is_file() && meta.permissions().mode() & 0o111 != 0
    }
    #[cfg(not(unix))]
    {
        meta.is_file()
    }
}

/// OAuth tokens and TLS certificates have validity times: the clock must not be behind
/// files this runtime wrote (nor this very binary).
fn clock(state_dir: &Path) -> Check {
    const NAME: &str = "clock";
    let now = SystemTime::now();
    let written = [
        std::env::current_exe().ok(),
        Some(tutti_rules::state_dir::layout::registry(state_dir)),
    ];
    let newest = written
        .into_iter()
        .flatten()
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .max_by_key(|(t, _)| *t);
    let show = |t: SystemTime| {
        chrono::DateTime::<chrono::Utc>::from(t)
            .format("%Y-%m-%dT%H:%M:%SZ")
            .to_string()
    };
    if let Some((t, p)) = newest
        && t > now + Duration::from_secs(300)
    {
        return check(NAME, Level::Fail, format!("the clock says {}, but {} was written at {}", show(now), p.display(), show(t)))
            .fix("set the system clock right (e.g. `timedatectl set-ntp true`): OAuth logins and token refreshes fail with a wrong clock");
    }
    check(NAME, Level::Ok, format!("{} UTC", show(now)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tutti_urls_are_recognized_in_claude_and_codex_configs() {
        assert!(is_tutti_url("http://127.0.0.1:4000/mcp/connector"));
        assert!(is_tutti_url("http://localhost:4000/mcp/connector"));
        assert!(is_tutti_url("http://[::1]:4000/mcp/connector"));
        assert!(!is_tutti_url("https://127.0.0.1:4000/mcp/connector"));
        assert!(!is_tutti_url("http://example.com/mcp/connector"));
        let claude = serde_json::json!({
            "mcpServers": {"connector": {"type": "http", "url": "http://127.0.0.1:1/mcp/connector"},
                           "other": {"url": "http://example.com/mcp"}},
            "projects": {"/p": {"mcpServers": {"c": {"url": "http://127.0.0.1:2/mcp/connector"}}}}
        });
        let got = claude_urls(&claude);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[1].0, "projects[/p].mcpServers.c");
        let codex = "[mcp_servers.connector]\nurl = \"http://127.0.0.1:3/mcp/connector\"\n[mcp_servers.x]\nurl = \"http://x\"\n";
        assert_eq!(
            codex_urls(codex),
            vec![(
                "mcp_servers.connector".to_owned(),
                "http://127.0.0.1:3/mcp/connector".to_owned()
            )]
        );
    }

    #[test]
    fn a_long_state_dir_fails_the_socket_check_with_the_fix() {
        let long = PathBuf::from(format!("/tmp/{}", "d".repeat(120)));
        let c = socket_length(&long);
        if cfg!(unix) {
            assert_eq!(c.level, Level::Fail, "{}", c.line());
            assert!(
                c.line().contains("fix: use a state dir path at least"),
                "{}",
                c.line()
            );
        }
        assert_eq!(socket_length(Path::new("/tmp/s")).level, Level::Ok);
    }

    #[test]
    fn lines_name_the_level_check_and_fix() {
        let c = check("bin dir on PATH", Level::Warn, "x is not on PATH").fix("add it");
        assert_eq!(
            c.line(),
            "WARN bin dir on PATH: x is not on PATH; fix: add it"
        );
        assert_eq!(check("clock", Level::Ok, "fine").line(), "OK   clock: fine");
    }

    #[test]
    fn bin_dir_on_path_is_found_whatever_else_path_holds() {
        let env = |path: &'static str| Env {
            vars: Box::new(move |n| (n == "PATH").then(|| OsString::from(path))),
            cwd: None,
        };
        assert_eq!(
            bin_on_path(Path::new("/s"), &env("/usr/bin:/s/bin")).level,
            Level::Ok
        );
        assert_eq!(
            bin_on_path(Path::new("/s"), &env("/usr/bin")).level,
            Level::Warn
        );
    }
}

//! `tutti service install|uninstall|status`: the kernel under the system's service manager.
//! Definitions come from the pure renderers in `crate::service`; external tools (`systemctl`,
//! `launchctl`, `sc.exe`) run as plain processes with explicit arguments, never a shell.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use serde::Serialize;
use tutti_proto::kernel::Empty;

use crate::args::{ServiceInstallArgs, ServiceStatusArgs};
use crate::error::CliError;
use crate::fsutil;
use crate::kernel::Kernel;
use crate::output::{emit, json_line, note, shell_join};
use crate::service::{
    self, LAUNCHD_LABEL, Platform, SERVICE_NAME, ServicePaths, render_launchd_plist,
    render_systemd_unit, systemd_enable_commands,
};

// === install ===

pub(crate) fn install(state_dir: &Path, args: ServiceInstallArgs) -> Result<ExitCode, CliError> {
    let platform = args.platform.unwrap_or_else(Platform::current);
    if platform != Platform::current() && !args.print {
        return Err(CliError::ForeignPlatform {
            platform: platform.name(),
        });
    }
    let paths = service_paths(state_dir)?;
    match platform {
        Platform::Linux => install_systemd(&paths, &args),
        Platform::Macos => install_launchd(&paths, &args),
        Platform::Windows => install_windows(&paths, &args),
    }
}

/// A systemd unit, system-wide or `--user`; `--enable` enables and starts it.
fn install_systemd(paths: &ServicePaths, args: &ServiceInstallArgs) -> Result<ExitCode, CliError> {
    let unit = render_systemd_unit(paths, args.user);
    if args.print {
        emit(&unit)?;
        return Ok(ExitCode::SUCCESS);
    }
    let path = systemd_unit_path(args.user, &env)?;
    write_definition(&path, &unit)?;
    emit(&format!("wrote {}\n", path.display()))?;
    let commands = systemd_enable_commands(args.user);
    if args.enable {
        for c in &commands {
            run_tool("systemctl", c)?;
        }
        emit(&format!("enabled and started {SERVICE_NAME}\n"))?;
    } else {
        let lines: Vec<String> = commands
            .iter()
            .map(|c| format!("systemctl {}", shell_join(c)))
            .collect();
        emit(&format!("enable it with: {}\n", lines.join(" && ")))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// A launchd agent of the user; `--enable` bootstraps it.
fn install_launchd(paths: &ServicePaths, args: &ServiceInstallArgs) -> Result<ExitCode, CliError> {
    if args.user {
        // A launchd agent is always per user; accept --user as a no-op.
        tracing::debug!("--user is implied for launchd agents");
    }
    let plist = render_launchd_plist(paths);
    if args.print {
        emit(&plist)?;
        return Ok(ExitCode::SUCCESS);
    }
    let path = launchd_plist_path(&env)?;
    // launchd opens the log files but does not create their directory.
    let logs = tutti_rules::state_dir::layout::logs(Path::new(&paths.state_dir));
    std::fs::create_dir_all(&logs).map_err(|e| CliError::io("create directory", &logs, e))?;
    write_definition(&path, &plist)?;
    emit(&format!("wrote {}\n", path.display()))?;
    let bootstrap = launchctl_bootstrap_args(&path)?;
    if args.enable {
        run_tool("launchctl", &bootstrap)?;
        emit(&format!("loaded {LAUNCHD_LABEL}\n"))?;
    } else {
        emit(&format!(
            "enable it with: launchctl bootstrap gui/$UID {}\n",
            shell_join(&[path.display().to_string()])
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// A Windows service (no per-user scope); `--enable` starts it.
fn install_windows(paths: &ServicePaths, args: &ServiceInstallArgs) -> Result<ExitCode, CliError> {
    if args.user {
        return Err(CliError::UserScopeUnsupported {
            what: "Windows services",
        });
    }
    let grant = installing_user_sid(args.print)?;
    let create = service::windows_create_args(paths, grant.as_deref());
    if args.print {
        emit(&format!("{}\n", service::windows_command_line(&create)))?;
        return Ok(ExitCode::SUCCESS);
    }
    run_tool("sc.exe", &create)?;
    emit(&format!("registered the Windows service {SERVICE_NAME}\n"))?;
    let start = vec!["start".to_owned(), SERVICE_NAME.to_owned()];
    if args.enable {
        run_tool("sc.exe", &start)?;
        emit(&format!("started {SERVICE_NAME}\n"))?;
    } else {
        emit(&format!(
            "start it with: {}\n",
            service::windows_command_line(&start)
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The SID of the user installing the service, admitted to the kernel's pipe
/// (`--grant-user`). Only Windows can tell; `--print` for Windows elsewhere leaves it out.
fn installing_user_sid(print: bool) -> Result<Option<String>, CliError> {
    #[cfg(windows)]
    {
        let _ = print;
        tutti_proto::winuser::current_user_sid()
            .map(|sid| Some(sid.as_str().to_owned()))
            .map_err(|e| CliError::io("look up the SID of", Path::new("the current user"), e))
    }
    #[cfg(not(windows))]
    {
        if print {
            tracing::debug!("not on Windows: the installing user's SID is left out");
        }
        Ok(None)
    }
}

fn service_paths(state_dir: &Path) -> Result<ServicePaths, CliError> {
    let kernel = super::up::locate_kernel(
        std::env::var_os(tutti_rules::sibling::LIBEXEC_ENV),
        std::env::current_exe().ok(),
    )?;
    let kernel = std::path::absolute(&kernel).map_err(|e| CliError::io("resolve", &kernel, e))?;
    Ok(ServicePaths {
        kernel: utf8(&kernel)?,
        state_dir: utf8(state_dir)?,
    })
}

fn utf8(path: &Path) -> Result<String, CliError> {
    path.to_str()
        .map(str::to_owned)
        .ok_or_else(|| CliError::NotUtf8Path {
            path: path.to_path_buf(),
        })
}

fn env(name: &str) -> Option<OsString> {
    std::env::var_os(name).filter(|v| !v.is_empty())
}

fn home(env: &dyn Fn(&str) -> Option<OsString>) -> Result<PathBuf, CliError> {
    env("HOME")
        .map(PathBuf::from)
        .ok_or(CliError::NoHome { var: "HOME" })
}

/// `$XDG_CONFIG_HOME/systemd/user/` (else `~/.config/systemd/user/`) with `--user`, else
/// `/etc/systemd/system/`.
fn systemd_unit_path(
    user: bool,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Result<PathBuf, CliError> {
    let file = format!("{SERVICE_NAME}.service");
    if !user {
        return Ok(PathBuf::from("/etc/systemd/system").join(file));
    }
    let config = match env("XDG_CONFIG_HOME").map(PathBuf::from) {
        Some(dir) if dir.is_absolute() => dir,
        _ => home(env)?.join(".config"),
    };
    Ok(config.join("systemd").join("user").join(file))
}

fn launchd_plist_path(env: &dyn Fn(&str) -> Option<OsString>) -> Result<PathBuf, CliError> {
    Ok(home(env)?
        .join("Library")
        .join("LaunchAgents")
        .join(format!("{LAUNCHD_LABEL}.plist")))
}

fn write_definition(path: &Path, text: &str) -> Result<(), CliError> {
    fsutil::write_atomic(path, text.as_bytes(), 0o644).map_err(|e| {
        if e.kind() == io::ErrorKind::PermissionDenied {
            CliError::ServiceNeedsRoot {
                path: path.to_path_buf(),
            }
        } else {
            CliError::io("write", path, e)
        }
    })
}

fn uid() -> u32 {
    #[cfg(unix)]
    {
        nix::unistd::getuid().as_raw()
    }
    #[cfg(not(unix))]
    {
        0
    }
}

fn launchctl_bootstrap_args(plist: &Path) -> Result<Vec<String>, CliError> {
    Ok(vec![
        "bootstrap".to_owned(),
        format!("gui/{}", uid()),
        utf8(plist)?,
    ])
}

/// Runs a service-manager tool (no shell), its output captured; a failure carries the
/// first line it printed.
fn run_tool(program: &str, args: &[String]) -> Result<String, CliError> {
    let command = format!("{program} {}", shell_join(args));
    tracing::debug!(%command, "running");
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| CliError::ToolFailed {
            command: command.clone(),
            reason: e.to_string(),
        })?;
    if output.status.success() {
        return Ok(String::from_utf8_lossy(&output.stdout).into_owned());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let said = stderr
        .lines()
        .chain(stdout.lines())
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_owned);
    let reason = match (said, output.status.code()) {
        (Some(line), _) => line,
        (None, Some(code)) => format!("exit status {code}"),
        (None, None) => "killed by a signal".to_owned(),
    };
    Err(CliError::ToolFailed { command, reason })
}

// === uninstall ===

pub(crate) fn uninstall(user: bool) -> Result<ExitCode, CliError> {
    match Platform::current() {
        Platform::Linux => {
            let path = systemd_unit_path(user, &env)?;
            if !path.exists() {
                emit(&format!(
                    "no service definition at {}; nothing to remove\n",
                    path.display()
                ))?;
                return Ok(ExitCode::SUCCESS);
            }
            best_effort(
                "systemctl",
                &service::systemctl_args(user, &["disable", "--now", SERVICE_NAME]),
            );
            remove_definition(&path)?;
            best_effort(
                "systemctl",
                &service::systemctl_args(user, &["daemon-reload"]),
            );
            emit(&format!("removed {}\n", path.display()))?;
        }
        Platform::Macos => {
            let path = launchd_plist_path(&env)?;
            if !path.exists() {
                emit(&format!(
                    "no service definition at {}; nothing to remove\n",
                    path.display()
                ))?;
                return Ok(ExitCode::SUCCESS);
            }
            best_effort(
                "launchctl",
                &[
                    "bootout".to_owned(),
                    format!("gui/{}/{LAUNCHD_LABEL}", uid()),
                ],
            );
            remove_definition(&path)?;
            emit(&format!("removed {}\n", path.display()))?;
        }
        Platform::Windows => {
            if user {
                return Err(CliError::UserScopeUnsupported {
                    what: "Windows services",
                });
            }
            best_effort("sc.exe", &["stop".to_owned(), SERVICE_NAME.to_owned()]);
            run_tool("sc.exe", &["delete".to_owned(), SERVICE_NAME.to_owned()])?;
            emit(&format!("removed the Windows service {SERVICE_NAME}\n"))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Stopping before removal: worth trying, not worth failing for (the manager may not run).
fn best_effort(program: &str, args: &[String]) {
    if let Err(e) = run_tool(program, args) {
        note(&format!("tutti: note: {e}"));
    }
}

fn remove_definition(path: &Path) -> Result<(), CliError> {
    std::fs::remove_file(path).map_err(|e| {
        if e.kind() == io::ErrorKind::PermissionDenied {
            CliError::ServiceNeedsRoot {
                path: path.to_path_buf(),
            }
        } else {
            CliError::io("remove", path, e)
        }
    })
}

// === status ===

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ServiceStatusJson {
    platform: &'static str,
    scope: &'static str,
    definition: Option<String>,
    installed: bool,
    /// What the service manager says (`active`, `inactive`, `RUNNING`, …), if it answered.
    manager: Option<String>,
    state_dir: String,
    kernel: KernelAnswer,
}

#[derive(Debug, Serialize)]
struct KernelAnswer {
    running: bool,
    pid: Option<u32>,
}

pub(crate) async fn status(
    state_dir: &Path,
    args: ServiceStatusArgs,
) -> Result<ExitCode, CliError> {
    let platform = Platform::current();
    let (definition, installed, manager) = manager_state(args.user)?;
    // A kernel runs when it answers; its pid is all this view needs from it.
    let pid = match Kernel::connect(state_dir).await {
        Ok(mut k) => k
            .client
            .status(Empty {})
            .await
            .ok()
            .map(|r| r.into_inner().kernel_pid),
        Err(_) => None,
    };
    let kernel = KernelAnswer {
        running: pid.is_some(),
        pid,
    };
    let view = ServiceStatusJson {
        platform: platform.name(),
        scope: if args.user { "user" } else { "system" },
        definition: definition.map(|p| p.display().to_string()),
        installed,
        manager,
        state_dir: state_dir.display().to_string(),
        kernel,
    };
    emit(&if args.json {
        json_line(&view)?
    } else {
        render_status(&view)
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Where the service definition of this platform and scope lives (none on Windows),
/// whether it is installed, and what the service manager says of it (`active`, `loaded`,
/// `RUNNING`…; `None` when it does not answer). Reads only.
pub(crate) fn manager_state(
    user: bool,
) -> Result<(Option<PathBuf>, bool, Option<String>), CliError> {
    let platform = Platform::current();
    let (definition, manager) = match platform {
        Platform::Linux => {
            let path = systemd_unit_path(user, &env)?;
            let query = service::systemctl_args(user, &["is-active", SERVICE_NAME]);
            // `is-active` exits non-zero for inactive units; its stdout is the answer.
            let manager = Command::new("systemctl")
                .args(&query)
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .output()
                .ok()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
                .filter(|s| !s.is_empty());
            (Some(path), manager)
        }
        Platform::Macos => {
            let path = launchd_plist_path(&env)?;
            let loaded = Command::new("launchctl")
                .args(["print", &format!("gui/{}/{LAUNCHD_LABEL}", uid())])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .ok()
                .map(|s| if s.success() { "loaded" } else { "not loaded" }.to_owned());
            (Some(path), loaded)
        }
        Platform::Windows => {
            let state = run_tool("sc.exe", &["query".to_owned(), SERVICE_NAME.to_owned()])
                .ok()
                .and_then(|out| windows_state(&out));
            (None, state)
        }
    };
    let installed = match (&definition, platform) {
        (Some(path), _) => path.exists(),
        (None, _) => manager.is_some(),
    };
    Ok((definition, installed, manager))
}

/// `STATE : 4  RUNNING` in `sc.exe query` output → `RUNNING`.
fn windows_state(query_output: &str) -> Option<String> {
    query_output.lines().find_map(|l| {
        let (key, value) = l.split_once(':')?;
        if key.trim() != "STATE" {
            return None;
        }
        value.split_whitespace().nth(1).map(str::to_owned)
    })
}

fn render_status(v: &ServiceStatusJson) -> String {
    let mut out = String::new();
    let scope = match (v.platform, v.scope) {
        ("linux", "user") => "systemd user unit",
        ("linux", _) => "systemd system unit",
        ("macos", _) => "launchd agent",
        _ => "Windows service",
    };
    match (&v.definition, v.installed) {
        (Some(path), true) => out.push_str(&format!("service: installed ({scope}, {path})\n")),
        (Some(path), false) => out.push_str(&format!("service: not installed ({scope}, {path})\n")),
        (None, true) => out.push_str(&format!("service: installed ({scope} {SERVICE_NAME})\n")),
        (None, false) => out.push_str(&format!("service: not installed ({scope})\n")),
    }
    out.push_str(&format!(
        "manager: {}\n",
        v.manager.as_deref().unwrap_or("no answer")
    ));
    match (v.kernel.running, v.kernel.pid) {
        (true, Some(pid)) => out.push_str(&format!(
            "kernel: running (pid {pid}) for state dir {}\n",
            v.state_dir
        )),
        _ => out.push_str(&format!(
            "kernel: not running for state dir {}\n",
            v.state_dir
        )),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::env_of;

    #[test]
    fn unit_paths() {
        let env = env_of(&[("HOME", "/home/u"), ("XDG_CONFIG_HOME", "/cfg")]);
        assert_eq!(
            systemd_unit_path(true, &env).ok(),
            Some(PathBuf::from("/cfg/systemd/user/tutti-kernel.service"))
        );
        let env = env_of(&[("HOME", "/home/u"), ("XDG_CONFIG_HOME", "rel")]);
        assert_eq!(
            systemd_unit_path(true, &env).ok(),
            Some(PathBuf::from(
                "/home/u/.config/systemd/user/tutti-kernel.service"
            ))
        );
        assert_eq!(
            systemd_unit_path(false, &env).ok(),
            Some(PathBuf::from("/etc/systemd/system/tutti-kernel.service"))
        );
        assert!(matches!(
            systemd_unit_path(true, &env_of(&[])),
            Err(CliError::NoHome { .. })
        ));
        assert_eq!(
            launchd_plist_path(&env_of(&[("HOME", "/Users/u")])).ok(),
            Some(PathBuf::from(
                "/Users/u/Library/LaunchAgents/dev.tutti.kernel.plist"
            ))
        );
    }

    #[test]
    fn windows_query_state() {
        let out = "SERVICE_NAME: tutti-kernel\n        TYPE               : 10  WIN32_OWN_PROCESS\n        STATE              : 4  RUNNING\n";
        assert_eq!(windows_state(out).as_deref(), Some("RUNNING"));
        assert_eq!(windows_state("nothing"), None);
    }

    #[test]
    fn foreign_platform_needs_print() {
        let other = match Platform::current() {
            Platform::Linux => Platform::Macos,
            _ => Platform::Linux,
        };
        let got = install(
            Path::new("/s"),
            ServiceInstallArgs {
                user: true,
                print: false,
                enable: false,
                platform: Some(other),
            },
        );
        assert!(
            matches!(got, Err(CliError::ForeignPlatform { .. })),
            "{got:?}"
        );
    }

    #[cfg(unix)]
    #[test]
    fn failing_tool_reports_its_first_line() {
        let err = run_tool("sh", &["-c".into(), "echo oops >&2; exit 3".into()]).err();
        let msg = err.map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(
            msg,
            "`sh -c 'echo oops >&2; exit 3'` failed: oops; run it yourself to see why"
        );
        let err = run_tool("definitely-not-a-program-tutti", &[]).err();
        assert!(matches!(err, Some(CliError::ToolFailed { .. })));
    }

    #[test]
    fn status_text() {
        let v = ServiceStatusJson {
            platform: "linux",
            scope: "user",
            definition: Some("/cfg/systemd/user/tutti-kernel.service".into()),
            installed: true,
            manager: Some("active".into()),
            state_dir: "/s".into(),
            kernel: KernelAnswer {
                running: true,
                pid: Some(7),
            },
        };
        assert_eq!(
            render_status(&v),
            "service: installed (systemd user unit, /cfg/systemd/user/tutti-kernel.service)\n\
             manager: active\n\
             kernel: running (pid 7) for state dir /s\n"
        );
    }
}

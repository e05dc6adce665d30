//! Service-manager definitions for the kernel (pure renderers, available on every platform
//! so each can be checked anywhere): a systemd unit (Linux), a launchd agent plist (macOS),
//! and the `sc.exe create` registration (Windows).

use clap::ValueEnum;

/// The systemd unit name, the Windows service name.
pub(crate) const SERVICE_NAME: &str = "tutti-kernel";
/// The launchd label.
pub(crate) const LAUNCHD_LABEL: &str = "dev.tutti.kernel";

/// Which service manager to write for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Platform {
    Linux,
    Macos,
    Windows,
}

impl Platform {
    pub(crate) fn current() -> Self {
        if cfg!(windows) {
            Self::Windows
        } else if cfg!(target_os = "macos") {
            Self::Macos
        } else {
            Self::Linux
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Linux => "linux",
            Self::Macos => "macos",
            Self::Windows => "windows",
        }
    }
}

/// Absolute paths the definitions name (UTF-8, checked by the caller).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServicePaths {
    /// The `tutti-kernel` executable.
    pub(crate) kernel: String,
    pub(crate) state_dir: String,
}

// === systemd ===

/// One word of a systemd unit setting: `%` escaped as `%%` (specifiers), `$` as `$$` where
/// the setting expands variables (ExecStart), and double quotes with C escapes when the
/// word has whitespace, quotes or backslashes.
fn systemd_word(s: &str, expands_variables: bool) -> String {
    let mut escaped = s.replace('%', "%%");
    if expands_variables {
        escaped = escaped.replace('$', "$$");
    }
    let needs_quotes = escaped.is_empty()
        || escaped
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, '"' | '\'' | '\\' | ';'));
    if needs_quotes {
        let inner = escaped
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n")
            .replace('\t', "\\t");
        format!("\"{inner}\"")
    } else {
        escaped
    }
}

/// `tutti-kernel.service`. `user`: a unit for the user's manager (`WantedBy=default.target`),
/// else a system unit (`WantedBy=multi-user.target`).
pub(crate) fn render_systemd_unit(paths: &ServicePaths, user: bool) -> String {
    let exec = format!(
        "{} --state-dir {}",
        systemd_word(&paths.kernel, true),
        systemd_word(&paths.state_dir, true)
    );
    let wanted_by = if user {
        "default.target"
    } else {
        "multi-user.target"
    };
    format!(
        "# Written by `tutti service install`. The kernel supervises the frontend, the shim
# manager and the connector workers; systemd supervises only the kernel.
[Unit]
Description=Tutti connector runtime (kernel)
StartLimitIntervalSec=60
StartLimitBurst=5

[Service]
Type=notify
NotifyAccess=main
ExecStart={exec}
Restart=on-failure
RestartSec=1
KillMode=control-group
TimeoutStopSec={stop_secs}
NoNewPrivileges=yes
ProtectSystem=strict
ReadWritePaths={rw}
# Package runners' caches (npx, uvx, pip): upstreams started with them write there. A
# leading - skips a path that does not exist.
ReadWritePaths=-%h/.npm -%h/.cache
PrivateTmp=yes
ProtectControlGroups=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
RestrictSUIDSGID=yes
LockPersonality=yes
RestrictRealtime=yes
SystemCallArchitectures=native

[Install]
WantedBy={wanted_by}
",
        rw = systemd_word(&paths.state_dir, false),
        // Longer than the kernel's own graceful-shutdown bound (SPEC §4 drains first).
        stop_secs = tutti_rules::timing::SERVICE_MANAGER_STOP.as_secs(),
    )
}

/// One `systemctl` argument list for the user's manager (`--user`) or the system's.
pub(crate) fn systemctl_args(user: bool, rest: &[&str]) -> Vec<String> {
    user.then_some("--user")
        .into_iter()
        .chain(rest.iter().copied())
        .map(str::to_owned)
        .collect()
}

/// The `systemctl` argument lists that load and start the unit.
pub(crate) fn systemd_enable_commands(user: bool) -> Vec<Vec<String>> {
    vec![
        systemctl_args(user, &["daemon-reload"]),
        systemctl_args(user, &["enable", "--now", SERVICE_NAME]),
    ]
}

// === launchd ===

fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

fn join_path(dir: &str, rest: &[&str], separator: char) -> String {
    let mut out = dir.trim_end_matches(separator).to_owned();
    for part in rest {
        out.push(separator);
        out.push_str(part);
    }
    out
}

/// `dev.tutti.kernel.plist`: a per-user launchd agent, started at load and kept alive.
pub(crate) fn render_launchd_plist(paths: &ServicePaths) -> String {
    let out_log = join_path(&paths.state_dir, &["logs", "launchd.out.log"], '/');
    let err_log = join_path(&paths.state_dir, &["logs", "launchd.err.log"], '/');
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
	<key>Label</key>
	<string>{label}</string>
	<key>ProgramArguments</key>
	<array>
		<string>{kernel}</string>
		<string>--state-dir</string>
		<string>{state}</string>
	</array>
	<key>RunAtLoad</key>
	<true/>
	<key>KeepAlive</key>
	<true/>
	<key>StandardOutPath</key>
	<string>{out_log}</string>
	<key>StandardErrorPath</key>
	<string>{err_log}</string>
</dict>
</plist>
"#,
        label = LAUNCHD_LABEL,
        kernel = xml_escape(&paths.kernel),
        state = xml_escape(&paths.state_dir),
        out_log = xml_escape(&out_log),
        err_log = xml_escape(&err_log),
    )
}

// === Windows ===

/// The service's command line (`binPath=`), each path quoted; with the installing user's
/// SID for `--grant-user` when known.
pub(crate) fn windows_bin_path(paths: &ServicePaths, grant_user: Option<&str>) -> String {
    let mut line = format!(
        "\"{}\" --service --state-dir \"{}\"",
        paths.kernel, paths.state_dir
    );
    if let Some(sid) = grant_user {
        line.push_str(" --grant-user ");
        line.push_str(sid);
    }
    line
}

/// Arguments of `sc.exe` that register the service (given to the process as separate
/// arguments: no shell). The service runs as LocalSystem (the SCM's default; said explicitly
/// with `obj=` when a user is granted): a service account needs a stored password, so the
/// installing user is instead admitted to the kernel's pipe (`grant_user`, a SID; see
/// `tutti_proto::pipe_access`).
pub(crate) fn windows_create_args(paths: &ServicePaths, grant_user: Option<&str>) -> Vec<String> {
    let mut args: Vec<String> = [
        "create",
        SERVICE_NAME,
        "binPath=",
        &windows_bin_path(paths, grant_user),
        "start=",
        "auto",
        "DisplayName=",
        "Tutti connector runtime",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    if grant_user.is_some() {
        args.extend(["obj=".to_owned(), "LocalSystem".to_owned()]);
    }
    args
}

/// `sc.exe …` as one line for people (cmd.exe-style quoting).
pub(crate) fn windows_command_line(args: &[String]) -> String {
    let mut line = "sc.exe".to_owned();
    for a in args {
        line.push(' ');
        if a.is_empty() || a.contains([' ', '\t', '"']) {
            line.push('"');
            line.push_str(&a.replace('"', "\\\""));
            line.push('"');
        } else {
            line.push_str(a);
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths() -> ServicePaths {
        ServicePaths {
            kernel: "/opt/tutti/bin/tutti-kernel".into(),
            state_dir: "/home/u/.local/state/tutti".into(),
        }
    }

    /// `[Section]` → key → values, as systemd reads a unit (comments skipped).
    fn unit_settings(unit: &str) -> Vec<(String, String, String)> {
        let mut section = String::new();
        let mut out = Vec::new();
        for line in unit.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = name.to_owned();
                continue;
            }
            let (k, v) = line.split_once('=').unwrap_or((line, ""));
            out.push((section.clone(), k.trim().to_owned(), v.trim().to_owned()));
        }
        out
    }

    fn get<'a>(settings: &'a [(String, String, String)], section: &str, key: &str) -> Vec<&'a str> {
        settings
            .iter()
            .filter(|(s, k, _)| s == section && k == key)
            .map(|(_, _, v)| v.as_str())
            .collect()
    }

    #[test]
    fn systemd_unit_has_every_required_setting() {
        let unit = render_systemd_unit(&paths(), true);
        let s = unit_settings(&unit);
        assert_eq!(
            get(&s, "Service", "ExecStart"),
            ["/opt/tutti/bin/tutti-kernel --state-dir /home/u/.local/state/tutti"]
        );
        for (section, key, value) in [
            ("Unit", "StartLimitIntervalSec", "60"),
            ("Unit", "StartLimitBurst", "5"),
            ("Service", "Type", "notify"),
            ("Service", "NotifyAccess", "main"),
            ("Service", "Restart", "on-failure"),
            ("Service", "RestartSec", "1"),
            ("Service", "KillMode", "control-group"),
            ("Service", "TimeoutStopSec", "30"),
            ("Service", "NoNewPrivileges", "yes"),
            ("Service", "ProtectSystem", "strict"),
            ("Service", "PrivateTmp", "yes"),
            ("Service", "ProtectControlGroups", "yes"),
            ("Service", "ProtectKernelTunables", "yes"),
            ("Service", "ProtectKernelModules", "yes"),
            ("Service", "RestrictSUIDSGID", "yes"),
            ("Service", "LockPersonality", "yes"),
            ("Service", "RestrictRealtime", "yes"),
            ("Service", "SystemCallArchitectures", "native"),
            ("Install", "WantedBy", "default.target"),
        ] {
            assert_eq!(get(&s, section, key), [value], "{section}.{key}\n{unit}");
        }
        // The state dir, and the caches of npx / uvx / pip that upstreams write to.
        assert_eq!(
            get(&s, "Service", "ReadWritePaths"),
            ["/home/u/.local/state/tutti", "-%h/.npm -%h/.cache"]
        );
        let system = render_systemd_unit(&paths(), false);
        assert_eq!(
            get(&unit_settings(&system), "Install", "WantedBy"),
            ["multi-user.target"]
        );
    }

    #[test]
    fn systemd_quotes_and_escapes_odd_paths() {
        let odd = ServicePaths {
            kernel: "/opt/my tools/tutti-kernel".into(),
            state_dir: "/home/u/100%/$state".into(),
        };
        let unit = render_systemd_unit(&odd, true);
        let s = unit_settings(&unit);
        assert_eq!(
            get(&s, "Service", "ExecStart"),
            [r#""/opt/my tools/tutti-kernel" --state-dir /home/u/100%%/$$state"#]
        );
        assert_eq!(
            get(&s, "Service", "ReadWritePaths")[0],
            "/home/u/100%%/$state"
        );
        assert_eq!(systemd_word(r#"a"b\c"#, false), r#""a\"b\\c""#);
    }

    #[test]
    fn systemctl_args_put_the_scope_first() {
        assert_eq!(
            systemctl_args(true, &["is-active", SERVICE_NAME]),
            ["--user", "is-active", "tutti-kernel"]
        );
        assert_eq!(
            systemctl_args(false, &["disable", "--now", SERVICE_NAME]),
            ["disable", "--now", "tutti-kernel"]
        );
    }

    #[test]
    fn systemd_enable_commands_per_scope() {
        assert_eq!(
            systemd_enable_commands(true),
            [
                vec!["--user", "daemon-reload"],
                vec!["--user", "enable", "--now", "tutti-kernel"]
            ]
        );
        assert_eq!(
            systemd_enable_commands(false),
            [
                vec!["daemon-reload"],
                vec!["enable", "--now", "tutti-kernel"]
            ]
        );
    }

    #[test]
    fn launchd_plist_runs_the_kernel_at_load_and_keeps_it_alive() {
        let plist = render_launchd_plist(&ServicePaths {
            kernel: "/Applications/Tutti & Co/tutti-kernel".into(),
            state_dir: "/Users/u/Library/Application Support/tutti".into(),
        });
        let expected_body = "<dict>
	<key>Label</key>
	<string>dev.tutti.kernel</string>
	<key>ProgramArguments</key>
	<array>
		<string>/Applications/Tutti &amp; Co/tutti-kernel</string>
		<string>--state-dir</string>
		<string>/Users/u/Library/Application Support/tutti</string>
	</array>
	<key>RunAtLoad</key>
	<true/>
	<key>KeepAlive</key>
	<true/>
	<key>StandardOutPath</key>
	<string>/Users/u/Library/Application Support/tutti/logs/launchd.out.log</string>
	<key>StandardErrorPath</key>
	<string>/Users/u/Library/Application Support/tutti/logs/launchd.err.log</string>
</dict>
</plist>
";
        assert!(
            plist.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE plist"),
            "{plist}"
        );
        assert!(plist.ends_with(expected_body), "{plist}");
        // Balanced tags: every opening tag of the structure is closed.
        for tag in ["plist", "dict", "array"] {
            assert_eq!(
                plist.matches(&format!("<{tag}")).count(),
                plist.matches(&format!("</{tag}>")).count(),
                "{tag}"
            );
        }
    }

    #[test]
    fn windows_registration_quotes_paths_in_bin_path() {
        let p = ServicePaths {
            kernel: r"C:\Program Files\Tutti\tutti-kernel.exe".into(),
            state_dir: r"C:\Users\u\AppData\Local\tutti".into(),
        };
        let args = windows_create_args(&p, None);
        assert_eq!(
            args,
            [
                "create",
                "tutti-kernel",
                "binPath=",
                r#""C:\Program Files\Tutti\tutti-kernel.exe" --service --state-dir "C:\Users\u\AppData\Local\tutti""#,
                "start=",
                "auto",
                "DisplayName=",
                "Tutti connector runtime",
            ]
        );
        assert_eq!(
            windows_command_line(&args),
            r#"sc.exe create tutti-kernel binPath= "\"C:\Program Files\Tutti\tutti-kernel.exe\" --service --state-dir \"C:\Users\u\AppData\Local\tutti\"" start= auto DisplayName= "Tutti connector runtime""#
        );
    }

    #[test]
    fn windows_registration_runs_as_local_system_and_admits_the_installing_user() {
        let p = ServicePaths {
            kernel: r"C:\Tutti\tutti-kernel.exe".into(),
            state_dir: r"C:\Users\u\AppData\Local\tutti".into(),
        };
        let sid = "S-1-5-21-1004336348-1177238915-682003330-1001";
        let args = windows_create_args(&p, Some(sid));
        assert_eq!(
            args[3],
            format!(
                r#""C:\Tutti\tutti-kernel.exe" --service --state-dir "C:\Users\u\AppData\Local\tutti" --grant-user {sid}"#
            )
        );
        assert_eq!(args[args.len() - 2..], ["obj=", "LocalSystem"]);
        let line = windows_command_line(&args);
        assert!(line.ends_with(" obj= LocalSystem"), "{line}");
        assert!(line.contains(&format!("--grant-user {sid}")), "{line}");
    }
}

//! The desktop notification that a call waits for the person's confirmation, where the
//! platform offers one: `notify-send` (Linux and other Unix desktops), `osascript` (macOS), a
//! PowerShell toast (Windows). It names the tool, its connector and the session, never the
//! call's arguments. The text reaches the program as an argument (`notify-send`) or in the
//! environment variable `TUTTI_NOTICE` (the others read it from there: their scripts are
//! fixed text, so nothing of the call is ever interpreted). No shell; a failure is one log
//! line and nothing else.

use std::path::Path;

use tutti_proto::kernel as pb;

use crate::supervisor::spawn::{self, ChildSpec};

const TITLE: &str = "Tutti: a call waits for your confirmation";

/// What the notification program needs from the kernel's environment to reach the desktop.
const DESKTOP_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "LANG",
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "DBUS_SESSION_BUS_ADDRESS",
    "XDG_RUNTIME_DIR",
    "SYSTEMROOT",
    "USERPROFILE",
];

#[cfg(target_os = "macos")]
fn command(_text: &str) -> (&'static str, Vec<String>) {
    let script =
        format!("display notification (system attribute \"TUTTI_NOTICE\") with title \"{TITLE}\"");
    ("osascript", vec!["-e".into(), script])
}

#[cfg(windows)]
fn command(_text: &str) -> (&'static str, Vec<String>) {
    let script = format!(
        "$t=[Windows.UI.Notifications.ToastNotificationManager,Windows.UI.Notifications,ContentType=WindowsRuntime]::GetTemplateContent(1);\
         $x=$t.GetElementsByTagName('text');\
         $null=$x.Item(0).AppendChild($t.CreateTextNode('{TITLE}'));\
         $null=$x.Item(1).AppendChild($t.CreateTextNode($env:TUTTI_NOTICE));\
         [Windows.UI.Notifications.ToastNotificationManager]::CreateToastNotifier('Tutti').Show([Windows.UI.Notifications.ToastNotification]::new($t))"
    );
    (
        "powershell.exe",
        vec![
            "-NoProfile".into(),
            "-NonInteractive".into(),
            "-Command".into(),
            script,
        ],
    )
}

#[cfg(not(any(target_os = "macos", windows)))]
fn command(text: &str) -> (&'static str, Vec<String>) {
    (
        "notify-send",
        vec!["--app-name=Tutti".into(), TITLE.into(), text.into()],
    )
}

/// Announces the held call `shown` (spawned from the calling tokio task; never waits).
pub fn announce(shown: &pb::HeldCall) {
    let text = format!(
        "{} (connector {}, session {}/{}): see `tutti confirm list` or the console",
        shown.tool, shown.connector, shown.workspace, shown.session
    );
    let (program, args) = command(&text);
    let path = std::env::var("PATH").unwrap_or_default();
    let resolved = match spawn::resolve_program(program, &path) {
        Ok(p) => p,
        Err(e) => {
            tracing::info!(program, "no desktop notification: {e}");
            return;
        }
    };
    if let Err(e) = run(&resolved, args, text) {
        tracing::info!(program, "no desktop notification: {e}");
    }
}

/// Where the program's own complaints go: nowhere (the kernel logs one line of its own).
fn null_device() -> std::io::Result<std::fs::File> {
    let path = if cfg!(windows) { "NUL" } else { "/dev/null" };
    std::fs::OpenOptions::new().write(true).open(path)
}

fn run(program: &Path, args: Vec<String>, text: String) -> std::io::Result<()> {
    let mut env: Vec<(String, String)> = DESKTOP_ENV
        .iter()
        .filter_map(|name| std::env::var(name).ok().map(|v| ((*name).to_owned(), v)))
        .collect();
    env.push(("TUTTI_NOTICE".into(), text));
    let mut child = spawn::spawn(ChildSpec {
        program,
        args,
        env,
        stderr: null_device().ok(),
        death_signal_term: false,
        listener: None,
    })?;
    tokio::spawn(async move {
        match child.wait().await {
            Ok(status) if !status.success() => {
                tracing::info!(%status, "the desktop notification program failed");
            }
            Err(e) => tracing::info!("the desktop notification program failed: {e}"),
            Ok(_) => {}
        }
    });
    Ok(())
}

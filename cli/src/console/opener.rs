//! Opens the login URL in the person's browser with the platform's opener, started directly
//! (no shell), never waited for. A failure only means the person opens the URL themselves.

use std::process::{Command, Stdio};

/// The platform's opener and its arguments before the URL.
fn opener() -> (&'static str, &'static [&'static str]) {
    if cfg!(target_os = "macos") {
        ("open", &[])
    } else if cfg!(windows) {
        // The URL protocol handler, without `cmd /c start` (a shell).
        ("rundll32", &["url.dll,FileProtocolHandler"])
    } else {
        ("xdg-open", &[])
    }
}

pub(crate) fn open(url: &str) {
    let (program, args) = opener();
    let spawned = Command::new(program)
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    match spawned {
        // Reaped off the main thread; the browser it starts lives on.
        Ok(mut child) => {
            std::thread::spawn(move || child.wait());
        }
        Err(e) => crate::output::note(&format!(
            "tutti: cannot open a browser with {program} ({e}); open the URL above yourself"
        )),
    }
}

//! `tutti status --watch`: the status again every second until Ctrl-C. On a terminal the
//! screen is redrawn in place and each connector gets a sparkline of its calls per second;
//! otherwise (a pipe, a file) each round is printed after the last one, plain, so the output
//! stays readable as a log (with `--json`, one JSON line per round).

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use crate::error::CliError;
use crate::kernel::Kernel;

/// Moves the cursor home and clears the screen (ANSI; Windows 10+ terminals understand it).
const REDRAW: &str = "\x1b[H\x1b[2J";

pub(crate) async fn run(state_dir: &Path, json: bool) -> Result<ExitCode, CliError> {
    let kernel = &mut Kernel::connect(state_dir).await?;
    let terminal = std::io::stdout().is_terminal();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        tokio::select! {
            _ = &mut ctrl_c => return Ok(ExitCode::SUCCESS),
            _ = tick.tick() => {}
        }
        let reply = super::status::fetch(kernel).await?;
        let body = super::status::render(&reply, state_dir, json, terminal && !json)?;
        let frame = match (terminal && !json, json) {
            (true, _) => format!("{REDRAW}{body}\nrefreshing every second; Ctrl-C to stop\n"),
            (false, true) => body,
            (false, false) => format!("{body}\n"),
        };
        if !write_frame(&frame)? {
            // The reader went away (`tutti status --watch | head`): done.
            return Ok(ExitCode::SUCCESS);
        }
    }
}

/// Writes one round; `false` when stdout is closed.
fn write_frame(frame: &str) -> Result<bool, CliError> {
    let mut out = std::io::stdout().lock();
    match out.write_all(frame.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(source) => Err(CliError::StdoutWrite { source }),
    }
}

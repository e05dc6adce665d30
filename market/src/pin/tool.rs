//! Running an ecosystem tool (npm, pip, a container engine) as a child process, without a
//! shell, and turning its failure into one line.

use std::process::{Output, Stdio};

use tokio::process::Command;

use crate::error::MarketError;

/// A tool the pinning steps run, with what to do when it is missing.
pub(super) struct Tool {
    /// The name in messages (`npm`, `pip`).
    pub name: &'static str,
    /// The program looked up on PATH.
    pub program: &'static str,
    /// The fix when the program is missing.
    pub fix: &'static str,
}

impl Tool {
    /// A command for this tool, stdin closed, killed if the pinning step is dropped.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(self.program);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    /// Runs `cmd` to its end; a missing program is [`MarketError::ToolMissing`]. The exit
    /// status is the caller's to judge (see [`Tool::check`]).
    pub async fn output(&self, cmd: &mut Command) -> Result<Output, MarketError> {
        cmd.output().await.map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                MarketError::ToolMissing {
                    tool: self.program.to_string(),
                    fix: self.fix.to_string(),
                }
            } else {
                MarketError::ToolFailed {
                    tool: self.name.to_string(),
                    package: String::new(),
                    detail: format!("cannot start {}: {e}", self.program),
                }
            }
        })
    }

    /// Runs `cmd`; a non-zero exit is [`MarketError::ToolFailed`] with the tool's own error
    /// lines. Returns stdout.
    pub async fn run(&self, package: &str, cmd: &mut Command) -> Result<String, MarketError> {
        let out = self.output(cmd).await?;
        self.check(package, &out)?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `Err(ToolFailed)` unless `out` is a success.
    pub fn check(&self, package: &str, out: &Output) -> Result<(), MarketError> {
        if out.status.success() {
            return Ok(());
        }
        Err(MarketError::ToolFailed {
            tool: self.name.to_string(),
            package: package.to_string(),
            detail: summary(&String::from_utf8_lossy(&out.stderr), out.status),
        })
    }
}

/// A tool's error output in one line: its error lines without their prefixes (`npm error`,
/// `ERROR:`), the first few, else its last line, else the exit status.
pub(super) fn summary(stderr: &str, status: std::process::ExitStatus) -> String {
    const PREFIXES: [&str; 4] = ["npm error ", "npm ERR! ", "ERROR: ", "Error: "];
    let mut lines: Vec<&str> = Vec::new();
    for line in stderr.lines().map(str::trim) {
        let Some(rest) = PREFIXES.iter().find_map(|p| line.strip_prefix(p)) else {
            continue;
        };
        let rest = rest.trim();
        let noise =
            rest.len() < 8 || rest.starts_with("A complete log") || rest.starts_with("code ");
        if !noise && !lines.contains(&rest) {
            lines.push(rest);
        }
    }
    let mut text = if lines.is_empty() {
        let last = stderr.lines().map(str::trim).rfind(|l| !l.is_empty());
        last.map_or_else(|| format!("exited with {status}"), str::to_string)
    } else {
        lines.into_iter().take(3).collect::<Vec<_>>().join(" / ")
    };
    if text.len() > 400 {
        let cut = (0..=400)
            .rev()
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(0);
        text.truncate(cut);
        text.push('…');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed() -> std::process::ExitStatus {
        std::process::Command::new(if cfg!(windows) { "cmd" } else { "false" })
            .args(if cfg!(windows) {
                &["/C", "exit 1"][..]
            } else {
                &[][..]
            })
            .status()
            .unwrap_or_else(|e| panic!("status: {e}"))
    }

    #[test]
    fn npm_error_lines_become_one_line_without_noise() {
        let stderr = "npm error code E404\nnpm error 404 Not Found - GET https://registry.npmjs.org/nope - Not found\nnpm error 404\nnpm error A complete log of this run can be found in: /tmp/x.log\n";
        assert_eq!(
            summary(stderr, failed()),
            "404 Not Found - GET https://registry.npmjs.org/nope - Not found"
        );
    }

    #[test]
    fn output_without_error_lines_gives_its_last_line() {
        assert_eq!(
            summary("warming up\nit broke here\n\n", failed()),
            "it broke here"
        );
    }
}

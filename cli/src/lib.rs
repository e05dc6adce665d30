//! `tutti`, the user's command line for the Tutti connector runtime (SPEC §4, §6, §7).
//!
//! Every command but `up` is a thin client of the kernel's control plane
//! (`tutti.kernel.v1` over the state dir's local socket). Failures print one line on stderr,
//! `tutti: <problem>; <what to do>`, and exit non-zero. Nothing here prints a secret value or
//! a token, except `tutti session issue`, whose output is the token's binding.
#![forbid(unsafe_code)]

mod args;
mod binding;
mod binding_stdio;
mod bridge;
mod browser;
mod codex_features;
mod commands;
mod console;
mod error;
mod fsutil;
mod import;
mod kernel;
mod output;
mod service;
mod state_dir;
#[cfg(test)]
mod test_util;

use std::process::ExitCode;

pub use args::Cli;
pub use error::CliError;

/// Runs one parsed command line. `Ok` carries the exit code for outcomes that are reported
/// on their own (install or probe problems, the kernel's exit code of `tutti up` on Windows).
pub fn run(cli: Cli) -> Result<ExitCode, CliError> {
    let state_dir = state_dir::resolve(cli.state_dir.as_deref())?;
    match cli.command {
        // Before any runtime exists: on Unix this execs the kernel.
        args::Command::Up(up) => commands::up::run(&state_dir, up.demo),
        command => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|source| CliError::Runtime { source })?;
            runtime.block_on(commands::dispatch(&state_dir, command))
        }
    }
}

/// Prints the outcome of [`run`] and turns it into the process exit code.
pub fn report(outcome: Result<ExitCode, CliError>) -> ExitCode {
    match outcome {
        Ok(code) => code,
        Err(err) => {
            let text = err.to_string();
            let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
            if lines.len() > 1 {
                // A list of problems (a manifest's, from probe): one line each, as install
                // prints them.
                for line in lines {
                    output::note(&output::visible(&output::one_line(line, 4096)));
                }
            } else {
                output::note(&format!(
                    "tutti: {}",
                    output::visible(&output::one_line(&text, 4096))
                ));
            }
            ExitCode::FAILURE
        }
    }
}

/// Handles a command line clap refused: help and version print as usual; a usage error
/// becomes one line, `tutti: <problem>; see \`tutti … --help\``, and exit code 2.
pub fn usage_error(err: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match err.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = err.print();
            u8::try_from(err.exit_code())
                .map(ExitCode::from)
                .unwrap_or(ExitCode::FAILURE)
        }
        _ => {
            let argv: Vec<String> = std::env::args().collect();
            output::note(&format!(
                "tutti: {}",
                usage_line(&err.render().to_string(), &argv)
            ));
            ExitCode::from(2)
        }
    }
}

/// `error: unrecognized subcommand 'invoke'\n\n  tip: …\n\nUsage: tutti connector <COMMAND>\n…`
/// → `unrecognized subcommand 'invoke'; see \`tutti connector --help\``. Clap's possible values
/// are kept; without a `Usage:` line the subcommands named in `argv` say which help to read.
fn usage_line(rendered: &str, argv: &[String]) -> String {
    let mut lines = rendered.lines().skip_while(|l| l.trim().is_empty());
    let first = lines
        .next()
        .map(|l| l.trim().trim_start_matches("error:").trim())
        .unwrap_or("invalid command line");
    // "the following required arguments were not provided:" lists them on the next lines.
    let problem = match first.strip_suffix(':') {
        Some(head) => {
            let items: Vec<&str> = lines
                .take_while(|l| !l.trim().is_empty())
                .map(str::trim)
                .collect();
            format!("{head}: {}", items.join(", "))
        }
        None => first.to_owned(),
    };
    let problem = match rendered
        .lines()
        .find_map(|l| l.trim().strip_prefix("[possible values:"))
    {
        Some(values) => format!(
            "{problem} (possible values: {})",
            values.trim_end_matches(']').trim()
        ),
        None => problem,
    };
    let command: Vec<&str> = rendered
        .lines()
        .find_map(|l| l.trim().strip_prefix("Usage:"))
        .map(|usage| {
            usage
                .split_whitespace()
                .take_while(|w| !w.starts_with(['[', '<', '-']))
                .collect()
        })
        .unwrap_or_default();
    let command = if command.is_empty() {
        subcommand_path(argv)
    } else {
        command.join(" ")
    };
    format!("{problem}; see `{command} --help`")
}

/// `tutti` and the subcommands `argv` names, in order (flags and values skipped).
fn subcommand_path(argv: &[String]) -> String {
    use clap::CommandFactory;
    let mut command = Cli::command();
    let mut path = vec!["tutti".to_owned()];
    for arg in argv.iter().skip(1) {
        let Some(sub) = command.find_subcommand(arg).cloned() else {
            continue;
        };
        path.push(sub.get_name().to_owned());
        command = sub;
    }
    path.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn usage_errors_become_one_line_with_a_hint() {
        let err = Cli::try_parse_from(["tutti", "connector", "invoke", "x"]).err();
        let line = err.map(|e| usage_line(&e.render().to_string(), &[]));
        assert_eq!(
            line.as_deref(),
            Some("unrecognized subcommand 'invoke'; see `tutti connector --help`")
        );
        let err = Cli::try_parse_from(["tutti", "status", "--bogus"]).err();
        let line = err
            .map(|e| usage_line(&e.render().to_string(), &[]))
            .unwrap_or_default();
        assert!(line.starts_with("unexpected argument '--bogus'"), "{line}");
        assert!(line.ends_with("; see `tutti status --help`"), "{line}");
        assert!(!line.contains('\n'));
        let err = Cli::try_parse_from(["tutti", "session", "issue", "--workspace", "w"]).err();
        let line = err
            .map(|e| usage_line(&e.render().to_string(), &[]))
            .unwrap_or_default();
        assert!(
            line.starts_with("the following required arguments were not provided: --session"),
            "{line}"
        );
        // A bad value: the values clap knows, and the help of the subcommand at hand.
        let argv: Vec<String> = [
            "tutti",
            "--state-dir",
            "/s",
            "session",
            "issue",
            "--workspace",
            "w",
            "--session",
            "s",
            "--format",
            "yaml",
        ]
        .map(String::from)
        .to_vec();
        let err = Cli::try_parse_from(&argv).err();
        let line = err
            .map(|e| usage_line(&e.render().to_string(), &argv))
            .unwrap_or_default();
        assert_eq!(
            line,
            "invalid value 'yaml' for '--format <FORMAT>' (possible values: runtime, acp, \
             codex, claude, tutti); see `tutti session issue --help`"
        );
    }
}

//! Text output helpers: aligned tables, one-line cells, shell-style quoting (display only)
//! and time stamps.

use std::io::Write as _;

use chrono::{DateTime, Local, SecondsFormat, Utc};

use crate::error::CliError;

/// An aligned, left-justified table: a header row and data rows, columns separated by two
/// spaces. The last column is not padded, so long free text (errors, descriptions) may run on.
pub(crate) fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let columns = headers.len();
    // Cells hold text from manifests and upstreams: no control character reaches the terminal.
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.iter().map(|c| visible(c)).collect())
        .collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    let mut out = String::new();
    let header_cells: Vec<String> = headers.iter().map(|h| (*h).to_owned()).collect();
    for row in &rows {
        for (i, cell) in row.iter().enumerate().take(columns) {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    for row in std::iter::once(&header_cells).chain(rows.iter()) {
        let mut line = String::new();
        for (i, width) in widths.iter().enumerate() {
            let cell = row.get(i).map(String::as_str).unwrap_or("");
            if i + 1 == columns {
                line.push_str(cell);
            } else {
                line.push_str(cell);
                let pad = width.saturating_sub(cell.chars().count()) + 2;
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Whether `c` must not reach a terminal as it is: a control character (C0, DEL, C1), a
/// Unicode format character (category Cf: U+202E, U+2066, U+200B, U+FEFF…) or a
/// line/paragraph separator. The rule is `tutti_rules::redact::is_hidden`, shared with the
/// connector logs.
pub(crate) fn needs_escape(c: char) -> bool {
    tutti_rules::redact::is_hidden(c)
}

/// `text` with every control and format character written out (`\x1b`, `\r`, `\n`, `\t`,
/// `\x85`, `\u{202e}`, `\u{200b}`): text from a manifest or an upstream can never move the
/// cursor, clear a line, recolour the terminal or reorder and hide what the person reading
/// it sees (a spoofed install confirmation). Every display of such text goes through this
/// (tables do it for every cell); `--json` output stays JSON.
pub(crate) fn visible(text: &str) -> String {
    if !text.chars().any(needs_escape) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        push_visible(&mut out, c);
    }
    out
}

fn push_visible(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if needs_escape(c) && u32::from(c) < 0x100 => {
            out.push_str(&format!("\\x{:02x}", u32::from(c)));
        }
        c if needs_escape(c) => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
        c => out.push(c),
    }
}

/// Makes free text safe for one table cell: control characters (newlines, tabs, escapes)
/// become spaces, runs of whitespace collapse, and the text is cut at `max` characters.
pub(crate) fn one_line(text: &str, max: usize) -> String {
    let mut out = String::new();
    let mut last_space = false;
    for c in text.chars() {
        let c = if c.is_control() { ' ' } else { c };
        if c == ' ' {
            if last_space {
                continue;
            }
            last_space = true;
        } else {
            last_space = false;
        }
        out.push(c);
    }
    let trimmed = out.trim();
    if trimmed.chars().count() > max {
        let cut: String = trimmed.chars().take(max.saturating_sub(1)).collect();
        format!("{}…", cut.trim_end())
    } else {
        trimmed.to_owned()
    }
}

/// The first line of a description (for tool listings).
pub(crate) fn first_line(text: &str) -> &str {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
}

/// Joins argv for display with POSIX shell-style quoting. For showing only: nothing ever runs
/// this string through a shell.
pub(crate) fn shell_join(argv: &[String]) -> String {
    argv.iter()
        .map(|a| shell_quote(a))
        .collect::<Vec<_>>()
        .join(" ")
}

fn shell_quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c));
    if plain {
        arg.to_owned()
    } else if arg.chars().any(needs_escape) {
        // ANSI-C quoting, as bash shows such an argument: every control character visible.
        let mut out = String::from("$'");
        for c in arg.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\'' => out.push_str("\\'"),
                c => push_visible(&mut out, c),
            }
        }
        out.push('\'');
        out
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

/// Unix epoch milliseconds as RFC 3339 UTC (`2026-11-29T14:03:22.123Z`); `None` for 0 or an
/// out-of-range value.
pub(crate) fn rfc3339_utc(unix_ms: i64) -> Option<String> {
    if unix_ms == 0 {
        return None;
    }
    DateTime::<Utc>::from_timestamp_millis(unix_ms)
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
}

/// Unix epoch milliseconds in the local time zone, for people.
pub(crate) fn local_time(unix_ms: i64) -> Option<String> {
    if unix_ms == 0 {
        return None;
    }
    DateTime::<Utc>::from_timestamp_millis(unix_ms).map(|t| {
        DateTime::<Local>::from(t)
            .format("%Y-%m-%d %H:%M:%S")
            .to_string()
    })
}

/// Writes command output to stdout. A closed stdout (`tutti status | head -1`) is not an
/// error worth a message.
pub(crate) fn emit(text: &str) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(source) => Err(CliError::StdoutWrite { source }),
    }
}

/// Writes one line to stderr (a notice, a prompt, a problem), ignoring a closed stderr.
pub(crate) fn note(line: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
}

/// Serializes `value` as one line of JSON followed by a newline.
pub(crate) fn json_line(value: &impl serde::Serialize) -> Result<String, CliError> {
    serde_json::to_string(value)
        .map(|mut s| {
            s.push('\n');
            s
        })
        .map_err(|e| CliError::Json {
            reason: e.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns_and_leaves_last_unpadded() {
        let out = table(
            &["KEY", "STATUS", "LAST ERROR"],
            &[
                vec!["github".into(), "ready".into(), String::new()],
                vec!["a".into(), "crash_loop".into(), "boom".into()],
            ],
        );
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "KEY     STATUS      LAST ERROR");
        assert_eq!(lines[1], "github  ready");
        assert_eq!(lines[2], "a       crash_loop  boom");
    }

    #[test]
    fn one_line_strips_controls_and_cuts() {
        assert_eq!(one_line("a\nb\t\tc", 80), "a b c");
        assert_eq!(one_line("abcdefghij", 5), "abcd…");
        assert_eq!(one_line("  x  ", 5), "x");
    }

    #[test]
    fn control_characters_never_reach_the_terminal() {
        assert_eq!(visible("plain"), "plain");
        assert_eq!(visible("a\u{1b}[2K\rb\n\u{85}"), "a\\x1b[2K\\rb\\n\\x85");
        assert_eq!(
            shell_join(&["run".into(), "x\u{1b}[2K\r  runs: it's".into()]),
            "run $'x\\x1b[2K\\r  runs: it\\'s'"
        );
        let t = table(&["NAME"], &[vec!["Esc\u{1b}[31mRED\nx".into()]]);
        assert_eq!(t, "NAME\nEsc\\x1b[31mRED\\nx\n");
    }

    #[test]
    fn format_characters_are_written_out() {
        // Bidi override, zero-width space, isolate, BOM, soft hyphen, tag, line separator.
        assert_eq!(
            visible("a\u{202e}b\u{200b}c\u{2066}d\u{feff}e\u{ad}f\u{e0041}g\u{2028}h"),
            "a\\u{202e}b\\u{200b}c\\u{2066}d\\u{feff}e\\xadf\\u{e0041}g\\u{2028}h"
        );
        assert_eq!(visible("café ✓ 日本"), "café ✓ 日本");
        assert_eq!(
            shell_join(&["x\u{202e}y".into()]),
            "$'x\\u{202e}y'",
            "a format character gets ANSI-C quoting too"
        );
        let t = table(
            &["A", "B"],
            &[vec!["\u{202e}ab".into(), "z\u{200b}".into()]],
        );
        assert_eq!(t, "A           B\n\\u{202e}ab  z\\u{200b}\n");
        assert_eq!(
            visible(&one_line("x\u{1b}]52;c;aGk=\u{7}y\u{202e}", 80)),
            "x ]52;c;aGk= y\\u{202e}"
        );
    }

    #[test]
    fn first_line_skips_blank_lines() {
        assert_eq!(first_line("\n  Hello world \nmore"), "Hello world");
        assert_eq!(first_line(""), "");
    }

    #[test]
    fn shell_join_quotes_only_when_needed() {
        let argv = vec![
            "/usr/bin/node".to_owned(),
            "server.js".to_owned(),
            "--name=a b".to_owned(),
            "it's".to_owned(),
            String::new(),
        ];
        assert_eq!(
            shell_join(&argv),
            r#"/usr/bin/node server.js '--name=a b' 'it'\''s' ''"#
        );
    }

    #[test]
    fn rfc3339_is_utc_with_z() {
        assert_eq!(rfc3339_utc(0), None);
        assert_eq!(
            rfc3339_utc(1_764_424_800_123).as_deref(),
            Some("2025-11-29T14:00:00.123Z")
        );
        assert!(local_time(1_764_424_800_123).is_some());
    }
}

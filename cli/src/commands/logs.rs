//! `tutti logs [KEY] [--follow] [--since DURATION] [--json]` (SPEC §14): the kernel's log
//! (`logs/kernel.log`) or a connector's (`logs/connector-<key>.log`, upstream stderr with
//! secrets already masked by its worker). Read straight from the state dir, so it works
//! while the kernel is down too (which is when a log matters most); while it runs, what is
//! shown is masked once more with every secret value it knows now ([`LogMask`]).
//!
//! Time of a line: the RFC 3339 timestamp it starts with (text format) or its `timestamp`
//! member (`TUTTI_LOG_FORMAT=json`); a line without one (an upstream's own stderr) has the
//! time of the last line before it that had one, and none before the first such line:
//! `--since` leaves those out.

use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::args::LogsArgs;
use crate::error::CliError;
use crate::kernel::LogMask;

/// How often `--follow` looks for new lines.
const FOLLOW_POLL: Duration = Duration::from_millis(200);

pub(crate) async fn run(state_dir: &Path, args: LogsArgs) -> Result<ExitCode, CliError> {
    let path = log_path(state_dir, args.key.as_deref())?;
    let since = match args.since.as_deref() {
        Some(text) => Some(Utc::now() - parse_duration(text)?),
        None => None,
    };
    let mut file =
        std::fs::File::open(&path).map_err(|e| missing(&path, args.key.as_deref(), e))?;
    let mut lines = Lines {
        since,
        json: args.json,
        last_time: None,
        partial: Vec::new(),
    };
    let mut mask = LogMask::connect(state_dir).await;
    // Without --follow, the log as it is now: the kernel's own log grows while it is read
    // (the masking requests are logged too at debug level).
    let end = match args.follow {
        true => u64::MAX,
        false => file.metadata().map_or(u64::MAX, |m| m.len()),
    };
    let mut pos = 0u64;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        let mut chunk = Vec::new();
        (&file)
            .take((1 << 20).min(end - pos))
            .read_to_end(&mut chunk)
            .map_err(|e| CliError::io("read", &path, e))?;
        pos += chunk.len() as u64;
        let at_end = chunk.is_empty();
        let text = mask.apply(lines.take(&chunk, !args.follow && at_end)).await;
        if !write_out(&text)? {
            return Ok(ExitCode::SUCCESS); // stdout closed
        }
        if !at_end {
            continue;
        }
        if !args.follow {
            return Ok(ExitCode::SUCCESS);
        }
        tokio::select! {
            _ = &mut ctrl_c => return Ok(ExitCode::SUCCESS),
            () = tokio::time::sleep(FOLLOW_POLL) => {}
        }
        // Rotated or truncated: start again at the beginning of what is there now.
        let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        let replaced = !same_file(&file, &path);
        if replaced || len < pos {
            if replaced && let Ok(f) = std::fs::File::open(&path) {
                file = f;
            }
            file.seek(SeekFrom::Start(0))
                .map_err(|e| CliError::io("read", &path, e))?;
            pos = 0;
        }
    }
}

fn missing(path: &Path, key: Option<&str>, e: std::io::Error) -> CliError {
    match (key, e.kind()) {
        (Some(key), std::io::ErrorKind::NotFound) => CliError::NoConnectorLog {
            key: key.to_owned(),
            dir: path.parent().map(Path::to_path_buf).unwrap_or_default(),
        },
        (None, std::io::ErrorKind::NotFound) => CliError::NoKernelLog {
            path: path.to_path_buf(),
        },
        _ => CliError::io("read", path, e),
    }
}

/// `logs/kernel.log`, or `logs/connector-<key>.log` for a well-formed key.
fn log_path(state_dir: &Path, key: Option<&str>) -> Result<PathBuf, CliError> {
    use tutti_rules::state_dir::layout;
    match key {
        None => Ok(layout::kernel_log(state_dir)),
        Some(k) if tutti_proto::key::is_valid(k) => Ok(layout::connector_log(state_dir, k)),
        Some(k) => Err(CliError::NoConnectorLog {
            key: k.to_owned(),
            dir: layout::logs(state_dir),
        }),
    }
}

#[cfg(unix)]
fn same_file(file: &std::fs::File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
        _ => true,
    }
}

#[cfg(not(unix))]
fn same_file(_file: &std::fs::File, _path: &Path) -> bool {
    // No cheap identity: a rotation shows as a shorter file, which restarts the read.
    true
}

/// `30s`, `15m`, `2h`, `1d`, or several of them (`1h30m`).
pub(crate) fn parse_duration(text: &str) -> Result<chrono::Duration, CliError> {
    let bad = || CliError::BadDuration {
        given: text.to_owned(),
    };
    let mut total = 0i64;
    let mut digits = String::new();
    for c in text.trim().chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let n: i64 = digits.parse().map_err(|_| bad())?;
        digits.clear();
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            _ => return Err(bad()),
        };
        total = n
            .checked_mul(unit)
            .and_then(|s| total.checked_add(s))
            .filter(|t| *t <= 100 * 365 * 86_400)
            .ok_or_else(bad)?;
    }
    if !digits.is_empty() || text.trim().is_empty() {
        return Err(bad());
    }
    Ok(chrono::Duration::seconds(total))
}

/// The time a log line names: its leading RFC 3339 timestamp, or a JSON line's `timestamp`.
fn line_time(line: &str) -> Option<DateTime<Utc>> {
    let text = if line.starts_with('{') {
        let v: serde_json::Value = serde_json::from_str(line).ok()?;
        v.get("timestamp")?.as_str()?.to_owned()
    } else {
        line.split_whitespace().next()?.to_owned()
    };
    DateTime::parse_from_rfc3339(&text)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// Prints `text`; `false` when stdout is closed.
fn write_out(text: &str) -> Result<bool, CliError> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(source) => Err(CliError::StdoutWrite { source }),
    }
}

/// Splits what was read into lines and filters them.
struct Lines {
    since: Option<DateTime<Utc>>,
    json: bool,
    last_time: Option<DateTime<Utc>>,
    /// The start of a line whose end has not been written yet.
    partial: Vec<u8>,
}

impl Lines {
    /// The complete lines of `chunk` (and the unfinished last one when `flush_partial`) as
    /// they are shown.
    fn take(&mut self, chunk: &[u8], flush_partial: bool) -> String {
        self.partial.extend_from_slice(chunk);
        let mut text = String::new();
        let mut rest = std::mem::take(&mut self.partial);
        let mut reader = BufReader::new(&rest[..]);
        let mut consumed = 0;
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = reader.read_until(b'\n', &mut line).unwrap_or(0);
            if n == 0 || (line.last() != Some(&b'\n') && !flush_partial) {
                break;
            }
            consumed += n;
            let s = String::from_utf8_lossy(&line);
            self.render(s.trim_end_matches(['\n', '\r']), &mut text);
        }
        self.partial = rest.split_off(consumed);
        text
    }

    fn render(&mut self, line: &str, out: &mut String) {
        if let Some(t) = line_time(line) {
            self.last_time = Some(t);
        }
        if let Some(since) = self.since
            && self.last_time.is_none_or(|t| t < since)
        {
            return;
        }
        if !self.json {
            out.push_str(line);
        } else if line.starts_with('{') && serde_json::from_str::<serde_json::Value>(line).is_ok() {
            out.push_str(line); // TUTTI_LOG_FORMAT=json: as written
        } else {
            let ts = self
                .last_time
                .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true));
            let wrapped = serde_json::json!({"timestamp": ts, "text": line});
            out.push_str(&wrapped.to_string());
        }
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let secs = |t: &str| parse_duration(t).map(|d| d.num_seconds()).ok();
        assert_eq!(secs("30s"), Some(30));
        assert_eq!(secs("15m"), Some(900));
        assert_eq!(secs("1h30m"), Some(5400));
        assert_eq!(secs("2d"), Some(172_800));
        for bad in ["", "5", "m", "5x", "-5m", "1.5h", "99999999999999999999d"] {
            assert_eq!(secs(bad), None, "{bad}");
        }
    }

    #[test]
    fn key_paths() {
        let p = |k| log_path(Path::new("/s"), k).ok();
        assert_eq!(p(None), Some(PathBuf::from("/s/logs/kernel.log")));
        assert_eq!(
            p(Some("gh")),
            Some(PathBuf::from("/s/logs/connector-gh.log"))
        );
        assert_eq!(p(Some("../x")), None);
        assert_eq!(p(Some("UP")), None);
    }

    fn lines(since: Option<&str>, json: bool, input: &str) -> String {
        let mut l = Lines {
            since: since
                .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
                .map(|t| t.to_utc()),
            json,
            last_time: None,
            partial: Vec::new(),
        };
        let mut out = String::new();
        for line in input.lines() {
            l.render(line, &mut out);
        }
        out
    }

    const LOG: &str = "early upstream line\n\
        2026-01-01T10:00:00.000001Z  INFO old\n\
        upstream after old\n\
        {\"timestamp\":\"2026-01-01T11:00:00Z\",\"level\":\"INFO\",\"fields\":{\"message\":\"new\"}}\n\
        upstream after new\n";

    #[test]
    fn since_keeps_lines_at_or_after_with_inherited_times() {
        let got = lines(Some("2026-01-01T10:30:00Z"), false, LOG);
        assert_eq!(
            got,
            "{\"timestamp\":\"2026-01-01T11:00:00Z\",\"level\":\"INFO\",\"fields\":{\"message\":\"new\"}}\nupstream after new\n"
        );
        assert_eq!(lines(None, false, LOG), LOG);
    }

    #[test]
    fn json_passes_json_through_and_wraps_text() {
        let got = lines(None, true, LOG);
        let v: Vec<serde_json::Value> = got
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_default())
            .collect();
        assert_eq!(v.len(), 5);
        assert_eq!(
            v[0],
            serde_json::json!({"timestamp": null, "text": "early upstream line"})
        );
        assert_eq!(v[2]["timestamp"], "2026-01-01T10:00:00.000001Z");
        assert_eq!(v[3]["fields"]["message"], "new");
        assert_eq!(v[4]["timestamp"], "2026-01-01T11:00:00.000000Z");
    }

    #[test]
    fn partial_lines_wait_for_their_end() {
        let mut l = Lines {
            since: None,
            json: true,
            last_time: None,
            partial: Vec::new(),
        };
        // Nothing is shown of an unfinished line until it ends or the read is over.
        assert_eq!(l.take(b"abc", false), "");
        assert_eq!(l.partial, b"abc");
        assert_eq!(
            l.take(b"d\ne", true),
            "{\"text\":\"abcd\",\"timestamp\":null}\n{\"text\":\"e\",\"timestamp\":null}\n"
        );
    }
}

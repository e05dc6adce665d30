//! The stdio upstream's output streams.
//!
//! stdout: every line that parses as a JSON value is handed to rmcp through an in-memory pipe,
//! so rmcp only ever sees JSON (a tools/call result is kept as text and rmcp gets a stand-in,
//! see [`crate::transport::results`]); any other line is counted, logged (redacted, truncated) and
//! reported to the kernel (SPEC §9). stderr: every line goes to our stderr with secrets masked.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Notify;

use crate::redact::{Redactor, trim_line_end};
use crate::transport::results::CallResults;
use crate::upstream::definitions;

/// Longest stdout line (one JSON-RPC message) we accept; longer lines are discarded as they
/// are read (never held whole). An answer to a tools/call that long fails that call at once
/// with `[MCP_UNAVAILABLE] <key>: result larger than 67108864 bytes`; any other such line is
/// counted as non-JSON.
pub(crate) const MAX_STDOUT_LINE: usize = 64 * 1024 * 1024;
/// Longest stderr line we copy whole; longer lines are cut.
pub(crate) const MAX_STDERR_LINE: usize = 64 * 1024;
/// How much of a non-JSON stdout line we log.
pub(crate) const NON_JSON_LOG_CHARS: usize = 200;

/// What a stdout line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LineKind {
    /// A complete JSON value: forwarded to rmcp.
    Json,
    /// Empty or whitespace only: ignored, not counted.
    Blank,
    /// Anything else (banners, log lines, cut-off lines): counted and logged.
    NonJson,
}

/// Classifies one stdout line (with or without its line terminator).
pub(crate) fn classify(line: &[u8]) -> LineKind {
    let line = trim_line_end(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return LineKind::Blank;
    }
    // rmcp tolerates a UTF-8 BOM, and so do we.
    let body = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    match serde_json::from_slice::<serde::de::IgnoredAny>(body) {
        Ok(_) => LineKind::Json,
        Err(_) => LineKind::NonJson,
    }
}

/// Result of one bounded line read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ReadLine {
    /// `buf` holds a line (terminator included when there was one; EOF may end a last line).
    Line,
    /// The line was longer than the limit: `buf` holds its first `max` bytes, the rest was
    /// read and discarded.
    Cut,
    /// End of stream, nothing read.
    Eof,
}

/// The stdout pump's read buffer (Linux's default pipe capacity; tokio's default is 8 KiB).
const STDOUT_READ_BUFFER: usize = 64 * 1024;

/// Reads one `\n`-terminated line into `buf` (cleared first) without ever holding more than
/// `max` bytes of it.
pub(crate) async fn read_line_bounded<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<ReadLine> {
    read_line_keeping_tail(reader, buf, &mut Vec::new(), max).await
}

/// How many of the last bytes of a cut stdout line are kept (in `tail`): enough for the
/// members a JSON-RPC response writes after its `result` (`"jsonrpc"`, `"id"`).
pub(crate) const CUT_TAIL_BYTES: usize = 1024;

/// [`read_line_bounded`] that also keeps the last [`CUT_TAIL_BYTES`] of a cut line in `tail`
/// (cleared first); the bytes in between are discarded as they come.
pub(crate) async fn read_line_keeping_tail<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    tail: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<ReadLine> {
    buf.clear();
    tail.clear();
    let mut cut = false;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(if cut {
                ReadLine::Cut
            } else if buf.is_empty() {
                ReadLine::Eof
            } else {
                ReadLine::Line
            });
        }
        // memchr: a megabyte result line was ~7 % of the worker's CPU as a byte loop.
        let (chunk, done) = match memchr::memchr(b'\n', available) {
            Some(i) => (&available[..=i], true),
            None => (available, false),
        };
        let room = max.saturating_sub(buf.len());
        let (kept, over) = chunk.split_at(chunk.len().min(room));
        buf.extend_from_slice(kept);
        if !over.is_empty() {
            cut = true;
            let over = &over[over.len().saturating_sub(CUT_TAIL_BYTES)..];
            let drop = (tail.len() + over.len()).saturating_sub(CUT_TAIL_BYTES);
            tail.drain(..drop);
            tail.extend_from_slice(over);
        }
        let used = chunk.len();
        reader.consume(used);
        if done {
            return Ok(if cut { ReadLine::Cut } else { ReadLine::Line });
        }
    }
}

/// Counts non-JSON stdout lines and wakes the reporter.
#[derive(Debug, Default)]
pub(crate) struct NonJsonCounter {
    total: AtomicU64,
    changed: Notify,
}

impl NonJsonCounter {
    fn bump(&self) -> u64 {
        let total = self.total.fetch_add(1, Ordering::Relaxed) + 1;
        self.changed.notify_one();
        total
    }

    pub(crate) fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// Resolves after the next bump (or at once if one happened since the last wait).
    pub(crate) async fn changed(&self) {
        self.changed.notified().await;
    }
}

/// Copies the upstream's stdout: JSON lines to `json_out` (newline-terminated), other lines
/// counted in `counter` and logged. Returns at EOF of `stdout`; `json_out` is dropped then, so
/// rmcp sees the end of the stream too. If rmcp stops reading, stdout is still drained so the
/// upstream never blocks on a full pipe.
pub(crate) async fn pump_stdout<R, W>(
    stdout: R,
    json_out: W,
    redactor: Arc<Redactor>,
    counter: Arc<NonJsonCounter>,
    results: Arc<CallResults>,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    // A pipe's default capacity: one read takes what the upstream could write at once.
    let mut reader = BufReader::with_capacity(STDOUT_READ_BUFFER, stdout);
    let mut json_out = Some(json_out);
    let mut buf = Vec::new();
    let mut tail = Vec::new();
    loop {
        let outcome =
            read_line_keeping_tail(&mut reader, &mut buf, &mut tail, MAX_STDOUT_LINE).await?;
        let kind = match outcome {
            ReadLine::Eof => break,
            ReadLine::Cut => cut_line_kind(&results, &mut buf, &tail),
            ReadLine::Line => line_kind(&results, &mut buf),
        };
        match kind {
            LineKind::Blank => {}
            LineKind::Json => forward_json(&mut json_out, &mut buf).await,
            LineKind::NonJson => {
                let total = counter.bump();
                let shown =
                    redactor.redact_truncated(&buf, outcome == ReadLine::Cut, NON_JSON_LOG_CHARS);
                tracing::warn!(total, line = %shown, "upstream wrote a non-JSON line to stdout");
            }
        }
    }
    if let Some(mut out) = json_out {
        let _ = out.shutdown().await;
    }
    Ok(())
}

/// A line cut at [`MAX_STDOUT_LINE`] (`buf` holds its start, `tail` its end): the answer to a
/// call, replaced in `buf` by the short failure of that call, or a non-JSON line.
fn cut_line_kind(results: &CallResults, buf: &mut Vec<u8>, tail: &[u8]) -> LineKind {
    let answer = results.oversized(buf, trim_line_end(tail), MAX_STDOUT_LINE);
    // The cut line's memory goes back; the next long line allocates again.
    buf.truncate(NON_JSON_LOG_CHARS * 4);
    buf.shrink_to_fit();
    match answer {
        // The answer to a call, too large: that call fails now.
        Some(short) => {
            tracing::warn!(
                limit = MAX_STDOUT_LINE,
                "the upstream answered a tools/call with a line over the limit; the call fails"
            );
            buf.clear();
            buf.extend_from_slice(short.as_bytes());
            LineKind::Json
        }
        None => LineKind::NonJson,
    }
}

/// A whole line in `buf`: observed for tool definitions, and a `tools/call` result kept as
/// text is replaced in `buf` by its short stand-in for rmcp.
fn line_kind(results: &CallResults, buf: &mut Vec<u8>) -> LineKind {
    definitions::observe(trim_line_end(buf));
    let len = buf.len();
    match results.divert(buf) {
        // A tools/call result kept as text (it took `buf` along): rmcp gets the short
        // stand-in, and the next line as long as this one finds room at once instead of
        // growing into it by copies.
        Some(short) => {
            *buf = Vec::with_capacity(len.clamp(short.len(), MAX_RESERVED_LINE));
            buf.extend_from_slice(short.as_bytes());
            LineKind::Json
        }
        None => classify(buf),
    }
}

/// The most room a fresh line buffer gets after a result took the last one along.
const MAX_RESERVED_LINE: usize = 8 * 1024 * 1024;

/// Writes the JSON line in `buf` to the MCP client, if it still reads; once a write fails the
/// client is dropped and the rest of stdout is drained.
async fn forward_json<W: AsyncWrite + Unpin>(json_out: &mut Option<W>, buf: &mut Vec<u8>) {
    let Some(out) = json_out.as_mut() else {
        return;
    };
    // One write per line: the terminator goes on in place.
    let len = trim_line_end(buf).len();
    buf.truncate(len);
    buf.push(b'\n');
    let sent = async {
        out.write_all(buf).await?;
        out.flush().await
    }
    .await;
    if sent.is_err() {
        tracing::debug!("the MCP client stopped reading; draining upstream stdout");
        *json_out = None;
    }
}

/// How much a stderr line says about why an upstream failed: a "not found" (npm's
/// `404 Not Found - GET …`) above a `404`, above any other error line (`error`, npm's `ERR!`,
/// Python's `Traceback` and its final `…Error:` line), above the rest. The line kept for a
/// start failure is the latest of the highest rank, so npm's closing `A complete log of this
/// run can be found in …` does not hide the cause.
pub(crate) fn telling(line: &str) -> u8 {
    let lower = line.to_ascii_lowercase();
    if lower.contains("not found") {
        3
    } else if lower.contains("404") {
        2
    } else if ["error", "err!", "traceback", "exception", "fatal"]
        .iter()
        .any(|w| lower.contains(w))
    {
        1
    } else {
        0
    }
}

/// Copies the upstream's stderr to `sink` line by line with secrets masked and control and
/// format characters written out ([`crate::redact::log_line`]). Returns at EOF.
pub(crate) async fn pump_stderr<R, W>(
    stderr: R,
    mut sink: W,
    redactor: Arc<Redactor>,
    last_line: Arc<std::sync::Mutex<Option<String>>>,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: std::io::Write,
{
    let mut reader = BufReader::new(stderr);
    let mut buf = Vec::new();
    loop {
        let outcome = read_line_bounded(&mut reader, &mut buf, MAX_STDERR_LINE).await?;
        if outcome == ReadLine::Eof {
            return Ok(());
        }
        let mut line = crate::redact::log_line(&redactor, &buf, outcome == ReadLine::Cut);
        if !line.trim().is_empty()
            && let Ok(mut last) = last_line.lock()
            && last
                .as_deref()
                .is_none_or(|kept| telling(&line) >= telling(kept))
        {
            *last = Some(crate::redact::truncate_chars(&line, NON_JSON_LOG_CHARS));
        }
        if crate::redact::json_logs() {
            line = json_record(&line);
        }
        line.push('\n');
        // One write per line so lines never interleave with our own log events.
        sink.write_all(line.as_bytes())?;
        sink.flush()?;
    }
}

/// An upstream's stderr line (already redacted and escaped) as a JSON log record, in the
/// shape of the worker's own (`TUTTI_LOG_FORMAT=json`): `timestamp`, `level`, `fields.message`,
/// `target` `upstream::stderr`.
fn json_record(line: &str) -> String {
    use tracing_subscriber::fmt::format::Writer;
    use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
    let mut timestamp = String::new();
    let _ = SystemTime.format_time(&mut Writer::new(&mut timestamp));
    serde_json::json!({
        "timestamp": timestamp,
        "level": "INFO",
        "fields": {"message": line},
        "target": "upstream::stderr",
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stderr_json_records_parse_and_keep_the_line() {
        let v: serde_json::Value =
            serde_json::from_str(&json_record("a \"quoted\" \\u{202e} line")).unwrap_or_default();
        assert_eq!(v["fields"]["message"], "a \"quoted\" \\u{202e} line");
        assert_eq!(v["target"], "upstream::stderr");
        assert!(
            v["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')),
            "{v}"
        );
    }

    #[test]
    fn classifies_lines() {
        assert_eq!(classify(br#"{"jsonrpc":"2.0","id":1}"#), LineKind::Json);
        assert_eq!(classify(b"{\"a\":1}\r\n"), LineKind::Json);
        assert_eq!(classify(b"[1,2]\n"), LineKind::Json);
        assert_eq!(classify(b"\xEF\xBB\xBF{}\n"), LineKind::Json);
        assert_eq!(classify(b"   \n"), LineKind::Blank);
        assert_eq!(classify(b""), LineKind::Blank);
        assert_eq!(
            classify(b"Server starting on stdio...\n"),
            LineKind::NonJson
        );
        assert_eq!(classify(b"{\"a\":1} trailing\n"), LineKind::NonJson);
        assert_eq!(classify(b"{\"a\":\n"), LineKind::NonJson);
        assert_eq!(classify(b"\xff\xfe\n"), LineKind::NonJson);
    }

    #[tokio::test]
    async fn bounded_reader_splits_and_cuts() {
        let data: &[u8] = b"short\nthis line is too long\nlast";
        let mut reader = BufReader::with_capacity(4, data);
        let mut buf = Vec::new();
        assert_eq!(
            read_line_bounded(&mut reader, &mut buf, 10).await.ok(),
            Some(ReadLine::Line)
        );
        assert_eq!(buf, b"short\n");
        assert_eq!(
            read_line_bounded(&mut reader, &mut buf, 10).await.ok(),
            Some(ReadLine::Cut)
        );
        assert_eq!(buf, b"this line ");
        assert_eq!(
            read_line_bounded(&mut reader, &mut buf, 10).await.ok(),
            Some(ReadLine::Line)
        );
        assert_eq!(buf, b"last");
        assert_eq!(
            read_line_bounded(&mut reader, &mut buf, 10).await.ok(),
            Some(ReadLine::Eof)
        );
    }

    #[tokio::test]
    async fn a_cut_line_keeps_its_head_and_its_last_bytes_only() {
        let mut data = b"{\"result\":\"".to_vec();
        data.extend(std::iter::repeat_n(b'x', 3 * CUT_TAIL_BYTES));
        data.extend_from_slice(b"\",\"id\":7}\nnext\n");
        let mut reader = BufReader::with_capacity(100, &data[..]);
        let (mut buf, mut tail) = (Vec::new(), Vec::new());
        let read = read_line_keeping_tail(&mut reader, &mut buf, &mut tail, 16).await;
        assert_eq!(read.ok(), Some(ReadLine::Cut));
        assert_eq!(buf, b"{\"result\":\"xxxxx");
        assert_eq!(tail.len(), CUT_TAIL_BYTES);
        assert!(tail.ends_with(b"xx\",\"id\":7}\n"));
        let read = read_line_keeping_tail(&mut reader, &mut buf, &mut tail, 16).await;
        assert_eq!(read.ok(), Some(ReadLine::Line));
        assert_eq!((buf.as_slice(), tail.len()), (&b"next\n"[..], 0));
    }

    #[tokio::test]
    async fn stdout_pump_forwards_json_and_counts_the_rest() {
        let input: &[u8] = b"Welcome to the server (token s3cr3t)\n\
            {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\r\n\
            \n\
            not json either\n\
            {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}";
        let (json_tx, mut json_rx) = tokio::io::duplex(1 << 16);
        let counter = Arc::new(NonJsonCounter::default());
        let redactor = Arc::new(Redactor::new(["s3cr3t"]));
        let pump = pump_stdout(
            input,
            json_tx,
            redactor,
            counter.clone(),
            Arc::new(CallResults::default()),
        );
        let read_all = async {
            let mut out = Vec::new();
            tokio::io::AsyncReadExt::read_to_end(&mut json_rx, &mut out)
                .await
                .map(|_| out)
        };
        let (pumped, forwarded) = tokio::join!(pump, read_all);
        assert!(pumped.is_ok());
        let forwarded = forwarded.unwrap_or_default();
        assert_eq!(
            String::from_utf8_lossy(&forwarded),
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\
             {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n"
        );
        assert_eq!(counter.total(), 2);
    }

    #[tokio::test]
    async fn stdout_pump_drains_when_the_client_is_gone() {
        let input: &[u8] = b"{}\n{}\nbanner\n{}\n";
        let (json_tx, json_rx) = tokio::io::duplex(8);
        drop(json_rx);
        let counter = Arc::new(NonJsonCounter::default());
        let res = pump_stdout(
            input,
            json_tx,
            Arc::new(Redactor::default()),
            counter.clone(),
            Arc::new(CallResults::default()),
        )
        .await;
        assert!(res.is_ok());
        assert_eq!(counter.total(), 1);
    }

    #[tokio::test]
    async fn stderr_pump_masks_secrets() {
        let input: &[u8] = b"starting with key=abc123\nsecond line\n";
        let mut sink = Vec::new();
        let last = Arc::new(std::sync::Mutex::new(None));
        let res = pump_stderr(
            input,
            &mut sink,
            Arc::new(Redactor::new(["abc123"])),
            last.clone(),
        )
        .await;
        assert!(res.is_ok());
        assert_eq!(
            String::from_utf8_lossy(&sink),
            "starting with key=***\nsecond line\n"
        );
        assert_eq!(
            last.lock().ok().and_then(|l| l.clone()),
            Some("second line".to_owned())
        );
    }

    async fn kept_line(input: &[u8]) -> Option<String> {
        let last = Arc::new(std::sync::Mutex::new(None));
        let res = pump_stderr(
            input,
            Vec::new(),
            Arc::new(Redactor::default()),
            last.clone(),
        )
        .await;
        assert!(res.is_ok());
        last.lock().ok().and_then(|l| l.clone())
    }

    #[tokio::test]
    async fn the_kept_stderr_line_is_the_most_telling_not_the_last() {
        let npm = b"npm error code E404\n\
npm error 404 Not Found - GET https://registry.npmjs.org/@modelcontextprotocol%2fserver-memoryy - Not found\n\
npm error 404\n\
npm error 404  '@modelcontextprotocol/server-memoryy@*' is not in this registry.\n\
npm error A complete log of this run can be found in: /root/.npm/_logs/debug-0.log\n";
        let kept = kept_line(npm).await.unwrap_or_default();
        assert!(kept.contains("404 Not Found - GET"), "{kept}");
        let python = b"Traceback (most recent call last):\n  File \"/x/server.py\", line 1, in <module>\n    import nosuch\nModuleNotFoundError: No module named 'nosuch'\n";
        assert_eq!(
            kept_line(python).await.as_deref(),
            Some("ModuleNotFoundError: No module named 'nosuch'")
        );
        assert_eq!(
            kept_line(b"listening\nready\n").await.as_deref(),
            Some("ready")
        );
    }
}

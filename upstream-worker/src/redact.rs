//! Secret redaction for everything the worker writes to its log (its stderr, which the kernel
//! points at `logs/connector-<key>.log`): upstream stderr, garbage stdout lines, error messages.
//!
//! Values are replaced longest first, so a secret that contains another secret is never left
//! half visible. A process-wide instance ([`install`]) also backs the tracing writer
//! ([`RedactingStderr`]), so even a message we did not anticipate is redacted once the kernel
//! has told us what to hide.

use std::io::{self, Write};
use std::sync::OnceLock;

use tracing_subscriber::fmt::MakeWriter;

/// What replaces every secret value.
pub(crate) const MASK: &str = "***";

/// Replaces known secret values by [`MASK`].
#[derive(Clone, Default)]
pub(crate) struct Redactor {
    /// Non-empty values, longest first (ties broken lexicographically for determinism).
    values: Vec<String>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the values themselves.
        f.debug_struct("Redactor")
            .field("values", &self.values.len())
            .finish()
    }
}

impl Redactor {
    pub(crate) fn new<I, S>(values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut values: Vec<String> = values
            .into_iter()
            .map(Into::into)
            .filter(|v| !v.is_empty())
            .collect();
        values.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        values.dedup();
        Self { values }
    }

    /// Length in bytes of the longest secret (0 when there is none).
    fn longest(&self) -> usize {
        self.values.first().map_or(0, String::len)
    }

    /// `text` with every secret value replaced by `***`.
    pub(crate) fn redact(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for value in &self.values {
            if out.contains(value.as_str()) {
                out = out.replace(value.as_str(), MASK);
            }
        }
        out
    }

    /// `value` with every secret value in its strings (and member names) replaced by `***`.
    pub(crate) fn redact_json(&self, value: serde_json::Value) -> serde_json::Value {
        use serde_json::Value;
        if self.values.is_empty() {
            return value;
        }
        match value {
            Value::String(s) => Value::String(self.redact(&s)),
            Value::Array(items) => {
                Value::Array(items.into_iter().map(|v| self.redact_json(v)).collect())
            }
            Value::Object(members) => Value::Object(
                members
                    .into_iter()
                    .map(|(k, v)| (self.redact(&k), self.redact_json(v)))
                    .collect(),
            ),
            other => other,
        }
    }

    /// Redacts one raw line (lossy UTF-8, trailing `\r`/`\n` removed). When `cut` is true the
    /// line was cut off by a length limit: a secret may straddle the cut, so the tail that
    /// could hold its beginning is dropped as well and an ellipsis marks the cut.
    pub(crate) fn redact_line(&self, raw: &[u8], cut: bool) -> String {
        let raw = trim_line_end(raw);
        let text = String::from_utf8_lossy(raw);
        let mut out = self.redact(&text);
        if cut {
            let keep = out
                .chars()
                .count()
                .saturating_sub(self.longest().saturating_sub(1));
            out = out.chars().take(keep).collect();
            out.push('…');
        }
        out
    }

    /// [`Self::redact_line`], then at most `max_chars` characters (an ellipsis marks a cut).
    /// Redaction happens first, so truncation can never expose part of a secret.
    pub(crate) fn redact_truncated(&self, raw: &[u8], cut: bool, max_chars: usize) -> String {
        truncate_chars(&self.redact_line(raw, cut), max_chars)
    }
}

/// At most `max_chars` characters of `text`, with `…` appended when something was cut.
pub(crate) fn truncate_chars(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        None => text.to_owned(),
        Some((byte, _)) => {
            let mut out = text[..byte].to_owned();
            out.push('…');
            out
        }
    }
}

/// `line` without its trailing `\n` / `\r\n`.
pub(crate) fn trim_line_end(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

static GLOBAL: OnceLock<Redactor> = OnceLock::new();

/// Installs the process-wide redactor used by [`RedactingStderr`]. Only the first call wins
/// (one worker process serves one connector generation).
pub(crate) fn install(redactor: Redactor) {
    let _ = GLOBAL.set(redactor);
}

/// A tracing writer to stderr that redacts every formatted event with the values the kernel
/// listed in `LaunchSpec.redact` (before registration there is nothing to redact).
#[derive(Clone, Copy, Debug, Default)]
pub struct RedactingStderr;

impl<'a> MakeWriter<'a> for RedactingStderr {
    type Writer = RedactingWriter;

    fn make_writer(&'a self) -> Self::Writer {
        RedactingWriter
    }
}

/// One event's writer, see [`RedactingStderr`].
#[derive(Debug)]
pub struct RedactingWriter;

impl Write for RedactingWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut err = io::stderr().lock();
        match GLOBAL.get() {
            Some(redactor) => {
                let text = String::from_utf8_lossy(buf);
                err.write_all(redactor.redact(&text).as_bytes())?;
            }
            None => err.write_all(buf)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_every_occurrence() {
        let r = Redactor::new(["tok123"]);
        assert_eq!(r.redact("a tok123 b tok123"), "a *** b ***");
    }

    #[test]
    fn longest_value_first() {
        // "abc" is inside "abcdef": replacing the short one first would leave "def" visible.
        let r = Redactor::new(["abc", "abcdef"]);
        assert_eq!(r.redact("x abcdef y abc"), "x *** y ***");
        let r = Redactor::new(["abcdef", "abc"]);
        assert_eq!(r.redact("x abcdef y abc"), "x *** y ***");
    }

    #[test]
    fn empty_values_are_ignored() {
        let r = Redactor::new(["", "s"]);
        assert_eq!(r.redact("is"), "i***");
        let none = Redactor::new(Vec::<String>::new());
        assert_eq!(none.redact("plain text"), "plain text");
    }

    #[test]
    fn json_strings_and_names_are_redacted_numbers_kept() {
        let r = Redactor::new(["tok123"]);
        let v =
            serde_json::json!({"detail": "key tok123 refused", "tok123": [1, "x tok123"], "n": 5});
        assert_eq!(
            r.redact_json(v),
            serde_json::json!({"detail": "key *** refused", "***": [1, "x ***"], "n": 5})
        );
    }

    #[test]
    fn debug_never_shows_values() {
        let r = Redactor::new(["hunter2"]);
        assert!(!format!("{r:?}").contains("hunter2"));
    }

    #[test]
    fn line_end_is_trimmed() {
        let r = Redactor::new(["k"]);
        assert_eq!(r.redact_line(b"a k\r\n", false), "a ***");
        assert_eq!(r.redact_line(b"a k\n", false), "a ***");
    }

    #[test]
    fn cut_line_never_shows_a_secret_prefix() {
        // The line was cut in the middle of the secret: "secr" must not survive.
        let r = Redactor::new(["secret"]);
        let out = r.redact_line(b"value=secr", true);
        assert!(!out.contains("secr"), "{out}");
        assert!(out.ends_with('…'));
        assert!(out.starts_with("value"));
    }

    #[test]
    fn truncation_happens_after_redaction() {
        let r = Redactor::new(["0123456789"]);
        let raw = format!("{}0123456789", "x".repeat(195));
        let out = r.redact_truncated(raw.as_bytes(), false, 200);
        // Truncating first would have kept "01234"; redacting first keeps "***" intact.
        assert_eq!(out, format!("{}***", "x".repeat(195)));
        let long = "y".repeat(500);
        let out = r.redact_truncated(long.as_bytes(), false, 200);
        assert_eq!(out.chars().count(), 201);
        assert!(out.ends_with('…'));
    }

    #[test]
    fn truncate_respects_char_boundaries() {
        assert_eq!(truncate_chars("ééé", 2), "éé…");
        assert_eq!(truncate_chars("ab", 2), "ab");
    }
}

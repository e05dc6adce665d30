//! Secret redaction for everything the worker writes to its log (its stderr, which the kernel
//! points at `logs/connector-<key>.log`): upstream stderr, garbage stdout lines, error messages.
//!
//! The masking rule itself is shared with the kernel (`tutti_rules::redact`). A process-wide
//! instance ([`install_for_log`], then every OAuth access token the worker receives,
//! [`learn`]) also backs the tracing writer ([`RedactingStderr`]), so even a message we did
//! not anticipate is redacted once the kernel has told us what to hide, and
//! every control or format character in it is written out (an upstream's text can never
//! drive the terminal of whoever reads the log).

use std::collections::VecDeque;
use std::io::{self, Write};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};

use tracing_subscriber::fmt::MakeWriter;
pub(crate) use tutti_rules::redact::{Redactor, escape_hidden, trim_line_end, truncate_chars};

/// `value` with every secret value in its strings (and member names) replaced by `***`.
pub(crate) fn redact_json(redactor: &Redactor, value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    if redactor.is_empty() {
        return value;
    }
    match value {
        Value::String(s) => Value::String(redactor.redact(&s)),
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .map(|v| redact_json(redactor, v))
                .collect(),
        ),
        Value::Object(members) => Value::Object(
            members
                .into_iter()
                .map(|(k, v)| (redactor.redact(&k), redact_json(redactor, v)))
                .collect(),
        ),
        other => other,
    }
}

/// One line of upstream output as it goes into the log: secrets masked first (so a value
/// holding control characters still matches), then control and format characters written
/// out (a tab stays).
pub(crate) fn log_line(redactor: &Redactor, raw: &[u8], cut: bool) -> String {
    let line = redactor.redact_line(raw, cut);
    match escape_hidden(&line, &['\t']) {
        std::borrow::Cow::Borrowed(_) => line,
        std::borrow::Cow::Owned(escaped) => escaped,
    }
}

static JSON_LOGS: OnceLock<bool> = OnceLock::new();

/// How many tokens learned after the start are kept (a replaced token is not sent again; the
/// bound keeps the masking cost flat for a worker that lives through many short-lived tokens).
const KEEP_LEARNED: usize = 16;

/// The values the process-wide redactor masks: the kernel's list, then tokens learned since.
struct Known {
    listed: Vec<String>,
    learned: VecDeque<String>,
}

static KNOWN: Mutex<Known> = Mutex::new(Known {
    listed: Vec::new(),
    learned: VecDeque::new(),
});
/// The process-wide redactor built from [`KNOWN`]; replaced as a whole on every change, so a
/// log write takes a read lock and one reference count, never a rebuild.
static CURRENT: RwLock<Option<Arc<Redactor>>> = RwLock::new(None);

/// Whether this process logs JSON lines (`TUTTI_LOG_FORMAT=json`), read once.
pub(crate) fn json_logs() -> bool {
    *JSON_LOGS.get_or_init(|| tutti_rules::log_format::LogFormat::from_env().is_json())
}

/// Sets the values the kernel listed in `LaunchSpec.redact` (one worker process serves one
/// connector generation) for the process-wide redactor.
pub(crate) fn install_for_log(values: &[String]) {
    let mut known = KNOWN.lock().unwrap_or_else(PoisonError::into_inner);
    known.listed = values.to_vec();
    rebuild(&known);
}

/// Adds a token received from the kernel (an OAuth access token, first or renewed) to the
/// process-wide redactor; called before the token is used.
pub(crate) fn learn(token: &str) {
    if token.len() < tutti_rules::redact::MIN_SECRET {
        return;
    }
    let mut known = KNOWN.lock().unwrap_or_else(PoisonError::into_inner);
    if known.learned.iter().any(|t| t == token) || known.listed.iter().any(|t| t == token) {
        return;
    }
    if known.learned.len() == KEEP_LEARNED {
        known.learned.pop_front();
    }
    known.learned.push_back(token.to_owned());
    rebuild(&known);
}

/// The process-wide redactor as it is now (empty before registration).
pub(crate) fn current() -> Arc<Redactor> {
    CURRENT
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
        .unwrap_or_default()
}

/// With JSON logs also the values' JSON-escaped forms (a value holding a quote, a backslash
/// or a control character is written escaped inside a JSON line, and must be masked as
/// written).
fn rebuild(known: &Known) {
    let values: Vec<String> = known.listed.iter().chain(&known.learned).cloned().collect();
    let extra = if json_logs() {
        tutti_rules::redact::json_forms(&values)
    } else {
        Vec::new()
    };
    let redactor = Redactor::new(values.into_iter().chain(extra));
    *CURRENT.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(redactor));
}

/// A tracing writer to stderr that redacts every formatted event with the values the kernel
/// listed in `LaunchSpec.redact` and the tokens learned since (before registration there is
/// nothing to redact) and writes
/// out control and format characters (newlines and tabs stay).
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
        let text = String::from_utf8_lossy(buf);
        let redactor = current();
        let text = match redactor.is_empty() {
            false => std::borrow::Cow::Owned(redactor.redact(&text)),
            true => text,
        };
        let shown = if json_logs() {
            tutti_rules::redact::escape_hidden_json(&text, &['\n'])
        } else {
            escape_hidden(&text, &['\n', '\t'])
        };
        err.write_all(shown.as_bytes())?;
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
    fn json_strings_and_names_are_redacted_numbers_kept() {
        let r = Redactor::new(["tok123"]);
        let v =
            serde_json::json!({"detail": "key tok123 refused", "tok123": [1, "x tok123"], "n": 5});
        assert_eq!(
            redact_json(&r, v),
            serde_json::json!({"detail": "key *** refused", "***": [1, "x ***"], "n": 5})
        );
    }

    #[test]
    fn log_lines_are_redacted_then_escaped() {
        let r = Redactor::new(["s3cr3t"]);
        assert_eq!(
            log_line(&r, b"\x1b]52;c;s3cr3t\x07 \xe2\x80\xae\tx\r\n", false),
            "\\x1b]52;c;***\\x07 \\u{202e}\tx"
        );
    }

    #[test]
    fn a_token_learned_after_the_start_is_masked_in_the_log() {
        install_for_log(&["listed-at-start".to_owned()]);
        let before = current().redact("Authorization: Bearer fresh-token-42");
        assert_eq!(before, "Authorization: Bearer fresh-token-42");
        learn("fresh-token-42");
        assert_eq!(
            current().redact("listed-at-start, Authorization: Bearer fresh-token-42"),
            "***, Authorization: Bearer ***"
        );
        // Renewals keep coming: the newest is masked, the kernel's list stays.
        for n in 0..=KEEP_LEARNED {
            learn(&format!("later-token-{n}"));
        }
        let last = format!("later-token-{KEEP_LEARNED} listed-at-start");
        assert_eq!(current().redact(&last), "*** ***");
    }
}

//! The one secret-masking rule every process uses (the kernel for `status`, refusals and the
//! audit log, the worker for everything it writes to `logs/connector-<key>.log`), and the
//! escaping that keeps an upstream's bytes from driving the terminal of whoever reads a log.
//!
//! Values are replaced longest first, so a secret that contains another secret is never left
//! half visible. A value spanning several lines (a PEM key stored with `connect --from-env`)
//! is also masked line by line: logs are written one line at a time, so the whole value never
//! appears in one piece there. Each of its lines of [`MIN_FRAGMENT`] bytes or more is masked
//! wherever it appears; a shorter line (the tail of a base64 block) is masked when it is a
//! whole line of the text on its own, where masking it everywhere would destroy the log.

use std::borrow::Cow;

/// What replaces every secret value.
pub const MASK: &str = "***";

/// Shortest line of a multi-line secret that is masked wherever it appears.
pub const MIN_FRAGMENT: usize = 4;

/// Secret values shorter than this are not masked at all: masking every `a` or `42` in a log
/// would destroy it and hide nothing worth hiding.
pub const MIN_SECRET: usize = 4;

/// The stored secret values worth masking ([`MIN_SECRET`] bytes or more), longest first: what
/// the kernel masks itself and hands each worker to mask (`LaunchSpec.redact`).
pub fn worth_masking(values: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut v: Vec<String> = values
        .into_iter()
        .filter(|s| s.len() >= MIN_SECRET)
        .collect();
    v.sort_by_key(|s| std::cmp::Reverse(s.len()));
    v
}

/// Replaces known secret values by [`MASK`].
#[derive(Clone, Default)]
pub struct Redactor {
    /// Non-empty values and lines of multi-line values, longest first (ties broken
    /// lexicographically for determinism).
    values: Vec<String>,
    /// Lines of multi-line values shorter than [`MIN_FRAGMENT`]: masked as whole lines only.
    short_lines: Vec<String>,
    /// Length in bytes of the longest value that can appear within one line.
    longest_in_line: usize,
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
    pub fn new<I, S>(values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut out = Self::default();
        for value in values.into_iter().map(Into::into) {
            if value.is_empty() {
                continue;
            }
            if value.contains(['\n', '\r']) {
                for line in value.split(['\n', '\r']).map(str::trim) {
                    if line.len() >= MIN_FRAGMENT {
                        out.values.push(line.to_owned());
                    } else if !line.is_empty() {
                        out.short_lines.push(line.to_owned());
                    }
                }
            }
            out.values.push(value);
        }
        out.values
            .sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        out.values.dedup();
        out.short_lines.sort();
        out.short_lines.dedup();
        out.longest_in_line = out
            .values
            .iter()
            .filter(|v| !v.contains(['\n', '\r']))
            .map(String::len)
            .max()
            .unwrap_or(0);
        out
    }

    /// Whether there is nothing to mask.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Length in bytes of the longest secret that fits in one line (0 when there is none).
    pub fn longest_in_line(&self) -> usize {
        self.longest_in_line
    }

    /// `text` with every secret value replaced by `***`.
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for value in &self.values {
            if out.contains(value.as_str()) {
                out = out.replace(value.as_str(), MASK);
            }
        }
        if self.short_lines.is_empty() {
            return out;
        }
        let mut masked = String::with_capacity(out.len());
        for line in out.split_inclusive('\n') {
            let body = line.trim_end_matches(['\n', '\r']);
            if self
                .short_lines
                .binary_search_by(|s| s.as_str().cmp(body.trim()))
                .is_ok()
            {
                masked.push_str(MASK);
                masked.push_str(&line[body.len()..]);
            } else {
                masked.push_str(line);
            }
        }
        masked
    }

    /// Redacts one raw line (lossy UTF-8, trailing `\r`/`\n` removed). When `cut` is true the
    /// line was cut off by a length limit: a secret may straddle the cut, so the tail that
    /// could hold its beginning is dropped as well and an ellipsis marks the cut.
    pub fn redact_line(&self, raw: &[u8], cut: bool) -> String {
        let raw = trim_line_end(raw);
        let text = String::from_utf8_lossy(raw);
        let mut out = self.redact(&text);
        if cut {
            let keep = out
                .chars()
                .count()
                .saturating_sub(self.longest_in_line.saturating_sub(1));
            out = out.chars().take(keep).collect();
            out.push('…');
        }
        out
    }

    /// [`Self::redact_line`], then at most `max_chars` characters (an ellipsis marks a cut).
    /// Redaction happens first, so truncation can never expose part of a secret.
    pub fn redact_truncated(&self, raw: &[u8], cut: bool, max_chars: usize) -> String {
        truncate_chars(&self.redact_line(raw, cut), max_chars)
    }
}

/// At most `max_chars` characters of `text`, with `…` appended when something was cut.
pub fn truncate_chars(text: &str, max_chars: usize) -> String {
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
pub fn trim_line_end(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// Whether `c` must not reach a log reader's terminal as it is: a control character (ESC of
/// an ANSI/OSC sequence, BEL, backspace, carriage return…) or a Unicode format character
/// (category Cf: bidirectional overrides such as U+202E, zero-width characters such as
/// U+200B) or a line/paragraph separator (U+2028, U+2029), which can make a log line or a
/// terminal display read differently from what it holds. The one rule for every display of
/// upstream or manifest text (connector logs here, the CLI's `output::visible`).
pub fn is_hidden(c: char) -> bool {
    use unicode_general_category::{GeneralCategory, get_general_category};
    c.is_control()
        || matches!(
            get_general_category(c),
            GeneralCategory::Format
                | GeneralCategory::LineSeparator
                | GeneralCategory::ParagraphSeparator
        )
}

/// `text` with every [`is_hidden`] character written out (`\x1b`, `\u{202e}`), except the
/// characters of `keep` (a tab, or the newlines between the lines of one log event).
pub fn escape_hidden<'a>(text: &'a str, keep: &[char]) -> Cow<'a, str> {
    let shown = |c: char| !is_hidden(c) || keep.contains(&c);
    if text.chars().all(shown) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if shown(c) {
            out.push(c);
        } else if u32::from(c) < 0x100 {
            out.push_str(&format!("\\x{:02x}", u32::from(c)));
        } else {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        }
    }
    Cow::Owned(out)
}

/// The forms `values` take inside a JSON string where they differ from the values (a
/// quote, a backslash or a control character escaped): a log written as JSON
/// (`TUTTI_LOG_FORMAT=json`) must have those masked too.
pub fn json_forms<'a>(values: impl IntoIterator<Item = &'a String>) -> Vec<String> {
    values
        .into_iter()
        .filter_map(|v| {
            let quoted = serde_json::to_string(v).ok()?;
            let inner = quoted.get(1..quoted.len().saturating_sub(1))?;
            (inner != v.as_str()).then(|| inner.to_owned())
        })
        .collect()
}

/// [`escape_hidden`] for a line of JSON: every hidden character but those of `keep` becomes
/// a JSON `\uXXXX` escape (a surrogate pair above U+FFFF), so the line still parses to the
/// same text while showing nothing a terminal would act on. Only valid inside JSON strings,
/// where serde_json leaves such characters raw (the C0 controls it escapes itself).
pub fn escape_hidden_json<'a>(text: &'a str, keep: &[char]) -> Cow<'a, str> {
    let shown = |c: char| !is_hidden(c) || keep.contains(&c);
    if text.chars().all(shown) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if shown(c) {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_forms_are_the_escaped_values_that_differ() {
        let values = ["plain1234", "q\"uo\\te", "two\nlines"].map(String::from);
        assert_eq!(json_forms(&values), ["q\\\"uo\\\\te", "two\\nlines"]);
    }

    #[test]
    fn hidden_characters_become_json_escapes_that_parse_back() {
        let raw = "a\u{202e}b\u{7f}c\u{1F600}\u{e0001}d\n";
        let line = serde_json::json!({"m": raw}).to_string();
        let shown = escape_hidden_json(&line, &['\n']);
        assert!(
            !shown.contains('\u{202e}') && !shown.contains('\u{7f}'),
            "{shown}"
        );
        assert!(shown.contains("\\u202e"), "{shown}");
        let back: serde_json::Value = serde_json::from_str(&shown).unwrap_or_default();
        assert_eq!(back["m"], raw);
    }

    #[test]
    fn replaces_every_occurrence() {
        let r = Redactor::new(["tok123"]);
        assert_eq!(r.redact("a tok123 b tok123"), "a *** b ***");
    }

    #[test]
    fn values_too_short_to_mask_are_left_out_and_the_rest_go_longest_first() {
        let values = ["abc", "abcd", "", "abcdefgh", "xyz12"].map(String::from);
        assert_eq!(worth_masking(values), ["abcdefgh", "xyz12", "abcd"]);
        let r = Redactor::new(worth_masking(["42".to_owned(), "s3cret".to_owned()]));
        assert_eq!(r.redact("42 s3cret"), "42 ***");
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
        assert!(none.is_empty());
    }

    #[test]
    fn debug_never_shows_values() {
        let r = Redactor::new(["hunter2", "line one\nline two"]);
        let shown = format!("{r:?}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("line"),
            "{shown}"
        );
        // How many values (the whole multi-line value and each of its lines) it masks.
        assert_eq!(shown, "Redactor { values: 4 }");
        assert!(!r.is_empty());
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

    const PEM: &str = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQ\r\nc2VjcmV0LWtleS1tYXRlcmlhbA\nZg=\n-----END PRIVATE KEY-----\n";

    #[test]
    fn every_line_of_a_multi_line_secret_is_masked_one_line_at_a_time() {
        let r = Redactor::new([PEM]);
        for line in PEM.lines() {
            let raw = format!("{line}\n");
            assert_eq!(r.redact_line(raw.as_bytes(), false), MASK, "{line:?}");
        }
        // Inside other text, lines of four bytes or more are masked too.
        assert_eq!(
            r.redact("key: c2VjcmV0LWtleS1tYXRlcmlhbA (loaded)"),
            "key: *** (loaded)"
        );
        // The short tail is masked as a whole line, not inside words.
        assert_eq!(r.redact("  Zg=\r\nZg=x"), "***\r\nZg=x");
    }

    #[test]
    fn a_multi_line_secret_in_one_text_is_masked_whole() {
        let r = Redactor::new([PEM]);
        let text = format!("error: bad key {PEM}end");
        assert_eq!(r.redact(&text), "error: bad key ***end");
        // The cut margin is the longest value that fits in a line, not the whole key.
        assert_eq!(r.longest_in_line(), "-----BEGIN PRIVATE KEY-----".len());
    }

    #[test]
    fn hidden_characters_are_written_out() {
        let raw = "a\x1b]52;c;ZXZpbA==\x07b\u{202e}c\u{200b}d\te\r";
        assert_eq!(
            escape_hidden(raw, &['\t']),
            "a\\x1b]52;c;ZXZpbA==\\x07b\\u{202e}c\\u{200b}d\te\\x0d"
        );
        assert_eq!(escape_hidden("l1\nl2", &['\n']), "l1\nl2");
        assert!(matches!(escape_hidden("plain é", &[]), Cow::Borrowed(_)));
        assert_eq!(escape_hidden("\u{9b}x", &[]), "\\x9bx");
    }
}

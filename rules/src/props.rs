//! Property tests of the shared rules over generated inputs: masking never leaves a secret (or,
//! at a cut, the start of one) in what it returns, the escapes leave nothing a terminal acts
//! on, the loopback rule admits exactly the loopback authorities, and the `x-mcp-header` rule
//! takes any JSON without panicking. Seeded by proptest (a failing case is printed and kept in
//! `proptest-regressions/` next to this file, which then replays it first).

use proptest::prelude::*;
use serde_json::Value;

use crate::loopback::{is_loopback_authority, is_loopback_origin};
use crate::mcp_header::{declarations, is_token};
use crate::redact::{MIN_FRAGMENT, MIN_SECRET, Redactor, escape_hidden, is_hidden, truncate_chars};

/// Secrets are drawn from upper-case letters and digits, the text around them from lower-case
/// letters, spaces and a few non-ASCII letters: any secret character left in an output is a
/// leak, whatever the cut or the overlap.
fn secret() -> impl Strategy<Value = String> {
    proptest::string::string_regex(&format!("[A-Z0-9]{{{MIN_SECRET},24}}"))
        .unwrap_or_else(|e| panic!("{e}"))
}

fn filler() -> impl Strategy<Value = String> {
    proptest::string::string_regex("[a-z éøж]{0,12}").unwrap_or_else(|e| panic!("{e}"))
}

/// A text of filler and secrets (each secret 0..3 times), and the secrets.
fn text_with_secrets() -> impl Strategy<Value = (Vec<String>, String)> {
    prop::collection::vec(secret(), 1..4).prop_flat_map(|secrets| {
        let n = secrets.len();
        let parts = prop::collection::vec((filler(), 0..n + 1), 0..10);
        (Just(secrets), parts).prop_map(|(secrets, parts)| {
            let mut text = String::new();
            for (fill, pick) in parts {
                text.push_str(&fill);
                if let Some(s) = secrets.get(pick) {
                    text.push_str(s);
                }
            }
            (secrets, text)
        })
    })
}

fn has_secret_char(text: &str) -> bool {
    text.chars()
        .any(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn masking_leaves_no_secret_character((secrets, text) in text_with_secrets()) {
        let out = Redactor::new(secrets.clone()).redact(&text);
        prop_assert!(!has_secret_char(&out), "{text:?} -> {out:?}");
    }

    /// A line cut off anywhere (even inside a secret, even inside a UTF-8 character) shows no
    /// character of any secret: a whole one is masked, the beginning of one at the cut is
    /// dropped with the tail that could hold it.
    #[test]
    fn a_line_cut_anywhere_shows_no_part_of_a_secret(
        (secrets, text) in text_with_secrets(),
        cut in any::<prop::sample::Index>(),
    ) {
        let bytes = text.as_bytes();
        let at = cut.index(bytes.len() + 1);
        let redactor = Redactor::new(secrets);
        let out = redactor.redact_line(&bytes[..at], at < bytes.len());
        prop_assert!(!has_secret_char(&out), "{:?} cut at {at} -> {out:?}", text);
        let short = redactor.redact_truncated(&bytes[..at], at < bytes.len(), 7);
        prop_assert!(!has_secret_char(&short));
        prop_assert!(short.chars().count() <= 8);
    }

    /// A secret of several lines is masked in every line it spans that could identify it.
    #[test]
    fn every_line_of_a_multi_line_secret_is_masked(
        lines in prop::collection::vec(secret(), 2..4),
        before in filler(),
        after in filler(),
    ) {
        let value = lines.join("\n");
        let text = format!("{before}{value}{after}");
        let redactor = Redactor::new([value]);
        let out = redactor.redact(&text);
        for line in lines.iter().filter(|l| l.len() >= MIN_FRAGMENT) {
            prop_assert!(!out.contains(line.as_str()), "{line:?} in {out:?}");
        }
        // Each printed line alone (as a log reader sees them) is masked too.
        for printed in text.split('\n') {
            let out = redactor.redact_line(printed.as_bytes(), false);
            prop_assert!(!has_secret_char(&out), "{printed:?} -> {out:?}");
        }
    }

    #[test]
    fn truncation_keeps_a_prefix_of_at_most_the_limit(text in "\\PC{0,40}", max in 0usize..50) {
        let out = truncate_chars(&text, max);
        let kept = out.strip_suffix('…').unwrap_or(&out);
        prop_assert!(text.starts_with(kept));
        prop_assert!(kept.chars().count() <= max);
        prop_assert_eq!(out == text, text.chars().count() <= max);
    }

    #[test]
    fn escaping_leaves_nothing_hidden_but_what_is_kept(text in any::<String>()) {
        let out = escape_hidden(&text, &['\t']);
        prop_assert!(out.chars().all(|c| c == '\t' || !is_hidden(c)), "{out:?}");
    }

    #[test]
    fn loopback_hosts_with_any_port_are_admitted(
        host in prop::sample::select(vec!["127.0.0.1", "localhost", "LocalHost", "[::1]"]),
        port in prop::option::of(0u32..65536),
    ) {
        let authority = match port {
            Some(p) => format!("{host}:{p}"),
            None => host.to_owned(),
        };
        prop_assert!(is_loopback_authority(&authority), "{authority}");
        let (plain, tls) = (format!("http://{authority}"), format!("https://{authority}"));
        prop_assert!(is_loopback_origin(&plain), "{plain}");
        prop_assert!(!is_loopback_origin(&tls), "{tls}");
    }

    /// Whatever follows or precedes a loopback name, it is refused unless it is a port: the
    /// host an attacker controls (`localhost.evil`, `127.0.0.1@evil`, `evil#127.0.0.1`) never
    /// passes.
    #[test]
    fn anything_around_a_loopback_host_but_a_port_is_refused(
        host in prop::sample::select(vec!["127.0.0.1", "localhost", "[::1]"]),
        before in "[a-z0-9.@:/#\\[\\]-]{0,8}",
        after in "[a-z.@/#?\\[\\]-][a-z0-9.@:/#-]{0,8}",
    ) {
        prop_assert!(!is_loopback_authority(&format!("{host}{after}")), "{host}{after}");
        if !before.is_empty() {
            prop_assert!(!is_loopback_authority(&format!("{before}{host}")), "{before}{host}");
        }
    }

    #[test]
    fn header_declarations_of_any_json_are_found_without_panicking(value in json_value()) {
        for declaration in declarations(&value) {
            prop_assert!(!declaration.path.is_empty());
            if let Some(name) = declaration.value.as_str() {
                let _ = is_token(name);
            }
        }
    }
}

/// Arbitrary JSON, biased towards objects with `properties` and `x-mcp-header` members.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        "[a-zA-Z-]{0,6}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop::sample::select(vec!["properties", "x-mcp-header", "type", "a", "b"]),
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
        ]
    })
}

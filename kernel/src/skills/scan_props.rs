//! Property tests of the skill scan ([`super::scan`]) over generated files: any bytes are
//! scanned without a panic within the per-file finding limit; plain prose of harmless words
//! gives no finding; an override phrase is found wherever it stands, however it is cased,
//! split over lines or interrupted by a zero-width character or an HTML comment; and one
//! invisible or bidirectional control anywhere is found.

use proptest::prelude::*;

use super::scan::{MAX_FINDINGS_PER_FILE, scan_bytes, scan_text};

/// Words that neither start nor complete an override, and no blob.
const PROSE: &[&str] = &[
    "read", "the", "file", "and", "list", "its", "rows", "then", "call", "tool", "with", "a",
    "query", "for", "each", "user", "report", "numbers", "in", "table", "when", "done",
];

fn prose() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(
        (
            prop::sample::select(PROSE),
            prop::sample::select(vec![" ", " ", "\n", ". "]),
        )
            .prop_map(|(w, sep)| format!("{w}{sep}")),
        0..60,
    )
}

/// How the two halves of a phrase may be joined.
fn joint() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![" ", "\n", "  \n  ", " <!-- note --> ", "\u{200b} "])
}

fn cased(text: &str, upper: &[bool]) -> String {
    text.chars()
        .zip(upper.iter().cycle())
        .map(|(c, u)| if *u { c.to_ascii_uppercase() } else { c })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn any_bytes_are_scanned_within_the_finding_limit(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        let findings = scan_bytes("SKILL.md", &bytes);
        prop_assert!(findings.len() <= MAX_FINDINGS_PER_FILE + 1);
        prop_assert!(findings.iter().all(|f| f.starts_with("SKILL.md:") && !f.contains('\n')));
    }

    #[test]
    fn harmless_prose_has_no_finding(words in prose()) {
        let text = words.concat();
        prop_assert_eq!(scan_text("SKILL.md", &text), Vec::<String>::new(), "{:?}", text);
    }

    #[test]
    fn an_override_phrase_is_found_wherever_and_however_it_is_written(
        before in prose(),
        after in prose(),
        verb in prop::sample::select(vec!["ignore", "disregard", "forget"]),
        which in prop::sample::select(vec!["previous", "all", "system", "your"]),
        what in prop::sample::select(vec!["instructions", "rules", "prompt"]),
        (first, second) in (joint(), joint()),
        upper in prop::collection::vec(any::<bool>(), 1..8),
    ) {
        let phrase = cased(&format!("{verb}{first}{which}{second}{what}"), &upper);
        let text = format!("{}{phrase} {}", before.concat(), after.concat());
        let findings = scan_text("SKILL.md", &text);
        prop_assert!(!findings.is_empty(), "nothing found in {:?}", text);
    }

    #[test]
    fn one_hidden_control_anywhere_is_found(
        words in prose(),
        at in any::<prop::sample::Index>(),
        control in prop::sample::select(vec!['\u{202e}', '\u{200b}', '\u{2066}', '\u{e0041}', '\u{feff}']),
    ) {
        let mut text = words.concat();
        let mut at = at.index(text.len() + 1);
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        // A byte order mark opening a file is a byte order mark, not hidden text.
        if control == '\u{feff}' && at == 0 {
            text.insert(0, 'x');
            at = 1;
        }
        text.insert(at, control);
        prop_assert!(!scan_text("SKILL.md", &text).is_empty(), "nothing found in {:?}", text);
    }
}

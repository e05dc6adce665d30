use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use serde_json::{Value, json};

use super::assess;
use crate::toolset::{OfferedTool, Risk, validate};

fn level(name: &str, definition: Value) -> Risk {
    assess(name, &definition).0
}

#[test]
fn a_hint_never_lowers_a_verb_in_the_name() {
    for name in [
        "delete_all",
        "sendEmail",
        "drop-table",
        "kill",
        "HTTPPostRequest",
    ] {
        let (risk, why) = assess(
            name,
            &json!({"annotations":{"readOnlyHint":true,"destructiveHint":false}}),
        );
        assert_eq!(risk, Risk::High, "{name}: {why}");
        assert!(why.contains("in the name"), "{name}: {why}");
    }
}

#[test]
fn hints_only_raise() {
    // readOnlyHint lowers nothing: a name that says nothing stays medium.
    assert_eq!(
        level("plain", json!({"annotations":{"readOnlyHint":true}})),
        Risk::Medium
    );
    assert_eq!(
        level("get", json!({"annotations":{"destructiveHint":true}})),
        Risk::High
    );
    assert_eq!(
        level("list_items", json!({"annotations":{"readOnlyHint":false}})),
        Risk::Medium
    );
    assert_eq!(
        level("fetch", json!({"annotations":{"openWorldHint":true}})),
        Risk::Medium
    );
    assert_eq!(level("list_items", json!({})), Risk::Low);
}

#[test]
fn only_the_manifest_lowers() {
    let tool = |name: &str| OfferedTool {
        upstream_name: name.into(),
        definition: json!({"inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}),
    };
    let mut own = BTreeMap::new();
    own.insert("delete_all".to_string(), "low".to_string());
    let v = validate("k", &[tool("delete_all"), tool("purge")], &own).expect("valid");
    let risk = |n: &str| v.iter().find(|t| t.upstream_name == n).map(|t| t.risk);
    assert_eq!(risk("delete_all"), Some(Risk::Low));
    assert_eq!(risk("purge"), Some(Risk::High));
}

#[test]
fn read_verbs_in_the_name_are_low_and_change_verbs_keep_medium() {
    for name in [
        "list_tables",
        "git_status",
        "describe_table",
        "getUser",
        "search_files",
    ] {
        assert_eq!(level(name, json!({})), Risk::Low, "{name}");
    }
    for name in [
        "stop_search",
        "get_or_create",
        "create_table",
        "directory_tree",
    ] {
        assert_eq!(level(name, json!({})), Risk::Medium, "{name}");
    }
    // Qualifiers, not actions: a past participle or -ing form in a name.
    assert_eq!(level("list_deleted_items", json!({})), Risk::Low);
}

#[test]
fn only_the_first_sentence_of_a_description_counts_and_identifiers_do_not() {
    let d = |text: &str| json!({ "description": text });
    assert_eq!(
        level(
            "simulate-research-query",
            d("Simulates a deep research operation. It sends an elicitation request.")
        ),
        Risk::Medium
    );
    assert_eq!(
        level(
            "stop_search",
            d("Stop a search, similar to force_terminate")
        ),
        Risk::Medium
    );
    assert_eq!(level("lookup", d("Send an email")), Risk::High);
    assert_eq!(
        level("notify", d("  Sends a message to Slack.")),
        Risk::High
    );
}

// === the rule measured on real catalogues (tests/catalogues, docs/RISK.md) ===

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every catalogue's tools with level and reason, as the markdown table of docs/RISK.md.
fn table() -> (String, BTreeMap<(String, String), Risk>) {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("tests/catalogues"))
        .expect("tests/catalogues")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    let mut out = String::from("| server | tool | level | reason |\n|---|---|---|---|\n");
    let mut levels = BTreeMap::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("catalogue");
        let cat: Value = serde_json::from_str(&text).expect("catalogue JSON");
        let server = cat["server"].as_str().unwrap_or("?").to_string();
        for tool in cat["tools"].as_array().into_iter().flatten() {
            let name = tool["name"].as_str().unwrap_or("?");
            let (risk, why) = assess(name, tool);
            let _ = writeln!(out, "| {server} | `{name}` | {} | {why} |", risk.as_str());
            levels.insert((server.clone(), name.to_string()), risk);
        }
    }
    (out, levels)
}

const START: &str = "<!-- risk-table:start -->\n";
const END: &str = "<!-- risk-table:end -->";

#[test]
fn the_published_table_is_what_the_rule_gives_on_real_catalogues() {
    let (table, levels) = table();
    for (server, tool, want) in [
        ("server-everything", "simulate-research-query", Risk::Medium),
        ("server-everything", "get-sum", Risk::Low),
        ("desktop-commander", "stop_search", Risk::Medium),
        ("desktop-commander", "force_terminate", Risk::High),
        ("desktop-commander", "kill_process", Risk::High),
        ("desktop-commander", "start_process", Risk::High),
        ("desktop-commander", "list_processes", Risk::Low),
        ("desktop-commander", "read_file", Risk::Medium),
        ("filesystem", "write_file", Risk::High),
        ("filesystem", "list_directory", Risk::Low),
        ("memory", "delete_entities", Risk::High),
        ("memory", "read_graph", Risk::Low),
        ("git", "git_status", Risk::Low),
        ("git", "git_reset", Risk::High),
        ("fetch", "fetch", Risk::Medium),
        ("sqlite", "list_tables", Risk::Low),
        ("sqlite", "write_query", Risk::High),
    ] {
        assert_eq!(
            levels.get(&(server.to_string(), tool.to_string())),
            Some(&want),
            "{server} {tool}"
        );
    }
    let doc_path = repo().join("docs/RISK.md");
    let doc = std::fs::read_to_string(&doc_path).expect("docs/RISK.md");
    let (Some(a), Some(b)) = (doc.find(START), doc.find(END)) else {
        panic!("docs/RISK.md has no {START:?} … {END:?} section");
    };
    let published = &doc[a + START.len()..b];
    if std::env::var_os("TUTTI_WRITE_RISK_TABLE").is_some() {
        let new = format!("{}{START}{table}{}", &doc[..a], &doc[b..]);
        std::fs::write(&doc_path, new).expect("write docs/RISK.md");
    } else {
        assert_eq!(
            published, table,
            "docs/RISK.md is out of date: run TUTTI_WRITE_RISK_TABLE=1 cargo test -p tutti-kernel --lib risk::"
        );
    }
}

#[test]
fn words_split_at_humps_after_digits_and_keep_acronyms_whole() {
    let split = |text: &str| super::words(text).collect::<Vec<_>>();
    assert_eq!(split("utf8Decode"), ["utf8", "decode"]);
    assert_eq!(split("listHTTPServers"), ["list", "http", "servers"]);
    assert_eq!(split("HTTP_GET"), ["http", "get"]);
}

//! The ranked keyword index behind `tutti_search_tools` (SPEC §15): BM25 over each tool's
//! name, description and parameter names, with the connector key as a boosted field.
//!
//! Built once per route table ([`IndexCache`]), lazily on the first search of that table, so
//! neither a commit nor a `tools/call` ever pays for it. Pure data after that: a search
//! touches only the postings of its query terms and copies pre-serialized results.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::catalog::routes::{RouteTable, Tool};
use crate::era::tables::Revision;

/// BM25 term-frequency saturation.
const K1: f32 = 1.2;
/// BM25 length normalisation.
const B: f32 = 0.75;
/// Field weights (BM25F): a term in the name counts three times one in the description.
const W_NAME: f32 = 3.0;
const W_KEY: f32 = 2.0;
const W_PARAM: f32 = 1.5;
const W_DESCRIPTION: f32 = 1.0;
/// Added for a query that is exactly a tool's name, so it always ranks first.
const EXACT_NAME: f32 = 1000.0;

/// The index of one route table.
pub(crate) struct SearchIndex {
    /// Per tool, its result `{"name","description","risk","connector","inputSchema"}`,
    /// serialized once.
    entries: Vec<Box<RawValue>>,
    /// term → (entry, weighted term frequency)
    postings: HashMap<String, Vec<(u32, f32)>>,
    lengths: Vec<f32>,
    average_length: f32,
    by_name: HashMap<String, u32>,
}

/// Splits text into lower-case terms: runs of letters and digits, split again at camelCase
/// boundaries, with a plural `s` taken off (`files` → `file`).
pub(crate) fn terms(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut previous_lower = false;
    for c in text.chars() {
        if c.is_alphanumeric() {
            if c.is_uppercase() && previous_lower {
                push_term(&mut out, &mut current);
            }
            previous_lower = c.is_lowercase() || c.is_numeric();
            current.extend(c.to_lowercase());
        } else {
            previous_lower = false;
            push_term(&mut out, &mut current);
        }
    }
    push_term(&mut out, &mut current);
    out
}

fn push_term(out: &mut Vec<String>, current: &mut String) {
    if current.is_empty() {
        return;
    }
    let mut term = std::mem::take(current);
    if term.len() > 3 && term.ends_with('s') && !term.ends_with("ss") {
        term.pop();
    }
    out.push(term);
}

/// The top-level parameter names of an input schema.
fn parameter_names(schema: &Value) -> impl Iterator<Item = &str> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|p| p.keys().map(String::as_str))
}

impl SearchIndex {
    /// Indexes every tool of `table`.
    pub(crate) fn build(table: &RouteTable) -> Self {
        let mut index = Self {
            entries: Vec::with_capacity(table.len()),
            postings: HashMap::new(),
            lengths: Vec::with_capacity(table.len()),
            average_length: 0.0,
            by_name: HashMap::with_capacity(table.len()),
        };
        for tool in table.tools() {
            index.add(tool);
        }
        let total: f32 = index.lengths.iter().sum();
        index.average_length = if index.lengths.is_empty() {
            1.0
        } else {
            total / index.lengths.len() as f32
        };
        index
    }

    fn add(&mut self, tool: &Tool) {
        // The newest era's projection holds every field the upstream gave.
        let projected: Value =
            serde_json::from_str(tool.projected[Revision::V2026_07_28.index()].get())
                .unwrap_or(Value::Null);
        let description = projected
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let schema = projected
            .get("inputSchema")
            .cloned()
            .unwrap_or_else(|| json!({"type": "object"}));
        let Ok(result) = serde_json::value::to_raw_value(&json!({
            "name": tool.name,
            "description": description,
            "risk": tool.risk,
            "connector": tool.connector.key,
            "inputSchema": schema,
        })) else {
            return;
        };
        let Ok(doc) = u32::try_from(self.entries.len()) else {
            return;
        };
        let mut weights: HashMap<String, f32> = HashMap::new();
        let mut length = 0.0;
        let fields: [(f32, Vec<String>); 4] = [
            (W_NAME, terms(&tool.name)),
            (W_KEY, terms(&tool.connector.key)),
            (W_DESCRIPTION, terms(description)),
            (W_PARAM, parameter_names(&schema).flat_map(terms).collect()),
        ];
        for (weight, field_terms) in fields {
            for term in field_terms {
                *weights.entry(term).or_default() += weight;
                length += weight;
            }
        }
        for (term, weight) in weights {
            self.postings.entry(term).or_default().push((doc, weight));
        }
        self.lengths.push(length);
        self.by_name.insert(tool.name.clone(), doc);
        self.entries.push(result);
    }

    /// The best `limit` tools for `query`, best first (ties by name). Empty when no term of
    /// the query occurs anywhere.
    pub(crate) fn search(&self, query: &str, limit: usize) -> Vec<&RawValue> {
        let mut query_terms = terms(query);
        query_terms.sort();
        query_terms.dedup();
        let n = self.entries.len() as f32;
        // Dense accumulator (one slot per tool) and the tools it touched: no hashing per
        // posting, and only touched tools are ranked.
        let mut scores = vec![0.0f32; self.entries.len()];
        let mut touched: Vec<u32> = Vec::new();
        for term in &query_terms {
            let Some(postings) = self.postings.get(term) else {
                continue;
            };
            let df = postings.len() as f32;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            for &(doc, tf) in postings {
                let length = self.lengths.get(doc as usize).copied().unwrap_or(1.0);
                let norm = K1 * (1.0 - B + B * length / self.average_length);
                if let Some(score) = scores.get_mut(doc as usize) {
                    if *score == 0.0 {
                        touched.push(doc);
                    }
                    *score += idf * tf * (K1 + 1.0) / (tf + norm);
                }
            }
        }
        if let Some(&doc) = self.by_name.get(query.trim())
            && let Some(score) = scores.get_mut(doc as usize)
        {
            if *score == 0.0 {
                touched.push(doc);
            }
            *score += EXACT_NAME;
        }
        let score_of = |doc: &u32| scores.get(*doc as usize).copied().unwrap_or(0.0);
        let order = |a: &u32, b: &u32| score_of(b).total_cmp(&score_of(a)).then(a.cmp(b));
        if limit < touched.len() {
            touched.select_nth_unstable_by(limit, order);
            touched.truncate(limit);
        }
        touched.sort_by(order);
        touched
            .into_iter()
            .filter_map(|doc| self.entries.get(doc as usize))
            .map(|e| &**e)
            .collect()
    }

    /// The tools named exactly, in the order asked (duplicates once), and the names that
    /// match no tool.
    pub(crate) fn select<'q>(&self, names: &[&'q str]) -> (Vec<&RawValue>, Vec<&'q str>) {
        let mut found = Vec::new();
        let mut missing = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for name in names {
            if !seen.insert(*name) {
                continue;
            }
            match self
                .by_name
                .get(*name)
                .and_then(|&d| self.entries.get(d as usize))
            {
                Some(entry) => found.push(&**entry),
                None => missing.push(*name),
            }
        }
        (found, missing)
    }

    #[cfg(test)]
    fn names(&self, results: &[&RawValue]) -> Vec<String> {
        results
            .iter()
            .filter_map(|r| {
                let v: Value = serde_json::from_str(r.get()).ok()?;
                v.get("name")?.as_str().map(str::to_owned)
            })
            .filter(|n| self.by_name.contains_key(n))
            .collect()
    }
}

/// The index of the newest route table searched, rebuilt when a search meets a newer table.
#[derive(Default)]
pub(crate) struct IndexCache {
    /// The table the index was built from (weak: a replaced table is freed as usual, and
    /// its address cannot be reused while this is held).
    slot: Mutex<Option<(Weak<RouteTable>, Arc<SearchIndex>)>>,
}

impl IndexCache {
    /// The index of `table`, built now if this is the first search since it was committed.
    pub(crate) fn get(&self, table: &Arc<RouteTable>) -> Arc<SearchIndex> {
        {
            let slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((built_from, index)) = slot.as_ref()
                && std::ptr::eq(built_from.as_ptr(), Arc::as_ptr(table))
            {
                return index.clone();
            }
        }
        // Built outside the lock; two first searches of one table may both build it.
        let index = Arc::new(SearchIndex::build(table));
        let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
        *slot = Some((Arc::downgrade(table), index.clone()));
        index
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::routes::RouteState;
    use tutti_proto::kernel::{ConnectorRoute, RouteEvent, RoutedTool, route_event};

    fn tool(name: &str, description: &str, params: &[&str]) -> RoutedTool {
        let properties: serde_json::Map<String, Value> = params
            .iter()
            .map(|p| ((*p).to_owned(), json!({"type": "string"})))
            .collect();
        RoutedTool {
            name: name.into(),
            upstream_name: name.into(),
            definition_json: json!({
                "name": name,
                "description": description,
                "inputSchema": {"type": "object", "properties": properties},
            })
            .to_string(),
            risk: "medium".into(),
        }
    }

    fn table(connectors: Vec<(&str, Vec<RoutedTool>)>) -> Arc<RouteTable> {
        let mut state = RouteState::new();
        let connectors = connectors
            .into_iter()
            .enumerate()
            .map(|(i, (key, tools))| ConnectorRoute {
                key: key.into(),
                name: key.into(),
                generation: i as u64 + 1,
                worker_endpoint: format!("/w/{key}"),
                call_timeout_ms: 1000,
                tools,
                has_cli: false,
                has_mcp: true,
                ..Default::default()
            })
            .collect();
        state.apply(RouteEvent {
            revision: 1,
            event: Some(route_event::Event::Snapshot(
                tutti_proto::kernel::RouteSnapshot { connectors },
            )),
        });
        state.table()
    }

    fn sample() -> SearchIndex {
        let mut many: Vec<RoutedTool> = (0..200)
            .map(|i| tool(&format!("gen_tool_{i:04}"), "Generated filler tool", &["p"]))
            .collect();
        many.push(tool(
            "gen_list_files",
            "Lists the files of a folder",
            &["path"],
        ));
        SearchIndex::build(&table(vec![
            (
                "github",
                vec![
                    tool(
                        "github_create_issue",
                        "Open a new issue in a repository",
                        &["repo", "title"],
                    ),
                    tool("github_list_pulls", "List pull requests", &["repo"]),
                ],
            ),
            (
                "notes",
                vec![tool(
                    "notes_create_note",
                    "Create a note",
                    &["title", "body"],
                )],
            ),
            ("gen", many),
        ]))
    }

    #[test]
    fn terms_split_names_camel_case_and_plurals() {
        assert_eq!(terms("github_createIssue"), ["github", "create", "issue"]);
        assert_eq!(terms("List pull-requests!"), ["list", "pull", "request"]);
        assert_eq!(terms("tool_0123 class"), ["tool", "0123", "class"]);
    }

    #[test]
    fn ranks_by_name_description_and_parameters() {
        let index = sample();
        let top = index.names(&index.search("create issue", 3));
        assert_eq!(top.first().map(String::as_str), Some("github_create_issue"));
        let files = index.names(&index.search("list files in a folder", 3));
        assert_eq!(files.first().map(String::as_str), Some("gen_list_files"));
        // A parameter name finds its tool.
        let body = index.names(&index.search("body", 3));
        assert_eq!(body, ["notes_create_note"]);
        assert!(index.search("nothing-matches-this", 5).is_empty());
    }

    #[test]
    fn a_connector_key_favours_its_tools_and_an_exact_name_wins() {
        let index = sample();
        let top = index.names(&index.search("notes create", 2));
        assert_eq!(top.first().map(String::as_str), Some("notes_create_note"));
        let top = index.names(&index.search("github create", 2));
        assert_eq!(top.first().map(String::as_str), Some("github_create_issue"));
        let exact = index.names(&index.search("gen_tool_0042", 1));
        assert_eq!(exact, ["gen_tool_0042"]);
    }

    #[test]
    fn limit_and_select() {
        let index = sample();
        assert_eq!(index.search("generated filler", 5).len(), 5);
        let (found, missing) = index.select(&["notes_create_note", "nope", "github_list_pulls"]);
        assert_eq!(
            index.names(&found),
            ["notes_create_note", "github_list_pulls"]
        );
        assert_eq!(missing, ["nope"]);
        let v: Value = serde_json::from_str(found[0].get()).unwrap_or(Value::Null);
        assert_eq!(v["risk"], "medium");
        assert_eq!(v["connector"], "notes");
        assert_eq!(v["inputSchema"]["properties"]["body"]["type"], "string");
    }

    /// The index's own cost at 2,000 tools (printed; `--nocapture`), apart from HTTP.
    #[test]
    fn searching_two_thousand_tools() {
        let tools: Vec<RoutedTool> = (0..2000)
            .map(|i| {
                tool(
                    &format!("big_tool_{i:04}"),
                    &format!("Generated fixture tool number {i}"),
                    &[&format!("p{i:04}")],
                )
            })
            .collect();
        let table = table(vec![("big", tools)]);
        let built = std::time::Instant::now();
        let index = SearchIndex::build(&table);
        let build = built.elapsed();
        let mut times: Vec<std::time::Duration> = (0..500)
            .map(|i| {
                let t = std::time::Instant::now();
                let found = index.search(&format!("generated fixture tool number {i}"), 5);
                let elapsed = t.elapsed();
                assert_eq!(found.len(), 5);
                elapsed
            })
            .collect();
        times.sort();
        let first = index.names(&index.search("tool number 1234", 3));
        assert_eq!(first.first().map(String::as_str), Some("big_tool_1234"));
        println!(
            "index of 2000 tools: build {build:?}, search p50 {:?}, p99 {:?}",
            times[250], times[495]
        );
    }

    #[test]
    fn the_cache_rebuilds_only_for_a_new_table() {
        let cache = IndexCache::default();
        let a = table(vec![("x", vec![tool("x_a", "A", &[])])]);
        let first = cache.get(&a);
        assert!(Arc::ptr_eq(&first, &cache.get(&a)));
        let b = table(vec![("x", vec![tool("x_b", "B", &[])])]);
        let second = cache.get(&b);
        assert!(!Arc::ptr_eq(&first, &second));
        assert_eq!(second.select(&["x_b"]).0.len(), 1);
    }
}

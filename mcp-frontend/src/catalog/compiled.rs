//! Prompts, resources and resource templates of the committed generations (SPEC
//! §11), compiled once per route change into an immutable catalog, and the one rule that
//! routes a resource URI.
//!
//! **Resource routing rule.** A URI goes to the connector whose committed generation lists it
//! exactly among its resources; if none does, to the connector one of whose resource templates
//! matches it (RFC 6570 expressions, matched loosely: `{x}` is one or more characters other
//! than `/?#`, `{+x}`/`{#x}` anything, `{?x}`/`{&x}` an optional query, `{/x}` an optional path).
//! A URI that two connectors claim at the same step (both list it, or neither lists it and
//! templates of both match) is served by neither: the error names them, and `tutti status`
//! shows the clash of listed URIs and identical templates.
//!
//! Generic over the connector type (`routes::Connector`, through [`Owner`]) so that this
//! module sits below `routes` without importing it.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use serde_json::{Map, Value, json};
use tutti_proto::kernel::{ConnectorRoute, OfferedResource, RoutedPrompt};

/// How many vanished prompt names / URIs are remembered for the "not available now" answer.
const REMEMBERED: usize = 4096;
/// Longest URI a template is matched against (the matcher backtracks).
const MAX_MATCHED_URI: usize = 4096;

/// What the catalog needs to know of a committed generation.
pub(crate) trait Owner {
    fn key(&self) -> &str;
    fn generation(&self) -> u64;
}

/// One prompt, resource or template of one generation: the immutable binding a request
/// resolves to.
pub(crate) struct Entry<C> {
    /// The local prompt name, the URI, or the URI template.
    pub(crate) name: String,
    /// The upstream's prompt name, URI or template.
    pub(crate) upstream: String,
    pub(crate) connector: Arc<C>,
    /// As the list shows it.
    pub(crate) listed: Value,
    template: Vec<Pattern>,
}

/// One generation's part of the catalog.
pub(crate) struct Part<C> {
    prompts: Vec<Arc<Entry<C>>>,
    resources: Vec<Arc<Entry<C>>>,
    templates: Vec<Arc<Entry<C>>>,
    completions: bool,
}

/// Where a vanished name or URI was served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Gone {
    pub(crate) key: String,
    pub(crate) generation: u64,
}

/// What a prompt name or a URI resolves to.
pub(crate) enum Resolved<C> {
    Found(Arc<Entry<C>>),
    /// Claimed by more than one connector (keys, sorted): served by none.
    Clash(Vec<String>),
    Gone(Gone),
    Unknown,
}

/// Everything routable beyond tools, immutable.
pub(crate) struct Catalog<C> {
    prompts: Vec<Arc<Entry<C>>>,
    resources: Vec<Arc<Entry<C>>>,
    templates: Vec<Arc<Entry<C>>>,
    completions: bool,
    gone: Arc<HashMap<String, Gone>>,
}

impl<C: Owner> Part<C> {
    /// Compiles what `route` offers beyond tools for `connector`.
    pub(crate) fn compile(route: &ConnectorRoute, connector: &Arc<C>) -> Self {
        let key = route.key.as_str();
        let prompts = route
            .prompts
            .iter()
            .filter_map(|p| prompt_entry(key, connector, p))
            .collect();
        let entries = |items: &[OfferedResource], template: bool| {
            items
                .iter()
                .filter_map(|r| resource_entry(key, connector, r, template))
                .collect()
        };
        Self {
            prompts,
            resources: entries(&route.resources, false),
            templates: entries(&route.resource_templates, true),
            completions: route.completions,
        }
    }
}

fn definition(key: &str, text: &str) -> Option<Map<String, Value>> {
    match serde_json::from_str(text) {
        Ok(Value::Object(map)) => Some(map),
        _ => {
            tracing::warn!(connector = %key, "skipping a prompt or resource that is not a JSON object");
            None
        }
    }
}

/// `_meta` with the upstream's own keys (not ours) plus `extra`.
fn with_meta(mut item: Map<String, Value>, extra: &[(&str, &str)]) -> Value {
    let mut meta = match item.remove("_meta") {
        Some(Value::Object(upstream)) => upstream,
        _ => Map::new(),
    };
    meta.retain(|k, _| !k.starts_with("tutti/"));
    for (k, v) in extra {
        meta.insert((*k).to_owned(), json!(v));
    }
    item.insert("_meta".into(), Value::Object(meta));
    Value::Object(item)
}

fn prompt_entry<C>(key: &str, connector: &Arc<C>, p: &RoutedPrompt) -> Option<Arc<Entry<C>>> {
    let mut item = definition(key, &p.definition_json)?;
    item.insert("name".into(), json!(p.name));
    let listed = with_meta(
        item,
        &[
            ("tutti/connector", key),
            ("tutti/upstreamName", &p.upstream_name),
        ],
    );
    Some(Arc::new(Entry {
        name: p.name.clone(),
        upstream: p.upstream_name.clone(),
        connector: connector.clone(),
        listed,
        template: Vec::new(),
    }))
}

fn resource_entry<C>(
    key: &str,
    connector: &Arc<C>,
    r: &OfferedResource,
    template: bool,
) -> Option<Arc<Entry<C>>> {
    let item = definition(key, &r.definition_json)?;
    Some(Arc::new(Entry {
        name: r.uri.clone(),
        upstream: r.uri.clone(),
        connector: connector.clone(),
        listed: with_meta(item, &[("tutti/connector", key)]),
        template: if template { parse(&r.uri) } else { Vec::new() },
    }))
}

impl<C: Owner> Catalog<C> {
    pub(crate) fn empty() -> Self {
        Self {
            prompts: Vec::new(),
            resources: Vec::new(),
            templates: Vec::new(),
            completions: false,
            gone: Arc::new(HashMap::new()),
        }
    }

    /// The catalog of `parts` (one per routed generation); names and URIs of `previous` that
    /// vanished are remembered as gone.
    pub(crate) fn build<'a>(parts: impl Iterator<Item = &'a Part<C>>, previous: &Self) -> Self
    where
        C: 'a,
    {
        let (mut prompts, mut resources, mut templates) = (Vec::new(), Vec::new(), Vec::new());
        let mut completions = false;
        for part in parts {
            prompts.extend(part.prompts.iter().cloned());
            resources.extend(part.resources.iter().cloned());
            templates.extend(part.templates.iter().cloned());
            completions |= part.completions;
        }
        prompts.sort_by(|a, b| a.name.cmp(&b.name));
        prompts.dedup_by(|later, earlier| later.name == earlier.name);
        let by_name_and_key = |a: &Arc<Entry<C>>, b: &Arc<Entry<C>>| {
            (a.name.as_str(), a.connector.key()).cmp(&(b.name.as_str(), b.connector.key()))
        };
        resources.sort_by(by_name_and_key);
        templates.sort_by(by_name_and_key);
        let mut gone: HashMap<String, Gone> = (*previous.gone).clone();
        let present: BTreeSet<&str> = prompts
            .iter()
            .chain(&resources)
            .map(|e| e.name.as_str())
            .collect();
        for old in previous.prompts.iter().chain(&previous.resources) {
            if !present.contains(old.name.as_str()) {
                let from = Gone {
                    key: old.connector.key().to_owned(),
                    generation: old.connector.generation(),
                };
                gone.insert(old.name.clone(), from);
            }
        }
        gone.retain(|name, _| !present.contains(name.as_str()));
        if gone.len() > REMEMBERED {
            gone.clear(); // rare: forgetting turns "not available now" into "unknown"
        }
        Self {
            prompts,
            resources,
            templates,
            completions,
            gone: Arc::new(gone),
        }
    }

    /// Whether a routed connector offers completion.
    pub(crate) fn completions(&self) -> bool {
        self.completions
    }

    pub(crate) fn prompts(&self) -> impl Iterator<Item = &Value> {
        self.prompts.iter().map(|e| &e.listed)
    }

    pub(crate) fn resources(&self) -> impl Iterator<Item = &Value> {
        self.resources.iter().map(|e| &e.listed)
    }

    pub(crate) fn templates(&self) -> impl Iterator<Item = &Value> {
        self.templates.iter().map(|e| &e.listed)
    }

    /// Every connector of the catalog (by key).
    pub(crate) fn connectors(&self) -> impl Iterator<Item = &Arc<C>> {
        self.prompts
            .iter()
            .chain(&self.resources)
            .chain(&self.templates)
            .map(|e| &e.connector)
    }

    /// A prompt by its local name.
    pub(crate) fn prompt(&self, name: &str) -> Resolved<C> {
        match self.prompts.binary_search_by(|e| e.name.as_str().cmp(name)) {
            Ok(i) => Resolved::Found(self.prompts[i].clone()),
            Err(_) => self.gone_or_unknown(name),
        }
    }

    fn gone_or_unknown(&self, name: &str) -> Resolved<C> {
        match self.gone.get(name) {
            Some(gone) => Resolved::Gone(gone.clone()),
            None => Resolved::Unknown,
        }
    }

    /// The connector that serves `uri`, by the routing rule of this module.
    pub(crate) fn resource(&self, uri: &str) -> Resolved<C> {
        let exact: Vec<&Arc<Entry<C>>> = self.resources.iter().filter(|e| e.name == uri).collect();
        if let Some(found) = one_owner(&exact) {
            return found;
        }
        let matching: Vec<&Arc<Entry<C>>> = if uri.len() > MAX_MATCHED_URI {
            Vec::new()
        } else {
            self.templates
                .iter()
                .filter(|e| matches(&e.template, uri))
                .collect()
        };
        match one_owner(&matching) {
            Some(found) => found,
            None => self.gone_or_unknown(uri),
        }
    }

    /// The template (or listed resource) named exactly `uri` by a completion reference.
    pub(crate) fn completion_target(&self, uri: &str) -> Resolved<C> {
        let named: Vec<&Arc<Entry<C>>> = self
            .templates
            .iter()
            .chain(&self.resources)
            .filter(|e| e.name == uri)
            .collect();
        one_owner(&named).unwrap_or_else(|| self.gone_or_unknown(uri))
    }

    /// Whether the prompt and resource lists differ from `other`'s (what a client can list).
    pub(crate) fn differs(&self, other: &Self) -> (bool, bool) {
        fn same<C>(a: &[Arc<Entry<C>>], b: &[Arc<Entry<C>>]) -> bool {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.listed == y.listed)
        }
        let prompts = !same(&self.prompts, &other.prompts);
        let resources =
            !same(&self.resources, &other.resources) || !same(&self.templates, &other.templates);
        (prompts, resources)
    }
}

/// `None` when no entry claims it; the entry when the claimants are one connector; a clash
/// otherwise.
fn one_owner<C: Owner>(claims: &[&Arc<Entry<C>>]) -> Option<Resolved<C>> {
    let first = claims.first()?;
    let keys: BTreeSet<&str> = claims.iter().map(|e| e.connector.key()).collect();
    if keys.len() == 1 {
        return Some(Resolved::Found(Arc::clone(first)));
    }
    Some(Resolved::Clash(
        keys.into_iter().map(str::to_owned).collect(),
    ))
}

// === URI templates ===

/// One piece of a parsed URI template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    Literal(String),
    /// One or more characters other than `/?#`.
    Segment,
    /// Anything, possibly nothing (`+`, `#`).
    Any,
    /// Nothing, or a query (`?` / `&` and what follows, up to `#`).
    Query,
}

/// Parses `template`; an unclosed `{` makes the rest a literal.
fn parse(template: &str) -> Vec<Pattern> {
    let mut parts = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            break;
        };
        if open > 0 {
            parts.push(Pattern::Literal(rest[..open].to_owned()));
        }
        let expression = &rest[open + 1..open + close];
        parts.push(match expression.chars().next() {
            Some('+' | '#' | '/') => Pattern::Any,
            Some('?' | '&') => Pattern::Query,
            _ => Pattern::Segment,
        });
        rest = &rest[open + close + 1..];
    }
    if !rest.is_empty() {
        parts.push(Pattern::Literal(rest.to_owned()));
    }
    parts
}

fn matches(parts: &[Pattern], uri: &str) -> bool {
    !parts.is_empty() && match_from(parts, uri)
}

fn match_from(parts: &[Pattern], s: &str) -> bool {
    let Some((first, rest)) = parts.split_first() else {
        return s.is_empty();
    };
    match first {
        Pattern::Literal(lit) => s
            .strip_prefix(lit.as_str())
            .is_some_and(|s| match_from(rest, s)),
        Pattern::Segment => {
            let limit = s.find(['/', '?', '#']).unwrap_or(s.len());
            (1..=limit)
                .rev()
                .filter(|end| s.is_char_boundary(*end))
                .any(|end| match_from(rest, &s[end..]))
        }
        Pattern::Any => (0..=s.len())
            .rev()
            .filter(|end| s.is_char_boundary(*end))
            .any(|end| match_from(rest, &s[end..])),
        Pattern::Query => {
            if match_from(rest, s) {
                return true;
            }
            if !s.starts_with(['?', '&']) {
                return false;
            }
            let limit = s.find('#').unwrap_or(s.len());
            (1..=limit)
                .rev()
                .filter(|end| s.is_char_boundary(*end))
                .any(|end| match_from(rest, &s[end..]))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_match_like_rfc_6570_level_one_to_three() {
        let t = parse("demo://resource/dynamic/text/{id}");
        assert!(matches(&t, "demo://resource/dynamic/text/12"));
        assert!(!matches(&t, "demo://resource/dynamic/text/"));
        assert!(!matches(&t, "demo://resource/dynamic/text/1/2"));
        let q = parse("search://items{?q,limit}");
        assert!(matches(&q, "search://items"));
        assert!(matches(&q, "search://items?q=a&limit=2"));
        assert!(!matches(&q, "search://itemsX"));
        let any = parse("file:///{+path}");
        assert!(matches(&any, "file:///a/b/c.txt"));
        assert!(!matches(&parse(""), ""));
        assert!(matches(&parse("plain://x"), "plain://x"));
    }

    struct C(&'static str);
    impl Owner for C {
        fn key(&self) -> &str {
            self.0
        }
        fn generation(&self) -> u64 {
            1
        }
    }

    fn route(key: &str, resources: &[&str], templates: &[&str]) -> ConnectorRoute {
        let items = |uris: &[&str]| {
            uris.iter()
                .map(|u| OfferedResource {
                    uri: (*u).to_owned(),
                    definition_json: json!({"uri": u, "name": "n"}).to_string(),
                })
                .collect()
        };
        ConnectorRoute {
            key: key.to_owned(),
            resources: items(resources),
            resource_templates: items(templates),
            ..ConnectorRoute::default()
        }
    }

    #[test]
    fn exact_uris_win_over_templates_and_clashes_serve_nobody() {
        let a = Part::compile(&route("a", &["x://1", "x://both"], &[]), &Arc::new(C("a")));
        let b = Part::compile(&route("b", &["x://both"], &["x://{id}"]), &Arc::new(C("b")));
        let catalog = Catalog::build([&a, &b].into_iter(), &Catalog::empty());
        let owner = |uri| match catalog.resource(uri) {
            Resolved::Found(e) => e.connector.0.to_owned(),
            Resolved::Clash(keys) => format!("clash {}", keys.join(",")),
            Resolved::Gone(_) => "gone".to_owned(),
            Resolved::Unknown => "unknown".to_owned(),
        };
        assert_eq!(owner("x://1"), "a");
        assert_eq!(owner("x://2"), "b");
        assert_eq!(owner("x://both"), "clash a,b");
        assert_eq!(owner("y://1"), "unknown");
        let later = Catalog::build([&b].into_iter(), &catalog);
        assert!(matches!(later.resource("x://1"), Resolved::Found(_)));
        let none = Catalog::build(std::iter::empty(), &later);
        assert!(matches!(none.resource("x://1"), Resolved::Gone(_)));
    }
}

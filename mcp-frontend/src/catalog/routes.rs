//! The route table: what the kernel committed, compiled once per generation into an
//! immutable snapshot that requests read without locks or recomputation.
//!
//! [`RouteState`] is owned by the watcher task and applies the kernel's events; after each
//! route change it produces a new [`RouteTable`] (`Arc`, swapped atomically by the caller).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonschema::Validator;
use serde::ser::{Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tokio::sync::watch;
use tutti_proto::kernel::{
    ConnectorRemoved, ConnectorRoute, RouteEvent, RoutedTool, SessionsRevoked, route_event,
};

use crate::call::validate::{self, ParamHeader};
use crate::catalog::compiled::{self, Catalog};
use crate::era::tables::{self, Revision};

/// Default call timeout when the route carries none (SPEC §3 `timeouts.callMs`).
const DEFAULT_CALL_TIMEOUT_MS: u32 = 60_000;
/// How many vanished tool names are remembered for the "not available now" answer.
const REMEMBERED_NAMES: usize = 4096;

/// Fires when a generation is fenced (with why); in-flight calls of that generation end.
pub(crate) type Fence = Arc<watch::Sender<Fenced>>;

/// Whether, and why, a generation was fenced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Fenced {
    #[default]
    No,
    /// The connector failed (its worker exited, its upstream became unavailable), or the
    /// kernel did not say (a generation missing from a snapshot): the calls it ends count
    /// toward the circuit breaker.
    Failed,
    /// The kernel's own decision (uninstall, disconnect, shutdown, refused credentials):
    /// the calls it ends say nothing of the connector's health.
    Deliberate,
}

impl Fenced {
    pub(crate) fn is_fenced(self) -> bool {
        self != Self::No
    }
}

/// One committed generation of one connector.
#[derive(Debug)]
pub(crate) struct Connector {
    pub(crate) key: String,
    pub(crate) generation: u64,
    pub(crate) endpoint: String,
    /// The worker's frame endpoint for plain calls, or empty.
    pub(crate) data_endpoint: String,
    pub(crate) timeout_ms: u32,
    pub(crate) fence: Fence,
    /// The circuit breaker's settings (SPEC §12).
    pub(crate) circuit: crate::call::circuit::Settings,
}

impl compiled::Owner for Connector {
    fn key(&self) -> &str {
        &self.key
    }
    fn generation(&self) -> u64 {
        self.generation
    }
}

/// One routable tool: the immutable binding a call resolves to.
pub(crate) struct Tool {
    pub(crate) name: String,
    pub(crate) upstream_name: String,
    pub(crate) connector: Arc<Connector>,
    /// The tool exactly as `tools/list` shows it to each [`Revision`] (index order),
    /// serialized once at commit time: a page is written by copying these bytes, never by
    /// cloning or re-serializing a `Value`. Revisions that see the same fields share one.
    pub(crate) projected: [Arc<RawValue>; 3],
    /// The input schema's validator, compiled at the tool's first call: compiled validators
    /// took ~2 KiB per tool (40 MiB at 20,000 tools), most of which are never called. Whether
    /// the schema compiles is checked when the tool is compiled, so this never fails for a
    /// listed tool.
    validator: OnceLock<Arc<Validator>>,
    pub(crate) param_headers: Vec<ParamHeader>,
    /// `low` | `medium` | `high`, computed by the kernel at commit (for the audit record).
    pub(crate) risk: String,
    /// The names as OpenTelemetry attributes (used only with export on).
    pub(crate) otel: crate::observe::otel::ToolNames,
}

impl Tool {
    /// The input schema's validator (compiled now if this is the tool's first call).
    pub(crate) fn validator(&self) -> Result<&Arc<Validator>, String> {
        if let Some(v) = self.validator.get() {
            return Ok(v);
        }
        let compiled = Arc::new(validate::compile(&self.input_schema())?);
        Ok(self.validator.get_or_init(|| compiled))
    }

    /// The input schema as listed (every revision shows it).
    fn input_schema(&self) -> Value {
        #[derive(serde::Deserialize)]
        struct Shown {
            #[serde(rename = "inputSchema")]
            input_schema: Option<Value>,
        }
        serde_json::from_str::<Shown>(self.projected[0].get())
            .ok()
            .and_then(|s| s.input_schema)
            .unwrap_or_else(|| json!({"type": "object"}))
    }
}

/// Why a remembered name is not routable any more.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Gone {
    pub(crate) key: Arc<str>,
    pub(crate) generation: u64,
}

/// What a tool name resolves to.
pub(crate) enum Lookup {
    Found(Arc<Tool>),
    Gone(Gone),
    Unknown,
}

/// An immutable snapshot of everything routable.
pub(crate) struct RouteTable {
    /// Revision at which the visible tool list last changed (cursors are bound to it).
    pub(crate) list_revision: u64,
    tools: Vec<Arc<Tool>>,
    gone: Arc<HashMap<u64, Gone>>,
    /// Prompts, resources and templates of the same generations.
    pub(crate) catalog: Arc<Catalog<Connector>>,
}

/// A `tools/list` cursor that cannot be used.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum CursorError {
    Malformed,
    Stale,
}

impl RouteTable {
    pub(crate) fn empty() -> Self {
        Self {
            list_revision: 0,
            tools: Vec::new(),
            gone: Arc::new(HashMap::new()),
            catalog: Arc::new(Catalog::empty()),
        }
    }

    pub(crate) fn lookup(&self, name: &str) -> Lookup {
        match self.tools.binary_search_by(|t| t.name.as_str().cmp(name)) {
            Ok(i) => Lookup::Found(self.tools[i].clone()),
            Err(_) => match self.gone.get(&name_hash(name)) {
                Some(gone) => Lookup::Gone(gone.clone()),
                None => Lookup::Unknown,
            },
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.tools.len()
    }

    /// Every routable tool, sorted by name.
    pub(crate) fn tools(&self) -> &[Arc<Tool>] {
        &self.tools
    }

    /// One page of `tools/list` (serializes as the `tools` array) and the cursor of the next
    /// page, if any.
    pub(crate) fn page(
        self: &Arc<Self>,
        cursor: Option<&str>,
        page_size: usize,
        revision: Revision,
    ) -> Result<(Page, Option<String>), CursorError> {
        let start = match cursor {
            None => 0,
            Some(cursor) => {
                let (revision, offset) = decode_cursor(cursor).ok_or(CursorError::Malformed)?;
                if revision != self.list_revision {
                    return Err(CursorError::Stale);
                }
                if offset > self.tools.len() {
                    return Err(CursorError::Malformed);
                }
                offset
            }
        };
        let page_size = page_size.max(1);
        let end = start.saturating_add(page_size).min(self.tools.len());
        let page = Page {
            table: self.clone(),
            range: start..end,
            revision,
        };
        let next = (end < self.tools.len()).then(|| encode_cursor(self.list_revision, end));
        Ok((page, next))
    }

    /// Every projection of every tool, in order (to tell whether the list changed).
    fn projected(&self) -> impl Iterator<Item = &str> {
        self.tools
            .iter()
            .flat_map(|t| t.projected.iter().map(|p| p.get()))
    }

    /// Endpoints of every routed connector.
    pub(crate) fn endpoints(&self) -> HashSet<String> {
        self.tools
            .iter()
            .map(|t| &t.connector)
            .chain(self.catalog.connectors())
            .map(|c| c.endpoint.clone())
            .collect()
    }
}

/// One `tools/list` page: a slice of an immutable table that serializes as a JSON array of
/// the pre-serialized tools (a copy of their bytes).
pub(crate) struct Page {
    table: Arc<RouteTable>,
    range: Range<usize>,
    revision: Revision,
}

impl Page {
    fn tools(&self) -> &[Arc<Tool>] {
        self.table.tools.get(self.range.clone()).unwrap_or_default()
    }

    /// Bytes of the serialized array (to size the response buffer).
    pub(crate) fn json_len(&self) -> usize {
        let tools = self.tools();
        let i = self.revision.index();
        let bytes: usize = tools.iter().map(|t| t.projected[i].get().len()).sum();
        bytes + tools.len().saturating_sub(1) + 2
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.tools().len()
    }
}

impl Serialize for Page {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let i = self.revision.index();
        serializer.collect_seq(self.tools().iter().map(|t| &*t.projected[i]))
    }
}

pub(crate) fn encode_cursor(revision: u64, offset: usize) -> String {
    URL_SAFE_NO_PAD.encode(format!("{revision}:{offset}"))
}

fn decode_cursor(cursor: &str) -> Option<(u64, usize)> {
    let bytes = URL_SAFE_NO_PAD.decode(cursor.trim()).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (revision, offset) = text.split_once(':')?;
    Some((revision.parse().ok()?, offset.parse().ok()?))
}

/// What applying one event did.
#[derive(Debug, PartialEq)]
pub(crate) enum Effect {
    /// The route table changed; `tools_changed` when the visible tool list differs.
    Routes {
        tools_changed: bool,
    },
    Revoked(SessionsRevoked),
    Shutdown,
    /// An event with nothing in it (unknown kind or an old revision).
    Nothing,
}

struct Compiled {
    connector: Arc<Connector>,
    tools: Vec<Arc<Tool>>,
    part: compiled::Part<Connector>,
}

/// The mutable side, owned by the watcher task.
pub(crate) struct RouteState {
    revision: u64,
    list_revision: u64,
    connectors: BTreeMap<String, Compiled>,
    /// Every generation seen and not fenced yet (including ones replaced by a newer
    /// generation that may still be draining calls).
    unfenced: HashMap<(String, u64), Fence>,
    /// Vanished names by [`name_hash`]: a name is not kept, and every name of one connector
    /// shares its key, so remembering thousands of names makes no small allocations that
    /// would pin the pages of the tools just freed (measured: ~10 MiB held after 198 of 200
    /// connectors were uninstalled, with under 1 MiB live).
    gone: HashMap<u64, Gone>,
    gone_order: VecDeque<u64>,
    table: Arc<RouteTable>,
}

impl RouteState {
    /// Fires the fences of the removed connector's generations up to the removed one, with
    /// why (a deliberate fence does not count toward the circuit breaker).
    fn fence_removed(&mut self, removed: &ConnectorRemoved) {
        let why = if removed.deliberate {
            Fenced::Deliberate
        } else {
            Fenced::Failed
        };
        self.unfenced.retain(|(key, generation), fence| {
            let ends = *key == removed.key && *generation <= removed.generation;
            if ends {
                fence.send_replace(why);
            }
            !ends
        });
    }

    pub(crate) fn new() -> Self {
        Self {
            revision: 0,
            list_revision: 0,
            connectors: BTreeMap::new(),
            unfenced: HashMap::new(),
            gone: HashMap::new(),
            gone_order: VecDeque::new(),
            table: Arc::new(RouteTable::empty()),
        }
    }

    pub(crate) fn table(&self) -> Arc<RouteTable> {
        self.table.clone()
    }

    /// Applies one kernel event. A snapshot is always applied (it may follow a reconnect
    /// to a restarted kernel whose revisions start over); other events with a revision not
    /// above the last one are ignored.
    pub(crate) fn apply(&mut self, event: RouteEvent) -> Effect {
        let Some(kind) = event.event else {
            return Effect::Nothing;
        };
        let is_snapshot = matches!(kind, route_event::Event::Snapshot(_));
        if !is_snapshot && event.revision <= self.revision && self.revision != 0 {
            tracing::warn!(
                revision = event.revision,
                last = self.revision,
                "ignoring an out-of-order route event"
            );
            return Effect::Nothing;
        }
        self.revision = event.revision;
        match kind {
            route_event::Event::Snapshot(snapshot) => {
                let keep: HashSet<(String, u64)> = snapshot
                    .connectors
                    .iter()
                    .filter(|c| c.has_mcp)
                    .map(|c| (c.key.clone(), c.generation))
                    .collect();
                // Generations missing from a snapshot are gone: end their calls.
                let stale: Vec<(String, u64)> = self
                    .unfenced
                    .keys()
                    .filter(|k| !keep.contains(*k))
                    .cloned()
                    .collect();
                for k in stale {
                    if let Some(fence) = self.unfenced.remove(&k) {
                        fence.send_replace(Fenced::Failed);
                    }
                }
                let mut next = BTreeMap::new();
                for route in &snapshot.connectors {
                    if let Some(compiled) = self.compile(route) {
                        next.insert(route.key.clone(), compiled);
                    }
                }
                self.replace_connectors(next)
            }
            route_event::Event::Upsert(route) => {
                let mut next = std::mem::take(&mut self.connectors);
                next.remove(&route.key);
                if let Some(compiled) = self.compile(&route) {
                    next.insert(route.key.clone(), compiled);
                }
                self.replace_connectors(next)
            }
            route_event::Event::Removed(removed) => {
                self.fence_removed(&removed);
                let mut next = std::mem::take(&mut self.connectors);
                if next
                    .get(&removed.key)
                    .is_some_and(|c| c.connector.generation <= removed.generation)
                {
                    next.remove(&removed.key);
                }
                self.replace_connectors(next)
            }
            route_event::Event::SessionsRevoked(revoked) => Effect::Revoked(revoked),
            route_event::Event::Shutdown(_) => Effect::Shutdown,
        }
    }

    /// Compiles one connector's committed tool set (schemas, projections, headers).
    fn compile(&mut self, route: &ConnectorRoute) -> Option<Compiled> {
        if !route.has_mcp || route.worker_endpoint.is_empty() {
            return None;
        }
        let id = (route.key.clone(), route.generation);
        let fence = self
            .unfenced
            .entry(id)
            .or_insert_with(|| Arc::new(watch::channel(Fenced::No).0))
            .clone();
        let connector = Arc::new(Connector {
            key: route.key.clone(),
            generation: route.generation,
            endpoint: route.worker_endpoint.clone(),
            data_endpoint: route.worker_data_endpoint.clone(),
            timeout_ms: if route.call_timeout_ms == 0 {
                DEFAULT_CALL_TIMEOUT_MS
            } else {
                route.call_timeout_ms
            },
            fence,
            circuit: crate::call::circuit::Settings::from_route(
                route.circuit_failures,
                route.circuit_window_ms,
                route.circuit_open_ms,
            ),
        });
        let display_name = if route.name.is_empty() {
            route.key.as_str()
        } else {
            route.name.as_str()
        };
        let tools = route
            .tools
            .iter()
            .filter_map(|routed| compile_tool(route, display_name, &connector, routed))
            .collect();
        let part = compiled::Part::compile(route, &connector);
        Some(Compiled {
            connector,
            tools,
            part,
        })
    }

    fn replace_connectors(&mut self, next: BTreeMap<String, Compiled>) -> Effect {
        self.connectors = next;
        let mut tools: Vec<Arc<Tool>> = self
            .connectors
            .values()
            .flat_map(|c| c.tools.iter().cloned())
            .collect();
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        tools.dedup_by(|later, earlier| {
            let duplicate = later.name == earlier.name;
            if duplicate {
                tracing::warn!(tool = %later.name, "two connectors offer the same local name");
            }
            duplicate
        });

        // Names that vanished are remembered; names that came back are forgotten.
        let now: HashSet<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        let mut keys: HashMap<&str, Arc<str>> = HashMap::new();
        let table = Arc::clone(&self.table);
        for old in table
            .tools
            .iter()
            .filter(|old| !now.contains(old.name.as_str()))
        {
            let key = keys
                .entry(old.connector.key.as_str())
                .or_insert_with(|| Arc::from(old.connector.key.as_str()));
            let gone = Gone {
                key: Arc::clone(key),
                generation: old.connector.generation,
            };
            self.remember(name_hash(&old.name), gone);
        }
        if !self.gone.is_empty() {
            let back: HashSet<u64> = now
                .iter()
                .map(|n| name_hash(n))
                .filter(|h| self.gone.remove(h).is_some())
                .collect();
            if !back.is_empty() {
                self.gone_order.retain(|h| !back.contains(h));
            }
        }

        let tools_changed = !self.table.projected().eq(tools
            .iter()
            .flat_map(|t| t.projected.iter().map(|p| p.get())));
        if tools_changed {
            self.list_revision = self.revision;
        }
        // Drop generations nobody routes to or waits on any more.
        let live: HashSet<(String, u64)> = self
            .connectors
            .values()
            .map(|c| (c.connector.key.clone(), c.connector.generation))
            .collect();
        self.unfenced
            .retain(|k, fence| live.contains(k) || fence.receiver_count() > 0);

        let catalog = Catalog::build(
            self.connectors.values().map(|c| &c.part),
            &self.table.catalog,
        );
        self.table = Arc::new(RouteTable {
            list_revision: self.list_revision,
            tools,
            gone: Arc::new(self.gone.clone()),
            catalog: Arc::new(catalog),
        });
        Effect::Routes { tools_changed }
    }

    fn remember(&mut self, name: u64, gone: Gone) {
        if self.gone.insert(name, gone).is_none() {
            self.gone_order.push_back(name);
        }
        while self.gone_order.len() > REMEMBERED_NAMES {
            if let Some(oldest) = self.gone_order.pop_front() {
                self.gone.remove(&oldest);
            }
        }
    }
}

/// The key a vanished name is remembered by (SipHash with fixed keys: the same in every
/// table of this process; two names sharing one would only change which "not available"
/// text an unknown name gets).
fn name_hash(name: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    name.hash(&mut h);
    h.finish()
}

/// Compiles one tool of a connector's committed set: its definition, input schema validator,
/// the projection for each revision, and its parameter headers. `None` (logged): a tool that
/// is skipped.
fn compile_tool(
    route: &ConnectorRoute,
    display_name: &str,
    connector: &Arc<Connector>,
    routed: &RoutedTool,
) -> Option<Arc<Tool>> {
    let definition: Value = match serde_json::from_str(&routed.definition_json) {
        Ok(v @ Value::Object(_)) => v,
        _ => {
            tracing::warn!(
                connector = %route.key,
                tool = %routed.name,
                "skipping a tool whose definition is not a JSON object"
            );
            return None;
        }
    };
    let input_schema = definition
        .get("inputSchema")
        .cloned()
        .unwrap_or_else(|| json!({"type": "object"}));
    // Compiled to check it, then dropped: calls compile it again when needed (`Tool::validator`).
    if let Err(problem) = validate::compile(&input_schema) {
        tracing::warn!(
            connector = %route.key,
            tool = %routed.name,
            %problem,
            "skipping a tool whose input schema does not compile"
        );
        return None;
    }
    let projected = project(
        &routed.name,
        &routed.upstream_name,
        &routed.risk,
        &route.key,
        display_name,
        &definition,
        &input_schema,
    );
    let projected = match for_each_revision(&projected) {
        Ok(raw) => raw,
        Err(e) => {
            tracing::warn!(
                connector = %route.key,
                tool = %routed.name,
                error = %e,
                "skipping a tool that cannot be serialized"
            );
            return None;
        }
    };
    Some(Arc::new(Tool {
        name: routed.name.clone(),
        upstream_name: routed.upstream_name.clone(),
        connector: connector.clone(),
        projected,
        validator: OnceLock::new(),
        param_headers: validate::param_headers(&input_schema),
        risk: routed.risk.clone(),
        otel: crate::observe::otel::ToolNames::new(&connector.key, &routed.name),
    }))
}

/// The tool as `tools/list` shows it (SPEC §5), before the era table picks the fields each
/// revision gets ([`for_each_revision`]): every field the upstream gave, the local name, the
/// description (or `"<connector name>: <upstream name>"`), the input schema, and `_meta`
/// holding the upstream's own keys plus ours. The `tutti/` keys are ours alone: an upstream's
/// are replaced, never merged.
fn project(
    local_name: &str,
    upstream_name: &str,
    risk: &str,
    key: &str,
    connector_name: &str,
    definition: &Value,
    input_schema: &Value,
) -> Map<String, Value> {
    let mut tool = definition.as_object().cloned().unwrap_or_default();
    tool.insert("name".into(), Value::String(local_name.to_owned()));
    let description = definition
        .get("description")
        .and_then(Value::as_str)
        .filter(|d| !d.trim().is_empty())
        .map(str::to_owned)
        .unwrap_or_else(|| format!("{connector_name}: {upstream_name}"));
    tool.insert("description".into(), Value::String(description));
    tool.insert("inputSchema".into(), input_schema.clone());
    let risk = match risk {
        "low" | "medium" | "high" => risk,
        _ => "medium",
    };
    let mut meta = match tool.remove("_meta") {
        Some(Value::Object(upstream)) => upstream,
        _ => Map::new(),
    };
    meta.retain(|k, _| !k.starts_with(TUTTI_META_PREFIX));
    meta.insert("tutti/connector".into(), json!(key));
    meta.insert("tutti/upstreamName".into(), json!(upstream_name));
    meta.insert("tutti/risk".into(), json!(risk));
    tool.insert("_meta".into(), Value::Object(meta));
    tool
}

/// The namespace of the runtime's own `_meta` keys.
const TUTTI_META_PREFIX: &str = "tutti/";

/// A projected tool serialized once per [`Revision`] (in [`Revision::ALL`] order), each with
/// only the fields that revision defines (the `era` table); revisions that see the same bytes
/// share them.
fn for_each_revision(tool: &Map<String, Value>) -> Result<[Arc<RawValue>; 3], serde_json::Error> {
    let shown = |revision: Revision| -> Result<Arc<RawValue>, serde_json::Error> {
        let fields: Map<String, Value> = tool
            .iter()
            .filter(|(field, _)| tables::tool_defines(revision, field))
            .map(|(field, value)| (field.clone(), value.clone()))
            .collect();
        Ok(Arc::from(serde_json::value::to_raw_value(&fields)?))
    };
    let share = |raw: Arc<RawValue>, earlier: &[&Arc<RawValue>]| {
        earlier
            .iter()
            .find(|e| e.get() == raw.get())
            .map_or(raw, |e| Arc::clone(e))
    };
    let [first, second, third] = Revision::ALL;
    let first = shown(first)?;
    let second = share(shown(second)?, &[&first]);
    let third = share(shown(third)?, &[&first, &second]);
    Ok([first, second, third])
}

#[cfg(test)]
mod tests;

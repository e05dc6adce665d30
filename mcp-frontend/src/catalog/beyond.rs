//! MCP beyond tools on both surfaces (SPEC §11): `prompts/list`, `prompts/get`,
//! `resources/list`, `resources/templates/list`, `resources/read`, `completion/complete`,
//! `resources/subscribe` / `unsubscribe`.
//!
//! Every get, read and completion resolves at its start to an immutable binding (connector
//! key, generation, upstream name or URI) from the route table's catalog
//! (`catalog/compiled.rs`, which also holds the resource routing rule) and is forwarded to the worker of exactly that
//! generation, as `tools/call` is: a generation fenced before the request was sent, or a name
//! that vanished, is answered -32602 "not available now, list again"; fenced while in flight
//! -32603 `[MCP_UNAVAILABLE]`; past the call timeout `[MCP_TIMEOUT]`. Results pass through as
//! the upstream gave them (only `resultType` and the server's identity in `_meta` follow the
//! client's era).

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use serde_json::{Map, Value, json};
use tokio::sync::oneshot;
use tutti_proto::worker::{CallToolReply, CallToolRequest, ForwardRequest};

use crate::app::App;
use crate::backend::{Forward, Identity};
use crate::call::ending::{
    Flight, Reading, in_flight, malformed_result, read_reply, tutti, unavailable,
};
use crate::call::execute::RelayStream;
use crate::call::result::CallResult;
use crate::catalog::compiled::{Entry, Resolved};
use crate::catalog::routes::{Connector, RouteTable};
use crate::era::tables::{META_SERVER_INFO, server_info};
use crate::error::Error;
use crate::observe::audit::{Audited, Outcome, Relayed};
use crate::rpc::{INTERNAL_ERROR, INVALID_PARAMS, RpcError, routes_not_ready};
use crate::session::notify::Note;

/// A list beyond tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum List {
    Prompts,
    Resources,
    Templates,
}

impl List {
    /// The list a method asks for.
    pub(crate) fn of(method: &str) -> Option<Self> {
        match method {
            "prompts/list" => Some(List::Prompts),
            "resources/list" => Some(List::Resources),
            "resources/templates/list" => Some(List::Templates),
            _ => None,
        }
    }

    fn field(self) -> &'static str {
        match self {
            List::Prompts => "prompts",
            List::Resources => "resources",
            List::Templates => "resourceTemplates",
        }
    }
}

/// The capabilities beyond tools, added to `capabilities`: `prompts` and `resources` always,
/// `completions` only while a ready connector offers it (SPEC §11). The one place both
/// surfaces declare them.
pub(crate) async fn declare(app: &App, capabilities: &mut Map<String, Value>) {
    capabilities.entry("prompts").or_insert_with(|| json!({}));
    let extensions = capabilities
        .entry("extensions")
        .or_insert_with(|| json!({}));
    if let Some(extensions) = extensions.as_object_mut() {
        extensions.insert(crate::catalog::skills::EXTENSION.into(), json!({}));
    }
    capabilities.entry("resources").or_insert_with(|| json!({}));
    let completions = app
        .routes()
        .await
        .is_some_and(|table| table.catalog.completions());
    if completions {
        capabilities.insert("completions".into(), json!({}));
    }
}

/// The result fields of one list: every ready connector's items (prompts by local name,
/// resources and templates by URI), in one page.
pub(crate) async fn list(app: &App, list: List) -> Result<Map<String, Value>, RpcError> {
    let table = app.routes().await.ok_or_else(routes_not_ready)?;
    let catalog = &table.catalog;
    let items: Vec<Value> = match list {
        List::Prompts => catalog.prompts().cloned().collect(),
        List::Resources => {
            let mut items: Vec<Value> = catalog.resources().cloned().collect();
            items.extend(crate::catalog::skills::list_resources(&app.skills).await);
            items
        }
        List::Templates => catalog.templates().cloned().collect(),
    };
    let mut fields = Map::new();
    fields.insert(list.field().into(), Value::Array(items));
    Ok(fields)
}

/// A result in the client's era: on the modern surface `resultType` and this runtime's
/// identity in `_meta`; on the legacy one neither (an upstream's `serverInfo` is removed).
pub(crate) fn in_era(result: Value, modern: bool) -> Value {
    let Value::Object(mut result) = result else {
        return result;
    };
    if modern {
        result
            .entry("resultType")
            .or_insert_with(|| json!("complete"));
    } else {
        result.remove("resultType");
    }
    let meta = result
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(meta) = meta {
        meta.remove(META_SERVER_INFO);
        if modern {
            meta.insert(META_SERVER_INFO.into(), server_info());
        }
    }
    if result.get("_meta").is_some_and(|m| m == &json!({})) {
        result.remove("_meta");
    }
    Value::Object(result)
}

/// A modern `resources/read` result with the caching hints 2026-07-28 requires (SEP-2549):
/// the upstream's own when it gave them, else not cached (`ttlMs: 0`, `private`: what a
/// resource says can change with every commit and depends on the token's session).
pub(crate) fn with_cache_hints(result: Value) -> Value {
    let Value::Object(mut result) = result else {
        return result;
    };
    if !result.get("ttlMs").is_some_and(Value::is_u64) {
        result.insert("ttlMs".into(), json!(0));
    }
    if !matches!(
        result.get("cacheScope").and_then(Value::as_str),
        Some("public" | "private")
    ) {
        result.insert("cacheScope".into(), json!("private"));
    }
    Value::Object(result)
}

fn params_object(params: Option<Value>) -> Result<Map<String, Value>, RpcError> {
    match params {
        Some(Value::Object(map)) => Ok(map),
        None | Some(Value::Null) => Ok(Map::new()),
        Some(_) => Err(RpcError::new(
            INVALID_PARAMS,
            "Invalid params: params must be an object",
        )),
    }
}

fn string_param(params: &Map<String, Value>, field: &str) -> Result<String, RpcError> {
    params
        .get(field)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| {
            RpcError::new(
                INVALID_PARAMS,
                format!("Invalid params: {field} is required"),
            )
        })
}

/// The SPEC §5 "removed or fenced" answer for a prompt or a resource.
fn not_available(what: &str, name: &str, key: &str, generation: u64) -> RpcError {
    RpcError::new(
        INVALID_PARAMS,
        format!(
            "{what} {name} is not available now (its connector was removed, stopped, or is \
             restarting); list {what}s again"
        ),
    )
    .with_data(json!({"tutti": tutti("fenced", key, generation)}))
}

/// A URI that several connectors claim (SPEC §11): served by none.
fn clash(uri: &str, keys: &[String]) -> RpcError {
    RpcError::new(
        INVALID_PARAMS,
        format!(
            "resource {uri} is claimed by more than one connector ({}), so none serves it; \
             `tutti status` shows the clash (uninstall or disconnect one of them)",
            keys.join(", ")
        ),
    )
    .with_data(json!({"uri": uri, "tutti": {"reason": "resource_clash", "connectors": keys}}))
}

/// `prompts/get`: the prompt's binding, its upstream name put in, forwarded.
pub(crate) async fn get_prompt(
    app: &App,
    who: &Identity,
    params: Option<Value>,
) -> Result<Value, RpcError> {
    let prompt = resolve_prompt(app, params).await?;
    let target = Target {
        kind: "prompt",
        name: &prompt.name,
        entry: &prompt.entry,
        relayed: None,
    };
    forward(
        app,
        who,
        &target,
        Via::Unary(Forward::GetPrompt),
        prompt.params,
    )
    .await
}

/// A `prompts/get` resolved to its binding (resolved once, then forwarded either
/// way).
pub(crate) struct Prompt {
    /// The prompt's local name.
    pub(crate) name: String,
    pub(crate) entry: Arc<Entry<Connector>>,
    /// The request's params with the upstream's name put in.
    pub(crate) params: Map<String, Value>,
}

/// The prompt `params.name` names, or the answer when none is routable.
pub(crate) async fn resolve_prompt(app: &App, params: Option<Value>) -> Result<Prompt, RpcError> {
    let mut params = params_object(params)?;
    let name = string_param(&params, "name")?;
    let table = app.routes().await.ok_or_else(routes_not_ready)?;
    let entry = match table.catalog.prompt(&name) {
        Resolved::Found(entry) => entry,
        Resolved::Gone(gone) => {
            return Err(not_available("prompt", &name, &gone.key, gone.generation));
        }
        Resolved::Clash(_) | Resolved::Unknown => {
            return Err(RpcError::new(
                INVALID_PARAMS,
                format!("Unknown prompt: {name}"),
            ));
        }
    };
    params.insert("name".into(), Value::String(entry.upstream.clone()));
    Ok(Prompt {
        name,
        entry,
        params,
    })
}

/// A `prompts/get` whose upstream may ask the client during it: sent on the worker's
/// relaying stream (`CallToolStream`, `method: prompts/get`) so that its requests reach
/// `stream` as a tool call's do; cancelled by `cancelled` (a legacy `notifications/cancelled`)
/// or by dropping it, bounded by the call timeout, audited with the relayed kinds. The result
/// in the client's era (`modern`).
pub(crate) async fn get_prompt_relayed(
    app: &App,
    who: &Identity,
    prompt: Prompt,
    (stream, cancelled): (RelayStream, Option<oneshot::Receiver<()>>),
    modern: bool,
) -> Result<CallResult, RpcError> {
    let relayed = stream.relayed.clone();
    let target = Target {
        kind: "prompt",
        name: &prompt.name,
        entry: &prompt.entry,
        relayed: Some(&relayed),
    };
    let via = Via::Relay(stream, cancelled);
    let result = forward(app, who, &target, via, prompt.params).await?;
    CallResult::from_value(&in_era(result, modern))
        .ok_or_else(|| RpcError::new(INTERNAL_ERROR, "cannot encode the prompt"))
}

/// The binding of a URI by the routing rule, or the answer: not found (`not_found` is the
/// era's code), claimed twice, or gone.
fn resolve_uri(
    table: &RouteTable,
    uri: &str,
    not_found: i64,
) -> Result<Arc<Entry<Connector>>, RpcError> {
    match table.catalog.resource(uri) {
        Resolved::Found(entry) => Ok(entry),
        Resolved::Clash(keys) => Err(clash(uri, &keys)),
        Resolved::Gone(gone) => Err(not_available("resource", uri, &gone.key, gone.generation)),
        Resolved::Unknown => Err(
            RpcError::new(not_found, format!("Resource not found: {uri}"))
                .with_data(json!({"uri": uri})),
        ),
    }
}

/// `resources/read`: routed by the rule of `catalog/compiled.rs`, the URI unchanged. `not_found` is
/// -32602 on the modern surface (SEP-2164) and -32002 on the legacy one.
pub(crate) async fn read_resource(
    app: &App,
    who: &Identity,
    params: Option<Value>,
    not_found: i64,
) -> Result<Value, RpcError> {
    // `skill://` URIs are the skills extension's (SPEC §11), served from the live releases.
    if let Some(uri) = crate::catalog::skills::skill_uri(params.as_ref())
        && let Some(answer) = crate::catalog::skills::read(&app.skills, uri, not_found).await
    {
        return answer.map(Value::Object);
    }
    let params = params_object(params)?;
    let uri = string_param(&params, "uri")?;
    let table = app.routes().await.ok_or_else(routes_not_ready)?;
    let entry = resolve_uri(&table, &uri, not_found)?;
    let audited = audit_uri(&uri);
    let target = Target {
        kind: "resource",
        name: &audited,
        entry: &entry,
        relayed: None,
    };
    forward(app, who, &target, Via::Unary(Forward::ReadResource), params).await
}

/// A URI as its audit record names it: without query or fragment (they may carry values).
fn audit_uri(uri: &str) -> String {
    uri.split(['?', '#']).next().unwrap_or_default().to_owned()
}

/// `completion/complete`: routed to the owner of the prompt (`ref/prompt`, its upstream name
/// put in) or of the resource template (`ref/resource`, by the template string).
pub(crate) async fn complete(
    app: &App,
    who: &Identity,
    params: Option<Value>,
) -> Result<Value, RpcError> {
    let mut params = params_object(params)?;
    let reference = params
        .get("ref")
        .and_then(Value::as_object)
        .cloned()
        .ok_or_else(|| RpcError::new(INVALID_PARAMS, "Invalid params: ref is required"))?;
    let table = app.routes().await.ok_or_else(routes_not_ready)?;
    let kind = reference.get("type").and_then(Value::as_str).unwrap_or("");
    let (field, resolved) = match kind {
        "ref/prompt" => {
            let name = string_param(&reference, "name")?;
            ("name", (name.clone(), table.catalog.prompt(&name)))
        }
        "ref/resource" => {
            let uri = string_param(&reference, "uri")?;
            ("uri", (uri.clone(), table.catalog.completion_target(&uri)))
        }
        other => {
            return Err(RpcError::new(
                INVALID_PARAMS,
                format!("Invalid params: unknown ref type {other:?}"),
            ));
        }
    };
    let (name, entry) = match resolved {
        (_, Resolved::Found(entry)) => (entry.name.clone(), entry),
        (name, Resolved::Clash(keys)) => return Err(clash(&name, &keys)),
        (name, Resolved::Gone(gone)) => {
            let what = if field == "name" {
                "prompt"
            } else {
                "resource"
            };
            return Err(not_available(what, &name, &gone.key, gone.generation));
        }
        (name, Resolved::Unknown) => {
            return Err(RpcError::new(
                INVALID_PARAMS,
                format!("Unknown completion reference: {name}"),
            ));
        }
    };
    let mut reference = reference;
    reference.insert(field.into(), Value::String(entry.upstream.clone()));
    params.insert("ref".into(), Value::Object(reference));
    let target = Target {
        kind: "completion",
        name: &name,
        entry: &entry,
        relayed: None,
    };
    forward(app, who, &target, Via::Unary(Forward::Complete), params).await
}

/// `resources/subscribe` (legacy): the upstream that serves the URI is subscribed once per
/// generation, and `who` gets its `notifications/resources/updated` (on its GET stream).
pub(crate) async fn subscribe(
    app: &App,
    who: &Identity,
    params: Option<Value>,
    not_found: i64,
) -> Result<Value, RpcError> {
    let params = params_object(params)?;
    let uri = string_param(&params, "uri")?;
    ensure_upstream_subscription(app, who, &uri, not_found).await?;
    app.notifier.subscribe(who, &uri);
    Ok(json!({}))
}

/// `resources/unsubscribe` (legacy): `who` stops getting updates of the URI; the upstream is
/// unsubscribed once nobody is subscribed any more.
pub(crate) async fn unsubscribe(
    app: &App,
    who: &Identity,
    params: Option<Value>,
) -> Result<Value, RpcError> {
    let params = params_object(params)?;
    let uri = string_param(&params, "uri")?;
    if !app.notifier.unsubscribe(who, &uri) {
        return Ok(json!({}));
    }
    let Some(table) = app.routes().await else {
        return Ok(json!({}));
    };
    if let Resolved::Found(entry) = table.catalog.resource(&uri) {
        let connector = &entry.connector;
        app.notifier
            .upstream_unsubscribe(&connector.key, connector.generation, &uri);
        let target = Target {
            kind: "",
            name: &uri,
            entry: &entry,
            relayed: None,
        };
        let mut params = Map::new();
        params.insert("uri".into(), Value::String(uri.clone()));
        // Best effort: a failure only means a few more updates that nobody receives.
        let _ = forward(app, who, &target, Via::Unary(Forward::Unsubscribe), params).await;
    }
    Ok(json!({}))
}

/// Makes sure the upstream serving `uri` sends its updates: its generation's update stream
/// open, and (once per generation and URI) the upstream subscribed. Used by legacy
/// `resources/subscribe` and modern `subscriptions/listen` (`resourceSubscriptions`).
pub(crate) async fn ensure_upstream_subscription(
    app: &App,
    who: &Identity,
    uri: &str,
    not_found: i64,
) -> Result<(), RpcError> {
    let table = app.routes().await.ok_or_else(routes_not_ready)?;
    let entry = resolve_uri(&table, uri, not_found)?;
    let connector = &entry.connector;
    watch_generation(app, connector).await?;
    if !app
        .notifier
        .upstream_subscribe(&connector.key, connector.generation, uri)
    {
        return Ok(());
    }
    let mut params = Map::new();
    params.insert("uri".into(), Value::String(uri.to_owned()));
    let target = Target {
        kind: "",
        name: uri,
        entry: &entry,
        relayed: None,
    };
    let subscribed = forward(app, who, &target, Via::Unary(Forward::Subscribe), params).await;
    if subscribed.is_err() {
        app.notifier
            .upstream_unsubscribe(&connector.key, connector.generation, uri);
    }
    subscribed.map(|_| ())
}

/// After a route change: every subscribed URI whose serving generation was not
/// subscribed yet (a restarted or upgraded connector) is subscribed upstream again, so the
/// clients that subscribed keep getting `resources/updated`. Runs in a task of its own.
pub(crate) fn resubscribe(app: &Arc<App>) {
    let wanted = app.notifier.wanted();
    if wanted.is_empty() {
        return;
    }
    let app = Arc::clone(app);
    tokio::spawn(async move {
        for (uri, who) in wanted {
            // `ensure_upstream_subscription` does nothing for a generation already subscribed.
            let subscribed =
                ensure_upstream_subscription(&app, &who, &uri, crate::rpc::INVALID_PARAMS).await;
            if let Err(e) = subscribed {
                tracing::debug!(%uri, error = %e.message, "cannot subscribe again after a route change");
            }
        }
    });
}

/// Opens the generation's `WatchResources` stream (once) and relays it into the notifier
/// until the generation ends.
async fn watch_generation(app: &App, connector: &Arc<Connector>) -> Result<(), RpcError> {
    let (key, generation) = (connector.key.clone(), connector.generation);
    if !app.notifier.watch(&key, generation) {
        return Ok(());
    }
    let updates = match app
        .backend
        .watch_resources(&connector.endpoint, generation)
        .await
    {
        Ok(updates) => updates,
        Err(e) => {
            app.notifier.unwatch(&key, generation);
            tracing::warn!(connector = %key, generation, error = %e, "cannot watch resource updates");
            return Err(unavailable(
                &key,
                generation,
                "unavailable",
                "cannot subscribe to the connector's resource updates",
            ));
        }
    };
    let notifier = app.notifier.clone();
    tokio::spawn(async move {
        let mut updates = updates;
        while let Some((uri, params)) = futures_util::StreamExt::next(&mut updates).await {
            let params = serde_json::from_str(&params).unwrap_or_else(|_| json!({"uri": uri}));
            notifier.publish(Note::ResourceUpdated { uri, params });
        }
        notifier.unwatch(&key, generation);
    });
    Ok(())
}

/// What a forwarded request is about: its binding, and how its audit record names it (`kind`
/// empty: not audited).
struct Target<'a> {
    kind: &'static str,
    name: &'a str,
    entry: &'a Arc<Entry<Connector>>,
    /// The upstream's requests relayed during it, for the audit record.
    relayed: Option<&'a Arc<Relayed>>,
}

/// How a request reaches the worker: a unary forward, or (a prompt whose upstream may ask the
/// client) the relaying call stream, with the legacy cancellation.
enum Via {
    Unary(Forward),
    Relay(RelayStream, Option<oneshot::Receiver<()>>),
}

type Ended = (Result<Value, RpcError>, Outcome);

/// Forwards `params` to the worker of the target's generation and records the request.
async fn forward(
    app: &App,
    who: &Identity,
    target: &Target<'_>,
    via: Via,
    params: Map<String, Value>,
) -> Result<Value, RpcError> {
    let started = Instant::now();
    let (answer, outcome) = send(app, target, via, params).await;
    if !target.kind.is_empty() {
        let connector = &target.entry.connector;
        let code = match &answer {
            Ok(_) => 0,
            Err(e) => i32::try_from(e.code).unwrap_or(i32::MIN),
        };
        let audited = Audited {
            kind: target.kind,
            name: target.name,
            key: &connector.key,
            generation: connector.generation,
            started,
            relayed: target.relayed.map(Arc::as_ref),
        };
        app.audit.record_other(who, audited, outcome, code);
    }
    answer
}

async fn send(app: &App, target: &Target<'_>, via: Via, params: Map<String, Value>) -> Ended {
    let connector = &target.entry.connector;
    let generation = connector.generation;
    let Some(mut flight) = Flight::board(app, connector, ["", &target.entry.name]) else {
        // Fenced between resolution and now: nothing was sent upstream.
        return (Err(refused(target)), Outcome::RpcError);
    };
    let (cancelled, reply) = match via {
        Via::Unary(what) => {
            let request = ForwardRequest {
                generation,
                call_id: flight.call_id.clone(),
                params_json: Value::Object(params).to_string(),
                timeout_ms: connector.timeout_ms,
            };
            (
                None,
                app.backend.forward(&connector.endpoint, what, request),
            )
        }
        Via::Relay(stream, cancelled) => {
            let request = relayed_request(connector, &flight.call_id, params, &stream);
            let _ = stream.call_id.set(flight.call_id.clone());
            let events = stream.events;
            let reply = app
                .backend
                .call_tool_relayed(&connector.endpoint, request, events);
            (cancelled, reply)
        }
    };
    flight.cancelled = cancelled;
    in_flight(flight, reply, |reply| map_reply(target, reply)).await
}

/// The worker request of a relayed `prompts/get` (`params`: its upstream name and arguments).
fn relayed_request(
    connector: &Connector,
    call_id: &str,
    mut params: Map<String, Value>,
    stream: &RelayStream,
) -> CallToolRequest {
    let name = match params.remove("name") {
        Some(Value::String(name)) => name,
        _ => String::new(),
    };
    let arguments_json = match params.remove("arguments") {
        Some(arguments @ Value::Object(_)) => arguments.to_string(),
        _ => String::new(),
    };
    CallToolRequest {
        generation: connector.generation,
        call_id: call_id.to_owned(),
        tool: name,
        arguments_json,
        timeout_ms: connector.timeout_ms,
        relay_requests: stream.requests,
        relay_logs: stream.logs,
        method: "prompts/get".to_owned(),
        ..CallToolRequest::default()
    }
}

/// The -32602 "not available now" answer for the target's kind.
fn refused(target: &Target<'_>) -> RpcError {
    let connector = &target.entry.connector;
    let what = if target.kind == "prompt" {
        "prompt"
    } else {
        "resource"
    };
    not_available(
        what,
        &target.entry.name,
        &connector.key,
        connector.generation,
    )
}

/// A forwarded request's result text: it must be one JSON object.
fn object_result(key: &str, generation: u64, text: Bytes) -> Ended {
    match serde_json::from_slice(&text) {
        Ok(value @ Value::Object(_)) => (Ok(value), Outcome::Ok),
        _ => malformed_result(key, generation),
    }
}

fn map_reply(target: &Target<'_>, reply: Result<CallToolReply, Error>) -> Ended {
    let connector = &target.entry.connector;
    let refused = |_| refused(target);
    let reading = Reading {
        key: &connector.key,
        generation: connector.generation,
        reply_generation: false,
        what: "request",
        refused: &refused,
        result: object_result,
    };
    read_reply(&reading, reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_follow_the_era_and_keep_everything_else() {
        let upstream = json!({"contents": [{"uri": "x://1", "blob": "AAE="}],
            "_meta": {"k": 1, "io.modelcontextprotocol/serverInfo": {"name": "up"}}});
        let legacy = in_era(upstream.clone(), false);
        assert_eq!(
            legacy,
            json!({"contents": [{"uri": "x://1", "blob": "AAE="}], "_meta": {"k": 1}})
        );
        let modern = in_era(upstream, true);
        assert_eq!(modern["resultType"], "complete");
        assert_eq!(modern["_meta"]["k"], 1);
        assert_eq!(modern["_meta"][META_SERVER_INFO], server_info());
        assert_eq!(in_era(json!({"resultType": "complete"}), false), json!({}));
    }

    #[test]
    fn audited_uris_lose_query_and_fragment() {
        assert_eq!(audit_uri("x://a/b?token=1#f"), "x://a/b");
    }
}

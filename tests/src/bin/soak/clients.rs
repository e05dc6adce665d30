//! The HTTP clients: one legacy (2025-06-18), one modern (2026-07-28) and one search-mode
//! session, each calling tools, a prompt and a resource in turn, one call at a time, for as
//! long as the soak runs. A client keeps the token it has until the book holds a newer one
//! (so a revoked token goes on being tried, and must be refused), and names in each call's
//! record what it sent, the token it carried and what came back.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tutti_tests::Mcp;

use super::world::{Answer, Answerer, Call, Kind, Shared, lock, now_ms, worker_of};

/// One thing a client calls.
#[derive(Clone, Debug)]
pub struct Target {
    pub kind: Kind,
    /// Local tool or prompt name, or the URI.
    pub name: &'static str,
    pub connector: &'static str,
    /// Whether the answer names the upstream's pid and parent (the fixture's `whoami`,
    /// prompt and resource).
    pub who: bool,
    /// Whether the tool is an echo (its answer must be the message sent).
    pub echo: bool,
}

const fn target(kind: Kind, name: &'static str, connector: &'static str, who: bool) -> Target {
    Target {
        kind,
        name,
        connector,
        who,
        echo: false,
    }
}

const fn echo(name: &'static str, connector: &'static str) -> Target {
    Target {
        kind: Kind::Tool,
        name,
        connector,
        who: false,
        echo: true,
    }
}

/// What every client calls, in this order, round and round.
pub const TARGETS: [Target; 9] = [
    target(Kind::Tool, "fa_whoami", "fa", true),
    echo("fa_echo", "fa"),
    target(Kind::Tool, "fb_whoami", "fb", true),
    target(Kind::Tool, "steady_whoami", "steady", true),
    target(Kind::Tool, "time_get_current_time", "time", false),
    target(Kind::Prompt, "fa_hello", "fa", true),
    echo("remote_echo", "remote"),
    target(Kind::Resource, "fb://doc", "fb", true),
    echo("steady_echo", "steady"),
];

/// The search session's own tool, called every so often beside `tutti_call_tool`.
const SEARCH: Target = target(Kind::Search, "tutti_search_tools", "", false);

/// One HTTP client.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    pub session: &'static str,
    pub modern: bool,
    pub search: bool,
    /// Pause between calls.
    pub pace: Duration,
}

/// The JSON-RPC method and params of a call of `t` (`message` for an echo).
pub fn request_of(t: &Target, search: bool, message: &str) -> (&'static str, Value) {
    let arguments = match (t.echo, t.connector) {
        (true, _) => json!({"message": message}),
        (false, "time") => json!({"timezone": "UTC"}),
        _ => json!({}),
    };
    match t.kind {
        Kind::Prompt => ("prompts/get", json!({"name": t.name})),
        Kind::Resource => ("resources/read", json!({"uri": t.name})),
        Kind::Search => (
            "tools/call",
            json!({"name": t.name, "arguments": {"query": "whoami echo"}}),
        ),
        Kind::Tool if search => (
            "tools/call",
            json!({"name": "tutti_call_tool", "arguments": {"name": t.name, "arguments": arguments}}),
        ),
        Kind::Tool => (
            "tools/call",
            json!({"name": t.name, "arguments": arguments}),
        ),
    }
}

/// What a reply means: a result, a JSON-RPC error, or another HTTP answer (a token that is
/// not live, a session that ended, no kernel to ask: these carry a JSON-RPC error too).
pub fn answer_of(status: u16, body: &Value) -> Answer {
    let message = body["error"]["message"].as_str().unwrap_or("");
    let refusal = matches!(status, 401 | 503)
        || (status == 404 && message.starts_with("Not Found: this Mcp-Session-Id"));
    if refusal {
        let mut text = message.to_owned();
        text.truncate(200);
        return Answer::Http { status, body: text };
    }
    if let Some(err) = body.get("error") {
        return Answer::Rpc {
            status,
            code: err["code"].as_i64().unwrap_or(0),
            message: err["message"].as_str().unwrap_or("").to_owned(),
            bound: err["data"]["tutti"]["connector"].is_string(),
        };
    }
    match body.get("result") {
        Some(result) if status == 200 => {
            let refused = &result["_meta"]["tutti/error"];
            Answer::Result {
                is_error: result["isError"] == json!(true),
                refused: refused.is_object().then(|| {
                    (
                        refused["code"].as_i64().unwrap_or(0),
                        refused["message"].as_str().unwrap_or("").to_owned(),
                    )
                }),
            }
        }
        _ => {
            let mut text = body.to_string();
            text.truncate(200);
            Answer::Http { status, body: text }
        }
    }
}

/// The fixture's "who answered" JSON in a `whoami`, prompt or resource result.
pub fn who_answered(result: &Value) -> Option<(u32, u32)> {
    let text = [
        &result["content"][0]["text"],
        &result["messages"][0]["content"]["text"],
        &result["contents"][0]["text"],
    ]
    .into_iter()
    .find_map(Value::as_str)?;
    let who: Value = serde_json::from_str(text).ok()?;
    Some((
        u32::try_from(who["pid"].as_u64()?).ok()?,
        u32::try_from(who["ppid"].as_u64()?).ok()?,
    ))
}

/// The worker behind an upstream that answered, read at once (it is most likely alive).
pub fn answerer(shared: &Shared, (upstream_pid, worker_pid): (u32, u32)) -> Answerer {
    let worker = worker_of(worker_pid).or_else(|| lock(&shared.workers).get(&worker_pid).cloned());
    Answerer {
        upstream_pid,
        worker_pid,
        worker,
    }
}

/// Awaits `reply`, or gives up (`None`: a hang) once the call is overdue.
pub async fn within<F>(
    shared: &Shared,
    start_ms: i64,
    reply: F,
) -> Option<Result<(u16, Value), String>>
where
    F: Future<Output = Result<(u16, reqwest::header::HeaderMap, Value), String>>,
{
    tokio::pin!(reply);
    loop {
        tokio::select! {
            r = &mut reply => return Some(r.map(|(status, _, body)| (status, body))),
            () = tokio::time::sleep(Duration::from_millis(250)) => {
                if shared.overdue(start_ms) {
                    return None;
                }
            }
        }
    }
}

/// The record of one call: what it was and how it came back.
pub struct Sent<'a> {
    pub client: &'static str,
    pub session: &'static str,
    pub target: &'a Target,
    pub token: Option<u64>,
    pub message: String,
    pub start_ms: i64,
}

impl Sent<'_> {
    /// The record, given the reply (`None`: a hang).
    pub fn record(self, shared: &Shared, reply: Option<Result<(u16, Value), String>>) -> Call {
        let end_ms = now_ms();
        let (answer, result) = match reply {
            None => (Answer::Hang, Value::Null),
            Some(Err(e)) => (Answer::Transport(e), Value::Null),
            Some(Ok((status, body))) => (answer_of(status, &body), body["result"].clone()),
        };
        let ok = matches!(
            answer,
            Answer::Result {
                is_error: false,
                ..
            }
        );
        let answerer = (ok && self.target.who)
            .then(|| who_answered(&result))
            .flatten()
            .map(|w| answerer(shared, w));
        let text = result["content"][0]["text"].as_str().unwrap_or("");
        let wrong_echo = (ok && self.target.echo && text != self.message).then(|| text.to_owned());
        Call {
            client: self.client,
            session: self.session,
            kind: self.target.kind,
            target: self.target.name.to_owned(),
            connector: self.target.connector,
            token: self.token,
            start_ms: self.start_ms,
            end_ms,
            answer,
            answerer,
            wrong_echo,
        }
    }
}

/// A client of the frontend with one token; rebuilt when the token or the URL changes.
struct Link {
    mcp: Mcp,
    serial: u64,
    url: String,
}

/// A link with the book's token for `spec`, if it differs from `link`'s: a new client that
/// has said hello (legacy `initialize`, modern `server/discover`; failures are retried by the
/// calls themselves).
async fn relink(shared: &Shared, spec: &Spec, link: Option<Link>) -> Option<Link> {
    let held = lock(&shared.tokens).held(spec.session);
    let url = shared.url();
    if let (Some(l), None) = (&link, &held.token) {
        // Revoked and not reissued yet: go on with the old token (it must be refused).
        if l.url == url {
            return link;
        }
    }
    if link
        .as_ref()
        .is_some_and(|l| l.serial == held.serial && l.url == url)
    {
        return link;
    }
    let (token, serial) = match (held.token, link) {
        (Some(t), _) => (t, held.serial),
        (None, Some(old)) => (old_token(&old), old.serial),
        (None, None) => return None,
    };
    let mcp = if spec.modern {
        Mcp::modern(&url, &token)
    } else {
        Mcp::legacy(&url, &token)
    };
    hello(&mcp, spec.modern).await;
    Some(Link { mcp, serial, url })
}

/// The token an old link carried (kept for a new URL while the book has none).
fn old_token(link: &Link) -> String {
    link.mcp.token().unwrap_or_default().to_owned()
}

async fn hello(mcp: &Mcp, modern: bool) {
    if modern {
        let _ = mcp.try_request("server/discover", json!({})).await;
    } else {
        let init = json!({"protocolVersion": tutti_tests::LEGACY_VERSION, "capabilities": {},
            "clientInfo": {"name": "tutti-soak", "version": "1"}});
        if mcp.try_request("initialize", init).await.is_ok() {
            let _ = mcp
                .try_notify("notifications/initialized", Value::Null)
                .await;
        }
    }
}

/// Runs one client until the soak stops; every call it made.
pub async fn run(spec: Spec, shared: Arc<Shared>) -> Vec<Call> {
    let mut calls = Vec::new();
    let mut link: Option<Link> = None;
    let mut n = 0usize;
    while !shared.stopping() {
        link = relink(&shared, &spec, link).await;
        let Some(l) = &link else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        n += 1;
        let t = if spec.search && n.is_multiple_of(8) {
            &SEARCH
        } else {
            &TARGETS[n % TARGETS.len()]
        };
        let message = format!("{}-{n}", spec.session);
        let (method, params) = request_of(t, spec.search, &message);
        let sent = Sent {
            client: spec.session,
            session: spec.session,
            target: t,
            token: Some(l.serial),
            message,
            start_ms: now_ms(),
        };
        let reply = within(&shared, sent.start_ms, l.mcp.try_request(method, params)).await;
        let call = sent.record(&shared, reply);
        if matches!(call.answer, Answer::Http { status: 404, .. }) {
            // The session ended (its token was revoked): start again without its id.
            l.mcp.forget_session();
        }
        let failed = matches!(call.answer, Answer::Http { .. } | Answer::Transport(_));
        calls.push(call);
        let pause = if failed {
            spec.pace.max(Duration::from_millis(100))
        } else {
            spec.pace
        };
        tokio::time::sleep(pause).await;
    }
    calls
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_read_as_results_errors_or_statuses() {
        let ok = json!({"result": {"content": [{"type": "text", "text": "x"}]}});
        assert_eq!(
            answer_of(200, &ok),
            Answer::Result {
                is_error: false,
                refused: None
            }
        );
        let refused = json!({"result": {"isError": true, "content": [],
            "_meta": {"tutti/error": {"code": -32602, "message": "Unknown tool: x"}}}});
        assert_eq!(
            answer_of(200, &refused),
            Answer::Result {
                is_error: true,
                refused: Some((-32602, "Unknown tool: x".into()))
            }
        );
        let err = json!({"error": {"code": -32603, "message": "[MCP_UNAVAILABLE] fa: gone",
            "data": {"tutti": {"connector": "fa"}}}});
        assert!(matches!(
            answer_of(200, &err),
            Answer::Rpc {
                code: -32603,
                bound: true,
                ..
            }
        ));
        assert!(matches!(
            answer_of(401, &Value::Null),
            Answer::Http { status: 401, .. }
        ));
        let unauthorized = json!({"error": {"code": -32000, "message": "Unauthorized: send …"}});
        assert!(matches!(
            answer_of(401, &unauthorized),
            Answer::Http { status: 401, .. }
        ));
        let ended = json!({"error": {"code": -32000,
            "message": "Not Found: this Mcp-Session-Id names no live session of this token"}});
        assert!(matches!(
            answer_of(404, &ended),
            Answer::Http { status: 404, .. }
        ));
    }

    #[test]
    fn who_answered_reads_tool_prompt_and_resource_answers() {
        let who = r#"{"pid": 7, "ppid": 3}"#;
        for result in [
            json!({"content": [{"text": who}]}),
            json!({"messages": [{"content": {"text": who}}]}),
            json!({"contents": [{"text": who}]}),
        ] {
            assert_eq!(who_answered(&result), Some((7, 3)), "{result}");
        }
        assert_eq!(who_answered(&json!({"content": [{"text": "hi"}]})), None);
    }

    #[test]
    fn a_search_session_calls_through_tutti_call_tool() {
        let (method, params) = request_of(&TARGETS[1], true, "m");
        assert_eq!(method, "tools/call");
        assert_eq!(params["name"], "tutti_call_tool");
        assert_eq!(params["arguments"]["name"], "fa_echo");
        assert_eq!(params["arguments"]["arguments"]["message"], "m");
        let (_, direct) = request_of(&TARGETS[1], false, "m");
        assert_eq!(direct["name"], "fa_echo");
    }
}

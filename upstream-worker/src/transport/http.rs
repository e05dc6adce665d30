//! The HTTP client under rmcp's Streamable HTTP transport ([`StreamableHttpClient`]), ours so
//! that the worker sees every raw answer of a remote upstream.
//!
//! Two things need that:
//!
//! - **Sessions that recover.** A server that lost our `Mcp-Session-Id` (restarted, expired it)
//!   answers with a 400, 404 or 5xx whose JSON-RPC error has `id: null`, or not at all. rmcp
//!   re-initializes only on a 404; anything else it either hands to its service as an answer
//!   to no request (the call then waited for `callMs`) or fails. Here every failed request that
//!   carried a session ([`Fault`]) is turned into rmcp's "session expired", so rmcp runs its
//!   own re-initialization (the saved `initialize`, then `notifications/initialized`) and
//!   retries the request once. A `tools/call` that may have reached the upstream (a 5xx, a
//!   connection lost after the request was sent) is not repeated: its retry is answered at
//!   once with [`WorkerError::UpstreamUnavailable`] (`[MCP_UNAVAILABLE]`). A session the server
//!   said it does not know (400/404) ran nothing, so that retry goes out. The worker hears of
//!   every re-initialization ([`SessionEvent`]); one that fails, or a failure of a stateless
//!   (2026-07-28) upstream after start, makes the upstream unavailable: the worker reports it
//!   and ends, and the kernel fences and restarts it like a crash.
//! - **Byte-exact results.** The answer to a registered `tools/call` (a JSON body or an SSE
//!   `data:` field) is diverted as text before rmcp parses anything ([`CallResults`]), as the
//!   stdio path does.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::StreamExt as _;
use futures_util::stream::BoxStream;
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderName, HeaderValue, WWW_AUTHENTICATE};
use rmcp::model::{ClientJsonRpcMessage, RequestId, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use sse_stream::{Sse, SseStream};
use tokio::sync::mpsc;

use crate::error::WorkerError;
use crate::transport::bearer::Bearer;
use crate::transport::http_body::{
    HttpResult, auth_check, bounded, client, content_type, read_body, status_error, unavailable,
};
use crate::transport::http_fault::{
    Failure, Fault, Kind, is_discover_result, is_uncorrelated_error, login_expired, not_discovered,
};
use crate::transport::results::CallResults;
use crate::upstream::definitions;

type SseEvents = BoxStream<'static, Result<Sse, SseError>>;

const SESSION_ID: &str = "mcp-session-id";
const LAST_EVENT_ID: &str = "last-event-id";
const JSON: &str = "application/json";
const EVENT_STREAM: &str = "text/event-stream";

/// What the worker hears about the upstream's session.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SessionEvent {
    /// The session failed and a new one was initialized; why it failed.
    Reinitialized(String),
    /// The upstream cannot be used any more; why.
    Unavailable(String),
}

/// [`StreamableHttpClient`] over reqwest; see the module docs.
#[derive(Clone)]
pub(crate) struct HttpClient {
    http: reqwest::Client,
    shared: Arc<Shared>,
    /// An OAuth upstream's access token (renewed through the kernel); `None` otherwise.
    bearer: Option<Arc<Bearer>>,
}

struct Shared {
    results: Arc<CallResults>,
    /// Set once the upstream has started (handshake and first listing done): a failure from
    /// then on is a fault of a running upstream, not a failed start.
    started: AtomicBool,
    /// tools/call requests whose first attempt may have reached the upstream.
    not_repeated: Mutex<HashSet<RequestId>>,
    /// Why the session last failed.
    last_fault: Mutex<Option<String>>,
    events: mpsc::UnboundedSender<SessionEvent>,
}

impl HttpClient {
    pub(crate) fn new(
        results: Arc<CallResults>,
        events: mpsc::UnboundedSender<SessionEvent>,
    ) -> Self {
        Self {
            http: reqwest::Client::new(),
            shared: Arc::new(Shared {
                results,
                started: AtomicBool::new(false),
                not_repeated: Mutex::new(HashSet::new()),
                last_fault: Mutex::new(None),
                events,
            }),
            bearer: None,
        }
    }

    /// An OAuth upstream: requests carry `bearer`'s token instead of the launch spec's.
    pub(crate) fn with_bearer(mut self, bearer: Option<Arc<Bearer>>) -> Self {
        self.bearer = bearer;
        self
    }

    /// The token to send: the bearer's (renewed before expiry), else what rmcp passes.
    async fn token(&self, auth: Option<String>) -> HttpResult<Option<String>> {
        match &self.bearer {
            None => Ok(auth),
            Some(b) => b.token().await.map(Some).map_err(login_expired),
        }
    }

    /// The upstream is initialized and listed: from now on failures are faults.
    pub(crate) fn mark_started(&self) {
        self.shared.started.store(true, Ordering::SeqCst);
    }

    fn started(&self) -> bool {
        self.shared.started.load(Ordering::SeqCst)
    }

    fn builder(
        &self,
        method: reqwest::Method,
        uri: &str,
        session_id: Option<&str>,
        auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<reqwest::RequestBuilder> {
        let mut request = self
            .http
            .request(method, uri)
            .header(ACCEPT, format!("{EVENT_STREAM}, {JSON}"));
        let has_token = auth.is_some();
        if let Some(token) = auth {
            request = request.bearer_auth(token);
        }
        for (name, value) in headers {
            if matches!(name.as_str(), "accept" | SESSION_ID | LAST_EVENT_ID) {
                return Err(StreamableHttpError::ReservedHeaderConflict(
                    name.to_string(),
                ));
            }
            // One `Authorization` per request: a token (an OAuth upstream's current one)
            // replaces the fixed header (the launch spec carries the token it started with).
            if has_token && name == AUTHORIZATION {
                continue;
            }
            request = request.header(name, value);
        }
        if let Some(id) = session_id {
            request = request.header(SESSION_ID, id);
        }
        Ok(request)
    }

    /// One POST, its answer classified; a [`Fault`] is handed to [`Self::on_fault`].
    async fn post(
        &self,
        uri: &str,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> HttpResult<StreamableHttpPostResponse> {
        let kind = Kind::of(&message);
        if let Kind::ToolsCall(id) = &kind
            && self.take_not_repeated(id)
        {
            return Err(unavailable(format!(
                "{}; the call may have reached the upstream, so it is not repeated",
                self.last_fault()
            )));
        }
        let attached = session_id.is_some();
        let mut auth = self.token(auth).await?;
        let mut renewed = false;
        let outcome = loop {
            let request = self
                .builder(
                    reqwest::Method::POST,
                    uri,
                    session_id.as_deref(),
                    auth.clone(),
                    headers.clone(),
                )?
                .json(&message);
            let outcome = self.send(request, &message, &kind, attached, limits).await;
            // SPEC §10: an OAuth upstream's 401 gets one renewal and one more try (a 401
            // ran nothing).
            if let (Some(b), false, Err(Failure::Error(StreamableHttpError::AuthRequired(_)))) =
                (&self.bearer, renewed, &outcome)
            {
                renewed = true;
                let refused = auth.clone().unwrap_or_default();
                auth = Some(b.after_401(&refused).await.map_err(login_expired)?);
                continue;
            }
            break outcome;
        };
        let outcome = match outcome {
            Ok(answer) => Ok(answer),
            Err(Failure::Error(e)) => Err(e),
            Err(Failure::Fault(fault)) => Err(self.on_fault(&kind, attached, fault)),
        };
        if matches!(kind, Kind::Initialize) && self.started() {
            let failed = match &outcome {
                Err(StreamableHttpError::Client(WorkerError::UpstreamUnavailable { detail })) => {
                    Some(detail.clone())
                }
                Err(e) => Some(format!(
                    "{}; initializing a new session failed: {e}",
                    self.last_fault()
                )),
                Ok(StreamableHttpPostResponse::Json(ServerJsonRpcMessage::Error(e), _)) => {
                    Some(format!(
                        "{}; initializing a new session failed: JSON-RPC error {}: {}",
                        self.last_fault(),
                        e.error.code.0,
                        e.error.message
                    ))
                }
                Ok(_) => None,
            };
            self.reinitialized(failed);
        }
        outcome
    }

    /// Sends one request and classifies its answer.
    async fn send(
        &self,
        request: reqwest::RequestBuilder,
        message: &ClientJsonRpcMessage,
        kind: &Kind,
        attached: bool,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, Failure> {
        match request.send().await {
            Ok(response) => self.answer(response, message, kind, attached, limits).await,
            // Without the URL: this text reaches agents and `status` (SPEC §7, §9).
            Err(e) => Err(Failure::Fault(Fault::Transport {
                reached: !e.is_connect(),
                error: e.without_url(),
            })),
        }
    }

    /// Classifies the HTTP answer to `message`.
    async fn answer(
        &self,
        response: reqwest::Response,
        message: &ClientJsonRpcMessage,
        kind: &Kind,
        attached: bool,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, Failure> {
        let status = response.status();
        self.note_forbidden(&response);
        auth_check(&response).map_err(Failure::Error)?;
        if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        let session = response
            .headers()
            .get(SESSION_ID)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let content_type = content_type(&response);
        let awaits_answer = matches!(message, ClientJsonRpcMessage::Request(_));
        if !status.is_success() {
            let body = read_body(response, limits.max_json_response_size)
                .await
                .map_err(Failure::Error)?;
            return self.rejected(status, &body, kind, attached, content_type.as_deref());
        }
        match content_type.as_deref() {
            Some(ct) if ct.starts_with(EVENT_STREAM) => Ok(StreamableHttpPostResponse::Sse(
                self.events(response, limits.max_sse_event_size),
                session,
            )),
            Some(ct) if ct.starts_with(JSON) => {
                let body = read_body(response, limits.max_json_response_size)
                    .await
                    .map_err(Failure::Error)?;
                if body.is_empty() && !awaits_answer {
                    return Ok(StreamableHttpPostResponse::Accepted);
                }
                if let Kind::Discover(id) = kind
                    && !is_discover_result(&body)
                {
                    return Ok(not_discovered(id, &body));
                }
                let parsed = self.parse(&body).map_err(Failure::Error)?;
                if awaits_answer && is_uncorrelated_error(&parsed) {
                    return Err(Failure::Fault(Fault::Status {
                        status,
                        body_len: body.len(),
                        session_rejected: false,
                    }));
                }
                Ok(StreamableHttpPostResponse::Json(parsed, session))
            }
            _ if !awaits_answer => Ok(StreamableHttpPostResponse::Accepted),
            other => Err(Failure::Error(StreamableHttpError::UnexpectedContentType(
                other.map(str::to_owned),
            ))),
        }
    }

    /// A non-success answer: a JSON-RPC error for this request passes through (SPEC §5: with
    /// its code); a discovery refused by a legacy server becomes the error the lifecycle falls
    /// back on; anything else is a [`Fault`].
    fn rejected(
        &self,
        status: StatusCode,
        body: &[u8],
        kind: &Kind,
        attached: bool,
        content_type: Option<&str>,
    ) -> Result<StreamableHttpPostResponse, Failure> {
        let error = content_type
            .is_some_and(|ct| ct.starts_with(JSON))
            .then(|| serde_json::from_slice::<ServerJsonRpcMessage>(body).ok())
            .flatten()
            .filter(|m| matches!(m, ServerJsonRpcMessage::Error(_)));
        if let Kind::Discover(id) = kind
            && !attached
            && status.is_client_error()
        {
            let data = match error {
                Some(ServerJsonRpcMessage::Error(e)) => e.error,
                _ => rmcp::ErrorData::invalid_request(
                    format!(
                        "server/discover rejected with HTTP {status} ({} bytes)",
                        body.len()
                    ),
                    None,
                ),
            };
            return Ok(StreamableHttpPostResponse::Json(
                ServerJsonRpcMessage::error(data, Some(id.clone())),
                None,
            ));
        }
        match error {
            Some(error) if !is_uncorrelated_error(&error) => {
                Ok(StreamableHttpPostResponse::Json(error, None))
            }
            _ => Err(Failure::Fault(Fault::Status {
                status,
                body_len: body.len(),
                session_rejected: matches!(status, StatusCode::BAD_REQUEST | StatusCode::NOT_FOUND),
            })),
        }
    }

    /// What a failed request becomes. Before the upstream has started: the plain error (the
    /// start fails with it). With a session: rmcp's "session expired", which makes rmcp
    /// re-initialize and retry (a tools/call that may have reached the upstream is marked not
    /// to be repeated). Without one (a stateless upstream): unavailable, at once.
    fn on_fault(
        &self,
        kind: &Kind,
        attached: bool,
        fault: Fault,
    ) -> StreamableHttpError<WorkerError> {
        let why = fault.summary();
        if !self.started() {
            return fault.into_error();
        }
        if matches!(kind, Kind::Initialize) {
            // rmcp's re-initialization after a failed session failed too.
            return unavailable(format!(
                "{}; initializing a new session failed: {why}",
                self.last_fault()
            ));
        }
        // (stderr is redacted as a whole: no secret reaches the log.)
        tracing::warn!(fault = %fault, session = attached, "an upstream request failed");
        if !attached {
            let _ = self
                .shared
                .events
                .send(SessionEvent::Unavailable(why.clone()));
            return unavailable(why);
        }
        if let Kind::ToolsCall(id) = kind
            && fault.may_have_reached()
        {
            self.shared
                .not_repeated
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(id.clone());
        }
        *self
            .shared
            .last_fault
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(why);
        StreamableHttpError::SessionExpired
    }

    /// The outcome of a re-initialization (an `initialize` after the start); `failed` says
    /// why it failed.
    fn reinitialized(&self, failed: Option<String>) {
        let event = match failed {
            None => SessionEvent::Reinitialized(self.last_fault()),
            Some(why) => SessionEvent::Unavailable(why),
        };
        let _ = self.shared.events.send(event);
    }

    fn last_fault(&self) -> String {
        self.shared
            .last_fault
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .unwrap_or_else(|| "the upstream session failed".to_owned())
    }

    fn take_not_repeated(&self, id: &RequestId) -> bool {
        self.shared
            .not_repeated
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id)
    }

    /// A JSON body as rmcp gets it: the result of a registered tools/call is kept as text,
    /// and a tools/list page is shown to [`definitions::observe`] (definitions as sent).
    fn parse(&self, body: &[u8]) -> HttpResult<ServerJsonRpcMessage> {
        definitions::observe(body);
        match self.shared.results.divert_copy(body) {
            Some(short) => serde_json::from_str(&short),
            None => serde_json::from_slice(body),
        }
        .map_err(StreamableHttpError::Deserialize)
    }

    /// An event stream as rmcp gets it: bounded events, results of registered calls kept.
    fn events(&self, response: reqwest::Response, max_event: usize) -> SseEvents {
        let results = self.shared.results.clone();
        let bytes = bounded(response.bytes_stream(), max_event);
        SseStream::from_bytes_stream(bytes)
            .map(move |event| {
                let mut event = event?;
                if let Some(data) = event.data.as_deref() {
                    definitions::observe(data.as_bytes());
                }
                if let Some(short) = event
                    .data
                    .as_deref()
                    .and_then(|d| results.divert_copy(d.as_bytes()))
                {
                    event.data = Some(short);
                }
                Ok(event)
            })
            .boxed()
    }
}

impl StreamableHttpClient for HttpClient {
    type Error = WorkerError;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<StreamableHttpPostResponse> {
        let limits = StreamableHttpResponseLimits::default();
        self.post(&uri, message, session_id, auth, headers, limits)
            .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> HttpResult<StreamableHttpPostResponse> {
        let mut limits = StreamableHttpResponseLimits::default();
        limits.max_sse_event_size = max_sse_event_size;
        self.post(&uri, message, session_id, auth, headers, limits)
            .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> HttpResult<StreamableHttpPostResponse> {
        self.post(&uri, message, session_id, auth, headers, limits)
            .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<()> {
        let auth = self.token(auth).await?;
        let request = self.builder(
            reqwest::Method::DELETE,
            &uri,
            Some(&session_id),
            auth,
            headers,
        )?;
        let response = request.send().await.map_err(client)?;
        if response.status() == StatusCode::METHOD_NOT_ALLOWED {
            return Ok(());
        }
        response.error_for_status().map(drop).map_err(client)
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<SseEvents> {
        let max = StreamableHttpResponseLimits::default().max_sse_event_size;
        self.get_stream_with_max_sse_event_size(uri, session_id, last_event_id, auth, headers, max)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> HttpResult<SseEvents> {
        let auth = self.token(auth).await?;
        let mut request = self.builder(
            reqwest::Method::GET,
            &uri,
            session_id.as_deref(),
            auth,
            headers,
        )?;
        if let Some(id) = last_event_id {
            request = request.header(LAST_EVENT_ID, id);
        }
        let response = request.send().await.map_err(client)?;
        let status = response.status();
        if status == StatusCode::METHOD_NOT_ALLOWED {
            return Err(StreamableHttpError::ServerDoesNotSupportSse);
        }
        auth_check(&response)?;
        if !status.is_success() {
            return Err(status_error(status, 0));
        }
        match content_type(&response) {
            Some(ct) if ct.starts_with(EVENT_STREAM) || ct.starts_with(JSON) => {
                Ok(self.events(response, max_sse_event_size))
            }
            other => Err(StreamableHttpError::UnexpectedContentType(other)),
        }
    }
}

impl HttpClient {
    /// A 403's `insufficient_scope` challenge, remembered for the step-up.
    fn note_forbidden(&self, response: &reqwest::Response) {
        if let Some(b) = &self.bearer
            && response.status() == StatusCode::FORBIDDEN
            && let Some(challenge) = response
                .headers()
                .get(WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
        {
            b.note_forbidden(challenge);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_carries_one_authorization_header_the_current_token() {
        let (events, _) = mpsc::unbounded_channel();
        let client = HttpClient::new(Arc::default(), events);
        let fixed = HashMap::from([
            (AUTHORIZATION, HeaderValue::from_static("Bearer at-start")),
            (
                HeaderName::from_static("x-extra"),
                HeaderValue::from_static("1"),
            ),
        ]);
        let build = |auth: Option<&str>| {
            client
                .builder(
                    reqwest::Method::POST,
                    "http://127.0.0.1:9/mcp",
                    None,
                    auth.map(str::to_owned),
                    fixed.clone(),
                )
                .unwrap_or_else(|e| panic!("{e}"))
                .build()
                .unwrap_or_else(|e| panic!("{e}"))
        };
        let renewed = build(Some("renewed"));
        let sent: Vec<_> = renewed.headers().get_all(AUTHORIZATION).iter().collect();
        assert_eq!(sent, [&HeaderValue::from_static("Bearer renewed")]);
        assert!(renewed.headers().contains_key("x-extra"));
        // Without a token the fixed header is the credential.
        let fixed_only = build(None);
        let sent: Vec<_> = fixed_only.headers().get_all(AUTHORIZATION).iter().collect();
        assert_eq!(sent, [&HeaderValue::from_static("Bearer at-start")]);
    }
}

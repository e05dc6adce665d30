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
use reqwest::header::{
    ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderName, HeaderValue, WWW_AUTHENTICATE,
};
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, RequestId, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, HttpStatusError, InsufficientScopeError, SseError, StreamableHttpClient,
    StreamableHttpError, StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use sse_stream::{Sse, SseStream};
use tokio::sync::mpsc;

use crate::error::{WorkerError, error_chain};
use crate::transport::bearer::Bearer;
use crate::transport::results::CallResults;
use crate::upstream::definitions;

type HttpResult<T> = Result<T, StreamableHttpError<WorkerError>>;
type SseEvents = BoxStream<'static, Result<Sse, SseError>>;

const SESSION_ID: &str = "mcp-session-id";
const LAST_EVENT_ID: &str = "last-event-id";
const JSON: &str = "application/json";
const EVENT_STREAM: &str = "text/event-stream";
/// How much of an error body goes into a message.
const ERROR_PREVIEW: usize = 256;

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

// === classification ===

/// What a message is, as far as recovery cares.
enum Kind {
    Initialize,
    Discover(RequestId),
    ToolsCall(RequestId),
    Other,
}

impl Kind {
    fn of(message: &ClientJsonRpcMessage) -> Self {
        let ClientJsonRpcMessage::Request(request) = message else {
            return Kind::Other;
        };
        match &request.request {
            ClientRequest::InitializeRequest(_) => Kind::Initialize,
            ClientRequest::DiscoverRequest(_) => Kind::Discover(request.id.clone()),
            ClientRequest::CallToolRequest(_) => Kind::ToolsCall(request.id.clone()),
            _ => Kind::Other,
        }
    }
}

/// Why a request got no usable answer.
enum Failure {
    /// The answer itself is the error (401/403, an unreadable body, …).
    Error(StreamableHttpError<WorkerError>),
    /// The upstream or the connection failed the request.
    Fault(Fault),
}

/// A request that failed at the upstream.
enum Fault {
    /// No HTTP answer.
    Transport {
        error: reqwest::Error,
        reached: bool,
    },
    /// An error answer that names no request (a JSON-RPC error with `id: null`, HTML, …).
    /// Only its length is kept: an error page may echo the request, token included.
    Status {
        status: StatusCode,
        body_len: usize,
        /// 400/404: the server refused the request as it came (it ran nothing).
        session_rejected: bool,
    },
}

impl Fault {
    /// Whether the request may have run at the upstream.
    fn may_have_reached(&self) -> bool {
        match self {
            Fault::Transport { reached, .. } => *reached,
            Fault::Status {
                session_rejected, ..
            } => !session_rejected,
        }
    }

    /// The error rmcp gets when this is not a fault of a running upstream.
    fn into_error(self) -> StreamableHttpError<WorkerError> {
        match self {
            Fault::Transport { error, .. } => client(error),
            Fault::Status {
                status, body_len, ..
            } => status_error(status, body_len),
        }
    }
}

impl Fault {
    /// What callers, `status` and the audit log are told: the status line or the transport
    /// error (the connector's log also gets the error body's length, through [`Fault`]'s
    /// `Display`).
    fn summary(&self) -> String {
        match self {
            Fault::Status { status, .. } => format!("the upstream answered HTTP {status}"),
            Fault::Transport { .. } => self.to_string(),
        }
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Transport { error, .. } => {
                write!(f, "the upstream did not answer ({})", error_chain(error))
            }
            Fault::Status {
                status,
                body_len: 0,
                ..
            } => write!(f, "the upstream answered HTTP {status}"),
            Fault::Status {
                status, body_len, ..
            } => write!(f, "the upstream answered HTTP {status} ({body_len} bytes)"),
        }
    }
}

/// A JSON-RPC error that answers no request (`id` null or missing).
fn is_uncorrelated_error(message: &ServerJsonRpcMessage) -> bool {
    matches!(message, ServerJsonRpcMessage::Error(e) if e.id.is_none())
}

/// Whether a JSON answer to `server/discover` is a discovery result (a JSON-RPC error passes
/// too: rmcp falls back on it). A legacy server that answers every method it does not know
/// with an empty result (the conformance suite's `sse-retry` server does) is a legacy server:
/// rmcp would fail on that answer instead of falling back to `initialize`.
fn is_discover_result(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body)
        .is_ok_and(|v| v.get("error").is_some() || v["result"].get("supportedVersions").is_some())
}

/// The error rmcp's lifecycle falls back to `initialize` on, for a discovery the server did
/// not answer as one.
fn not_discovered(id: &RequestId, body: &[u8]) -> StreamableHttpPostResponse {
    let data = rmcp::ErrorData::invalid_request(
        format!(
            "server/discover answered without supportedVersions: {}",
            preview(body)
        ),
        None,
    );
    StreamableHttpPostResponse::Json(ServerJsonRpcMessage::error(data, Some(id.clone())), None)
}

/// A refresh failed: the connector needs a new login (the bearer keeps the reason, which the
/// worker reports).
fn login_expired(reason: String) -> StreamableHttpError<WorkerError> {
    StreamableHttpError::AuthRequired(AuthRequiredError::new(format!(
        "Bearer error=\"invalid_token\", error_description=\"{}\"",
        reason.replace('"', "'")
    )))
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

/// 401/403: the upstream refused our credentials.
fn auth_check(response: &reqwest::Response) -> HttpResult<()> {
    let challenge = || {
        response
            .headers()
            .get(WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    match response.status() {
        StatusCode::UNAUTHORIZED => Err(StreamableHttpError::AuthRequired(AuthRequiredError::new(
            challenge(),
        ))),
        StatusCode::FORBIDDEN => Err(StreamableHttpError::InsufficientScope(
            InsufficientScopeError::new(challenge(), None),
        )),
        _ => Ok(()),
    }
}

/// rmcp's error for an HTTP error status; of the body only its length (an error page may
/// echo the request, token included).
fn status_error(status: StatusCode, body_len: usize) -> StreamableHttpError<WorkerError> {
    if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
        return StreamableHttpError::HttpStatus(HttpStatusError::new(status.as_u16(), None));
    }
    StreamableHttpError::UnexpectedServerResponse(
        format!("HTTP {status} ({body_len}-byte body)").into(),
    )
}

fn content_type(response: &reqwest::Response) -> Option<String> {
    response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_ascii_lowercase())
}

/// The whole body, refused beyond `max` bytes.
async fn read_body(response: reqwest::Response, max: usize) -> HttpResult<Vec<u8>> {
    if response.content_length().is_some_and(|n| n > max as u64) {
        return Err(StreamableHttpError::ResponseBodyTooLarge { max_size: max });
    }
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(client)?;
        if body.len() + chunk.len() > max {
            return Err(StreamableHttpError::ResponseBodyTooLarge { max_size: max });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The start of an error body, on one line.
fn preview(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match text.char_indices().nth(ERROR_PREVIEW) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// Ends a byte stream with an error once one SSE event (the bytes between two blank lines)
/// exceeds `max` bytes, before the parser buffers it.
fn bounded<S, B>(
    stream: S,
    max: usize,
) -> impl futures_util::Stream<Item = Result<B, std::io::Error>> + Send + 'static
where
    S: futures_util::Stream<Item = Result<B, reqwest::Error>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
{
    let mut event = 0usize;
    let mut at_line_start = true;
    stream.map(move |chunk| {
        let chunk = chunk.map_err(std::io::Error::other)?;
        for &byte in chunk.as_ref() {
            match byte {
                b'\n' if at_line_start => event = 0,
                b'\n' => at_line_start = true,
                b'\r' => {}
                _ => {
                    at_line_start = false;
                    event += 1;
                }
            }
            if event > max {
                return Err(std::io::Error::other(format!(
                    "an event of the upstream's stream exceeds {max} bytes"
                )));
            }
        }
        Ok(chunk)
    })
}

fn client(error: reqwest::Error) -> StreamableHttpError<WorkerError> {
    StreamableHttpError::Client(WorkerError::UpstreamHttp(error))
}

fn unavailable(detail: String) -> StreamableHttpError<WorkerError> {
    StreamableHttpError::Client(WorkerError::UpstreamUnavailable { detail })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server_message(text: &str) -> ServerJsonRpcMessage {
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn client_message(text: &str) -> ClientJsonRpcMessage {
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn a_discovery_answered_with_anything_else_falls_back() {
        assert!(is_discover_result(
            br#"{"jsonrpc":"2.0","id":0,"result":{"supportedVersions":["2026-07-28"]}}"#
        ));
        assert!(is_discover_result(
            br#"{"jsonrpc":"2.0","id":0,"error":{"code":-32601,"message":"no"}}"#
        ));
        // A legacy server that answers every method it does not know with `{}`.
        assert!(!is_discover_result(
            br#"{"jsonrpc":"2.0","id":0,"result":{}}"#
        ));
        assert!(!is_discover_result(b"not json"));
    }

    #[test]
    fn an_error_with_a_null_id_answers_no_request() {
        let stale = server_message(
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Bad Request: No valid session ID provided"}}"#,
        );
        assert!(is_uncorrelated_error(&stale));
        let answer = server_message(
            r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"no such method"}}"#,
        );
        assert!(!is_uncorrelated_error(&answer));
        let result = server_message(r#"{"jsonrpc":"2.0","id":7,"result":{}}"#);
        assert!(!is_uncorrelated_error(&result));
    }

    #[test]
    fn only_tools_call_initialize_and_discover_are_told_apart() {
        let call = client_message(
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{}}}"#,
        );
        assert!(matches!(
            Kind::of(&call),
            Kind::ToolsCall(RequestId::Number(3))
        ));
        let init = client_message(
            r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
        );
        assert!(matches!(Kind::of(&init), Kind::Initialize));
        let list = client_message(r#"{"jsonrpc":"2.0","id":4,"method":"tools/list"}"#);
        assert!(matches!(Kind::of(&list), Kind::Other));
        let note = client_message(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        assert!(matches!(Kind::of(&note), Kind::Other));
    }

    #[test]
    fn a_refused_session_ran_nothing_and_a_server_error_may_have_run_it() {
        let refused = Fault::Status {
            status: StatusCode::NOT_FOUND,
            body_len: 0,
            session_rejected: true,
        };
        assert!(!refused.may_have_reached());
        assert_eq!(
            refused.to_string(),
            "the upstream answered HTTP 404 Not Found"
        );
        let failed = Fault::Status {
            status: StatusCode::BAD_GATEWAY,
            body_len: 13,
            session_rejected: false,
        };
        assert!(failed.may_have_reached());
        assert_eq!(
            failed.to_string(),
            "the upstream answered HTTP 502 Bad Gateway (13 bytes)"
        );
    }

    #[test]
    fn callers_are_told_the_status_line_not_the_upstreams_page() {
        let page = Fault::Status {
            status: StatusCode::BAD_GATEWAY,
            body_len: 35,
            session_rejected: false,
        };
        assert_eq!(page.summary(), "the upstream answered HTTP 502 Bad Gateway");
        assert_eq!(
            page.to_string(),
            "the upstream answered HTTP 502 Bad Gateway (35 bytes)"
        );
    }

    #[test]
    fn server_errors_keep_their_status_and_client_errors_their_length() {
        assert!(matches!(
            status_error(StatusCode::INTERNAL_SERVER_ERROR, 1),
            StreamableHttpError::HttpStatus(_)
        ));
        assert!(matches!(
            status_error(StatusCode::TOO_MANY_REQUESTS, 1),
            StreamableHttpError::HttpStatus(_)
        ));
        match status_error(StatusCode::BAD_REQUEST, 10) {
            StreamableHttpError::UnexpectedServerResponse(text) => {
                assert_eq!(text, "HTTP 400 Bad Request (10-byte body)");
            }
            other => panic!("{other}"),
        }
    }

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

    #[test]
    fn an_error_body_is_previewed_on_one_line_and_cut() {
        assert_eq!(
            preview(b"  <html>\n  <body>oops</body>\n</html> "),
            "<html> <body>oops</body> </html>"
        );
        let long = "é".repeat(ERROR_PREVIEW + 10);
        let shown = preview(long.as_bytes());
        assert_eq!(shown.chars().count(), ERROR_PREVIEW + 1, "{shown}");
        assert!(shown.ends_with('…'));
    }

    #[tokio::test]
    async fn an_event_over_the_bound_ends_the_stream_and_blank_lines_reset_it() {
        let chunks = |parts: &[&'static str]| {
            futures_util::stream::iter(
                parts
                    .iter()
                    .map(|p| Ok::<_, reqwest::Error>(p.as_bytes().to_vec()))
                    .collect::<Vec<_>>(),
            )
        };
        // Two events of 8 bytes each (`data: ab`), a bound of 8: both pass.
        let ok: Vec<_> = bounded(chunks(&["data: ab\n\n", "data: cd\n\n"]), 8)
            .collect()
            .await;
        assert!(ok.iter().all(Result::is_ok), "{ok:?}");
        // One event split over chunks grows past the bound: the stream ends with an error.
        let over: Vec<_> = bounded(chunks(&["data: ab", "cdef\n", "data: x\n\n"]), 8)
            .collect()
            .await;
        let err = over
            .iter()
            .find_map(|r| r.as_ref().err())
            .unwrap_or_else(|| panic!("no error in {over:?}"));
        assert!(err.to_string().contains("exceeds 8 bytes"), "{err}");
    }
}

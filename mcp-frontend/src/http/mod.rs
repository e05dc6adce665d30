//! The HTTP edge (SPEC §5): Host, Origin and bearer checks in that order, then path, method,
//! content type, body size, JSON-RPC framing, then era dispatch. Its parts: connection caps
//! ([`admission`]), header logic ([`headers`]), response bodies of slices ([`body`]), the
//! legacy GET stream ([`get_stream`]) and `subscriptions/listen` ([`listen`], [`listeners`]).

pub(crate) mod admission;
pub(crate) mod body;
pub(crate) mod get_stream;
pub(crate) mod headers;
pub(crate) mod listen;
pub(crate) mod listeners;

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, BodyDataStream};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use futures_util::StreamExt;
use serde_json::{Map, Value};

use crate::app::App;
use crate::backend::Identity;
use crate::era::shared::{Ctx, META_PROTOCOL_VERSION, MODERN_VERSION, PROTOCOL_VERSION_HEADER};
use crate::era::{legacy, modern};
use crate::rpc::{self, INVALID_REQUEST, PARSE_ERROR, RpcError};

/// The one MCP endpoint.
pub(crate) const ENDPOINT_PATH: &str = "/mcp/connector";
/// Largest accepted request body.
pub(crate) const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// A transport-level rejection that also names what the client must send.
fn reject_with(
    status: StatusCode,
    message: &str,
    name: header::HeaderName,
    value: &'static str,
) -> Response {
    let mut response = rpc::reject(status, message);
    response
        .headers_mut()
        .insert(name, HeaderValue::from_static(value));
    response
}

fn unauthorized() -> Response {
    reject_with(
        StatusCode::UNAUTHORIZED,
        "Unauthorized: send Authorization: Bearer <token> with a live session token (issue one with `tutti session issue --workspace W --session S`)",
        header::WWW_AUTHENTICATE,
        "Bearer",
    )
}

fn is_json_content_type(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

enum BodyError {
    TooLarge,
    Broken,
}

/// An oversized body is still read and discarded up to this many bytes before the 413 is sent:
/// a client that is still uploading would otherwise see a connection reset instead of the 413.
const DRAIN_LIMIT_BYTES: u64 = 64 * 1024 * 1024;

/// Reads and discards the rest of a rejected body (bounded by [`DRAIN_LIMIT_BYTES`]).
async fn drain(stream: &mut BodyDataStream, mut seen: u64) {
    while seen <= DRAIN_LIMIT_BYTES {
        match stream.next().await {
            Some(Ok(chunk)) => seen += chunk.len() as u64,
            _ => return,
        }
    }
}

async fn read_body(headers: &HeaderMap, body: Body) -> Result<Vec<u8>, BodyError> {
    let declared = declared_length(headers);
    let mut stream = body.into_data_stream();
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        if declared.is_some_and(|n| n <= DRAIN_LIMIT_BYTES) {
            drain(&mut stream, 0).await;
        }
        return Err(BodyError::TooLarge);
    }
    let mut bytes = Vec::with_capacity(declared.map_or(0, |n| n as usize));
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|_| BodyError::Broken)?;
        if bytes.len() + chunk.len() > MAX_BODY_BYTES {
            drain(&mut stream, (bytes.len() + chunk.len()) as u64).await;
            return Err(BodyError::TooLarge);
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// Bodies up to this size (by `Content-Length`) are read while the token is verified.
const EARLY_BODY_BYTES: u64 = 64 * 1024;

fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
}

/// A request body read during token verification, or not yet.
enum PendingBody {
    Parsed(Result<Map<String, Value>, ParseFailure>),
    Unread(Body),
}

/// Why a body did not yield one JSON-RPC object.
enum ParseFailure {
    Body(BodyError),
    Batch,
    NotObject,
    Syntax,
    /// The body did not arrive within [`BODY_READ_TIMEOUT`].
    Timeout,
}

impl ParseFailure {
    fn response(self) -> Response {
        let (status, error) = match self {
            Self::Body(BodyError::TooLarge) => {
                return rpc::reject(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "Payload Too Large: the body exceeds 4 MiB",
                );
            }
            Self::Body(BodyError::Broken) => {
                return rpc::reject(StatusCode::BAD_REQUEST, "Bad Request: unreadable body");
            }
            Self::Timeout => {
                let mut response = rpc::reject(
                    StatusCode::REQUEST_TIMEOUT,
                    &format!(
                        "Request Timeout: the request body did not arrive within {} s",
                        BODY_READ_TIMEOUT.as_secs()
                    ),
                );
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
                return response;
            }
            Self::Batch => (
                StatusCode::BAD_REQUEST,
                RpcError::new(
                    INVALID_REQUEST,
                    "Invalid Request: the body must be a single JSON-RPC request or notification object, not a batch",
                ),
            ),
            Self::NotObject => (
                StatusCode::BAD_REQUEST,
                RpcError::new(
                    INVALID_REQUEST,
                    "Invalid Request: the body must be a JSON-RPC object",
                ),
            ),
            Self::Syntax => (
                StatusCode::BAD_REQUEST,
                RpcError::new(PARSE_ERROR, "Parse error"),
            ),
        };
        rpc::error_response(status, &Value::Null, &error)
    }
}

/// Bodies larger than this are parsed on a blocking thread: parsing (and later dropping) a
/// body of up to 4 MiB takes milliseconds that every other session's requests would wait.
const INLINE_PARSE_BYTES: usize = 64 * 1024;

/// Reads the body (bounded) and parses it as one JSON object.
async fn read_and_parse(
    headers: &HeaderMap,
    body: Body,
) -> Result<Map<String, Value>, ParseFailure> {
    let bytes = read_body(headers, body).await.map_err(ParseFailure::Body)?;
    if bytes.len() <= INLINE_PARSE_BYTES {
        return parse_object(&bytes);
    }
    tokio::task::spawn_blocking(move || parse_object(&bytes))
        .await
        .unwrap_or(Err(ParseFailure::Syntax))
}

fn parse_object(bytes: &[u8]) -> Result<Map<String, Value>, ParseFailure> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(object)) => Ok(object),
        Ok(Value::Array(_)) => Err(ParseFailure::Batch),
        Ok(_) => Err(ParseFailure::NotObject),
        Err(_) => Err(ParseFailure::Syntax),
    }
}

/// How long a request's body may take to arrive, from the end of its headers (hyper's header
/// timeout covers those). A body that has not arrived by then is answered 408 and the
/// connection closed: loopback is open to every local user, and a request whose body never
/// comes must not hold a descriptor for ever.
pub(crate) const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// [`read_and_parse`] within [`BODY_READ_TIMEOUT`].
async fn read_within_timeout(
    headers: &HeaderMap,
    body: Body,
) -> Result<Map<String, Value>, ParseFailure> {
    tokio::time::timeout(BODY_READ_TIMEOUT, read_and_parse(headers, body))
        .await
        .unwrap_or(Err(ParseFailure::Timeout))
}

/// The answer to a request whose token was not verified as valid: 401, or 503 when the
/// kernel could not be asked. The connection is closed after the answer: its body may be
/// unread (hyper would otherwise wait for it before the next request), and a connection
/// without a valid token holds no slot longer than it must (`http/admission.rs`).
fn rejected(verified: Result<Option<Identity>, crate::Error>) -> Response {
    let mut response = match verified {
        // Only called without a valid identity.
        Ok(_) => unauthorized(),
        Err(e) => {
            tracing::warn!(error = %e, "cannot verify a session token");
            rpc::reject(
                StatusCode::SERVICE_UNAVAILABLE,
                "Service Unavailable: the session token cannot be verified because the kernel is not answering; retry, and check `tutti status`",
            )
        }
    };
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Whether a request is served by the modern (2026-07-28) surface.
fn is_modern(headers: &HeaderMap, message: &rpc::Message) -> bool {
    let header = headers
        .get(PROTOCOL_VERSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    header == Some(MODERN_VERSION)
        || message
            .params()
            .and_then(|p| p.get("_meta"))
            .and_then(Value::as_object)
            .is_some_and(|meta| meta.contains_key(META_PROTOCOL_VERSION))
}

/// The single handler behind every path and method.
pub(crate) async fn handle(State(app): State<Arc<App>>, request: Request) -> Response {
    let ticket = app.sessions.ticket();
    let (parts, body) = request.into_parts();

    if let Some(rejection) = host_or_origin_rejection(&parts.headers) {
        return rejection;
    }
    let Some(token) = headers::bearer_token(&parts.headers).map(str::to_owned) else {
        return rejected(Ok(None));
    };
    let is_post = parts.method == Method::POST;
    let is_json = is_json_content_type(&parts.headers);
    let on_endpoint = parts.uri.path() == ENDPOINT_PATH;
    let early = on_endpoint
        && is_post
        && is_json
        && declared_length(&parts.headers).is_some_and(|n| n <= EARLY_BODY_BYTES);
    // The token's one hash: the session cache and every per-token map key by it.
    let key = crate::session::sessions::token_key(&token);
    let proof = parts.extensions.get::<crate::http::admission::Proof>();
    let request = Unverified {
        token: &token,
        key: &key,
        headers: &parts.headers,
        proof,
    };
    let carried = headers::session_id(&parts.headers);
    let (identity, pending) = match authenticate(&app, request, body, early).await {
        Ok(authenticated) => authenticated,
        Err(rejection) => return session_ended_or(&app, carried, &key, rejection),
    };
    if let Some(answer) = session_answer(&app, carried, &key, &parts.method, on_endpoint) {
        return answer;
    }
    // SPEC §11: the legacy notification stream.
    if on_endpoint
        && parts.method == Method::GET
        && crate::call::progress::accepts_event_stream(&parts.headers)
    {
        return crate::http::get_stream::open(app, identity, &token, key, ticket).await;
    }
    // SPEC §5: the bearer check comes before everything else but Host and Origin, so an
    // unauthenticated request gets 401 on every path.
    if let Some(rejection) = route_rejection(on_endpoint, is_post, is_json) {
        return rejection;
    }
    let parsed = match pending {
        PendingBody::Parsed(parsed) => parsed,
        PendingBody::Unread(body) => read_within_timeout(&parts.headers, body).await,
    };
    let object = match parsed {
        Ok(object) => object,
        Err(failure) => return failure.response(),
    };
    let message = match rpc::classify(object) {
        Ok(message) => message,
        Err((id, error)) => return rpc::error_response(StatusCode::BAD_REQUEST, &id, &error),
    };
    let modern = is_modern(&parts.headers, &message);
    let ctx = Ctx {
        app,
        identity,
        token,
        token_key: key,
        ticket,
        headers: parts.headers,
    };
    if modern {
        modern::handle(ctx, message).await
    } else {
        legacy::handle(ctx, message).await
    }
}

/// The 404 of the 2025-06-18 transport for a session id that names no live session of the
/// request's token (SPEC §11); the connection closes as for a rejected token.
fn session_not_found() -> Response {
    let mut response = rpc::reject(
        StatusCode::NOT_FOUND,
        "Not Found: this Mcp-Session-Id names no live session of this token; send initialize again without it",
    );
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// A request whose token was rejected: when it carries that token's own session id, the
/// session ended (the token was revoked): 404, so the client starts again; else `rejection`.
fn session_ended_or(
    app: &App,
    carried: Option<&str>,
    key: &crate::session::sessions::TokenKey,
    rejection: Response,
) -> Response {
    let ended = rejection.status() == StatusCode::UNAUTHORIZED
        && carried.is_some_and(|id| app.session_ids.matches(id, key));
    if ended {
        session_not_found()
    } else {
        rejection
    }
}

/// For a request with a live token: 404 when it carries a session id that is not its token's;
/// for `DELETE` with its token's id, that id's GET streams end (the token stays valid) and the
/// answer is 204. `None`: go on.
fn session_answer(
    app: &App,
    carried: Option<&str>,
    key: &crate::session::sessions::TokenKey,
    method: &Method,
    on_endpoint: bool,
) -> Option<Response> {
    let carried = carried?;
    if !app.session_ids.matches(carried, key) {
        return Some(session_not_found());
    }
    if on_endpoint && method == Method::DELETE {
        let closed = app.clients.close_streams(key);
        tracing::debug!(closed, "a client ended its session's GET streams");
        return Some(axum::response::IntoResponse::into_response(
            StatusCode::NO_CONTENT,
        ));
    }
    None
}

/// The 403 for a Host or an Origin that is not loopback, checked before anything else.
fn host_or_origin_rejection(headers: &HeaderMap) -> Option<Response> {
    if !headers::host_allowed(headers) {
        return Some(rpc::reject(
            StatusCode::FORBIDDEN,
            "Forbidden: the Host header must name 127.0.0.1, localhost or [::1]",
        ));
    }
    if !headers::origin_allowed(headers) {
        return Some(rpc::reject(
            StatusCode::FORBIDDEN,
            "Forbidden: the Origin must be http:// on 127.0.0.1, localhost or [::1]",
        ));
    }
    None
}

/// Verifies the bearer token: the caller's identity and the body (read or not), or the
/// rejection.
///
/// With `early`, a small body is read and parsed while the token is verified (a kernel round
/// trip unless the session cache knows it), but the verdict never waits for the body: a
/// request without a valid token is answered 401 at once, whatever its body does. Nothing is
/// acted on before the verdict, and every answer after it keeps the documented check order.
/// Larger bodies are only read once the token is valid.
async fn authenticate(
    app: &App,
    request: Unverified<'_>,
    body: Body,
    early: bool,
) -> Result<(Identity, PendingBody), Response> {
    let Unverified {
        token,
        key,
        headers,
        proof,
    } = request;
    let (verified, pending) = if early {
        let read = read_within_timeout(headers, body);
        let verify = app.verify_session(token, key);
        tokio::pin!(read, verify);
        tokio::select! {
            verified = &mut verify => {
                if !matches!(verified, Ok(Some(_))) {
                    return Err(rejected(verified));
                }
                // Proven before the body arrives: the body has its own timeout.
                if let Some(proof) = proof {
                    proof.proven();
                }
                (verified, PendingBody::Parsed(read.await))
            }
            parsed = &mut read => (verify.await, PendingBody::Parsed(parsed)),
        }
    } else {
        (
            app.verify_session(token, key).await,
            PendingBody::Unread(body),
        )
    };
    match verified {
        Ok(Some(identity)) => {
            if let Some(proof) = proof {
                proof.proven();
            }
            Ok((identity, pending))
        }
        other => Err(rejected(other)),
    }
}

/// A request's credentials before [`authenticate`] verified them, and its connection's
/// [`Proof`](crate::http::admission::Proof) to redeem when they are valid.
struct Unverified<'a> {
    token: &'a str,
    key: &'a crate::session::sessions::TokenKey,
    headers: &'a HeaderMap,
    proof: Option<&'a crate::http::admission::Proof>,
}

/// The 404, 405 or 415 for a request that is not a JSON POST to the endpoint (checked after
/// the bearer token).
fn route_rejection(on_endpoint: bool, is_post: bool, is_json: bool) -> Option<Response> {
    if !on_endpoint {
        return Some(rpc::reject(
            StatusCode::NOT_FOUND,
            "Not Found: the MCP endpoint is /mcp/connector",
        ));
    }
    if !is_post {
        return Some(reject_with(
            StatusCode::METHOD_NOT_ALLOWED,
            "Method Not Allowed: this endpoint accepts POST only",
            header::ALLOW,
            "POST",
        ));
    }
    if !is_json {
        return Some(rpc::reject(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Unsupported Media Type: Content-Type must be application/json",
        ));
    }
    None
}

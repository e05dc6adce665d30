//! What a failed request to a remote upstream means for recovery: which request it was
//! ([`Kind`]), whether it may have run at the upstream ([`Fault`]), answers that name no
//! request, and a discovery a legacy server did not answer as one.

use reqwest::StatusCode;
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, RequestId, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, StreamableHttpError, StreamableHttpPostResponse,
};

use crate::error::{WorkerError, error_chain};
use crate::transport::http_body::{client, preview, status_error};

/// What a message is, as far as recovery cares.
pub(super) enum Kind {
    Initialize,
    Discover(RequestId),
    ToolsCall(RequestId),
    Other,
}

impl Kind {
    pub(super) fn of(message: &ClientJsonRpcMessage) -> Self {
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
pub(super) enum Failure {
    /// The answer itself is the error (401/403, an unreadable body, …).
    Error(StreamableHttpError<WorkerError>),
    /// The upstream or the connection failed the request.
    Fault(Fault),
}

/// A request that failed at the upstream.
pub(super) enum Fault {
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
    pub(super) fn may_have_reached(&self) -> bool {
        match self {
            Fault::Transport { reached, .. } => *reached,
            Fault::Status {
                session_rejected, ..
            } => !session_rejected,
        }
    }

    /// The error rmcp gets when this is not a fault of a running upstream.
    pub(super) fn into_error(self) -> StreamableHttpError<WorkerError> {
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
    pub(super) fn summary(&self) -> String {
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
pub(super) fn is_uncorrelated_error(message: &ServerJsonRpcMessage) -> bool {
    matches!(message, ServerJsonRpcMessage::Error(e) if e.id.is_none())
}

/// Whether a JSON answer to `server/discover` is a discovery result (a JSON-RPC error passes
/// too: rmcp falls back on it). A legacy server that answers every method it does not know
/// with an empty result (the conformance suite's `sse-retry` server does) is a legacy server:
/// rmcp would fail on that answer instead of falling back to `initialize`.
pub(super) fn is_discover_result(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body)
        .is_ok_and(|v| v.get("error").is_some() || v["result"].get("supportedVersions").is_some())
}

/// The error rmcp's lifecycle falls back to `initialize` on, for a discovery the server did
/// not answer as one.
pub(super) fn not_discovered(id: &RequestId, body: &[u8]) -> StreamableHttpPostResponse {
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
pub(super) fn login_expired(reason: String) -> StreamableHttpError<WorkerError> {
    StreamableHttpError::AuthRequired(AuthRequiredError::new(format!(
        "Bearer error=\"invalid_token\", error_description=\"{}\"",
        reason.replace('"', "'")
    )))
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
}

//! Why a request or the start-up failed, in words a person reads: JSON-RPC errors passed on
//! (redacted), 401/403 recognised through any error chain, the handshake's failures.

use rmcp::ServiceError;
use rmcp::service::ClientInitializeError;
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, InsufficientScopeError, StreamableHttpError,
};

use crate::error::{WorkerError, error_chain};
use crate::upstream::contract::CallFailure;
use crate::upstream::session::RmcpUpstream;

impl RmcpUpstream {
    pub(super) fn failure(&self, error: ServiceError) -> CallFailure {
        match error {
            // Passed on to the agent with the same code (SPEC §5), but never with a stored
            // secret in it (SPEC §9: not in error messages): an upstream that puts its key
            // into an error text gets `***` there.
            ServiceError::McpError(e) => CallFailure::Rpc {
                code: e.code.0,
                message: self.redactor.redact(&e.message),
                data: e
                    .data
                    .map(|d| crate::redact::redact_json(&self.redactor, d)),
            },
            ServiceError::TransportClosed => CallFailure::Closed,
            ServiceError::TransportSend(e) => match auth_failure(e.error.as_ref()) {
                Some(status) => CallFailure::Auth(status),
                None if let Some(detail) = unavailable_detail(e.error.as_ref()) => {
                    CallFailure::Unavailable(self.redactor.redact(detail))
                }
                None => {
                    let detail = self.redactor.redact(&error_chain(e.error.as_ref()));
                    tracing::warn!(error = %detail, "sending to the upstream failed");
                    CallFailure::Closed
                }
            },
            other => CallFailure::Other(self.redactor.redact(&other.to_string())),
        }
    }
}

/// The detail of a [`WorkerError::UpstreamUnavailable`] in an error's chain.
fn unavailable_detail<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a str> {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(StreamableHttpError::Client(WorkerError::UpstreamUnavailable { detail })) =
            e.downcast_ref::<StreamableHttpError<WorkerError>>()
        {
            return Some(detail);
        }
        current = e.source();
    }
    None
}

pub(super) fn init_failure(error: &ClientInitializeError) -> String {
    match error {
        ClientInitializeError::TransportError { error, context } => {
            format!("{context}: {}", error_chain(error.error.as_ref()))
        }
        ClientInitializeError::LegacyFallbackFailed { discover, fallback } => format!(
            "server/discover failed ({}), then initialize failed ({})",
            init_failure(discover),
            init_failure(fallback)
        ),
        ClientInitializeError::JsonRpcError(e) => {
            format!(
                "initialization failed: JSON-RPC error {}: {}",
                e.code.0, e.message
            )
        }
        other => format!("initialization failed: {other}"),
    }
}

/// The HTTP status, if initialization failed because the upstream refused our credentials.
pub(super) fn init_auth_failure(error: &ClientInitializeError) -> Option<String> {
    match error {
        ClientInitializeError::TransportError { error, .. } => auth_failure(error.error.as_ref()),
        ClientInitializeError::LegacyFallbackFailed { discover, fallback } => {
            init_auth_failure(discover).or_else(|| init_auth_failure(fallback))
        }
        _ => None,
    }
}

const UNAUTHORIZED: &str = "HTTP 401 Unauthorized";
const FORBIDDEN: &str = "HTTP 403 Forbidden";

/// The HTTP status, if an error (or any of its sources) is an HTTP 401/403 from the upstream.
fn auth_failure(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut current = Some(error);
    while let Some(e) = current {
        if e.is::<AuthRequiredError>() {
            return Some(UNAUTHORIZED.to_owned());
        }
        if e.is::<InsufficientScopeError>() {
            return Some(FORBIDDEN.to_owned());
        }
        // Our HTTP client answers every 401/403 with one of these two.
        if let Some(http) = e.downcast_ref::<StreamableHttpError<WorkerError>>() {
            match http {
                StreamableHttpError::AuthRequired(_) => return Some(UNAUTHORIZED.to_owned()),
                StreamableHttpError::InsufficientScope(_) => return Some(FORBIDDEN.to_owned()),
                _ => {}
            }
        }
        current = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_failures_are_recognised() {
        let challenge: StreamableHttpError<WorkerError> =
            StreamableHttpError::AuthRequired(AuthRequiredError::new("Bearer".to_owned()));
        assert_eq!(auth_failure(&challenge).as_deref(), Some(UNAUTHORIZED));
        let plain: StreamableHttpError<WorkerError> = StreamableHttpError::InsufficientScope(
            InsufficientScopeError::new(String::new(), None),
        );
        assert_eq!(auth_failure(&plain).as_deref(), Some(FORBIDDEN));
        let other: StreamableHttpError<WorkerError> =
            StreamableHttpError::UnexpectedServerResponse("HTTP 500 oops".into());
        assert_eq!(auth_failure(&other), None);
    }
}

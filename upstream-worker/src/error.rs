//! The crate's one error type.

use tutti_proto::transport::TransportError;

/// Everything that can stop the worker. Messages never contain a secret value: upstream
/// text is redacted before it is put into a variant.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// A required environment variable is missing or malformed.
    #[error("environment variable {var}: {problem}")]
    Env { var: &'static str, problem: String },
    /// `<state>/run` could not be created.
    #[error("cannot prepare the runtime directory: {0}")]
    RunDir(#[source] TransportError),
    /// The worker endpoint could not be bound.
    #[error("cannot listen on the worker endpoint: {0}")]
    Bind(#[source] TransportError),
    /// The worker gRPC server failed.
    #[error("worker gRPC server on {endpoint} failed: {source}")]
    Serve {
        endpoint: String,
        source: tonic::transport::Error,
    },
    /// The kernel endpoint could not be reached.
    #[error("cannot reach the kernel: {0}")]
    KernelConnect(#[source] TransportError),
    /// A kernel RPC failed.
    #[error("kernel {rpc} failed: {code:?}: {message}")]
    KernelRpc {
        rpc: &'static str,
        code: tonic::Code,
        message: String,
    },
    /// A kernel RPC did not answer in time.
    #[error("kernel {rpc} did not answer within {ms} ms")]
    KernelTimeout { rpc: &'static str, ms: u64 },
    /// The kernel answered RegisterWorker without a launch spec, or with one we cannot use.
    #[error("unusable launch spec: {problem}")]
    LaunchSpec { problem: String },
    /// The upstream could not be started, initialized or listed (message already redacted).
    #[error("{message}")]
    UpstreamStart { message: String },
    /// The upstream refused our credentials: HTTP 401/403 (message already redacted).
    #[error("{message}")]
    UpstreamAuth { message: String },
    /// An HTTP request to a remote upstream got no answer.
    #[error("HTTP request to the upstream failed: {0}")]
    UpstreamHttp(#[source] reqwest::Error),
    /// A remote upstream cannot serve a request now; the detail says why.
    #[error("{detail}")]
    UpstreamUnavailable { detail: String },
}

impl WorkerError {
    pub(crate) fn kernel_rpc(rpc: &'static str, status: &tonic::Status) -> Self {
        Self::KernelRpc {
            rpc,
            code: status.code(),
            message: status.message().to_owned(),
        }
    }
}

/// `error: source: source…` on one line.
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut out = error.to_string();
    let mut current = error.source();
    while let Some(e) = current {
        let text = e.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        current = e.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::transport::streamable_http_client::StreamableHttpError;

    #[test]
    fn error_chain_joins_sources() {
        let inner = std::io::Error::other("inner cause");
        let outer: StreamableHttpError<WorkerError> = StreamableHttpError::Io(inner);
        assert_eq!(error_chain(&outer), "Io error: inner cause");
    }
}

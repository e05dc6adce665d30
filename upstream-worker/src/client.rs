//! The worker's upstream client as a small library API: the same HTTP upstream,
//! handshake (`upstream::start`), paged `tools/list`, `tools/call` and OAuth bearer handling
//! ([`crate::transport::bearer`]) the worker process runs, without the kernel around it. The
//! official client conformance suite drives it through `tutti-conformance-client` (tests
//! crate), so the suite checks the code that serves real connectors, not a second client.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use rmcp::model::{ErrorCode, ErrorData, JsonObject};
use serde_json::Value;
use tutti_proto::kernel::{LaunchSpec, Transport};

use crate::error::WorkerError;
use crate::redact::Redactor;
use crate::transport::bearer::Bearer;
use crate::upstream::relay::{RelayTo, Relayed};
use crate::upstream::{self, CallFailure, Session, Upstream as _};

/// Gets a fresh access token and its expiry (Unix ms, 0 = unknown); the argument is the
/// token the upstream refused (empty for a renewal before expiry). In the worker this is the
/// kernel's `RefreshWorkerToken`; `Err` is the reason, without any token.
pub type Refresh =
    Arc<dyn Fn(String) -> BoxFuture<'static, Result<(String, i64), String>> + Send + Sync>;

/// An OAuth upstream's access token, as the launch spec gives it to a worker.
pub struct OAuthToken {
    pub access_token: String,
    /// Unix epoch ms; 0 when the server gave no lifetime.
    pub expires_unix_ms: i64,
    pub refresh: Refresh,
}

/// An OAuth upstream's bearer as a worker holds it: the current access token, renewed before
/// it expires and once after a 401, and what a refusal means (a new login, with the scope a
/// `403 insufficient_scope` asked for). Kept across connections and failed starts.
#[derive(Clone)]
pub struct OAuthCredentials(Arc<Bearer>);

impl OAuthCredentials {
    pub fn new(token: OAuthToken) -> Self {
        let authorization = format!("Bearer {}", token.access_token);
        Self(Arc::new(Bearer::new(
            &authorization,
            token.expires_unix_ms,
            token.refresh,
        )))
    }

    /// Why the connector needs a new login, and the scope a `403 insufficient_scope` asked
    /// for (empty when none): what the worker reports to the kernel as `auth_required`.
    pub fn needs_login(&self) -> Option<(String, String)> {
        self.0.needs_login()
    }
}

/// A remote (Streamable HTTP) upstream, initialized and listed.
pub struct HttpUpstream {
    session: Session,
    tools: Vec<Value>,
}

impl std::fmt::Debug for HttpUpstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpUpstream")
            .field("protocol_version", &self.session.protocol_version)
            .field("tools", &self.tools.len())
            .finish_non_exhaustive()
    }
}

impl HttpUpstream {
    /// Connects as a worker does: the handshake (2026-07-28 preferred, legacy fallback) and
    /// every page of `tools/list`, within `within`.
    pub async fn connect(
        url: &str,
        credentials: Option<&OAuthCredentials>,
        within: Duration,
    ) -> Result<Self, WorkerError> {
        let bearer = credentials.map(|c| c.0.clone());
        let mut headers = HashMap::new();
        let mut secrets = Vec::new();
        if let Some(bearer) = &bearer {
            let token = bearer
                .token()
                .await
                .map_err(|message| WorkerError::UpstreamAuth { message })?;
            headers.insert("Authorization".to_owned(), format!("Bearer {token}"));
            secrets.push(token);
        }
        let spec = LaunchSpec {
            transport: Transport::Http.into(),
            url: url.to_owned(),
            headers,
            oauth: bearer.is_some(),
            ..LaunchSpec::default()
        };
        let redactor = Arc::new(Redactor::new(secrets));
        let started = upstream::start(&spec, redactor, within, bearer).await?;
        Ok(Self {
            session: started.session,
            tools: started.tools,
        })
    }

    /// The protocol version the handshake settled on.
    pub fn protocol_version(&self) -> &str {
        &self.session.protocol_version
    }

    /// The tools of the first listing, each as the upstream's JSON object.
    pub fn tools(&self) -> &[Value] {
        &self.tools
    }

    /// Every page of `tools/list` again.
    pub async fn list_tools(&self) -> Result<Vec<Value>, String> {
        self.session
            .upstream
            .list_tools()
            .await
            .map_err(|f| describe(&f))
    }

    /// One `tools/call`: the upstream's `CallToolResult` as JSON text, or why there is none.
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: Option<JsonObject>,
    ) -> Result<String, String> {
        let call = self.session.upstream.call_tool(
            name.to_owned(),
            arguments,
            None,
            None,
            None,
            std::future::pending::<()>(),
        );
        match call.await {
            Ok(result) => result.map(text).map_err(|f| describe(&f)),
            Err(()) => Err("interrupted".to_owned()),
        }
    }

    /// One `tools/call` whose requests to the client (`elicitation/create`,
    /// `sampling/createMessage`, `roots/list`) go to `answer` with their method and params, as
    /// the worker relays them to an agent (SPEC §11); `answer` gives the result, or a JSON-RPC
    /// error code and message.
    pub async fn call_tool_answering(
        &self,
        name: &str,
        arguments: Option<JsonObject>,
        answer: impl Fn(&str, Value) -> Result<Value, (i32, String)>,
    ) -> Result<String, String> {
        let (sink, mut requests) = tokio::sync::mpsc::channel(16);
        let relay = RelayTo {
            sink,
            requests: true,
            logs: false,
            refuse: false,
            answers: None,
        };
        let upstream = &self.session.upstream;
        let call = upstream.call_tool(
            name.to_owned(),
            arguments,
            None,
            None,
            Some(relay),
            std::future::pending::<()>(),
        );
        let mut call = std::pin::pin!(call);
        loop {
            tokio::select! {
                result = &mut call => return match result {
                    Ok(result) => result.map(text).map_err(|f| describe(&f)),
                    Err(()) => Err("interrupted".to_owned()),
                },
                Some(relayed) = requests.recv() => {
                    if let Relayed::Request { id, method, params_json, .. } = relayed {
                        let params = serde_json::from_str(&params_json).unwrap_or(Value::Null);
                        let answered = answer(&method, params)
                            .map_err(|(code, message)| ErrorData::new(ErrorCode(code), message, None));
                        upstream.answer_request(&id, answered);
                    }
                }
            }
        }
    }

    /// Closes the session (and the HTTP session with the upstream).
    pub async fn stop(self) {
        self.session.stop().await;
    }
}

/// A result's JSON text as a string (the upstream's bytes, already checked as JSON).
fn text(result: bytes::Bytes) -> String {
    String::from_utf8_lossy(&result).into_owned()
}

fn describe(failure: &CallFailure) -> String {
    match failure {
        CallFailure::Rpc { code, message, .. } => format!("JSON-RPC error {code}: {message}"),
        CallFailure::Closed => "the connection to the upstream is closed".to_owned(),
        CallFailure::Auth(status) => format!("the upstream refused the credentials ({status})"),
        CallFailure::TooLarge(limit) => format!("an answer larger than {limit} bytes"),
        CallFailure::Unavailable(detail) | CallFailure::Other(detail) => detail.clone(),
    }
}

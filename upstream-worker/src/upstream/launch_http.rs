//! Starting a remote upstream over Streamable HTTP: our HTTP client under rmcp's transport,
//! the launch spec's headers, the handshake (2026-07-28 discovery, else `initialize`) within
//! the start timeout.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::ProtocolVersion;
use rmcp::service::{ClientLifecycleMode, serve_client_with_lifecycle};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use tokio::sync::{Notify, mpsc};
use tutti_proto::kernel::LaunchSpec;

use crate::error::WorkerError;
use crate::redact::Redactor;
use crate::transport::bearer::Bearer;
use crate::transport::http::HttpClient;
use crate::transport::results::CallResults;
use crate::upstream::failure::{init_auth_failure, init_failure};
use crate::upstream::handler::Handler;
use crate::upstream::session::{
    ServiceWatch, Session, Started, first_listing, start_timeout, subscribe_list_changed,
};

/// Largest HTTP JSON response / SSE event we accept from a remote upstream.
const MAX_HTTP_MESSAGE: usize = 64 * 1024 * 1024;

/// The launch spec's HTTP headers, each marked sensitive (they may carry credentials).
fn http_headers(
    spec: &LaunchSpec,
) -> Result<HashMap<reqwest::header::HeaderName, reqwest::header::HeaderValue>, WorkerError> {
    let mut headers = HashMap::new();
    for (name, value) in &spec.headers {
        let header_name =
            reqwest::header::HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                WorkerError::LaunchSpec {
                    problem: format!("invalid HTTP header name {name:?}"),
                }
            })?;
        let mut header_value =
            reqwest::header::HeaderValue::from_str(value).map_err(|_| WorkerError::LaunchSpec {
                problem: format!("invalid value for HTTP header {name:?}"),
            })?;
        header_value.set_sensitive(true);
        headers.insert(header_name, header_value);
    }
    Ok(headers)
}

pub(super) async fn start_http(
    spec: &LaunchSpec,
    redactor: Arc<Redactor>,
    within: Duration,
    bearer: Option<Arc<Bearer>>,
) -> Result<Started, WorkerError> {
    let headers = http_headers(spec)?;
    let config = StreamableHttpClientTransportConfig::with_uri(spec.url.as_str())
        .custom_headers(headers)
        .max_json_response_size(MAX_HTTP_MESSAGE)
        .max_sse_event_size(MAX_HTTP_MESSAGE);
    let results = Arc::new(CallResults::default());
    let (events_tx, session_events) = mpsc::unbounded_channel();
    let client = HttpClient::new(results.clone(), events_tx).with_bearer(bearer);
    let transport = StreamableHttpClientTransport::with_client(client.clone(), config);
    let list_changed = Arc::new(Notify::new());

    let handshake = async {
        let running = serve_client_with_lifecycle(
            Handler::new(list_changed.clone()),
            transport,
            ClientLifecycleMode::Auto {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                legacy_version: Some(ProtocolVersion::V_2025_06_18),
            },
        )
        .await
        .map_err(|e| {
            if let Some(status) = init_auth_failure(&e) {
                WorkerError::UpstreamAuth {
                    message: format!("the upstream refused the credentials ({status})"),
                }
            } else {
                WorkerError::UpstreamStart {
                    message: redactor.redact(&init_failure(&e)),
                }
            }
        })?;
        let listed = first_listing(running, redactor.clone(), Some(results)).await;
        listed.map_err(|message| WorkerError::UpstreamStart {
            message: redactor.redact(&message),
        })
    };
    let (running, upstream, (protocol_version, server_name), tools) =
        match tokio::time::timeout(within, handshake).await {
            Ok(res) => res?,
            Err(_) => {
                return Err(WorkerError::UpstreamStart {
                    message: start_timeout(within),
                });
            }
        };
    client.mark_started();
    subscribe_list_changed(&running, list_changed.clone());
    Ok(Started {
        session: Session {
            upstream,
            protocol_version,
            server_name,
            list_changed,
            non_json: None,
            session_events: Some(session_events),
            service: ServiceWatch::spawn(running),
            child: None,
        },
        tools,
    })
}

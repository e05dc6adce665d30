//! Our side of the control plane: RegisterWorker, OfferTools, ReportWorker.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tonic::transport::Channel;
use tutti_proto::kernel::workers_client::WorkersClient;
use tutti_proto::kernel::{
    LaunchSpec, OfferToolsReply, OfferToolsRequest, OfferedPrompt, OfferedResource, OfferedTool,
    RefreshWorkerTokenRequest, RegisterWorkerRequest, WorkerReport, WorkerReportKind,
};
use tutti_proto::limits::{self, OfferedList};
use tutti_proto::transport;

use crate::control::offer::{offered, offered_resources, string_field, within_limits};
use crate::error::WorkerError;
use crate::transport::bearer::Bearer;
use crate::upstream::Catalog;

/// How long a kernel RPC may take before we give up on it.
const RPC_TIMEOUT: Duration = Duration::from_secs(15);

/// Who we are, for every kernel RPC (the token proves the spawn; it is never logged).
#[derive(Clone)]
pub(crate) struct KernelLink {
    client: WorkersClient<Channel>,
    key: String,
    generation: u64,
    token: String,
    /// An OAuth upstream's access token (SPEC §10), renewed through this link.
    bearer: Option<Arc<Bearer>>,
}

impl KernelLink {
    pub(crate) async fn connect(
        state_dir: &Path,
        key: &str,
        generation: u64,
        token: &str,
    ) -> Result<Self, WorkerError> {
        let endpoint = transport::kernel_endpoint(state_dir);
        let channel = transport::connect(&endpoint)
            .await
            .map_err(WorkerError::KernelConnect)?;
        Ok(Self {
            client: WorkersClient::new(channel),
            key: key.to_owned(),
            generation,
            token: token.to_owned(),
            bearer: None,
        })
    }

    /// For an OAuth connector: the bearer whose renewals ask the kernel.
    pub(crate) fn with_oauth(mut self, spec: &LaunchSpec) -> Self {
        if spec.oauth {
            let link = self.clone();
            let refresher: crate::transport::bearer::Refresher =
                Arc::new(move |rejected: String| {
                    let link = link.clone();
                    Box::pin(async move { link.refresh_token(rejected).await })
                });
            let authorization = spec.headers.get("Authorization").map_or("", String::as_str);
            self.bearer = Some(Arc::new(Bearer::new(
                authorization,
                spec.oauth_expires_unix_ms,
                refresher,
            )));
        }
        self
    }

    pub(crate) fn bearer(&self) -> Option<Arc<Bearer>> {
        self.bearer.clone()
    }

    /// `RefreshWorkerToken`: the new access token and its expiry, or why there is none.
    async fn refresh_token(&self, rejected: String) -> Result<(String, i64), String> {
        let mut client = self.client.clone();
        let request = RefreshWorkerTokenRequest {
            key: self.key.clone(),
            generation: self.generation,
            worker_token: self.token.clone(),
            rejected,
        };
        match Self::rpc("RefreshWorkerToken", client.refresh_worker_token(request)).await {
            Ok(reply) => Ok((reply.access_token, reply.expires_unix_ms)),
            Err(WorkerError::KernelRpc { message, .. }) => Err(message),
            Err(e) => Err(e.to_string()),
        }
    }

    async fn rpc<T, F>(rpc: &'static str, call: F) -> Result<T, WorkerError>
    where
        F: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        match tokio::time::timeout(RPC_TIMEOUT, call).await {
            Ok(Ok(reply)) => Ok(reply.into_inner()),
            Ok(Err(status)) => Err(WorkerError::kernel_rpc(rpc, &status)),
            Err(_) => Err(WorkerError::KernelTimeout {
                rpc,
                ms: u64::try_from(RPC_TIMEOUT.as_millis()).unwrap_or(u64::MAX),
            }),
        }
    }

    /// Proves who we are and gets the launch spec.
    pub(crate) async fn register(
        &self,
        endpoint: &str,
        data_endpoint: &str,
    ) -> Result<LaunchSpec, WorkerError> {
        let mut client = self.client.clone();
        let request = RegisterWorkerRequest {
            key: self.key.clone(),
            generation: self.generation,
            worker_token: self.token.clone(),
            endpoint: endpoint.to_owned(),
            pid: std::process::id(),
            data_endpoint: data_endpoint.to_owned(),
        };
        let reply = Self::rpc("RegisterWorker", client.register_worker(request)).await?;
        reply.launch.ok_or_else(|| WorkerError::LaunchSpec {
            problem: "RegisterWorker returned no launch spec".to_owned(),
        })
    }

    /// Offers the complete tool set of this generation, with its prompts and resources.
    pub(crate) async fn offer(
        &self,
        tools: &[serde_json::Value],
        catalog: &Catalog,
        protocol_version: &str,
        server_name: &str,
    ) -> Result<OfferToolsReply, WorkerError> {
        let mut client = self.client.clone();
        let prompts = catalog
            .prompts
            .iter()
            .map(|p| OfferedPrompt {
                upstream_name: string_field(p, "name"),
                definition_json: p.to_string(),
            })
            .collect();
        let prompt_bytes =
            |p: &OfferedPrompt| limits::item_bytes(&p.upstream_name, &p.definition_json);
        let resource_bytes = |r: &OfferedResource| limits::item_bytes(&r.uri, &r.definition_json);
        let tool_bytes = |t: &OfferedTool| limits::tool_bytes(&t.upstream_name, &t.definition_json);
        let tools = within_limits(OfferedList::Tools, offered(tools), tool_bytes);
        let prompts = within_limits(OfferedList::Prompts, prompts, prompt_bytes);
        let resources = within_limits(
            OfferedList::Resources,
            offered_resources(&catalog.resources, "uri"),
            resource_bytes,
        );
        let templates = within_limits(
            OfferedList::ResourceTemplates,
            offered_resources(&catalog.templates, "uriTemplate"),
            resource_bytes,
        );
        let request = OfferToolsRequest {
            key: self.key.clone(),
            generation: self.generation,
            worker_token: self.token.clone(),
            tools: tools.items,
            protocol_version: protocol_version.to_owned(),
            server_name: server_name.to_owned(),
            withheld_tools: tools.withheld,
            withheld_bytes: tools.withheld_bytes,
            prompts: prompts.items,
            resources: resources.items,
            resource_templates: templates.items,
            completions: catalog.completions,
            resources_subscribe: catalog.subscribe,
            withheld_prompts: prompts.withheld,
            withheld_prompt_bytes: prompts.withheld_bytes,
            withheld_resources: resources.withheld,
            withheld_resource_bytes: resources.withheld_bytes,
            withheld_templates: templates.withheld,
            withheld_template_bytes: templates.withheld_bytes,
        };
        Self::rpc("OfferTools", client.offer_tools(request)).await
    }

    /// Tells the kernel what we observed; failures are only logged.
    /// An OAuth connector's refused credentials mean a new login (`AuthRequired`, with the
    /// reason the bearer knows and a step-up scope).
    pub(crate) async fn report(&self, kind: WorkerReportKind, message: &str, count: u64) {
        let mut client = self.client.clone();
        let (mut kind, mut message, mut scope) = (kind, message.to_owned(), String::new());
        if kind == WorkerReportKind::AuthFailed
            && let Some(bearer) = &self.bearer
        {
            kind = WorkerReportKind::AuthRequired;
            if let Some((why, step_up)) = bearer.needs_login() {
                (message, scope) = (why, step_up);
            }
        }
        let request = WorkerReport {
            key: self.key.clone(),
            generation: self.generation,
            worker_token: self.token.clone(),
            kind: kind.into(),
            message,
            count,
            scope,
        };
        if let Err(e) = Self::rpc("ReportWorker", client.report_worker(request)).await {
            tracing::warn!(%kind, error = %e, "could not report to the kernel");
        }
    }
}

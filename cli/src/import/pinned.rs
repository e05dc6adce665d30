//! An entry that runs a package, staged pinned by the kernel's market (SPEC §17/§18): the
//! package the launch names at the version given (else the latest), with the entry's own
//! arguments, plain env and secret names added to the pinned launch.

use serde_json::Value;
use tutti_proto::kernel::{DiscardRequest, StageReply, StageRequest};

use super::launch::Packaged;
use super::release::Built;
use crate::kernel::Kernel;

/// Asks the market to stage `package` as connector `key`; `Err(reason)` (one line) when it
/// cannot be pinned.
pub(super) async fn stage(
    kernel: &mut Kernel,
    package: &Packaged,
    built: &Built,
    key: &str,
) -> Result<StageReply, String> {
    let mcp = &built.manifest["mcp"];
    let extra_env = mcp["env"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
        .collect();
    let request = StageRequest {
        source: package.source.clone(),
        key: key.to_owned(),
        package_index: -1,
        remote_index: -1,
        extra_args: package.args.clone(),
        extra_runtime_args: package.runtime_args.clone(),
        extra_env,
        extra_secrets: strings(&mcp["secrets"]),
        ..Default::default()
    };
    crate::commands::market::stage(kernel, request, false)
        .await
        .map_err(|e| match e {
            crate::error::CliError::Kernel { message, .. }
            | crate::error::CliError::Market(message) => message,
            other => other.to_string(),
        })
}

/// The staged folder goes (installed or not).
pub(super) async fn discard(kernel: &mut Kernel, staged: &StageReply) {
    let request = DiscardRequest {
        staging_dir: staged.staging_dir.clone(),
    };
    if let Err(status) = kernel.market().discard_staged(request).await {
        tracing::warn!(error = %status.message(), "the staged release was not removed");
    }
}

/// The confirmation's pinning line: package@version and how many artefacts.
pub(super) fn describe(package: &Packaged, staged: &StageReply) -> String {
    let name = package
        .source
        .split_once(':')
        .map_or(package.source.as_str(), |(_, n)| n);
    let pinned = match name.char_indices().skip(1).find(|(_, c)| *c == '@') {
        _ if package.source.starts_with("oci:") => name.to_owned(),
        Some((i, _)) => format!("{}@{}", &name[..i], staged.version),
        None => format!("{name}@{}", staged.version),
    };
    format!(
        "{} ({} artefacts, {} bytes)",
        crate::output::visible(&pinned),
        staged.artefacts,
        staged.total_bytes
    )
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_owned))
        .collect()
}

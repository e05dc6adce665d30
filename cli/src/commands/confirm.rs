//! `tutti confirm list [--json]` and `tutti confirm allow|deny ID` (SPEC §12): the high-risk
//! calls the kernel holds for the person's confirmation (`--confirm-via person`), their
//! arguments as the frontend showed them (secret-looking keys masked, long values cut), and
//! the person's answer.

use std::path::Path;
use std::process::ExitCode;

use serde::Serialize;
use tutti_proto::kernel::{AnswerConfirmationRequest, Empty, HeldCall, PendingConfirmation};

use crate::error::CliError;
use crate::kernel::Kernel;
use crate::output::{emit, json_line, one_line, table};

/// Widest the arguments' cell gets in the table (`--json` has them whole, as shown).
const ARGUMENTS_CELL: usize = 80;

pub(crate) async fn list(state_dir: &Path, json: bool) -> Result<ExitCode, CliError> {
    let mut kernel = Kernel::connect(state_dir).await?;
    let pending = kernel
        .client
        .list_confirmations(Empty {})
        .await
        .map_err(|status| kernel.error(status))?
        .into_inner()
        .pending;
    let text = if json {
        json_line(&ListJson {
            pending: pending.iter().map(PendingJson::from).collect(),
        })?
    } else if pending.is_empty() {
        "No call waits for confirmation.\n".to_owned()
    } else {
        render(&pending)
    };
    emit(&text)?;
    Ok(ExitCode::SUCCESS)
}

fn render(pending: &[PendingConfirmation]) -> String {
    let rows: Vec<Vec<String>> = pending
        .iter()
        .map(|p| {
            let call = p.call.clone().unwrap_or_default();
            vec![
                p.id.clone(),
                call.connector.clone(),
                call.tool.clone(),
                call.workspace.clone(),
                call.session.clone(),
                format!("{}s", p.remaining_ms.div_ceil(1000)),
                one_line(&arguments_text(&call), ARGUMENTS_CELL),
            ]
        })
        .collect();
    let headers = [
        "ID",
        "CONNECTOR",
        "TOOL",
        "WORKSPACE",
        "SESSION",
        "LEFT",
        "ARGUMENTS",
    ];
    let mut out = table(&headers, &rows);
    out.push_str("Answer with `tutti confirm allow ID` or `tutti confirm deny ID`.\n");
    out
}

/// `name=value, …` (the values as the frontend showed them).
fn arguments_text(p: &HeldCall) -> String {
    let mut parts: Vec<String> = p
        .arguments
        .iter()
        .map(|a| match a.name.as_str() {
            "" => a.value.clone(),
            name => format!("{name}={}", a.value),
        })
        .collect();
    if p.more_arguments > 0 {
        parts.push(format!("… and {} more", p.more_arguments));
    }
    if parts.is_empty() {
        "(none)".to_owned()
    } else {
        parts.join(", ")
    }
}

/// `tutti confirm allow ID` (`allow`) or `tutti confirm deny ID`.
pub(crate) async fn answer(
    state_dir: &Path,
    id: String,
    allow: bool,
) -> Result<ExitCode, CliError> {
    let mut kernel = Kernel::connect(state_dir).await?;
    kernel
        .client
        .answer_confirmation(AnswerConfirmationRequest {
            id: id.clone(),
            allow,
        })
        .await
        .map_err(|status| kernel.error(status))?;
    emit(&if allow {
        format!("allowed {id}: the call is sent now\n")
    } else {
        format!("denied {id}: the call is refused and nothing was sent\n")
    })?;
    Ok(ExitCode::SUCCESS)
}

// === JSON ===

#[derive(Serialize)]
struct ListJson {
    pending: Vec<PendingJson>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PendingJson {
    id: String,
    connector: String,
    tool: String,
    risk: String,
    arguments: Vec<ArgumentJson>,
    more_arguments: u32,
    workspace: String,
    session: String,
    remaining_ms: u64,
}

#[derive(Serialize)]
struct ArgumentJson {
    name: String,
    value: String,
}

impl From<&PendingConfirmation> for PendingJson {
    fn from(p: &PendingConfirmation) -> Self {
        let call = p.call.clone().unwrap_or_default();
        Self {
            id: p.id.clone(),
            connector: call.connector,
            tool: call.tool,
            risk: call.risk,
            arguments: call
                .arguments
                .iter()
                .map(|a| ArgumentJson {
                    name: a.name.clone(),
                    value: a.value.clone(),
                })
                .collect(),
            more_arguments: call.more_arguments,
            workspace: call.workspace,
            session: call.session,
            remaining_ms: p.remaining_ms,
        }
    }
}

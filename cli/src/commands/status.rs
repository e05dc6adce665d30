//! `tutti status [--json]`.

use std::path::Path;
use std::process::ExitCode;

use serde::Serialize;
use tutti_proto::kernel::{ConnectorStatus, Empty, StatusReply};

use crate::error::CliError;
use crate::kernel::Kernel;
use crate::output::{emit, json_line, local_time, one_line, rfc3339_utc, table};

pub(crate) async fn run(state_dir: &Path, json: bool) -> Result<ExitCode, CliError> {
    let mut kernel = Kernel::connect(state_dir).await?;
    let reply = kernel
        .client
        .status(Empty {})
        .await
        .map_err(|status| kernel.error(status))?
        .into_inner();
    let text = if json {
        json_line(&StatusJson::new(&reply, state_dir))?
    } else {
        render_table(&reply, state_dir)
    };
    emit(&text)?;
    Ok(ExitCode::SUCCESS)
}

// === JSON ===

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct StatusJson {
    kernel: KernelJson,
    frontend_url: Option<String>,
    bin_dir: String,
    route_revision: u64,
    audit_dropped: u64,
    connectors: Vec<ConnectorJson>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct KernelJson {
    pid: u32,
    state_dir: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ConnectorJson {
    key: String,
    name: String,
    version: String,
    generation: Option<u64>,
    status: String,
    tool_count: u32,
    restarts: u32,
    /// Sessions of a remote upstream initialized again after they failed.
    reinitializations: u32,
    last_error: Option<String>,
    next_retry_at: Option<String>,
    non_json_stdout_lines: u64,
    risk: RiskJson,
    /// An OAuth connector (SPEC §10): when its access token expires (never the token).
    #[serde(skip_serializing_if = "Option::is_none")]
    token_expires_at: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct RiskJson {
    low: u32,
    medium: u32,
    high: u32,
    high_tools: Vec<String>,
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

fn state_dir_of(reply: &StatusReply, state_dir: &Path) -> String {
    non_empty(&reply.state_dir).unwrap_or_else(|| state_dir.display().to_string())
}

fn sorted(reply: &StatusReply) -> Vec<&ConnectorStatus> {
    let mut connectors: Vec<&ConnectorStatus> = reply.connectors.iter().collect();
    connectors.sort_by(|a, b| a.key.cmp(&b.key));
    connectors
}

impl StatusJson {
    fn new(reply: &StatusReply, state_dir: &Path) -> Self {
        Self {
            kernel: KernelJson {
                pid: reply.kernel_pid,
                state_dir: state_dir_of(reply, state_dir),
            },
            frontend_url: non_empty(&reply.frontend_url),
            bin_dir: reply.bin_dir.clone(),
            route_revision: reply.route_revision,
            audit_dropped: reply.audit_dropped,
            connectors: sorted(reply)
                .into_iter()
                .map(|c| ConnectorJson {
                    key: c.key.clone(),
                    name: c.name.clone(),
                    version: c.version.clone(),
                    generation: (c.generation != 0).then_some(c.generation),
                    status: c.status.clone(),
                    tool_count: c.tool_count,
                    restarts: c.restarts,
                    reinitializations: c.reinitializations,
                    last_error: non_empty(&c.last_error),
                    next_retry_at: rfc3339_utc(c.next_retry_unix_ms),
                    non_json_stdout_lines: c.non_json_stdout_lines,
                    risk: RiskJson {
                        low: c.risk_low,
                        medium: c.risk_medium,
                        high: c.risk_high,
                        high_tools: c.high_risk_tools.clone(),
                    },
                    token_expires_at: if c.oauth {
                        rfc3339_utc(c.token_expires_unix_ms)
                    } else {
                        None
                    },
                })
                .collect(),
        }
    }
}

// === table ===

fn status_cell(c: &ConnectorStatus) -> String {
    let retrying = matches!(c.status.as_str(), "crash_loop" | "restarting");
    match local_time(c.next_retry_unix_ms) {
        Some(at) if retrying => format!("{} (next retry {at})", c.status),
        _ => match local_time(c.token_expires_unix_ms) {
            Some(at) if c.oauth && c.status == "ready" => {
                format!("{} (token expires {at})", c.status)
            }
            _ => c.status.clone(),
        },
    }
}

fn render_table(reply: &StatusReply, state_dir: &Path) -> String {
    let mut out = String::new();
    out.push_str(&format!("kernel: running (pid {})\n", reply.kernel_pid));
    out.push_str(&format!("state dir: {}\n", state_dir_of(reply, state_dir)));
    let frontend = non_empty(&reply.frontend_url).unwrap_or_else(|| "not running".to_owned());
    out.push_str(&format!("frontend: {frontend}\n"));
    out.push_str(&format!("bin dir: {}\n", reply.bin_dir));
    if reply.audit_dropped > 0 {
        out.push_str(&format!(
            "audit: {} records dropped (the writer could not keep up; see logs/kernel.log)\n",
            reply.audit_dropped
        ));
    }
    out.push('\n');
    if reply.connectors.is_empty() {
        out.push_str("no connectors installed (add one with `tutti connector install DIR`)\n");
        return out;
    }
    let rows: Vec<Vec<String>> = sorted(reply)
        .into_iter()
        .map(|c| {
            vec![
                c.key.clone(),
                c.version.clone(),
                if c.generation == 0 {
                    "-".to_owned()
                } else {
                    c.generation.to_string()
                },
                status_cell(c),
                c.tool_count.to_string(),
                c.restarts.to_string(),
                format!("{}/{}/{}", c.risk_low, c.risk_medium, c.risk_high),
                if c.last_error.is_empty() {
                    "-".to_owned()
                } else {
                    // The last column runs on: the end of an error is often its fix.
                    one_line(&c.last_error, 600)
                },
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "KEY",
            "VERSION",
            "GEN",
            "STATUS",
            "TOOLS",
            "RESTARTS",
            "RISK l/m/h",
            "LAST ERROR",
        ],
        &rows,
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn reply() -> StatusReply {
        StatusReply {
            frontend_url: "http://127.0.0.1:4000/mcp/connector".into(),
            route_revision: 7,
            state_dir: "/s".into(),
            kernel_pid: 42,
            audit_dropped: 0,
            bin_dir: "/s/bin".into(),
            connectors: vec![
                ConnectorStatus {
                    key: "zeta".into(),
                    name: "Zeta".into(),
                    version: "0.1.0".into(),
                    generation: 0,
                    status: "crash_loop".into(),
                    tool_count: 0,
                    restarts: 5,
                    reinitializations: 0,
                    last_error: "upstream exited\nwith status 1".into(),
                    next_retry_unix_ms: 1_764_424_800_123,
                    non_json_stdout_lines: 3,
                    has_mcp: true,
                    has_cli: false,
                    risk_low: 0,
                    risk_medium: 0,
                    risk_high: 0,
                    high_risk_tools: vec![],
                    oauth: false,
                    token_expires_unix_ms: 0,
                },
                ConnectorStatus {
                    key: "github".into(),
                    name: "GitHub".into(),
                    version: "1.4.0".into(),
                    generation: (3u64 << 32) | 1,
                    status: "ready".into(),
                    tool_count: 4,
                    restarts: 0,
                    reinitializations: 2,
                    last_error: String::new(),
                    next_retry_unix_ms: 0,
                    non_json_stdout_lines: 0,
                    has_mcp: true,
                    has_cli: true,
                    risk_low: 2,
                    risk_medium: 1,
                    risk_high: 1,
                    high_risk_tools: vec!["github_delete_repo".into()],
                    oauth: false,
                    token_expires_unix_ms: 0,
                },
            ],
        }
    }

    #[test]
    fn json_shape() {
        let text = json_line(&StatusJson::new(&reply(), Path::new("/other"))).unwrap_or_default();
        let got: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        assert_eq!(
            got,
            json!({
                "kernel": {"pid": 42, "stateDir": "/s"},
                "frontendUrl": "http://127.0.0.1:4000/mcp/connector",
                "binDir": "/s/bin",
                "routeRevision": 7,
                "auditDropped": 0,
                "connectors": [
                    {"key": "github", "name": "GitHub", "version": "1.4.0",
                     "generation": (3u64 << 32) | 1, "status": "ready", "toolCount": 4,
                     "restarts": 0, "reinitializations": 2, "lastError": null, "nextRetryAt": null,
                     "nonJsonStdoutLines": 0,
                     "risk": {"low": 2, "medium": 1, "high": 1, "highTools": ["github_delete_repo"]}},
                    {"key": "zeta", "name": "Zeta", "version": "0.1.0", "generation": null,
                     "status": "crash_loop", "toolCount": 0, "restarts": 5, "reinitializations": 0,
                     "lastError": "upstream exited\nwith status 1",
                     "nextRetryAt": "2025-11-29T14:00:00.123Z", "nonJsonStdoutLines": 3,
                     "risk": {"low": 0, "medium": 0, "high": 0, "highTools": []}}
                ]
            })
        );
    }

    #[test]
    fn json_without_frontend_is_null() {
        let mut r = reply();
        r.frontend_url.clear();
        r.state_dir.clear();
        let text = json_line(&StatusJson::new(&r, Path::new("/other"))).unwrap_or_default();
        let got: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        assert_eq!(got["frontendUrl"], Value::Null);
        assert_eq!(got["kernel"]["stateDir"], "/other");
    }

    #[test]
    fn table_shape() {
        let text = render_table(&reply(), Path::new("/s"));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "kernel: running (pid 42)");
        assert_eq!(lines[1], "state dir: /s");
        assert_eq!(lines[2], "frontend: http://127.0.0.1:4000/mcp/connector");
        assert_eq!(lines[3], "bin dir: /s/bin");
        assert!(lines[5].starts_with("KEY"), "{text}");
        for col in [
            "VERSION",
            "GEN",
            "STATUS",
            "TOOLS",
            "RESTARTS",
            "RISK l/m/h",
            "LAST ERROR",
        ] {
            assert!(lines[5].contains(col), "{col}: {text}");
        }
        assert!(lines[6].starts_with("github"), "{text}");
        assert!(lines[6].contains("2/1/1"), "{text}");
        assert!(lines[7].starts_with("zeta"), "{text}");
        assert!(lines[7].contains("crash_loop (next retry "), "{text}");
        assert!(lines[7].contains("upstream exited with status 1"), "{text}");
        assert_eq!(lines.len(), 8, "{text}");
    }

    #[test]
    fn table_without_connectors_says_so() {
        let mut r = reply();
        r.connectors.clear();
        let text = render_table(&r, Path::new("/s"));
        assert!(text.contains("no connectors installed"), "{text}");
    }
}

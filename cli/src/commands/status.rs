//! `tutti status [--json] [--watch]`.

use std::path::Path;
use std::process::ExitCode;

use serde::Serialize;
use tutti_proto::kernel::{ConnectorStatus, Empty, StatusReply};

use super::status_telemetry::TelemetryDroppedJson;
use crate::error::CliError;
use crate::kernel::Kernel;
use crate::output::{emit, json_line, local_time, one_line, rfc3339_utc, table};

pub(crate) async fn run(state_dir: &Path, json: bool) -> Result<ExitCode, CliError> {
    let mut kernel = Kernel::connect(state_dir).await?;
    let reply = fetch(&mut kernel).await?;
    emit(&render(&reply, state_dir, json, false)?)?;
    Ok(ExitCode::SUCCESS)
}

/// One `Status` answer.
pub(super) async fn fetch(kernel: &mut Kernel) -> Result<StatusReply, CliError> {
    Ok(kernel
        .client
        .status(Empty {})
        .await
        .map_err(|status| kernel.error(status))?
        .into_inner())
}

/// The JSON line or the table (with a calls/s sparkline column when `sparkline`).
pub(super) fn render(
    reply: &StatusReply,
    state_dir: &Path,
    json: bool,
    sparkline: bool,
) -> Result<String, CliError> {
    if json {
        json_line(&StatusJson::new(reply, state_dir))
    } else {
        Ok(render_table_with(reply, state_dir, sparkline))
    }
}

// === JSON ===

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct StatusJson {
    kernel: KernelJson,
    frontend_url: Option<String>,
    bin_dir: String,
    route_revision: u64,
    /// `registry.json`'s revision: it grows with every change of the installed state.
    registry_revision: u64,
    audit_dropped: u64,
    /// High-risk calls waiting for the person's confirmation (`tutti confirm list`).
    confirmations_waiting: u32,
    /// Spans dropped from the OpenTelemetry export queues; absent when none were.
    #[serde(skip_serializing_if = "Option::is_none")]
    telemetry_dropped: Option<TelemetryDroppedJson>,
    connectors: Vec<ConnectorJson>,
    /// Resource URIs (and identical URI templates) that several ready connectors claim: no
    /// connector serves them (SPEC §11).
    resource_clashes: Vec<ClashJson>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ClashJson {
    uri: String,
    /// `resource` or `template`.
    kind: String,
    connectors: Vec<String>,
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
    /// An offer adds or changes pinned definitions (`tutti connector review KEY`).
    changes_await_review: bool,
    /// `added a; changed b` while changes await review.
    review: Option<String>,
    /// The circuit breaker: closed | open | half_open.
    circuit: String,
    /// `KEY: circuit open after N failures; retry in S s` while it is not closed.
    circuit_note: Option<String>,
    prompt_count: u32,
    resource_count: u32,
    resource_template_count: u32,
    /// tools/call figures over the last `windowSeconds` (SPEC §14).
    calls: CallsJson,
    /// An OAuth connector (SPEC §10): when its access token expires (never the token).
    #[serde(skip_serializing_if = "Option::is_none")]
    token_expires_at: Option<String>,
    /// An OAuth connector: the account its login belongs to, where the server said which.
    #[serde(skip_serializing_if = "Option::is_none")]
    oauth_account: Option<String>,
    /// Imported with `--no-pin`: its command runs as written (SPEC §18).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    unpinned: bool,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct CallsJson {
    window_seconds: u32,
    total: u64,
    errors: u64,
    errors_by_outcome: std::collections::BTreeMap<String, u64>,
    /// Latency percentiles in milliseconds (microsecond precision); null without calls.
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
    /// Calls per second over the last minute, oldest first.
    per_second: Vec<u32>,
}

impl CallsJson {
    fn new(c: &ConnectorStatus) -> Self {
        let f = c.call_figures.clone().unwrap_or_default();
        let ms = |us: u64| (f.calls > 0).then(|| us as f64 / 1000.0);
        Self {
            window_seconds: f.window_seconds,
            total: f.calls,
            errors: f.errors,
            errors_by_outcome: f.errors_by_outcome.into_iter().collect(),
            p50_ms: ms(f.p50_us),
            p99_ms: ms(f.p99_us),
            per_second: f.calls_per_second,
        }
    }
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
            registry_revision: reply.registry_revision,
            audit_dropped: reply.audit_dropped,
            confirmations_waiting: reply.confirmations_waiting,
            telemetry_dropped: TelemetryDroppedJson::of(reply),
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
                    changes_await_review: c.changes_await_review,
                    review: non_empty(&c.review_summary),
                    circuit: non_empty(&c.circuit).unwrap_or_else(|| "closed".to_owned()),
                    circuit_note: non_empty(&c.circuit_note),
                    prompt_count: c.prompt_count,
                    resource_count: c.resource_count,
                    resource_template_count: c.resource_template_count,
                    calls: CallsJson::new(c),
                    token_expires_at: if c.oauth {
                        rfc3339_utc(c.token_expires_unix_ms)
                    } else {
                        None
                    },
                    oauth_account: non_empty(&c.oauth_account),
                    unpinned: crate::import::unpinned(state_dir, &c.key, &c.sha256),
                })
                .collect(),
            resource_clashes: reply
                .resource_clashes
                .iter()
                .map(|c| ClashJson {
                    uri: c.uri.clone(),
                    kind: c.kind.clone(),
                    connectors: c.connectors.clone(),
                })
                .collect(),
        }
    }
}

// === table ===

fn status_cell(c: &ConnectorStatus) -> String {
    let retrying = matches!(c.status.as_str(), "crash_loop" | "restarting");
    let mut cell = match local_time(c.next_retry_unix_ms) {
        Some(at) if retrying => format!("{} (next retry {at})", c.status),
        _ => match local_time(c.token_expires_unix_ms) {
            Some(at) if c.oauth && c.status == "ready" => match non_empty(&c.oauth_account) {
                Some(account) => format!("{} (as {account}, token expires {at})", c.status),
                None => format!("{} (token expires {at})", c.status),
            },
            _ => c.status.clone(),
        },
    };
    if c.changes_await_review {
        cell.push_str(" (changes await review)");
    }
    if !c.circuit.is_empty() && c.circuit != "closed" {
        cell.push_str(&format!(" (circuit {})", c.circuit.replace('_', "-")));
    }
    cell
}

/// ` (unpinned)` for a connector imported with `--no-pin` (SPEC §18).
fn unpinned_mark(state_dir: &Path, c: &ConnectorStatus) -> &'static str {
    if crate::import::unpinned(state_dir, &c.key, &c.sha256) {
        " (unpinned)"
    } else {
        ""
    }
}

/// A latency for the table: `850µs`, `12.3ms`, `4.20s`; `-` without calls.
fn latency_cell(calls: u64, us: u64) -> String {
    match us {
        _ if calls == 0 => "-".to_owned(),
        0..1_000 => format!("{us}µs"),
        1_000..1_000_000 => format!("{:.1}ms", us as f64 / 1000.0),
        _ => format!("{:.2}s", us as f64 / 1_000_000.0),
    }
}

/// Calls and errors: `100`, `100 (16 err)`.
fn calls_cell(c: &ConnectorStatus) -> String {
    let f = c.call_figures.clone().unwrap_or_default();
    match f.errors {
        0 => f.calls.to_string(),
        e => format!("{} ({e} err)", f.calls),
    }
}

/// The last `width` seconds of calls per second as block characters, scaled to their peak.
pub(super) fn sparkline(per_second: &[u32], width: usize) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let tail = &per_second[per_second.len().saturating_sub(width)..];
    let peak = tail.iter().copied().max().unwrap_or(0);
    tail.iter()
        .map(|&v| match v {
            0 => ' ',
            _ => BARS[((u64::from(v) * 8).div_ceil(u64::from(peak)) as usize).clamp(1, 8) - 1],
        })
        .collect()
}

#[cfg(test)]
fn render_table(reply: &StatusReply, state_dir: &Path) -> String {
    render_table_with(reply, state_dir, false)
}

fn render_table_with(reply: &StatusReply, state_dir: &Path, spark: bool) -> String {
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
    if let Some(dropped) = TelemetryDroppedJson::of(reply) {
        out.push_str(&dropped.line());
    }
    if reply.confirmations_waiting > 0 {
        out.push_str(&format!(
            "confirmations: {} call(s) wait for you (see `tutti confirm list`)\n",
            reply.confirmations_waiting
        ));
    }
    out.push('\n');
    if reply.connectors.is_empty() {
        out.push_str("no connectors installed (add one with `tutti connector install DIR`)\n");
        return out;
    }
    let rows: Vec<Vec<String>> = sorted(reply)
        .into_iter()
        .map(|c| table_row(c, state_dir))
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
            "CALLS 5m",
            "P50",
            "P99",
            "LAST ERROR",
        ],
        &rows,
    ));
    if spark {
        out.push_str("\ncalls/s, last 60 s:\n");
        for c in sorted(reply) {
            let per_second = c
                .call_figures
                .as_ref()
                .map_or(&[][..], |f| &f.calls_per_second[..]);
            out.push_str(&format!(
                "  {:<24} |{}|\n",
                c.key,
                sparkline(per_second, 60)
            ));
        }
    }
    out.push_str(&render_clashes(reply));
    out
}

/// One connector's row of the status table, in the order of the header.
fn table_row(c: &ConnectorStatus, state_dir: &Path) -> Vec<String> {
    vec![
        c.key.clone(),
        c.version.clone(),
        if c.generation == 0 {
            "-".to_owned()
        } else {
            c.generation.to_string()
        },
        status_cell(c) + unpinned_mark(state_dir, c),
        c.tool_count.to_string(),
        c.restarts.to_string(),
        format!("{}/{}/{}", c.risk_low, c.risk_medium, c.risk_high),
        calls_cell(c),
        latency_cell(
            c.call_figures.as_ref().map_or(0, |f| f.calls),
            c.call_figures.as_ref().map_or(0, |f| f.p50_us),
        ),
        latency_cell(
            c.call_figures.as_ref().map_or(0, |f| f.calls),
            c.call_figures.as_ref().map_or(0, |f| f.p99_us),
        ),
        if c.last_error.is_empty() {
            "-".to_owned()
        } else {
            // The last column runs on: the end of an error is often its fix.
            one_line(&c.last_error, 600)
        },
    ]
}

/// One line per resource URI (or template) that several connectors claim.
fn render_clashes(reply: &StatusReply) -> String {
    reply
        .resource_clashes
        .iter()
        .map(|c| {
            format!(
                "resource clash: {} {} is claimed by {}; no connector serves it\n",
                c.kind,
                one_line(&c.uri, 200),
                c.connectors.join(", ")
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};
    use tutti_proto::kernel::CallFigures;

    fn reply() -> StatusReply {
        StatusReply {
            frontend_url: "http://127.0.0.1:4000/mcp/connector".into(),
            route_revision: 7,
            registry_revision: 9,
            state_dir: "/s".into(),
            kernel_pid: 42,
            audit_dropped: 0,
            telemetry_dropped: 0,
            frontend_telemetry_dropped: 0,
            confirmations_waiting: 0,
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
                    ..Default::default()
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
                    changes_await_review: true,
                    review_summary: "changed github_list".into(),
                    circuit: "open".into(),
                    circuit_note: "github: circuit open after 5 failures; retry in 30 s".into(),
                    prompt_count: 2,
                    resource_count: 1,
                    resource_template_count: 0,
                    call_figures: Some(CallFigures {
                        window_seconds: 300,
                        calls: 100,
                        errors: 16,
                        errors_by_outcome: [
                            ("timeout".to_owned(), 6),
                            ("invalid_arguments".to_owned(), 10),
                        ]
                        .into_iter()
                        .collect(),
                        p50_us: 12_345,
                        p99_us: 2_500_000,
                        calls_per_second: vec![0, 2, 4, 8],
                    }),
                    ..Default::default()
                },
            ],
            resource_clashes: vec![],
        }
    }

    fn clash() -> tutti_proto::kernel::ResourceClash {
        tutti_proto::kernel::ResourceClash {
            uri: "file:///shared".into(),
            connectors: vec!["a".into(), "b".into()],
            kind: "resource".into(),
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
                "registryRevision": 9,
                "auditDropped": 0,
                "confirmationsWaiting": 0,
                "connectors": [
                    {"key": "github", "name": "GitHub", "version": "1.4.0",
                     "generation": (3u64 << 32) | 1, "status": "ready", "toolCount": 4,
                     "restarts": 0, "reinitializations": 2, "lastError": null, "nextRetryAt": null,
                     "nonJsonStdoutLines": 0,
                     "risk": {"low": 2, "medium": 1, "high": 1, "highTools": ["github_delete_repo"]},
                     "changesAwaitReview": true, "review": "changed github_list",
                     "circuit": "open",
                     "circuitNote": "github: circuit open after 5 failures; retry in 30 s",
                     "promptCount": 2, "resourceCount": 1, "resourceTemplateCount": 0,

                     "calls": {"windowSeconds": 300, "total": 100, "errors": 16,
                               "errorsByOutcome": {"invalid_arguments": 10, "timeout": 6},
                               "p50Ms": 12.345, "p99Ms": 2500.0, "perSecond": [0, 2, 4, 8]}},
                    {"key": "zeta", "name": "Zeta", "version": "0.1.0", "generation": null,
                     "status": "crash_loop", "toolCount": 0, "restarts": 5, "reinitializations": 0,
                     "lastError": "upstream exited\nwith status 1",
                     "nextRetryAt": "2025-11-29T14:00:00.123Z", "nonJsonStdoutLines": 3,
                     "risk": {"low": 0, "medium": 0, "high": 0, "highTools": []},
                     "changesAwaitReview": false, "review": null, "circuit": "closed",
                     "circuitNote": null,
                     "promptCount": 0, "resourceCount": 0, "resourceTemplateCount": 0,
                     "calls": {"windowSeconds": 0, "total": 0, "errors": 0, "errorsByOutcome": {},
                               "p50Ms": null, "p99Ms": null, "perSecond": []}}
                ],
                "resourceClashes": []
            })
        );
    }

    #[test]
    fn resource_clashes_are_shown_in_both_forms() {
        let mut r = reply();
        r.resource_clashes.push(clash());
        let text = json_line(&StatusJson::new(&r, Path::new("/s"))).unwrap_or_default();
        let got: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        assert_eq!(
            got["resourceClashes"],
            json!([{"uri": "file:///shared", "kind": "resource", "connectors": ["a", "b"]}])
        );
        let table = render_table(&r, Path::new("/s"));
        assert!(
            table.contains(
                "resource clash: resource file:///shared is claimed by a, b; no connector serves it"
            ),
            "{table}"
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
            "CALLS 5m",
            "P50",
            "P99",
            "LAST ERROR",
        ] {
            assert!(lines[5].contains(col), "{col}: {text}");
        }
        assert!(lines[6].starts_with("github"), "{text}");
        assert!(lines[6].contains("2/1/1"), "{text}");
        assert!(
            lines[6].contains("ready (changes await review) (circuit open)"),
            "{text}"
        );
        assert!(lines[6].contains("100 (16 err)"), "{text}");
        assert!(lines[6].contains("12.3ms"), "{text}");
        assert!(lines[6].contains("2.50s"), "{text}");
        assert!(
            !text.contains("calls/s"),
            "no sparkline unless asked: {text}"
        );
        assert!(lines[7].starts_with("zeta"), "{text}");
        assert!(lines[7].contains("crash_loop (next retry "), "{text}");
        assert!(lines[7].contains("upstream exited with status 1"), "{text}");
        assert_eq!(lines.len(), 8, "{text}");
    }

    #[test]
    fn table_with_sparkline_has_one_per_connector() {
        let text = render_table_with(&reply(), Path::new("/s"), true);
        let spark: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("calls/s"))
            .skip(1)
            .collect();
        assert_eq!(spark.len(), 2, "{text}");
        assert!(spark[0].trim_start().starts_with("github"), "{text}");
        assert!(spark[0].ends_with("| ▂▄█|"), "{text}");
        assert!(spark[1].ends_with("||"), "{text}");
    }

    #[test]
    fn sparkline_scales_to_the_peak_and_keeps_the_last_seconds() {
        assert_eq!(sparkline(&[0, 1, 8, 4], 60), " ▁█▄");
        assert_eq!(sparkline(&[9, 9, 0, 3, 3], 2), "██");
        assert_eq!(sparkline(&[], 60), "");
        assert_eq!(latency_cell(0, 5), "-");
        assert_eq!(latency_cell(1, 850), "850µs");
    }

    #[test]
    fn table_without_connectors_says_so() {
        let mut r = reply();
        r.connectors.clear();
        let text = render_table(&r, Path::new("/s"));
        assert!(text.contains("no connectors installed"), "{text}");
    }
}
